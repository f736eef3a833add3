#!/usr/bin/env bash
# Recording a many-process, many-threaded real program: chromium headless running a page's script
# (browser, renderer, GPU and utility processes, ~60 threads), RUNS times each under
# `whyslow record` and `perf record -F 999 --call-graph dwarf,32768` (the same rate and stack copy).
# Prints samples kept, samples lost and the recorder's peak RSS per run. Goal: loss <= perf's, memory <= perf's.
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || { echo "chromium_loss: no $CHROMIUM: run scripts/deps.sh" >&2; exit 1; }
cat >"$OUT/page.html" <<'HTML'
<html><body><script>let s=0;for(let i=0;i<3e7;i++)s+=Math.sqrt(i);document.body.innerText=s</script></body></html>
HTML
CMD=("$CHROMIUM" --headless --no-sandbox --disable-gpu --dump-dom "file://$OUT/page.html")
# peak PROG...: runs it, prints its peak RSS in MB (wait4's ru_maxrss).
peak() {
  python3 - "$@" <<'PY'
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, _, ru = os.wait4(p.pid, 0)
print(ru.ru_maxrss // 1024)
PY
}
echo "chromium headless ($RUNS runs each): samples kept / lost, recorder peak RSS"
for i in $(seq "$RUNS"); do
  w_rss=$(peak "$WHYSLOW" record -q -o "$OUT/w.data" -- "${CMD[@]}")
  read -r w_kept w_lost < <("$WHYSLOW" report "$OUT/w.data" --format json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["total_samples"], r["lost_samples"])')
  p_rss=$(peak perf record -q -F 999 --call-graph dwarf,32768 -o "$OUT/p.data" -- "${CMD[@]}")
  p_kept=$(perf report -i "$OUT/p.data" --stats 2>/dev/null | awk '/SAMPLE events:/{print $3; exit}')
  p_lost=$(perf report -i "$OUT/p.data" --stats 2>/dev/null | awk '/LOST_SAMPLES events:|LOST events:/{n+=$3} END{print n+0}')
  printf "  run %d: whyslow %5s kept %4s lost %4s MB   perf %5s kept %4s lost %4s MB\n" \
    "$i" "$w_kept" "$w_lost" "$w_rss" "$p_kept" "$p_lost" "$p_rss"
done
