#!/usr/bin/env bash
# What one CPU sample costs whyslow itself: ns of whyslow's own CPU (all its threads, from
# /proc/PID/task/*/schedstat) per sample of `record -p` at 999 Hz on a CPU-bound process (tests/workloads
# spin). The start (loading the eBPF programs, most of a short run's CPU) and the end (symbolizing,
# writing) are left out: whyslow's CPU is read over a window from 1 s after its events are open to 1 s
# before the run ends, and the samples of that window are the target's CPU time in it times the rate
# (cpu-clock samples per second of the target's CPU). WHYSLOW_OLD=path measures an older build beside
# WHYSLOW (default target/release/whyslow) in the same run, interleaved: keep a copy of the binary built
# from main before a change.
#   bench/sample_cost.sh                         # this build alone
#   WHYSLOW_OLD=/tmp/whyslow-main bench/sample_cost.sh
# Env: RUNS (default 3), SECS (12), FREQ (999), EXTRA (more record options, e.g. "--offcpu").
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
SECS=${SECS:-12}
FREQ=${FREQ:-999}
EXTRA=${EXTRA:-}
builds=("new=$WHYSLOW")
[ -n "${WHYSLOW_OLD:-}" ] && builds=("old=$WHYSLOW_OLD" "${builds[@]}")
python3 - "$W/spin" "$OUT" "$RUNS" "$SECS" "$FREQ" "$EXTRA" "${builds[@]}" <<'PY'
import glob, os, statistics as st, subprocess, sys, time
spin, out, runs, secs, freq, extra = sys.argv[1:7]
runs, secs = int(runs), float(secs)
builds = [b.split("=", 1) for b in sys.argv[7:]]
target = subprocess.Popen([spin], stdout=subprocess.PIPE, text=True)
pid = int(target.stdout.readline())

def cpu_ns(p):
    """CPU time of every thread of process p, in ns (schedstat: no 10 ms ticks)."""
    total = 0
    for f in glob.glob(f"/proc/{p}/task/*/schedstat"):
        try:
            total += int(open(f).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total

def perf_fds(p):
    n = 0
    for f in glob.glob(f"/proc/{p}/fd/*"):
        try:
            n += os.readlink(f) == "anon_inode:[perf_event]"
        except OSError:
            pass
    return n

def one(binary):
    """whyslow's CPU ns per sample over the middle of one run of SECS."""
    cmd = [binary, "record", "-q", "-p", str(pid), "-F", freq, "-d", str(secs), "-o", os.path.join(out, "s.data")]
    p = subprocess.Popen(cmd + extra.split(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.monotonic()
    while perf_fds(p.pid) == 0 and p.poll() is None:
        time.sleep(0.01)
    time.sleep(1)
    # The run ends SECS after its events opened (about when they are counted from here).
    window = secs - (time.monotonic() - t) - 1
    a, ta = cpu_ns(p.pid), cpu_ns(pid)
    time.sleep(max(window, 1))
    b, tb = cpu_ns(p.pid), cpu_ns(pid)
    if p.wait() != 0:
        sys.exit(f"sample_cost.sh: {' '.join(cmd)} failed")
    samples = (tb - ta) / 1e9 * float(freq)
    return (b - a) / max(samples, 1), samples

got = {name: [] for name, _ in builds}
try:
    for _ in range(runs):
        for name, binary in builds:
            got[name].append(one(binary))
finally:
    target.terminate()
    target.wait()
print(f"whyslow's own CPU per sample: record -p of a CPU-bound process at {freq} Hz{' ' + extra if extra else ''}, "
      f"{secs:g} s runs (start and end left out), {runs} interleaved runs each, median")
per = {}
for name, binary in builds:
    ns = [r[0] for r in got[name]]
    per[name] = st.median(ns)
    print(f"  {name:4} {per[name]:7.0f} ns per sample  (runs: {' '.join(f'{x:.0f}' for x in ns)}; "
          f"~{st.median(r[1] for r in got[name]):.0f} samples in each window)  {binary}")
if "old" in per and per["new"] > 0:
    print(f"  old/new: {per['old'] / per['new']:.2f}x")
PY
