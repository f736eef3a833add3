#!/usr/bin/env bash
# `whyslow compare` on real runs: how often it calls a command different from itself (false-positive rate
# over K comparisons, n runs per side), and what it measures for the build doing +25% work (the change,
# its 95% CI, p). Figures, not pass/fail. Usage: bench/compare_fpr.sh [K=20] [N=5] [ROUNDS=1000]
# (WHYSLOW_BIN=path picks another whyslow binary than target/release/whyslow).
source "$(dirname "$0")/lib.sh"
K=${1:-20}; N=${2:-5}; ROUNDS=${3:-1000}
BIN=${WHYSLOW_BIN:-$WHYSLOW}
make -s -C "$ROOT/tests/workloads" >/dev/null
field() { python3 -c "import json,sys; v=json.load(sys.stdin); m=[m for m in v['measures'] if m['name']=='$1'][0]; print(m['significant'], round(100*m['change'],2), round(100*m['ci95'][0],2), round(100*m['ci95'][1],2), round(m['p'],4))"; }

echo "== $K comparisons of diffwork $ROUNDS with itself, $N runs per side =="
pos_cpu=0; pos_wall=0
for i in $(seq 1 "$K"); do
  json=$("$BIN" compare -n "$N" --before "$W/diffwork $ROUNDS" --after "$W/diffwork $ROUNDS" --output-dir "$OUT/same$i" --format json 2>/dev/null)
  read -r sig change lo hi p <<<"$(echo "$json" | field 'cpu time')"
  read -r wsig _ <<<"$(echo "$json" | field 'wall time')"
  [ "$sig" = True ] && pos_cpu=$((pos_cpu + 1))
  [ "$wsig" = True ] && pos_wall=$((pos_wall + 1))
  echo "  $i: cpu change ${change}% CI [${lo}%, ${hi}%] p=$p significant=$sig (wall significant=$wsig)"
done
echo "false positives: cpu time $pos_cpu/$K, wall time $pos_wall/$K (exact test level at n=5+5: 3.2%)"

echo "== diffwork vs diffwork_2x ($ROUNDS rounds, +25% expected), $N runs per side =="
for i in 1 2 3; do
  "$BIN" compare -n "$N" --before "$W/diffwork $ROUNDS" --after "$W/diffwork_2x $ROUNDS" --output-dir "$OUT/2x$i" --format json 2>/dev/null \
    | field 'cpu time' | { read -r sig change lo hi p; echo "  cpu change ${change}% CI [${lo}%, ${hi}%] p=$p significant=$sig"; }
done
