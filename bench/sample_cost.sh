#!/usr/bin/env bash
# What one CPU sample costs whyslow itself: ns of whyslow's own CPU (user + system, from wait4's rusage)
# per sample of `record -p` at 999 Hz on a CPU-bound process (tests/workloads spin, or THREADS of
# tests/workloads threads). Each build records the same process for SHORT and LONG seconds, RUNS
# interleaved times each; the difference of its median CPU time over the difference of its median samples
# cancels what a run pays once (loading the eBPF programs, reading symbols, writing the file), which is
# most of a short run's CPU. WHYSLOW_OLD=path measures an older build beside WHYSLOW (default
# target/release/whyslow) in the same run: keep a copy of the binary built from main before a change.
#   bench/sample_cost.sh                         # this build alone
#   WHYSLOW_OLD=/tmp/whyslow-main bench/sample_cost.sh
# Env: RUNS (default 3), SHORT (2), LONG (8), FREQ (999), EXTRA (more record options, e.g. "--offcpu").
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}
SHORT=${SHORT:-2}
LONG=${LONG:-8}
FREQ=${FREQ:-999}
EXTRA=${EXTRA:-}
builds=("new=$WHYSLOW")
[ -n "${WHYSLOW_OLD:-}" ] && builds=("old=$WHYSLOW_OLD" "${builds[@]}")
python3 - "$W/spin" "$OUT" "$RUNS" "$SHORT" "$LONG" "$FREQ" "$EXTRA" "${builds[@]}" <<'PY'
import json, os, statistics as st, subprocess, sys
spin, out, runs, short, long_, freq, extra = sys.argv[1:8]
runs, short, long_ = int(runs), float(short), float(long_)
builds = [b.split("=", 1) for b in sys.argv[8:]]
target = subprocess.Popen([spin], stdout=subprocess.PIPE, text=True)
pid = int(target.stdout.readline())

def one(binary, secs):
    """whyslow's CPU seconds and the samples it kept, for one run of `secs`."""
    data = os.path.join(out, "s.data")
    cmd = [binary, "record", "-q", "-p", str(pid), "-F", freq, "-d", str(secs), "-o", data] + extra.split()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"sample_cost.sh: {' '.join(cmd)} failed ({status})")
    rep = json.loads(subprocess.run([binary, "report", data, "--format", "json"], capture_output=True,
                                    check=True).stdout)
    return ru.ru_utime + ru.ru_stime, rep["total_samples"], rep["lost_samples"]

got = {(name, d): [] for name, _ in builds for d in (short, long_)}
try:
    for _ in range(runs):
        for name, binary in builds:
            for d in (short, long_):
                got[(name, d)].append(one(binary, d))
finally:
    target.terminate()
    target.wait()
print(f"whyslow's own CPU per sample: record -p of a CPU-bound process at {freq} Hz{' ' + extra if extra else ''}, "
      f"{short:g} s and {long_:g} s runs, {runs} interleaved runs each, medians")
per = {}
for name, binary in builds:
    cpu = {d: st.median(r[0] for r in got[(name, d)]) for d in (short, long_)}
    n = {d: st.median(r[1] for r in got[(name, d)]) for d in (short, long_)}
    lost = sum(r[2] for d in (short, long_) for r in got[(name, d)])
    ns = (cpu[long_] - cpu[short]) * 1e9 / max(n[long_] - n[short], 1)
    per[name] = ns
    print(f"  {name:4} {binary}")
    print(f"       {short:g} s: {cpu[short] * 1e3:7.1f} ms CPU, {n[short]:6.0f} samples;"
          f"  {long_:g} s: {cpu[long_] * 1e3:7.1f} ms CPU, {n[long_]:6.0f} samples; {lost} lost")
    print(f"       {ns:8.0f} ns per sample (the difference of the two)")
if "old" in per and per["new"] > 0:
    print(f"  old/new: {per['old'] / per['new']:.2f}x")
PY
