#!/usr/bin/env bash
# Importing a perf.data file: a ~60 s, 999 Hz `perf record --call-graph dwarf` (and -g) recording of a
# 4-thread workload, turned into a report and an SVG flame graph by whyslow (`report FILE --flamegraph
# SVG`: read, unwind the dwarf stack copies, symbolize, aggregate, print the report, render the SVG) vs the
# usual chain `perf script | inferno-collapse-perf | inferno-flamegraph` + `perf report --stdio` on the
# same file. Also shown: whyslow as two commands (`report FILE` then `flamegraph FILE`, two imports).
# Target: whyslow >= 5x faster. Also prints peak RSS of both (whyslow's import streams the file).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}   # runs of each chain per recording
SECS=${SECS:-30}  # CPU seconds per thread: 4 threads on 2 cores record ~60 s of wall time
if ! command -v inferno-flamegraph >/dev/null; then
  cargo install --quiet --locked inferno --version 0.12.8 --root "$ROOT/bench/.tools"
fi
make -s -C "$ROOT/tests/workloads" >/dev/null
BIN="$W/threads"
rss() { /usr/bin/time -f '%M' -o "$OUT/rss" "$@" >/dev/null 2>&1; echo $(( $(cat "$OUT/rss") / 1024 )); }
echo "perf.data import: 4 threads x ${SECS} CPU-seconds at 999 Hz"
for mode in "--call-graph dwarf" "-g"; do
  perf record -q -F 999 $mode -o "$OUT/p.data" -- "$BIN" "$SECS" >/dev/null 2>&1
  size=$(du -m "$OUT/p.data" | cut -f1)
  sync; cat "$OUT/p.data" >/dev/null  # both sides read the file from the page cache
  ours_runs="" two_runs="" theirs_runs=""
  for _ in $(seq "$RUNS"); do  # alternate the two chains; medians of RUNS runs each
    ours_runs+=" $(timeit "$WHYSLOW" report "$OUT/p.data" --flamegraph "$OUT/w.svg")"
    rep=$(timeit "$WHYSLOW" report "$OUT/p.data")
    svg=$(timeit "$WHYSLOW" flamegraph "$OUT/p.data" -o "$OUT/w.svg")
    two_runs+=" $(python3 -c "print(f'{$rep+$svg:.4f}')")"
    t0=$(now)
    perf script -i "$OUT/p.data" 2>/dev/null | inferno-collapse-perf 2>/dev/null | inferno-flamegraph >"$OUT/p.svg" 2>/dev/null
    perf report -i "$OUT/p.data" --stdio >/dev/null 2>&1
    t1=$(now)
    theirs_runs+=" $(python3 -c "print(f'{$t1-$t0:.4f}')")"
  done
  ours=$(echo $ours_runs | median); two=$(echo $two_runs | median); theirs=$(echo $theirs_runs | median)
  main=$("$WHYSLOW" report "$OUT/p.data" --format json | python3 -c "import json,sys; u=json.load(sys.stdin)[\"unwind\"]; print(round(100*u[\"complete\"]/max(1,u[\"complete\"]+u[\"partial\"]),1))")
  echo "  perf record $mode (${size} MB):"
  printf "    %-46s %8ss (median of%s), peak RSS %s MB; complete user stacks: %s%%\n" "whyslow report --flamegraph" "$ours" "$ours_runs" "$(rss "$WHYSLOW" report "$OUT/p.data")" "$main"
  printf "    %-46s %8ss (median of%s), peak RSS of perf script %s MB\n" "perf script|collapse|flamegraph + perf report" "$theirs" "$theirs_runs" "$(rss perf script -i "$OUT/p.data")"
  printf "    %-46s %8ss (median of%s)\n" "whyslow report; whyslow flamegraph" "$two" "$two_runs"
  echo "    whyslow is $(ratio "$theirs" "$ours")x faster ($(ratio "$theirs" "$two")x as two commands)"
done
