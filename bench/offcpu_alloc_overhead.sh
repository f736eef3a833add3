#!/usr/bin/env bash
# Overhead of `record --offcpu` on a context-switch-heavy program (two threads ping-ponging over pipes)
# and of `record --alloc` on an allocation-heavy one, as wall-time ratios to a plain run and to the
# nearest peer: `perf record -e sched:sched_switch --call-graph dwarf`, and a perf uprobe on malloc with
# `--call-graph dwarf`. Interleaved runs, medians.
# Read the peer's row with its lost samples: perf drops what its buffer cannot take, so a fast perf run
# may have recorded a fraction of the events. In a VM the plain ping-pong can be slower than a traced one
# (idle CPUs wake slowly; a busy recorder keeps them awake): compare whyslow with perf there.
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
SWITCHES=${SWITCHES:-100000}
ALLOCS=${ALLOCS:-100000}
make -s -C "$ROOT/tests/workloads" >/dev/null
PING="$W/pingpong"
ALLOC="$W/allocs"
LIBC=$(ldd "$ALLOC" | awk '/libc.so.6/ {print $3}')
perf probe -q -d 'probe_libc:malloc' >/dev/null 2>&1 || true
perf probe -q -x "$LIBC" malloc >/dev/null
trap 'perf probe -q -d "probe_libc:malloc" >/dev/null 2>&1; rm -rf "$OUT"' EXIT
declare -A t
for i in $(seq "$RUNS"); do
  t[ping_plain]+=" $(timeit "$PING" "$SWITCHES")"
  t[ping_whyslow]+=" $(timeit "$WHYSLOW" record -q --offcpu -o "$OUT/o.data" -- "$PING" "$SWITCHES")"
  t[ping_perf]+=" $(timeit perf record -q -e sched:sched_switch --call-graph dwarf -o "$OUT/o.perf" -- "$PING" "$SWITCHES")"
  t[alloc_plain]+=" $(timeit "$ALLOC" "$ALLOCS")"
  t[alloc_whyslow]+=" $(timeit "$WHYSLOW" record -q --alloc -o "$OUT/a.data" -- "$ALLOC" "$ALLOCS")"
  t[alloc_perf]+=" $(timeit perf record -q -e probe_libc:malloc --call-graph dwarf -o "$OUT/a.perf" -- "$ALLOC" "$ALLOCS")"
done
m() { echo "${t[$1]}" | median; }
# perf's LOST_SAMPLES count (events the kernel dropped because perf's buffer was full).
perf_lost() { perf report -i "$1" --stats 2>/dev/null | awk '/LOST_SAMPLES events:/ {if ($3 > n) n = $3} END {print n + 0}'; }
row() { printf "  %-52s %8ss  %sx of plain\n" "$1" "$2" "$(ratio "$2" "$3")"; }
echo "off-CPU and allocation recording overhead ($RUNS interleaved runs, medians)"
p=$(m ping_plain); echo "  pingpong $SWITCHES rounds (2 switch-outs each):"
row "plain" "$p" "$p"
row "whyslow record --offcpu" "$(m ping_whyslow)" "$p"
row "perf record -e sched:sched_switch --call-graph dwarf" "$(m ping_perf)" "$p"
lost=$("$WHYSLOW" report "$OUT/o.data" --type offcpu --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["lost_samples"])')
echo "    lost samples in the last run: whyslow $lost, perf $(perf_lost "$OUT/o.perf")"
# What each recorder costs the program itself, in its own CPU time per switch-out (pingpong prints it with
# PINGPONG_CPU set): unlike wall time, not a measure of the wait for a CPU on a shared machine. On one CPU
# (taskset): across two, an idle VM's wake-ups (IPIs, halt polling) are most of a switch's CPU time.
cpu_per_switch() {
  PINGPONG_CPU=1 taskset -c 0 "$@" "$PING" "$SWITCHES" 2>&1 >/dev/null | awk '/per switch-out/ {print $1}'
}
declare -A c
for i in $(seq "$RUNS"); do
  c[plain]+=" $(cpu_per_switch env)"
  c[offcpu]+=" $(cpu_per_switch "$WHYSLOW" record -q --offcpu -o "$OUT/o.data" --)"
  c[cpu]+=" $(cpu_per_switch "$WHYSLOW" record -q -o "$OUT/c.data" --)"
  c[perf]+=" $(cpu_per_switch perf record -q -e sched:sched_switch --call-graph dwarf -o "$OUT/o.perf" --)"
done
cm() { echo "${c[$1]}" | median; }
cp=$(cm plain)
echo "    the program's CPU per switch-out (medians): plain ${cp} ns"
for k in "offcpu:whyslow record --offcpu" "cpu:whyslow record (CPU samples only)" "perf:perf record -e sched:sched_switch --call-graph dwarf"; do
  v=$(cm "${k%%:*}")
  printf "      %-56s %6.0f ns  +%.0f ns\n" "${k#*:}" "$v" "$(python3 -c "print($v-$cp)")"
done
a=$(m alloc_plain); echo "  allocs $ALLOCS (2.5 x $ALLOCS mallocs):"
row "plain" "$a" "$a"
row "whyslow record --alloc" "$(m alloc_whyslow)" "$a"
row "perf probe malloc + perf record --call-graph dwarf" "$(m alloc_perf)" "$a"
lost=$("$WHYSLOW" report "$OUT/a.data" --type alloc-count --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["lost_samples"])')
echo "    lost samples in the last run: whyslow $lost, perf $(perf_lost "$OUT/a.perf") (of $((ALLOCS * 5 / 2)) mallocs)"
