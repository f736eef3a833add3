//! The side band of the per-CPU events: the records of every process of the machine (mappings, names,
//! forks, execs, exits), kept for the followed processes and the children they fork, as they are read.
//!
//! A side band asked per thread (an inherited event on each of the target's threads) costs the target at
//! each of its context switches (the kernel switches the thread's perf context in and out); one asked per
//! CPU, for every process, costs it nothing there, and the reader drops what is not the target's.

use std::collections::HashMap;
use whyslow_convert::records::{Record, Timed};

/// How long a followed process that ended stays followed: the exits of its other threads (an off-CPU
/// block that ends when the process is torn down) can follow its main thread's.
const EXITED_GRACE_NS: u64 = 1_000_000_000;

/// The processes whose side band is kept, and the records of other processes that may yet turn out to
/// be theirs.
#[derive(Debug, Default)]
pub(crate) struct SideBand {
    /// Each followed process, with when it ended (its main thread's exit), if it did.
    followed: HashMap<u32, Option<u64>>,
    /// Records of processes not followed, timed after the read they came in began: a fork that makes
    /// one of them a followed child can be in a ring read before the fork was written, so they wait for
    /// the next read (every record timed before a read began is in the rings by then).
    held: Vec<Timed>,
    /// Records dropped so far (other processes').
    dropped: u64,
}

/// The process a side-band record is about; None for records that are not side band (samples, losses).
fn about(r: &Record) -> Option<u32> {
    match r {
        Record::Mmap { pid, .. } | Record::Comm { pid, .. } | Record::Exit { pid, .. } => Some(*pid),
        Record::Fork { pid, .. } => Some(*pid),
        _ => None,
    }
}

impl SideBand {
    /// Follows `pids` (and the children they fork from now on).
    pub(crate) fn new(pids: &[u32]) -> Self {
        SideBand { followed: pids.iter().map(|&p| (p, None)).collect(), ..Default::default() }
    }

    /// Follows process `pid` too, from now on.
    pub(crate) fn follow(&mut self, pid: u32) {
        self.followed.insert(pid, None);
    }

    /// Drops the records of process `pid` from now on.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.followed.remove(&pid);
    }

    /// Whether process `pid` is followed.
    #[cfg(test)]
    fn follows(&self, pid: u32) -> bool {
        self.followed.contains_key(&pid)
    }

    /// Records of other processes dropped so far.
    #[cfg(test)]
    fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Keeps, of `batch` (the records of every ring, read from `read_at` on, event clock), the side band
    /// of the followed processes, and every record that is not side band. Processes forked by a followed
    /// one are followed from their fork on; a pid that a process not followed forks is not (a pid
    /// reused). The records kept stay in time order.
    pub(crate) fn filter(&mut self, batch: &mut Vec<Timed>, read_at: u64) {
        let mut all = std::mem::take(&mut self.held);
        all.append(batch);
        all.sort_by_key(|t| t.time);
        for t in all {
            let Some(pid) = about(&t.record) else {
                batch.push(t);
                continue;
            };
            self.forget_ended(t.time);
            let keep = match t.record {
                Record::Fork { pid, ppid, .. } if pid != ppid => {
                    if self.followed.contains_key(&ppid) {
                        self.followed.insert(pid, None);
                        true
                    } else {
                        self.followed.remove(&pid);
                        false
                    }
                }
                Record::Exit { pid, tid } if pid == tid => match self.followed.get_mut(&pid) {
                    Some(ended) => {
                        *ended = Some(t.time);
                        true
                    }
                    None => false,
                },
                _ => self.followed.contains_key(&pid),
            };
            if keep {
                batch.push(t);
            } else if t.time > read_at {
                self.held.push(t);
            } else {
                self.dropped += 1;
            }
        }
    }

    /// Stops following the processes that ended more than [`EXITED_GRACE_NS`] before `now`.
    fn forget_ended(&mut self, now: u64) {
        // Cheap in the common case: a process ends rarely next to how often records arrive.
        if self.followed.values().any(|e| e.is_some_and(|at| now >= at.saturating_add(EXITED_GRACE_NS))) {
            self.followed.retain(|_, e| e.is_none_or(|at| now < at.saturating_add(EXITED_GRACE_NS)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{about, Record, SideBand, Timed, EXITED_GRACE_NS};

    fn at(time: u64, record: Record) -> Timed {
        Timed { time, record }
    }
    fn mmap(pid: u32, path: &str) -> Record {
        Record::Mmap { pid, start: 0x1000, len: 0x1000, pgoff: 0, exec: true, path: path.into() }
    }
    fn fork(pid: u32, ppid: u32) -> Record {
        Record::Fork { pid, ppid, tid: pid, ptid: ppid }
    }
    fn pids(batch: &[Timed]) -> Vec<(u64, u32)> {
        batch.iter().map(|t| (t.time, about(&t.record).unwrap_or(0))).collect()
    }

    /// The followed process's records and its children's (and grandchildren's) are kept; another
    /// process's are dropped, and so are its children's; samples and losses always pass.
    #[test]
    fn keeps_the_followed_processes_and_their_children() {
        let mut sb = SideBand::new(&[100]);
        let mut b = vec![
            at(5, fork(200, 100)),
            at(1, mmap(100, "/bin/a")),
            at(2, mmap(300, "/bin/other")),
            at(6, mmap(200, "/bin/child")),
            at(7, fork(201, 200)),
            at(8, Record::Comm { pid: 201, tid: 201, name: "g".into(), exec: true }),
            at(9, fork(301, 300)),
            at(10, mmap(301, "/bin/other-child")),
            at(11, Record::Lost(3)),
            at(12, Record::Fork { pid: 100, ppid: 100, tid: 102, ptid: 100 }),
            at(13, Record::Exit { pid: 300, tid: 300 }),
        ];
        sb.filter(&mut b, 100);
        assert_eq!(pids(&b), [(1, 100), (5, 200), (6, 200), (7, 201), (8, 201), (11, 0), (12, 100)]);
        assert_eq!(sb.dropped(), 4);
        assert!(sb.follows(201) && !sb.follows(301));
    }

    /// A child's records read before the fork that makes it followed (its parent's ring read before the
    /// fork was written, its own after) are held past the read and kept once the fork arrives; those of
    /// a process nobody followed are dropped then.
    #[test]
    fn records_after_the_read_began_wait_for_their_fork() {
        let mut sb = SideBand::new(&[100]);
        let mut b =
            vec![at(10, mmap(200, "/bin/child")), at(11, mmap(300, "/bin/other")), at(4, mmap(100, "/a"))];
        sb.filter(&mut b, 5);
        assert_eq!(pids(&b), [(4, 100)]);
        let mut b = vec![at(9, fork(200, 100)), at(12, mmap(200, "/lib/x"))];
        sb.filter(&mut b, 20);
        assert_eq!(pids(&b), [(9, 200), (10, 200), (12, 200)]);
        assert_eq!(sb.dropped(), 1);
    }

    /// A followed process that ended is let go a grace period after its exit (its other threads' exits
    /// still kept); a pid reused by a process that no followed one forked is not followed.
    #[test]
    fn ended_processes_are_let_go() {
        let mut sb = SideBand::new(&[100, 400]);
        let mut b = vec![
            at(1_000, Record::Exit { pid: 100, tid: 100 }),
            at(2_000, Record::Exit { pid: 100, tid: 101 }),
            at(3_000, fork(400, 1)),
            at(4_000, mmap(400, "/bin/reused")),
        ];
        sb.filter(&mut b, 10_000);
        assert_eq!(pids(&b), [(1_000, 100), (2_000, 100)]);
        assert!(sb.follows(100) && !sb.follows(400));
        let mut b = vec![at(1_000 + EXITED_GRACE_NS, mmap(7, "/x"))];
        sb.filter(&mut b, 2 * EXITED_GRACE_NS);
        assert!(b.is_empty() && !sb.follows(100));
        sb.follow(7);
        let mut b = vec![at(3 * EXITED_GRACE_NS, mmap(7, "/x"))];
        sb.filter(&mut b, 4 * EXITED_GRACE_NS);
        assert_eq!(pids(&b), [(3 * EXITED_GRACE_NS, 7)]);
        sb.forget(7);
        let mut b = vec![at(3 * EXITED_GRACE_NS + 1, mmap(7, "/x"))];
        sb.filter(&mut b, 4 * EXITED_GRACE_NS);
        assert!(b.is_empty());
    }
}
