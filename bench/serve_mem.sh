#!/usr/bin/env bash
# What the agent's `mem` source costs (issue 46 #5): one `whyslow serve`, the same workload followed twice
# for RUN_S seconds at 99 Hz with 10 s windows, first with sources ["cpu"], then ["cpu","mem"]. The workload
# is `memwork serve`: 20 ticks a second of 2 ms of CPU work (timed by its thread's CPU clock, so the work is
# fixed), RATE bytes a second leaked through cache_put and 3 entries of a 4 MiB cache replaced: 4
# allocations and 3 frees a tick, 140 allocator calls a second. Printed: the workload's CPU time per second (the probes' traps
# are charged to it) and the agent's CPU (% of one core) in each run, and their ratios.
source "$(dirname "$0")/lib.sh"
RUN_S=${RUN_S:-30}
RATE=${RATE:-1048576}
needs_root "the agent attaches eBPF programs and uprobes"
needs_build

AGENT_PID=""
cleanup() { [ -z "$AGENT_PID" ] || { kill -TERM "$AGENT_PID" 2>/dev/null; wait "$AGENT_PID" 2>/dev/null; }; rm -rf "$OUT"; }
trap cleanup EXIT

"$WHYSLOW" serve --listen 127.0.0.1:0 --data-dir "$OUT/data" 2>"$OUT/agent.log" &
AGENT_PID=$!
for _ in $(seq 100); do grep -q "listening on" "$OUT/agent.log" && break; sleep 0.1; done
ADDR=$(sed -n 's/.*listening on http:\/\/\([^ ]*\).*/\1/p' "$OUT/agent.log" | head -1)
[ -n "$ADDR" ] || { echo "serve_mem: the agent did not start: $(cat "$OUT/agent.log")" >&2; exit 1; }

# run SOURCES: follows a fresh workload with SOURCES; prints "workload_ticks agent_ticks seconds".
run() {
  local fifo="$OUT/go.$1" pid id a0 w0 t0 t1 a1 w1
  mkfifo "$fifo"
  "$W/memwork" serve $((RUN_S + 5)) "$RATE" <"$fifo" >"$OUT/out.$1" &
  pid=$!
  exec 3>"$fifo"
  for _ in $(seq 50); do [ -s "$OUT/out.$1" ] && break; sleep 0.1; done
  id=$(curl -s -XPOST -H 'Content-Type: application/json' "http://$ADDR/api/v1/targets" \
    -d "{\"match\":{\"pids\":[$pid]},\"sources\":$2,\"window_s\":10}" | sed -n 's/.*"id": *\([0-9]*\).*/\1/p')
  # Followed (its session holds it) before the work starts.
  for _ in $(seq 100); do
    curl -s "http://$ADDR/metrics" | grep -q '^whyslow_processes_held [1-9]' && break
    sleep 0.1
  done
  echo go >&3
  w0=$(cpu_ticks "$pid"); a0=$(cpu_ticks "$AGENT_PID"); t0=$(now)
  sleep "$RUN_S"
  w1=$(cpu_ticks "$pid"); a1=$(cpu_ticks "$AGENT_PID"); t1=$(now)
  curl -s -XDELETE "http://$ADDR/api/v1/targets/$id" >/dev/null
  exec 3>&-
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  python3 -c "print($w1 - $w0, $a1 - $a0, $t1 - $t0)"
}

read -r w_off a_off s_off < <(run off '["cpu"]')
read -r w_on a_on s_on < <(run on '["cpu","mem"]')
python3 - "$w_off" "$a_off" "$s_off" "$w_on" "$a_on" "$s_on" "$TICK" "$RATE" <<'PY'
import sys
w_off, a_off, s_off, w_on, a_on, s_on, tick, rate = map(float, sys.argv[1:])
wl = lambda w, s: 1e3 * w / tick / s
ag = lambda a, s: 100 * a / tick / s
print(f"memwork serve ({rate / 1048576:.1f} MiB/s leaked, 140 allocator calls/s), {s_on:.0f} s each, 10 s windows")
print(f"  workload CPU: {wl(w_off, s_off):.1f} ms/s with cpu, {wl(w_on, s_on):.1f} ms/s with cpu+mem "
      f"(x{wl(w_on, s_on) / max(wl(w_off, s_off), 1e-9):.3f})")
print(f"  agent CPU:    {ag(a_off, s_off):.2f}% of a core with cpu, {ag(a_on, s_on):.2f}% with cpu+mem "
      f"(+{ag(a_on, s_on) - ag(a_off, s_off):.2f} points)")
PY
