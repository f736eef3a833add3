//! `whyslow calls` against workloads with exactly known call counts: launched and attached, a BIND_NOW +
//! IBT build, memcpy through its IFUNC, a static function, C++ operator new, a library loaded later with
//! dlopen, errors.

mod common;

use common::*;
use serde_json::Value;

/// The JSON document of a run; a launched workload's own output comes before it on the same stdout.
fn calls_json(args: &[&str]) -> Value {
    let mut all = vec!["calls", "--format", "json"];
    all.extend_from_slice(args);
    let out = ok(&all);
    let start = out.find("\n{\n").map_or(0, |i| i + 1);
    serde_json::from_str(&out[start..]).unwrap()
}

/// Calls of `name` in the module whose file name is `module`.
fn count(v: &Value, name: &str, module: &str) -> u64 {
    v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"] == name && f["module"].as_str().unwrap().ends_with(module))
        .map(|f| f["calls"].as_u64().unwrap())
        .sum()
}

#[test]
fn counts_are_exact_for_static_functions_malloc_and_memcpy_through_its_ifunc() {
    // calls_debuglink is stripped: `bump` is found in the debug file its .gnu_debuglink names.
    for bin in ["calls", "calls_now", "calls_debuglink"] {
        let path = workload(bin);
        let v = calls_json(&["malloc", "free", "memcpy", "bump", "--", path.to_str().unwrap(), "30000"]);
        assert_eq!(count(&v, "bump", bin), 30000, "static function in {bin}: {v}");
        assert_eq!(count(&v, "malloc", "libc.so.6"), 30000, "{bin}: {v}");
        assert_eq!(count(&v, "free", "libc.so.6"), 30000, "{bin}: {v}");
        assert_eq!(count(&v, "memcpy", "libc.so.6"), 30000, "memcpy through the IFUNC in {bin}: {v}");
        let imp = v["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| {
                f["name"] == "memcpy"
                    && f["module"].as_str().unwrap().ends_with("libc.so.6")
                    && f["calls"] != 0
            })
            .and_then(|f| f["implementation"].as_str())
            .unwrap_or("");
        assert!(imp.starts_with("__mem") && imp.contains("unaligned"), "IFUNC resolved to {imp:?}");
        assert_eq!(v["unmatched"], serde_json::json!([]));
    }
}

#[test]
fn cpp_operator_new_and_latency() {
    let path = workload("cppstrings");
    let v = calls_json(&["--latency", "operator new*", "--", path.to_str().unwrap(), "20000"]);
    // Each 40-char string allocates once, and its append reallocates once.
    assert_eq!(count(&v, "operator new(unsigned long)", "libstdc++.so.6"), 40000, "{v}");
    let f = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "operator new(unsigned long)")
        .unwrap();
    let (avg, max) = (f["avg_ns"].as_u64().unwrap(), f["max_ns"].as_u64().unwrap());
    assert!(avg > 0 && avg <= max, "{f}");
    // The text table shows the times in units (`1.25µs`), the JSON above exact integer nanoseconds.
    let text = ok(&["calls", "--latency", "operator new*", "--", path.to_str().unwrap(), "20000"]);
    let row = text.lines().find(|l| l.contains("operator new(unsigned long)")).unwrap();
    let f: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(f[0], "40000", "{text}");
    let unit = |s: &str| {
        ["ns", "µs", "ms", "s"]
            .iter()
            .any(|u| s.ends_with(u) && s[..s.len() - u.len()].parse::<f64>().is_ok())
    };
    assert!(unit(f[2]) && unit(f[3]) && unit(f[4]), "total, avg and max in units: {row}");
}

#[test]
fn attached_counts_are_exact_and_the_target_keeps_running() {
    let out = attach_to_waiting(
        &workload("calls"),
        &["5000", "64", "wait"],
        &["calls", "--format", "json", "--budget", "none", "malloc", "bump"],
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(count(&v, "bump", "calls"), 5000, "{v}");
    assert_eq!(count(&v, "malloc", "libc.so.6"), 5000, "{v}");
}

#[test]
fn default_set_is_grouped_and_bad_patterns_suggest_names() {
    let path = workload("cppstrings");
    let out = ok(&["calls", "--", path.to_str().unwrap(), "1000"]);
    for group in ["allocation\n", "memory and strings\n"] {
        assert!(out.contains(group), "{out}");
    }
    assert!(out.contains("operator new(unsigned long)"), "{out}");
    let err = fails(&["calls", "mallok", "--", path.to_str().unwrap()]);
    assert!(err.contains("no function matches 'mallok'") && err.contains("malloc"), "{err}");
    let err = fails(&["calls", "-p", "999999999", "malloc"]);
    assert!(err.contains("no such process"), "{err}");
}

#[test]
fn callers_are_the_stacks_of_the_counted_calls() {
    let path = workload("calls");
    let out = ok(&["calls", "--stacks", "malloc", "bump", "--", path.to_str().unwrap(), "400"]);
    assert!(out.contains("callers (user stacks of every call"), "{out}");
    let kept: u64 = out
        .lines()
        .filter_map(|l| l.strip_suffix(" calls with stacks"))
        .map(|l| l.rsplit(": ").next().unwrap().parse::<u64>().unwrap())
        .sum();
    let lost: u64 = out
        .lines()
        .find_map(|l| {
            l.strip_suffix(" stack samples lost (the ring buffer was full): use --callers-period N")
        })
        .map_or(0, |n| n.parse().unwrap());
    assert_eq!(kept + lost, 800, "every counted call is a stack or a counted loss: {out}");
    assert!(out.contains("__libc_start_call_main > main\n"), "malloc and bump are called from main: {out}");
    // The same stacks in JSON: per function, root first, ending in the function.
    let v = calls_json(&["--stacks", "malloc", "--", path.to_str().unwrap(), "300"]);
    let malloc =
        v["callers"].as_array().unwrap().iter().find(|c| c["name"] == "malloc").expect("malloc's callers");
    let stacks = malloc["stacks"].as_array().unwrap();
    let sampled: u64 = stacks.iter().map(|s| s["count"].as_u64().unwrap()).sum();
    assert_eq!(malloc["sampled"].as_u64(), Some(sampled));
    assert_eq!(
        sampled + v["lost_stacks"].as_u64().unwrap(),
        300,
        "every call a stack or a counted loss: {v}"
    );
    let top = stacks[0]["frames"].as_array().unwrap();
    assert_eq!(top.last().unwrap(), "malloc");
    assert_eq!(top[top.len() - 2], "main", "{malloc}");
}

/// --follow-children counts the calls of every process the command starts, also after they exec
/// (`ltrace -f` counts 2 opens for the two cats, and forker's children call child_work once each).
#[test]
fn follow_children_counts_children_that_fork_and_exec() {
    let v =
        calls_json(&["--follow-children", "open", "--", "sh", "-c", "cat /etc/hostname; cat /etc/hostname"]);
    assert_eq!(count(&v, "open", "libc.so.6"), 2, "{v}");
    let forker = workload("forker");
    let v = calls_json(&[
        "--follow-children",
        "child_work",
        "parent_work",
        "--",
        forker.to_str().unwrap(),
        "0.2",
    ]);
    assert_eq!(count(&v, "child_work", "forker"), 2, "{v}");
    assert_eq!(count(&v, "parent_work", "forker"), 1, "{v}");
}

/// dlplug loads libplug.so with dlopen, waits 300 ms and calls plug_parse 3000 times: the library is
/// found while the run goes on (checked every 0.1 s) and its function counted exactly; with --lib it is
/// probed before it is loaded, also when it is loaded at once. A loaded library matching nothing is named.
#[test]
fn functions_of_a_library_loaded_later_are_counted() {
    let prog = workload("dlplug");
    let lib = prog.with_file_name("libplug.so");
    let (prog, lib) = (prog.to_str().unwrap(), lib.to_str().unwrap());
    let v = calls_json(&["plug_*", "--", prog, "3000", "50"]);
    assert_eq!(count(&v, "plug_parse", "libplug.so"), 3000, "{v:#}");
    assert_eq!(count(&v, "plug_init", "dlplug"), 1, "{v:#}");
    let out = ok(&["calls", "plug_*", "--", prog, "10", "50"]);
    assert!(
        out.contains("libplug.so was loaded after the start (dlopen): its 1 matching function counted"),
        "{out}"
    );
    let v = calls_json(&["--lib", lib, "plug_parse", "--", prog, "3000", "0"]);
    assert_eq!(count(&v, "plug_parse", "libplug.so"), 3000, "{v:#}");
    let out = ok(&["calls", "malloc", "--", workload("dlopener").to_str().unwrap(), "100"]);
    assert!(
        out.contains(
            "libm.so.6 was loaded after the start (dlopen): none of its functions match the patterns"
        ),
        "{out}"
    );
    let e = fails(&["calls", "--lib", "/no/such/lib.so", "malloc", "--", prog, "1", "0"]);
    assert!(e.contains("--lib /no/such/lib.so: no such file"), "{e}");
}

/// The cost of a probe hit is measured on this machine at the start of a run (whyslow probes two
/// functions of its own), not assumed: a run says what a hit cost, and the refusal of patterns matching
/// too many functions prices them with it. A single-stepped instruction takes a second trap, so it costs
/// more than an emulated one on every kernel.
#[test]
fn the_probe_hit_cost_is_measured_and_said() {
    let bin = workload("allocburst");
    let out = ok(&["calls", "malloc", "--", bin.to_str().unwrap(), "burst", "1000"]);
    let line = out.lines().find(|l| l.contains("a probe hit costs")).unwrap_or_else(|| panic!("{out}"));
    let us: Vec<f64> = line
        .split_whitespace()
        .zip(line.split_whitespace().skip(1))
        .filter(|(_, unit)| *unit == "us")
        .map(|(n, _)| n.parse().unwrap())
        .collect();
    let [emulated, stepped, program] = us[..] else { panic!("{line}") };
    assert!(emulated > 0.0 && stepped > emulated && program > 0.0 && program < emulated, "{line}");
    assert!(line.contains("measured on this machine"), "{line}");
    let v = calls_json(&["malloc", "--", bin.to_str().unwrap(), "burst", "1000"]);
    assert_eq!(count(&v, "malloc", "libc.so.6"), 1000, "{v}");
    let err = fails(&["calls", "*", "--", "true"]);
    assert!(err.contains("measured here") && err.contains("--yes"), "{err}");
}

/// A running target is probed within a budget: with `--budget 1` on a workload making 3M probed calls
/// (~1 us each, most of its CPU time), the probes stop within the budget's 20 ms credit and 1% of its CPU,
/// long before its calls end; the output says so and gives rates over the window the counts cover. A
/// launched command's counts stay exact by default (its 200000 probed calls cost far more than a budget
/// allows), and with `--budget` it runs on to its end when the probes stop.
#[test]
fn a_running_target_is_probed_within_a_budget_and_a_launched_one_exactly() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let bin = workload("calls");
    let mut target = Command::new(&bin)
        .args(["3000000", "64", "wait"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut target_out = BufReader::new(target.stdout.take().unwrap());
    let mut pid = String::new();
    target_out.read_line(&mut pid).unwrap();
    let mut ws = whyslow()
        .args(["calls", "--format", "json", "--budget", "1", "bump", "-p", pid.trim()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(ws.stderr.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains(&format!("calls of pid {} ", pid.trim())), "{line}");
    target.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    // whyslow ends at the budget, while the target goes on.
    let out = ws.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::io::copy(&mut target_out, &mut std::io::sink()).unwrap();
    assert!(target.wait().unwrap().success(), "the target runs to its normal end");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stopped_at_budget"], true, "{v}");
    let calls = count(&v, "bump", "calls");
    assert!(calls > 0 && calls < 3_000_000, "{calls}: {v}");
    let window = v["window_ns"].as_u64().unwrap();
    assert!(window > 0 && window <= v["duration_ns"].as_u64().unwrap(), "{v}");
    let per_s = v["functions"].as_array().unwrap().iter().find(|f| f["name"] == "bump").unwrap()["per_s"]
        .as_f64()
        .unwrap();
    let want = calls as f64 / (window as f64 / 1e9);
    assert!((per_s - want).abs() <= want * 1e-9, "{per_s} vs {want}: {v}");
    let notes = v["notes"].to_string();
    assert!(notes.contains("probes stopped after") && notes.contains("past the budget of 1%"), "{notes}");

    // Launched: exact by default.
    let v = calls_json(&["bump", "--", bin.to_str().unwrap(), "200000"]);
    assert_eq!(count(&v, "bump", "calls"), 200000, "{v}");
    assert_eq!(v["stopped_at_budget"], false, "{v}");
    assert_eq!(v["window_ns"], v["duration_ns"], "{v}");
    // Launched with a budget: the probes stop, the command runs to its end (its output, its status).
    let out = run(&["calls", "--budget", "1", "bump", "--", bin.to_str().unwrap(), "2000000"]);
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{err}");
    assert!(
        text.contains("(the probes stopped at the budget; calls/s are per second of that window)"),
        "{text}"
    );
    assert!(err.contains("the command runs on to its end"), "{err}");
    // The workload prints its checksum at its end: a number on a line of its own.
    assert!(text.lines().any(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_digit())), "{text}");
}

/// On a terminal (a pty from script(1)) a live line says the probes' hits per second and the
/// slowdown, and is cleared at the end.
#[test]
fn a_terminal_shows_what_the_probes_cost_while_they_run() {
    let bin = workload("calls");
    let cmd = format!("{} calls bump -- {} 300000", env!("CARGO_BIN_EXE_whyslow"), bin.display());
    let out = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let live = text.split('\r').find(|l| l.contains("hits/s")).unwrap_or_else(|| panic!("{text:?}"));
    assert!(
        live.contains("calls:") && live.contains("of the target's") && live.contains("slower"),
        "{live:?}"
    );
    assert!(text.contains("\r\x1b[2K"), "the line is cleared: {text:?}");
}
