//! What a uprobe hit costs on this kernel and CPU, measured rather than assumed: whyslow probes two
//! functions of its own (one whose first instruction the kernel emulates, `push %rbp`, one it
//! single-steps out of line, `mov %rdi,%rax`) with the run's own counting program, for its own process
//! only, and times calls of each with and without the probe. whyslow is not a tracked process, so the
//! program returns at once: what is measured is the trap and the program's dispatch, and the kernel's
//! run-time statistics of the program (BPF_ENABLE_STATS) give the program's own share of it, and later
//! its share per hit in the run. It must never probe anything but these two functions of whyslow.

use crate::calls::HitCost;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

std::arch::global_asm!(
    ".pushsection .text.whyslow_calibrate,\"ax\",@progbits",
    ".globl whyslow_calibrate_emulated",
    ".type whyslow_calibrate_emulated,@function",
    "whyslow_calibrate_emulated:",
    "push %rbp",
    "pop %rbp",
    "ret",
    ".size whyslow_calibrate_emulated, .-whyslow_calibrate_emulated",
    ".globl whyslow_calibrate_stepped",
    ".type whyslow_calibrate_stepped,@function",
    "whyslow_calibrate_stepped:",
    "mov %rdi, %rax",
    "ret",
    ".size whyslow_calibrate_stepped, .-whyslow_calibrate_stepped",
    ".popsection",
    options(att_syntax)
);

extern "C" {
    fn whyslow_calibrate_emulated();
    fn whyslow_calibrate_stepped(x: u64) -> u64;
}

/// The two functions: (emulated, single-stepped) entry addresses in this process.
fn entries() -> [u64; 2] {
    [whyslow_calibrate_emulated as *const () as u64, whyslow_calibrate_stepped as *const () as u64]
}

/// The file this process's code at `addr` comes from and the offset there (from /proc/self/maps).
pub(crate) fn file_offset(addr: u64) -> Option<(std::path::PathBuf, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let mut f = l.split_ascii_whitespace();
        let (range, _perms, off) = (f.next()?, f.next()?, f.next()?);
        let (s, e) = range.split_once('-')?;
        let (s, e) = (u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?);
        let path = f.nth(2)?;
        (s <= addr && addr < e && path.starts_with('/'))
            .then(|| Some((path.into(), addr - s + u64::from_str_radix(off, 16).ok()?)))?
    })
}

/// The file offsets of the two functions, in the file whyslow runs from.
pub(crate) fn sites() -> Option<(std::path::PathBuf, [u64; 2])> {
    let [e, s] = entries();
    let (path, oe) = file_offset(e)?;
    let (other, os) = file_offset(s)?;
    (other == path).then_some((path, [oe, os]))
}

/// Calls each function `n` times in batches; the least time per call of the batches for (emulated,
/// single-stepped), in this thread's CPU time: the trap and the program run on it, and a wait for a CPU
/// on a busy machine is not taken for the cost of a hit.
pub(crate) fn time_calls(n: u32, batches: u32) -> [f64; 2] {
    use crate::sys::thread_cpu_ns;
    let mut best = [f64::MAX; 2];
    for _ in 0..batches {
        let t = thread_cpu_ns();
        for _ in 0..n {
            // SAFETY: the function only pushes and pops %rbp and returns.
            unsafe { whyslow_calibrate_emulated() };
        }
        best[0] = best[0].min((thread_cpu_ns() - t) as f64 / f64::from(n));
        let t = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..n {
            // SAFETY: the function copies its argument to its result and returns.
            x = x.wrapping_add(unsafe { whyslow_calibrate_stepped(u64::from(i)) });
        }
        std::hint::black_box(x);
        best[1] = best[1].min((thread_cpu_ns() - t) as f64 / f64::from(n));
    }
    best
}

/// Keeps the kernel's run-time statistics of eBPF programs on for the rest of this process (the first
/// call turns them on; each program run then takes two clock reads more).
pub(crate) fn enable_stats() -> bool {
    static STATS: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    STATS
        .get_or_init(|| {
            // SAFETY: bpf_enable_stats takes a stats type and returns a new fd or a negative error.
            let fd =
                unsafe { libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME) };
            // SAFETY: a non-negative result is a new fd owned by nobody else.
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        })
        .is_some()
}

/// (total run time in ns, runs) of the program `prog` so far (with [`enable_stats`] on).
pub(crate) fn program_stats(prog: &impl AsRawFd) -> Option<(u64, u64)> {
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: info is a bpf_prog_info owned by this frame and len its size; the kernel writes at most len
    // bytes into it.
    let r = unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) };
    (r == 0).then_some((info.run_time_ns, info.run_cnt))
}

/// Measures what a hit of `prog`'s entry probe costs here: whyslow's own two calibration functions
/// probed for its own process, each called with and without the probe. About 5 ms; the probe's removal
/// (a grace period) happens on a thread of its own. Returns the cost and the program's (run time, runs)
/// after the measurement (its runs since are the run's).
pub(crate) fn measure(prog: &libbpf_rs::ProgramMut<'_>) -> Option<(HitCost, Option<(u64, u64)>)> {
    use std::os::fd::AsFd;
    let (path, [emulated, stepped]) = sites()?;
    let stats = enable_stats();
    let without = time_calls(100, 5);
    let opts = libbpf_rs::UprobeMultiOpts {
        offsets: vec![emulated as usize, stepped as usize],
        cookies: vec![0, 0],
        retprobe: false,
        ..Default::default()
    };
    let link = prog.attach_uprobe_multi_with_opts(std::process::id() as i32, &path, "", opts).ok()?;
    let before = stats.then(|| program_stats(&prog.as_fd())).flatten();
    let with = time_calls(100, 5);
    let after = stats.then(|| program_stats(&prog.as_fd())).flatten();
    std::thread::spawn(move || drop(link));
    let program_ns = match (before, after) {
        (Some(b), Some(a)) if a.1 > b.1 => (a.0 - b.0) as f64 / (a.1 - b.1) as f64,
        _ => 0.0,
    };
    Some((hit_cost(without, with, program_ns), after))
}

/// The cost of one hit from the times per call without and with the probe and the program's own time
/// per run meanwhile.
pub(crate) fn hit_cost(without: [f64; 2], with: [f64; 2], program_ns: f64) -> HitCost {
    HitCost {
        emulated_ns: (with[0] - without[0]).max(0.0),
        stepped_ns: (with[1] - without[1]).max(0.0),
        floor_program_ns: program_ns,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_calibration_functions_are_found_in_the_executable() {
        let (path, [e, s]) = super::sites().expect("both in one file");
        assert!(path.exists());
        let code = std::fs::read(&path).unwrap();
        assert_eq!(&code[e as usize..e as usize + 3], &[0x55, 0x5d, 0xc3], "push %rbp; pop %rbp; ret");
        assert_eq!(&code[s as usize..s as usize + 4], &[0x48, 0x89, 0xf8, 0xc3], "mov %rdi,%rax; ret");
        let t = super::time_calls(100, 2);
        assert!(t[0] > 0.0 && t[1] > 0.0);
    }
}
