//! Memory in use of a running process (`record -p PID --mem`): the ledger that pairs the sampled
//! allocations and frees the memory probes send (bpf/mem.bpf.c, [`crate::bpf::MemProbe`]) and keeps, per
//! process, what the in-process library keeps for a launched command (preload/whyslow_mem.c): per stack
//! the allocations made, the bytes and objects in use, their value at the heap's peak and the oldest live
//! allocation, and every period the stacks whose in-use changed. It hands over the same
//! [`HeapProfile`]s, so the converter, the analyses and every view read both alike.
//!
//! What it sees is what was allocated while the probes were attached: at the end, in use is what was
//! allocated during the run and is still live, with its age; frees of blocks allocated before the run
//! are not sent by the kernel (it keeps the sampled addresses), so nothing is subtracted for them.

use crate::bpf::MemEvent;
use std::collections::HashMap;
use whyslow_convert::heap::{HeapEntry, HeapProfile, HeapRow, HeapSnapshot, HeapStack, HeapTotals};
use whyslow_convert::records::UserRegs;

/// The weight of one allocation of `size` bytes sampled with mean interval `mean` (0: exact): the
/// expected (objects, bytes) one sample of that size stands for under a Poisson draw of allocated bytes,
/// as tcmalloc and Go weigh theirs (and preload/whyslow_mem.c, whose estimates these must equal).
pub fn weight(size: u64, mean: u64) -> (u64, u64) {
    if mean == 0 {
        return (1, size);
    }
    let p = (1.0 - (-(size as f64) / mean as f64).exp()).max(1e-12);
    ((1.0 / p + 0.5) as u64, (size as f64 / p + 0.5) as u64)
}

/// Unwinds a sampled allocation's stack: (pid, registers, stack bytes) to its return addresses and
/// whether the walk was complete (the converter's [`whyslow_convert::Converter::heap_return_addresses`]).
pub trait Unwind {
    fn return_addresses(&mut self, pid: u32, regs: UserRegs, stack: &[u8]) -> (Vec<u64>, bool);
}

impl<H: whyslow_convert::Host> Unwind for whyslow_convert::Converter<H> {
    fn return_addresses(&mut self, pid: u32, regs: UserRegs, stack: &[u8]) -> (Vec<u64>, bool) {
        self.heap_return_addresses(pid, regs, stack)
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Row {
    alloc_count: u64,
    alloc_bytes: u64,
    inuse_count: u64,
    inuse_bytes: u64,
    peak_count: u64,
    peak_bytes: u64,
    /// The event that last changed it: its in-use is its value at the peak while this is not after it.
    last_mod: u64,
    dirty: bool,
    /// Allocations made (count, bytes) when the last window was cut.
    alloc_at_cut: (u64, u64),
}

#[derive(Debug, Clone, Copy)]
struct Live {
    size: u64,
    stack: u32,
    birth_ns: u64,
}

/// One process's heap as seen since the probes were attached.
#[derive(Debug, Default)]
struct Book {
    start_ns: u64,
    stacks: Vec<HeapStack>,
    index: HashMap<(HeapEntry, Vec<u64>), u32>,
    rows: Vec<Row>,
    dirty: Vec<u32>,
    live: HashMap<u64, Live>,
    /// Per thread: the sampled allocation whose return is awaited (stack, size, time).
    pending: HashMap<u32, (u32, u64, u64)>,
    snapshots: Vec<HeapSnapshot>,
    seq: u64,
    peak_seq: u64,
    total_bytes: u64,
    total_count: u64,
    peak_bytes: u64,
    unknown_frees: u64,
    lost: u64,
    truncated: u64,
}

impl Book {
    fn stack(&mut self, entry: HeapEntry, ras: Vec<u64>, complete: bool) -> u32 {
        let key = (entry, ras);
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push(HeapStack { entry, return_addresses: key.1.clone(), complete });
        self.rows.push(Row::default());
        self.index.insert(key, id);
        id
    }

    /// Moves stack `id`'s counters by one allocation (`sign` +1) or its free (-1) of (count, bytes).
    fn change(&mut self, id: u32, (count, bytes): (u64, u64), sign: i8) {
        self.seq += 1;
        let r = &mut self.rows[id as usize];
        if r.last_mod <= self.peak_seq {
            (r.peak_count, r.peak_bytes) = (r.inuse_count, r.inuse_bytes);
        }
        r.last_mod = self.seq;
        if sign > 0 {
            r.inuse_count += count;
            r.inuse_bytes += bytes;
            r.alloc_count += count;
            r.alloc_bytes += bytes;
            self.total_count += count;
            self.total_bytes += bytes;
            if self.total_bytes > self.peak_bytes {
                (self.peak_bytes, self.peak_seq) = (self.total_bytes, self.seq);
            }
        } else {
            r.inuse_count = r.inuse_count.saturating_sub(count);
            r.inuse_bytes = r.inuse_bytes.saturating_sub(bytes);
            self.total_count = self.total_count.saturating_sub(count);
            self.total_bytes = self.total_bytes.saturating_sub(bytes);
        }
        if !r.dirty {
            r.dirty = true;
            self.dirty.push(id);
        }
    }

    fn snapshot(&mut self, time_ns: u64) {
        let changed = std::mem::take(&mut self.dirty)
            .into_iter()
            .map(|id| {
                let r = &mut self.rows[id as usize];
                r.dirty = false;
                (id, r.inuse_bytes, r.inuse_count)
            })
            .collect();
        self.snapshots.push(HeapSnapshot {
            time_ns,
            total_bytes: self.total_bytes,
            total_count: self.total_count,
            changed,
        });
    }
}

/// The ledger of every process the memory probes follow.
#[derive(Debug)]
pub struct Ledger {
    books: HashMap<u32, Book>,
    /// Mean bytes between sampled allocations (0: every one).
    sample_bytes: u64,
    period_ns: u64,
    next_snapshot_ns: u64,
    start_ns: u64,
    allocator: String,
    /// Cut into windows ([`Ledger::window`]): no series is kept between them.
    windowed: bool,
}

impl Ledger {
    /// A ledger from `start_ns` (event clock), allocations sampled every `sample_bytes` on average (0:
    /// all), the changed stacks' in-use written every `period_ns`; `allocator` is the module of the malloc
    /// that serves the processes (the label of the function a stack ends in).
    pub fn new(start_ns: u64, sample_bytes: u64, period_ns: u64, allocator: String) -> Ledger {
        Ledger {
            books: HashMap::new(),
            sample_bytes,
            period_ns: period_ns.max(1),
            next_snapshot_ns: start_ns + period_ns.max(1),
            start_ns,
            allocator,
            windowed: false,
        }
    }

    fn book(&mut self, pid: u32) -> &mut Book {
        let start_ns = self.start_ns;
        self.books.entry(pid).or_insert_with(|| Book { start_ns, ..Book::default() })
    }

    /// Takes in what the probes sent, in the order sent (sampled stacks unwound with `unwind`), and writes
    /// a snapshot of each process when a period has passed at `now_ns`.
    pub fn take(&mut self, events: Vec<MemEvent>, unwind: &mut impl Unwind, now_ns: u64) {
        let mean = self.sample_bytes;
        for e in events {
            match e {
                MemEvent::Alloc { pid, tid, time, entry, size, regs, stack } => {
                    let (ras, complete) = unwind.return_addresses(pid, regs, &stack);
                    let entry = HeapEntry::ALL.get(entry as usize).copied().unwrap_or(HeapEntry::Malloc);
                    let b = self.book(pid);
                    let id = b.stack(entry, ras, complete);
                    // A return never seen (its record lost): that allocation is not counted.
                    if b.pending.insert(tid, (id, size, time)).is_some() {
                        b.lost += 1;
                    }
                }
                MemEvent::Done { pid, tid, time, addr } => {
                    let b = self.book(pid);
                    let Some((id, size, _)) = b.pending.remove(&tid) else { continue };
                    if addr == 0 {
                        continue;
                    }
                    if let Some(old) = b.live.insert(addr, Live { size, stack: id, birth_ns: time }) {
                        // Its free was not seen (a lost record): freed where it was made.
                        b.change(old.stack, weight(old.size, mean), -1);
                        b.unknown_frees += 1;
                    }
                    b.change(id, weight(size, mean), 1);
                }
                MemEvent::Freed { pid, addr, .. } => {
                    let b = self.book(pid);
                    match b.live.remove(&addr) {
                        Some(l) => b.change(l.stack, weight(l.size, mean), -1),
                        None => b.unknown_frees += 1,
                    }
                }
            }
        }
        if now_ns >= self.next_snapshot_ns && !self.windowed {
            self.snapshot(now_ns, false);
        }
    }

    /// A snapshot of the processes whose in-use changed (`all`: of every process).
    fn snapshot(&mut self, now_ns: u64, all: bool) {
        for b in self.books.values_mut().filter(|b| all || !b.dirty.is_empty()) {
            b.snapshot(now_ns);
        }
        self.next_snapshot_ns = now_ns + self.period_ns;
    }

    /// A window of each process's heap at `now_ns`, as an agent stores it: one snapshot holding every
    /// stack's in-use then (what was allocated since the probes were attached and is still live, not
    /// its change), and per stack the allocations made since the last window (as totals without a
    /// peak). From the first window on no series is kept (a process followed for days would hold one
    /// snapshot every period). The books of processes `alive` says ended go after their last window.
    pub fn window(&mut self, now_ns: u64, alive: impl Fn(u32) -> bool) -> Vec<HeapProfile> {
        self.windowed = true;
        let mut pids: Vec<u32> = self.books.keys().copied().collect();
        pids.sort_unstable();
        let mut out = Vec::new();
        for pid in pids {
            let b = self.books.get_mut(&pid).expect("listed above");
            b.snapshots.clear();
            for id in std::mem::take(&mut b.dirty) {
                b.rows[id as usize].dirty = false;
            }
            let changed: Vec<(u32, u64, u64)> = (0..b.rows.len() as u32)
                .map(|id| (id, b.rows[id as usize].inuse_bytes, b.rows[id as usize].inuse_count))
                .filter(|&(_, bytes, count)| bytes > 0 || count > 0)
                .collect();
            let rows: Vec<HeapRow> = b
                .rows
                .iter_mut()
                .enumerate()
                .filter_map(|(i, r)| {
                    let (count, bytes) = (r.alloc_count, r.alloc_bytes);
                    let (c0, b0) = std::mem::replace(&mut r.alloc_at_cut, (count, bytes));
                    (count > c0).then_some(HeapRow {
                        stack: i as u32,
                        alloc_count: count - c0,
                        alloc_bytes: bytes - b0,
                        ..HeapRow::default()
                    })
                })
                .collect();
            if !changed.is_empty() || !rows.is_empty() {
                let snapshot = HeapSnapshot {
                    time_ns: now_ns,
                    total_bytes: b.total_bytes,
                    total_count: b.total_count,
                    changed,
                };
                out.push(HeapProfile {
                    pid,
                    start_ns: b.start_ns,
                    sample_bytes: self.sample_bytes,
                    stacks: b.stacks.clone(),
                    snapshots: vec![snapshot],
                    totals: Some(HeapTotals {
                        time_ns: now_ns,
                        unknown_frees: b.unknown_frees,
                        lost: b.lost,
                        rows,
                        ..HeapTotals::default()
                    }),
                    maps: String::new(),
                    allocator: self.allocator.clone(),
                    truncated_file: false,
                });
            }
            if !alive(pid) {
                self.books.remove(&pid);
            }
        }
        out
    }

    /// Each process's heap at `end_ns`: its series, and its totals (in use then, with the birth of its
    /// oldest live allocation after the start).
    pub fn finish(mut self, end_ns: u64) -> Vec<HeapProfile> {
        self.snapshot(end_ns, true);
        let mut pids: Vec<u32> = self.books.keys().copied().collect();
        pids.sort_unstable();
        pids.into_iter()
            .filter_map(|pid| {
                let b = self.books.remove(&pid)?;
                let mut oldest: Vec<Option<u64>> = vec![None; b.stacks.len()];
                for l in b.live.values() {
                    let o = &mut oldest[l.stack as usize];
                    *o = Some(o.map_or(l.birth_ns, |t| t.min(l.birth_ns)));
                }
                let rows = b
                    .rows
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let after_peak = r.last_mod > b.peak_seq;
                        HeapRow {
                            stack: i as u32,
                            alloc_count: r.alloc_count,
                            alloc_bytes: r.alloc_bytes,
                            inuse_count: r.inuse_count,
                            inuse_bytes: r.inuse_bytes,
                            peak_count: if after_peak { r.peak_count } else { r.inuse_count },
                            peak_bytes: if after_peak { r.peak_bytes } else { r.inuse_bytes },
                            oldest_live_ns: oldest[i].map(|t| t.saturating_sub(b.start_ns)),
                        }
                    })
                    .collect();
                let totals = HeapTotals {
                    time_ns: end_ns,
                    peak_bytes: b.peak_bytes,
                    unknown_frees: b.unknown_frees,
                    lost: b.lost + b.pending.len() as u64,
                    truncated: b.truncated,
                    rows,
                };
                Some(HeapProfile {
                    pid,
                    start_ns: b.start_ns,
                    sample_bytes: self.sample_bytes,
                    stacks: b.stacks,
                    snapshots: b.snapshots,
                    totals: Some(totals),
                    maps: String::new(),
                    allocator: self.allocator.clone(),
                    truncated_file: false,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{weight, Ledger, MemEvent, Unwind, UserRegs};

    /// Stacks by their first stack byte: one return address each.
    struct ByByte;
    impl Unwind for ByByte {
        fn return_addresses(&mut self, _pid: u32, _regs: UserRegs, stack: &[u8]) -> (Vec<u64>, bool) {
            (vec![u64::from(stack[0])], true)
        }
    }

    fn alloc(tid: u32, time: u64, size: u64, stack: u8) -> MemEvent {
        MemEvent::Alloc { pid: 1, tid, time, entry: 0, size, regs: UserRegs::default(), stack: vec![stack] }
    }

    fn done(tid: u32, time: u64, addr: u64) -> MemEvent {
        MemEvent::Done { pid: 1, tid, time, addr }
    }

    /// Exact: what was allocated and not freed is in use at the end, under its stack, with the birth of
    /// its oldest block; the peak is the heap's at its largest; frees of addresses never seen change
    /// nothing but their count; a failed allocation counts nothing.
    #[test]
    fn allocations_pair_with_frees_per_stack() {
        let mut l = Ledger::new(1000, 0, 100, "libc".into());
        let events = vec![
            alloc(7, 1100, 64, 1),
            alloc(8, 1150, 32, 2),
            done(7, 1200, 0xa0),
            done(8, 1250, 0xb0),
            alloc(7, 1300, 16, 1),
            done(7, 1400, 0xc0),
            MemEvent::Freed { pid: 1, time: 1500, addr: 0xb0 },
            MemEvent::Freed { pid: 1, time: 1600, addr: 0xdead },
            alloc(7, 1700, 999, 2),
            done(7, 1800, 0),
        ];
        l.take(events, &mut ByByte, 1850);
        let p = l.finish(2000).pop().expect("one process");
        let t = p.totals.expect("totals");
        assert_eq!((t.peak_bytes, t.unknown_frees, t.lost), (112, 1, 0));
        let one = t.rows[0];
        assert_eq!(p.stacks[0].return_addresses, [1]);
        assert_eq!((one.alloc_count, one.alloc_bytes, one.inuse_count, one.inuse_bytes), (2, 80, 2, 80));
        assert_eq!(one.oldest_live_ns, Some(200));
        let two = t.rows[1];
        assert_eq!((two.alloc_count, two.inuse_bytes, two.peak_bytes, two.oldest_live_ns), (1, 0, 32, None));
        assert_eq!(p.snapshots.len(), 2, "one when the period passed, one at the end");
        assert_eq!(p.snapshots[0].total_bytes, 80);
    }

    /// Windows hold what is in use at their end (not its change) and the allocations made in them; a
    /// process that ended has its last window, then its book goes; no series is kept between windows.
    #[test]
    fn windows_hold_what_is_in_use_at_their_end() {
        let mut l = Ledger::new(1000, 0, 100, "libc".into());
        l.take(
            vec![alloc(7, 1100, 64, 1), done(7, 1200, 0xa0), alloc(7, 1300, 32, 2), done(7, 1400, 0xb0)],
            &mut ByByte,
            1450,
        );
        let w = l.window(1500, |_| true).pop().expect("one process");
        assert_eq!(w.snapshots.len(), 1);
        assert_eq!(w.snapshots[0].changed, [(0, 64, 1), (1, 32, 1)]);
        let made: Vec<(u32, u64, u64)> =
            w.totals.expect("totals").rows.iter().map(|r| (r.stack, r.alloc_count, r.alloc_bytes)).collect();
        assert_eq!(made, [(0, 1, 64), (1, 1, 32)]);
        // The second window: stack 1 freed, stack 0 allocated again; only this window's allocations.
        l.take(
            vec![
                MemEvent::Freed { pid: 1, time: 1600, addr: 0xb0 },
                alloc(7, 1700, 16, 1),
                done(7, 1800, 0xc0),
            ],
            &mut ByByte,
            5000,
        );
        let w = l.window(5000, |_| false).pop().expect("one process");
        assert_eq!(w.snapshots.len(), 1, "no series between windows");
        assert_eq!(w.snapshots[0].changed, [(0, 80, 2)]);
        let made: Vec<(u32, u64, u64)> =
            w.totals.expect("totals").rows.iter().map(|r| (r.stack, r.alloc_count, r.alloc_bytes)).collect();
        assert_eq!(made, [(0, 1, 16)]);
        assert!(l.window(6000, |_| true).is_empty(), "the ended process's book went with its last window");
    }

    /// A sampled allocation stands for its expected share: a block much larger than the mean for itself,
    /// a small one for many.
    #[test]
    fn sampled_allocations_are_weighted_by_their_chance() {
        assert_eq!(weight(100, 0), (1, 100));
        let (n, b) = weight(64 << 20, 512 << 10);
        assert_eq!((n, b), (1, 64 << 20));
        let (n, b) = weight(16, 512 << 10);
        assert!((32768..=32770).contains(&n), "{n}");
        assert!((b as f64 / (512.0 * 1024.0) - 1.0).abs() < 0.001, "{b}");
    }
}
