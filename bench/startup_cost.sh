#!/usr/bin/env bash
# Fixed cost of short commands (issue 31): wall time of `-- true` under whyslow syscalls / record, strace -c
# and perf record, the same on tzstat's 200k stats of /etc/localtime (a 0.4 s program) and on ~1 s of fixed
# CPU work; interleaved runs, medians, ratios against the plain run and against strace -c / perf record.
# Then one `-v` run of each whyslow command: where its time goes, phase by phase.
# Targets: fixed cost (whyslow's `-- true` less plain `true`) <= 30 ms for syscalls, <= 50 ms for record;
# syscalls on the 200k-stat run <= 1.15x of plain. Figures, not pass/fail. On tzstat, also the floor of
# any exact counter of every syscall: the same run with two empty programs on the syscall tracepoints
# (bench/syscall_floor.c; needs a build of whyslow for its libbpf).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-7}
make -s -C "$ROOT/tests/workloads" >/dev/null
FIXED=$(build_fixed)
FLOOR=$(build_syscall_floor)
TZ_CALLS=${TZ_CALLS:-200000}
ROUNDS=${ROUNDS:-25}
TRUE=$(command -v true)
declare -A t
run_all() { # label-prefix, command...
  local p=$1; shift
  t[$p.plain]+=" $(timeit "$@")"
  t[$p.syscalls]+=" $(timeit "$WHYSLOW" syscalls -- "$@")"
  t[$p.strace]+=" $(timeit strace -c -f -o "$OUT/strace.txt" "$@")"
  t[$p.record]+=" $(timeit "$WHYSLOW" record -q -o "$OUT/w.data" -- "$@")"
  t[$p.perf]+=" $(timeit perf record -q -F 999 -g -o "$OUT/perf.data" -- "$@")"
}
for i in $(seq "$RUNS"); do
  run_all true "$TRUE"
  run_all tz "$W/tzstat" "$TZ_CALLS" 0
  # shellcheck disable=SC2086 # FLOOR is the program and its object
  [ -z "$FLOOR" ] || t[tz.floor]+=" $(timeit $FLOOR -- "$W/tzstat" "$TZ_CALLS" 0)"
  run_all cpu "$FIXED" "$ROUNDS"
done
ms() { python3 -c "print(f'{($1)*1e3:7.1f}')"; }
show() { # prefix, title
  local p=$1 plain
  plain=$(echo "${t[$p.plain]}" | median)
  echo "$2"
  printf "  %-26s %8ss\n" "plain" "$plain"
  local s st r pf
  s=$(echo "${t[$p.syscalls]}" | median); st=$(echo "${t[$p.strace]}" | median)
  r=$(echo "${t[$p.record]}" | median); pf=$(echo "${t[$p.perf]}" | median)
  printf "  %-26s %8ss  %6sx of plain  %6sx of strace -c -f  (+%s ms)\n" "whyslow syscalls" "$s" \
    "$(ratio "$s" "$plain")" "$(ratio "$s" "$st")" "$(ms "$s-$plain")"
  printf "  %-26s %8ss  %6sx of plain\n" "strace -c -f" "$st" "$(ratio "$st" "$plain")"
  printf "  %-26s %8ss  %6sx of plain  %6sx of perf record  (+%s ms)\n" "whyslow record" "$r" \
    "$(ratio "$r" "$plain")" "$(ratio "$r" "$pf")" "$(ms "$r-$plain")"
  printf "  %-26s %8ss  %6sx of plain\n" "perf record -F 999 -g" "$pf" "$(ratio "$pf" "$plain")"
}
echo "start-up cost ($RUNS interleaved runs, medians; $WHYSLOW)"
show true "true (the fixed cost)"
show tz "tzstat $TZ_CALLS (one stat of /etc/localtime per call)"
if [ -n "$FLOOR" ]; then
  fl=$(echo "${t[tz.floor]}" | median)
  printf "  %-26s %8ss  %6sx of plain  (two empty programs on the syscall tracepoints: the floor of\n" \
    "the floor" "$fl" "$(ratio "$fl" "$(echo "${t[tz.plain]}" | median)")"
  echo "                             any exact counter of every syscall here, before it counts anything)"
fi
show cpu "fixed_work $ROUNDS (CPU-bound)"
# CPU time (perf stat's task-clock) of the fixed cost: on a machine shared with other work, wall time
# mostly measures the wait for a CPU.
cpu_ms() { perf stat -x, -e task-clock -r "$RUNS" "$@" 2>&1 >/dev/null | awk -F, '/task-clock/ { printf "%.1f", $1 }'; }
echo "CPU time of the fixed cost (perf stat -r $RUNS, task-clock ms):"
printf "  %-26s %8s ms\n" "whyslow syscalls -- true" "$(cpu_ms "$WHYSLOW" syscalls -- "$TRUE")"
printf "  %-26s %8s ms\n" "whyslow record -- true" "$(cpu_ms "$WHYSLOW" record -q -o "$OUT/w.data" -- "$TRUE")"
printf "  %-26s %8s ms\n" "strace -c -f true" "$(cpu_ms strace -c -f -o "$OUT/strace.txt" "$TRUE")"
printf "  %-26s %8s ms\n" "perf record -g true" "$(cpu_ms perf record -q -F 999 -g -o "$OUT/perf.data" -- "$TRUE")"
echo "where the time goes (one run each, -v):"
"$WHYSLOW" syscalls -v -- "$TRUE" 2>&1 >/dev/null | sed 's/^/  syscalls -- true: /' | grep -v "time per phase"
"$WHYSLOW" record -v -q -o "$OUT/w.data" -- "$FIXED" 10 2>&1 | grep -v "wrote\|time per phase" \
  | sed 's/^/  record -- fixed_work 10: /'
