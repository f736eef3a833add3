//! Shared helpers for integration tests: build the workloads once, run the real `whyslow` binary.

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Path of a workload binary, building all of them (once per test process) with their Makefile.
pub fn workload(name: &str) -> PathBuf {
    static BUILD: Once = Once::new();
    BUILD.call_once(|| {
        let dir = root().join("tests/workloads");
        let path = format!("/usr/local/go/bin:{}", std::env::var("PATH").unwrap_or_default());
        let st =
            Command::new("make").arg("-s").arg("-C").arg(&dir).env("PATH", path).status().expect("run make");
        assert!(st.success(), "building tests/workloads failed");
    });
    root().join("tests/workloads/bin").join(name)
}

/// The whyslow binary, without cargo's LD_LIBRARY_PATH: launched workloads must make exactly the calls
/// they make outside the test harness (the loader would otherwise search every listed directory).
pub fn whyslow() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_whyslow"));
    c.env_remove("LD_LIBRARY_PATH");
    c
}

pub fn run(args: &[&str]) -> Output {
    let out = whyslow().args(args).output().expect("run whyslow");
    out
}

/// Runs whyslow and insists on success.
pub fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "whyslow {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs whyslow expecting failure; returns stderr, whose error must be one line (beside the line an
/// attached run announces itself with, "whyslow: recording pid N (Ctrl-C to stop)").
pub fn fails(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "whyslow {args:?} should have failed");
    let err = String::from_utf8(out.stderr).unwrap();
    let said = err.trim_end().lines().filter(|l| !l.ends_with("(Ctrl-C to stop)")).count();
    assert_eq!(said, 1, "error should be one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Attaches `whyslow ARGS -p PID` to a workload started with `wait` as its last argument: the workload
/// prints its pid and waits; whyslow announces "... pid PID"; then the workload is released
/// and runs to its normal end, and whyslow ends with it. Returns whyslow's stdout.
pub fn attach_to_waiting(workload_path: &Path, workload_args: &[&str], args: &[&str]) -> String {
    attach_to_waiting_with_output(workload_path, workload_args, args).0
}

/// As [`attach_to_waiting`], and what the workload printed after its pid.
pub fn attach_to_waiting_with_output(
    workload_path: &Path,
    workload_args: &[&str],
    args: &[&str],
) -> (String, String) {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;
    let mut target = Command::new(workload_path)
        .args(workload_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pid = String::new();
    // Kept open until the target ends: it may write more.
    let mut target_out = BufReader::new(target.stdout.take().unwrap());
    target_out.read_line(&mut pid).unwrap();
    let pid = pid.trim().to_string();
    let mut ws = whyslow()
        .args(args)
        .args(["-p", &pid])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(ws.stderr.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains(&format!(" pid {pid} ")), "{line}");
    target.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut printed = String::new();
    target_out.read_to_string(&mut printed).unwrap();
    assert!(target.wait().unwrap().success(), "the target runs to its normal end");
    let out = ws.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8(out.stdout).unwrap(), printed)
}

/// Held by the tests of one test program that measure time (throughput under load, CPU time of
/// compared runs): on two cores, a second such test beside one would distort what it measures.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    MEASURING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ends a whyslow process a test started as a user would (SIGTERM: it removes its temporary files),
/// and kills it if it has not ended within 10 s.
pub fn terminate(child: &mut std::process::Child) {
    // SAFETY: kill takes no pointers.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    for _ in 0..100 {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Records `cmd` into `dir/name.data` and returns the path.
pub fn record(dir: &Path, name: &str, extra: &[&str], cmd: &[&str]) -> String {
    let data = dir.join(format!("{name}.data")).to_string_lossy().into_owned();
    let mut args = vec!["record", "-q", "-o", &data];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(cmd);
    ok(&args);
    data
}

pub fn report_json(data: &str, extra: &[&str]) -> Value {
    let mut args = vec!["report", data, "--format", "json", "--limit", "1000"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&args)).unwrap()
}

/// The function entry whose name satisfies `pred`, with the largest total.
/// Share of a doctor report's threads' working time (running + blocked + waiting for a CPU) in one
/// state (`running_ns`, `blocked_ns`, `runnable_ns`).
pub fn working_pct(report: &Value, state: &str) -> f64 {
    let w = &report["wall"];
    let ns = |k: &str| w[k].as_f64().unwrap();
    100.0 * ns(state) / (ns("running_ns") + ns("blocked_ns") + ns("runnable_ns"))
}

pub fn function(report: &Value, pred: impl Fn(&str) -> bool) -> Option<&Value> {
    report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| pred(f["name"].as_str().unwrap()))
        .max_by_key(|f| f["total"].as_i64().unwrap())
}

pub fn self_pct(report: &Value, name: &str) -> f64 {
    function(report, |n| n == name).map(|f| f["self_pct"].as_f64().unwrap()).unwrap_or(0.0)
}

pub fn total_pct(report: &Value, name: &str) -> f64 {
    function(report, |n| n == name).map(|f| f["total_pct"].as_f64().unwrap()).unwrap_or(0.0)
}

/// burn_a/b/c of the cpu_split workload as percent of their sum (startup and kernel noise left out).
pub fn split_shares(report: &Value) -> [f64; 3] {
    split_shares_of(report, SPLIT_WORKERS)
}

/// cpu_split's workers, by name.
pub const SPLIT_WORKERS: [&str; 3] = ["burn_a", "burn_b", "burn_c"];

/// The self shares of cpu_split's workers named `names` (for a stripped build), as % of the three.
pub fn split_shares_of(report: &Value, names: [&str; 3]) -> [f64; 3] {
    let v = names.map(|n| self_pct(report, n));
    let sum: f64 = v.iter().sum();
    // Most, not nearly all: on a busy machine more of a CPU-bound program's samples land in the kernel
    // (scheduler and interrupt paths while it is switched in and out): 80% was seen under load.
    assert!(sum > 60.0, "cpu_split's workers should hold most samples: {v:?}");
    v.map(|x| 100.0 * x / sum)
}

/// cpu_split's 60/30/10 split, each share within 1 point (the workload's own variation) plus four
/// standard errors of a share estimated from the samples the workers hold (a binomial proportion), and
/// never tighter than 3 points. With 1,300 samples in the workers that is 6.4 points for burn_a and 4.3
/// for burn_c; with 10,000, the 3-point floor. (A fixed 3 points failed a suite run at 1,345 samples:
/// 57.1/33.4/9.5 is 2.6 standard errors out for burn_b.)
pub fn assert_split(report: &Value) {
    assert_split_of(report, SPLIT_WORKERS)
}

/// [`assert_split`] of the workers named `names`.
pub fn assert_split_of(report: &Value, names: [&str; 3]) {
    let s = split_shares_of(report, names);
    let in_workers = match report["unit"].as_str() {
        Some("samples" | "count") => {
            let share: f64 = names.iter().map(|f| self_pct(report, f)).sum();
            report["total_samples"].as_f64().unwrap_or(0.0) * share / 100.0
        }
        _ => f64::INFINITY, // values in time units: no sample count to derive the error from
    };
    for (got, want) in s.iter().zip([60.0, 30.0, 10.0]) {
        let p = want / 100.0;
        let tol = (1.0 + 400.0 * (p * (1.0 - p) / in_workers).sqrt()).max(3.0);
        assert!(
            (got - want).abs() <= tol,
            "shares {s:.1?} vs 60/30/10: {got:.1} is {:.1} points from {want} (tolerance {tol:.1} at {in_workers:.0} samples)",
            (got - want).abs()
        );
    }
}

/// The newest pyenv CPython 3.`minor`, if installed.
pub fn pyenv_python(minor: u8) -> Option<PathBuf> {
    let home = std::env::var("HOME").ok()?;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(format!("{home}/.pyenv/versions"))
        .ok()?
        .flatten()
        .map(|d| d.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("3.{minor}."))))
        .collect();
    dirs.sort();
    let exe = dirs.pop()?.join(format!("bin/python3.{minor}"));
    exe.exists().then_some(exe)
}
