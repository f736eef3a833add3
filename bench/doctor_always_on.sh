#!/usr/bin/env bash
# Cost of the always-on doctor (issue 36): the agent's CPU seconds and resident memory over the same
# run with the doctor on and off (--no-doctor). One target, 4 busy threads (the threads workload) at
# 99 Hz, cut in 1 s windows (the worst case: the default is 10 s), each window diagnosed by the doctor's
# rules and fed to the regression detector. Prints both runs, the doctor's own CPU seconds (its thread,
# whyslow_doctor_cpu_seconds_total) and the ratios.
# ALL=1: the whole host instead (`serve --all`: every process at 19 Hz in 10 s windows, one target).
# SECS=30 for a shorter run; WHYSLOW=target/debug/whyslow to measure the (optimized) dev build.
source "$(dirname "$0")/lib.sh"
SECS=${SECS:-60}
make -s -C "$ROOT/tests/workloads" >/dev/null
metric() { python3 - "$1" "$2" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics").read().decode()
print(next((l.split(" ")[1] for l in text.splitlines() if l.startswith(sys.argv[2] + " ")), "0"))
PY
}
run() {  # run DIR [ARGS]: prints "cpu_seconds rss_bytes doctor_cpu_seconds windows"
  local dir=$1; shift
  local all=()
  [ -n "${ALL:-}" ] && all=(--all)
  "$WHYSLOW" serve --listen 127.0.0.1:0 --data-dir "$dir" "${all[@]}" "$@" 2>"$dir.log" >/dev/null &
  local agent=$!
  for _ in $(seq 100); do grep -q "listening on" "$dir.log" 2>/dev/null && break; sleep 0.1; done
  local addr
  addr=$(sed -n 's|.*listening on http://\([^ ]*\).*|\1|p' "$dir.log")
  curl -s -o /dev/null -H 'Content-Type: application/json' -d \
    '{"match":{"cmdline":"threads 3600"},"sources":["cpu"],"frequency":99,"window_s":1}' "http://$addr/api/v1/targets"
  "$W/threads" 3600 >/dev/null &
  local work=$!
  sleep "$SECS"
  echo "$(metric "$addr" whyslow_process_cpu_seconds_total) $(metric "$addr" whyslow_process_resident_memory_bytes)" \
    "$(metric "$addr" whyslow_doctor_cpu_seconds_total) $(metric "$addr" whyslow_doctor_windows_total)"
  kill "$work"; wait "$work" 2>/dev/null || true
  kill "$agent"; wait "$agent" 2>/dev/null || true
}
mkdir -p "$OUT/on" "$OUT/off"
on=$(run "$OUT/on")
off=$(run "$OUT/off" --no-doctor)
python3 - "$SECS" $on $off <<'PY'
import sys
secs = float(sys.argv[1])
cpu_on, rss_on, doc_cpu, windows, cpu_off, rss_off = map(float, sys.argv[2:8])
import os
what = "the whole host (--all, 19 Hz, 10 s windows)" if os.environ.get("ALL") else \
    "a 4-thread busy process at 99 Hz in 1 s windows"
print(f"always-on doctor, {secs:.0f} s of {what}:")
print(f"  doctor off: agent {cpu_off:.2f} CPU s ({100 * cpu_off / secs:.2f}% of a core), {rss_off / 2**20:.1f} MiB resident")
print(f"  doctor on:  agent {cpu_on:.2f} CPU s ({100 * cpu_on / secs:.2f}% of a core), {rss_on / 2**20:.1f} MiB resident")
print(f"  the doctor's thread: {doc_cpu:.2f} CPU s for {windows:.0f} windows ({1000 * doc_cpu / max(windows, 1):.1f} ms per window)")
print(f"  ratio on/off: CPU {cpu_on / cpu_off:.3f}, memory {rss_on / rss_off:.3f}")
PY
