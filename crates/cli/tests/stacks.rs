//! `whyslow stacks -p PID`: every thread's stack and state of a running process, without stopping it.
//! A C program with threads parked in known places (tests/workloads/parked.c) and a CPython program
//! blocked in a known Python function (tests/workloads/python/blocked.py): each thread's innermost
//! function, state and syscall exactly, every C stack whole down to its thread's first frame.

mod common;
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A started workload that is killed when the test ends, however it ends.
struct Target(Child);

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` and waits for its "PID ready" line.
fn start(cmd: &mut Command) -> (Target, u32) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("start workload");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let pid = line.split_whitespace().next().and_then(|p| p.parse().ok()).expect("pid line");
    assert!(line.contains("ready"), "{line}");
    (Target(child), pid)
}

/// Waits until every thread of `pid` but those named in `running` sleeps (state S in /proc): the
/// workload's threads reach their syscalls soon after they start.
fn settled(pid: u32, running: &[&str]) {
    for _ in 0..500 {
        let tasks: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten().collect();
        let all = tasks.iter().all(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            let state =
                stat.rsplit_once(')').map_or(' ', |(_, r)| r.trim_start().chars().next().unwrap_or(' '));
            running.contains(&comm.trim()) || state == 'S'
        });
        if all {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the threads of {pid} did not settle");
}

/// Waits until the main thread of `pid` sleeps (the other threads run as they please).
fn settled_but_one(pid: u32) {
    for _ in 0..500 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/stat")).unwrap_or_default();
        if stat.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('S')) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the main thread of {pid} did not settle");
}

fn stacks_json(pid: u32) -> Value {
    serde_json::from_str(&ok(&["stacks", "-p", &pid.to_string(), "--format", "json"])).unwrap()
}

/// The thread named `name`.
fn thread<'a>(v: &'a Value, name: &str) -> &'a Value {
    let threads = v["threads"].as_array().unwrap();
    threads.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no thread {name}: {v:#}"))
}

/// A thread's user-space function names, innermost first.
fn user_functions(t: &Value) -> Vec<&str> {
    t["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] != "kernel")
        .map(|f| f["function"].as_str().unwrap())
        .collect()
}

#[test]
fn c_threads_show_their_function_state_and_syscall_and_reach_their_root() {
    let (_t, pid) = start(&mut Command::new(workload("parked")));
    settled(pid, &["spinner"]);
    let v = stacks_json(pid);
    assert_eq!(v["pid"], pid);
    assert_eq!(v["threads"].as_array().unwrap().len(), 7, "main, futexer, reader, spinner, 3 pool threads");
    // (thread, its function under the thread's start, innermost function, state, syscall)
    let cases = [
        ("parked", "main", "park_in_sleep", Some("sleeping"), Some("clock_nanosleep")),
        ("futexer", "futexer", "park_in_futex", Some("sleeping"), Some("futex")),
        ("reader", "reader", "park_in_read", Some("sleeping"), Some("read")),
        ("pool-0", "pool_worker", "park_in_futex", Some("sleeping"), Some("futex")),
        ("pool-2", "pool_worker", "park_in_futex", Some("sleeping"), Some("futex")),
        // On a CPU or waiting for one: the machine decides which; in no syscall either way.
        ("spinner", "spinner", "spin_here", None, None),
    ];
    for (name, caller, innermost, state, syscall) in cases {
        let t = thread(&v, name);
        assert_eq!(t["innermost"], innermost, "{name}: {t:#}");
        let f = user_functions(t);
        assert!(f.contains(&caller), "{name}: {f:?}");
        let root = *f.last().unwrap();
        let want = if name == "parked" { "_start" } else { "clone3" };
        assert_eq!(root, want, "{name}'s stack reaches its root: {f:?}");
        assert_eq!(t["complete"], true, "{name}");
        match state {
            Some(s) => assert_eq!(t["state"], s, "{name}"),
            None => assert!(t["state"] == "running" || t["state"] == "runnable", "{name}: {}", t["state"]),
        }
        assert_eq!(t["syscall"]["name"].as_str(), syscall, "{name}");
    }
    // What each waits on, from the syscall's arguments.
    let reader = thread(&v, "reader");
    let waits = reader["waits_on"].as_str().unwrap();
    assert!(waits.starts_with("fd ") && waits.contains(": pipe:["), "{waits}");
    let futex = thread(&v, "futexer")["waits_on"].as_str().unwrap().to_string();
    assert!(futex.starts_with("futex 0x") && futex.ends_with(" wait"), "{futex}");
    assert_eq!(thread(&v, "parked")["waits_on"], "for 1000.000 s");
    // The futexer and the pool wait on one futex word.
    assert_eq!(thread(&v, "pool-1")["waits_on"], futex.as_str());
    // Blocked since they started, before the test looked: the kernel's time off the CPU is positive.
    assert!(thread(&v, "reader")["for_ns"].as_u64().unwrap() > 0);
}

#[test]
fn text_folds_threads_with_the_same_stack_and_state() {
    let (_t, pid) = start(Command::new(workload("parked")).arg("5"));
    settled(pid, &["spinner"]);
    let text = ok(&["stacks", "-p", &pid.to_string()]);
    assert!(text.starts_with(&format!("Process {pid}: ")), "{text}");
    assert!(text.contains("(9 threads, "), "{text}");
    // The five pool threads are one block, before the single threads.
    let block = text.split("\n\n").nth(1).unwrap();
    assert!(block.starts_with("5 threads: "), "{text}");
    for k in 0..5 {
        assert!(block.contains(&format!("\"pool-{k}\"")), "{block}");
    }
    assert!(block.contains("sleeping for ") && block.contains(" in futex(futex 0x"), "{block}");
    let reader = text.split("\n\n").find(|b| b.contains("\"reader\"")).unwrap();
    assert!(
        reader.contains(" in read(fd ") && reader.contains("park_in_read (") && reader.contains("parked.c:")
    );
}

#[test]
fn a_python_thread_shows_its_python_function_with_file_and_line() {
    let mut tested = 0;
    for minor in [8, 11, 12, 13] {
        let Some(exe) = pyenv_python(minor) else {
            eprintln!("skipped CPython 3.{minor}: not installed under ~/.pyenv/versions");
            continue;
        };
        let script = root().join("tests/workloads/python/blocked.py");
        let (_t, pid) = start(Command::new(&exe).arg(&script));
        // CPython does not name its threads for the OS: the second thread is the spinner.
        settled_but_one(pid);
        let v = stacks_json(pid);
        let threads = v["threads"].as_array().unwrap();
        assert_eq!(threads.len(), 2, "3.{minor}");
        let main = &threads[0];
        assert_eq!(main["state"], "sleeping", "3.{minor}");
        assert_eq!(main["syscall"]["name"], "read", "3.{minor}");
        let py: Vec<&Value> = main["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["file"].as_str().unwrap().ends_with("blocked.py"))
            .collect();
        let names: Vec<&str> = py.iter().map(|f| f["function"].as_str().unwrap()).collect();
        assert_eq!(names, ["wait_here", "main", "<module>"], "3.{minor}: {main:#}");
        assert_eq!(py[0]["line"], 14, "3.{minor}: the os.read line of wait_here");
        let names: Vec<&str> = user_functions(&threads[1]);
        assert!(names.contains(&"spin_here"), "3.{minor}: {names:?}");
        tested += 1;
    }
    assert!(tested > 0, "no pyenv CPython installed");
}

#[test]
fn bad_pids_and_ended_processes_fail_in_one_line() {
    let err = fails(&["stacks", "-p", "999999999"]);
    assert!(err.contains("no such process: 999999999"), "{err}");
    // A zombie has /proc/PID but no threads to show.
    let mut child = Command::new("true").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let err = fails(&["stacks", "-p", &child.id().to_string()]);
    assert!(err.contains(&format!("no such process: {}", child.id())), "{err}");
    child.wait().unwrap();
}
