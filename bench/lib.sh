# Shared helpers for the benchmark scripts (sourced). Benchmarks print ratios measured in one run;
# nothing here asserts wall-clock time.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$PATH:/usr/local/go/bin:$HOME/.cargo/bin:$ROOT/bench/.tools/bin"
# WHYSLOW=path/to/whyslow measures another build (e.g. target/debug/whyslow, optimized here too).
WHYSLOW=${WHYSLOW:-"$ROOT/target/release/whyslow"}
W="$ROOT/tests/workloads/bin"
OUT=$(mktemp -d /tmp/whyslow-bench.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$OUT"' EXIT

# Builds the fixed-work benchmark program (fixed iterations, so overhead shows up as wall time).
build_fixed() {
  mkdir -p "$ROOT/bench/.build"
  gcc -O2 -g -fomit-frame-pointer -o "$ROOT/bench/.build/fixed_work" "$ROOT/bench/fixed_work.c"
  echo "$ROOT/bench/.build/fixed_work"
}

# Builds bench/syscall_floor (two empty programs on the syscall tracepoints, attached around a command)
# against the libbpf the build of whyslow compiled; prints its path and the object's, or nothing when
# there is no such build.
build_syscall_floor() {
  local inc
  inc=$(ls -d "$ROOT"/target/*/build/libbpf-sys-*/out/include 2>/dev/null | head -1)
  [ -n "$inc" ] && [ -f "$inc/../libbpf.a" ] || return 0
  mkdir -p "$ROOT/bench/.build"
  clang -target bpf -D__TARGET_ARCH_x86 -O2 -g -I"$ROOT/bpf" -I"$inc" -c "$ROOT/bench/syscall_floor.bpf.c" \
    -o "$ROOT/bench/.build/syscall_floor.bpf.o" &&
    gcc -O2 -I"$inc" -o "$ROOT/bench/.build/syscall_floor" "$ROOT/bench/syscall_floor.c" "$inc/../libbpf.a" -lelf -lz &&
    echo "$ROOT/bench/.build/syscall_floor $ROOT/bench/.build/syscall_floor.bpf.o"
}

# needs_root WHY: ends the benchmark unless it runs as root (WHY: what root is for).
needs_root() { [ "$(id -u)" -eq 0 ] || { echo "$(basename "$0" .sh): needs root ($1)" >&2; exit 1; }; }

# needs_build: ends the benchmark unless $WHYSLOW is built; builds the test workloads.
needs_build() {
  [ -x "$WHYSLOW" ] || { echo "$(basename "$0" .sh): no $WHYSLOW: run make build" >&2; exit 1; }
  make -s -C "$ROOT/tests/workloads" >/dev/null
}

# apt_install PACKAGE...: installs packages from apt, saying so (the benchmarks run as root).
apt_install() {
  echo "$(basename "$0" .sh): installing $*" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# apt_needs PROGRAM [PACKAGE]: installs PACKAGE (default: PROGRAM) unless PROGRAM is on PATH.
apt_needs() { command -v "$1" >/dev/null || apt_install "${2:-$1}"; }

# cpu_ticks PID: user + system clock ticks of a process; TICK of them make a second.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)

# now: seconds since the epoch with ns.
now() { date +%s.%N; }

# timeit CMD...: runs CMD with output discarded, prints its wall seconds.
timeit() {
  local t0 t1
  t0=$(now); "$@" >/dev/null 2>&1; t1=$(now)
  python3 -c "print(f'{$t1-$t0:.4f}')"
}

# median of numbers on stdin.
median() { python3 -c 'import sys,statistics; print(f"{statistics.median(float(x) for x in sys.stdin.read().split()):.4f}")'; }

ratio() { python3 -c "print(f'{$1/$2:.3f}')"; }

# window "COUNTER..." CMD...: runs CMD in the background and reads each counter (a command that prints a
# number) from 0.5 s after CMD started until it ended; prints each counter's growth, then the window's
# seconds. A CMD that fails ends the benchmark.
window() {
  local counters=($1) a=() b=() t0 t1 c i
  shift
  "$@" &
  local pid=$!
  sleep 0.5
  for c in "${counters[@]}"; do a+=("$($c)"); done
  t0=$(now)
  wait $pid || { echo "$(basename "$0"): $* failed" >&2; exit 1; }
  for c in "${counters[@]}"; do b+=("$($c)"); done
  t1=$(now)
  for i in "${!counters[@]}"; do printf '%s ' $((b[i] - a[i])); done
  python3 -c "print(f'{$t1 - $t0:.3f}')"
}

# abba_summary WHAT "RATIOS" "PLAIN RUNS": the mean of the watched/plain ratios of ABBA pairs with its 95%
# interval from their spread, and each block's plain runs against each other (the noise floor).
abba_summary() {
  python3 - "$@" <<'PY'
import statistics as st, sys
what = sys.argv[1]
r = [float(x) for x in sys.argv[2].split()]
p = [float(x) for x in sys.argv[3].split()]
pp = [p[i + 1] / p[i] for i in range(0, len(p) - 1, 2)]
m, sd = st.mean(r), st.stdev(r) if len(r) > 1 else 0.0
half = 1.96 * sd / len(r) ** 0.5
print(f"  {what}: watched/plain mean {m:.3f} over {len(r)} pairs, pair-to-pair sd {sd:.3f}: "
      f"95% interval of the mean {m - half:.3f} .. {m + half:.3f}")
if len(pp) > 1:
    print(f"    plain/plain within a block: {' '.join(f'{x:.3f}' for x in pp)} (sd {st.stdev(pp):.3f}): the noise floor")
PY
}
