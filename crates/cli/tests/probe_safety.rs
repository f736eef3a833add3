//! Probes never change what the target computes: workloads that verify every result of the string and
//! memory functions (and hand-written functions starting with VEX instructions, which the kernel's uprobe
//! code mis-decodes) run under every probing command with 0 wrong results, exact counts for every probed
//! function and a named reason for every skipped one. Also: counts start at the launched command's exec,
//! a target killed by a signal is reported, and probing thousands of functions needs --yes.

mod common;

use common::*;
use serde_json::Value;
use std::process::Output;

const N: u64 = 3000;

/// The functions checkres calls exactly N times each from main's loop (glibc's own startup adds one
/// strrchr: `__init_misc` looks for the slash in argv[0]).
const CHECKED: [&str; 14] = [
    "memset", "memcpy", "mempcpy", "memmove", "memcmp", "strlen", "strchr", "strrchr", "strcmp", "strncmp",
    "strcpy", "strstr", "malloc", "free",
];

/// Runs whyslow and insists that it and the launched workload succeeded with every result right.
fn correct(args: &[&str], workload_name: &str) -> String {
    let out = run(args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "whyslow {args:?} failed ({}): {stderr}\n{stdout}", out.status);
    assert!(
        stdout.contains(&format!("{workload_name}: ")) && stdout.contains(" checks, 0 wrong"),
        "{stdout}"
    );
    stdout.into_owned()
}

/// The JSON document after the workload's own line.
fn json_after(out: &str) -> Value {
    let start = out.find("\n{\n").map_or(0, |i| i + 1);
    serde_json::from_str(&out[start..]).unwrap()
}

/// Calls counted for `name` in libc, or None when the function was skipped (then a note names it with a
/// reason). Fails when a function is neither counted nor named as skipped.
fn libc_count(v: &Value, name: &str) -> Option<u64> {
    let notes: Vec<&str> = v["notes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let skipped = notes.iter().any(|n| n.starts_with(&format!("{name} ")) && n.ends_with("; not counted"));
    let counted: Vec<&Value> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["module"].as_str().unwrap().ends_with("libc.so.6")
                && (f["name"] == name || f["aliases"].as_array().is_some_and(|a| a.iter().any(|x| x == name)))
        })
        .collect();
    assert!(skipped || !counted.is_empty(), "{name} is neither counted nor named as skipped: {v}");
    (!skipped).then(|| counted.iter().map(|f| f["calls"].as_u64().unwrap()).sum())
}

/// What checkres makes each checked function do: N calls, memcpy and memmove sharing one implementation
/// (one probe counting both; glibc's mempcpy jumps into its first instructions and must not count
/// there), strrchr one more.
fn expected(name: &str, v: &Value) -> u64 {
    let shared = v["functions"].as_array().unwrap().iter().any(|f| {
        f["module"].as_str().unwrap().ends_with("libc.so.6")
            && f["name"] == "memcpy"
            && f["aliases"].as_array().is_some_and(|a| a.iter().any(|x| x == "memmove"))
    });
    match name {
        "memcpy" | "memmove" if shared => 2 * N,
        "strrchr" => N + 1,
        _ => N,
    }
}

#[test]
fn checked_results_stay_right_and_counts_are_exact_under_calls_and_latency() {
    let bin = workload("checkres");
    let n = N.to_string();
    for latency in [false, true] {
        let mut args = vec!["calls", "--format", "json"];
        if latency {
            args.push("--latency");
        }
        args.extend(CHECKED);
        args.extend(["--", bin.to_str().unwrap(), &n]);
        let v = json_after(&correct(&args, "checkres"));
        for name in CHECKED {
            if let Some(calls) = libc_count(&v, name) {
                assert_eq!(calls, expected(name, &v), "{name} (latency: {latency}): {v}");
            }
        }
    }
    // Each function alone too: a probe on one function must not depend on others being probed.
    for name in CHECKED {
        let v = json_after(&correct(
            &["calls", "--format", "json", name, "--", bin.to_str().unwrap(), &n],
            "checkres",
        ));
        if let Some(calls) = libc_count(&v, name) {
            let want =
                if matches!(name, "memcpy" | "memmove") { [N, 2 * N] } else { [expected(name, &v); 2] };
            assert!(want.contains(&calls), "{name} alone: {calls} calls, expected {want:?}: {v}");
        }
    }
}

#[test]
fn the_default_set_callers_alloc_and_doctor_leave_results_right() {
    let (c, cpp) = (workload("checkres"), workload("checkres_cpp"));
    let n = N.to_string();
    correct(&["calls", "--", c.to_str().unwrap(), &n], "checkres");
    correct(&["calls", "--", cpp.to_str().unwrap(), &n], "checkres_cpp");
    let out = correct(
        &["calls", "--stacks", "memset", "strchr", "strlen", "--", c.to_str().unwrap(), &n],
        "checkres",
    );
    assert!(out.contains("main"), "callers reach main: {out}");
    let dir = tmp();
    let data = dir.path().join("alloc.data");
    correct(
        &["record", "--alloc", "-q", "-o", data.to_str().unwrap(), "--", c.to_str().unwrap(), &n],
        "checkres",
    );
    let r = report_json(data.to_str().unwrap(), &["--type", "alloc-site-count"]);
    assert_eq!(r["total_samples"].as_u64(), Some(N), "checkres allocates exactly N times: {r}");
    let doc = dir.path().join("doctor.data");
    correct(&["doctor", "-o", doc.to_str().unwrap(), "--", c.to_str().unwrap(), "20000"], "checkres");
}

/// Hand-written functions whose first instruction is a VEX instruction with opcode byte 78 (vpbroadcastb),
/// 7f (vmovdqu store) or e8 (vpsubsb): a uprobe there makes the kernel skip or misrun it, so probing the
/// entry (as whyslow did before) returns wrong results on any AVX2 machine.
#[test]
fn functions_starting_with_vex_instructions_compute_the_same_under_probes() {
    let bin = workload("vexfuncs");
    let plain = std::process::Command::new(&bin).arg("1").output().unwrap();
    if plain.status.code() == Some(77) {
        eprintln!("skipped: this CPU has no AVX2, so the VEX functions cannot run");
        return;
    }
    let funcs = ["vex_bcast78", "vex_store7f", "vex_sub_e8"];
    for latency in [false, true] {
        let mut args = vec!["calls", "--format", "json"];
        if latency {
            args.push("--latency");
        }
        args.extend(funcs);
        args.extend(["--", bin.to_str().unwrap(), "1000"]);
        let v = json_after(&correct(&args, "vexfuncs"));
        for f in funcs {
            let notes = v["notes"].to_string();
            let row = v["functions"].as_array().unwrap().iter().find(|r| r["name"] == f);
            match row {
                Some(r) => assert_eq!(r["calls"], 1000, "{f}: {v}"),
                None => assert!(
                    notes.contains(f) && notes.contains("VEX"),
                    "{f} neither counted nor skipped: {v}"
                ),
            }
        }
    }
    let list = ok(&["calls", "--list", "vex_bcast78", "--", bin.to_str().unwrap()]);
    assert!(!list.contains("probe at entry:"), "never on the VEX entry: {list}");
}

#[test]
fn counts_start_at_the_exec_of_the_launched_command() {
    // execvp in whyslow's forked child searches strchr for a slash before exec: those calls are not the
    // program's. checkres with N = 1 calls strchr exactly once.
    let bin = workload("checkres");
    let v = json_after(&correct(
        &["calls", "--format", "json", "strchr", "--", bin.to_str().unwrap(), "1"],
        "checkres",
    ));
    if let Some(calls) = libc_count(&v, "strchr") {
        assert_eq!(calls, 1, "{v}");
    }
}

fn status_and_stderr(out: &Output) -> (Option<i32>, String) {
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_target_killed_by_a_signal_is_reported_with_it() {
    // Launched: the shell kills itself with SIGSEGV; whyslow prints its counts, names the signal, and exits
    // 128 + 11 as a shell would.
    let out = run(&["calls", "malloc", "--", "sh", "-c", "kill -SEGV $$"]);
    let (code, err) = status_and_stderr(&out);
    assert_eq!(code, Some(139), "{err}");
    assert!(
        err.contains("was killed by SIGSEGV during the run") || err.contains("killed by SIGSEGV (core"),
        "{err}"
    );
    // Attached: whyslow is not the parent; the exit is seen in the kernel.
    let mut target = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let pid = target.id().to_string();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(700));
        target.kill().unwrap();
        target.wait().unwrap()
    });
    let out = run(&["syscalls", "-p", &pid, "-d", "10"]);
    killer.join().unwrap();
    let (code, err) = status_and_stderr(&out);
    assert!(err.contains(&format!("target pid {pid} was killed by SIGKILL during the run")), "{err}");
    assert_eq!(code, Some(137), "{err}");
}

#[test]
fn probing_thousands_of_functions_needs_yes() {
    let err = fails(&["calls", "*", "--", "true"]);
    assert!(err.contains("functions (") && err.contains("--yes"), "{err}");
    let list = ok(&["calls", "--list", "*", "--", "true"]);
    assert!(list.lines().count() > 500, "the guard is above 500 functions");
}

/// Issue 18 item 15: a run killed with SIGKILL leaves no probe behind. Probes are eBPF links and perf
/// events whose file descriptors die with the process (no named tracefs uprobe): after `calls --callers`
/// and `record --alloc` are killed while probing a binary on a tmpfs, no whyslow entry is left in
/// uprobe_events and the tmpfs unmounts (a leftover uprobe keeps the probed file, and its filesystem,
/// busy).
#[test]
fn a_killed_run_leaves_no_probe_behind() {
    let dir = tmp();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mount =
        std::process::Command::new("mount").args(["-t", "tmpfs", "nodev"]).arg(&mnt).status().unwrap();
    assert!(mount.success(), "mount tmpfs");
    /// Detaches the tmpfs however the test ends.
    struct Mounted<'a>(&'a std::path::Path);
    impl Drop for Mounted<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(self.0).output();
        }
    }
    let _mounted = Mounted(&mnt);
    let bin = mnt.join("calls");
    std::fs::copy(workload("calls"), &bin).unwrap();
    // No budget: the probes must still be attached when the run is killed (a budget stops them first).
    for args in [&["calls", "--budget", "none", "--stacks", "bump", "malloc"][..], &["record", "--alloc"]] {
        let mut target = std::process::Command::new(&bin).arg("1000000000").spawn().unwrap();
        let pid = target.id().to_string();
        // Attached once the loader has mapped libc (malloc is probed there).
        let start = std::time::Instant::now();
        while !std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("libc.so"))
            && start.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = dir.path().join("killed.data");
        let mut cmd = whyslow();
        cmd.args(args).args(["-p", &pid, "-d", "30"]);
        if args[0] == "record" {
            cmd.arg("-o").arg(&out);
        }
        let mut tool =
            cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        // Killed once its uprobes are attached (an eBPF link of type uprobe_multi among its descriptors, on
        // another file than whyslow's own: it first probes two functions of its own for a moment, to
        // measure what a hit costs).
        let own = std::fs::canonicalize(env!("CARGO_BIN_EXE_whyslow")).unwrap();
        let own = format!("path:\t{}\n", own.display());
        let probing = || {
            let fds = std::fs::read_dir(format!("/proc/{}/fdinfo", tool.id())).into_iter().flatten();
            fds.flatten().any(|f| {
                std::fs::read_to_string(f.path())
                    .is_ok_and(|t| t.contains("link_type:\tuprobe_multi") && !t.contains(&own))
            })
        };
        let start = std::time::Instant::now();
        while !probing() && start.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let attached = probing();
        std::thread::sleep(std::time::Duration::from_millis(300));
        tool.kill().unwrap();
        let said = String::from_utf8_lossy(&tool.wait_with_output().unwrap().stderr).into_owned();
        let ran_on = target.try_wait().unwrap().is_none();
        target.kill().unwrap();
        target.wait().unwrap();
        assert!(attached, "{args:?}: no uprobe attached in 20 s: {said}");
        assert!(ran_on, "{args:?}: the target runs on");
        let events = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
        assert!(!events.contains("whyslow"), "{args:?}: uprobes left behind: {events}");
    }
    let umount = std::process::Command::new("umount").arg(&mnt).output().unwrap();
    assert!(umount.status.success(), "the probed file's filesystem is not busy: {umount:?}");
}
