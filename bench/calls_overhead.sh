#!/usr/bin/env bash
# Call counting overhead on an allocation-heavy loop (each iteration: malloc, memcpy through its IFUNC,
# free), counting the same three functions with `whyslow calls` and `ltrace -c`, interleaved runs, medians.
# ltrace is too slow for a long run, so each tool runs as many iterations as it can finish in seconds and
# the slowdown of the loop is computed from the measured cost per iteration:
#   slowdown = (plain ns/iteration + tool ns/iteration) / plain ns/iteration.
# Target: whyslow's slowdown <= 1/100 of ltrace's. Also prints whyslow's cost per probed call.
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
N_PLAIN=${N_PLAIN:-5000000}
N_WHYSLOW=${N_WHYSLOW:-300000}
N_LTRACE=${N_LTRACE:-20000}
make -s -C "$ROOT/tests/workloads" >/dev/null
BIN="$W/calls"
declare -A t
for i in $(seq "$RUNS"); do
  t[plain]+=" $(timeit "$BIN" "$N_PLAIN" 64)"
  t[plain_w]+=" $(timeit "$BIN" "$N_WHYSLOW" 64)"
  t[plain_l]+=" $(timeit "$BIN" "$N_LTRACE" 64)"
  t[whyslow]+=" $(timeit "$WHYSLOW" calls malloc free memcpy -- "$BIN" "$N_WHYSLOW" 64)"
  t[setup]+=" $(timeit "$WHYSLOW" calls malloc free memcpy -- "$BIN" 0 64)"
  t[ltrace]+=" $(timeit ltrace -c -e malloc+free+memcpy -o "$OUT/ltrace.txt" "$BIN" "$N_LTRACE" 64)"
done
m() { echo "${t[$1]}" | median; }
python3 - "$(m plain)" "$(m plain_w)" "$(m plain_l)" "$(m whyslow)" "$(m setup)" "$(m ltrace)" \
  "$N_PLAIN" "$N_WHYSLOW" "$N_LTRACE" "$RUNS" <<'PY'
import sys
plain, plain_w, plain_l, why, setup, lt = map(float, sys.argv[1:7])
n_plain, n_why, n_lt, runs = map(int, sys.argv[7:11])
base = plain / n_plain * 1e9
why_it = (why - setup - plain_w) / n_why * 1e9
lt_it = (lt - plain_l) / n_lt * 1e9
sw, sl = (base + why_it) / base, (base + lt_it) / base
print(f"call counting overhead ({runs} interleaved runs, medians; loop: malloc + memcpy + free, 3 probed calls/iteration)")
print(f"  plain                      {base:10.1f} ns/iteration   ({n_plain} iterations in {plain:.3f} s)")
print(f"  whyslow calls              {why_it:10.1f} ns/iteration added  -> slowdown {sw:8.1f}x   ({n_why} iterations, {setup:.3f} s fixed start/stop cost excluded)")
print(f"  ltrace -c                  {lt_it:10.1f} ns/iteration added  -> slowdown {sl:8.1f}x   ({n_lt} iterations)")
print(f"  whyslow slowdown / ltrace slowdown: 1/{sl / sw:.0f}   (target: 1/100 or better)")
print(f"  whyslow cost per probed call: {why_it / 3:.0f} ns; ltrace: {lt_it / 3:.0f} ns")
PY
