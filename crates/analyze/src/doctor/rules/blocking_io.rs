//! blocking-io: wall time in fsync/fdatasync (blocked, or running the sync's own kernel work) or blocked
//! in file reads and writes waiting for the disk (e.g. a database committing every statement). Waits
//! inside page faults are memory-pressure's; those of background workers (a thread mostly waiting for
//! work that wakes to sync) hold up no request.

use super::{named, share_rule, Share, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::{BLOCKING_IO_MIN_MS, BLOCKING_IO_MIN_SYNCS, BLOCKING_IO_WALL_PCT};
use crate::doctor::Verdict;

const TEXT: Text = Text {
    id: "blocking-io",
    title: "threads wait for the disk (fsync/fdatasync and file I/O)",
    why: "a sync waits until the data is on stable storage (milliseconds each); doing one per record or \
          per statement makes the disk's latency, not the CPU, the program's speed limit",
    fix: "batch durable writes (one transaction or one fsync per batch, group commit), move syncing off \
          the request path (a writer thread), or relax durability where it is not needed (e.g. SQLite \
          PRAGMA synchronous=NORMAL with WAL)",
    shrinks: "blocked time under fsync/fdatasync (`whyslow report --type offcpu`)",
};

const SYNCS: [&str; 6] = ["fsync", "fdatasync", "sync_file_range", "msync", "syncfs", "sync"];

/// The sync syscalls' kernel entries.
const KERNEL_SYNCS: [&str; 6] = [
    "__x64_sys_fsync",
    "__x64_sys_fdatasync",
    "__x64_sys_sync_file_range",
    "__x64_sys_msync",
    "__x64_sys_syncfs",
    "__x64_sys_sync",
];

/// A wait inside a sync syscall.
fn is_sync(f: &Func) -> bool {
    if f.kernel {
        named(f.name, &KERNEL_SYNCS, &[])
    } else {
        !f.is_user_code() && named(f.plain(), &SYNCS, &[])
    }
}

/// A wait for the disk: in a sync syscall, or in the kernel's writeback, page-cache and file-system paths.
fn is_disk_wait(f: &Func) -> bool {
    is_sync(f)
        || f.kernel
            && named(
                f.name,
                &[],
                &[
                    "do_fsync",
                    "file_write_and_wait",
                    "__filemap_fdatawait",
                    "filemap_",
                    "folio_wait",
                    "wait_on_page",
                    "io_schedule",
                    "jbd2_",
                    "ext4_",
                    "xfs_",
                    "btrfs_",
                    "blkdev_",
                    "submit_bio",
                ],
            )
}

fn syncs(f: &Facts) -> Vec<String> {
    let s = f.syscall(&SYNCS);
    if s.calls == 0 {
        return Vec::new();
    }
    let (rate, ms) =
        (s.calls as f64 / f.syscall_seconds().max(1e-9), s.total_ns as f64 / s.calls as f64 / 1e6);
    vec![format!("{} sync syscalls ({rate:.0}/s{}), {ms:.2} ms each on average", s.calls, f.syscall_window())]
}

pub fn check(f: &Facts) -> Verdict {
    let min_value = (BLOCKING_IO_MIN_MS * 1e6) as i64;
    // Waits mostly in a few syncs (over the whole run: the counters may have run over part of it) are
    // durable writes batched already.
    let counted = f.syscall(&SYNCS).calls as f64;
    let sync_calls = counted * (f.seconds() / f.syscall_seconds()).max(1.0);
    let few = f.syscall_seconds() > 0.0 && sync_calls < BLOCKING_IO_MIN_SYNCS as f64;
    if f.has_syscalls() && f.has_offcpu() && few {
        let fault = &super::memory_pressure::is_fault_entry;
        let in_syncs = f.blocked_in_foreground_except(&is_sync, fault).value;
        if in_syncs * 2 >= f.blocked_in_foreground_except(&is_disk_wait, fault).value {
            return Verdict::Clear;
        }
    }
    share_rule(
        f,
        &TEXT,
        Share {
            min_value,
            extra: &syncs,
            except: &super::memory_pressure::is_fault_entry,
            // A flusher thread syncing once a second off the request path is the fix, not the problem.
            foreground: true,
            // A sync's own work in the kernel (journal commits, submitting the pages) is its cost too.
            running: Some(&is_sync),
            ..Share::blocked(&is_disk_wait, BLOCKING_IO_WALL_PCT)
        },
    )
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::{on_threads, profile};
    use crate::doctor::rules::tests::fired;

    /// Redis with appendfsync everysec: the main thread answers; bio_aof_fsync waits for work and wakes
    /// once a second to sync, slowly on a busy disk. Not a finding; the same syncs on the main thread
    /// (appendfsync always) are.
    #[test]
    fn a_background_syncer_is_not_a_finding() {
        let fsync = "bio;lib:fdatasync;k:__x64_sys_fdatasync;k:file_write_and_wait_range";
        let p = on_threads(&[
            (1, "main;aeMain;readQueryFromClient", 800_000_000, 0),
            (2, "bio;lib:pthread_cond_wait;k:futex_wait", 0, 3_000_000_000),
            (2, fsync, 1_000_000, 200_000_000),
        ]);
        assert_eq!(fired(super::check, &p), None);
        let main = fsync.replace("bio;", "main;flushAppendOnlyFile;");
        let p = on_threads(&[
            (1, "main;aeMain;readQueryFromClient", 800_000_000, 0),
            (1, &main, 1_000_000, 200_000_000),
        ]);
        assert!(fired(super::check, &p).is_some());
    }

    #[test]
    fn fires_on_fdatasync_blocking_not_on_pipes() {
        let p = profile(&[
            (
                "main;commit;lib:fdatasync;k:__x64_sys_fdatasync;k:file_write_and_wait_range;k:schedule",
                0,
                600_000_000,
            ),
            ("main;insert", 400_000_000, 0),
        ]);
        assert_eq!(fired(super::check, &p), Some(60.0));
        let short = profile(&[
            ("main;commit;lib:fdatasync;k:__x64_sys_fdatasync", 0, 60_000_000),
            ("main;insert", 40_000_000, 0),
        ]);
        assert_eq!(fired(super::check, &short), None, "60 ms blocked in all");
        let pipe = profile(&[
            ("main;lib:read;k:__x64_sys_read;k:pipe_read;k:schedule", 0, 60),
            ("main;insert", 40, 0),
        ]);
        assert_eq!(fired(super::check, &pipe), None);
    }

    /// A sync's own kernel work (the journal commit on CPU) is its cost as much as the wait for the
    /// disk: both count, as shares of the threads' wall time; a buffered write's CPU does not.
    #[test]
    fn counts_the_cpu_inside_syncs() {
        let sync = "main;commit;lib:fdatasync;k:__x64_sys_fdatasync";
        let p = profile(&[
            (&format!("{sync};k:file_write_and_wait_range;k:schedule"), 0, 300_000_000),
            (&format!("{sync};k:jbd2_journal_commit"), 200_000_000, 0),
            ("main;insert;lib:write;k:__x64_sys_write;k:ext4_buffered_write_iter", 100_000_000, 0),
            ("main;insert", 400_000_000, 0),
        ]);
        assert_eq!(fired(super::check, &p), Some(50.0));
    }

    /// SQLite's one transaction on a busy disk: its three syncs (counted) wait most of a short run, but
    /// the writes are batched already; the same waits over 2,000 counted syncs (a commit per statement)
    /// are the finding. Without counted syscalls the waits alone decide.
    #[test]
    fn a_few_slow_syncs_are_no_finding() {
        let stacks = [
            (
                "main;commit;lib:fsync;k:__x64_sys_fsync;k:file_write_and_wait_range;k:schedule",
                0,
                600_000_000,
            ),
            ("main;insert", 400_000_000, 0),
        ];
        let counted = |calls: u64| {
            let mut p = profile(&stacks);
            p.syscalls.push(whyslow_model::SyscallStat {
                tid: 1,
                name: "fsync".into(),
                calls,
                total_ns: 600_000_000,
                ..Default::default()
            });
            p
        };
        assert_eq!(fired(super::check, &counted(3)), None);
        assert_eq!(fired(super::check, &counted(2000)), Some(60.0));
        assert_eq!(fired(super::check, &profile(&stacks)), Some(60.0));
    }
}
