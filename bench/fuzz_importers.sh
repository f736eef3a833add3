#!/usr/bin/env bash
# Fuzzing every importer for a fixed time (issue 13): crates/import/tests/fuzz.rs in release mode, SECS
# seconds per format (default 600) one after the other: perf.data, pprof, folded stacks, perf script and
# whyslow's recording file. Prints per format the mutants tried, decoded and refused (with the commonest
# reasons), the slowest input, the most memory one check held, and the crashes: a panic (even one an
# importer catches), an error of several lines, too much memory, or a hang or abort of the process.
# Panicking inputs are saved as target/fuzz/tmp/fuzz/crash-FORMAT-HASH; the input that killed the process
# stays in target/fuzz/tmp/fuzz/current-FORMAT. Add each to crates/import/tests/corpus/ once fixed.
#
# Built in its own target directory with overflow checks on, as in the debug test (except the perf.data
# parser crates, as in Cargo.toml's dev profile), so an overflow is a crash here too.
# Usage: bench/fuzz_importers.sh [FORMAT...]  (FORMAT: perf_data pprof folded perf_script recording)
source "$(dirname "$0")/lib.sh"
SECS=${SECS:-600}
SEED=${SEED:-$(date +%s)}
FORMATS=("$@")
[ ${#FORMATS[@]} -gt 0 ] || FORMATS=(perf_data pprof folded perf_script recording)
export CARGO_TARGET_DIR="$ROOT/target/fuzz"
CFG=(--config profile.release.overflow-checks=true
     --config profile.release.package.linux-perf-data.overflow-checks=false
     --config profile.release.package.linux-perf-event-reader.overflow-checks=false)
cd "$ROOT"
make -s -C tests/workloads >/dev/null  # the binaries the perf.data corpus names
# Built once: the formats then run the same binary, whatever changes in the tree meanwhile.
BIN=$(cargo test --release --locked "${CFG[@]}" -q -p whyslow-import --test fuzz --no-run \
    --message-format=json | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "fuzz" and m.get("executable"):
        print(m["executable"])')
DIR="$CARGO_TARGET_DIR/tmp/fuzz"
mkdir -p "$DIR"
echo "fuzzing the importers: ${SECS} s per format, seed $SEED"
failed=0
for f in "${FORMATS[@]}"; do
  log="$DIR/log-$f"  # the whole output
  set +e
  WHYSLOW_FUZZ_SECS=$SECS WHYSLOW_FUZZ_SEED=$SEED "$BIN" --exact "$f" --nocapture >"$log" 2>&1
  rc=$?
  set -e
  grep -E '^(fuzz |  +[0-9]+ (refused|crashed))' "$log" || true
  if [ $rc -ne 0 ]; then
    failed=1
    if ! grep -q "^fuzz [^:]*: [0-9]* mutants" "$log"; then
      # The process died (abort, hang, stack overflow, out of memory): its input is the current one.
      name=$(echo "$f" | tr _ -); [ "$f" = perf_data ] && name=perf.data
      keep="$DIR/crash-$name-died-$(date +%s)"
      cp "$DIR/current-$name" "$keep" 2>/dev/null || true
      echo "fuzz $name: the test process died (exit $rc); its input is saved as $keep"
      grep -E 'HANG|memory allocation|overflow|SIG|fatal' "$log" | head -5 || true
    fi
  fi
done
exit $failed
