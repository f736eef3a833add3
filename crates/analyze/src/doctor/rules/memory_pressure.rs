//! memory-pressure: threads blocked in major page faults, waiting for pages to be read back from disk
//! or swap (a working set larger than the memory limit, a mapped file evicted again and again). The
//! blocked time comes from the off-CPU stacks (a fault's kernel frames under the user code that touched
//! the page); the target's major-fault count, the host's swap-ins and the memory stall time (PSI of the
//! target's cgroup, else of the host) from the run's start and end readings. Needs no symbols.

use super::{finding, list, named, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::{MEMORY_MIN_MS, MEMORY_WALL_PCT};
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "memory-pressure",
    title: "threads wait for pages read back from disk or swap (major page faults)",
    why: "a major page fault stops the thread until the page is read from disk or swap (tens of \
          microseconds to milliseconds each); when the memory the program touches does not stay in RAM (a \
          memory limit below its working set, other processes' memory, dropped page cache), pages are evicted \
          and faulted back again and again",
    fix: "give the working set room: raise the memory limit (memory.max / memory.limit_in_bytes; Kubernetes \
          resources.limits.memory) or the host's RAM, or shrink the working set (smaller caches, fewer worker \
          processes); keep a hot mapped file resident (read it into memory, or mlock the hot part); with \
          swap-ins, lower vm.swappiness or keep latency-critical services out of swap (memory.swap.max=0)",
    shrinks: "blocked time in page faults (`whyslow report --type offcpu`)",
};

/// The kernel's page-fault entry: stacks through it are faults, whatever they wait for.
pub fn is_fault_entry(f: &Func) -> bool {
    f.kernel && named(f.name, &["asm_exc_page_fault", "exc_page_fault", "do_user_addr_fault"], &[])
}

/// Where a fault reads a page back: a file's page cache or swap.
fn is_major_fault(f: &Func) -> bool {
    f.kernel
        && named(
            f.name,
            &["filemap_fault", "do_swap_page", "swap_readpage", "swap_read_folio", "shmem_fault"],
            &["swapin_readahead", "swap_cluster_readahead", "shmem_swapin"],
        )
}

pub fn check(f: &Facts) -> Verdict {
    if !f.has_offcpu() {
        return Verdict::NeedsData("off-CPU time (record --offcpu)");
    }
    let m = f.blocked(&|x: &Func| is_major_fault(x));
    if m.pct < MEMORY_WALL_PCT || (m.value as f64) < MEMORY_MIN_MS * 1e6 {
        return Verdict::Clear;
    }
    let mut evidence = vec![format!(
        "{:.1}% of the threads' working time is blocked in page faults reading pages back: {}",
        m.pct,
        list(&m.entries, f.wall_total)
    )];
    if !m.sites.is_empty() {
        evidence.push(format!("faulting code: {}", list(&m.sites, f.wall_total)));
    }
    let env = f.p.meta.target_env.as_ref();
    match env.and_then(|e| e.memory.as_ref().map(|m| (e, m))) {
        Some((e, mem)) => {
            let secs = e.window_ns as f64 / 1e9;
            evidence.push(format!(
                "{} major page faults by the target ({:.0}/s over the {secs:.2} s run)",
                mem.major_faults,
                mem.major_faults as f64 / secs.max(1e-9)
            ));
            if let Some(n) = mem.host_swap_ins.filter(|&n| n > 0) {
                evidence.push(format!("{n} pages swapped in on the host during the run"));
            }
            if let Some(some) = mem.pressure_some_us {
                let full = mem
                    .pressure_full_us
                    .map_or(String::new(), |x| format!(", all of them {:.2} s", x as f64 / 1e6));
                evidence.push(format!(
                    "memory stall time ({}): some task waited {:.2} s ({:.1}% of the run){full}",
                    mem.pressure_of,
                    some as f64 / 1e6,
                    100.0 * some as f64 / 1e6 / secs.max(1e-9)
                ));
            }
        }
        None => {
            let why = env
                .and_then(|e| e.unavailable.iter().find(|u| u.0 == "memory"))
                .map_or("not read in this recording", |u| u.1.as_str());
            evidence.push(format!("major-fault counts and memory stall time: {why}"));
        }
    }
    Verdict::Found(finding(f, &TEXT, &m, "wall", Confidence::High, evidence))
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;
    use crate::doctor::{Facts, Verdict};
    use whyslow_model::{MemoryPressure, TargetEnv};

    const FAULT: &str =
        "main;lookup;k:asm_exc_page_fault;k:exc_page_fault;k:handle_mm_fault;k:filemap_fault;k:folio_wait_bit_common";

    #[test]
    fn fires_on_blocked_major_faults_with_the_counters() {
        let mut p = profile(&[(FAULT, 0, 600_000_000), ("main;lookup", 400_000_000, 0)]);
        p.meta.target_env = Some(TargetEnv {
            window_ns: 2_000_000_000,
            memory: Some(MemoryPressure {
                major_faults: 40_000,
                host_swap_ins: Some(0),
                pressure_some_us: Some(500_000),
                pressure_full_us: Some(400_000),
                pressure_of: "host".into(),
            }),
            ..Default::default()
        });
        let Verdict::Found(x) = super::check(&Facts::new(&p)) else { panic!("not found") };
        assert_eq!((x.impact_pct, x.impact_of), (60.0, "wall"));
        assert_eq!(
            x.evidence,
            [
                "60.0% of the threads' working time is blocked in page faults reading pages back: filemap_fault (60.0%)",
                "faulting code: lookup (60.0%)",
                "40000 major page faults by the target (20000/s over the 2.00 s run)",
                "memory stall time (host): some task waited 0.50 s (25.0% of the run), all of them 0.40 s",
            ]
        );
        // The same wait is not blocking-io's as well.
        assert_eq!(fired(crate::doctor::rules::blocking_io::check, &p), None);
    }

    #[test]
    fn quiet_on_reads_and_says_what_it_could_not_read() {
        let read = "main;load;lib:read;k:__x64_sys_read;k:filemap_read;k:folio_wait_bit_common";
        assert_eq!(fired(super::check, &profile(&[(read, 0, 600_000_000), ("main", 400_000_000, 0)])), None);
        let mut p = profile(&[(FAULT, 0, 600_000_000), ("main;lookup", 400_000_000, 0)]);
        p.meta.target_env = Some(TargetEnv {
            unavailable: vec![("memory".into(), "no target process to read /proc/PID/stat of".into())],
            ..Default::default()
        });
        let Verdict::Found(x) = super::check(&Facts::new(&p)) else { panic!("not found") };
        assert!(x.evidence[2].ends_with("no target process to read /proc/PID/stat of"), "{:?}", x.evidence);
    }
}
