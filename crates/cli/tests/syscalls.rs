//! `whyslow syscalls` against real workloads: exact counts (known by construction, and checked against
//! strace where the loader adds calls of its own), decoded traces, issuing stacks, attach, errors.

mod common;

use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};

fn syscalls_json(args: &[&str]) -> Value {
    let mut all = vec!["syscalls", "--format", "json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(&all)).unwrap()
}

fn row<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["syscalls"].as_array().unwrap().iter().find(|r| r["name"] == name).unwrap_or(&Value::Null)
}

fn calls(v: &Value, name: &str) -> u64 {
    row(v, name)["calls"].as_u64().unwrap_or(0)
}

/// `strace -f -c` counts of the same command (the reference), or None where strace is missing.
fn strace_counts(cmd: &[&str]) -> Option<std::collections::HashMap<String, u64>> {
    let dir = tmp();
    let out = dir.path().join("strace.txt");
    let st = Command::new("strace")
        .env_remove("LD_LIBRARY_PATH")
        .args(["-f", "-c", "-o"])
        .arg(&out)
        .args(cmd)
        .status()
        .ok()?;
    assert!(st.success());
    let text = std::fs::read_to_string(out).unwrap();
    let mut m = std::collections::HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // % time, seconds, usecs/call, calls, [errors,] syscall
        if f.len() >= 5 && f[0].parse::<f64>().is_ok() {
            if let Ok(n) = f[3].parse::<u64>() {
                m.insert(f[f.len() - 1].to_string(), n);
            }
        }
    }
    Some(m)
}

#[test]
fn counts_are_exact_with_children_and_errnos() {
    let bin = workload("tzstat");
    let bin = bin.to_str().unwrap();
    // 3 processes x (20000 localtime+strftime, 1000 failing opens).
    let cmd = [bin, "20000", "1000", "2"];
    let mut args = vec!["--"];
    args.extend_from_slice(&cmd);
    let v = syscalls_json(&args);
    let open = row(&v, "openat");
    assert_eq!(open["errors"], 3000, "{open}");
    assert_eq!(open["errnos"]["ENOENT"], 3000, "{open}");
    assert_eq!(calls(&v, "exit_group"), 3);
    assert_eq!(calls(&v, "clone"), 2, "two forks");
    assert_eq!(calls(&v, "wait4"), 2);
    let stats = calls(&v, "newfstatat");
    assert!(stats >= 60000, "every localtime stats /etc/localtime: {stats}");
    assert_eq!(v["lost_events"], 0);
    let nf = row(&v, "newfstatat");
    let (p99, max, total) =
        (nf["p99_ns"].as_u64().unwrap(), nf["max_ns"].as_u64().unwrap(), nf["total_ns"].as_u64().unwrap());
    assert!(p99 > 0 && p99 <= max && total >= stats, "{nf}");
    if let Some(reference) = strace_counts(&cmd) {
        for name in ["newfstatat", "openat", "read", "mmap", "close", "wait4"] {
            assert_eq!(calls(&v, name), reference[name], "{name} vs strace -f -c");
        }
    }
}

/// Counts start at the command's successful exec, as strace -c counts: whyslow's forked child searching
/// PATH for the command (execve ENOENT per directory) is not the command's.
#[test]
fn counts_start_at_the_exec_of_the_command() {
    let v = syscalls_json(&["--", "true"]);
    let execve = row(&v, "execve");
    assert_eq!((execve["calls"].as_u64(), execve["errors"].as_u64()), (Some(1), Some(0)), "{execve}");
    if let Some(reference) = strace_counts(&["true"]) {
        for name in ["execve", "mmap", "openat", "close"] {
            assert_eq!(calls(&v, name), reference.get(name).copied().unwrap_or(0), "{name} vs strace -c");
        }
    }
}

#[test]
fn trace_decodes_paths_and_errors() {
    let bin = workload("tzstat");
    let out = ok(&["syscalls", "--trace", "newfstatat,openat", "--", bin.to_str().unwrap(), "5", "3"]);
    let enoent = out
        .lines()
        .filter(|l| l.contains("openat(AT_FDCWD, \"/nonexistent/whyslow-tzstat\", O_RDONLY) = -1 ENOENT <"))
        .count();
    assert_eq!(enoent, 3, "{out}");
    let tz = out.lines().filter(|l| l.contains("newfstatat(AT_FDCWD, \"/etc/localtime\",")).count();
    assert!((3..=5).contains(&tz), "one stat per localtime after the first load: {out}");
    assert!(out.contains("openat(AT_FDCWD, \"/etc/localtime\", O_RDONLY|O_CLOEXEC) = 3 <"), "{out}");
    // The summary follows the trace lines: strace -c's columns, then p99 and max in units.
    assert!(
        out.contains("% time     seconds  usecs/call     calls    errors         p99         max syscall"),
        "{out}"
    );
    let total = out.lines().find(|l| l.ends_with(" total")).unwrap();
    let max = total.split_whitespace().rev().nth(1).unwrap();
    assert!(["ns", "µs", "ms", "s"].iter().any(|u| max.ends_with(u)), "max in units: {total}");
}

#[test]
fn stacks_show_the_code_that_issues_each_syscall() {
    let dir = tmp();
    let data = dir.path().join("sys.data");
    let data = data.to_str().unwrap();
    let bin = workload("tzstat");
    let out = ok(&["syscalls", "--stacks", "-o", data, "--", bin.to_str().unwrap(), "2000", "10"]);
    assert!(out.contains("newfstatat: "), "{out}");
    assert!(out.contains("> main > work > __tz_convert > tzset_internal > __tzfile_read >"), "{out}");
    let r = report_json(data, &["--type", "syscalls"]);
    let counted: u64 = r["syscalls"].as_array().unwrap().iter().map(|s| s["calls"].as_u64().unwrap()).sum();
    let (kept, lost) = (r["total_samples"].as_u64().unwrap(), r["lost_samples"].as_u64().unwrap());
    // Every syscall entry is either a stack or a counted loss; the execve that starts the command enters
    // before the sampling is enabled (at exec), so it alone has no stack.
    assert_eq!(kept + lost, counted - 1, "stacks {kept} + lost {lost} vs counted {counted}");
    let total = |name: &str| function(&r, |n| n == name).map_or(0, |f| f["total"].as_u64().unwrap());
    assert!(total("newfstatat") > 100, "{kept} stacks kept");
    // Apart from the loader's few fstat calls, every stat comes from localtime, unwound without frame
    // pointers through glibc.
    assert!(total("tzset_internal") + 5 >= total("newfstatat"), "{r}");
    assert!(total("main") >= total("tzset_internal") && total("_start") >= total("main"));
    let svg = dir.path().join("sys.svg");
    ok(&["flamegraph", data, "--type", "syscalls", "-o", svg.to_str().unwrap()]);
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.contains("__tzfile_read") && svg.contains("newfstatat"));
}

#[test]
fn attach_counts_exactly_and_leaves_the_target_running() {
    let out = attach_to_waiting(
        &workload("tzstat"),
        &["3000", "7", "0", "wait"],
        &["syscalls", "--format", "json"],
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(calls(&v, "newfstatat"), 3000, "{v}");
    assert_eq!(row(&v, "openat")["errnos"]["ENOENT"], 7);
    assert_eq!(calls(&v, "exit_group"), 1);
}

#[test]
fn bad_syscall_names_and_targets_are_one_line_errors() {
    let err = fails(&["syscalls", "--trace", "newfstat", "--", "true"]);
    assert!(err.contains("unknown syscall 'newfstat'") && err.contains("newfstatat"), "{err}");
    let err = fails(&["syscalls", "-p", "999999999", "-d", "1"]);
    assert!(err.contains("no such process"), "{err}");
    let err = fails(&["syscalls", "--", "/nonexistent/cmd"]);
    assert!(err.contains("cannot run /nonexistent/cmd"), "{err}");
}

#[test]
fn sigterm_prints_what_was_counted_and_interval_refreshes() {
    let bin = workload("tzstat");
    let child = whyslow()
        .args(["syscalls", "--interval", "0.3", "--", bin.to_str().unwrap(), "1000000000", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: kill takes no pointers.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let refreshes = text.matches("whyslow syscalls: ").count();
    assert!(refreshes >= 3, "a table every 0.3 s for 1.5 s: {refreshes}\n{text}");
    let last = text.rsplit("whyslow syscalls: ").next().unwrap();
    let stats = last
        .lines()
        .find(|l| l.ends_with(" newfstatat"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(stats.is_some_and(|n| n > 1000), "final summary after SIGTERM: {last}");
}

#[test]
fn without_bpf_permission_the_error_names_the_fix() {
    if !std::path::Path::new("/usr/sbin/runuser").exists() {
        eprintln!("runuser missing: skipping");
        return;
    }
    let out = Command::new("/usr/sbin/runuser")
        .args(["-u", "nobody", "--", env!("CARGO_BIN_EXE_whyslow"), "syscalls", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("not allowed to load eBPF") && err.contains("CAP_BPF"), "{err}");
}
