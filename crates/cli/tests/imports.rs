//! Profiles whyslow did not record: pprof files and Go's /debug/pprof URLs, folded stacks and `perf
//! script` output, read by report, flamegraph, export, diff and doctor; and every kind of bad input as one
//! line and exit status 1.

mod common;
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// (name, module, self, total, self_pct, total_pct) of every function, sorted.
fn rows(r: &Value) -> Vec<(String, String, i64, i64, String, String)> {
    let mut v: Vec<_> = r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["module"].as_str().unwrap().to_string(),
                f["self"].as_i64().unwrap(),
                f["total"].as_i64().unwrap(),
                f["self_pct"].to_string(),
                f["total_pct"].to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A 1 s recording of cpu_split in `d`; busy, so not beside the tests that measure shares (they hold
/// the same lock).
fn busy_recording(d: &std::path::Path) -> String {
    let _busy = exclusive();
    record(d, "x", &[], &[workload("cpu_split").to_str().unwrap(), "1"])
}

#[test]
fn pprof_export_imports_back_with_the_same_report() {
    let dir = tmp();
    let d = dir.path();
    let data = busy_recording(d);
    let pb = d.join("x.pb.gz").to_string_lossy().into_owned();
    ok(&["export", &data, "--format", "pprof", "-o", &pb]);
    let (want, got) = (report_json(&data, &["--type", "cpu"]), report_json(&pb, &["--type", "cpu"]));
    assert_eq!(got["total_samples"], want["total_samples"]);
    assert!(want["total_samples"].as_i64().unwrap() > 300, "{}", want["total_samples"]);
    assert_eq!(rows(&got), rows(&want), "per-function self/total must survive pprof");
    assert_eq!(got["frequency_hz"], want["frequency_hz"]);
    assert_eq!(got["sample_type"], "cpu");
    // The diff of a recording and its own export is zero everywhere, in seconds.
    let diff: Value = serde_json::from_str(&ok(&["diff", &data, &pb, "--format", "json"])).unwrap();
    assert_eq!(diff["unit"], "seconds", "{diff}");
    for f in diff["functions"].as_array().unwrap() {
        assert_eq!(f["self_delta"].as_f64(), Some(0.0), "{f}");
    }
}

#[test]
fn folded_import_equals_folded_export() {
    let dir = tmp();
    let d = dir.path();
    let data = busy_recording(d);
    let path = |n: &str| d.join(n).to_string_lossy().into_owned();
    ok(&["export", &data, "--format", "folded", "-o", &path("x.folded")]);
    ok(&["export", &path("x.folded"), "--format", "folded", "-o", &path("y.folded")]);
    let sorted = |n: &str| {
        let mut l: Vec<String> =
            std::fs::read_to_string(path(n)).unwrap().lines().map(String::from).collect();
        l.sort();
        l.join("\n")
    };
    assert!(sorted("x.folded").lines().count() >= 3);
    assert_eq!(sorted("y.folded"), sorted("x.folded"));
    // --type names the folded stacks' one type.
    let r = report_json(&path("x.folded"), &["--type", "cpu"]);
    assert_eq!((r["sample_type"].as_str(), r["unit"].as_str()), (Some("cpu"), Some("samples")));
    ok(&["flamegraph", &path("x.folded"), "-o", &path("x.svg")]);
    assert!(std::fs::read_to_string(path("x.svg")).unwrap().contains("burn_a"));
}

/// Whether `perf` runs here (a message says the test is skipped when not).
fn perf_installed() -> bool {
    let ok = Command::new("perf").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("perf not installed (apt-get install linux-perf): skipping");
    }
    ok
}

/// How long each cpu_split run of the perf.data comparisons lasts (its samples set the shares' error).
const SPLIT_SECONDS: &str = "4";

fn perf_record(out: &std::path::Path, args: &[&str], workload_name: &str) {
    let st = Command::new("perf")
        .args(["record", "-q", "-F", "999", "-o"])
        .arg(out)
        .args(args)
        .arg("--")
        .arg(workload(workload_name))
        .arg(SPLIT_SECONDS)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "perf record {args:?} failed");
}

/// `perf record -g` on the frame-pointer build, `perf script`, imported: 60/30/10 within 3 points.
#[test]
fn perf_script_of_a_real_recording() {
    if !perf_installed() {
        return;
    }
    let _quiet = exclusive(); // cpu_split splits by time: no other busy test beside it
    let dir = tmp();
    let d = dir.path();
    let pdata = d.join("perf.data");
    perf_record(&pdata, &["-g"], "cpu_split_fp");
    let out =
        Command::new("perf").arg("script").arg("-i").arg(&pdata).stderr(Stdio::null()).output().unwrap();
    assert!(out.status.success());
    let txt = d.join("perf.txt");
    std::fs::write(&txt, &out.stdout).unwrap();
    let r = report_json(txt.to_str().unwrap(), &[]);
    assert_eq!(r["sample_type"], "cpu");
    assert!(r["total_samples"].as_i64().unwrap() > 600, "{}", r["total_samples"]);
    assert_split(&r);
    let main = function(&r, |n| n == "main").unwrap();
    assert!(main["module"].as_str().unwrap().ends_with("cpu_split_fp"));
    assert!(total_pct(&r, "main") > 95.0, "frame pointers reach main");
    assert_eq!(r["frequency_hz"], 999);
}

/// The same workload three ways: `whyslow record`, `perf record -g` on the frame-pointer build and
/// `perf record --call-graph dwarf` on the build without frame pointers (its stacks unwound by whyslow):
/// the shares of burn_a/b/c are each within 3 points of 60/30/10, and the dwarf import reaches main in
/// >= 99% of samples.
#[test]
fn perf_data_three_ways_agree() {
    if !perf_installed() {
        return;
    }
    let _quiet = exclusive(); // cpu_split splits by time: no other busy test beside it
    let dir = tmp();
    let d = dir.path();
    let ours = split_shares(&report_json(
        &record(d, "ours", &[], &[workload("cpu_split").to_str().unwrap(), SPLIT_SECONDS]),
        &[],
    ));
    let perf = |name: &str, args: &[&str], bin: &str| {
        let out = d.join(name);
        perf_record(&out, args, bin);
        report_json(out.to_str().unwrap(), &[])
    };
    let fp = perf("fp.data", &["-g"], "cpu_split_fp");
    let dwarf = perf("dwarf.data", &["--call-graph", "dwarf,32768"], "cpu_split");
    // Each run is a sample of ~4000 (+-0.8 points at 60%): each must be within 3 points of the known split,
    // so two of them agree within 6 (comparing two noisy runs within 3 failed one time in ~20 here; 2 s
    // runs of ~2000 samples missed by 0.1 point once: 63.1).
    for (name, r) in [("perf -g", &fp), ("perf dwarf", &dwarf)] {
        let theirs = split_shares(r);
        for (i, want) in [60.0, 30.0, 10.0].into_iter().enumerate() {
            assert!(
                (theirs[i] - want).abs() <= 3.0 && (ours[i] - want).abs() <= 3.0,
                "{name}: {theirs:.1?}, whyslow record {ours:.1?}, vs 60/30/10"
            );
        }
        assert_eq!(r["frequency_hz"], 999, "{name}");
    }
    assert!(
        total_pct(&dwarf, "main") >= 99.0,
        "dwarf stacks unwound to main: {}%",
        total_pct(&dwarf, "main")
    );
    assert!(total_pct(&fp, "main") >= 95.0, "frame pointers reach main");
    // A truncated perf.data is one line, no panic.
    let bytes = std::fs::read(d.join("fp.data")).unwrap();
    std::fs::write(d.join("cut.data"), &bytes[..bytes.len() / 3]).unwrap();
    let err = fails(&["report", d.join("cut.data").to_str().unwrap()]);
    assert!(err.contains("cut.data"), "{err}");
}

/// The Go server of tests/workloads/pprofserv.go on a free port, ended when dropped.
struct GoServer {
    child: Child,
    port: u16,
}

impl GoServer {
    fn start() -> GoServer {
        let mut child = Command::new(workload("pprofserv"))
            .args(["0", "300"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("no port from pprofserv: {line:?}"));
        GoServer { child, port }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for GoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn go_pprof_urls_report_doctor_diff_and_heap() {
    let _one = exclusive(); // shares matter: not beside the other tests that load the cores
    let srv = GoServer::start();
    let cpu = srv.url("/debug/pprof/profile?seconds=2");

    let r = report_json(&cpu, &[]);
    assert_eq!((r["sample_type"].as_str(), r["unit"].as_str()), (Some("cpu"), Some("nanoseconds")));
    assert_eq!(r["frequency_hz"], 100);
    assert!((r["duration_s"].as_f64().unwrap() - 2.0).abs() < 0.5, "{}", r["duration_s"]);
    // The server spends most of its CPU dispatching through reflect.Value.Call.
    let call = total_pct(&r, "reflect.Value.call");
    assert!(call >= 40.0, "reflect.Value.call total {call:.1}%");
    let top: Vec<&str> =
        r["functions"].as_array().unwrap().iter().take(5).map(|f| f["name"].as_str().unwrap()).collect();
    assert!(top.contains(&"reflect.Value.call"), "top by self: {top:?}");
    assert!(total_pct(&r, "main.dispatch") >= 40.0);

    let doc: Value = serde_json::from_str(&ok(&["doctor", &cpu, "--format", "json"])).unwrap();
    let first = &doc["findings"][0];
    assert_eq!(first["id"], "reflection-dispatch", "{doc}");
    assert!(first["impact_pct"].as_f64().unwrap() >= 40.0, "{first}");
    let skipped: Vec<&str> = doc["skipped"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    for rule in ["small-writes", "redundant-calls", "lock-contention", "blocking-io"] {
        assert!(
            skipped.iter().any(|s| s.starts_with(&format!("{rule}: needs"))),
            "{rule} not in {skipped:?}"
        );
    }
    // The Go server records no compile flags: the rule says so rather than what it needs.
    assert!(
        skipped.iter().any(|s| s.starts_with("unoptimized-build: the hot code is in pprofserv")),
        "unoptimized-build not in {skipped:?}"
    );

    // Two fetches, one profile each: both sides see the same dispatcher.
    let diff: Value =
        serde_json::from_str(&ok(&["diff", &cpu, &cpu, "--format", "json", "--limit", "1000"])).unwrap();
    assert_eq!(diff["unit"], "seconds", "{diff}");
    // Each side holds CPU time of the server (beside five builds it got 0.45 s of a 2 s profile); the
    // shares below are what the diff must agree on.
    assert!(diff["before"]["seconds"].as_f64().unwrap() > 0.1, "{}", diff["before"]);
    assert!(diff["after"]["seconds"].as_f64().unwrap() > 0.1, "{}", diff["after"]);
    let call =
        diff["functions"].as_array().unwrap().iter().find(|f| f["name"] == "reflect.Value.call").unwrap();
    for side in ["total_pct_before", "total_pct_after"] {
        assert!(call[side].as_f64().unwrap() >= 40.0, "{call}");
    }

    let heap = report_json(&srv.url("/debug/pprof/heap"), &[]);
    assert_eq!(heap["sample_type"], "inuse_space");
    for t in ["alloc_objects", "alloc_space", "inuse_objects"] {
        let h = report_json(&srv.url("/debug/pprof/heap"), &["--type", t]);
        assert_eq!(h["sample_type"], t);
    }
    let allocs = report_json(&srv.url("/debug/pprof/allocs"), &["--type", "alloc_space"]);
    assert!(allocs["total_samples"].as_i64().unwrap() > 0);

    let err = fails(&["report", &srv.url("/debug/pprof/nope")]);
    assert!(err.contains("HTTP 404") && err.contains("Unknown profile"), "{err}");
}

#[test]
fn bad_inputs_are_one_line_each() {
    let err = fails(&["report", "http://127.0.0.1:1/x"]);
    assert!(
        err.starts_with("whyslow: error: cannot fetch http://127.0.0.1:1/x: ") && err.contains("refused"),
        "{err}"
    );
    let out = run(&["report", "http://127.0.0.1:1/x"]);
    assert_eq!(out.status.code(), Some(1));

    let dir = tmp();
    let d = dir.path();
    let corpus = root().join("crates/import/tests/corpus/go_cpu.pb.gz");
    let gz = std::fs::read(corpus).unwrap();
    let cut = d.join("cut.pb.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();
    let err = fails(&["report", cut.to_str().unwrap()]);
    assert!(err.contains("cut.pb.gz has corrupt gzip data"), "{err}");

    let random = d.join("random.bin");
    let bytes: Vec<u8> = (0u32..4096).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 0x80).collect();
    std::fs::write(&random, bytes).unwrap();
    for cmd in ["report", "flamegraph", "export", "doctor"] {
        let mut args = vec![cmd, random.to_str().unwrap()];
        if cmd == "export" {
            args.extend(["--format", "folded", "-o", "-"]);
        }
        let err = fails(&args);
        assert!(
            err.ends_with(
                "random.bin is not a whyslow recording, perf.data, pprof profile, folded stacks or perf script output\n"
            ),
            "{cmd}: {err}"
        );
    }
    let bad = d.join("bad.folded");
    std::fs::write(&bad, "main;f 1\nmain;g twelve\n").unwrap();
    let err = fails(&["diff", bad.to_str().unwrap(), bad.to_str().unwrap()]);
    assert!(err.contains("bad.folded line 2: not folded stacks"), "{err}");
}

/// A profile piped in is read once, whole: from standard input (`perf script | whyslow report -`) and
/// from a pipe named on the command line (`whyslow report <(...)`, a FIFO), where opening the file a
/// second time (to look for perf.data's magic first) lost what the first open had read. A source that
/// never ends (/dev/zero) is refused after its first bytes (issue 18 item 19).
#[test]
fn piped_profiles_are_read_once_and_endless_input_is_refused() {
    use std::io::Write;
    let folded = "main;work;a 30\nmain;work;b 10\nmain;c 2\n";
    let check = |out: std::process::Output, how: &str| {
        assert!(out.status.success(), "{how}: {}", String::from_utf8_lossy(&out.stderr));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let total = |name: &str| function(&r, |n| n == name).map_or(0, |f| f["total"].as_i64().unwrap());
        assert_eq!((total("main"), total("work"), total("a"), total("c")), (42, 40, 30, 2), "{how}: {r:#}");
    };
    let mut child = whyslow()
        .args(["report", "-", "--format", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(folded.as_bytes()).unwrap();
    check(child.wait_with_output().unwrap(), "standard input");

    let dir = tmp();
    let fifo = dir.path().join("stacks.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, folded).unwrap())
    };
    // Under `timeout`: opening the pipe a second time, with no writer left, would wait forever.
    let out = Command::new("timeout")
        .arg("20")
        .arg(whyslow().get_program())
        .args(["report", fifo.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    check(out, "a named pipe");
    writer.join().unwrap();

    let err = fails(&["report", "/dev/zero"]);
    assert!(err.ends_with("/dev/zero is not a whyslow recording, perf.data, pprof profile, folded stacks or perf script output\n"), "{err}");
}
