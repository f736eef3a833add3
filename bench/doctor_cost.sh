#!/usr/bin/env bash
# What investigating a live server costs it (issue 17): redis-server's throughput under redis-benchmark
# (-c 20, SET and GET, no pipelining), and a Go net/http server's (tests/workloads/doctor/gohttp.go, fixed
# variant) under wrk -t1 -c16, with nothing attached, then while each tool watches it for the
# benchmark run: `whyslow doctor -p -d 9` (both phases), `whyslow record -p` (CPU), `whyslow record --cpu --offcpu -p`,
# `whyslow syscalls -p`, `perf record -g -p`, `strace -c -f -p`. Each tool's run is paired with a plain
# run right before it (drift cancels); the ratio is with/without. Then the doctor on the repo's launched
# doctor workloads: its wall time over the program's own (goal: <= 3x + 2 s).
# Goal: doctor -p costs redis <= 10% of its throughput (it cost 77% before the probe budget).
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "doctor_cost: needs root" >&2; exit 1; }
for t in redis-server redis-cli redis-benchmark wrk strace perf; do
  command -v $t >/dev/null || { echo "doctor_cost: $t missing: run scripts/deps.sh" >&2; exit 1; }
done
[ -x "$WHYSLOW" ] || { echo "doctor_cost: no $WHYSLOW: run make build" >&2; exit 1; }
make -s -C "$ROOT/tests/workloads" >/dev/null
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --save '' --appendonly no --daemonize no >"$OUT/redis.log" 2>&1 &
REDIS=$!
"$W/doctor_gohttp" fixed >"$OUT/http.port" &
HTTP=$!
trap 'kill $REDIS $HTTP 2>/dev/null; wait $REDIS $HTTP 2>/dev/null; rm -rf "$OUT"' EXIT
for _ in $(seq 50); do [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = PONG ] && [ -s "$OUT/http.port" ] && break; sleep 0.1; done
URL="http://127.0.0.1:$(head -1 "$OUT/http.port")/rpc"

# bench: requests/s of the server $TARGET is: redis (SET and GET, their mean, $REQUESTS each) or the
# HTTP server (wrk for $((WATCH_S - 1)) s).
bench() {
  if [ "$TARGET" = "$HTTP" ]; then
    wrk -t1 -c16 -d"$((WATCH_S - 1))s" "$URL" 2>/dev/null | awk '/Requests\/sec/ { printf "%.0f\n", $2 }'
    return
  fi
  redis-benchmark -p "$PORT" -c 20 -n "$REQUESTS" -t set,get -q 2>/dev/null | tr '\r' '\n' |
    awk '/requests per second/ { for (i = 1; i <= NF; i++) if ($i == "requests") { s += $(i - 1); n++ } }
         END { if (n) printf "%.0f\n", s / n; else print 0 }'
}
# watched NAME CMD...: a plain run, then a run while CMD (which watches for $WATCH_S seconds, both of the
# doctor's phases) runs; CMD starts 1 s before the benchmark. Prints both and their ratio.
watched() {
  local name=$1; shift
  local plain with pid
  plain=$(bench)
  "$@" >"$OUT/tool.out" 2>&1 &
  pid=$!
  sleep 1
  with=$(bench)
  wait $pid 2>/dev/null || true
  kill -0 "$TARGET" || { echo "doctor_cost: the server died under $name" >&2; exit 1; }
  printf "  %-36s %8s req/s plain %8s req/s watched  ratio %s\n" "$name" "$plain" "$with" "$(ratio "$with" "$plain")"
}
# Size the runs so that one lasts about as long as a tool watches (SET + GET at the plain rate).
WATCH_S=${WATCH_S:-9}
REQUESTS=20000
TARGET=$REDIS
REQUESTS=$(python3 -c "print(max(20000, int($(bench) * ($WATCH_S - 1) / 2)))")
D=$WATCH_S
for TARGET in $REDIS $HTTP; do
  if [ "$TARGET" = "$REDIS" ]; then
    echo "redis-server (port $PORT) under redis-benchmark -c 20 -t set,get -n $REQUESTS (each ~$((WATCH_S - 1)) s), 2 CPUs"
  else
    echo "Go net/http server (doctor_gohttp fixed) under wrk -t1 -c16 -d$((WATCH_S - 1))s, 2 CPUs"
  fi
  echo "  load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  watched "whyslow doctor -p" "$WHYSLOW" doctor -p "$TARGET" -d "$D" -o "$OUT/d.data"
  grep -h 'probes stopped\|phase 2' "$OUT/tool.out" | sed 's/^/      /' || true
  watched "whyslow record -p (cpu)" "$WHYSLOW" record -q -p "$TARGET" -d "$D" -o "$OUT/r.data"
  watched "whyslow record --cpu --offcpu -p" "$WHYSLOW" record -q --cpu --offcpu -p "$TARGET" -d "$D" -o "$OUT/o.data"
  watched "whyslow syscalls -p" "$WHYSLOW" syscalls -p "$TARGET" -d "$D"
  watched "perf record -g -p" perf record -q -g -p "$TARGET" -o "$OUT/p.data" -- sleep "$D"
  watched "strace -c -f -p" timeout -s INT "$D" strace -c -f -p "$TARGET"
done

echo "doctor on launched workloads: wall time of the program alone vs under whyslow doctor (goal <= 3x + 2 s)"
for prog in doctor_churn doctor_gogc doctor_godispatch doctor_tzlog doctor_reqlog; do
  alone=$(timeit "$W/$prog")
  doc=$(timeit "$WHYSLOW" doctor -o "$OUT/w.data" -- "$W/$prog")
  printf "  %-20s alone %6ss  doctor %6ss  = %sx (limit %ss)\n" "$prog" "$alone" "$doc" "$(ratio "$doc" "$alone")" \
    "$(python3 -c "print(f'{3*$alone+2:.2f}')")"
done
