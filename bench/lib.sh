# Shared helpers for the benchmark scripts (sourced). Benchmarks print ratios measured in one run;
# nothing here asserts wall-clock time.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$PATH:/usr/local/go/bin:$HOME/.cargo/bin:$ROOT/bench/.tools/bin"
# WHYSLOW=path runs another build (a debug one: its CPU figures are not release figures).
WHYSLOW="${WHYSLOW:-$ROOT/target/release/whyslow}"
W="$ROOT/tests/workloads/bin"
OUT=$(mktemp -d /tmp/whyslow-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

# Builds the fixed-work benchmark program (fixed iterations, so overhead shows up as wall time).
build_fixed() {
  mkdir -p "$ROOT/bench/.build"
  gcc -O2 -g -fomit-frame-pointer -o "$ROOT/bench/.build/fixed_work" "$ROOT/bench/fixed_work.c"
  echo "$ROOT/bench/.build/fixed_work"
}

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
