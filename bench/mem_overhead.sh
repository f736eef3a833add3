#!/usr/bin/env bash
# Cost of `record --mem` (in use by stack, exact) against heaptrack, which answers the same questions
# (leaks, peak, in use over time), on allocation-heavy programs: wall-time ratios to a plain run,
# interleaved runs, medians. Also `--mem-sample` (512 KiB mean interval) and `record --alloc` (uprobes,
# counts only). The issue's goal: at most half of heaptrack's slowdown.
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
N=${N:-1600000}
apt_needs heaptrack
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

# Attached to a running process (-p): `memwork leak N wait` prints its pid and waits, the tool attaches
# (whyslow's probes; heaptrack's injection through gdb, which stops the process meanwhile), then the work
# runs; the figure is the work's own seconds as memwork prints them, against the same program released
# with nothing attached. Interleaved runs, medians.
attached() {
  python3 - "$W/memwork" "$@" <<'PY'
import subprocess, sys
memwork, kind, n, tool = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
w = subprocess.Popen([memwork, "leak", n, "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
pid = w.stdout.readline().strip()
t = None
if kind != "plain":
    # whyslow announces its probes on stderr; heaptrack says it injected on stdout.
    ws = kind == "whyslow"
    t = subprocess.Popen(tool + ["-p", pid], text=True, stdout=subprocess.DEVNULL if ws else subprocess.PIPE,
                         stderr=subprocess.PIPE if ws else subprocess.DEVNULL)
    ready, lines = ("pid " + pid, t.stderr) if ws else ("injection finished", t.stdout)
    if not any(ready in line for line in lines):
        sys.exit(f"{tool[0]} did not attach")
w.stdin.write("go\n")
w.stdin.flush()
out = w.stdout.read()
w.wait()
if t:
    lines.read()
    t.wait()
print(out.split()[6])
PY
}
AN=$((N / 4))
for i in $(seq "$RUNS"); do
  t[att_plain]+=" $(attached plain "$AN")"
  t[att_sample]+=" $(attached whyslow "$AN" "$WHYSLOW" record -q --mem --budget none -o "$OUT/p.data")"
  t[att_exact]+=" $(attached whyslow "$AN" "$WHYSLOW" record -q --mem --mem-sample 0 --budget none -o "$OUT/e.data")"
  t[att_heaptrack]+=" $(cd "$OUT" && attached heaptrack "$AN" heaptrack -o "$OUT/ha")"
  rm -f "$OUT"/ha*
done
base=$(m att_plain)
echo "  attached (-p) to memwork leak $AN wait, the work's own seconds:"
row "plain (nothing attached)" "$base" "$base"
row "whyslow record -p --mem (512 KiB sampled)" "$(m att_sample)" "$base"
row "whyslow record -p --mem --mem-sample 0" "$(m att_exact)" "$base"
row "heaptrack -p" "$(m att_heaptrack)" "$base"
python3 -c "
s, e, h, b = $(m att_sample), $(m att_exact), $(m att_heaptrack), $base
print(f'    slowdown: whyslow sampled {s/b:.2f}x, exact {e/b:.2f}x, heaptrack -p {h/b:.2f}x')"
