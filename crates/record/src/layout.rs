//! What a run's samples will mean, decided from its options before anything is opened: the perf events
//! to open, the stream each event's samples (and each eBPF source's samples) feed, and the sample types
//! those streams fill, in the order recordings list them.

use crate::bpf::StackSampling;
use crate::sys::{self, EventConfig, Source};
use crate::RecordOptions;
use whyslow_convert::{SizeArg, Stream};
use whyslow_model::{sample_types, SampleType};

/// User stack bytes copied per event of streams that fire on every call (syscalls, calls, allocations).
const EVENT_STACK_BYTES: u32 = 16 * 1024;
/// Ring data pages per CPU for such streams (16 MB with 4 KB pages).
pub(crate) const EVENT_RING_PAGES: usize = 4096;
/// The largest ring an eBPF stream of such events gets (one ring for all CPUs).
const EBPF_RING_MAX: usize = 32 << 20;
/// Ids of the stack samples of probed calls and of allocations (bpf/calls.bpf.c), probe index added:
/// apart from the kernel's event ids, which count up from 1.
const CALL_SAMPLE_IDS: u64 = 1 << 62;
const ALLOC_SAMPLE_IDS: u64 = CALL_SAMPLE_IDS + (1 << 32);
/// The id of the syscalls' stack samples (bpf/syscalls.bpf.c).
const SYSCALL_SAMPLE_ID: u64 = ALLOC_SAMPLE_IDS + (1 << 32);

/// The events, streams and sample types of a run.
#[derive(Debug)]
pub(crate) struct Layout {
    /// The perf events to open, in stream order (event k feeds stream k).
    pub cfgs: Vec<EventConfig>,
    pub streams: Vec<Stream>,
    pub sample_types: Vec<SampleType>,
    /// (sample id, stream) of the samples eBPF sources send (stacks of syscalls, probed calls and
    /// allocations).
    pub ebpf_ids: Vec<(u64, usize)>,
    /// How the stacks of syscalls, of probed calls (with callers) and of allocations are sampled in eBPF.
    pub syscall_stacks: Option<StackSampling>,
    pub call_stacks: Option<StackSampling>,
    pub alloc_stacks: Option<StackSampling>,
    /// Stack bytes of the eBPF sources' samples.
    pub event_stack_bytes: u32,
    /// Data pages of each perf ring.
    pub ring_pages: usize,
}

impl Layout {
    /// The layout of a run with `opts`: `clock_filtered` where an eBPF program keeps the followed
    /// processes' samples of a clock counted per CPU (a side-band event then comes with it);
    /// `allocators` the size argument of each allocation function probed.
    pub(crate) fn of(
        opts: &RecordOptions,
        launched: bool,
        clock_filtered: bool,
        allocators: &[SizeArg],
    ) -> Layout {
        let base = EventConfig {
            source: Source::Clock(opts.clock),
            frequency: opts.frequency,
            stack_bytes: opts.stack_bytes,
            kernel: opts.kernel,
            enable_on_exec: launched,
        };
        // Events that fire on every call come in bursts: a smaller stack copy each, and a larger ring.
        let event_stack_bytes = opts.stack_bytes.min(EVENT_STACK_BYTES);
        let mut l = Layout {
            cfgs: Vec::new(),
            streams: Vec::new(),
            sample_types: Vec::new(),
            ebpf_ids: Vec::new(),
            syscall_stacks: None,
            call_stacks: None,
            alloc_stacks: None,
            event_stack_bytes,
            ring_pages: opts.ring_pages,
        };
        let sample_type = |l: &mut Layout, name: &str, unit: &str| {
            l.sample_types.push(SampleType { name: name.into(), unit: unit.into() });
            l.sample_types.len() - 1
        };
        if opts.cpu {
            l.cfgs.push(base);
            l.streams.push(Stream::Cpu { slot: 0 });
            sample_type(&mut l, sample_types::CPU, "samples");
            sample_type(&mut l, sample_types::CPU_NS, "nanoseconds");
            if clock_filtered {
                l.cfgs.push(EventConfig { source: Source::Track, ..base });
                l.streams.push(Stream::Events { slot: 0 });
            }
        }
        let syscalls = opts.syscalls.as_ref().and_then(|s| s.stacks_period);
        let syscalls = syscalls.map(|period| (sample_type(&mut l, sample_types::SYSCALLS, "calls"), period));
        // Stacks sampled in eBPF (syscalls, off-CPU blocks, callers of probed calls, allocations) are
        // unwound with the mappings the events follow.
        let callers_period = opts.calls.as_ref().and_then(|c| c.callers_period);
        // Memory in use of a running process comes from eBPF probes too (a launched command's from its
        // library, which writes its own mappings).
        let mem_probes = opts.mem.is_some() && !launched;
        let ebpf_stacks = syscalls.is_some()
            || opts.offcpu.is_some()
            || opts.alloc.is_some()
            || callers_period.is_some()
            || mem_probes;
        if !opts.cpu && ebpf_stacks {
            // Without a clock, an event that samples nothing owns the rings and the records that follow
            // mappings, threads and children.
            l.cfgs.push(EventConfig { source: Source::Track, ..base });
            l.streams.push(Stream::Events { slot: 0 });
        }
        let stacks = |period: u64, first_id: u64| StackSampling {
            period: crate::sampling_period(period),
            stack_bytes: event_stack_bytes,
            ring_bytes: ebpf_ring_bytes(EVENT_RING_PAGES),
            first_id,
            keyed: false,
        };
        if let Some((slot, period)) = syscalls {
            l.ebpf_ids.push((SYSCALL_SAMPLE_ID, l.streams.len()));
            l.streams.push(Stream::Syscalls { slot });
            l.syscall_stacks = Some(stacks(period, SYSCALL_SAMPLE_ID));
        }
        if let Some(period) = callers_period {
            let slot = sample_type(&mut l, sample_types::CALLS, "calls");
            for probe in 0..opts.calls.as_ref().map_or(0, |c| c.probes.len()) {
                l.ebpf_ids.push((CALL_SAMPLE_IDS + probe as u64, l.streams.len()));
                l.streams.push(Stream::Call { slot, probe });
            }
            l.call_stacks = Some(stacks(period, CALL_SAMPLE_IDS));
        }
        // Off-CPU samples come from eBPF, not from an event: the stream goes after the events' streams
        // (no event id leads to it).
        let offcpu = opts.offcpu.as_ref().map(|_| sample_type(&mut l, sample_types::OFFCPU, "nanoseconds"));
        if let Some(ao) = &opts.alloc {
            let slot = sample_type(&mut l, sample_types::ALLOC_COUNT, "count");
            sample_type(&mut l, sample_types::ALLOC_BYTES, "bytes");
            for (probe, &size) in allocators.iter().enumerate() {
                l.ebpf_ids.push((ALLOC_SAMPLE_IDS + probe as u64, l.streams.len()));
                l.streams.push(Stream::Alloc { slot, probe, size });
            }
            // Counts are exact per stack key in the kernel; samples only name the keys' stacks, so the
            // period is the longest gap between two samples of a key (not rounded to a prime).
            l.alloc_stacks =
                Some(StackSampling { period: ao.period.max(1), keyed: true, ..stacks(1, ALLOC_SAMPLE_IDS) });
        }
        if let Some(slot) = offcpu {
            l.streams.push(Stream::OffCpu { slot, state_offset: 0, min_block_ns: 0 });
        }
        if opts.alloc.is_some() {
            sample_type(&mut l, sample_types::ALLOC_SITE_COUNT, "count");
            sample_type(&mut l, sample_types::ALLOC_SITE_BYTES, "bytes");
        }
        // Memory in use comes from the in-process library's files, read at the end: no stream.
        if opts.mem.is_some() {
            for (name, unit) in [
                (sample_types::INUSE_BYTES, "bytes"),
                (sample_types::INUSE_COUNT, "count"),
                (sample_types::ALLOC_BYTES, "bytes"),
                (sample_types::ALLOC_COUNT, "count"),
            ] {
                sample_type(&mut l, name, unit);
            }
            // A window has no peak of its own (the heap's peak is a whole run's).
            if !opts.windowed {
                sample_type(&mut l, sample_types::PEAK_BYTES, "bytes");
                sample_type(&mut l, sample_types::PEAK_COUNT, "count");
            }
        }
        l
    }
}

/// The ring of an eBPF stream of `pages` data pages per CPU, for all CPUs.
pub(crate) fn ebpf_ring_bytes(pages: usize) -> usize {
    (pages * sys::page_size() * sys::online_cpus().len()).min(EBPF_RING_MAX)
}

#[cfg(test)]
mod tests {
    use super::{
        sample_types, Layout, RecordOptions, SizeArg, Source, Stream, ALLOC_SAMPLE_IDS, CALL_SAMPLE_IDS,
        EVENT_STACK_BYTES, SYSCALL_SAMPLE_ID,
    };
    use crate::{AllocOptions, CallOptions, OffCpuOptions, SyscallOptions};

    fn names(l: &Layout) -> Vec<&str> {
        l.sample_types.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn cpu_alone_is_one_clock_with_its_side_band_where_the_clock_is_filtered() {
        let opts = RecordOptions { cpu: true, ..Default::default() };
        let l = Layout::of(&opts, true, false, &[]);
        assert_eq!(l.cfgs.len(), 1);
        assert!(l.cfgs[0].enable_on_exec && l.cfgs[0].source == Source::Clock(opts.clock));
        assert_eq!(l.streams, vec![Stream::Cpu { slot: 0 }]);
        assert_eq!(names(&l), [sample_types::CPU, sample_types::CPU_NS]);
        let l = Layout::of(&opts, false, true, &[]);
        assert_eq!(l.streams, vec![Stream::Cpu { slot: 0 }, Stream::Events { slot: 0 }]);
        assert!(l.cfgs[1].source == Source::Track && !l.cfgs[1].enable_on_exec);
        assert_eq!((l.ring_pages, l.ebpf_ids.len()), (opts.ring_pages, 0));
    }

    /// Every source at once: the sample types in the order recordings list them, each stream pointing at
    /// its slot, the eBPF streams reached through their sample ids, and the smaller stack copies of the
    /// sources that fire on every call.
    #[test]
    fn every_source_has_its_slot_and_stream_in_recording_order() {
        use whyslow_symbols::placement::Execution::Emulated;
        let probes = vec![crate::calls::cost_tests::probe("malloc", Emulated, 0, Vec::new()); 2];
        let opts = RecordOptions {
            cpu: true,
            syscalls: Some(SyscallOptions { trace: Vec::new(), stacks_period: Some(10) }),
            calls: Some(CallOptions { probes, callers_period: Some(7), ..Default::default() }),
            offcpu: Some(OffCpuOptions::sampled_at(99, std::time::Duration::ZERO)),
            alloc: Some(AllocOptions { period: 1000 }),
            ..Default::default()
        };
        let sizes = [SizeArg::Arg(0), SizeArg::Product, SizeArg::GoFirst];
        let l = Layout::of(&opts, false, true, &sizes);
        use whyslow_model::sample_types::*;
        assert_eq!(
            names(&l),
            [
                CPU,
                CPU_NS,
                SYSCALLS,
                CALLS,
                OFFCPU,
                ALLOC_COUNT,
                ALLOC_BYTES,
                ALLOC_SITE_COUNT,
                ALLOC_SITE_BYTES
            ]
        );
        assert_eq!(
            l.streams,
            vec![
                Stream::Cpu { slot: 0 },
                Stream::Events { slot: 0 },
                Stream::Syscalls { slot: 2 },
                Stream::Call { slot: 3, probe: 0 },
                Stream::Call { slot: 3, probe: 1 },
                Stream::Alloc { slot: 5, probe: 0, size: SizeArg::Arg(0) },
                Stream::Alloc { slot: 5, probe: 1, size: SizeArg::Product },
                Stream::Alloc { slot: 5, probe: 2, size: SizeArg::GoFirst },
                Stream::OffCpu { slot: 4, state_offset: 0, min_block_ns: 0 },
            ]
        );
        assert_eq!(l.cfgs.len(), 2, "clock, side band: the rest come from eBPF");
        assert_eq!(l.ring_pages, opts.ring_pages, "no perf ring carries stacks of every call");
        let ids: Vec<(u64, usize)> = vec![
            (SYSCALL_SAMPLE_ID, 2),
            (CALL_SAMPLE_IDS, 3),
            (CALL_SAMPLE_IDS + 1, 4),
            (ALLOC_SAMPLE_IDS, 5),
            (ALLOC_SAMPLE_IDS + 1, 6),
            (ALLOC_SAMPLE_IDS + 2, 7),
        ];
        assert_eq!(l.ebpf_ids, ids);
        let syscalls = l.syscall_stacks.as_ref().unwrap();
        assert_eq!(
            (syscalls.period, syscalls.first_id, syscalls.stack_bytes),
            (crate::sampling_period(10), SYSCALL_SAMPLE_ID, opts.stack_bytes.min(EVENT_STACK_BYTES))
        );
        let calls = l.call_stacks.as_ref().unwrap();
        assert_eq!(
            (calls.period, calls.first_id, calls.keyed),
            (crate::sampling_period(7), CALL_SAMPLE_IDS, false)
        );
        let allocs = l.alloc_stacks.as_ref().unwrap();
        assert_eq!((allocs.period, allocs.first_id, allocs.keyed), (1000, ALLOC_SAMPLE_IDS, true));
    }

    /// Without a clock, an event that samples nothing goes first: it owns the rings and follows the
    /// mappings the eBPF stacks are unwound with.
    #[test]
    fn without_a_clock_an_event_that_samples_nothing_leads() {
        let opts = RecordOptions {
            cpu: false,
            offcpu: Some(OffCpuOptions::sampled_at(99, std::time::Duration::ZERO)),
            ..Default::default()
        };
        let l = Layout::of(&opts, true, false, &[]);
        assert_eq!(
            l.streams,
            vec![Stream::Events { slot: 0 }, Stream::OffCpu { slot: 0, state_offset: 0, min_block_ns: 0 }]
        );
        assert_eq!(names(&l), [sample_types::OFFCPU]);
        assert!(l.cfgs.len() == 1 && l.cfgs[0].source == Source::Track);
        // Syscall stacks alone likewise.
        let opts = RecordOptions {
            cpu: false,
            syscalls: Some(SyscallOptions { trace: Vec::new(), stacks_period: Some(1) }),
            ..Default::default()
        };
        let l = Layout::of(&opts, true, false, &[]);
        assert_eq!(l.streams, vec![Stream::Events { slot: 0 }, Stream::Syscalls { slot: 0 }]);
        assert_eq!(l.ebpf_ids, vec![(SYSCALL_SAMPLE_ID, 1)]);
        assert!(l.cfgs.len() == 1 && l.cfgs[0].source == Source::Track);
        // Syscall counters alone need no event at all.
        let opts = RecordOptions {
            cpu: false,
            syscalls: Some(SyscallOptions { trace: Vec::new(), stacks_period: None }),
            ..Default::default()
        };
        let l = Layout::of(&opts, true, false, &[]);
        assert!(l.cfgs.is_empty() && l.streams.is_empty() && l.sample_types.is_empty());
    }
}
