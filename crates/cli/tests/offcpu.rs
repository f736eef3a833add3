//! `whyslow record --cpu --offcpu` on a workload with known shares of wall time (50% CPU, 30% blocked on a
//! pipe, 20% asleep), built without frame pointers.

mod common;

use common::*;

#[test]
fn wall_time_splits_into_running_and_blocked_by_stack() {
    let dir = tmp();
    let bin = workload("offcpu");
    let data = record(dir.path(), "off", &["--cpu", "--offcpu"], &[bin.to_str().unwrap(), "10"]);
    let wall = report_json(&data, &["--type", "wall"]);
    let total = |r: &serde_json::Value, name: &str| {
        function(r, |n| n == name).map_or(0, |f| f["total"].as_i64().unwrap())
    };
    let phases = ["burn_phase", "read_phase", "sleep_phase"].map(|p| total(&wall, p) as f64);
    let sum: f64 = phases.iter().sum();
    // The main thread's 10 x 200 ms: 100 ms running, 60 ms blocked on the pipe, 40 ms asleep.
    assert!((sum / 1e9 - 2.0).abs() < 0.2, "the phases add up to the main thread's wall time: {sum}");
    for (got, want, name) in
        [(phases[0], 50.0, "burn"), (phases[1], 30.0, "read"), (phases[2], 20.0, "sleep")]
    {
        let share = 100.0 * got / sum;
        assert!((share - want).abs() <= 5.0, "{name}: {share:.1}% of wall, want {want}% +- 5");
    }
    // Blocked stacks are complete: through libc's read/nanosleep wrappers to main.
    let off = report_json(&data, &["--type", "offcpu"]);
    let main_blocked = total(&off, "read_phase") + total(&off, "sleep_phase");
    assert!(main_blocked > 900_000_000, "about 1 s blocked on the main thread: {main_blocked}");
    assert!(total(&off, "main") >= main_blocked, "blocked stacks reach main");
    assert!(total(&off, "feeder") > 0, "the writer thread's blocked time is there too");
}

/// A real program from apt: sqlite3 committing 3000 single-row transactions spends its wall time blocked
/// in fdatasync, which an on-CPU profile would not show. In WAL mode with synchronous=FULL a commit is a
/// WAL append and one fdatasync, so the share does not hang on how fast the disk creates and unlinks
/// rollback journals (ext4 on a CI disk took 48% of the wall in fdatasync, 25% in unlink and openat).
#[test]
fn sqlite_without_a_transaction_waits_in_fdatasync() {
    if std::process::Command::new("sqlite3").arg("-version").output().is_err() {
        eprintln!("sqlite3 missing: skipping");
        return;
    }
    let dir = tmp();
    let db = dir.path().join("t.db");
    let sql = dir.path().join("insert.sql");
    let mut text = String::from(
        "PRAGMA journal_mode=WAL;\nPRAGMA synchronous=FULL;\nCREATE TABLE t(a INTEGER, b TEXT);\n",
    );
    for i in 0..3000 {
        text.push_str(&format!("INSERT INTO t VALUES({i}, 'row {i}');\n"));
    }
    std::fs::write(&sql, text).unwrap();
    let read = format!(".read {}", sql.display());
    let data =
        record(dir.path(), "sqlite", &["--cpu", "--offcpu"], &["sqlite3", db.to_str().unwrap(), &read]);
    let wall = report_json(&data, &["--type", "wall"]);
    let sync = function(&wall, |n| n.contains("fdatasync")).map_or(0.0, |f| f["total_pct"].as_f64().unwrap());
    assert!(sync > 50.0, "most of the wall time is blocked in fdatasync: {sync}%");
    let cpu = report_json(&data, &["--type", "cpu"]);
    let on_cpu =
        function(&cpu, |n| n.contains("fdatasync")).map_or(0.0, |f| f["total_pct"].as_f64().unwrap());
    assert!(on_cpu < sync, "on-CPU alone understates it: {on_cpu}% vs {sync}%");
}

/// 8000 naps of 100 us: blocked time is sampled in the kernel at the CPU rate (-F 999: one period is
/// ~1 ms), so a block of ~150 us is kept with probability ~0.15 and valued one period. The estimate is
/// unbiased: its total lies between the two bounds of the thread's off-CPU time the workload prints (the
/// kernel's elapsed - run time, which counts the interrupt and steal time of a VM as run time, and the
/// wall time inside nap, which also holds nanosleep's own CPU time), within 15% of each: about 4 standard
/// deviations of the sampling error (~1.2 s of blocks in 1 ms periods). Each bound is what the program
/// measured; on a busy 2-core VM they were 5-8% apart. And it comes from far fewer records than blocks.
#[test]
fn short_blocks_are_sampled_in_the_kernel_without_bias() {
    let dir = tmp();
    let data = dir.path().join("naps.data");
    let bin = workload("naps");
    let blocks = 8000;
    let out = whyslow()
        .args(["record", "-q", "--offcpu", "-F", "999", "-o", data.to_str().unwrap(), "--"])
        .args([bin.to_str().unwrap(), &blocks.to_string(), "100us"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let printed = |name: &str| -> f64 {
        stderr
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("the workload reports {name}: {stderr}"))
    };
    let (lower, upper) = (printed("offcpu_ns "), printed("napwall_ns "));
    assert!(lower <= upper * 1.01, "the bounds: {lower} <= {upper}");
    let r = report_json(data.to_str().unwrap(), &["--type", "offcpu"]);
    let nap = function(&r, |n| n == "nap").map_or(0, |f| f["total"].as_i64().unwrap()) as f64;
    assert!(
        nap >= 0.85 * lower && nap <= 1.15 * upper,
        "nap's off-CPU time {nap} vs the bounds [{lower}, {upper}]: {:.3} .. {:.3}",
        nap / lower,
        nap / upper
    );
    // One record per kept block (each is unwound once): about upper / 1 ms of them, not one per block.
    let records = r["unwind"]["complete"].as_i64().unwrap() + r["unwind"]["partial"].as_i64().unwrap();
    assert!(records > 200 && records < blocks / 3, "{records} records for {blocks} blocks");
}

/// Go's runtime threads block on g0 stacks whose unwinding ends at runtime.clone or runtime.mcall; what
/// lies past them is data, not return addresses. And threads blocked until their process is torn down
/// send their block after the process's exit record. No blocked stack may hold a frame that is not a
/// code address of a mapped module (`[unknown]+0x...`); the Go workload's blocked time is all named.
#[test]
fn go_blocked_stacks_hold_only_code_addresses() {
    let dir = tmp();
    let bin = workload("gowork");
    for round in 0..3 {
        let data =
            record(dir.path(), &format!("go{round}"), &["--cpu", "--offcpu"], &[bin.to_str().unwrap()]);
        let folded = dir.path().join(format!("go{round}.folded"));
        ok(&["export", &data, "--format", "folded", "--type", "offcpu", "-o", folded.to_str().unwrap()]);
        let text = std::fs::read_to_string(&folded).unwrap();
        assert!(text.lines().count() > 3, "blocked stacks of the runtime's threads: {text}");
        let bad: Vec<&str> = text.lines().filter(|l| l.contains("[unknown]")).collect();
        assert!(bad.is_empty(), "round {round}: frames that are no code address: {bad:#?}");
    }
}

/// Every Go blocked stack ends at a root of Go's: a goroutine's goexit, a thread's mstart (or clone, for a
/// thread preempted before it got there; the program's entry for its first thread just after the exec),
/// the system stack's mcall (when the goroutine it switched away from could not be taken) or morestack,
/// or gogo switching to a goroutine (a signal handler's stack ends at the signal frame: what it
/// interrupted is not unwound). Returns the folded off-CPU stacks of recording `data`.
fn go_blocked_stacks(dir: &std::path::Path, data: &str) -> String {
    let folded = dir.join("go.folded");
    ok(&["export", data, "--format", "folded", "--type", "offcpu", "-o", folded.to_str().unwrap()]);
    let text = std::fs::read_to_string(&folded).unwrap();
    let roots = [
        "runtime.goexit",
        "runtime.mstart",
        "runtime.clone",
        "runtime.mcall",
        "runtime.morestack",
        "runtime.rt0_go",
        "_rt0_amd64_linux",
        "runtime.gogo",
        "gogo",
    ];
    let unrooted: Vec<&str> = text
        .lines()
        .filter(|l| {
            let mut frames = l.split(';');
            let mut root = frames.next().unwrap_or("");
            // A new thread preempted at its first instruction (runtime.clone's child side) has nothing
            // past it to unwind: unwound by frame pointers alone (no DWARF), that comes out cut. So does
            // a thread preempted in gogo as it switches to a goroutine (`gogo` where the symbol table
            // names it without its package, seen beside stress-ng): no real root, so counted cut; and
            // a goroutine growing its stack under morestack, which clears the frame pointer from Go 1.21
            // on (following it to the goroutine would need the runtime's g and m layouts).
            if root == "[stack cut here]" {
                let switching = |f: &&str| {
                    ["runtime.clone", "runtime.gogo", "gogo", "runtime.morestack"]
                        .iter()
                        .any(|r| f.starts_with(r))
                };
                root = frames.next().filter(switching).unwrap_or(root);
            }
            !roots.contains(&root.strip_suffix(".abi0").unwrap_or(root)) && !l.contains(";runtime.sigtramp")
        })
        .collect();
    assert!(unrooted.is_empty(), "blocked stacks without a Go root: {unrooted:#?}");
    text
}

/// Go's runtime.systemstack runs a function on the thread's system stack; a thread that blocks there (the
/// garbage collector's workers wait for each other under it) has its goroutine's frames on another stack.
/// The stack goes on with them (runtime.goexit is its root).
#[test]
fn go_blocked_stacks_cross_the_system_stack_switch() {
    let dir = tmp();
    let bin = workload("doctor_gogc");
    let data = record(dir.path(), "gc", &["--offcpu"], &[bin.to_str().unwrap()]);
    let text = go_blocked_stacks(dir.path(), &data);
    let crossed = text
        .lines()
        .filter(|l| l.starts_with("runtime.goexit;") && l.contains(";runtime.systemstack;"))
        .count();
    assert!(crossed > 0, "no blocked stack goes on from the system stack to its goroutine: {text}");
}

/// Issue 18 item 2: a goroutine that parks (time.Sleep, a channel, a network read) switches its thread to
/// the system stack with runtime.mcall, and the thread blocks in the scheduler with no goroutine of its
/// own. Its blocked stack goes on with the goroutine that parked: main.napper sleeps 1 ms at a time for
/// 2 s, so its thread is blocked under main.napper > time.Sleep > runtime.gopark > runtime.mcall for most
/// of those 2 s (another thread it ran on earlier may carry it too: blocked time is the threads'). With
/// DWARF's call frame information, without it (frame pointers only), and built by Go 1.24 (whose mcall
/// kept the goroutine's frame pointer: the stack is found through the frame-pointer chain).
#[test]
fn go_blocked_stacks_go_on_with_the_goroutine_that_parked() {
    let dir = tmp();
    for name in ["goparked", "goparked_nodwarf", "goparked_go124"] {
        let bin = workload(name);
        let data = record(dir.path(), name, &["--offcpu"], &[bin.to_str().unwrap(), "2"]);
        let text = go_blocked_stacks(dir.path(), &data);
        let ns = |keep: &dyn Fn(&str) -> bool| -> f64 {
            text.lines()
                .filter(|l| keep(l))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum::<f64>()
                / 1e9
        };
        let parked = ns(&|l| {
            l.contains(";main.napper;time.Sleep;")
                && l.contains(";runtime.gopark;runtime.mcall;runtime.park_m;")
        });
        assert!(
            parked >= 1.2,
            "{name}: {parked:.2} s blocked under main.napper's park, want >= 1.2 of 2: {text}"
        );
        let total = ns(&|_| true);
        let uncrossed = ns(&|l| l.starts_with("runtime.mcall;"));
        assert!(
            uncrossed <= 0.1 * total,
            "{name}: {uncrossed:.2} s of {total:.2} s blocked under mcall without the goroutine: {text}"
        );
        assert!(!text.contains("[unknown]"), "{name}: frames that are no code address: {text}");
    }
}
