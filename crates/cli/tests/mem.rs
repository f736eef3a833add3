//! `whyslow record --mem`: memory in use by stack, against workloads that print what they hold.

mod common;
use common::{attach_to_waiting_with_output, fails, ok, record, report_json, tmp, workload};
use serde_json::Value;

/// The total of `name` (the function with the largest total of that name) in a JSON report.
fn total(r: &Value, name: &str) -> i64 {
    common::function(r, |n| n == name).map_or(0, |f| f["total"].as_i64().unwrap())
}

/// "held N objects B bytes", as memwork prints it.
fn held(out: &str) -> (i64, i64) {
    let w: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(w.first(), Some(&"held"), "{out}");
    (w[1].parse().unwrap(), w[3].parse().unwrap())
}

/// What a launched command leaked is what it holds at its end, to the byte and the object, under the
/// function that allocated it; the churn and the bounded cache it freed hold nothing, and their
/// allocations are counted exactly.
#[test]
fn in_use_at_exit_is_what_the_program_leaked() {
    let dir = tmp();
    let bin = workload("memwork");
    let data = dir.path().join("m.data").to_string_lossy().into_owned();
    let out = ok(&["record", "-q", "--mem", "-o", &data, "--", bin.to_str().unwrap(), "leak", "1000"]);
    let (objects, bytes) = held(&out);
    assert_eq!((objects, bytes), (1000, 63952));
    let inuse = report_json(&data, &["--type", "inuse-bytes"]);
    assert_eq!(total(&inuse, "cache_put"), bytes);
    assert_eq!(total(&inuse, "churn"), 0);
    assert_eq!(total(&inuse, "lru_put"), 0);
    assert_eq!(total(&report_json(&data, &["--type", "inuse-count"]), "cache_put"), objects);
    let count = report_json(&data, &["--type", "alloc-count"]);
    assert_eq!(total(&count, "churn"), 100_000);
    assert_eq!(total(&count, "lru_put"), 1000);
    assert_eq!(total(&count, "cache_put"), 1000);
    // At the heap's peak the bounded cache held its 64 entries of 256 bytes.
    let peak = report_json(&data, &["--type", "peak-bytes"]);
    assert_eq!(total(&peak, "lru_put"), 64 * 256);
}

/// Bytes sampled (one allocation per 64 KiB on average) give unbiased estimates: cache_put's 25.6 MB
/// (about 400 samples) within 20%, and what was freed still holds nothing.
#[test]
fn sampled_in_use_estimates_what_is_held() {
    let dir = tmp();
    let bin = workload("memwork");
    let data = dir.path().join("s.data").to_string_lossy().into_owned();
    let out = ok(&[
        "record",
        "-q",
        "--mem",
        "--mem-sample",
        "65536",
        "-o",
        &data,
        "--",
        bin.to_str().unwrap(),
        "leak",
        "400000",
    ]);
    let (_, bytes) = held(&out);
    let r = report_json(&data, &["--type", "inuse-bytes"]);
    let est = total(&r, "cache_put") as f64;
    assert!((est / bytes as f64 - 1.0).abs() < 0.2, "estimated {est} of {bytes}");
    assert_eq!(total(&r, "churn"), 0);
    assert_eq!(total(&r, "lru_put"), 0);
}

/// A process that grows by about 100 KB/s under cache_put for 3 s is a memory-growth finding that names
/// the site and its rate (as the program measured it) within 15%; the bounded cache alone raises none.
#[test]
fn the_doctor_names_steady_growth_and_not_a_bounded_cache() {
    let dir = tmp();
    let bin = workload("memwork");
    let bin = bin.to_str().unwrap();
    let grow = dir.path().join("grow.data").to_string_lossy().into_owned();
    let out = ok(&["record", "-q", "--mem", "-o", &grow, "--", bin, "grow", "3", "100000"]);
    // 100000 B/s when every 10 ms tick is on time; a busy machine stretches the ticks, so the rate is what
    // the program made: its bytes over the seconds it ran.
    let (_, bytes) = held(&out);
    let secs: f64 = out.split_whitespace().nth(6).unwrap().parse().unwrap();
    let want = bytes as f64 / secs / 1024.0;
    let report: Value = serde_json::from_str(&ok(&["doctor", "--format", "json", &grow])).unwrap();
    let finding = report["findings"].as_array().unwrap().iter().find(|f| f["id"] == "memory-growth");
    let f = finding.unwrap_or_else(|| panic!("no memory-growth finding: {report:#}"));
    let site = f["evidence"].as_array().unwrap().iter().find_map(|e| {
        let e = e.as_str()?;
        e.contains("under cache_put").then(|| e.to_string())
    });
    let site = site.unwrap_or_else(|| panic!("cache_put not named: {f:#}"));
    // "grows 97.7KiB/s (±...) under cache_put ...".
    let rate: f64 = site.split_whitespace().nth(1).unwrap().trim_end_matches("KiB/s").parse().unwrap();
    assert!((rate - want).abs() < 0.15 * want, "{site}: want {want:.1} KiB/s");
    let bounded = record(dir.path(), "bounded", &["--mem"], &[bin, "bounded", "3"]);
    let report: Value = serde_json::from_str(&ok(&["doctor", "--format", "json", &bounded])).unwrap();
    let ids: Vec<&str> =
        report["findings"].as_array().unwrap().iter().filter_map(|f| f["id"].as_str()).collect();
    assert!(!ids.contains(&"memory-growth"), "{report:#}");
}

/// `go tool pprof -sample_index=inuse_space` reads the export as a Go heap profile (skipped without Go).
#[test]
fn go_tool_pprof_reads_in_use_memory() {
    let go = ["go", "/usr/local/go/bin/go"]
        .into_iter()
        .find(|g| std::process::Command::new(g).arg("version").output().is_ok_and(|o| o.status.success()));
    let Some(go) = go else {
        eprintln!("go not installed: skipping");
        return;
    };
    let dir = tmp();
    let bin = workload("memwork");
    let data = record(dir.path(), "m", &["--mem"], &[bin.to_str().unwrap(), "leak", "1000"]);
    let pb = dir.path().join("m.pb.gz").to_string_lossy().into_owned();
    ok(&["export", &data, "--format", "pprof", "-o", &pb]);
    let out = std::process::Command::new(go)
        .args(["tool", "pprof", "-top", "-cum", "-unit=B", "-sample_index=inuse_space", &pb])
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row = text
        .lines()
        .find(|l| l.split_whitespace().last() == Some("cache_put"))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(row.split_whitespace().nth(3), Some("63952B"), "cum of cache_put: {text}");
}

/// What the library cannot enter, a process that is not there and a budget without a running process
/// are one-line errors before anything runs.
#[test]
fn what_cannot_be_measured_is_said() {
    let err = fails(&["record", "--mem", "-p", "4194303", "-o", "/dev/null"]);
    assert!(err.contains("4194303"), "{err}");
    let err = fails(&["record", "--mem", "--budget", "5", "-o", "/dev/null", "--", "/bin/true"]);
    assert!(err.contains("--budget limits the memory probes of a running process"), "{err}");
    let dir = tmp();
    let src = dir.path().join("s.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let exe = dir.path().join("static");
    let built = std::process::Command::new("gcc").arg("-static").arg("-o").arg(&exe).arg(&src).status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("no static libc to link with: skipping the static case");
        return;
    }
    let err = fails(&["record", "--mem", "-o", "/dev/null", "--", exe.to_str().unwrap()]);
    assert!(err.contains("is statically linked"), "{err}");
}

/// `memwork attach ARGS` attached with `record -p --mem EXTRA`: the run covers the window the workload
/// reports (from its release on stdin, once whyslow announced its probes, to its end) and the moments
/// before it. Returns the recording and the workload's (objects, bytes, seconds) of the window.
fn record_attached(
    dir: &std::path::Path,
    name: &str,
    workload_args: &[&str],
    extra: &[&str],
) -> (String, (i64, i64, f64)) {
    let data = dir.join(format!("{name}.data")).to_string_lossy().into_owned();
    let mut args = vec!["record", "-q", "--mem", "--budget", "none", "-o", &data];
    args.extend_from_slice(extra);
    let mut wargs = vec!["attach"];
    wargs.extend_from_slice(workload_args);
    let (_, printed) = attach_to_waiting_with_output(&workload("memwork"), &wargs, &args);
    let (objects, bytes) = held(&printed);
    let secs: f64 = printed.split_whitespace().nth(6).unwrap().parse().unwrap();
    (data, (objects, bytes, secs))
}

/// Attached exactly (every allocation) to a process that kept 1000 blocks under cache_put before and
/// frees them during the window: in use at the end is what cache_put kept in the window, to the byte
/// and the object, and so are its allocations; the frees of blocks allocated before the window subtract
/// nothing; the churn and the bounded cache hold nothing, their allocations counted exactly.
#[test]
fn attached_in_use_is_what_the_window_kept() {
    let dir = tmp();
    let (data, (objects, bytes, _)) =
        record_attached(dir.path(), "a", &["1", "48000"], &["--mem-sample", "0"]);
    assert_eq!((objects, bytes), (100, 48000));
    let inuse = report_json(&data, &["--type", "inuse-bytes"]);
    assert_eq!(total(&inuse, "cache_put"), bytes);
    assert_eq!(total(&inuse, "churn"), 0);
    assert_eq!(total(&report_json(&data, &["--type", "inuse-count"]), "cache_put"), objects);
    let count = report_json(&data, &["--type", "alloc-count"]);
    assert_eq!(total(&count, "cache_put"), objects);
    assert_eq!(total(&count, "churn"), 100 * 100);
    assert_eq!(total(&count, "lru_put"), 100);
    assert_eq!(total(&report_json(&data, &["--type", "alloc-bytes"]), "lru_put"), 100 * 4096);
}

/// Sampled by bytes (one allocation per 64 KiB on average) while attached: cache_put's 20 MB kept in the
/// window (about 300 samples) estimated within 20%, what was freed holding nothing.
#[test]
fn attached_sampled_in_use_estimates_what_is_held() {
    let dir = tmp();
    let (data, (_, bytes, _)) =
        record_attached(dir.path(), "s", &["2", "10000000", "20"], &["--mem-sample", "65536"]);
    let r = report_json(&data, &["--type", "inuse-bytes"]);
    let est = total(&r, "cache_put") as f64;
    assert!((est / bytes as f64 - 1.0).abs() < 0.2, "estimated {est} of {bytes}");
    assert_eq!(total(&r, "churn"), 0);
}

/// Attached to a process growing about 100 KB/s under cache_put for 3 s (sampled at the default 512 KiB
/// is too coarse for 300 KB: every allocation is counted), the doctor's memory-growth finding names the
/// site with the rate the program made within 15%.
#[test]
fn attached_growth_is_the_programs_rate() {
    let dir = tmp();
    let (data, (_, bytes, secs)) = record_attached(dir.path(), "g", &["3", "100000"], &["--mem-sample", "0"]);
    let want = bytes as f64 / secs / 1024.0;
    let report: Value = serde_json::from_str(&ok(&["doctor", "--format", "json", &data])).unwrap();
    let finding = report["findings"].as_array().unwrap().iter().find(|f| f["id"] == "memory-growth");
    let f = finding.unwrap_or_else(|| panic!("no memory-growth finding: {report:#}"));
    let site = f["evidence"].as_array().unwrap().iter().find_map(|e| {
        let e = e.as_str()?;
        e.contains("under cache_put").then(|| e.to_string())
    });
    let site = site.unwrap_or_else(|| panic!("cache_put not named: {f:#}"));
    let rate: f64 = site.split_whitespace().nth(1).unwrap().trim_end_matches("KiB/s").parse().unwrap();
    assert!((rate - want).abs() < 0.15 * want, "{site}: want {want:.1} KiB/s");
}

/// Starts `goleak MB SECONDS` (env `env`), records its heap with `record --mem URL EXTRA` from its pprof
/// address, releases the leak once whyslow announced it is reading, and stops whyslow (SIGINT) once the
/// program said what it leaked. Returns the recording, the bytes and objects leaked, and the program's pid.
fn record_go_heap(
    dir: &std::path::Path,
    name: &str,
    leak: [&str; 2],
    env: &[(&str, &str)],
    extra: &[&str],
) -> (String, i64, i64) {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let mut target = Command::new(workload("goleak"))
        .args(leak)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(target.stdout.take().unwrap());
    let mut port = String::new();
    out.read_line(&mut port).unwrap();
    let url = format!("http://127.0.0.1:{}/debug/pprof", port.trim());
    let data = dir.join(format!("{name}.data")).to_string_lossy().into_owned();
    let pid = target.id().to_string();
    let extra: Vec<&str> = extra.iter().map(|&a| if a == "PID" { pid.as_str() } else { a }).collect();
    let mut ws = common::whyslow()
        .args(["record", "-q", "--mem", &url, "-o", &data])
        .args(&extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(ws.stderr.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("reading the Go heap of"), "{line}");
    target.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut leaked = String::new();
    out.read_line(&mut leaked).unwrap();
    let w: Vec<&str> = leaked.split_whitespace().collect();
    assert_eq!(w.first(), Some(&"leaked"), "{leaked}");
    let status = Command::new("kill").args(["-INT", &ws.id().to_string()]).status().unwrap();
    assert!(status.success());
    let done = ws.wait_with_output().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    drop(target.stdin.take());
    target.wait().unwrap();
    (data, w[1].parse().unwrap(), w[4].parse().unwrap())
}

/// Within `tol` (a fraction) of `want`.
fn near(got: i64, want: i64, tol: f64) -> bool {
    (got as f64 / want as f64 - 1.0).abs() <= tol
}

/// A Go program's heap is its runtime's: read from its net/http/pprof address, in use under main.leak is
/// what it leaked into a global slice during the run (200 MiB in 4 KiB objects) within 10%, and so are
/// its allocations in the run; what main.churn allocated beside it (as much again) is counted as
/// allocated and holds nothing. goleak samples its heap every 64 KiB (its MemProfileRate): ~3100 samples,
/// a standard error of ~1.8%.
#[test]
fn a_go_heap_read_from_its_address_holds_what_it_leaked() {
    let dir = tmp();
    let (data, bytes, objects) = record_go_heap(dir.path(), "go", ["200", "2"], &[], &[]);
    assert_eq!((bytes, objects), (200 << 20, 51200));
    let inuse = report_json(&data, &["--type", "inuse-bytes"]);
    let got = total(&inuse, "main.leak");
    assert!(near(got, bytes, 0.1), "in use under main.leak {got} of {bytes}");
    assert!(total(&inuse, "main.churn") <= bytes / 100, "{}", total(&inuse, "main.churn"));
    let count = total(&report_json(&data, &["--type", "inuse-count"]), "main.leak");
    assert!(near(count, objects, 0.1), "{count} objects of {objects}");
    let alloc = report_json(&data, &["--type", "alloc-bytes"]);
    assert!(near(total(&alloc, "main.leak"), bytes, 0.1), "{}", total(&alloc, "main.leak"));
    assert!(near(total(&alloc, "main.churn"), bytes, 0.1), "{}", total(&alloc, "main.churn"));
    // The frames are Go's own, file and line included: main.leak's callers end at runtime.main.
    assert!(total(&inuse, "runtime.main") >= got, "{inuse:#}");
}

/// Builds `src` (C) with gcc and `flags` into `dir/name`; None where gcc cannot (no static libc, say).
fn build_c(dir: &std::path::Path, name: &str, src: &str, flags: &[&str]) -> Option<String> {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let exe = dir.join(name);
    let built = std::process::Command::new("gcc").args(flags).arg("-o").arg(&exe).arg(&c).status();
    built.is_ok_and(|s| s.success()).then(|| exe.to_string_lossy().into_owned())
}

/// A program of its own entry point that sleeps forever and links no allocator at all.
const NO_ALLOCATOR: &str = r#"
static void nap(void) {
    for (;;) {
        struct { long s, ns; } t = { 1, 0 };
        long r;
        __asm__ volatile("syscall" : "=a"(r) : "a"(35), "D"(&t), "S"(0) : "rcx", "r11", "memory");
    }
}
void _start(void) { nap(); }
"#;

/// Runs `exe` (killed when dropped).
struct Running(std::process::Child);
impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An allocator whyslow does not know: a running program that links none (its own entry point, symbols
/// kept) is one line naming the entry points it lacks, and nothing is recorded (allocation counts
/// cannot be had either); stripped, the line says no symbol names its allocator; launched, a static
/// stripped binary is refused for both ways in.
#[test]
fn an_unknown_allocator_is_named_in_one_line() {
    let dir = tmp();
    let Some(plain) = build_c(dir.path(), "noalloc", NO_ALLOCATOR, &["-nostdlib", "-static", "-O1"]) else {
        eprintln!("gcc cannot build a -nostdlib static program: skipping");
        return;
    };
    let stripped =
        build_c(dir.path(), "noalloc_s", NO_ALLOCATOR, &["-nostdlib", "-static", "-O1", "-s"]).unwrap();
    let data = dir.path().join("x.data").to_string_lossy().into_owned();
    let one_line = |err: &str| assert_eq!(err.trim().lines().count(), 1, "{err}");
    let run = Running(std::process::Command::new(&plain).spawn().unwrap());
    let pid = run.0.id().to_string();
    let err = fails(&["record", "--mem", "-p", &pid, "-d", "1", "-o", &data]);
    one_line(&err);
    assert!(
        err.contains(
            "links no allocator whyslow knows: none of its files has an allocation function (malloc, calloc"
        ) && err.contains("or a free (free, je_free"),
        "{err}"
    );
    let run = Running(std::process::Command::new(&stripped).spawn().unwrap());
    let err = fails(&["record", "--mem", "-p", &run.0.id().to_string(), "-d", "1", "-o", &data]);
    one_line(&err);
    assert!(err.contains("has no symbol table (stripped), so no symbol names its allocator"), "{err}");
    assert!(!std::path::Path::new(&data).exists(), "nothing recorded");
    let err = fails(&["record", "--mem", "-o", &data, "--", &stripped]);
    one_line(&err);
    assert!(err.contains("is statically linked and has no symbol table"), "{err}");
}

/// A Go program's heap is not malloc's. Attached without its address: a Go program without malloc
/// (statically linked) falls back to allocation counts (runtime.mallocgc) and says so in one note, with
/// no in-use type recorded; a Go program with cgo (libc's malloc linked) gets one note that only cgo's
/// malloc is counted, and where to read Go's heap.
#[test]
fn go_programs_attached_say_what_their_heap_is() {
    let dir = tmp();
    let run = Running(std::process::Command::new(workload("doctor_gogc")).spawn().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let data = dir.path().join("gc.data").to_string_lossy().into_owned();
    ok(&["record", "-q", "--mem", "-p", &run.0.id().to_string(), "-d", "1", "-o", &data]);
    drop(run);
    let r = report_json(&data, &["--type", "alloc-count"]);
    let notes: Vec<String> =
        r["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
    let note = notes
        .iter()
        .find(|n| n.contains("is a Go program without malloc"))
        .unwrap_or_else(|| panic!("{notes:?}"));
    assert!(
        note.contains("allocation counts by stack instead")
            && note.contains("--mem http://HOST:PORT/debug/pprof"),
        "{note}"
    );
    assert!(total(&r, "runtime.mallocgc") > 0, "{r:#}");
    let err = fails(&["report", &data, "--type", "inuse-bytes"]);
    assert!(err.contains("inuse-bytes"), "{err}");

    // goleak links libc (cgo): its malloc is probed, the note says what that leaves out.
    use std::io::BufRead;
    let mut child = std::process::Command::new(workload("goleak"))
        .args(["1", "1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut port).unwrap();
    let run = Running(child);
    let out = common::run(&["record", "--mem", "-p", &run.0.id().to_string(), "-d", "1", "-o", &data]);
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("is a Go program: only what its C code (cgo) allocates with malloc is counted")
            && text.contains("whyslow record --mem http://HOST:PORT/debug/pprof"),
        "{text}"
    );
}

/// Frees of pointers the library never saw allocated (made by glibc's __libc_malloc, which it does not
/// interpose) are passed on and count nothing: what the program leaked through malloc (10 x 64 bytes)
/// is in use to the byte, and one note says how many such frees there were.
#[test]
fn frees_of_pointers_never_seen_count_nothing() {
    let dir = tmp();
    let src = r#"
#include <stdlib.h>
extern void *__libc_malloc(size_t);
static void *kept[10];
__attribute__((noinline)) void leak(void) { for (int i = 0; i < 10; i++) kept[i] = malloc(64); }
int main(void) {
    for (int i = 0; i < 3; i++) free(__libc_malloc(4096));
    leak();
    return kept[9] == 0;
}
"#;
    let exe = build_c(dir.path(), "unseen", src, &["-O1", "-g"]).expect("gcc");
    let data = record(dir.path(), "u", &["--mem"], &[&exe]);
    let r = report_json(&data, &["--type", "inuse-bytes"]);
    assert_eq!(total(&r, "leak"), 640, "{r:#}");
    assert_eq!(total(&r, "main"), 640, "the unseen blocks subtract nothing");
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    assert!(notes.iter().any(|n| n.contains(": 3 frees of pointers it never saw allocated")), "{notes:?}");
}
