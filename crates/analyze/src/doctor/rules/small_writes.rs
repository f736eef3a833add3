//! small-writes: many small write()/send() syscalls where a buffer would batch them into few.

use super::{finding, list, named, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::{SMALL_WRITES_PCT, SMALL_WRITES_RATE, SMALL_WRITE_BYTES};
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "small-writes",
    title: "many small write syscalls",
    why: "each syscall costs a kernel entry and exit (about a microsecond) whatever its size; writing a few \
          bytes per call multiplies that cost by the number of records",
    fix: "buffer output in user space and write in large blocks (a FILE* with a big setvbuf buffer, a \
          std::string/Vec accumulator flushed at 64 KB, writev of many records, or MSG_MORE/TCP_CORK for sockets)",
    shrinks: "the write syscalls (their count in `whyslow syscalls`)",
};

const WRITES: [&str; 6] = ["write", "pwrite64", "writev", "sendto", "sendmsg", "pwritev"];

fn in_write(f: &Func) -> bool {
    if f.kernel {
        named(
            f.name,
            &[],
            &["__x64_sys_write", "__x64_sys_pwrite", "__x64_sys_sendto", "__x64_sys_sendmsg", "ksys_write"],
        )
    } else {
        !f.is_user_code()
            && named(f.plain(), &["write", "pwrite64", "pwrite", "writev", "send", "sendto", "sendmsg"], &[])
    }
}

pub fn check(f: &Facts) -> Verdict {
    if !f.has_syscalls() {
        return Verdict::NeedsData("syscall counters");
    }
    let w = f.syscall(&WRITES);
    let rate = w.calls as f64 / f.seconds().max(1e-9);
    let avg = w.bytes as f64 / w.calls.max(1) as f64;
    if rate < SMALL_WRITES_RATE || avg > SMALL_WRITE_BYTES {
        return Verdict::Clear;
    }
    // Impact: CPU in the write path, or the syscalls' own time as a share of the run, the larger.
    let mut impact = f.cpu(&in_write);
    let threads: std::collections::HashSet<u32> = f.p.syscalls.iter().map(|s| s.tid).collect();
    let wall_ns = f.seconds() * 1e9 * threads.len().max(1) as f64;
    let syscall_pct = 100.0 * w.total_ns as f64 / wall_ns;
    let of = if syscall_pct > impact.pct {
        impact.pct = syscall_pct;
        "wall"
    } else {
        "cpu"
    };
    if impact.pct < SMALL_WRITES_PCT {
        return Verdict::Clear;
    }
    let mut evidence = vec![
        format!("{} write-family syscalls ({rate:.0}/s), {avg:.0} bytes per call on average", w.calls),
        format!(
            "{:.1}% of the threads' time is inside them ({:.1} us per call)",
            syscall_pct,
            w.total_ns as f64 / w.calls.max(1) as f64 / 1e3
        ),
    ];
    let (stacks, all) = f.syscall_stacks(&WRITES, &|x: &Func| x.is_user_code());
    if all > 0 && !stacks.entries.is_empty() {
        evidence.push(format!("issued from: {}", list(&stacks.entries, all)));
    } else if !impact.sites.is_empty() {
        evidence.push(format!("called from: {}", list(&impact.sites, f.cpu_total)));
    }
    Verdict::Found(finding(f, &TEXT, &impact, of, Confidence::High, evidence))
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;
    use whyslow_model::SyscallStat;

    fn with_writes(calls: u64, bytes: u64) -> whyslow_model::Profile {
        let mut p = profile(&[("main;emit;lib:write;k:__x64_sys_write", 40, 0), ("main;work", 60, 0)]);
        p.syscalls.push(SyscallStat {
            tid: 1,
            name: "write".into(),
            calls,
            bytes,
            total_ns: calls * 1000,
            ..Default::default()
        });
        p
    }

    #[test]
    fn fires_on_many_small_writes_only() {
        assert_eq!(fired(super::check, &with_writes(200_000, 200_000 * 64)), Some(40.0));
        assert_eq!(fired(super::check, &with_writes(200_000, 200_000 * 8192)), None, "large writes");
        assert_eq!(fired(super::check, &with_writes(5_000, 5_000 * 64)), None, "500 per second");
    }
}
