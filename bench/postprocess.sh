#!/usr/bin/env bash
# Post-processing: time from the end of a ~60 s, 999 Hz recording of a 4-thread workload to a report and
# an SVG flame graph. whyslow: symbolize + save (printed by `record -v`) + `report` + `flamegraph`.
# perf: `perf script | inferno-collapse-perf | inferno-flamegraph` (+ `perf report`) on the same workload
# recorded with --call-graph dwarf (the only perf mode with complete stacks here) and with -g.
# Target: whyslow >= 5x faster.
source "$(dirname "$0")/lib.sh"
SECS=${SECS:-30}  # CPU seconds per thread: 4 threads on 2 cores record ~60 s of wall time
if ! command -v inferno-flamegraph >/dev/null; then
  cargo install --quiet --locked inferno --version 0.12.8 --root "$ROOT/bench/.tools"
fi
BIN="$W/threads"
"$WHYSLOW" record -v -o "$OUT/w.data" -- "$BIN" "$SECS" >/dev/null 2>"$OUT/w.err"
# `-v` prints the time per phase in ms: symbolize and save are the post-processing.
post=$(awk '$1 == "symbolize" || $1 == "save" { s += $2 } END { printf "%.3f", s / 1000 }' "$OUT/w.err")
rep=$(timeit "$WHYSLOW" report "$OUT/w.data")
svg=$(timeit "$WHYSLOW" flamegraph "$OUT/w.data" -o "$OUT/w.svg")
ours=$(python3 -c "print(f'{$post+$rep+$svg:.3f}')")
echo "post-processing of a 999 Hz recording of 4 threads x ${SECS} CPU-seconds"
printf "  %-52s %8ss (symbolize+save %ss, report %ss, svg %ss)\n" "whyslow" "$ours" "$post" "$rep" "$svg"
for mode in "--call-graph dwarf" "-g"; do
  perf record -q -F 999 $mode -o "$OUT/p.data" -- "$BIN" "$SECS" >/dev/null 2>&1
  t0=$(now)
  perf script -i "$OUT/p.data" 2>/dev/null | inferno-collapse-perf 2>/dev/null | inferno-flamegraph >"$OUT/p.svg" 2>/dev/null
  perf report -i "$OUT/p.data" --stdio >/dev/null 2>&1
  t1=$(now)
  theirs=$(python3 -c "print(f'{$t1-$t0:.3f}')")
  printf "  %-52s %8ss  whyslow is %sx faster\n" "perf record $mode: script|collapse|flamegraph + report" "$theirs" "$(ratio "$theirs" "$ours")"
done
