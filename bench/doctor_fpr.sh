#!/usr/bin/env bash
# False-positive rate of the always-on doctor's regressions on real stable runs (issue 36): the agent
# records three unchanged workloads as three targets in 1 s windows at 999 Hz for SECS seconds
# (cpu_split's 60/30/10 split, 4 busy threads, hotswitch with its load cut from full to 40% halfway
# in each 10 s run, restarted between runs), and every regression it reports is a false one.
# Prints the windows stored and the regressions per target, and the rate per window (threads does
# SECS of CPU work per thread: on a busy machine it runs longer than SECS).
source "$(dirname "$0")/lib.sh"
SECS=${SECS:-300}
make -s -C "$ROOT/tests/workloads" >/dev/null
"$WHYSLOW" serve --listen 127.0.0.1:0 --data-dir "$OUT/data" 2>"$OUT/log" >/dev/null &
AGENT=$!
PIDS=($AGENT)
trap 'kill "${PIDS[@]}" 2>/dev/null; rm -rf "$OUT"' EXIT
for _ in $(seq 100); do grep -q "listening on" "$OUT/log" 2>/dev/null && break; sleep 0.1; done
ADDR=$(sed -n 's|.*listening on http://\([^ ]*\).*|\1|p' "$OUT/log")
for m in "cpu_split $SECS" "threads $SECS" "hotswitch 10 fpr"; do
  curl -s -o /dev/null -H 'Content-Type: application/json' -d \
    "{\"name\":\"${m%% *}\",\"match\":{\"cmdline\":\"$m\"},\"sources\":[\"cpu\"],\"frequency\":999,\"window_s\":1}" \
    "http://$ADDR/api/v1/targets"
done
"$W/cpu_split" "$SECS" >/dev/null & SPLIT=$!
"$W/threads" "$SECS" >/dev/null & THREADS=$!
PIDS+=($SPLIT $THREADS)
# hotswitch: 10 s runs one after the other (a restart of the same build), each cut to 40% load after 5 s.
end=$(( $(date +%s) + SECS ))
while [ "$(date +%s)" -lt "$end" ]; do
  "$W/hotswitch" 10 fpr >/dev/null & h=$!
  sleep 5; kill -USR2 $h 2>/dev/null || true
  wait $h || true
done
wait $SPLIT $THREADS || true
sleep 4
python3 - "$ADDR" "$SECS" <<'PY'
import json, sys, urllib.request
addr, secs = sys.argv[1], sys.argv[2]
get = lambda p: json.load(urllib.request.urlopen(f"http://{addr}{p}"))
total_w = total_r = 0
print(f"doctor false positives: three unchanged workloads, {secs} s in 1 s windows at 999 Hz")
for t in get("/api/v1/targets?windows=true"):
    w = t["windows"]["count"]
    r = len(get(f"/api/v1/regressions?target={t['id']}")["regressions"])
    total_w += w; total_r += r
    print(f"  {t['name']:10s} {w:5d} windows  {r} regressions")
print(f"  false-positive rate: {total_r} in {total_w} windows ({100 * total_r / max(total_w, 1):.2f}% per window)")
PY
