#!/usr/bin/env bash
# Syscall counting overhead on seed 001's pattern (localtime+strftime stat /etc/localtime on every call):
# wall time of plain vs `whyslow syscalls` vs `strace -c -f`, interleaved runs, medians.
# Target: whyslow <= 1.3x of plain. Also prints whyslow's fixed start/stop cost (`-- true`) so the
# per-call cost can be told apart from loading the eBPF programs.
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
CALLS=${CALLS:-1000000}
make -s -C "$ROOT/tests/workloads" >/dev/null
BIN="$W/tzstat"
declare -A t
for i in $(seq "$RUNS"); do
  t[plain]+=" $(timeit "$BIN" "$CALLS" 0)"
  t[whyslow]+=" $(timeit "$WHYSLOW" syscalls -- "$BIN" "$CALLS" 0)"
  t[strace]+=" $(timeit strace -c -f -o "$OUT/strace.txt" "$BIN" "$CALLS" 0)"
  t[setup]+=" $(timeit "$WHYSLOW" syscalls -- true)"
done
plain=$(echo "${t[plain]}" | median)
echo "syscall counting overhead ($RUNS interleaved runs, medians, tzstat: $CALLS localtime+strftime calls)"
printf "  %-28s %8ss\n" "plain" "$plain"
for k in whyslow strace; do
  m=$(echo "${t[$k]}" | median)
  label=$k; [ $k = whyslow ] && label="whyslow syscalls"; [ $k = strace ] && label="strace -c -f"
  printf "  %-28s %8ss  %sx of plain\n" "$label" "$m" "$(ratio "$m" "$plain")"
done
setup=$(echo "${t[setup]}" | median)
w=$(echo "${t[whyslow]}" | median)
printf "  %-28s %8ss  (load+attach+detach of the eBPF programs, once per run)\n" "whyslow syscalls -- true" "$setup"
per_call=$(python3 -c "print(f'{($w-$setup-$plain)/$CALLS*1e9:.0f}')")
printf "  whyslow cost per syscall: ~%s ns (%s calls)\n" "$per_call" "$CALLS"
