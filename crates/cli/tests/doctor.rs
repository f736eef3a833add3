//! `whyslow doctor` on one workload per rule (tests/workloads/doctor/): the bad variant ranks the rule's
//! finding in the top 3, the fixed variant does not raise it.

mod common;

use common::{fails, ok, whyslow, workload};
use serde_json::Value;

/// Runs the doctor on a workload and returns its JSON report.
fn doctor(prog: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d.data");
    let bin = workload(prog);
    let mut cmd = whyslow();
    cmd.args(["doctor", "--format", "json", "-o"]).arg(&data).arg("--").arg(&bin).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "doctor {prog} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ids(report: &Value) -> Vec<String> {
    report["findings"].as_array().unwrap().iter().map(|f| f["id"].as_str().unwrap().to_string()).collect()
}

/// The bad variant (no argument) ranks `rule` in the top 3; the fixed one (`fixed`) does not raise it.
fn check_rule(rule: &str, bad: &str, fixed: &str, fixed_args: &[&str]) {
    let report = doctor(bad, &[], &[]);
    let found = ids(&report);
    let rank = found.iter().position(|id| id == rule);
    assert!(rank.is_some_and(|r| r < 3), "{rule} not in the top 3 for {bad}: {found:?}\n{report:#}");
    let f = &report["findings"][rank.unwrap()];
    assert!(
        f["impact_pct"].as_f64().unwrap() > 0.0 && !f["evidence"].as_array().unwrap().is_empty(),
        "{f:#}"
    );
    let clean = ids(&doctor(fixed, fixed_args, &[]));
    assert!(!clean.contains(&rule.to_string()), "{rule} raised on the fixed variant of {fixed}: {clean:?}");
    println!("{rule}: bad {found:?} (rank {}), fixed {clean:?}", rank.unwrap() + 1);
}

#[test]
fn tz_stat_storm() {
    check_rule("tz-stat-storm", "doctor_tzlog", "doctor_tzlog", &["fixed"]);
}

#[test]
fn hot_logging() {
    check_rule("hot-logging", "doctor_reqlog", "doctor_reqlog", &["fixed"]);
}

#[test]
fn small_writes() {
    check_rule("small-writes", "doctor_emitter", "doctor_emitter", &["fixed"]);
}

#[test]
fn alloc_churn() {
    check_rule("alloc-churn", "doctor_churn", "doctor_churn", &["fixed"]);
}

/// The allocation probes of doctor_churn (a single thread allocating millions of times) would cost many
/// times its own run; phase 2 stops them once their estimated cost passes the budget (5% of the target's
/// CPU plus a 20 ms allowance), at most one 100 ms check interval of probe time later, and says so; the
/// allocation sites counted until then still back the finding, as rates over that window.
#[test]
fn probes_stop_at_the_budget() {
    let report = doctor("doctor_churn", &[], &[]);
    let notes: Vec<&str> = report["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    let note = notes.iter().find(|n| n.starts_with("probes stopped")).unwrap_or_else(|| panic!("{notes:?}"));
    // "probes stopped after S s: H hits cost about C ms, past the budget of 5% of the target's T ms of CPU"
    let num = |after: &str| -> f64 {
        let rest = &note[note.find(after).unwrap() + after.len()..];
        rest.split(|c: char| !(c.is_ascii_digit() || c == '.')).next().unwrap().parse().unwrap()
    };
    let (cost, cpu) = (num("cost about "), num("target's "));
    assert!(cost > 0.05 * cpu + 20.0, "stopped only past the budget: {note}");
    assert!(cost <= 0.05 * cpu + 20.0 + 100.0, "within one check interval of it: {note}");
    let churn = report["findings"].as_array().unwrap().iter().find(|f| f["id"] == "alloc-churn");
    let evidence = churn.map(|f| f["evidence"].to_string()).unwrap_or_default();
    assert!(evidence.contains("allocations counted exactly in"), "{report:#}");
}

#[test]
fn excess_copying() {
    check_rule("excess-copying", "doctor_concat", "doctor_concat", &["fixed"]);
}

#[test]
fn protobuf_reflection() {
    check_rule("protobuf-reflection", "doctor_pbserial", "doctor_pbserial", &["fixed"]);
}

#[test]
fn reflection_dispatch() {
    check_rule("reflection-dispatch", "doctor_godispatch", "doctor_godispatch", &["fixed"]);
}

#[test]
fn gc_pressure() {
    check_rule("gc-pressure", "doctor_gogc", "doctor_gogc", &["fixed"]);
}

#[test]
fn redundant_calls() {
    check_rule("redundant-calls", "doctor_frames", "doctor_frames", &["fixed"]);
}

#[test]
fn tiny_container_lookups() {
    check_rule("tiny-container-lookups", "doctor_headers", "doctor_headers", &["fixed"]);
}

#[test]
fn unoptimized_build() {
    check_rule("unoptimized-build", "doctor_optwork_O0", "doctor_optwork_O2", &[]);
}

#[test]
fn lock_contention() {
    check_rule("lock-contention", "doctor_lockbox", "doctor_lockbox", &["fixed"]);
}

#[test]
fn blocking_io() {
    // The journal is written where the test's target dir is (a real disk: tmpfs would make syncs free).
    let dir = env!("CARGO_TARGET_TMPDIR");
    let report = doctor("doctor_journal", &["bad", dir], &[]);
    let found = ids(&report);
    assert!(found.iter().take(3).any(|id| id == "blocking-io"), "{found:?}");
    let clean = ids(&doctor("doctor_journal", &["fixed", dir], &[]));
    assert!(!clean.contains(&"blocking-io".to_string()), "{clean:?}");
    blocking_io_in_sqlite3();
}

/// A real program from apt: sqlite3 inserting 2000 rows, each statement its own transaction (an
/// fdatasync per row), then the same rows in one transaction. Called by `blocking_io` so that no other
/// test syncs to the disk at the same time (the good variant's few syncs would slow down).
fn blocking_io_in_sqlite3() {
    let dir = tempfile::Builder::new().tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let run = |transaction: bool| {
        let sql = dir.path().join("insert.sql");
        let mut text = String::from("create table t(a, b);\n");
        text += if transaction { "begin;\n" } else { "" };
        for i in 0..2000 {
            text += &format!("insert into t values({i}, 'row {i}');\n");
        }
        text += if transaction { "commit;\n" } else { "" };
        std::fs::write(&sql, text).unwrap();
        let db = dir.path().join(format!("t{transaction}.db"));
        let out = whyslow()
            .args(["doctor", "--format", "json", "-o"])
            .arg(dir.path().join("s.data"))
            .args(["--", "sqlite3"])
            .arg(&db)
            .arg(format!(".read {}", sql.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let bad = run(false);
    assert_eq!(ids(&bad).first().map(String::as_str), Some("blocking-io"), "{bad:#}");
    assert!(bad["findings"][0]["impact_pct"].as_f64().unwrap() > 30.0, "{bad:#}");
    let good = run(true);
    assert!(!ids(&good).contains(&"blocking-io".to_string()), "{good:#}");
}

/// A saved recording is diagnosed alike; the second phase's exact call counts travel with it.
#[test]
fn diagnoses_a_saved_recording_and_rejects_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("frames.data");
    let bin = workload("doctor_frames");
    let live = ok(&["doctor", "--format", "json", "-o", data.to_str().unwrap(), "--", bin.to_str().unwrap()]);
    let saved = ok(&["doctor", "--format", "json", data.to_str().unwrap()]);
    let (live, saved): (Value, Value) =
        (serde_json::from_str(&live).unwrap(), serde_json::from_str(&saved).unwrap());
    assert_eq!(live["findings"], saved["findings"]);
    assert_eq!(ids(&saved)[0], "redundant-calls");
    let text = ok(&["doctor", data.to_str().unwrap()]);
    assert!(text.contains("1. [redundant-calls]") && text.contains("hot paths:"), "{text}");
    let err = fails(&["doctor", data.to_str().unwrap(), "--", "true"]);
    assert!(err.contains("not both"), "{err}");
    let err = fails(&["doctor", "/nonexistent.data"]);
    assert!(err.contains("/nonexistent.data"), "{err}");
    let err = fails(&["doctor", "--", "/no/such/program"]);
    assert!(err.contains("/no/such/program"), "{err}");
}
