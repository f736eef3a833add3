#!/usr/bin/env bash
# Call counting overhead on an allocator loop (tests/workloads/allocloop.cpp: each iteration calls
# operator new, operator delete, malloc, memcpy through its IFUNC and free; new and delete call malloc and
# free inside libstdc++), counting `operator new*`, `operator delete*`, memcpy, malloc and free with
# `whyslow calls` and the same functions with `ltrace -c`. Interleaved runs, medians.
# ltrace is too slow for a long run, so each tool runs as many iterations as it can finish in seconds and
# the slowdown of the loop is computed from the measured cost per iteration:
#   slowdown = (plain ns/iteration + tool ns/iteration) / plain ns/iteration.
# Target: whyslow's slowdown <= 1/100 of ltrace's.
# Then the cost of one probed call of each function, with the probe where whyslow places it and with it
# forced to the function's entry (WHYSLOW_PROBE_AT_ENTRY=1): emulated instructions (push, jmp/jcc/call)
# against single-stepped ones. And `record --alloc` on the same loop, both ways.
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
N_PLAIN=${N_PLAIN:-5000000}
N_WHYSLOW=${N_WHYSLOW:-200000}
N_LTRACE=${N_LTRACE:-5000}
make -s -C "$ROOT/tests/workloads" >/dev/null
BIN="$W/allocloop"
PATTERNS=("operator new*" "operator delete*" memcpy malloc free)
LTRACE_E='_Znw*+_Zdl*+memcpy+malloc+free'
declare -A t
for i in $(seq "$RUNS"); do
  t[plain]+=" $(timeit "$BIN" "$N_PLAIN")"
  t[plain_w]+=" $(timeit "$BIN" "$N_WHYSLOW")"
  t[plain_l]+=" $(timeit "$BIN" "$N_LTRACE")"
  t[whyslow]+=" $(timeit "$WHYSLOW" calls "${PATTERNS[@]}" -- "$BIN" "$N_WHYSLOW")"
  t[entry]+=" $(WHYSLOW_PROBE_AT_ENTRY=1 timeit "$WHYSLOW" calls "${PATTERNS[@]}" -- "$BIN" "$N_WHYSLOW")"
  t[setup]+=" $(timeit "$WHYSLOW" calls "${PATTERNS[@]}" -- "$BIN" 0)"
  t[ltrace]+=" $(timeit ltrace -c -e "$LTRACE_E" -o "$OUT/ltrace.txt" "$BIN" "$N_LTRACE")"
  t[alloc]+=" $(timeit "$WHYSLOW" record -q --alloc -o "$OUT/a.data" -- "$BIN" "$N_WHYSLOW")"
  t[alloc_entry]+=" $(WHYSLOW_PROBE_AT_ENTRY=1 timeit "$WHYSLOW" record -q --alloc -o "$OUT/a.data" -- "$BIN" "$N_WHYSLOW")"
done
m() { echo "${t[$1]}" | median; }
"$WHYSLOW" calls --format json "${PATTERNS[@]}" -- "$BIN" "$N_WHYSLOW" 2>/dev/null >"$OUT/counts.json"
python3 - "$(m plain)" "$(m plain_w)" "$(m plain_l)" "$(m whyslow)" "$(m entry)" "$(m setup)" "$(m ltrace)" \
  "$(m alloc)" "$(m alloc_entry)" "$N_PLAIN" "$N_WHYSLOW" "$N_LTRACE" "$RUNS" "$OUT/counts.json" <<'PY'
import json, sys
plain, plain_w, plain_l, why, entry, setup, lt, alloc, alloc_entry = map(float, sys.argv[1:10])
n_plain, n_why, n_lt, runs = map(int, sys.argv[10:14])
hits = sum(f["calls"] for f in json.load(open(sys.argv[14]))["functions"]) / n_why
base = plain / n_plain * 1e9
added = lambda t, n, p: (t - setup - p) / n * 1e9
why_it, entry_it, lt_it = added(why, n_why, plain_w), added(entry, n_why, plain_w), (lt - plain_l) / n_lt * 1e9
slow = lambda it: (base + it) / base
print(f"call counting overhead ({runs} interleaved runs, medians; allocator loop, {hits:.0f} probed calls/iteration)")
print(f"  plain                              {base:9.1f} ns/iteration   ({n_plain} iterations in {plain:.3f} s)")
print(f"  whyslow calls                      {why_it:9.1f} ns/iteration added  -> slowdown {slow(why_it):8.1f}x   ({setup:.3f} s fixed start/stop cost excluded)")
print(f"  whyslow calls, probes at entry     {entry_it:9.1f} ns/iteration added  -> slowdown {slow(entry_it):8.1f}x")
print(f"  ltrace -c                          {lt_it:9.1f} ns/iteration added  -> slowdown {slow(lt_it):8.1f}x   ({n_lt} iterations)")
print(f"  whyslow slowdown / ltrace slowdown: 1/{slow(lt_it) / slow(why_it):.0f} (probes at entry: 1/{slow(lt_it) / slow(entry_it):.0f}; target: 1/100 or better)")
print(f"  whyslow record --alloc: {(alloc - plain_w) / n_why * 1e9:9.1f} ns/iteration added (probes at entry: {(alloc_entry - plain_w) / n_why * 1e9:.1f})")
PY
# One function at a time: ns per probed call, placed vs at entry.
echo "  cost of one probed call (ns, median of $RUNS), placed by whyslow vs at the entry:"
for f in "operator new(unsigned long)" "operator delete(void*)" "operator delete(void*, unsigned long)" memcpy malloc free; do
  site=$("$WHYSLOW" calls --list "$f" -- "$BIN" | grep -v ld-linux | head -1 | sed 's/.*probe at //')
  esite=$(WHYSLOW_PROBE_AT_ENTRY=1 "$WHYSLOW" calls --list "$f" -- "$BIN" | grep -v ld-linux | head -1 | sed 's/.*probe at //')
  moved="" ; at="" ; setup="" ; plain=""
  for i in $(seq "$RUNS"); do
    moved+=" $(timeit "$WHYSLOW" calls "$f" -- "$BIN" "$N_WHYSLOW")"
    at+=" $(WHYSLOW_PROBE_AT_ENTRY=1 timeit "$WHYSLOW" calls "$f" -- "$BIN" "$N_WHYSLOW")"
    setup+=" $(timeit "$WHYSLOW" calls "$f" -- "$BIN" 0)"
    plain+=" $(timeit "$BIN" "$N_WHYSLOW")"
  done
  calls=$("$WHYSLOW" calls --format json "$f" -- "$BIN" "$N_WHYSLOW" 2>/dev/null | python3 -c 'import json,sys; print(sum(x["calls"] for x in json.load(sys.stdin)["functions"] if "ld-linux" not in x["module"]))')
  python3 - "$f" "$(echo "$moved" | median)" "$(echo "$at" | median)" "$(echo "$setup" | median)" "$(echo "$plain" | median)" "$calls" "$site" "$esite" <<'PY'
import sys
f, moved, at, setup, plain = sys.argv[1], *map(float, sys.argv[2:6])
calls = int(sys.argv[6])
per = lambda t: (t - setup - plain) / max(calls, 1) * 1e9
print(f"    {f:40s} {per(moved):7.0f} at {sys.argv[7]}   ({calls} calls)")
print(f"    {'':40s} {per(at):7.0f} at {sys.argv[8]}")
PY
done
