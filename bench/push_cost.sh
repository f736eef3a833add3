#!/usr/bin/env bash
# Push cost (issue 15): bytes per window and windows per second for a 10 s, 99 Hz window of a busy
# process, encoded and sent by `whyslow push` to a local sink that reads every byte and answers 200
# (Pyroscope Push API, legacy ingest and OTLP over HTTP), and to the push tests' OTLP gRPC collector
# (crates/cli/tests/collector, built as the otlp_grpc_sink example), which decodes every Export. Each push
# is a whole process start + file load + encode + request (gRPC: + HTTP/2 connection set-up), so windows/s
# is a lower bound of what the agent's pusher (one thread, a kept connection, no start-up) does.
# Grafana Alloy's pyroscope.ebpf collects every 15 s by default: one window per process per 15 s.
source "$(dirname "$0")/lib.sh"
N=${N:-40}
make -s -C "$ROOT/tests/workloads" >/dev/null
"$WHYSLOW" record -F 99 -o "$OUT/w.data" -- "$W/threads" 10 >/dev/null 2>&1
python3 - "$OUT/port" <<'PY' &
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
SINK=$!
(cd "$ROOT" && cargo build --quiet --locked --release -p whyslow-cli --example otlp_grpc_sink)
"$ROOT/target/release/examples/otlp_grpc_sink" >"$OUT/grpc_url" &
GRPC_SINK=$!
trap 'kill $SINK $GRPC_SINK 2>/dev/null; rm -rf "$OUT"' EXIT
for _ in $(seq 50); do [ -s "$OUT/port" ] && [ -s "$OUT/grpc_url" ] && break; sleep 0.1; done
URL="http://127.0.0.1:$(cat "$OUT/port")"
GRPC_URL=$(cat "$OUT/grpc_url")
samples=$("$WHYSLOW" report "$OUT/w.data" --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["total_samples"])')
echo "push cost: one 10 s window of a 4-thread busy process at 99 Hz ($samples samples), $N pushes each"
for to in "pyroscope=$URL" "pyroscope-ingest=$URL" "otlp=$URL" "otlp-grpc=$GRPC_URL"; do
  kind=${to%%=*}
  bytes=$("$WHYSLOW" push "$OUT/w.data" --service-name bench --push "$to" 2>&1 | sed -n 's/.*(\([0-9]*\) bytes).*/\1/p')
  t0=$(now)
  for _ in $(seq "$N"); do "$WHYSLOW" push "$OUT/w.data" --service-name bench --push "$to" 2>/dev/null; done
  t1=$(now)
  rate=$(python3 -c "print(f'{$N/($t1-$t0):.1f}')")
  procs=$(python3 -c "print(int($N/($t1-$t0)*15))")
  printf "  %-18s %7s bytes/window  %6s windows/s (whole process per push)  = %s processes at one window per 15 s\n" "$kind" "$bytes" "$rate" "$procs"
done
