//! Naming what production runs: stripped Go (its .gopclntab), JIT code (perf maps, jitdump), debug files
//! served by debuginfod, and files that only a target's mount namespace has.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// main.hot's share of main.step's work: 3 of every 4 units (gostrip.go).
const HOT_SHARE: f64 = 75.0;
/// Points a share may stray: at ~800 samples one binomial standard deviation of a 75% share is 1.5.
const SHARE_TOLERANCE: f64 = 6.0;

/// The modules' symbol sources of a JSON report, by file name.
fn symbol_source(r: &Value, file: &str) -> String {
    let modules = r["modules"].as_array().unwrap();
    let m = modules.iter().find(|m| m["path"].as_str().unwrap().ends_with(file));
    m.map(|m| m["symbols"].as_str().unwrap().to_string()).unwrap_or_default()
}

fn completeness(r: &Value) -> f64 {
    let complete = r["unwind"]["complete"].as_f64().unwrap();
    let partial = r["unwind"]["partial"].as_f64().unwrap();
    complete / (complete + partial)
}

/// The Go workload built as production ships Go (`-ldflags="-s -w"`, then strip: no symbol table, no
/// DWARF) is named from its .gopclntab like its unstripped build: the same functions, the inlined one
/// included, the same shares within sampling error, complete stacks, and exactly the same call counts,
/// however often Go's stack check restarts a function.
#[test]
fn stripped_go_is_named_like_its_unstripped_build() {
    let dir = tmp();
    let mut reports = Vec::new();
    for name in ["gostrip", "gostrip_stripped"] {
        let bin = workload(name);
        let data = record(dir.path(), name, &[], &[bin.to_str().unwrap(), "1500"]);
        let r = report_json(&data, &[]);
        let steps = total_pct(&r, "main.step");
        assert!(steps > 95.0, "{name}: main.step holds {steps:.1}% of the samples");
        // Shares of main.step's own work.
        let hot = 100.0 * total_pct(&r, "main.hot") / steps;
        assert!((hot - HOT_SHARE).abs() <= SHARE_TOLERANCE, "{name}: main.hot {hot:.1}% of main.step");
        // main.mix is inlined into both: its frames come from the inline tree (or DWARF).
        let mix = 100.0 * total_pct(&r, "main.mix") / steps;
        assert!(mix > 50.0, "{name}: inlined main.mix under {mix:.1}% of main.step");
        assert!(completeness(&r) >= 0.99, "{name}: {}", r["unwind"]);
        let unnamed = function(&r, |n| n.starts_with(&format!("{name}+0x")));
        assert!(unnamed.is_none(), "{name}: a frame stayed module+offset: {unnamed:?}");
        reports.push((hot, r));
    }
    let (plain, stripped) = (&reports[0], &reports[1]);
    assert!((plain.0 - stripped.0).abs() <= SHARE_TOLERANCE, "main.hot: {:.1} vs {:.1}", plain.0, stripped.0);
    assert_eq!(symbol_source(&plain.1, "gostrip"), "its symbols and DWARF");
    assert_eq!(symbol_source(&stripped.1, "gostrip_stripped"), "Go's .gopclntab");

    // Exact counts of probed Go functions: the table gives their entries.
    let counts: Vec<String> = ["gostrip", "gostrip_stripped"]
        .iter()
        .map(|name| {
            let bin = workload(name);
            let out = ok(&[
                "calls",
                "--format",
                "json",
                "main.step",
                "main.cold",
                "main.deep",
                "--",
                bin.to_str().unwrap(),
                "40",
            ]);
            let v: Value = serde_json::from_str(&out).unwrap();
            let mut c: Vec<String> = v["functions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| format!("{}={}", f["name"].as_str().unwrap(), f["calls"]))
                .collect();
            c.sort();
            c.join(" ")
        })
        .collect();
    // main.deep's stack growth restarts its prologue (8 times here): still one count per call.
    assert_eq!(counts[0], "main.cold=40 main.deep=2001 main.step=40");
    assert_eq!(counts[1], counts[0]);
}

/// The three shares of the jitmap workload's JIT functions (75/25 by construction) and where they were
/// named from.
fn jit_shares(r: &Value) -> (f64, f64, String) {
    let a = function(r, |n| n == "jit_hot_a").expect("jit_hot_a named");
    let b = function(r, |n| n == "jit_hot_b [jitted]").expect("'jit_hot_b [jitted]' named, space and all");
    let pct = |f: &Value| f["self_pct"].as_f64().unwrap();
    (pct(a), pct(b), a["module"].as_str().unwrap().to_string())
}

/// Code in no file is named from the perf map the JIT wrote (/tmp/perf-PID.map), garbage lines skipped
/// and counted, the stacks going on through the JIT frames to main; with no map, from the jitdump file
/// the process mapped.
#[test]
fn jit_code_is_named_from_perf_maps_and_jitdumps() {
    let dir = tmp();
    let bin = workload("jitmap");
    let data = record(dir.path(), "map", &[], &[bin.to_str().unwrap(), "1", "--garbage"]);
    let r = report_json(&data, &[]);
    let (a, b, module) = jit_shares(&r);
    assert!((a - 75.0).abs() <= SHARE_TOLERANCE && (b - 25.0).abs() <= SHARE_TOLERANCE, "{a:.1}/{b:.1}");
    assert!(module.starts_with("/tmp/perf-") && module.ends_with(".map"), "{module}");
    assert!(total_pct(&r, "main") > 97.0, "JIT frames unwound to main: {:.1}%", total_pct(&r, "main"));
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(notes.contains(&"3 lines of JIT perf maps named no symbol and were skipped"), "{notes:?}");

    let dump_dir = dir.path().join("dumps");
    std::fs::create_dir(&dump_dir).unwrap();
    let data = record(
        dir.path(),
        "dump",
        &[],
        &[bin.to_str().unwrap(), "1", "--no-map", "--dump", dump_dir.to_str().unwrap()],
    );
    let r = report_json(&data, &[]);
    let (a, b, module) = jit_shares(&r);
    assert!((a - 75.0).abs() <= SHARE_TOLERANCE && (b - 25.0).abs() <= SHARE_TOLERANCE, "{a:.1}/{b:.1}");
    let expected = dump_dir.join("jit-");
    assert!(module.starts_with(expected.to_str().unwrap()) && module.ends_with(".dump"), "{module}");
}

/// Node writes the perf map of its JIT with --perf-basic-prof: the JS function a program spends its
/// time in is named, as `perf report` names it.
#[test]
fn node_js_functions_are_named() {
    let dir = tmp();
    let js = dir.path().join("burn.js");
    std::fs::write(
        &js,
        "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
         let s = 0;\nfor (let i = 0; i < 120; i++) s += fib(30);\nif (s === 0) console.log(s);\n",
    )
    .unwrap();
    // Run in the temporary directory: node also writes a V8 log file into its working directory.
    let data = dir.path().join("node.data");
    let out = whyslow()
        .args(["record", "-q", "-o", data.to_str().unwrap(), "--", "node", "--perf-basic-prof"])
        .arg(&js)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report_json(data.to_str().unwrap(), &[]);
    let fib: f64 = r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"].as_str().is_some_and(|n| n.contains("fib /") && n.contains("/burn.js:1:")))
        .map(|f| f["self_pct"].as_f64().unwrap())
        .sum();
    assert!(fib > 70.0, "JS fib holds {fib:.1}% of the samples");
    let unknown = function(&r, |n| n.starts_with("[unknown]")).map(|f| f["self_pct"].as_f64().unwrap());
    assert!(unknown.unwrap_or(0.0) < 5.0, "unnamed JIT frames: {unknown:?}");
}

/// A child process killed when dropped (a server for one test).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn build_id(bin: &Path) -> String {
    let out = Command::new("readelf").arg("-n").arg(bin).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text.lines().find(|l| l.contains("Build ID:")).expect("a build id");
    line.split_whitespace().last().unwrap().to_string()
}

/// A stripped copy of cpu_split in `dir` and its debug file in `dir/served/`.
fn stripped_split(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("split");
    std::fs::copy(workload("cpu_split"), &bin).unwrap();
    std::fs::create_dir(dir.join("served")).unwrap();
    let debug = dir.join("served/split.debug");
    let st = Command::new("objcopy").arg("--only-keep-debug").arg(&bin).arg(&debug).status().unwrap();
    assert!(st.success());
    let st = Command::new("strip").arg("--strip-all").arg(&bin).status().unwrap();
    assert!(st.success());
    bin
}

/// A stripped binary whose debug file only a debuginfod server has: elfutils' own server serves it on
/// loopback, the frames are named from what it sends (and the file lands in DEBUGINFOD_CACHE_PATH);
/// a server that never answers costs one note and DEBUGINFOD_TIMEOUT, and the frames stay module+offset.
#[test]
fn debug_files_come_from_debuginfod() {
    // debuginfod does not index under a hidden directory (tempfile's default `.tmpXXXX`).
    let dir = tempfile::Builder::new().prefix("whyslow-debuginfod").tempdir().unwrap();
    let bin = stripped_split(dir.path());
    let id = build_id(&bin);
    let port = free_port();
    let server = Command::new("debuginfod")
        .args(["-F", dir.path().join("served").to_str().unwrap(), "-p", &port.to_string(), "-d"])
        .arg(dir.path().join("db.sqlite"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("debuginfod (apt-get install debuginfod)");
    let _server = Server(server);
    let url = format!("http://127.0.0.1:{port}");
    // Ready once it has indexed the directory: it then serves the file. (A fresh cache each time: a
    // miss is remembered in the cache.)
    let served = (0..300).any(|i| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let found = Command::new("debuginfod-find")
            .args(["debuginfo", &id])
            .env("DEBUGINFOD_URLS", &url)
            .env("DEBUGINFOD_CACHE_PATH", dir.path().join(format!("probe-cache-{i}")))
            .output()
            .unwrap();
        found.status.success()
    });
    assert!(served, "debuginfod did not serve {id} within 30 s");

    let cache = dir.path().join("cache");
    let data = dir.path().join("named.data");
    let out = whyslow()
        .args(["record", "-q", "-o", data.to_str().unwrap(), "--", bin.to_str().unwrap(), "0.5"])
        .env("DEBUGINFOD_URLS", &url)
        .env("DEBUGINFOD_CACHE_PATH", &cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report_json(data.to_str().unwrap(), &[]);
    // Named: the three workers hold the samples (their 60/30/10 split is the sampling tests' business).
    let [a, b, c] = split_shares(&r);
    assert!(a > b && b > c && c > 0.0, "{a:.1}/{b:.1}/{c:.1}");
    assert!(symbol_source(&r, "/split").starts_with("debuginfod ("), "{}", r["modules"]);
    let cached = std::fs::read(cache.join(&id).join("debuginfo")).unwrap();
    assert_eq!(cached, std::fs::read(dir.path().join("served/split.debug")).unwrap());

    // A server that accepts and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let data = dir.path().join("silent.data");
    let out = whyslow()
        .args(["record", "-q", "-o", data.to_str().unwrap(), "--", bin.to_str().unwrap(), "0.3"])
        .env("DEBUGINFOD_URLS", &url)
        .env("DEBUGINFOD_TIMEOUT", "1")
        .env("DEBUGINFOD_CACHE_PATH", dir.path().join("cache2"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report_json(data.to_str().unwrap(), &[]);
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    let timeout = format!("debuginfod {url} did not answer within 1 s");
    assert_eq!(notes.iter().filter(|n| n.contains(&timeout)).count(), 1, "{notes:?}");
    assert!(notes.iter().any(|n| n.starts_with("no symbols for split ")), "{notes:?}");
    assert!(function(&r, |n| n.starts_with("split+0x")).is_some());
    drop(silent);
}

/// A stripped program with no debug file anywhere: an address is named by the start of the function
/// around it as the file's .eh_frame bounds it, so cpu_split's three workers are three frames, at the
/// file offsets of burn_a, burn_b and burn_c in the unstripped build, split 60/30/10; every address of
/// their loops is one of them (a frame per address before: each loop's instructions apart).
#[test]
fn stripped_functions_are_bounded_by_eh_frame() {
    let dir = tmp();
    let bin = dir.path().join("split");
    std::fs::copy(workload("cpu_split"), &bin).unwrap();
    assert!(Command::new("strip").arg("--strip-all").arg(&bin).status().unwrap().success());
    let data = dir.path().join("s.data");
    let out = whyslow()
        .args(["record", "-q", "-F", "999", "-o", data.to_str().unwrap(), "--", bin.to_str().unwrap(), "1.5"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report_json(data.to_str().unwrap(), &[]);
    // The workers' file offsets: their addresses in the unstripped build through its executable segment.
    let elf = |args: &[&str]| {
        let out = Command::new(args[0]).args(&args[1..]).arg(workload("cpu_split")).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let segments = elf(&["readelf", "-lW"]);
    let text: Vec<&str> = segments
        .lines()
        .find(|l| l.contains("LOAD") && l.contains("R E"))
        .unwrap()
        .split_whitespace()
        .collect();
    let (offset, vaddr) = (hex(text[1]), hex(text[2]));
    let symbols = elf(&["nm"]);
    let names = SPLIT_WORKERS.map(|w| {
        let va = symbols.lines().find(|l| l.ends_with(&format!(" T {w}"))).map(|l| hex(&l[..16])).unwrap();
        format!("split+{:#x}", va - vaddr + offset)
    });
    assert_split_of(&r, names.each_ref().map(String::as_str));
    let in_loops: Vec<&Value> = r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["name"].as_str().is_some_and(|n| n.starts_with("split+0x")) && f["self"].as_i64() > Some(0)
        })
        .collect();
    assert!(in_loops.len() <= 5, "{} frames of split with samples: {in_loops:?}", in_loops.len());
}

/// A program that exists only inside its mount namespace (a tmpfs over a directory, as a container's
/// image is): its frames are named from its own file, read through its root while it ran.
#[test]
fn files_of_another_mount_namespace_are_named() {
    let dir = tmp();
    let inside = dir.path().join("inside");
    std::fs::create_dir(&inside).unwrap();
    let split = workload("cpu_split");
    let script = format!(
        "mount -t tmpfs none {d} && cp {split} {d}/split && exec {d}/split 1",
        d = inside.display(),
        split = split.display()
    );
    let data = record(dir.path(), "ns", &[], &["unshare", "-m", "sh", "-c", &script]);
    // Here the directory is empty: the file was only ever in the namespace.
    assert!(!inside.join("split").exists());
    let r = report_json(&data, &[]);
    let [a, b, c] = split_shares(&r);
    assert!(a > b && b > c && c > 0.0, "{a:.1}/{b:.1}/{c:.1}");
    assert!(total_pct(&r, "main") > 95.0, "main: {:.1}%", total_pct(&r, "main"));
}
