#!/usr/bin/env bash
# Cost of profiling a whole host (issue 32, beyond): `whyslow serve --all` (every process, on-CPU at
# 19 Hz, window 10 s) on this machine with three busy programs (cpu_split, one core's worth each) and a
# new short process every CHURN_EVERY seconds (cpu_split 0.3) for DURATION seconds.
# Prints the agent's CPU (% of one core) over the run and in its steady state (after the first window,
# which symbolizes every binary running), its resident memory (max and last), and how many of the churn
# processes appear in the profile, with the churn's samples against 19 Hz x its CPU time.
# Targets of the issue: agent <= 1% of one core, <= 100 MB resident; processes that appear are in the
# profile. Figures, not pass/fail. Other programs running on the machine are profiled too (that is the
# point); the load average is printed.
source "$(dirname "$0")/lib.sh"
DURATION=${DURATION:-60}
CHURN_EVERY=${CHURN_EVERY:-0.2}
needs_root "perf events of every process"
needs_build
BUSY="$OUT/wsab-$$"
CHURN="$OUT/wsac-$$"
AGENT="$OUT/whyslow"
cp "$W/cpu_split" "$BUSY"
cp "$W/cpu_split" "$CHURN"
cp "$WHYSLOW" "$AGENT"
AGENT_PID="" BUSY_PIDS=() CHURN_PID=""
cleanup() {
  set +e
  touch "$OUT/churn.stop"
  [ -z "$CHURN_PID" ] || wait "$CHURN_PID" 2>/dev/null
  for p in "${BUSY_PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  if [ -n "$AGENT_PID" ]; then kill -TERM "$AGENT_PID" 2>/dev/null; wait "$AGENT_PID" 2>/dev/null; fi
  rm -rf "$OUT"
}
trap cleanup EXIT INT TERM

echo "serve --all: every process at 19 Hz on $(nproc) CPUs; 3 busy programs + a new process every ${CHURN_EVERY} s for ${DURATION} s"
echo "  agent: $WHYSLOW"
echo "  load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(ls /proc | grep -c '^[0-9]') processes"
for _ in 1 2 3; do
  "$BUSY" $((DURATION + 40)) >/dev/null &
  BUSY_PIDS+=($!)
done
"$AGENT" serve --all --listen 127.0.0.1:0 --data-dir "$OUT/d" 2>"$OUT/agent.log" &
AGENT_PID=$!
ADDR=""
for _ in $(seq 100); do
  ADDR=$(sed -n 's|.*listening on http://\([^ ]*\) .*|\1|p' "$OUT/agent.log")
  [ -n "$ADDR" ] && break
  sleep 0.1
done
[ -n "$ADDR" ] || { echo "serve_all: the agent did not start: $(cat "$OUT/agent.log")" >&2; exit 1; }
api() { curl -sf --max-time 30 "http://$ADDR$1"; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$AGENT_PID/status"; }
T0=$(now)
C0=$(cpu_ticks "$AGENT_PID")
# The churn: one process every CHURN_EVERY s, each logged; `times` gives the CPU its children used.
(
  trap - EXIT INT TERM
  while [ ! -e "$OUT/churn.stop" ]; do
    "$CHURN" 0.3 >/dev/null &
    echo "$!" >>"$OUT/churn.pids"
    sleep "$CHURN_EVERY"
  done
  wait
  times >"$OUT/churn.times" # (not in a pipe: a pipe's subshell has no children)
) &
CHURN_PID=$!
: >"$OUT/rss.txt"
T_STEADY="" C_STEADY=""
for s in $(seq "$DURATION"); do
  sleep 1
  echo "$s $(rss_kb)" >>"$OUT/rss.txt"
  # Steady state: from the second window on (the first symbolizes every binary of the host).
  if [ "$s" -eq 20 ]; then T_STEADY=$(now); C_STEADY=$(cpu_ticks "$AGENT_PID"); fi
done
touch "$OUT/churn.stop"
wait "$CHURN_PID"
CHURN_PID=""
T1=$(now)
C1=$(cpu_ticks "$AGENT_PID")
# Every window of the run is stored one window (10 s) after it ends; then the API answers for it.
sleep 12
from=$(python3 -c "print(int($T0))")
until=$(python3 -c "print(int($T1) + 1)")
api "/api/v1/profile?target=1&type=cpu&from=$from&until=$until" >"$OUT/profile.json"
api /metrics >"$OUT/metrics.txt"
python3 - "$OUT" "$T0" "$T1" "$C0" "$C1" "$T_STEADY" "$C_STEADY" "$TICK" "$(basename "$CHURN")" "$(basename "$BUSY")" <<'PY'
import json, sys
out, t0, t1, c0, c1, ts, cs, tck, churn, busy = sys.argv[1:]
t0, t1, c0, c1, ts, cs, tck = float(t0), float(t1), float(c0), float(c1), float(ts), float(cs), float(tck)
cpu = 100 * (c1 - c0) / tck / (t1 - t0)
steady = 100 * (c1 - cs) / tck / (t1 - ts)
print(f"  agent CPU: {cpu:.2f}% of one core over {t1 - t0:.0f} s (ratio to the 1% target: {cpu / 1.0:.2f});"
      f" steady state (from 20 s): {steady:.2f}% (ratio {steady:.2f})")
rss = [int(l.split()[1]) / 1024 for l in open(f"{out}/rss.txt") if len(l.split()) == 2]
print(f"  agent RSS: max {max(rss):.1f} MB (ratio to the 100 MB target: {max(rss) / 100:.2f}), first {rss[0]:.1f},"
      f" last {rss[-1]:.1f} MB")
p = json.load(open(f"{out}/profile.json"))
threads = p.get("threads", [])
pids = [int(l) for l in open(f"{out}/churn.pids")]
seen = {t["pid"] for t in threads if t.get("samples", 0) > 0}
churn_samples = sum(t["samples"] for t in threads if t["name"] == churn)
busy_samples = sum(t["samples"] for t in threads if t["name"] == busy)
u, s = open(f"{out}/churn.times").read().splitlines()[-1].split()[:2]
secs = lambda x: float(x.split("m")[0]) * 60 + float(x.split("m")[1].rstrip("s"))
churn_cpu = secs(u) + secs(s)
print(f"  churn: {len(pids)} processes started; {len(seen & set(pids))} in the profile"
      f" ({100 * len(seen & set(pids)) / max(len(pids), 1):.1f}%); their samples {churn_samples} vs"
      f" 19 Hz x {churn_cpu:.1f} CPU s = {19 * churn_cpu:.0f} ({100 * churn_samples / max(19 * churn_cpu, 1):.1f}%)")
total = p.get("total_samples", 0)
names = {}
for t in threads:
    names[t["name"]] = names.get(t["name"], 0) + t["samples"]
top = sorted(names.items(), key=lambda kv: -kv[1])[:6]
print(f"  profile: {total} samples of {len({t['pid'] for t in threads})} processes; busy programs {busy_samples};"
      f" top: " + ", ".join(f"{n} {v}" for n, v in top))
m = {l.split()[0]: l.split()[1] for l in open(f"{out}/metrics.txt") if l.strip() and not l.startswith("#")}
lost = m.get('whyslow_lost_samples_total{sources="cpu"}', "0")
disk = float(m.get("whyslow_store_disk_bytes", 0)) / 2**20
print(f"  store: {m.get('whyslow_store_windows')} windows, {disk:.1f} MB on disk; lost samples {lost}")
PY
echo "  load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
