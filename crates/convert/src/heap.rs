//! Memory in use, as a source that pairs allocations with frees hands it over: per stack what was
//! allocated, what is still held, its value at the heap's peak, and how the in-use changed over the run.
//! The converter turns it into samples of the profile's `inuse-*`, `alloc-*` and `peak-*` types; nothing
//! here reads a process or a file.

use crate::records::UserRegs;
use crate::Mapping;
use whyslow_model::raw::{RawFrame, RawRecording, RawThread};
use whyslow_model::{sample_types as st, FrameKind};
use whyslow_unwind::{Outcome, Regs};

/// Which allocation function a stack ends in (the first frame of its samples).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeapEntry {
    Malloc,
    Calloc,
    Realloc,
    PosixMemalign,
    AlignedAlloc,
    Memalign,
    Valloc,
    Pvalloc,
    Reallocarray,
}

impl HeapEntry {
    pub const ALL: [HeapEntry; 9] = [
        HeapEntry::Malloc,
        HeapEntry::Calloc,
        HeapEntry::Realloc,
        HeapEntry::PosixMemalign,
        HeapEntry::AlignedAlloc,
        HeapEntry::Memalign,
        HeapEntry::Valloc,
        HeapEntry::Pvalloc,
        HeapEntry::Reallocarray,
    ];

    /// The function's name, as the frame that ends the stack shows it.
    pub fn name(self) -> &'static str {
        match self {
            HeapEntry::Malloc => "malloc",
            HeapEntry::Calloc => "calloc",
            HeapEntry::Realloc => "realloc",
            HeapEntry::PosixMemalign => "posix_memalign",
            HeapEntry::AlignedAlloc => "aligned_alloc",
            HeapEntry::Memalign => "memalign",
            HeapEntry::Valloc => "valloc",
            HeapEntry::Pvalloc => "pvalloc",
            HeapEntry::Reallocarray => "reallocarray",
        }
    }
}

/// One allocating stack: the function called and the return addresses from its caller outward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapStack {
    pub entry: HeapEntry,
    pub return_addresses: Vec<u64>,
    /// The walk reached the outermost frame (the unwind rules say there is no caller).
    pub complete: bool,
}

/// In use at one moment, for the stacks whose value changed since the moment before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapSnapshot {
    /// Event clock (CLOCK_MONOTONIC), ns.
    pub time_ns: u64,
    pub total_bytes: u64,
    pub total_count: u64,
    /// (stack index, bytes in use, objects in use).
    pub changed: Vec<(u32, u64, u64)>,
}

/// Per stack at the end of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeapRow {
    pub stack: u32,
    pub alloc_count: u64,
    pub alloc_bytes: u64,
    pub inuse_count: u64,
    pub inuse_bytes: u64,
    /// In use when the whole heap was at its peak.
    pub peak_count: u64,
    pub peak_bytes: u64,
    /// When its oldest allocation still in use was made (ns after the start), None when none is.
    pub oldest_live_ns: Option<u64>,
}

/// What the source counted at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeapTotals {
    pub time_ns: u64,
    pub peak_bytes: u64,
    /// Frees of pointers the source never saw allocated (made before it started, or through a path it
    /// does not see): forwarded, never subtracted from a stack.
    pub unknown_frees: u64,
    /// Allocations the source could not keep (its tables full) and bytes it could not write.
    pub lost: u64,
    /// Stacks cut at the walk's depth limit.
    pub truncated: u64,
    pub rows: Vec<HeapRow>,
}

/// Everything one process image (a pid between execs) reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeapProfile {
    pub pid: u32,
    /// Event clock (CLOCK_MONOTONIC) at the source's start, ns.
    pub start_ns: u64,
    /// Mean bytes between sampled allocations; 0: every allocation is counted.
    pub sample_bytes: u64,
    pub stacks: Vec<HeapStack>,
    pub snapshots: Vec<HeapSnapshot>,
    /// None when the process ended without writing them (killed): its last snapshot is what is known.
    pub totals: Option<HeapTotals>,
    /// The process's mappings (`/proc/PID/maps` text) when it wrote its totals, for its addresses.
    pub maps: String,
    /// The library that served the allocations (libc, or a jemalloc the program links).
    pub allocator: String,
    /// The file ended inside a record (the process was killed while writing).
    pub truncated_file: bool,
}

impl<H: crate::Host> crate::Converter<H> {
    /// Memory in use of one process image as samples: per stack the change of `inuse-bytes` and
    /// `inuse-count` in each time slice (their sum over a run is what was still held at its end, over
    /// any time range what grew in it), and where the totals were written, `alloc-*` and `peak-*` for the
    /// whole run (slice 0). Addresses are normalized with the image's own mappings, else with those the
    /// run tracked for the pid; a stack starts with the allocation function it called.
    pub fn add_heap(&mut self, h: &HeapProfile) {
        let pos = |name: &str| self.raw.sample_types.iter().position(|t| t.name == name);
        let inuse = pos(st::INUSE_BYTES).zip(pos(st::INUSE_COUNT));
        let alloc = pos(st::ALLOC_BYTES).zip(pos(st::ALLOC_COUNT));
        let peak = pos(st::PEAK_BYTES).zip(pos(st::PEAK_COUNT));
        let stacks = self.heap_stacks(h);
        let thread = RawThread { pid: h.pid, tid: h.pid };
        let n = self.raw.sample_types.len();
        let add =
            |raw: &mut RawRecording, stack: &[RawFrame], time: u32, slots: (usize, usize), v: [i64; 2]| {
                if v != [0, 0] {
                    let mut values = vec![0i64; n];
                    values[slots.0] = v[0];
                    values[slots.1] = v[1];
                    raw.add(stack, &thread, time, &values);
                }
            };
        if let Some(slots) = inuse {
            let mut held = vec![(0u64, 0u64); stacks.len()];
            for snap in &h.snapshots {
                let time = self.slice(snap.time_ns);
                for &(id, bytes, count) in &snap.changed {
                    let (b0, c0) = std::mem::replace(&mut held[id as usize], (bytes, count));
                    let d = [bytes as i64 - b0 as i64, count as i64 - c0 as i64];
                    add(&mut self.raw, &stacks[id as usize], time, slots, d);
                }
            }
        }
        for r in h.totals.iter().flat_map(|t| &t.rows) {
            let stack = &stacks[r.stack as usize];
            if let Some(slots) = alloc {
                add(&mut self.raw, stack, 0, slots, [r.alloc_bytes as i64, r.alloc_count as i64]);
            }
            if let Some(slots) = peak {
                add(&mut self.raw, stack, 0, slots, [r.peak_bytes as i64, r.peak_count as i64]);
            }
        }
    }

    /// The return addresses of a stack copied at an allocation function's entry (`regs`, and the bytes
    /// from the stack pointer up), unwound with process `pid`'s tables, from the function's caller outward
    /// as a [`HeapStack`] holds them; and whether the walk reached the outermost frame. A source that sees
    /// allocations from outside the process (eBPF probes) builds its stacks with this.
    pub fn heap_return_addresses(&mut self, pid: u32, regs: UserRegs, stack: &[u8]) -> (Vec<u64>, bool) {
        self.ready(pid);
        let p = self.procs.get_mut(&pid).expect("made ready");
        let mut frames = Vec::new();
        let regs = Regs { ip: regs.ip, sp: regs.sp, bp: regs.bp };
        let outcome = p.unwinder.unwind(regs, stack, None, &mut frames);
        match outcome {
            Outcome::Complete => self.counters.unwind.complete += 1,
            Outcome::Partial => self.counters.unwind.partial += 1,
        }
        // The unwinder gives each return address minus one (inside the call); a HeapStack holds them as
        // they are.
        let ras = frames.iter().skip(1).map(|&a| a + 1).collect();
        (ras, outcome == Outcome::Complete)
    }

    /// Each stack of `h` as raw frames, leaf (the allocation function) first.
    fn heap_stacks(&mut self, h: &HeapProfile) -> Vec<Vec<RawFrame>> {
        let own = !h.maps.is_empty();
        let tracked = if own { self.procs.remove(&h.pid) } else { None };
        if own {
            for m in h.maps.lines().filter_map(Mapping::from_maps_line) {
                self.add_mapping(h.pid, m.start, m.end, m.pgoff, &m.path);
            }
        }
        let module = if h.allocator.is_empty() { "[heap]" } else { h.allocator.as_str() };
        let labels: Vec<u32> =
            HeapEntry::ALL.iter().map(|e| self.raw.label(e.name(), module, FrameKind::User)).collect();
        let proc = self.procs.get(&h.pid);
        let stacks = h
            .stacks
            .iter()
            .map(|s| {
                let mut frames = Vec::with_capacity(s.return_addresses.len() + 1);
                frames.push(RawFrame::Label(labels[s.entry as usize]));
                // A return address points after the call; step back into it.
                frames.extend(s.return_addresses.iter().map(|&a| match proc {
                    Some(p) => p.normalize(a.saturating_sub(1)),
                    None => RawFrame::Unmapped(a),
                }));
                frames
            })
            .collect();
        if own {
            match tracked {
                Some(p) => {
                    self.procs.insert(h.pid, p);
                }
                None => {
                    self.procs.remove(&h.pid);
                }
            }
        }
        stacks
    }
}

#[cfg(test)]
mod tests {
    use super::{HeapEntry, HeapProfile, HeapRow, HeapSnapshot, HeapStack, HeapTotals};
    use crate::{Converter, FileBytes, Host, ProcessInfo};
    use whyslow_model::raw::{RawFrame, RawThread};
    use whyslow_model::{sample_types as st, SampleType};

    /// Reads files from disk; knows no process.
    struct Disk;
    impl Host for Disk {
        fn file(&self, _pid: u32, path: &str) -> Option<FileBytes> {
            std::fs::read(path).ok().map(FileBytes::owned)
        }
        fn process(&self, _pid: u32) -> Option<ProcessInfo> {
            None
        }
        fn thread_name(&self, _pid: u32, _tid: u32) -> Option<String> {
            None
        }
    }

    fn converter() -> Converter<Disk> {
        let types = [
            st::INUSE_BYTES,
            st::INUSE_COUNT,
            st::ALLOC_BYTES,
            st::ALLOC_COUNT,
            st::PEAK_BYTES,
            st::PEAK_COUNT,
        ]
        .map(|name| SampleType {
            name: name.into(),
            unit: if name.ends_with("bytes") { "bytes" } else { "count" }.into(),
        });
        let mut c = Converter::new(Disk, types.to_vec(), vec![]);
        c.set_origin(1_000_000_000);
        c
    }

    /// Two stacks: one leaks 3 x 100 bytes (allocated over two slices), one allocates 5 x 40 and frees
    /// all. In-use changes land in the slices of their snapshots and sum to what was held at the end;
    /// addresses become file offsets of the image's own mappings, under the function called.
    #[test]
    fn in_use_changes_sum_to_what_was_held_at_the_end() {
        let maps = "00010000-00020000 r-xp 00001000 08:01 42 /bin/true\n7ffd0000-7ffe0000 rw-p 00000000 00:00 0 [stack]\n";
        let stack = |entry, ra: &[u64]| HeapStack { entry, return_addresses: ra.to_vec(), complete: true };
        let h = HeapProfile {
            pid: 7,
            start_ns: 1_000_000_000,
            stacks: vec![stack(HeapEntry::Malloc, &[0x10105, 0x10205]), stack(HeapEntry::Calloc, &[0x10305])],
            snapshots: vec![
                HeapSnapshot {
                    time_ns: 1_050_000_000,
                    total_bytes: 280,
                    total_count: 4,
                    changed: vec![(0, 200, 2), (1, 80, 2)],
                },
                HeapSnapshot {
                    time_ns: 1_250_000_000,
                    total_bytes: 300,
                    total_count: 3,
                    changed: vec![(0, 300, 3), (1, 0, 0)],
                },
            ],
            totals: Some(HeapTotals {
                peak_bytes: 300,
                rows: vec![
                    HeapRow {
                        stack: 0,
                        alloc_count: 3,
                        alloc_bytes: 300,
                        inuse_count: 3,
                        inuse_bytes: 300,
                        peak_count: 3,
                        peak_bytes: 300,
                        oldest_live_ns: Some(0),
                    },
                    HeapRow { stack: 1, alloc_count: 5, alloc_bytes: 200, ..Default::default() },
                ],
                ..Default::default()
            }),
            maps: maps.into(),
            allocator: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
            ..Default::default()
        };
        let mut c = converter();
        c.add_heap(&h);
        let raw = c.finish().0;
        let thread = RawThread { pid: 7, tid: 7 };
        let label = |name: &str| raw.labels.iter().position(|l| l.name == name).unwrap() as u32;
        let at = |offset| RawFrame::User { module: 0, offset };
        let leak = vec![RawFrame::Label(label("malloc")), at(0x1104), at(0x1204)];
        let churn = vec![RawFrame::Label(label("calloc")), at(0x1304)];
        assert_eq!(raw.modules[0].path, "/bin/true");
        assert_eq!(raw.labels[label("malloc") as usize].module, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        let get = |s: &Vec<RawFrame>, t| raw.samples.get(&(s.clone(), thread.clone(), t)).cloned();
        assert_eq!(
            get(&leak, 0),
            Some(vec![200, 2, 300, 3, 300, 3]),
            "slice 0: the first snapshot and the totals"
        );
        assert_eq!(get(&leak, 2), Some(vec![100, 1, 0, 0, 0, 0]));
        assert_eq!(get(&churn, 0), Some(vec![80, 2, 200, 5, 0, 0]));
        assert_eq!(get(&churn, 2), Some(vec![-80, -2, 0, 0, 0, 0]));
        assert_eq!(raw.samples.len(), 4);
    }

    /// A process killed before its totals: the in-use of its last snapshot, no made-up totals; without
    /// its own mappings the addresses stay unmapped rather than guessed.
    #[test]
    fn a_killed_process_keeps_its_last_snapshot() {
        let h = HeapProfile {
            pid: 9,
            stacks: vec![HeapStack {
                entry: HeapEntry::Malloc,
                return_addresses: vec![0x5000],
                complete: false,
            }],
            snapshots: vec![HeapSnapshot {
                time_ns: 1_000_000_000,
                total_bytes: 64,
                total_count: 1,
                changed: vec![(0, 64, 1)],
            }],
            ..Default::default()
        };
        let mut c = converter();
        c.add_heap(&h);
        let raw = c.finish().0;
        let values: Vec<&Vec<i64>> = raw.samples.values().collect();
        assert_eq!(values, [&vec![64, 1, 0, 0, 0, 0]]);
        assert!(raw.samples.keys().all(|(s, _, _)| s[1] == RawFrame::Unmapped(0x5000)));
    }
}
