#!/usr/bin/env bash
# Symbolizing production Go: Debian's prometheus (a stripped Go binary: no .symtab, no DWARF; named from
# its .gopclntab) under query load, profiled for SECS seconds two ways at once:
#   - `perf record -g -p PID` (999 Hz), then `whyslow report perf.data` (read, normalize, symbolize every
#     address from .gopclntab, aggregate, print the top functions);
#   - the process's own /debug/pprof/profile?seconds=SECS, then `go tool pprof -top` on it (names come
#     with the profile: the Go runtime symbolized it).
# Target: whyslow's report takes no longer than `go tool pprof -top` (ratio <= 1). Also printed: the share
# of frames left as module+offset, and the top functions of each side (by total).
source "$(dirname "$0")/lib.sh"
SECS=${SECS:-60}
RUNS=${RUNS:-3}
PORT=${PORT:-9399}
apt_needs prometheus
cat >"$OUT/prom.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: self
    static_configs:
      - targets: ['127.0.0.1:$PORT']
EOF
prometheus --config.file="$OUT/prom.yml" --storage.tsdb.path="$OUT/tsdb" \
  --web.listen-address="127.0.0.1:$PORT" >"$OUT/prom.log" 2>&1 &
PROM=$!
load() {  # range queries over its own metrics until killed
  while :; do
    for q in 'rate(prometheus_http_requests_total[1m])' 'sum by (job)(up)' '{__name__=~"go_.*"}'; do
      curl -s -G "http://127.0.0.1:$PORT/api/v1/query_range" --data-urlencode "query=$q" \
        --data-urlencode "start=$(( $(date +%s) - 600 ))" --data-urlencode "end=$(date +%s)" \
        --data-urlencode "step=1" >/dev/null || true
    done
  done
}
load & LOAD=$!
trap 'kill $LOAD $PROM 2>/dev/null; rm -rf "$OUT"' EXIT
sleep 5  # let it scrape a few series first
echo "prometheus $(prometheus --version 2>&1 | head -1 | cut -d' ' -f3), stripped: $(readelf -S /usr/bin/prometheus | grep -c '\.symtab') .symtab sections; ${SECS} s under query load"
curl -s -o "$OUT/cpu.pb.gz" "http://127.0.0.1:$PORT/debug/pprof/profile?seconds=$SECS" &
CURL=$!
perf record -q -F 999 -g -p "$PROM" -o "$OUT/p.data" -- sleep "$SECS" >/dev/null 2>&1
wait $CURL
go tool pprof -top "$OUT/cpu.pb.gz" >/dev/null 2>&1  # the go command builds its pprof tool once
ours_runs="" theirs_runs=""
for _ in $(seq "$RUNS"); do
  ours_runs+=" $(timeit "$WHYSLOW" report "$OUT/p.data" --limit 30)"
  theirs_runs+=" $(timeit go tool pprof -top "$OUT/cpu.pb.gz")"
done
ours=$(echo $ours_runs | median); theirs=$(echo $theirs_runs | median)
"$WHYSLOW" report "$OUT/p.data" --format json >"$OUT/r.json"
python3 - "$OUT/r.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
fs = [f for f in r["functions"] if f["module"].endswith("prometheus")]
unnamed = sum(f["self"] for f in fs if f["name"].startswith("prometheus+0x"))
total = sum(f["self"] for f in fs) or 1
u = r["unwind"]
# perf -g stacks are the kernel's frame-pointer callchains: nothing for whyslow to unwind.
print(f"  whyslow: {r['total_samples']} samples; prometheus frames left module+offset: {100*unnamed/total:.2f}% of its self samples")
print("  whyslow top:", ", ".join(f"{f['name']} {f['total_pct']}%" for f in sorted(fs, key=lambda f: -f["total"])[:5] if not f["name"].startswith("runtime.goexit")))
EOF
echo "  pprof top: $(go tool pprof -top -cum "$OUT/cpu.pb.gz" 2>/dev/null | awk 'NR>7 && NR<=12 {printf "%s %s, ", $NF, $5}')"
printf "  %-32s %8ss (median of%s)\n" "whyslow report perf.data" "$ours" "$ours_runs"
printf "  %-32s %8ss (median of%s)\n" "go tool pprof -top profile" "$theirs" "$theirs_runs"
echo "  whyslow/pprof time ratio: $(ratio "$ours" "$theirs") (target <= 1)"
