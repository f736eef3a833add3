#!/usr/bin/env bash
# Unwinding completeness on the -O2 -fomit-frame-pointer workload: share of samples whose stack reaches
# main, whyslow vs perf -g (frame pointers) vs perf --call-graph dwarf.
source "$(dirname "$0")/lib.sh"
BIN="$W/cpu_split"
"$WHYSLOW" record -q -o "$OUT/w.data" -- "$BIN" 3 >/dev/null 2>&1
"$WHYSLOW" export "$OUT/w.data" --format folded -o "$OUT/w.folded" 2>/dev/null
perf record -q -F 999 -g -o "$OUT/fp.data" -- "$BIN" 3 >/dev/null 2>&1
perf record -q -F 999 --call-graph dwarf -o "$OUT/dw.data" -- "$BIN" 3 >/dev/null 2>&1
share_folded() { python3 - "$1" <<'PY'
import sys
tot = hit = 0
for line in open(sys.argv[1]):
    stack, n = line.rsplit(" ", 1); n = int(n); tot += n
    if "main" in stack.split(";"): hit += n
print(f"{100*hit/max(tot,1):.1f}% of {tot}")
PY
}
share_perf() { perf script -i "$1" -F ip,sym 2>/dev/null | python3 -c '
import sys
tot = hit = 0; cur = []
def flush():
    global tot, hit
    if cur:
        tot += 1; hit += any(s == "main" for s in cur)
for line in sys.stdin:
    line = line.strip()
    if not line: flush(); cur = []; continue
    parts = line.split()
    if len(parts) >= 2: cur.append(parts[1].split("+")[0])
flush()
print(f"{100*hit/max(tot,1):.1f}% of {tot}")'; }
echo "samples whose stack reaches main (cpu_split, -O2 -fomit-frame-pointer)"
printf "  %-32s %s\n" "whyslow record" "$(share_folded "$OUT/w.folded")"
printf "  %-32s %s\n" "perf record -g" "$(share_perf "$OUT/fp.data")"
printf "  %-32s %s\n" "perf record --call-graph dwarf" "$(share_perf "$OUT/dw.data")"
