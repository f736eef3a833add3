//! What the agent follows: a process with the targets that match it, and the key of the one session that
//! records it (the union of their sources, the highest frequency, the shortest window) with the record
//! options that key stands for. Plain data: nothing here scans /proc or opens an event.

use crate::spec::{ProcessView, SourceKind, TargetSpec};
use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use whyslow_record::mem::MemOptions;
use whyslow_record::{AllocOptions, OffCpuOptions, RecordOptions, SyscallOptions, Target};

/// Allocation stacks: each copied again at least every Nth call of it (the counts are exact).
const ALLOC_PERIOD: u64 = 1000;
/// Syscall entries sampled: every Nth.
const SYSCALL_PERIOD: u64 = 100;
/// Memory in use: allocations sampled one every this many bytes on average (tcmalloc's, jemalloc's and
/// Go's default), so a stack crosses to user space per half MiB allocated, not per call.
pub const MEM_SAMPLE_BYTES: u64 = 512 * 1024;
/// The share of a process's CPU time the memory probes may cost (the doctor's and `record -p --mem`'s
/// default): past it they stop and the windows keep the in-use as of then.
pub const MEM_PROBE_BUDGET: f64 = 0.05;

/// What one session records: its sources, frequency and window length.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub sources: BTreeSet<SourceKind>,
    pub frequency: u64,
    pub window_s: u64,
}

impl Key {
    /// The one key of a process matched by `specs`: every source any of them asks for.
    pub(crate) fn of<'a>(specs: impl Iterator<Item = &'a TargetSpec>) -> Option<Key> {
        let mut k: Option<Key> = None;
        for s in specs {
            let k =
                k.get_or_insert_with(|| Key { sources: BTreeSet::new(), frequency: 0, window_s: u64::MAX });
            k.sources.extend(s.sources.iter().copied());
            k.frequency = k.frequency.max(s.frequency);
            k.window_s = k.window_s.min(s.window_s);
        }
        k
    }

    pub fn name(&self) -> String {
        self.sources.iter().map(|s| format!("{s:?}").to_lowercase()).collect::<Vec<_>>().join(",")
    }

    pub(crate) fn options(&self, first: u32, stop: Arc<AtomicBool>) -> RecordOptions {
        let has = |s| self.sources.contains(&s);
        RecordOptions {
            target: Target::Pids(vec![first]),
            frequency: self.frequency,
            cpu: has(SourceKind::Cpu),
            offcpu: has(SourceKind::Offcpu)
                .then(|| OffCpuOptions::sampled_at(self.frequency, Duration::ZERO)),
            // Memory in use counts the allocations of each window itself (sampled): with it, no
            // allocation probes of their own (one uprobe per allocator call is enough).
            alloc: (has(SourceKind::Alloc) && !has(SourceKind::Mem))
                .then_some(AllocOptions { period: ALLOC_PERIOD }),
            mem: has(SourceKind::Mem)
                .then_some(MemOptions { sample_bytes: MEM_SAMPLE_BYTES, period_ms: 100 }),
            probe_budget: has(SourceKind::Mem).then_some(MEM_PROBE_BUDGET),
            windowed: true,
            syscalls: has(SourceKind::Syscalls)
                .then(|| SyscallOptions { trace: Vec::new(), stacks_period: Some(SYSCALL_PERIOD) }),
            ring_pages: ring_pages(self.frequency, RecordOptions::default().stack_bytes),
            stop: Some(stop),
            ..RecordOptions::default()
        }
    }
}

/// Ring pages per CPU that hold a quarter second of samples (rings are drained every 100 ms), a power of
/// two from 64 (256 KB) to 2048 (8 MB).
pub(crate) fn ring_pages(frequency: u64, stack_bytes: u32) -> usize {
    let bytes = frequency * (u64::from(stack_bytes) + 512) / 4;
    (bytes.div_ceil(4096) as usize).next_power_of_two().clamp(64, 2048)
}

/// A process the agent follows now (or followed until recently).
#[derive(Debug, Clone)]
pub struct Tracked {
    pub view: ProcessView,
    pub targets: Vec<i64>,
    pub key: Key,
    /// The followed process whose events this one inherited, or itself when opened directly.
    pub root: u32,
    /// Clock ticks since boot when it was chosen to be opened directly (processes started before
    /// cannot have inherited its events).
    pub follow_ticks: u64,
    pub since_ns: u64,
    /// When it ended or stopped matching (kept for [`GRACE`] so its last window is attributed).
    pub gone_ns: Option<u64>,
    /// Seen by the whole-host session (in `Shared::host_tracked`), not followed.
    pub host: bool,
}
