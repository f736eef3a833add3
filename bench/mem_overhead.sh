#!/usr/bin/env bash
# Cost of `record --mem` (in use by stack, exact) against heaptrack, which answers the same questions
# (leaks, peak, in use over time), on allocation-heavy programs: wall-time ratios to a plain run,
# interleaved runs, medians. Also `--mem-sample` (512 KiB mean interval) and `record --alloc` (uprobes,
# counts only). The issue's goal: at most half of heaptrack's slowdown.
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
N=${N:-1600000}
command -v heaptrack >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq heaptrack >/dev/null
make -s -C "$ROOT/tests/workloads" >/dev/null
declare -A t
progs=("allocloop:$W/allocloop $N" "memwork:$W/memwork leak $((N / 4))")
for i in $(seq "$RUNS"); do
  for p in "${progs[@]}"; do
    k=${p%%:*}; cmd=${p#*:}
    # shellcheck disable=SC2086
    t[${k}_plain]+=" $(timeit $cmd)"
    # shellcheck disable=SC2086
    t[${k}_mem]+=" $(timeit "$WHYSLOW" record -q --mem -o "$OUT/m.data" -- $cmd)"
    # shellcheck disable=SC2086
    t[${k}_sample]+=" $(timeit "$WHYSLOW" record -q --mem --mem-sample 524288 -o "$OUT/s.data" -- $cmd)"
    # shellcheck disable=SC2086
    t[${k}_heaptrack]+=" $(timeit heaptrack -o "$OUT/h" $cmd)"
    rm -f "$OUT"/h*
  done
done
m() { echo "${t[$1]}" | median; }
row() { printf "  %-44s %8ss  %sx of plain\n" "$1" "$2" "$(ratio "$2" "$3")"; }
echo "memory in use by stack: cost ($RUNS interleaved runs, medians)"
for p in "${progs[@]}"; do
  k=${p%%:*}; base=$(m "${k}_plain")
  echo "  ${p#*:} ($(basename "${p%% *}")):"
  row "plain" "$base" "$base"
  row "whyslow record --mem (exact)" "$(m "${k}_mem")" "$base"
  row "whyslow record --mem --mem-sample 524288" "$(m "${k}_sample")" "$base"
  row "heaptrack" "$(m "${k}_heaptrack")" "$base"
  python3 -c "
w, h, b = $(m "${k}_mem"), $(m "${k}_heaptrack"), $base
print(f'    slowdown: whyslow {w/b:.2f}x, heaptrack {h/b:.2f}x: whyslow is {(w/b)/(h/b):.2f} of heaptrack\'s (goal <= 0.50)')"
done
