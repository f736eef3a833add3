//! End-to-end tests of `whyslow record` and `report` against real workload programs, asserting numbers.

mod common;
use common::*;
use std::io::BufRead;
use std::time::Duration;

/// The 60/30/10 split within +-3 points, and >= 99% of samples unwound to main without frame pointers.
#[test]
fn cpu_split_shares_and_complete_unwinding() {
    let dir = tmp();
    let bin = workload("cpu_split");
    let data = record(dir.path(), "split", &[], &[bin.to_str().unwrap(), "3"]);
    let r = report_json(&data, &[]);
    let total = r["total_samples"].as_i64().unwrap();
    // ~3000 at 999 Hz over 3 s of CPU; fewer when other work shares the two cores (828 seen on a
    // machine running two builds beside the suite): the shares below are of what was sampled.
    assert!(total > 500, "expected up to ~3000 samples, got {total}");
    assert_split(&r);
    let main = total_pct(&r, "main");
    assert!(main >= 99.0, "only {main:.2}% of samples reached main");
    let unwind = &r["unwind"];
    let complete = unwind["complete"].as_i64().unwrap();
    let partial = unwind["partial"].as_i64().unwrap();
    assert!(complete as f64 >= 0.99 * (complete + partial) as f64, "{unwind}");
    assert_eq!(r["lost_samples"].as_i64().unwrap(), 0);
}

#[test]
fn cpp_names_are_demangled_with_inlined_frames() {
    let dir = tmp();
    let bin = workload("cpp_templates");
    let data = record(dir.path(), "cpp", &[], &[bin.to_str().unwrap(), "2"]);
    let r = report_json(&data, &[]);
    let hot = function(&r, |n| n.starts_with("work::hot_loop")).expect("work::hot_loop demangled");
    assert!(hot["total_pct"].as_f64().unwrap() > 50.0, "{hot}");
    assert!(function(&r, |n| n.starts_with("mix")).is_some(), "inlined frame `mix` missing");
    // `mix` is inlined into hot_loop: it appears as hot_loop's callee.
    let callees = ok(&["report", &data, "--callees", "work::hot_loop", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&callees).unwrap();
    let names: Vec<&str> =
        v["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(names.iter().any(|n| n.starts_with("mix")), "callees of hot_loop: {names:?}");
    assert!(function(&r, |n| n.contains("std::") || n.contains("__gnu_cxx::")).is_some(), "no std:: frames");
    // Text tables shorten template arguments (`std::map<…>::operator[](...)`); JSON keeps them whole.
    let templated: Vec<&str> = r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .filter(|n| n.contains("std::") && n.contains(">::"))
        .collect();
    assert!(!templated.is_empty(), "no templated std:: function in the JSON report");
    let text = ok(&["report", &data, "--limit", "100000"]);
    for full in &templated {
        assert!(!text.contains(full), "{full} in full in the text report");
    }
    assert!(text.contains("<…>"), "{text}");
    assert!(!r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"].as_str().unwrap().starts_with("_Z")));
}

#[test]
fn four_threads_are_each_seen() {
    let dir = tmp();
    let bin = workload("threads");
    let data = record(dir.path(), "threads", &[], &[bin.to_str().unwrap(), "2"]);
    let r = report_json(&data, &[]);
    let threads = r["threads"].as_array().unwrap();
    let total: i64 = r["total_samples"].as_i64().unwrap();
    for i in 0..4 {
        let name = format!("worker-{i}");
        let t =
            threads.iter().find(|t| t["name"] == name.as_str()).unwrap_or_else(|| panic!("{name} missing"));
        let share = t["samples"].as_i64().unwrap() as f64 / total as f64;
        // Four equal workers on two cores: each near a quarter.
        assert!((share - 0.25).abs() < 0.05, "{name}: {share:.3}");
    }
    assert!(total_pct(&r, "thread_work") > 95.0);
    let text = ok(&["report", &data, "--threads"]);
    assert!(text.contains("worker-3"), "{text}");
}

#[test]
fn forked_children_are_profiled() {
    let dir = tmp();
    let bin = workload("forker");
    let data = record(dir.path(), "fork", &[], &[bin.to_str().unwrap(), "1"]);
    let r = report_json(&data, &[]);
    let pids: std::collections::BTreeSet<i64> =
        r["threads"].as_array().unwrap().iter().map(|t| t["pid"].as_i64().unwrap()).collect();
    assert_eq!(pids.len(), 3, "parent + 2 children: {pids:?}");
    let child = total_pct(&r, "child_work");
    let parent = total_pct(&r, "parent_work");
    // Two children and the parent each burn the same time: 2/3 vs 1/3.
    assert!((child - 66.7).abs() < 6.0 && (parent - 33.3).abs() < 6.0, "child {child:.1} parent {parent:.1}");
}

#[test]
fn go_and_rust_names_resolve() {
    let dir = tmp();
    let go = workload("gowork");
    let data = record(dir.path(), "go", &[], &[go.to_str().unwrap(), "1"]);
    let r = report_json(&data, &[]);
    assert!(total_pct(&r, "main.main") > 90.0, "main.main: {}", total_pct(&r, "main.main"));
    assert!(total_pct(&r, "main.burn") > 90.0);
    let rs = workload("rustwork");
    let data = record(dir.path(), "rust", &[], &[rs.to_str().unwrap(), "1"]);
    let r = report_json(&data, &[]);
    assert!(total_pct(&r, "rustwork::work::burn_rust") > 90.0);
    // No legacy-mangling hash suffix (`::h` and 16 hex digits) is left; `core::hint::...` is a name.
    let hashed = |n: &str| {
        n.rsplit_once("::h").is_some_and(|(_, h)| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    assert!(!r["functions"].as_array().unwrap().iter().any(|f| hashed(f["name"].as_str().unwrap())), "{r}");
}

/// A Go program that collects garbage runs much of its runtime on the threads' system stacks (Go's
/// runtime.systemstack): its CPU samples go on to the goroutine's frames (the kernel sends a copy of that
/// stack with the sample), so its stacks are complete and the collector's work shows under the goroutines
/// that caused it, also under morestack (a goroutine growing its stack). Only stacks in a signal handler
/// (what it interrupted is not unwound) may be cut.
#[test]
fn go_cpu_stacks_cross_the_system_stack_switch() {
    let dir = tmp();
    let gc = workload("doctor_gogc");
    let data = record(dir.path(), "gc", &[], &[gc.to_str().unwrap()]);
    let folded = dir.path().join("gc.folded");
    ok(&["export", &data, "--format", "folded", "--type", "cpu", "-o", folded.to_str().unwrap()]);
    let text = std::fs::read_to_string(&folded).unwrap();
    let count = |l: &str| l.rsplit_once(' ').map_or(0, |(_, n)| n.parse::<u64>().unwrap());
    let total: u64 = text.lines().map(count).sum();
    let cut: u64 = text.lines().filter(|l| l.starts_with("[stack cut here]")).map(count).sum();
    let in_signal: u64 = text
        .lines()
        .filter(|l| l.starts_with("[stack cut here]") && l.contains("runtime.sig"))
        .map(count)
        .sum();
    // A goroutine preempted or growing its stack at a function's prologue runs morestack on the system
    // stack, which clears the frame pointer from Go 1.21 on: the kernel reads the goroutine's saved
    // registers through the runtime's g and m (1.2% of the samples on a busy CI machine, 6% beside four
    // builds), and its stack goes on from them.
    let in_morestack: u64 = text
        .lines()
        .filter(|l| l.starts_with("[stack cut here]") && l.contains(";runtime.morestack"))
        .map(count)
        .sum();
    let through_morestack: u64 = text
        .lines()
        .filter(|l| l.starts_with("runtime.goexit;") && l.contains(";runtime.morestack"))
        .map(count)
        .sum();
    assert!(total > 1000, "{total} samples");
    assert!(
        cut - in_signal <= total / 100,
        "{cut} of {total} stacks cut, {in_signal} in a signal handler, {in_morestack} under morestack: {text}"
    );
    assert!(
        in_morestack * 10 <= through_morestack.max(10),
        "{in_morestack} stacks cut under morestack, {through_morestack} whole through it"
    );
    let crossed: u64 = text
        .lines()
        .filter(|l| l.starts_with("runtime.goexit;") && l.contains(";runtime.systemstack;"))
        .map(count)
        .sum();
    assert!(crossed * 50 > total, "{crossed} of {total} samples cross the system stack switch: {text}");
}

/// A goroutine that outgrows its stack runs newstack under morestack on the system stack, and morestack
/// clears the frame pointer (Go 1.21 on): the kernel finds the goroutine through the thread's g, its m and
/// m.curg, and its stack goes on from the registers morestack saved. gogrow spends about half of its CPU
/// there (1,150 of 2,100 samples in 2 s here; run 4 s, so that beside two busy cores it still gives 1,000): those stacks go on through main.deep and main.grow to
/// runtime.goexit, for Go 1.26 and 1.24 (whose gobuf and m differ). Before, 61% of all its stacks were cut.
#[test]
fn go_stacks_go_on_through_morestack() {
    let dir = tmp();
    for name in ["gogrow", "gogrow_go124"] {
        let data = record(dir.path(), name, &[], &[workload(name).to_str().unwrap(), "4"]);
        let folded = dir.path().join(format!("{name}.folded"));
        ok(&["export", &data, "--format", "folded", "--type", "cpu", "-o", folded.to_str().unwrap()]);
        let text = std::fs::read_to_string(&folded).unwrap();
        let count = |l: &str| l.rsplit_once(' ').map_or(0, |(_, n)| n.parse::<u64>().unwrap());
        let sum = |f: &dyn Fn(&str) -> bool| -> u64 { text.lines().filter(|l| f(l)).map(count).sum() };
        let total = sum(&|_| true);
        let growing = sum(&|l| l.contains(";runtime.newstack;runtime.copystack"));
        let whole = sum(&|l| {
            l.contains(";runtime.newstack;runtime.copystack")
                && l.starts_with("runtime.goexit;main.main.gowrap1;main.grow;main.deep;")
        });
        assert!(total > 1000 && growing * 5 > total, "{name}: {growing} of {total} samples copy stacks");
        assert!(
            whole * 100 >= growing * 95,
            "{name}: {whole} of {growing} stacks copying a stack are whole: {text}"
        );
    }
}

/// Starts the spin workload and waits until it has printed its PID.
/// A running workload that is killed when the test ends, even when an assertion fails first.
struct Spinner(std::process::Child);

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_spin(name: &str) -> (Spinner, u32) {
    spawn_spin_at(&workload(name))
}

/// [`spawn_spin`] of the program at `path`.
fn spawn_spin_at(path: &std::path::Path) -> (Spinner, u32) {
    let mut child = std::process::Command::new(path).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    (Spinner(child), line.trim().parse().unwrap())
}

/// User + system CPU time of a process so far, from /proc (clock ticks of 1/100 s).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the state field.
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}

/// The first child of process `pid`, once it has one that runs a program of its own (not whyslow).
fn wait_child(pid: u32) -> u32 {
    for _ in 0..6000 {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(c) = children.split_whitespace().next().and_then(|c| c.parse().ok()) {
            let exe = std::fs::read_link(format!("/proc/{c}/exe")).unwrap_or_default();
            if !exe.ends_with("whyslow") && exe.file_name().is_some() {
                return c;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("process {pid} started no program in 120 s");
}

#[test]
fn attach_by_pid_and_by_name() {
    let dir = tmp();
    let (mut child, pid) = spawn_spin("spin");
    // Busy too, not followed: the per-CPU clock's filter keeps none of its samples.
    let (_other, other) = spawn_spin("spin");
    let data = dir.path().join("attach.data");
    let data = data.to_str().unwrap();
    let (cpu_before, t0) = (cpu_seconds(pid), std::time::Instant::now());
    ok(&["record", "-q", "-p", &pid.to_string(), "-d", "1", "-o", data]);
    let (cpu, wall) = (cpu_seconds(pid) - cpu_before, t0.elapsed().as_secs_f64());
    let r = report_json(data, &[]);
    let pids: Vec<i64> =
        r["threads"].as_array().unwrap().iter().map(|t| t["pid"].as_i64().unwrap()).collect();
    assert!(pids.iter().all(|&p| p == pid as i64), "only pid {pid} followed, not {other}: {pids:?}");
    assert!(total_pct(&r, "spin_forever") > 95.0);
    assert!(total_pct(&r, "main") > 95.0);
    // 999 Hz of the CPU time the target got (other work shares the CPUs). The CPU time is measured over
    // whyslow's whole run, of which sampling is a part (start-up takes longer on a busy machine): at
    // least that part of it, taken at the run's average rate, is sampled, and never more than all of it.
    let n = r["total_samples"].as_i64().unwrap() as f64;
    let sampled_part = (r["duration_s"].as_f64().unwrap() / wall).min(1.0);
    let expected = cpu * 999.0;
    assert!(
        n > 0.7 * sampled_part * expected && n < 1.1 * expected + 20.0,
        "{n} samples for {cpu:.2} CPU seconds over {wall:.2} s, {sampled_part:.2} of it sampled"
    );
    // The target keeps running after we detach.
    std::thread::sleep(Duration::from_millis(100));
    assert!(child.0.try_wait().unwrap().is_none(), "target must survive attach/detach");
    // By name: a copy named as no other test's process is (tests run side by side, and a `spin` another
    // one starts meanwhile would be followed too, from its loader's first instructions on).
    let named = dir.path().join("spin_by_name");
    std::fs::copy(workload("spin"), &named).unwrap();
    let (_named, _) = spawn_spin_at(&named);
    ok(&["record", "-q", "--comm", "spin_by_name", "-d", "0.5", "-o", data]);
    let r = report_json(data, &[]);
    assert!(total_pct(&r, "spin_forever") > 95.0);
}

#[test]
fn bad_input_gives_one_line_errors() {
    let dir = tmp();
    let d = dir.path();
    let err = fails(&["record", "-p", "999999999", "-d", "1", "-o", d.join("x.data").to_str().unwrap()]);
    assert!(err.contains("no such process"), "{err}");
    let err = fails(&["record", "--comm", "no-such-proc-xyz", "-d", "1"]);
    assert!(err.contains("no running process is named"), "{err}");
    let err = fails(&["record", "-o", d.join("y.data").to_str().unwrap(), "--", "/nonexistent/cmd"]);
    assert!(err.contains("cannot run /nonexistent/cmd"), "{err}");
    // `true` runs for about a millisecond: at 1 Hz (a 1 s cpu-clock period) no sample can land in it,
    // where at the default 999 Hz one rarely does on a busy machine.
    let err = fails(&["record", "-F", "1", "-o", d.join("z.data").to_str().unwrap(), "--", "true"]);
    assert!(err.contains("no samples"), "{err}");
    assert!(!d.join("z.data").exists(), "no file may be written when nothing was recorded");
    // Options out of range name the range, never panic (`-d 1e20` once did).
    let z = d.join("z.data");
    let z = z.to_str().unwrap();
    for (args, says) in [
        (&["record", "-d", "1e20", "-o", z, "--", "true"][..], "longer than whyslow can wait"),
        (&["record", "-d", "0", "-o", z, "--", "true"], "positive number of seconds"),
        (&["syscalls", "--interval", "1e20", "--", "true"], "longer than whyslow can wait"),
        (&["calls", "-d", "1e20", "malloc", "--", "true"], "longer than whyslow can wait"),
        (&["record", "--stack-size", "100", "-o", z, "--", "true"], "multiple of 8 from 8 to 65528"),
        (&["record", "--stack-size", "0", "-o", z, "--", "true"], "multiple of 8 from 8 to 65528"),
        (&["record", "-F", "200000", "-o", z, "--", "true"], "perf_event_max_sample_rate"),
        // The libraries check their own options and name them their way; the errors name the flags.
        (
            &["record", "--alloc", "--alloc-period", "0", "-o", z, "--", "true"],
            "--alloc-period must be at least 1",
        ),
        (
            &["syscalls", "--stacks", "--stacks-period", "0", "-o", z, "--", "true"],
            "--stacks-period must be at least 1",
        ),
        (
            &["calls", "--stacks", "--stacks-period", "0", "malloc", "--", "true"],
            "--stacks-period must be at least 1",
        ),
        (&["doctor", "--stacks-period", "0", "-o", z, "--", "true"], "--stacks-period must be at least 1"),
        (
            &["doctor", "--budget", "0", "-o", z, "--", "true"],
            "--budget is a percentage of the target's CPU time",
        ),
        (&["compare", "-n", "1", "--before", "true", "--after", "true"], "-n must be at least 2 per side"),
        (&["compare", "-F", "0", "--before", "true", "--after", "true"], "-F must be at least 1 Hz"),
    ] {
        let err = fails(args);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // A recording that could not be written fails before the run, not after it (the target never starts:
    // its marker file stays absent).
    let marker = d.join("ran");
    let touch = format!("touch {}", marker.display());
    for cmd in ["record", "doctor"] {
        let err = fails(&[cmd, "-o", "/nonexistent/dir/x.data", "--", "sh", "-c", &touch]);
        assert!(err.contains("cannot write /nonexistent/dir/x.data"), "{cmd}: {err}");
    }
    assert!(!marker.exists(), "the command must not have run");
    let err = fails(&["report", d.join("missing.data").to_str().unwrap()]);
    assert!(err.contains("cannot read"), "{err}");
    std::fs::write(d.join("junk.data"), b"this is not a profile").unwrap();
    let err = fails(&["report", d.join("junk.data").to_str().unwrap()]);
    assert!(err.contains("not a whyslow recording"), "{err}");
    // A real recording, truncated and corrupted.
    let bin = workload("cpu_split");
    let data = record(d, "good", &[], &[bin.to_str().unwrap(), "0.3"]);
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(d.join("trunc.data"), &bytes[..bytes.len() / 2]).unwrap();
    let err = fails(&["report", d.join("trunc.data").to_str().unwrap()]);
    assert!(err.contains("truncated"), "{err}");
    let mut bad = bytes.clone();
    let i = bad.len() - 10;
    bad[i] ^= 0x55;
    std::fs::write(d.join("corrupt.data"), &bad).unwrap();
    let err = fails(&["report", d.join("corrupt.data").to_str().unwrap()]);
    assert!(err.contains("corrupt"), "{err}");
    let err = fails(&["report", &data, "--callees", "burn_zz"]);
    assert!(err.contains("burn_a") || err.contains("burn_"), "should suggest close matches: {err}");
    let err = fails(&["report", &data, "--type", "alloc-bytes"]);
    assert!(err.contains("no 'alloc-bytes' samples"), "{err}");
}

/// Duration, then SIGTERM to whyslow itself: both stop cleanly and write a complete file.
#[test]
fn stops_on_sigterm_and_writes_the_recording() {
    let dir = tmp();
    let data = dir.path().join("sig.data");
    let child = whyslow()
        .args(["record", "-q", "-o", data.to_str().unwrap(), "--", workload("spin").to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Until the target has had 1 s of CPU (however busy the machine), so that it has been sampled.
    let spin = wait_child(child.id());
    while cpu_seconds(spin) < 1.0 {
        assert!(std::path::Path::new(&format!("/proc/{spin}")).exists(), "the target ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill takes no pointers.
    unsafe { libc_kill(child.id() as i32, 15) };
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report_json(data.to_str().unwrap(), &[]);
    assert!(r["total_samples"].as_i64().unwrap() > 500);
    assert!(total_pct(&r, "spin_forever") > 90.0);
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// A stripped binary still gets complete stacks (.eh_frame survives strip) and shows module+offset names.
#[test]
fn stripped_binary_shows_module_and_offset() {
    let dir = tmp();
    let stripped = dir.path().join("split_stripped");
    std::fs::copy(workload("cpu_split"), &stripped).unwrap();
    let st = std::process::Command::new("strip").arg(&stripped).status().unwrap();
    assert!(st.success());
    let data = record(dir.path(), "stripped", &[], &[stripped.to_str().unwrap(), "0.5"]);
    let r = report_json(&data, &[]);
    let in_stripped: f64 = r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"].as_str().unwrap().starts_with("split_stripped+0x"))
        .map(|f| f["self_pct"].as_f64().unwrap())
        .sum();
    assert!(in_stripped > 90.0, "self time should show as split_stripped+0xOFFSET frames: {in_stripped}");
    // One line says why, and what would name them.
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    let note = notes.iter().find(|n| n.starts_with("no symbols for split_stripped ")).expect("a note");
    assert!(note.contains("DEBUGINFOD_URLS") && note.contains("-dbgsym") && note.contains("-g"), "{note}");
    assert!(total_pct(&r, "__libc_start_main_impl") > 99.0, "libc frames still symbolized and reached");
}

/// Attaching to another user's process without privileges names the fix.
#[test]
fn permission_error_names_the_fix() {
    if !std::path::Path::new("/usr/sbin/runuser").exists() {
        eprintln!("runuser missing: skipping");
        return;
    }
    let out = std::process::Command::new("/usr/sbin/runuser")
        .args([
            "-u",
            "nobody",
            "--",
            env!("CARGO_BIN_EXE_whyslow"),
            "record",
            "-p",
            "1",
            "-d",
            "1",
            "-o",
            "/tmp/x",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("perf_event_paranoid") && err.contains("CAP_PERFMON"), "{err}");
}

/// Time in the vDSO (clock_gettime) is named from the vDSO image the recorder kept, not `[vdso]+0x...`.
#[test]
fn vdso_functions_are_named() {
    let dir = tmp();
    let data = record(dir.path(), "vdso", &[], &[workload("clock_loop").to_str().unwrap(), "0.5"]);
    let r = report_json(&data, &[]);
    let vdso: f64 = r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["module"] == "[vdso]")
        .map(|f| f["self_pct"].as_f64().unwrap())
        .sum();
    assert!(vdso > 50.0, "most time is in the vDSO: {vdso}");
    let named = r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["module"] == "[vdso]" && f["name"].as_str().unwrap().contains("clock_gettime"));
    assert!(named, "vDSO clock_gettime not named");
    assert!(!r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"].as_str().unwrap().starts_with("[vdso]+")));
    assert!(total_pct(&r, "main") > 99.0);
}

/// A many-process, many-threaded real program (chromium headless running a page's script): every sample
/// kept or counted, none lost to rings that fill while the reading thread is busy (it read each
/// 300 MB binary whole for its unwind tables: 250 of 1750 samples were lost), and the processes it starts
/// all seen.
#[test]
fn chromium_is_recorded_without_loss() {
    let chromium = std::path::Path::new("/usr/bin/chromium");
    assert!(chromium.exists(), "this test needs /usr/bin/chromium: run scripts/deps.sh (make test does)");
    let dir = tmp();
    let page = dir.path().join("page.html");
    std::fs::write(
        &page,
        "<html><body><script>let s=0;for(let i=0;i<3e7;i++)s+=Math.sqrt(i);document.body.innerText=s</script></body></html>",
    )
    .unwrap();
    let url = format!("file://{}", page.display());
    let args = ["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", &url];
    let data = record(dir.path(), "chromium", &[], &[&[chromium.to_str().unwrap()][..], &args[..]].concat());
    let r = report_json(&data, &[]);
    let total = r["total_samples"].as_i64().unwrap();
    let lost = r["lost_samples"].as_i64().unwrap();
    assert!(total > 300, "expected ~1000+ samples of chromium's processes, got {total}");
    // Tolerance: 1% (perf record --call-graph dwarf lost 0-2% of its samples on this command).
    assert!(lost * 100 <= total, "lost {lost} of {} samples", total + lost);
    let pids: std::collections::BTreeSet<i64> =
        r["threads"].as_array().unwrap().iter().map(|t| t["pid"].as_i64().unwrap()).collect();
    assert!(pids.len() >= 3, "chromium's browser, renderer and helper processes: saw {pids:?}");
}

/// A stack deeper than the bytes copied (2000 frames of 112 bytes against the 16 KB the sample copies and
/// the 64 KB the kernel may send after it) is cut: kept with the frames found, under one
/// `[stack cut here]` root, and counted as partial: the two agree exactly.
#[test]
fn cut_stacks_are_marked_and_counted_as_partial() {
    let dir = tmp();
    let bin = workload("deep");
    let data = record(dir.path(), "deep", &[], &[bin.to_str().unwrap(), "2000", "1"]);
    let r = report_json(&data, &[]);
    let partial = r["unwind"]["partial"].as_i64().unwrap();
    let total = r["total_samples"].as_i64().unwrap();
    assert!(partial * 100 >= total * 95, "{partial} of {total} samples cut");
    let cut = function(&r, |n| n == "[stack cut here]").map(|f| f["total"].as_i64().unwrap());
    assert_eq!(cut, Some(partial), "every cut stack is marked, and only those");
    // A shallow stack is whole: no mark. (Bound up front: the loader's lazy-binding trampoline,
    // _dl_runtime_resolve_*, realigns the stack and keeps its frame base in rbx, which samples do not
    // carry, so a sample landing in it is cut for a reason of its own; CI once took one.)
    let shallow = dir.path().join("shallow.data");
    let out = whyslow()
        .env("LD_BIND_NOW", "1")
        .args(["record", "-q", "-o", shallow.to_str().unwrap(), "--", bin.to_str().unwrap(), "10", "0.5"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let data = shallow.to_str().unwrap();
    let r = report_json(data, &[]);
    let folded = ok(&["export", data, "-f", "folded", "-o", "-"]);
    let cut: Vec<&str> = folded.lines().filter(|l| l.contains("[stack cut here]")).collect();
    assert!(cut.is_empty(), "{cut:?}");
    assert_eq!(r["unwind"]["partial"].as_i64(), Some(0));
}

/// A stack deeper than the sample's own 16 KB copy (600 frames of 112 bytes: 67 KB) is whole: the clock's
/// filter sends the rest of the thread's stack up to its top (the process's initial stack pointer for the
/// main thread, the thread pointer for another), and the converter unwinds the two as one. Nearly every
/// sample is in the recursion's bottom loop with all 601 frames of `down`, from `_start` or from the
/// thread's `clone3` (a 32 KB copy alone cut all of them: 0 of 374). A tail that finds its ring full (a
/// reader late on a busy machine) is not sent, and its sample is cut and counted partial: 0-1% here, up to
/// a fifth allowed.
#[test]
fn a_stack_deeper_than_its_copy_is_whole() {
    let dir = tmp();
    let bin = workload("deep");
    for (mode, root) in [("main", "_start;"), ("thread", "clone3;start_thread;")] {
        let data = record(
            dir.path(),
            mode,
            &[],
            &[bin.to_str().unwrap(), "600", "1", mode][..3 + (mode == "thread") as usize],
        );
        let r = report_json(&data, &[]);
        let (partial, total) =
            (r["unwind"]["partial"].as_i64().unwrap(), r["total_samples"].as_i64().unwrap());
        assert!(partial * 5 <= total, "{mode}: {partial} of {total} samples cut");
        let folded = ok(&["export", &data, "-f", "folded", "-o", "-"]);
        let (mut whole, mut all) = (0, 0);
        for line in folded.lines() {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            let n: i64 = n.parse().unwrap();
            all += n;
            if stack.split(';').filter(|f| *f == "down").count() == 601 && stack.starts_with(root) {
                whole += n;
            }
        }
        assert!(
            whole * 100 >= all * 75,
            "{mode}: {whole} of {all} samples with 601 frames of down from {root}"
        );
    }
}

/// A launched command's status is whyslow's, as with strace, ltrace and time: a failing command fails the
/// script that profiles it, with or without samples.
#[test]
fn the_commands_exit_status_is_passed_on() {
    let dir = tmp();
    let data = dir.path().join("e.data");
    let data = data.to_str().unwrap();
    let split = workload("cpu_split");
    let failing = format!("{} 0.2; exit 3", split.display());
    for args in [
        vec!["record", "-q", "-o", data, "--", "sh", "-c", &failing],
        vec!["record", "-q", "-o", data, "--", "sh", "-c", "exit 4"],
        vec!["syscalls", "--", "sh", "-c", "exit 5"],
        vec!["calls", "malloc", "--", "sh", "-c", "ls / >/dev/null; exit 6"],
    ] {
        let out = run(&args);
        let want = args.last().unwrap().rsplit(' ').next().unwrap().parse::<i32>().unwrap();
        assert_eq!(out.status.code(), Some(want), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = run(&["record", "-q", "-o", data, "--", split.to_str().unwrap(), "0.1"]);
    assert_eq!(out.status.code(), Some(0));
}

/// Slicing a recording after the fact: --focus/--ignore keep or drop the samples with a function on
/// their stack, --no-kernel drops kernel frames, --comm/--tid/--pid pick threads; counts add up exactly.
#[test]
fn a_recording_is_sliced_after_the_fact() {
    let dir = tmp();
    let bin = workload("cpu_split");
    let data = record(dir.path(), "split", &[], &[bin.to_str().unwrap(), "1"]);
    let all = report_json(&data, &[]);
    let total = all["total_samples"].as_i64().unwrap();
    let count = |r: &serde_json::Value, name: &str| {
        function(r, |n| n == name).map_or(0, |f| f["total"].as_i64().unwrap())
    };
    let focus = report_json(&data, &["--focus", "^burn_a$"]);
    assert_eq!(focus["total_samples"].as_i64().unwrap(), count(&all, "burn_a"));
    let ignore = report_json(&data, &["--ignore", "^burn_a$"]);
    assert_eq!(ignore["total_samples"].as_i64().unwrap(), total - count(&all, "burn_a"));
    assert_eq!(count(&ignore, "burn_a"), 0);
    let user = report_json(&data, &["--no-kernel"]);
    assert_eq!(user["total_samples"].as_i64().unwrap(), total, "frames go, samples stay");
    // Kernel functions are gone; samples that were all kernel are one `[kernel]` frame.
    let kernel: Vec<&str> = user["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["module"] == "[kernel.kallsyms]")
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(kernel.iter().all(|&n| n == "[kernel]"), "{kernel:?}");
    let tid = all["threads"][0]["tid"].as_i64().unwrap().to_string();
    let by_tid = report_json(&data, &["--tid", &tid]);
    assert_eq!(by_tid["total_samples"], all["threads"][0]["samples"]);
    let none = report_json(&data, &["--comm", "^no-such-thread$"]);
    assert_eq!(none["total_samples"].as_i64().unwrap(), 0);
    let err = fails(&["report", &data, "--ignore", "burn_("]);
    assert!(err.contains("--ignore: 'burn_(' is not a regular expression"), "{err}");
    // The same options, through the same library filter, on flamegraph, export and diff.
    let folded = dir.path().join("a.folded");
    ok(&["export", &data, "-f", "folded", "-o", folded.to_str().unwrap(), "--focus", "^burn_a$"]);
    let folded = std::fs::read_to_string(&folded).unwrap();
    let sum: i64 = folded.lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap()).sum();
    assert!(folded.lines().all(|l| l.contains(";burn_a")), "{folded}");
    assert_eq!(sum, count(&all, "burn_a"), "export --focus keeps exactly burn_a's samples");
    let svg = dir.path().join("a.svg");
    ok(&["flamegraph", &data, "-o", svg.to_str().unwrap(), "--ignore", "^burn_a$"]);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(!svg.contains("burn_a") && svg.contains("burn_b"), "flamegraph --ignore");
    let diff = ok(&["diff", &data, &data, "--format", "json", "--focus", "^burn_c$"]);
    let diff: serde_json::Value = serde_json::from_str(&diff).unwrap();
    assert_eq!(diff["before"]["total"].as_i64().unwrap(), count(&all, "burn_c"), "{diff:#}");
    assert_eq!(diff["after"]["total"], diff["before"]["total"]);
    let names: Vec<&str> =
        diff["functions"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&"burn_a") && names.contains(&"burn_c"), "{names:?}");
}

/// How many perf events process `pid` has open.
fn perf_events_open(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return 0 };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy() == "anon_inode:[perf_event]")
        .count()
}

/// A shell script that runs forker thirty times, whose children each work 20 ms (most of them are gone,
/// their /proc with them, by the time their samples are read), then dlplug, which loads libplug.so with
/// dlopen and calls its plug_parse 20 million times.
fn starts_programs() -> String {
    format!(
        "i=0; while [ $i -lt 30 ]; do {} 0.02; i=$((i + 1)); done; {} 20000000 0 >/dev/null",
        workload("forker").display(),
        workload("dlplug").display()
    )
}

/// The programs [`starts_programs`] started are in recording `data` (CPU and off-CPU), unwound and
/// named; process `other` is not.
fn assert_started_programs_named(data: &str, other: u32) {
    let r = report_json(data, &[]);
    let pids: std::collections::BTreeSet<i64> =
        r["threads"].as_array().unwrap().iter().map(|t| t["pid"].as_i64().unwrap()).collect();
    assert!(!pids.contains(&(other as i64)), "the unfollowed spin is not sampled: {pids:?}");
    // Most of the 30 forkers and their two children each, dlplug (and the shell, when it was sampled).
    assert!(pids.len() >= 45, "{pids:?}");
    let of = |r: &serde_json::Value, name: &str, module: &str| {
        r["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name && f["module"].as_str().unwrap().ends_with(&format!("/{module}")))
            .map_or(0, |f| f["total"].as_i64().unwrap())
    };
    let (child, parent) = (of(&r, "child_work", "forker"), of(&r, "parent_work", "forker"));
    // The same work in the parent and in each of its two children: twice the parent's in the children
    // (20 ms each at most; forker sizes its work by the CPU it gets, 3 ms was seen here under load).
    assert!(parent >= 10 && child >= parent, "child_work {child}, parent_work {parent}: {r}");
    let plug = of(&r, "plug_parse", "libplug.so");
    assert!(plug > 20, "plug_parse: {plug} samples");
    assert!(of(&r, "main", "dlplug") >= plug, "plug_parse's samples go on to dlplug's main");
    let unwind = &r["unwind"];
    let (complete, partial) = (unwind["complete"].as_i64().unwrap(), unwind["partial"].as_i64().unwrap());
    // Complete but for samples taken mid-exec (the old image's user registers, the new image's maps) and
    // in the dynamic linker's first lookups: 99.9% on a quiet machine, 98.9% in the full suite.
    assert!(complete as f64 >= 0.98 * (complete + partial) as f64, "{unwind}");
    // dlplug sleeps 300 ms after it loads the library: a blocked stack through its main.
    let off = report_json(data, &["--type", "offcpu"]);
    let blocked = of(&off, "main", "dlplug");
    assert!(blocked >= 290_000_000, "dlplug's main blocked {blocked} ns");
}

/// Programs that a followed process starts after the recording began are unwound and named from the
/// side band (mappings, execs, forks) that one event per CPU gives of every process, kept for the
/// followed process and its children: a shell's children that exec `forker` (short-lived), whose two
/// children each fork without exec; then `dlplug`, which loads a library with dlopen.
#[test]
fn programs_started_after_attaching_are_named() {
    let dir = tmp();
    let fifo = dir.path().join("go");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let script = format!("read x < {}; {}", fifo.display(), starts_programs());
    let sh = Spinner(std::process::Command::new("sh").arg("-c").arg(&script).spawn().unwrap());
    let pid = sh.0.id();
    let (_other, other) = spawn_spin("spin");
    let data = dir.path().join("started.data");
    let data = data.to_str().unwrap();
    let mut ws = whyslow()
        .args(["record", "-q", "--cpu", "--offcpu", "-p", &pid.to_string(), "-o", data])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Released once whyslow has its events open: the clock and the side band on each CPU.
    let cpus = std::thread::available_parallelism().unwrap().get();
    for _ in 0..6000 {
        if perf_events_open(ws.id()) >= 2 * cpus {
            break;
        }
        assert!(ws.try_wait().unwrap().is_none(), "whyslow ended before the target started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&fifo, "go\n").unwrap();
    // The recording ends with the shell, after dlplug.
    let out = ws.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    drop(sh);
    assert_started_programs_named(data, other);
}

/// The same programs started by a launched command.
#[test]
fn programs_a_launched_command_starts_are_named() {
    let dir = tmp();
    let (_other, other) = spawn_spin("spin");
    let data = record(dir.path(), "launched", &["--cpu", "--offcpu"], &["sh", "-c", &starts_programs()]);
    assert_started_programs_named(&data, other);
}

/// A Go server whose CPU goes to two handlers and the garbage collector (tests/workloads/gosplit.go),
/// built by the installed Go and by Go 1.20 (whose systemstack and mcall have no frame of their own),
/// recorded by whyslow while the program's own profiler (net/http/pprof) samples the same seconds: at
/// least 95% of the stacks reach a real root (goexit, mstart; mcall whose goroutine is gone), the header's
/// figure agrees, and each function's total share is Go's within 7 points. Go samples at 100 Hz: ~400
/// samples of 40% of a core in 10 s, a standard error of ~2.5 points at a share of 40% (~3.5 for the
/// difference of the two).
#[test]
fn go_stacks_reach_their_roots_and_agree_with_go_own_profile() {
    let _one = exclusive();
    for name in ["gosplit", "gosplit_go120"] {
        let dir = tmp();
        let mut child = std::process::Command::new(workload(name))
            .args(["0", "60"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let server = Spinner(child);
        let port: u16 = line.trim().parse().unwrap_or_else(|_| panic!("no port from {name}: {line:?}"));
        std::thread::sleep(Duration::from_secs(1));
        let url = format!("http://127.0.0.1:{port}/debug/pprof/profile?seconds=10");
        let go = std::thread::spawn(move || report_json(&url, &[]));
        let data = dir.path().join("w.data").to_string_lossy().into_owned();
        ok(&["record", "-q", "-p", &server.0.id().to_string(), "-d", "10", "-o", &data]);
        let theirs = go.join().unwrap();
        drop(server);
        let ours = report_json(&data, &["--type", "cpu"]);

        let unwind = &ours["unwind"];
        let (complete, partial) = (unwind["complete"].as_i64().unwrap(), unwind["partial"].as_i64().unwrap());
        assert!(complete as f64 >= 0.95 * (complete + partial) as f64, "{name}: {unwind}");
        let folded = dir.path().join("w.folded");
        ok(&["export", &data, "--format", "folded", "--type", "cpu", "-o", folded.to_str().unwrap()]);
        let text = std::fs::read_to_string(&folded).unwrap();
        let count = |l: &str| l.rsplit_once(' ').map_or(0, |(_, n)| n.parse::<u64>().unwrap());
        let total: u64 = text.lines().map(count).sum();
        let rooted: u64 = text
            .lines()
            .filter(|l| {
                ["runtime.goexit;", "runtime.mstart;", "runtime.mcall;"].iter().any(|r| l.starts_with(r))
            })
            .map(count)
            .sum();
        assert!(total > 1000, "{name}: {total} samples");
        assert!(
            rooted as f64 >= 0.95 * total as f64,
            "{name}: {rooted} of {total} stacks reach a root: {text}"
        );
        // What the program controls is there at all, and the collector runs under its root.
        for f in ["main.spin", "main.churn", "runtime.gcBgMarkWorker"] {
            assert!(total_pct(&ours, f) > 5.0, "{name}: {f} {:.1}%", total_pct(&ours, f));
        }
        for f in [
            "net/http.(*conn).serve",
            "main.spin",
            "main.churn",
            "runtime.mallocgc",
            "runtime.gcBgMarkWorker",
        ] {
            let (a, b) = (total_pct(&ours, f), total_pct(&theirs, f));
            assert!((a - b).abs() <= 7.0, "{name}: {f} {a:.1}% vs Go's own {b:.1}%");
        }
    }
}
