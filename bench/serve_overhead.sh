#!/usr/bin/env bash
# Cost of `whyslow serve` (issue 14) profiling a busy machine at 99 Hz cpu+offcpu (window 10 s) with process
# churn. The busy target is nginx (2 workers serving a 600-byte file) under `wrk -t2 -cCONNS`; a second
# target follows a short-lived process started every second (the offcpu workload: 0.6 s, half on CPU, half
# blocked on a pipe and in nanosleep, two threads). Both run under names of their own (wsbn-PID, wsbc-PID),
# so the targets match this run's processes only.
# Phase 1: nginx's throughput with the agent off (not running) and on (following nginx and the churn), in
# ROUNDS pairs of ROUND_S-second wrk runs in ABBA order (so drift cancels): the on/off ratio.
# Phase 2: one agent for DURATION seconds (default 600) under the same load and churn: its CPU (% of one
# core) and resident memory every SAMPLE_S seconds from /metrics (with its open fds and followed processes),
# its CPU per second from /proc (spikes at window cuts), the CPU samples it stored against 99 Hz x nginx's
# CPU time, lost samples, and how many of the churn processes it followed and stored.
# Targets of the issue: agent CPU <= 1% of one core, resident memory <= 60 MB and flat, throughput drop <= 1%.
# nginx is reloaded (SIGHUP) before every round, once the agent follows its master, so every round has fresh
# workers forked under the agent's events (workers forked before the master was followed get none).
source "$(dirname "$0")/lib.sh"
DURATION=${DURATION:-600}
ROUNDS=${ROUNDS:-5}
ROUND_S=${ROUND_S:-10}
SAMPLE_S=${SAMPLE_S:-10}
CONNS=${CONNS:-64}
needs_root "the agent opens perf events of other processes"
needs_build
apt_needs wrk
[ -x /usr/sbin/nginx ] || apt_needs nginx
chmod 755 "$OUT" # nginx's workers run as nobody
NGINX="$OUT/wsbn-$$"
CHURN="$OUT/wsbc-$$"
AGENT="$OUT/whyslow" # a copy: a rebuild during the run does not change the agent between rounds
cp "$(command -v nginx || echo /usr/sbin/nginx)" "$NGINX"
cp "$W/offcpu" "$CHURN"
cp "$WHYSLOW" "$AGENT"
CHURN_ARGS=(3) # offcpu: 3 rounds of 200 ms

AGENT_PID="" NGINX_PID="" CHURN_PID="" SAMPLER_PID="" ADDR=""
# alive PID: running, not a zombie.
alive() { local s; s=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ -n "$s" ] && [ "$s" != Z ]; }
# stop PID SIGNAL SECONDS: signals it, waits up to SECONDS, then SIGKILL; reaps it.
stop() {
  kill -"$2" "$1" 2>/dev/null || true
  for _ in $(seq $(($3 * 10))); do alive "$1" || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
stop_agent() { [ -z "$AGENT_PID" ] || stop "$AGENT_PID" TERM 30; AGENT_PID=""; }
cleanup() {
  set +e
  touch "$OUT/churn.stop"
  [ -z "$SAMPLER_PID" ] || stop "$SAMPLER_PID" TERM 2
  [ -z "$CHURN_PID" ] || stop "$CHURN_PID" TERM 3
  stop_agent
  [ -z "$NGINX_PID" ] || stop "$NGINX_PID" TERM 10
  rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Helpers in Python: the 1 s sampler, /metrics rows, the summaries.
cat >"$OUT/h.py" <<'EOF'
import json, os, re, statistics, subprocess, sys, time
TCK = os.sysconf("SC_CLK_TCK")

def ticks(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (OSError, IndexError):
        return 0

def children(pid):
    try:
        return [int(x) for x in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []

def sampler(agent, master, out):
    """Every second: time, agent CPU ticks, agent RSS kB, nginx CPU ticks (master + workers), agent fds."""
    with open(out, "a") as o:
        while os.path.exists(f"/proc/{agent}"):
            try:
                rss = next(int(l.split()[1]) for l in open(f"/proc/{agent}/status") if l.startswith("VmRSS:"))
                fds = len(os.listdir(f"/proc/{agent}/fd"))
            except (OSError, StopIteration):
                break
            ng = ticks(master) + sum(ticks(c) for c in children(master))
            o.write(f"{time.time():.3f} {ticks(agent)} {rss} {ng} {fds}\n")
            o.flush()
            time.sleep(1 - time.time() % 1)

def metrics(path):
    """Sums of the /metrics series we follow, by name (labels summed over)."""
    m = {}
    for l in open(path):
        if l.startswith("#") or not l.strip():
            continue
        name, v = l.rsplit(" ", 1)
        if name.startswith("whyslow_tracked_processes"):
            name = name.replace('"', "")
        else:
            name = re.sub(r"\{.*\}", "", name)
        m[name] = m.get(name, 0.0) + float(v)
    return m

def row(mpath, state, t, t0, rps, fds):
    """One phase-2 row from /metrics, against the previous one (kept in a state file)."""
    t, t0 = float(t), float(t0)
    m = metrics(mpath)
    cur = {"t": t, "cpu": m.get("whyslow_process_cpu_seconds_total", 0), "samples": m.get("whyslow_samples_total", 0),
           "lost": m.get("whyslow_lost_samples_total", 0)}
    prev = json.load(open(state)) if os.path.exists(state) else None
    json.dump(cur, open(state, "w"))
    if prev is None:
        return
    dt = t - prev["t"]
    rss = m.get("whyslow_process_resident_memory_bytes", 0) / 2**20
    direct = int(m.get("whyslow_tracked_processes{followed=directly}", 0))
    inh = int(m.get("whyslow_tracked_processes{followed=inherited}", 0))
    cpu = 100 * (cur["cpu"] - prev["cpu"]) / dt
    with open(os.path.join(os.path.dirname(state), "series.txt"), "a") as o:
        o.write(f"{t:.3f} {cur['cpu']} {rss:.2f} {rps}\n")
    print(f"    {t - t0:6.0f}  {rps:>9}  {cpu:8.2f}  {rss:7.1f}  {fds:>4}  {direct:>3}+{inh:<3}"
          f"  {(cur['samples'] - prev['samples']) / dt:9.0f}  {(cur['lost'] - prev['lost']) / dt:7.0f}"
          f"  {int(m.get('whyslow_windows_stored_total', 0)):7d}  {m.get('whyslow_store_disk_bytes', 0) / 2**20:6.1f}"
          f"  {int(m.get('whyslow_processes_held', 0)):4d}  {int(m.get('whyslow_symbolizer_resets_total', 0)):6d}")

def ab(path, drop_target):
    """Phase-1 summary from lines 'pair mode rps'."""
    rounds = [l.split() for l in open(path) if len(l.split()) == 3]
    off = [float(r[2]) for r in rounds if r[1] == "off"]
    on = [float(r[2]) for r in rounds if r[1] == "on"]
    pairs = {}
    for p, mode, v in rounds:
        pairs.setdefault(p, {})[mode] = float(v)
    ratios = [x["on"] / x["off"] for x in pairs.values() if "on" in x and "off" in x]
    mo, mn = statistics.mean(off), statistics.mean(on)
    print(f"  nginx throughput: off {mo:.0f} req/s, on {mn:.0f} req/s (means of {len(off)} rounds each)")
    print(f"    on/off {mn / mo:.4f}: drop {100 * (1 - mn / mo):.2f}% (target <= {drop_target}%); "
          f"pair ratios median {statistics.median(ratios):.4f}, min {min(ratios):.4f}, max {max(ratios):.4f}")

def summary(d, t_follow, t_end, cpu_follow, churn_name, nginx_target, churn_target, agent):
    """Phase-2 summary: CPU, RSS, per-second CPU, coverage of nginx, churn followed."""
    t_follow, t_end, cpu_follow = float(t_follow), float(t_end), float(cpu_follow)
    series = [[float(x) for x in l.split()] for l in open(f"{d}/series.txt")]
    secs = [[float(x) for x in l.split()] for l in open(f"{d}/persec.txt")]
    span = series[-1][0] - t_follow
    cpu = 100 * (series[-1][1] - cpu_follow) / span
    open(f"{d}/cpu.txt", "w").write(f"{cpu}\n")
    print(f"  agent CPU: {cpu:.2f}% of one core over {span:.0f} s under load (target <= 1%); "
          f"{cpu_follow:.2f} s to start and follow")
    rss = [r[2] for r in series]
    half = rss[len(rss) // 2:]
    print(f"  agent RSS (/metrics): min {min(rss):.1f} MB, max {max(rss):.1f} MB"
          f" (target <= 60 MB); first {rss[0]:.1f} -> last {rss[-1]:.1f} MB ({rss[-1] - rss[0]:+.1f} MB);"
          f" second half {min(half):.1f}..{max(half):.1f} MB")
    print(f"    RSS at start {rss[0]:.1f}, middle {rss[len(rss) // 2]:.1f}, end {rss[-1]:.1f} MB"
          f" (flat target: within 5 MB; spread of the second half {max(half) - min(half):.1f} MB)")
    per = []
    for a, b in zip(secs, secs[1:]):
        dt = b[0] - a[0]
        if 0.5 < dt < 2:
            per.append((b[0], 100 * (b[1] - a[1]) / TCK / dt))
    vals = sorted(v for _, v in per)
    q = lambda f: vals[min(len(vals) - 1, int(f * len(vals)))]
    print(f"  agent CPU per second ({len(vals)} s): median {q(0.5):.1f}%, p90 {q(0.9):.1f}%, p99 {q(0.99):.1f}%,"
          f" max {vals[-1]:.1f}%")
    cyc = [[] for _ in range(10)]
    for t, v in per:
        cyc[int(t - t_follow) % 10].append(v)
    print("    mean by second of the 10 s window cycle: " + " ".join(f"{statistics.mean(c):.1f}" for c in cyc if c))
    fds = [int(s[4]) for s in secs]
    print(f"  agent open fds: first {fds[0]}, last {fds[-1]}, max {max(fds)}")
    # Coverage: CPU samples of nginx the API answers for [follow, end] (asked while the agent ran, as a
    # user would: the store's layout is the agent's business) against 99 Hz x nginx's CPU time then.
    j = json.load(open(f"{d}/nginx.json"))
    total, lost = j.get("total_samples", 0), j.get("lost_samples", 0)
    ng = [s for s in secs if t_follow - 1 <= s[0] <= t_end + 1]
    ncpu = (ng[-1][3] - ng[0][3]) / TCK
    exp = 99 * ncpu
    m = json.load(open(f"{d}/state.json"))
    print(f"  nginx CPU samples stored (API): {total} of ~{exp:.0f} expected (99 Hz x {ncpu:.1f} CPU s) = "
          f"{100 * total / max(exp, 1):.1f}%")
    print(f"  lost samples: {m['lost']:.0f} in /metrics ({100 * m['lost'] / max(m['lost'] + m['samples'], 1):.2f}% of"
          f" {m['lost'] + m['samples']:.0f} records) by the last row; {lost} in nginx's stored windows")
    # Churn: started while the agent ran, and in the churn target's profile the API serves.
    started = [l.split() for l in open(f"{d}/churn.log")]
    started = [(float(t), int(p)) for t, p in started if t_follow <= float(t) <= t_end - 1]
    pids = {p for _, p in started}
    stored = {t["pid"] for t in json.load(open(f"{d}/churn.json")).get("threads", []) if t.get("samples", 0) > 0}
    print(f"  churn: {len(pids)} processes started while followed; {len(pids & stored)} in the API's profile"
          f" ({100 * len(pids & stored) / max(len(pids), 1):.1f}%)")
    end = metrics(f"{d}/end.metrics")
    print(f"  store (/metrics): {end.get('whyslow_store_windows', 0):.0f} windows,"
          f" {end.get('whyslow_store_disk_bytes', 0) / 2**20:.1f} MB on disk")

def ratio(old, new):
    """The agent's CPU of this build against the baseline's, from their summaries."""
    a, b = (float(open(f"{d}/cpu.txt").read()) for d in (old, new))
    print(f"  agent CPU side by side: baseline {a:.2f}%, this build {b:.2f}% of one core: {b / a:.2f}x")

globals()[sys.argv[1]](*sys.argv[2:])
EOF
h() { python3 "$OUT/h.py" "$@"; }

# nginx: 2 workers, a 600-byte file, no access log, on a free port.
NPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$OUT/nginx/html"
head -c 600 /dev/zero | tr '\0' x >"$OUT/nginx/html/index.html"
cat >"$OUT/nginx/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 2;
pid $OUT/nginx/nginx.pid;
error_log $OUT/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  server { listen 127.0.0.1:$NPORT; root $OUT/nginx/html; }
}
EOF
"$NGINX" -c "$OUT/nginx/nginx.conf" -p "$OUT/nginx/" -e "$OUT/nginx/error.log" >/dev/null 2>&1 &
NGINX_PID=$!
URL="http://127.0.0.1:$NPORT/"
for _ in $(seq 100); do curl -sf -o /dev/null "$URL" && break; sleep 0.1; done
curl -sf -o /dev/null "$URL" || { echo "serve_overhead: nginx did not start: $(cat "$OUT/nginx/error.log")" >&2; exit 1; }

workers() { pgrep -P "$NGINX_PID" | sort -n | tr '\n' ' ' || true; }
# Reloads nginx and waits for its two new workers (the old ones gone).
reload_nginx() {
  local old new p fresh
  old=" $(workers)"
  kill -HUP "$NGINX_PID"
  for _ in $(seq 200); do
    new=$(workers) fresh=1
    for p in $new; do case "$old" in *" $p "*) fresh=0 ;; esac; done
    [ "$fresh" = 1 ] && [ "$(wc -w <<<"$new")" -eq 2 ] && return 0
    sleep 0.05
  done
  echo "serve_overhead: nginx reload did not finish (workers: $(workers))" >&2
}

api() { curl -sf --max-time 10 "http://$ADDR$1" "${@:2}"; }
add_target() { api /api/v1/targets -X POST -H 'Content-Type: application/json' -d "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'; }
# Starts the agent on a port of its choosing with the two targets.
start_agent() {
  : >"$1.log"
  "$AGENT" serve --listen 127.0.0.1:0 --data-dir "$1" 2>"$1.log" &
  AGENT_PID=$!
  ADDR=""
  for _ in $(seq 300); do
    ADDR=$(sed -n 's|.*listening on http://\([^ ]*\) .*|\1|p' "$1.log")
    [ -n "$ADDR" ] && break
    alive "$AGENT_PID" || break
    sleep 0.1
  done
  [ -n "$ADDR" ] || { echo "serve_overhead: the agent did not start: $(cat "$1.log")" >&2; exit 1; }
  local spec='"sources":["cpu","offcpu"],"frequency":99,"window_s":10'
  NGINX_TARGET=$(add_target "{\"match\":{\"comm\":\"^$(basename "$NGINX")\$\"},$spec}")
  CHURN_TARGET=$(add_target "{\"match\":{\"comm\":\"^$(basename "$CHURN")\$\"},$spec}")
}
# Waits until the agent lists every pid given as followed (10 s at most).
wait_followed() {
  local listed p missing=""
  for _ in $(seq 100); do
    listed=" $(api /api/v1/processes | python3 -c 'import json,sys; print(" ".join(str(p["pid"]) for p in json.load(sys.stdin)))' || true) "
    missing=""
    for p in "$@"; do case "$listed" in *" $p "*) ;; *) missing+=" $p" ;; esac; done
    [ -z "$missing" ] && return 0
    sleep 0.1
  done
  echo "serve_overhead: not followed after 10 s:$missing" >&2
}
# wrk_rps SECONDS: nginx's requests per second over a wrk run.
wrk_rps() {
  wrk -t2 -c"$CONNS" -d"$1"s "$URL" >"$OUT/wrk.txt" 2>&1 || true
  if grep -qE "Non-2xx|Socket errors" "$OUT/wrk.txt"; then
    echo "serve_overhead: wrk: $(grep -E "Non-2xx|Socket errors" "$OUT/wrk.txt" | tr -s ' ')" >&2
  fi
  awk '/^Requests\/sec:/ {printf "%.0f\n", $2}' "$OUT/wrk.txt"
}

# The churn: one process a second, each logged with its start time.
(
  trap - EXIT INT TERM
  while [ ! -e "$OUT/churn.stop" ]; do
    "$CHURN" "${CHURN_ARGS[@]}" >/dev/null &
    echo "$(now) $!" >>"$OUT/churn.log"
    sleep 1
  done
  wait
) &
CHURN_PID=$!

echo "serve overhead: nginx (2 workers) under wrk -t2 -c$CONNS on $(nproc) CPUs, targets nginx + churn at 99 Hz"
echo "cpu+offcpu, window 10 s; a churn process ($CHURN_ARGS x 200 ms) starts every second throughout"
echo "  load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  phase 1: $ROUNDS pairs of ${ROUND_S} s rounds, agent off (not running) / on (ABBA order)"
wrk_rps 3 >/dev/null # warm-up
cpu=""
for i in $(seq "$ROUNDS"); do
  order="off on"
  [ $((i % 2)) -eq 0 ] && order="on off"
  for mode in $order; do
    if [ "$mode" = on ]; then
      start_agent "$OUT/ab$i"
      wait_followed "$NGINX_PID"
    fi
    reload_nginx
    # shellcheck disable=SC2046
    [ "$mode" = off ] || wait_followed $(workers)
    sleep 1
    rps=$(wrk_rps "$ROUND_S")
    if [ "$mode" = on ]; then
      cpu=$(api /metrics | awk '/^whyslow_process_cpu_seconds_total/ {print $2}' || true)
      stop_agent
      rm -rf "$OUT/ab$i"
    fi
    echo "$i $mode $rps" >>"$OUT/ab.txt"
    printf "    pair %d %-3s %9s req/s%s\n" "$i" "$mode" "$rps" "${cpu:+  (agent CPU since its start: $cpu s)}"
    cpu=""
  done
done
h ab "$OUT/ab.txt" 1

# phase2 NAME LABEL: one agent (the binary $AGENT) for DURATION seconds under the load, its figures.
phase2() {
  echo "  phase 2$2: one agent for $DURATION s; every $SAMPLE_S s: /metrics and wrk's req/s"
  local R="$OUT/$1" elapsed d rps fds t listed range
  mkdir -p "$R"
  ln -sf "$OUT/churn.log" "$R/churn.log"
  start_agent "$R/data"
  wait_followed "$NGINX_PID"
  reload_nginx
  # shellcheck disable=SC2046
  wait_followed $(workers)
  T_FOLLOW=$(now)
  CPU_FOLLOW=$(api /metrics | awk '/^whyslow_process_cpu_seconds_total/ {print $2}')
  python3 "$OUT/h.py" sampler "$AGENT_PID" "$NGINX_PID" "$R/persec.txt" &
  SAMPLER_PID=$!
  echo "         t    req/s  agentCPU%  RSS(MB)   fds  followed  samples/s  lost/s  windows  disk(MB)  held  resets"
  api /metrics >"$R/m.txt"
  h row "$R/m.txt" "$R/state.json" "$(now)" "$T_FOLLOW" - -
  elapsed=0
  while [ "$elapsed" -lt "$DURATION" ]; do
    d=$((DURATION - elapsed < SAMPLE_S ? DURATION - elapsed : SAMPLE_S))
    rps=$(wrk_rps "$d")
    api /metrics >"$R/m.txt" || true
    fds=$(ls "/proc/$AGENT_PID/fd" | wc -l)
    t=$(now)
    h row "$R/m.txt" "$R/state.json" "$t" "$T_FOLLOW" "${rps:-?}" "$fds"
    elapsed=$(python3 -c "print(int($t - $T_FOLLOW))")
  done
  listed=$(api /api/v1/processes | python3 -c 'import json,sys; print(" ".join("%s:%s" % (p["pid"], p["comm"]) for p in json.load(sys.stdin)))' || true)
  echo "  followed at the end: $listed (live: nginx $NGINX_PID $(workers)and at most one churn process)"
  T_END=$(now)
  # The windows covering the end are stored one window (10 s) later: then the API answers for the run.
  sleep 12
  range="from=$(python3 -c "print(int($T_FOLLOW))")&until=$(python3 -c "print(int($T_END) + 1)")"
  api "/api/v1/profile?target=$NGINX_TARGET&type=cpu&$range" >"$R/nginx.json" || echo '{}' >"$R/nginx.json"
  api "/api/v1/profile?target=$CHURN_TARGET&type=cpu&$range" >"$R/churn.json" || echo '{}' >"$R/churn.json"
  api /metrics >"$R/end.metrics" || : >"$R/end.metrics"
  stop "$SAMPLER_PID" TERM 2
  SAMPLER_PID=""
  stop_agent
  h summary "$R" "$T_FOLLOW" "$T_END" "$CPU_FOLLOW" "$(basename "$CHURN")" "$NGINX_TARGET" "$CHURN_TARGET" "$AGENT"
  echo "  load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
}
# BASELINE=/path/to/an/older/whyslow: phase 2 with it first, then with this build, in the same run
# (the same nginx, load and churn): the agent's CPU side by side.
if [ -n "${BASELINE:-}" ]; then
  NEW_AGENT="$AGENT"
  AGENT="$OUT/whyslow-baseline"
  cp "$BASELINE" "$AGENT"
  phase2 baseline " (baseline $BASELINE)"
  AGENT="$NEW_AGENT"
  phase2 run " (this build)"
  h ratio "$OUT/baseline" "$OUT/run"
else
  phase2 run ""
fi
