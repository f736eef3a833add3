//! `whyslow record --alloc` on a workload with exactly known allocations: exact counts and bytes per call
//! site and per stack (counted in the kernel, whatever the ring kept: checked against the exact in-kernel
//! count of `whyslow calls`), complete stacks, each carrying its exact size.

mod common;

use common::*;

#[test]
fn allocations_are_attributed_to_their_call_sites_with_exact_sizes() {
    let dir = tmp();
    let bin = workload("allocs");
    let bin = bin.to_str().unwrap();
    let data = record(dir.path(), "alloc", &["--alloc"], &[bin, "2000"]);
    let count = report_json(&data, &["--type", "alloc-count"]);
    let bytes = report_json(&data, &["--type", "alloc-bytes"]);
    let total = |r: &serde_json::Value, name: &str| {
        function(r, |n| n == name).map_or(0, |f| f["total"].as_i64().unwrap())
    };
    for (site, size) in
        [("site_small(long)", 100), ("site_big(long)", 1000), ("operator new(unsigned long)", 48)]
    {
        let n = total(&count, site);
        assert!(n > 0, "{site} has allocation stacks");
        assert_eq!(total(&bytes, site), n * size, "{site}: every kept stack carries its size");
    }
    assert_eq!(total(&count, "operator new(unsigned long)"), total(&count, "site_new(long)"));
    // Exact per call site, whatever the ring buffer kept.
    let site_count = report_json(&data, &["--type", "alloc-site-count"]);
    let site_bytes = report_json(&data, &["--type", "alloc-site-bytes"]);
    for (site, calls, size) in [
        ("site_small(long)", 2000, 100),
        ("site_big(long)", 1000, 1000),
        ("operator new(unsigned long)", 2000, 48),
    ] {
        assert_eq!(total(&site_count, site), calls, "{site} calls malloc exactly {calls} times");
        assert_eq!(total(&site_bytes, site), calls * size, "{site} asks for {size} bytes each time");
    }
    // The exact number of malloc calls, counted in the kernel.
    let out = ok(&["calls", "--format", "json", "malloc", "--", bin, "2000"]);
    let v: serde_json::Value = serde_json::from_str(&out[out.find("\n{\n").map_or(0, |i| i + 1)..]).unwrap();
    let mallocs: i64 = v["functions"].as_array().unwrap().iter().map(|f| f["calls"].as_i64().unwrap()).sum();
    assert!(mallocs >= 5000, "2000 + 1000 + 2000 (operator new allocates through malloc): {mallocs}");
    // Every allocation is in the stacks, exactly (malloc's count less those of operator new, a site in
    // libstdc++ whose calls are counted at operator new's caller through malloc: every call is one).
    assert_eq!(count["total_samples"].as_i64().unwrap(), site_count["total_samples"].as_i64().unwrap());
    assert_eq!(bytes["total_samples"].as_i64().unwrap(), site_bytes["total_samples"].as_i64().unwrap());
    assert_eq!(count["total_samples"].as_i64().unwrap(), mallocs, "{count:#}");
}

/// The burst of issue 31, made right after main starts: 1000 posix_memalign(16, 100), 1000 memalign(16,
/// 128), 1000 malloc(64). Each is counted once, by the name called, with its bytes, and every stack is
/// complete with main as the allocator's caller, however fast they come.
#[test]
fn a_burst_of_aligned_allocations_is_exact_with_complete_stacks() {
    let dir = tmp();
    let bin = workload("allocburst");
    let data = record(dir.path(), "aligned", &["--alloc"], &[bin.to_str().unwrap(), "aligned"]);
    for (count, bytes) in [("alloc-count", "alloc-bytes"), ("alloc-site-count", "alloc-site-bytes")] {
        let c = report_json(&data, &["--type", count]);
        let b = report_json(&data, &["--type", bytes]);
        assert_eq!(c["total_samples"].as_i64().unwrap(), 3000, "{count}: {c:#}");
        assert_eq!(b["total_samples"].as_i64().unwrap(), 292_000, "{bytes}: {b:#}");
        for (name, n, size) in [("posix_memalign", 1000, 100), ("memalign", 1000, 128), ("malloc", 1000, 64)]
        {
            let self_of =
                |r: &serde_json::Value| function(r, |f| f == name).map(|f| f["self"].as_i64().unwrap());
            assert_eq!(self_of(&c), Some(n), "{count}: {name}");
            assert_eq!(self_of(&b), Some(n * size), "{bytes}: {name}");
        }
    }
    let out = ok(&["export", &data, "--format", "folded", "--type", "alloc-count", "-o", "-"]);
    let mut total = 0;
    for line in out.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        assert_eq!(frames[0], "_start", "a complete stack: {line}");
        assert_eq!(frames[frames.len() - 2], "main", "main calls the allocator: {line}");
        total += n.parse::<i64>().unwrap();
    }
    assert_eq!(total, 3000, "{out}");
}

/// One call site reached through two stacks (make() from from_a() 1000 times, then from from_b() 3000
/// times, without frame pointers): the site's count is exact, and so is the total under the two stacks;
/// where their stack key cannot tell them apart, the split is off by at most the alloc period (1024
/// calls) per change of stack.
#[test]
fn one_site_under_two_stacks_is_split_within_the_period() {
    let dir = tmp();
    let bin = workload("allocburst");
    let data = record(dir.path(), "callers", &["--alloc"], &[bin.to_str().unwrap(), "callers"]);
    let total = |r: &serde_json::Value, name: &str| {
        r["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .map_or(0, |f| f["total"].as_i64().unwrap())
    };
    let sites = report_json(&data, &["--type", "alloc-site-count"]);
    assert_eq!(total(&sites, "make"), 4000, "{sites:#}");
    let c = report_json(&data, &["--type", "alloc-count"]);
    let (a, b) = (total(&c, "from_a"), total(&c, "from_b"));
    assert_eq!(a + b, 4000, "{c:#}");
    assert!((a - 1000).abs() <= 1024 && (b - 3000).abs() <= 1024, "from_a {a}, from_b {b}");
    let bytes = report_json(&data, &["--type", "alloc-bytes"]);
    assert_eq!(total(&bytes, "make"), 4000 * 32);
}

/// `--alloc-period 1` copies the stack of every call: the ring buffer cannot take 200,000 copies of 16 KB
/// as fast as they come, and what it had no room for is reported as lost stack samples, while every
/// allocation is still counted, with its bytes and under its stack.
#[test]
fn lost_stack_samples_lose_no_counts() {
    let dir = tmp();
    let bin = workload("allocburst");
    let cmd = [bin.to_str().unwrap(), "burst", "200000"];
    let data = record(dir.path(), "lossy", &["--alloc", "--alloc-period", "1"], &cmd);
    let c = report_json(&data, &["--type", "alloc-count"]);
    let b = report_json(&data, &["--type", "alloc-bytes"]);
    assert_eq!(c["total_samples"].as_i64().unwrap(), 200_000, "{c:#}");
    assert_eq!(b["total_samples"].as_i64().unwrap(), 200_000 * 16, "{b:#}");
    let main = c["functions"].as_array().unwrap().iter().find(|f| f["name"] == "main");
    assert_eq!(main.map(|f| f["total"].as_i64().unwrap()), Some(200_000), "{c:#}");
    let text = ok(&["report", &data, "--type", "alloc-count"]);
    if c["lost_samples"].as_i64().unwrap() > 0 {
        assert!(text.contains("a lost sample loses a stack, not a count"), "{text}");
    }
}

/// A million mallocs in a few milliseconds of the target's own time: every one counted with its bytes
/// and its stack, whatever the ring buffer kept (stacks are copied per stack key, not per call).
#[test]
fn a_million_mallocs_in_a_burst_are_counted_exactly() {
    let dir = tmp();
    let bin = workload("allocburst");
    let data = record(dir.path(), "burst", &["--alloc"], &[bin.to_str().unwrap(), "burst", "1000000"]);
    let c = report_json(&data, &["--type", "alloc-count"]);
    let b = report_json(&data, &["--type", "alloc-bytes"]);
    assert_eq!(c["total_samples"].as_i64().unwrap(), 1_000_000, "{c:#}");
    assert_eq!(b["total_samples"].as_i64().unwrap(), 16_000_000, "{b:#}");
    let under_main = |r: &serde_json::Value| {
        r["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "main")
            .map(|f| f["total"].as_i64().unwrap())
    };
    assert_eq!(under_main(&c), Some(1_000_000), "{c:#}");
    assert!(function(&c, |f| f == whyslow_model::LOST_STACK_FRAME).is_none(), "{c:#}");
}

/// Children forked without exec are followed: each gets the allocators' probes once the fork is seen.
/// forker's two children each make 1000 mallocs in child_alloc, a second after the fork: the exact site
/// counts have all 2000, and each is a kept stack or a counted loss.
#[test]
fn allocations_of_forked_children_are_counted() {
    let dir = tmp();
    let data =
        record(dir.path(), "fork", &["--alloc"], &[workload("forker").to_str().unwrap(), "0.3", "1000"]);
    let total = |r: &serde_json::Value, name: &str| {
        function(r, |n| n == name).map_or(0, |f| f["total"].as_i64().unwrap())
    };
    let sites = report_json(&data, &["--type", "alloc-site-count"]);
    assert_eq!(total(&sites, "child_alloc"), 2000, "{sites:#}");
    let count = report_json(&data, &["--type", "alloc-count"]);
    assert_eq!(total(&count, "child_alloc"), 2000, "{count:#}");
}

/// `--alloc-period 64` copies each stack less often (at its 1st, 2nd, 4th, ... call, then every 64th);
/// the counts stay exact, per site and per stack.
#[test]
fn the_alloc_period_changes_the_stacks_copied_not_the_counts() {
    let dir = tmp();
    let bin = workload("allocs");
    let bin = bin.to_str().unwrap();
    let data = record(dir.path(), "sampled", &["--alloc", "--alloc-period", "64"], &[bin, "64000"]);
    let count = report_json(&data, &["--type", "alloc-count"]);
    let exact = report_json(&data, &["--type", "alloc-site-count"])["total_samples"].as_i64().unwrap();
    assert!(exact >= 5 * 64000 / 2, "{exact}");
    assert_eq!(count["total_samples"].as_i64().unwrap(), exact);
    assert!(function(&count, |n| n == "site_big(long)").is_some(), "{count:#}");
}

/// The probes must not disturb a target that starts threads (Go's runtime does at once): its clone()
/// calls succeed and it exits normally, and Go allocations are seen at runtime.mallocgc.
#[test]
fn a_go_program_starting_threads_runs_normally_under_alloc() {
    let dir = tmp();
    let bin = workload("gowork");
    let data = record(dir.path(), "go", &["--alloc"], &[bin.to_str().unwrap(), "0.3"]);
    let r = report_json(&data, &["--type", "alloc-site-count"]);
    assert_eq!(r["exit_code"], 0, "the Go program exits normally: {r}");
    assert!(function(&r, |n| n == "runtime.mallocgc").is_some(), "{r}");
}

/// Each allocation counted once, at the allocator the program called, under the name it called:
/// glibc's posix_memalign and memalign call malloc for small alignments (memalign as a tail jump, so that
/// malloc returns straight into main), and memalign shares its address with aligned_alloc. Truth (ltrace
/// agrees): 5 posix_memalign(16, 100) or 10 memalign(16, 128), plus stdio's 4096-byte buffer on a pipe.
#[test]
fn aligned_allocations_are_counted_once_by_the_name_called() {
    let dir = tmp();
    let bin = workload("aligned");
    for (mode, name, n, size) in [("posix", "posix_memalign", 5, 100), ("memalign", "memalign", 10, 128)] {
        let data = record(dir.path(), mode, &["--alloc"], &[bin.to_str().unwrap(), mode]);
        for (count, bytes) in [("alloc-site-count", "alloc-site-bytes"), ("alloc-count", "alloc-bytes")] {
            let c = report_json(&data, &["--type", count]);
            let b = report_json(&data, &["--type", bytes]);
            assert_eq!(c["total_samples"].as_i64().unwrap(), n + 1, "{mode} {count}");
            assert_eq!(b["total_samples"].as_i64().unwrap(), n * size + 4096, "{mode} {bytes}");
            let called = function(&c, |f| f == name).map(|f| f["self"].as_i64().unwrap());
            assert_eq!(called, Some(n), "{mode}: {name} named as called");
            assert!(function(&c, |f| f == "aligned_alloc").is_none(), "{mode}: the alias is not the name");
        }
    }
}

/// A busy target that never allocates is not one that "did not run on a CPU": the error says what the
/// recorded source would have shown.
#[test]
fn no_allocation_is_told_apart_from_not_running() {
    let mut spin = std::process::Command::new(workload("spin"))
        .arg("4")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let dir = tmp();
    let out = dir.path().join("none.data");
    let err =
        fails(&["record", "--alloc", "-d", "1", "-p", &spin.id().to_string(), "-o", out.to_str().unwrap()]);
    let _ = spin.kill();
    let _ = spin.wait();
    assert!(err.contains("the target called no allocation function"), "{err}");
    assert!(!out.exists(), "no half-written file");
}
