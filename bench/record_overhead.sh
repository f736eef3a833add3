#!/usr/bin/env bash
# Sampling overhead: wall time of a fixed-work CPU-bound program, plain vs `whyslow record -F 999` vs
# `perf record -g` vs `perf record --call-graph dwarf`, interleaved runs, medians. Target: whyslow <= 1.05x.
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
ROUNDS=${ROUNDS:-500}
BIN=$(build_fixed)
declare -A t
for i in $(seq "$RUNS"); do
  t[plain]+=" $(timeit "$BIN" "$ROUNDS")"
  t[whyslow]+=" $(timeit "$WHYSLOW" record -q -F 999 -o "$OUT/w.data" -- "$BIN" "$ROUNDS")"
  t[perf_fp]+=" $(timeit perf record -q -F 999 -g -o "$OUT/p.data" -- "$BIN" "$ROUNDS")"
  t[perf_dwarf]+=" $(timeit perf record -q -F 999 --call-graph dwarf -o "$OUT/d.data" -- "$BIN" "$ROUNDS")"
done
plain=$(echo "${t[plain]}" | median)
echo "record overhead ($RUNS interleaved runs, medians, fixed work $ROUNDS rounds)"
printf "  %-34s %8ss\n" "plain" "$plain"
for k in whyslow perf_fp perf_dwarf; do
  m=$(echo "${t[$k]}" | median)
  label=$k; [ $k = whyslow ] && label="whyslow record -F 999"; [ $k = perf_fp ] && label="perf record -g"
  [ $k = perf_dwarf ] && label="perf record --call-graph dwarf"
  printf "  %-34s %8ss  %sx of plain\n" "$label" "$m" "$(ratio "$m" "$plain")"
done
