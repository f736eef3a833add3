//! Java on HotSpot, attached to while it runs: its JIT-compiled and interpreted methods named through the
//! JVM's own attach mechanism (no jcmd, no flags), its compiled frames unwound by the JVM's frame layout
//! (no -XX:+PreserveFramePointer), and a JVM that refuses attaching left unharmed with one note.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

/// A JvmSplit run (tests/workloads/java/JvmSplit.java) warmed up and waiting for a line on stdin; killed
/// when dropped.
struct Jvm(Child, u32);

impl Jvm {
    /// Starts JvmSplit for `seconds` after its warm-up, with `flags` before the class name.
    fn start(seconds: &str, flags: &[&str]) -> Jvm {
        Jvm::start_with("java", seconds, flags)
    }

    /// Starts JvmSplit on the JVM `java`.
    fn start_with(java: &str, seconds: &str, flags: &[&str]) -> Jvm {
        let classes = workload("java/JvmSplit.class").parent().unwrap().to_path_buf();
        let mut child = Command::new(java)
            .arg("-cp")
            .arg(&classes)
            // Each hot method keeps its own frame (the program's structure, not the profiler's need).
            .args(["-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,JvmSplit::hot*"])
            .args(flags)
            .args(["JvmSplit", seconds, "wait"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run java");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        let pid = line.trim().parse().unwrap_or_else(|_| panic!("JvmSplit printed {line:?}, not its pid"));
        Jvm(child, pid)
    }

    /// Lets the timed part run.
    fn go(&mut self) {
        self.0.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Records JVM `pid` for `seconds` into `dir/NAME.data`. With `attached`, the timed part starts once
/// whyslow has asked the JVM for its map (the map is there: within the attach's own limits, 5 s for the
/// listener and 10 s for the answer), so what it compiles next is compiled during the recording.
fn record_jvm(dir: &std::path::Path, name: &str, jvm: &mut Jvm, seconds: &str, attached: bool) -> String {
    let data = dir.join(format!("{name}.data")).to_string_lossy().into_owned();
    let pid = jvm.1.to_string();
    // A map left by an earlier process of that pid is not this JVM's answer.
    let map = std::path::PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let _ = std::fs::remove_file(&map);
    let ws = whyslow()
        .args(["record", "-q", "-d", seconds, "-o", &data, "-p", &pid])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while attached && !map.exists() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    jvm.go();
    let out = ws.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    data
}

const HOT_A: &str = "long JvmSplit.hotA(long, int)";
const HOT_B: &str = "long JvmSplit.hotB(long, int)";
const ROUND: &str = "long JvmSplit.round(long)";
const RUN: &str = "long JvmSplit.run(long, long)";
const MAIN: &str = "void JvmSplit.main(java.lang.String[])";

/// hotA runs 3 times hotB's iterations of the same loop: 75% of the two. Over 6 s at 999 Hz (~4,000
/// samples in them, ~2,500 on a busy machine) one standard error of that share is under 0.9 points:
/// 4 points is more than 4 of them, with room for the JIT's two versions of each loop differing a little.
const A_SHARE: f64 = 75.0;
const SPLIT_TOLERANCE: f64 = 4.0;

/// The JVM names its methods by itself once attached: hotA and hotB from the perf map it wrote (module
/// /tmp/perf-PID.map), split 75/25, almost every sample in one of them; and their stacks are whole
/// without frame pointers: through round (compiled) and run and main (interpreted, named from the
/// method their frame runs) to the thread's root.
#[test]
fn a_running_jvm_names_its_methods_and_unwinds_whole() {
    let _x = exclusive();
    let dir = tmp();
    let mut jvm = Jvm::start("10", &[]);
    let data = record_jvm(dir.path(), "jvm", &mut jvm, "6", true);
    let r = report_json(&data, &[]);
    let (a, b) = (self_pct(&r, HOT_A), self_pct(&r, HOT_B));
    let module = function(&r, |n| n == HOT_A).map(|f| f["module"].as_str().unwrap().to_string());
    assert!(
        module.as_deref().is_some_and(|m| m.starts_with("/tmp/perf-") && m.ends_with(".map")),
        "{module:?}"
    );
    assert!(a + b > 80.0, "the hot methods hold {a:.1}% + {b:.1}% of the samples");
    let share = 100.0 * a / (a + b);
    assert!((share - A_SHARE).abs() <= SPLIT_TOLERANCE, "hotA {share:.1}% of the two ({a:.1}/{b:.1})");
    // Whole stacks: the compiled caller between them and the interpreter is there, and the stack goes
    // on to the thread's start (measured: 97.9% of all samples on an idle machine).
    let round = total_pct(&r, ROUND);
    assert!(round >= 0.95 * (a + b), "round is in {round:.1}% of the samples, hotA/hotB in {:.1}%", a + b);
    let root = total_pct(&r, "start_thread");
    assert!(root >= 0.95 * (a + b), "stacks reach start_thread in {root:.1}% of the samples");
    for caller in [RUN, MAIN] {
        let pct = total_pct(&r, caller);
        assert!(pct >= 0.95 * (a + b), "{caller} is in {pct:.1}% of the samples, hotA/hotB in {:.1}%", a + b);
    }
    let unnamed = total_pct(&r, "Interpreter");
    assert!(unnamed <= 0.05 * (a + b), "interpreted frames left unnamed in {unnamed:.1}% of the samples");
}

/// JDK 22 and later keep a code blob's range as offsets (and its prologue's end in 16 bits), not the
/// pointers of JDK 11-21: on every such JDK installed under /usr/lib/jvm (Temurin 25 here), its
/// compiled frames unwind by the JVM's frame layout without a note, the hot methods are named and split
/// 75/25 as on 17, and their stacks go through round, run and main (interpreted, named) to the
/// thread's start.
#[test]
fn newer_jdks_unwind_compiled_frames_too() {
    let _x = exclusive();
    let mut javas: Vec<String> = std::fs::read_dir("/usr/lib/jvm")
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path().join("bin/java")))
        .filter(|java| {
            let release = std::fs::read_to_string(java.parent().unwrap().parent().unwrap().join("release"));
            let major = release.ok().and_then(|r| {
                let v = r.lines().find_map(|l| l.strip_prefix("JAVA_VERSION=\""))?.to_string();
                v.split(['.', '"']).next()?.parse::<u32>().ok()
            });
            major.is_some_and(|m| m >= 22) && java.exists()
        })
        .map(|java| java.display().to_string())
        .collect();
    javas.sort();
    if javas.is_empty() {
        eprintln!("no JDK 22 or later under /usr/lib/jvm: skipping");
        return;
    }
    for java in javas {
        let dir = tmp();
        let mut jvm = Jvm::start_with(&java, "10", &[]);
        let data = record_jvm(dir.path(), "jvm", &mut jvm, "6", true);
        let r = report_json(&data, &[]);
        let notes = r["notes"].to_string();
        assert!(!notes.contains("layout is not known"), "{java}: {notes}");
        let (a, b) = (self_pct(&r, HOT_A), self_pct(&r, HOT_B));
        assert!(a + b > 80.0, "{java}: the hot methods hold {a:.1}% + {b:.1}% of the samples");
        let share = 100.0 * a / (a + b);
        assert!((share - A_SHARE).abs() <= SPLIT_TOLERANCE, "{java}: hotA {share:.1}% ({a:.1}/{b:.1})");
        for through in [ROUND, RUN, MAIN, "start_thread"] {
            let pct = total_pct(&r, through);
            assert!(
                pct >= 0.95 * (a + b),
                "{java}: {through} in {pct:.1}% of the samples, hot {:.1}%",
                a + b
            );
        }
        println!(
            "{java}: hotA {share:.1}% of the two, {:.1}% of the samples through round",
            total_pct(&r, ROUND)
        );
    }
}

/// A JVM that disables attaching is not signalled (SIGQUIT would print a thread dump there): the run
/// goes on, its methods stay unnamed, and one note says why.
#[test]
fn a_jvm_that_disables_attaching_gets_one_note() {
    let dir = tmp();
    // It runs well past the recording: attaching took 3.5 s beside five builds.
    let mut jvm = Jvm::start("10", &["-XX:+DisableAttachMechanism"]);
    let data = record_jvm(dir.path(), "refused", &mut jvm, "2", false);
    let r = report_json(&data, &[]);
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    let pid = jvm.1;
    let expected = format!(
        "JVM {pid}: its JIT-compiled methods are not named: the JVM disables its attach mechanism \
         (-XX:+DisableAttachMechanism on its command line)"
    );
    assert_eq!(
        notes.iter().filter(|n| n.starts_with(&format!("JVM {pid}"))).collect::<Vec<_>>(),
        [&expected]
    );
    assert_eq!(self_pct(&r, HOT_A), 0.0, "no map asked for, none named");
    // Not stopped or killed: it runs on to its normal end.
    let status = jvm.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
}
