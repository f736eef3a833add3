#!/usr/bin/env bash
# The live doctor on a real database (issue 37's held-out case): PostgreSQL under pgbench (TPC-B-like;
# every transaction's commit waits for its WAL flush, XLogFlush -> fdatasync). `whyslow doctor --comm
# postgres -d $D` must name blocking-io there, from syscall counts sampled under the probe budget; and
# what watching costs pgbench's transactions/s, as ABBA blocks like doctor_cost.sh's (the load runs
# throughout; commits are counted by the server over the doctor's run and over plain windows as long).
# WHYSLOW_OLD=path watches with an older build too, in the same blocks (its own ratios).
source "$(dirname "$0")/lib.sh"
needs_root "postgresql and the probes"
needs_build
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v pgbench >/dev/null; then
  apt_install postgresql
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
id postgres >/dev/null 2>&1 || useradd --system postgres
D=${D:-10}
BLOCKS=${BLOCKS:-3}
PG="$OUT/pg"
mkdir -p "$PG" && chown postgres "$OUT" "$PG"
as_pg() { runuser -u postgres -- "$@"; }
as_pg "$PGBIN/initdb" -D "$PG/data" -A trust >/dev/null
# A socket in the run's directory, no TCP: nothing else on the machine is touched.
printf "port = 5432\nunix_socket_directories = '%s'\nlisten_addresses = ''\n" "$PG" >>"$PG/data/postgresql.conf"
as_pg "$PGBIN/pg_ctl" -D "$PG/data" -l "$PG/log" -w start >/dev/null
LOAD=
trap 'kill $LOAD 2>/dev/null; as_pg "$PGBIN/pg_ctl" -D "$PG/data" -m immediate stop >/dev/null 2>&1; rm -rf "$OUT"' EXIT
as_pg pgbench -h "$PG" -i -s 5 postgres >/dev/null 2>&1
as_pg pgbench -h "$PG" -c 4 -T 100000 postgres >/dev/null 2>&1 &
LOAD=$!
commits() { as_pg psql -h "$PG" -tAc "select xact_commit from pg_stat_database where datname = 'postgres'" postgres; }
# doctor [BINARY]: one watch by BINARY (default $WHYSLOW).
doctor() {
  "${1:-$WHYSLOW}" doctor --comm postgres -d "$D" --format json -o "$OUT/d.data" >"$OUT/doctor.json" \
    2>"$OUT/doctor.err" || { cat "$OUT/doctor.err" >&2; return 1; }
}
# tps CMD...: commits per second while CMD runs (see `window`), and the seconds.
tps() {
  local n secs
  read -r n secs < <(window commits "$@")
  python3 -c "print(f'{$n / $secs:.0f} $secs')"
}
sleep 2
read -r _ T < <(tps doctor)
echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') under pgbench -c 4 (scale 5), commits/s while"
echo "  \`whyslow doctor --comm postgres -d $D\` watches it (0.5 s after its start to its end: $T s) vs plain windows"
echo "  as long; $BLOCKS ABBA blocks; $(nproc) CPUs, load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT/doctor.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
f = r["findings"]
print("  findings of the first run:", ", ".join(x["id"] for x in f) or "none")
for x in f[:1]:
    print("   ", x["title"], f"({x['impact_pct']:.1f}% of wall)")
    for e in x["evidence"][:3]:
        print("      -", e)
for n in r["notes"]:
    if n.startswith(("probes stopped", "syscall counters:")):
        print("    note:", n)
PY
plain_runs=() ratios=() old_ratios=()
for b in $(seq "$BLOCKS"); do
  read -r a1 _ < <(tps sleep "$(python3 -c "print($T + 0.5)")")
  if [ -n "${WHYSLOW_OLD:-}" ]; then
    # Each build as near the plain windows as the other over the blocks: new, old, old, new, then
    # old, new, new, old.
    first=$WHYSLOW second=$WHYSLOW_OLD
    [ $((b % 2)) = 0 ] && first=$WHYSLOW_OLD second=$WHYSLOW
    read -r f1 _ < <(tps doctor "$first")
    read -r s1 _ < <(tps doctor "$second")
    read -r s2 _ < <(tps doctor "$second")
    read -r f2 _ < <(tps doctor "$first")
    if [ "$first" = "$WHYSLOW" ]; then d1=$f1 d2=$f2 o1=$s1 o2=$s2; else d1=$s1 d2=$s2 o1=$f1 o2=$f2; fi
  else
    read -r d1 _ < <(tps doctor)
    read -r d2 _ < <(tps doctor)
  fi
  read -r a2 _ < <(tps sleep "$(python3 -c "print($T + 0.5)")")
  plain_runs+=("$a1" "$a2")
  ratios+=("$(ratio "$d1" "$a1")" "$(ratio "$d2" "$a2")")
  printf "  block %d: plain %6s  doctor %6s  doctor %6s  plain %6s commits/s  ratios %s %s\n" "$b" "$a1" "$d1" "$d2" \
    "$a2" "${ratios[-2]}" "${ratios[-1]}"
  if [ -n "${WHYSLOW_OLD:-}" ]; then
    old_ratios+=("$(ratio "$o1" "$a1")" "$(ratio "$o2" "$a2")")
    printf "           old build: doctor %6s  doctor %6s commits/s  ratios %s %s\n" "$o1" "$o2" \
      "${old_ratios[-2]}" "${old_ratios[-1]}"
  fi
done
abba_summary "commits/s" "${ratios[*]}" "${plain_runs[*]}"
[ -n "${WHYSLOW_OLD:-}" ] && abba_summary "commits/s, old build ($WHYSLOW_OLD)" "${old_ratios[*]}" "${plain_runs[*]}"
true
