//! The event sources of a run: perf_event rings (CPU clock, syscall tracepoint) opened per task and
//! inherited by new threads and children, and the eBPF probes (syscall counters, call counters and
//! allocation-site counters with their sampled stacks, off-CPU blocks, exit watch). Opening, falling back
//! where the machine refuses, following more processes later, and closing.

use crate::allocators::{self, Allocators, MemProbes};
use crate::bpf::{
    CallProbe, ClockFilter, ExitWatch, MemProbe, OffCpuConfig, OffCpuProbe, Seen, SyscallCost, SyscallProbe,
};
use crate::calls::Probe;
use crate::layout::{ebpf_ring_bytes, Layout};
use crate::records::{self, InRing};
use crate::sideband::SideBand;
use crate::sys::{self, Clock, EventConfig, Ring, Scope, Source};
use crate::target::{self, Target};
use crate::{RecordError, RecordOptions};
use std::borrow::Cow;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use whyslow_convert::records::{Record, Sample, Timed};
use whyslow_convert::{Converter, Host, SizeArg, Stream};
use whyslow_model::SampleType;

/// The open events: one ring per CPU (owned by the first event on that CPU: one counted per CPU where
/// there is one), plus the extra fds redirected into it: the other per-CPU events, and those opened per
/// thread (with the process each was opened for, so a process that ended can be let go).
pub(crate) struct Events {
    rings: Vec<Ring>,
    cpu_extra: Vec<OwnedFd>,
    extra: Vec<(u32, OwnedFd)>,
    cfgs: Vec<EventConfig>,
    cpus: Vec<i32>,
    /// Event id (as samples carry it) -> index into `cfgs`.
    ids: HashMap<u64, usize>,
    /// Data pages of each ring.
    pages: usize,
    /// The eBPF program (see [`ClockFilter`]) that keeps the followed processes' samples of a clock
    /// counted per CPU; without one, the clock is counted per thread like the other events.
    filter: Option<i32>,
    /// The processes whose records of the side band, asked per CPU for every process, are kept (see
    /// [`SideBand`]); None where the side band is asked per thread (inherited by the target's threads
    /// and children): no event samples nothing, or the machine refuses events per CPU.
    side_band: Option<SideBand>,
}

impl Events {
    /// Whether event `k` is counted per CPU, for every process: the clock where an eBPF program keeps
    /// the followed processes' samples, the event that samples nothing where its side band is filtered
    /// as it is read.
    fn per_cpu(&self, k: usize) -> bool {
        match self.cfgs[k].source {
            Source::Clock(_) => self.filter.is_some(),
            Source::Track => self.side_band.is_some(),
        }
    }

    /// The event that asks for the records that follow mappings, names, forks and exits: the one that
    /// samples nothing where there is one, else the first.
    fn side_band_event(&self) -> usize {
        self.cfgs.iter().position(|c| c.source == Source::Track).unwrap_or(0)
    }

    /// Opens the per-CPU events, the first on each CPU owning its ring: mapped, then the clock filtered,
    /// then enabled, so that no sample of another process is ever taken.
    fn open_cpus(&mut self) -> Result<(), std::io::Error> {
        let per_cpu: Vec<usize> = (0..self.cfgs.len()).filter(|&k| self.per_cpu(k)).collect();
        let side_band = self.side_band_event();
        for &cpu in &self.cpus {
            for &k in &per_cpu {
                let scope = Scope::Cpu { side_band: k == side_band };
                let fd = sys::open_event(&self.cfgs[k], scope, cpu, self.pages)?;
                self.ids.insert(sys::event_id(&fd)?, k);
                if let (Source::Clock(_), Some(prog)) = (self.cfgs[k].source, self.filter) {
                    sys::set_filter(&fd, prog)?;
                }
                if k == per_cpu[0] {
                    let ring = Ring::map(fd, self.pages)?;
                    sys::enable(ring.fd())?;
                    self.rings.push(ring);
                } else {
                    let ring = self.rings.last().expect("the CPU's first event maps its ring");
                    sys::redirect_output(&fd, ring.fd())?;
                    sys::enable(&fd)?;
                    self.cpu_extra.push(fd);
                }
            }
        }
        Ok(())
    }

    /// Opens every per-thread event on every CPU for task `tid` of process `pid` (inherited by its future
    /// threads and children); where no event counted per CPU asks for the side band, the first of them
    /// follows its mappings, names, forks and exits. The first task opened opens the per-CPU events too.
    fn open_task(&mut self, pid: u32, tid: u32) -> Result<(), std::io::Error> {
        if self.rings.is_empty() {
            self.open_cpus()?;
        }
        let pages = self.pages;
        let side_band = self.side_band_event();
        let per_task: Vec<usize> = (0..self.cfgs.len()).filter(|&k| !self.per_cpu(k)).collect();
        for &k in &per_task {
            let scope = Scope::Task { tid: tid as i32, side_band: k == side_band };
            for (i, &cpu) in self.cpus.iter().enumerate() {
                let fd = sys::open_event(&self.cfgs[k], scope, cpu, self.pages)?;
                self.ids.insert(sys::event_id(&fd)?, k);
                if let Some(ring) = self.rings.get(i) {
                    sys::redirect_output(&fd, ring.fd())?;
                    self.extra.push((pid, fd));
                } else {
                    self.rings.push(Ring::map(fd, pages)?);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn set_enabled(&self, on: bool) {
        let extra = self.cpu_extra.iter().chain(self.extra.iter().map(|(_, fd)| fd));
        for fd in self.rings.iter().map(Ring::fd).chain(extra) {
            if on {
                let _ = sys::enable(fd);
            } else {
                sys::disable(fd);
            }
        }
    }

    /// Reads the records of every ring in place, without freeing their space (see [`Events::release`]):
    /// samples into `in_ring` with their user stacks left in the ring, every other record (and a sample
    /// that wraps around its ring's end) into `batch`; of the side band asked per CPU, the followed
    /// processes' records. Returns each ring's position to release once the samples were handled.
    fn read<'a>(
        rings: &'a [Ring],
        side_band: Option<&mut SideBand>,
        malformed: &mut u64,
        batch: &mut Vec<Timed>,
        in_ring: &mut Vec<InRing<'a>>,
    ) -> Vec<u64> {
        // Every record timed before now is in its ring by the time that ring is read.
        let read_at = sys::monotonic_ns();
        let mut read = Vec::new();
        let ends = rings
            .iter()
            .map(|ring| {
                ring.read(|rec| {
                    let Cow::Borrowed(rec) = rec else {
                        match records::decode(&rec) {
                            Some(t) => read.push(t),
                            None => *malformed += 1,
                        }
                        return;
                    };
                    match records::decode_in_place(rec) {
                        Some((Timed { time, record: Record::Sample(sample) }, stack)) => {
                            in_ring.push(InRing { time, sample, stack })
                        }
                        Some((t, _)) => read.push(t),
                        None => *malformed += 1,
                    }
                })
            })
            .collect();
        if let Some(sb) = side_band {
            sb.filter(&mut read, read_at);
        }
        batch.append(&mut read);
        ends
    }

    /// Frees the space of the records [`Events::read`] read, once nothing borrows them.
    fn release(&mut self, ends: Vec<u64>) {
        for (ring, end) in self.rings.iter_mut().zip(ends) {
            ring.release(end);
        }
    }

    pub(crate) fn rings(&self) -> &[Ring] {
        &self.rings
    }

    /// Closes the events opened for process `pid` (not the rings, which other processes share).
    pub(crate) fn forget(&mut self, pid: u32) {
        self.extra.retain(|(p, _)| *p != pid);
        if let Some(sb) = self.side_band.as_mut() {
            sb.forget(pid);
        }
    }

    /// Keeps the side band of process `pid` too (its per-thread events are opened by [`open_all`]).
    fn follow(&mut self, pid: u32) {
        if let Some(sb) = self.side_band.as_mut() {
            sb.follow(pid);
        }
    }

    pub(crate) fn clock(&self) -> Option<Clock> {
        self.cfgs.iter().find_map(|c| match c.source {
            Source::Clock(clock) => Some(clock),
            Source::Track => None,
        })
    }
}

fn classify(e: std::io::Error, pid: u32) -> RecordError {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => RecordError::Permission(e),
        Some(libc::ESRCH) => RecordError::NoSuchProcess(pid),
        _ => RecordError::PerfEvent(e),
    }
}

pub(crate) fn raise_fd_limit() {
    // SAFETY: l is a rlimit owned by this frame; getrlimit fills it before setrlimit reads it.
    unsafe {
        let mut l: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// Opens events on the first task, falling back from cycles to cpu-clock and from kernel+user to user-only
/// when the machine does not allow them. Returns the notes to show the user.
fn open_first(ev: &mut Events, pid: u32, tid: u32, notes: &mut Vec<String>) -> Result<(), RecordError> {
    loop {
        match ev.open_task(pid, tid) {
            Ok(()) => return Ok(()),
            Err(e) => {
                ev.rings.clear();
                ev.cpu_extra.clear();
                ev.extra.clear();
                ev.ids.clear();
                let code = e.raw_os_error();
                let refused = matches!(code, Some(libc::EACCES) | Some(libc::EPERM));
                if refused && ev.side_band.is_some() {
                    // Events for every process are not allowed here (perf_event_paranoid): the side band
                    // is asked per thread, of the target's threads only.
                    ev.side_band = None;
                    continue;
                }
                let kernel = ev.cfgs.iter().any(|c| c.kernel);
                let clock = ev.cfgs.iter_mut().find(|c| matches!(c.source, Source::Clock(_)));
                match clock {
                    Some(c)
                        if c.source != Source::Clock(Clock::CpuClock)
                            && matches!(
                                code,
                                Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
                            ) =>
                    {
                        if c.source == Source::Clock(Clock::Cycles) {
                            notes.push("no hardware cycles counter here: sampled cpu-clock instead".into());
                        }
                        c.source = Source::Clock(Clock::CpuClock);
                    }
                    _ if kernel && refused => {
                        notes
                            .push("kernel stacks not allowed (perf_event_paranoid): user stacks only".into());
                        ev.cfgs.iter_mut().for_each(|c| c.kernel = false);
                    }
                    _ => return Err(classify(e, tid)),
                }
            }
        }
    }
}

/// What the sources borrow for the length of a run: the eBPF skeletons' objects and the allocation
/// functions to probe.
pub struct Objects {
    syscalls: std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    calls: std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    alloc_obj: std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    exits: std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    offcpu: std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    clock: std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    mem_obj: std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    /// The allocation functions to probe and how they nest (with --alloc).
    pub(crate) alloc: Allocators,
    /// The allocation and free functions to probe for memory in use of running processes (--mem -p).
    pub(crate) mem: MemProbes,
    /// What resolving the allocation functions had to say.
    pub(crate) notes: Vec<String>,
}

impl Objects {
    /// Resolves the allocation functions (with --alloc).
    pub fn new(opts: &RecordOptions) -> Result<Self, RecordError> {
        let mut notes = Vec::new();
        let alloc = match &opts.alloc {
            Some(_) => allocators::resolve(&opts.target, &mut notes)?,
            None => Default::default(),
        };
        let mem = match (&opts.mem, &opts.target) {
            (Some(_), Target::Pids(_) | Target::Comm(_)) => {
                allocators::resolve_mem(&opts.target, &mut notes)?
            }
            _ => Default::default(),
        };
        Ok(Objects {
            syscalls: std::mem::MaybeUninit::uninit(),
            calls: std::mem::MaybeUninit::uninit(),
            alloc_obj: std::mem::MaybeUninit::uninit(),
            exits: std::mem::MaybeUninit::uninit(),
            offcpu: std::mem::MaybeUninit::uninit(),
            clock: std::mem::MaybeUninit::uninit(),
            mem_obj: std::mem::MaybeUninit::uninit(),
            alloc,
            mem,
            notes,
        })
    }
}

/// What a syscall costs while the counters are attached, in ns (see [`Sources::syscall_prices`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SyscallPrices {
    /// One of a target's, counted.
    pub counted: u64,
    /// One of any other process's.
    pub other: u64,
}

impl SyscallPrices {
    /// What the syscalls `seen` cost.
    pub fn cost(&self, seen: Seen) -> u64 {
        seen.counted.saturating_mul(self.counted).saturating_add(seen.others.saturating_mul(self.other))
    }
}

/// The per-call probes' hits so far and what they cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ProbeCost {
    pub hits: u64,
    /// Syscalls of other processes that the attached syscall counters slowed (their cost is in `ns`).
    pub others: u64,
    pub ns: u64,
}

/// The sources of a run, attached and ready.
pub(crate) struct Sources<'obj> {
    pub(crate) ev: Events,
    pub(crate) syscalls: Option<SyscallProbe<'obj>>,
    pub(crate) calls: Option<CallProbe<'obj>>,
    /// Exact allocation counts and bytes per call site, counted in the kernel.
    pub(crate) alloc_sites: Option<CallProbe<'obj>>,
    /// How attached targets end (None where eBPF is unavailable: then only their exit is seen).
    pub(crate) exits: Option<ExitWatch<'obj>>,
    /// Off-CPU blocks, sampled in the kernel.
    pub(crate) offcpu: Option<OffCpuProbe<'obj>>,
    /// Allocations and frees of running processes, for memory in use (--mem -p), and the functions
    /// probed.
    pub(crate) mem: Option<MemProbe<'obj>>,
    pub(crate) mem_probes: MemProbes,
    /// What a memory probe hit costs here, measured before the run.
    pub(crate) mem_hit_cost: Option<crate::calls::HitCost>,
    /// Keeps the followed processes' samples of the per-CPU clock (None: the clock is per thread).
    clock_filter: Option<ClockFilter<'obj>>,
    pub(crate) streams: Vec<Stream>,
    pub(crate) sample_types: Vec<SampleType>,
    /// The allocation functions probed in each process followed.
    alloc_probes: Vec<Probe>,
    /// What a probe hit costs here, measured before the run (calls and allocation probes).
    pub(crate) hit_cost: Option<crate::calls::HitCost>,
    /// What a counted syscall costs here, measured before the run (under a probe budget).
    pub(crate) syscall_cost: Option<SyscallCost>,
    /// Whole-host sampling ([`Target::All`]).
    pub(crate) host: bool,
    /// When the events were open and the syscall counters attached: what they counted of a running
    /// target is counted from here (the converter's setup after it can take a second on a busy machine).
    pub(crate) counting_since: std::time::Instant,
    /// The memory of [`Sources::drain`]'s lists, kept from one drain to the next: allocating them anew
    /// each time (tens of KB) had the allocator consolidate the small blocks the samples freed, a
    /// tenth of what a sample cost.
    spare: Spare,
}

/// See [`Sources::spare`]: the samples read in place (empty, and borrowing nothing while kept) and their
/// order.
#[derive(Default)]
struct Spare {
    in_ring: Vec<InRing<'static>>,
    order: Vec<(u64, usize)>,
}

/// An emptied list of samples read in place, in the memory it had, borrowing nothing. (Collecting a
/// list into one of elements of the same size reuses its memory, and an empty one has no element to
/// map.)
fn recycle(mut in_ring: Vec<InRing<'_>>) -> Vec<InRing<'static>> {
    in_ring.clear();
    in_ring.into_iter().map(|_| unreachable!("the list is empty")).collect()
}

impl<'obj> Sources<'obj> {
    /// What the reader polls beside the perf rings (the clock filter's ring of stacks sent beside
    /// samples), if anything.
    pub(crate) fn wake_fd(&self) -> Option<i32> {
        self.clock_filter.as_ref().map(ClockFilter::wake_fd)
    }

    /// Opens the perf events and loads and attaches the eBPF programs, all before a gated child may run.
    pub(crate) fn start(
        opts: &RecordOptions,
        trace: &[u32],
        pids: &[u32],
        launched: bool,
        objects: &'obj mut Objects,
        notes: &mut Vec<String>,
    ) -> Result<Self, RecordError> {
        if opts.target == Target::All {
            return Self::start_host(opts, objects, notes);
        }
        let alloc = &objects.alloc.probes;
        let alloc_probes: Vec<Probe> = alloc.iter().map(|(p, _)| p.clone()).collect();
        let alloc_sizes: Vec<SizeArg> = alloc.iter().map(|&(_, size)| size).collect();
        // Go programs' stacks go on past the runtime's switches to the system stack (bpf/clock.bpf.c).
        let go: Vec<bool> = pids.iter().map(|&pid| target::runs_go(&opts.target, pid)).collect();
        // The clock is counted per CPU and filtered in the kernel where eBPF allows (bpf/clock.bpf.c): a
        // per-thread clock costs the target at each of its context switches. One event per CPU that
        // samples nothing then follows every process's mappings, threads and children, and the records
        // of the followed processes and their children are kept as they are read (see [`SideBand`]).
        let clock_filter = if opts.cpu {
            crate::phases::time("load eBPF: clock filter", || {
                // Only tracked processes said to run Go get goroutine stacks: a launched command that is not
                // Go (its children are not marked Go either) needs no ring for them.
                let go = !launched || go.iter().any(|&g| g);
                let python = target::may_run_python(&opts.target);
                ClockFilter::load(&mut objects.clock, opts.stack_bytes, opts.frequency, go, python, false)
                    .ok()
            })
        } else {
            None
        };
        // The clock counted per thread: the one-time kernel wait of per-task events runs beside the eBPF
        // loads.
        let warm = (opts.cpu && clock_filter.is_none()).then(|| std::thread::spawn(sys::warm_task_events));
        let Layout {
            cfgs,
            streams,
            mut sample_types,
            ebpf_ids,
            syscall_stacks,
            call_stacks,
            alloc_stacks,
            event_stack_bytes,
            ring_pages,
        } = Layout::of(opts, launched, clock_filter.is_some(), &alloc_sizes);
        let mut probe = match &opts.syscalls {
            Some(_) => Some(crate::phases::time("load eBPF: syscall counters", || {
                SyscallProbe::load(&mut objects.syscalls, trace, syscall_stacks)
            })?),
            None => None,
        };
        // Under a budget, what a counted syscall costs on this kernel and CPU is measured, not assumed.
        let syscall_cost = match (probe.as_mut(), opts.probe_budget) {
            (Some(p), Some(_)) => {
                crate::phases::time("measure the syscall counters' cost", || p.measure_cost())
            }
            _ => None,
        };
        let mut alloc_sites = match &opts.alloc {
            Some(_) => {
                let sites = objects.alloc.sites();
                let p = crate::phases::time("load eBPF: allocation probes", || {
                    CallProbe::load(&mut objects.alloc_obj, false, false, Some(&sites), alloc_stacks)
                })?;
                for &pid in pids {
                    p.track(pid, launched)?;
                }
                Some(p)
            }
            None => None,
        };
        let mut calls = match &opts.calls {
            Some(c) => Some(crate::phases::time("load eBPF: call counters", || {
                CallProbe::load(&mut objects.calls, c.latency, c.follow_children, None, call_stacks)
            })?),
            None => None,
        };
        // What a hit of the per-call probes costs on this kernel and CPU, measured with the run's program.
        let hit_cost = match calls.as_mut().or(alloc_sites.as_mut()) {
            Some(p) => crate::phases::time("measure the probe hit cost", || p.measure_hits()),
            None => None,
        };
        if let (Some(a), Some(_)) = (alloc_sites.as_mut(), calls.as_ref()) {
            // The allocation program's time per run is the run's from here on too.
            a.mark_stats();
        }
        let offcpu = match &opts.offcpu {
            Some(oo) => {
                let cfg = OffCpuConfig {
                    min_block: oo.min_block,
                    sample_period: oo.sample_period,
                    stack_bytes: event_stack_bytes,
                    kernel_stack: opts.kernel,
                    ring_bytes: ebpf_ring_bytes(opts.ring_pages),
                };
                let mut p = crate::phases::time("load eBPF: off-CPU", || {
                    OffCpuProbe::load(&mut objects.offcpu, &cfg)
                })?;
                for (&pid, &go) in pids.iter().zip(&go) {
                    p.track(pid, launched, go)?;
                }
                p.attach()?;
                Some(p)
            }
            None => None,
        };
        let mut mem = match (&opts.mem, launched) {
            (Some(m), false) => {
                let sites: Vec<_> = objects.mem.probes.iter().map(|(_, s)| *s).collect();
                let ring = ebpf_ring_bytes(opts.ring_pages.max(crate::layout::EVENT_RING_PAGES));
                let p = crate::phases::time("load eBPF: memory probes", || {
                    MemProbe::load(&mut objects.mem_obj, m.sample_bytes, event_stack_bytes, ring, &sites)
                })?;
                for &pid in pids {
                    p.track(pid)?;
                }
                Some(p)
            }
            _ => None,
        };
        let mem_hit_cost = mem
            .as_mut()
            .and_then(|p| crate::phases::time("measure the memory probes' hit cost", || p.measure_hits()));
        let side_band = cfgs.iter().any(|c| c.source == Source::Track).then(|| SideBand::new(pids));
        let mut ev = Events {
            rings: Vec::new(),
            cpu_extra: Vec::new(),
            extra: Vec::new(),
            cfgs,
            cpus: sys::online_cpus(),
            ids: HashMap::new(),
            pages: ring_pages,
            filter: clock_filter.as_ref().map(ClockFilter::program_fd),
            side_band,
        };
        if let Some(f) = &clock_filter {
            for (&pid, &go) in pids.iter().zip(&go) {
                f.track(pid, launched, go)?;
            }
        }
        let warmed = crate::phases::time("wait for perf's task hooks", || warm.map(|w| w.join()));
        if !ev.cfgs.is_empty() {
            crate::phases::time("open perf events", || open_all(&mut ev, pids, launched, notes))?;
        }
        drop(warmed);
        ev.ids.extend(ebpf_ids);
        let attach_t0 = std::time::Instant::now();
        let counting_since = attach_t0;
        if opts.cpu && ev.clock() != Some(Clock::CpuClock) {
            sample_types[1] = SampleType { name: "cycles".into(), unit: "count".into() };
        }
        if let Some(p) = probe.as_mut() {
            for &pid in pids {
                p.track(pid, launched)?;
            }
            p.attach()?;
        }
        if let (Some(cp), Some(co)) = (calls.as_mut(), &opts.calls) {
            for &pid in pids {
                cp.track(pid, launched)?;
            }
            if co.follow_children {
                notes.extend(cp.attach(&co.probes, 0..co.probes.len(), -1)?);
            } else {
                for &pid in pids {
                    notes.extend(cp.attach(&co.probes, 0..co.probes.len(), pid as i32)?);
                }
            }
        }
        crate::phases::add("attach probes", attach_t0.elapsed());
        // How attached targets end (a launched command is whyslow's child: its wait status says).
        let exits = match launched {
            true => None,
            false => {
                crate::phases::time("load eBPF: exit watch", || ExitWatch::load(&mut objects.exits).ok())
            }
        };
        let attach_t0 = std::time::Instant::now();
        for (w, &pid) in exits.iter().flat_map(|w| pids.iter().map(move |p| (w, p))) {
            w.track(pid, launched)?;
        }
        // The allocators are the hottest functions probed: their breakpoints go in last.
        if let Some(p) = alloc_sites.as_mut() {
            for &pid in pids {
                notes.extend(p.attach(&alloc_probes, 0..alloc_probes.len(), pid as i32)?);
            }
        }
        if let Some(p) = mem.as_mut() {
            for &pid in pids {
                notes.extend(p.attach(&objects.mem.probes, pid)?);
            }
        }
        crate::phases::add("attach probes", attach_t0.elapsed());
        Ok(Sources {
            ev,
            syscalls: probe,
            calls,
            alloc_sites: alloc_sites.take(),
            exits,
            offcpu,
            mem,
            mem_probes: objects.mem.clone(),
            mem_hit_cost,
            clock_filter,
            streams,
            sample_types,
            alloc_probes,
            hit_cost,
            syscall_cost,
            host: false,
            counting_since,
            spare: Spare::default(),
        })
    }

    /// Whole-host sampling: one cpu-clock per CPU for every process (its eBPF program keeps every
    /// sample, reading the Python frames of the CPython processes), whose side band describes every
    /// process's mappings, names, forks, execs and exits. Nothing is opened per process or thread.
    fn start_host(
        opts: &RecordOptions,
        objects: &'obj mut Objects,
        notes: &mut Vec<String>,
    ) -> Result<Self, RecordError> {
        if opts.syscalls.is_some() || opts.calls.is_some() || opts.alloc.is_some() || opts.offcpu.is_some() {
            return Err(RecordError::Invalid("a whole-host recording samples CPU time only".into()));
        }
        let layout = Layout::of(opts, false, false, &[]);
        let mut cfg = EventConfig {
            source: Source::Clock(Clock::CpuClock),
            frequency: opts.frequency,
            stack_bytes: opts.stack_bytes,
            kernel: opts.kernel,
            enable_on_exec: false,
        };
        // Every sample is kept, through the clock's program where eBPF allows, for the Python frames of the
        // CPython processes among them (found as they are first sampled); native frames only without it.
        let clock_filter = crate::phases::time("load eBPF: clock filter", || {
            ClockFilter::load(&mut objects.clock, opts.stack_bytes, opts.frequency, false, true, true).ok()
        });
        let mut ev = Events {
            rings: Vec::new(),
            cpu_extra: Vec::new(),
            extra: Vec::new(),
            cfgs: Vec::new(),
            cpus: sys::online_cpus(),
            ids: HashMap::new(),
            pages: opts.ring_pages,
            filter: clock_filter.as_ref().map(ClockFilter::program_fd),
            side_band: None,
        };
        let open = |ev: &mut Events, cfg: &EventConfig| -> Result<(), std::io::Error> {
            for &cpu in &ev.cpus {
                let fd = sys::open_event(cfg, Scope::Cpu { side_band: true }, cpu, ev.pages)?;
                if let Some(prog) = ev.filter {
                    sys::set_filter(&fd, prog)?;
                }
                ev.ids.insert(sys::event_id(&fd)?, 0);
                ev.rings.push(Ring::map(fd, ev.pages)?);
            }
            Ok(())
        };
        if let Err(e) = open(&mut ev, &cfg) {
            ev.rings.clear();
            ev.ids.clear();
            match e.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) if cfg.kernel => {
                    notes.push("kernel stacks not allowed (perf_event_paranoid): user stacks only".into());
                    cfg.kernel = false;
                    open(&mut ev, &cfg).map_err(|e| classify(e, 0))?;
                }
                _ => return Err(classify(e, 0)),
            }
        }
        for ring in &ev.rings {
            sys::enable(ring.fd()).map_err(RecordError::PerfEvent)?;
        }
        ev.cfgs.push(cfg);
        Ok(Sources {
            ev,
            syscalls: None,
            calls: None,
            alloc_sites: None,
            exits: None,
            offcpu: None,
            mem: None,
            mem_probes: MemProbes::default(),
            mem_hit_cost: None,
            clock_filter,
            streams: layout.streams,
            sample_types: layout.sample_types,
            alloc_probes: Vec::new(),
            hit_cost: None,
            syscall_cost: None,
            host: true,
            counting_since: std::time::Instant::now(),
            spare: Spare::default(),
        })
    }

    /// The price in ns of one counted syscall, and of one syscall of another process while the counters
    /// are attached: measured at the start of the run where that worked, else the assumed
    /// [`crate::SYSCALL_COST_NS`] and [`crate::SYSCALL_OTHER_COST_NS`].
    pub(crate) fn syscall_prices(&self) -> SyscallPrices {
        match self.syscall_cost {
            Some(c) => SyscallPrices { counted: c.ns().round() as u64, other: c.other_ns.round() as u64 },
            None => SyscallPrices { counted: crate::SYSCALL_COST_NS, other: crate::SYSCALL_OTHER_COST_NS },
        }
    }

    /// Probe hits so far (counted syscalls, with every `stacks_period`th stack sampled; calls probes,
    /// whose placements are `call_probes`; allocation probes) and their estimated cost in ns (see
    /// [`crate::RecordOptions::probe_budget`]), the syscalls of other processes that the syscall
    /// counters slowed included.
    pub(crate) fn probe_cost(
        &self,
        call_probes: &[Probe],
        latency: bool,
        stacks_period: Option<u64>,
    ) -> ProbeCost {
        use whyslow_symbols::placement::Execution;
        // Measured at the start of the run where that worked, with the counting program's time per hit
        // in the run so far; else the assumed costs.
        let cost_in = |cp: &CallProbe, p: Option<&Probe>| {
            let execution = p.map_or(Execution::SingleStepped, |p| p.site.execution);
            match &self.hit_cost {
                Some(h) => h.ns(execution, cp.program_ns()).round() as u64,
                None if execution == Execution::Emulated => crate::HIT_COST_EMULATED_NS,
                None => crate::HIT_COST_STEPPED_NS,
            }
        };
        let mut total = ProbeCost::default();
        if let Some(p) = &self.syscalls {
            let stack = stacks_period.map_or(0, |n| crate::STACK_SAMPLE_COST_NS / crate::sampling_period(n));
            let prices = self.syscall_prices();
            let seen = p.seen();
            total = ProbeCost {
                hits: seen.counted,
                others: seen.others,
                ns: SyscallPrices { counted: prices.counted + stack, ..prices }.cost(seen),
            };
        }
        let mut add = |n: u64, per: u64| {
            total.hits += n;
            total.ns += n.saturating_mul(per);
        };
        if let Some(cp) = &self.calls {
            // A timed call takes the return probe's trap too.
            let factor = if latency { 2 } else { 1 };
            cp.counts()
                .iter()
                .for_each(|c| add(c.calls, factor * cost_in(cp, call_probes.get(c.probe as usize))));
        }
        if let Some(sites) = &self.alloc_sites {
            sites
                .site_counts()
                .iter()
                .for_each(|s| add(s.calls, cost_in(sites, self.alloc_probes.get(s.probe as usize))));
        }
        if let Some(m) = &self.mem {
            let [entry, ret] = self.mem_prices(m);
            let hits = m.hits();
            add(hits.allocs + hits.frees, entry);
            add(hits.returns, ret);
        }
        total
    }

    /// What a hit of the memory probes costs, in ns: (at an entry, at a return). The trap as measured at
    /// the start of the run (the entry's by how the kernel runs the probed instructions, mostly emulated;
    /// a return's trap as an emulated one), with the programs' own time per run in the run so far (the
    /// stack copies of sampled allocations in it); else the assumed costs.
    pub(crate) fn mem_prices(&self, m: &MemProbe<'_>) -> [u64; 2] {
        use whyslow_symbols::placement::Execution;
        let stepped =
            self.mem_probes.probes.iter().filter(|(p, _)| p.site.execution == Execution::SingleStepped);
        let share = stepped.count() as f64 / self.mem_probes.probes.len().max(1) as f64;
        let [entry_ns, return_ns] = m.program_ns();
        let price = |e: Execution, program: Option<f64>| match &self.mem_hit_cost {
            Some(h) => h.ns(e, program),
            None if e == Execution::Emulated => crate::HIT_COST_EMULATED_NS as f64,
            None => crate::HIT_COST_STEPPED_NS as f64,
        };
        let entry = (1.0 - share) * price(Execution::Emulated, entry_ns)
            + share * price(Execution::SingleStepped, entry_ns);
        [entry.round() as u64, price(Execution::Emulated, return_ns).round() as u64]
    }

    /// Stops the probes that cost per call (syscall and call counters, allocation probes and the stacks
    /// they sample); their counts so far stay readable. Sampling by clock and off-CPU goes on.
    ///
    /// Removing a uprobe waits for a grace period (45-90 ms here), and the kernel removes one after the
    /// other: each probe is one perf event no more (the calls' and allocations' stacks come from the
    /// eBPF program that counts them; with a uprobe event per allocation function, a Go server's
    /// allocators trapped for half a second after the budget stop). The counters' links are closed on
    /// threads of their own, at once. The syscalls' stacks are sampled no more, also in the slices of
    /// their counters that may follow.
    pub(crate) fn stop_per_call(&mut self) {
        if let Some(p) = self.syscalls.as_mut() {
            p.stop_stacks();
            p.detach();
        }
        let links = self.calls.iter_mut().chain(self.alloc_sites.as_mut()).flat_map(CallProbe::detach);
        let mut closing: Vec<Box<dyn Send>> = links.map(|l| Box::new(l) as Box<dyn Send>).collect();
        // The memory probes' entries go first (in detach), then their returns with the rest.
        closing.extend(
            self.mem.as_mut().into_iter().flat_map(MemProbe::detach).map(|l| Box::new(l) as Box<dyn Send>),
        );
        std::thread::scope(|s| {
            for item in closing {
                s.spawn(move || drop(item));
            }
        });
    }

    /// Hands everything that arrived to the converter, in time order. The perf rings' samples are
    /// unwound where the kernel wrote them; their space is freed after.
    pub(crate) fn drain<H: Host>(&mut self, c: &mut Converter<H>) {
        let mut batch = Vec::new();
        if let Some(p) = self.offcpu.as_mut() {
            p.drain(&mut batch);
        }
        if let Some(p) = self.syscalls.as_mut() {
            p.drain(&mut batch);
        }
        for p in self.calls.iter_mut().chain(self.alloc_sites.as_mut()) {
            p.drain(&mut batch);
        }
        let mut in_ring: Vec<InRing<'_>> = std::mem::take(&mut self.spare.in_ring);
        let mut malformed = 0;
        let ev = &mut self.ev;
        let ends = Events::read(&ev.rings, ev.side_band.as_mut(), &mut malformed, &mut batch, &mut in_ring);
        for _ in 0..malformed {
            c.count_malformed();
        }
        if self.host {
            // The idle task's samples (pid 0) and the recorder's own are nobody's profile.
            let me = std::process::id();
            let other = |s: &Sample| s.pid != 0 && s.pid != me;
            batch.retain(|t| !matches!(&t.record, Record::Sample(s) if !other(s)));
            in_ring.retain(|r| other(&r.sample));
        }
        if let Some(f) = &self.clock_filter {
            // The per-CPU clock is the first event configured.
            f.join_goroutines(&mut batch, &mut in_ring, |id| ev.ids.get(&id) == Some(&0));
        }
        batch.sort_by_key(|t| t.time);
        // The samples in time order by their indices (each ring's are in order already; moving the
        // samples themselves about took a merge buffer as large).
        let order = &mut self.spare.order;
        order.clear();
        order.extend(in_ring.iter().enumerate().map(|(i, r)| (r.time, i)));
        order.sort_unstable();
        let mut order = order.iter().copied().peekable();
        for t in batch {
            while let Some((_, i)) = order.next_if(|&(time, _)| time <= t.time) {
                in_ring[i].handle(c, &ev.ids);
            }
            c.handle(t, &ev.ids);
        }
        order.for_each(|(_, i)| in_ring[i].handle(c, &ev.ids));
        self.spare.in_ring = recycle(in_ring);
        ev.release(ends);
    }

    /// Follows process `pid` from now on as well: opens the events on its threads and has the eBPF
    /// probes count it (a process that a running service found).
    pub(crate) fn follow(
        &mut self,
        pid: u32,
        opts: &RecordOptions,
        notes: &mut Vec<String>,
    ) -> Result<(), RecordError> {
        if self.host {
            // Every process is sampled already.
            return Ok(());
        }
        if !self.ev.cfgs.is_empty() {
            self.ev.follow(pid);
            open_all(&mut self.ev, &[pid], false, notes)?;
        }
        if let Some(p) = self.syscalls.as_mut() {
            p.track(pid, false)?;
        }
        if let (Some(cp), Some(co)) = (self.calls.as_mut(), &opts.calls) {
            cp.track(pid, false)?;
            if !co.follow_children {
                notes.extend(cp.attach(&co.probes, 0..co.probes.len(), pid as i32)?);
            }
        }
        notes.extend(self.follow_allocations(pid)?);
        if let Some(m) = self.mem.as_mut().filter(|m| !m.stopped()) {
            m.track(pid)?;
            notes.extend(m.attach(&self.mem_probes.probes, pid)?);
        }
        if let Some(w) = &self.exits {
            w.track(pid, false)?;
        }
        let go = target::runs_go(&opts.target, pid);
        if let Some(p) = &self.offcpu {
            p.track(pid, false, go)?;
        }
        if let Some(f) = &self.clock_filter {
            f.track(pid, false, go)?;
        }
        Ok(())
    }

    /// Reads the Python frames of process `pid`'s clock samples and blocks from now on (see
    /// [`ClockFilter::track_python`]); nothing for the clock where it is not filtered in the kernel.
    pub(crate) fn track_python(
        &self,
        pid: u32,
        runtime: u64,
        layout: &whyslow_python::Layout,
    ) -> Result<(), RecordError> {
        if let Some(p) = &self.offcpu {
            p.track_python(pid, runtime, layout)?;
        }
        match &self.clock_filter {
            Some(f) => f.track_python(pid, runtime, layout),
            None => Ok(()),
        }
    }

    /// Counts the allocations of process `pid` too (with --alloc): a followed process, or a child forked
    /// from one (a uprobe for one process does not follow its forks). Returns what attaching had to say.
    pub(crate) fn follow_allocations(&mut self, pid: u32) -> Result<Vec<String>, RecordError> {
        let Some(p) = self.alloc_sites.as_mut() else { return Ok(Vec::new()) };
        p.track(pid, false)?;
        p.attach(&self.alloc_probes, 0..self.alloc_probes.len(), pid as i32)
    }

    /// Drops the allocation probes of the processes that ended.
    pub(crate) fn release_ended(&mut self) {
        if let Some(p) = self.alloc_sites.as_mut() {
            p.release_ended(crate::target::alive);
        }
    }

    /// Lets process `pid` go: closes its events, and drops its clock samples, its blocks and its exit
    /// status.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.ev.forget(pid);
        if let Some(f) = &self.clock_filter {
            f.untrack(pid);
        }
        if let Some(p) = &self.offcpu {
            p.untrack(pid);
        }
        if let Some(w) = &self.exits {
            w.untrack(pid);
        }
        if let Some(m) = self.mem.as_mut() {
            m.release(pid);
        }
    }
}

/// Opens events on every thread of every target process. Threads created while we open are caught by
/// re-listing until the set is stable (each new thread of an already-opened one inherits its events).
fn open_all(
    ev: &mut Events,
    pids: &[u32],
    launched: bool,
    notes: &mut Vec<String>,
) -> Result<(), RecordError> {
    let mut done: std::collections::HashSet<u32> = std::collections::HashSet::new();
    for round in 0..10 {
        let mut new = false;
        for &pid in pids {
            let tids = if launched { vec![pid] } else { target::threads_of(pid) };
            for tid in tids {
                if !done.insert(tid) {
                    continue;
                }
                new = true;
                let r = if ev.rings.is_empty() {
                    open_first(ev, pid, tid, notes)
                } else {
                    ev.open_task(pid, tid).map_err(|e| classify(e, tid))
                };
                match r {
                    Ok(()) => {}
                    // A thread that exited between listing and opening is fine; a whole process is not.
                    Err(RecordError::NoSuchProcess(_)) if tid != pid => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if !new || launched || round == 9 {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::recycle;
    use crate::records::{InRing, Sample};

    /// The list of samples read in place is handed back emptied in the memory it had: the next drain
    /// allocates none.
    #[test]
    fn a_recycled_list_keeps_its_memory() {
        let ring = [7u8; 64];
        let sample = Sample {
            pid: 1,
            tid: 1,
            id: 0,
            period: 1,
            kernel: Vec::new(),
            user: Vec::new(),
            regs: None,
            stack: Vec::new(),
            goroutine: None,
            python: Vec::new(),
            raw: Vec::new(),
        };
        let mut list = Vec::with_capacity(100);
        list.push(InRing { time: 1, sample, stack: &ring[8..] });
        let at = list.as_ptr() as usize;
        let spare = recycle(list);
        assert_eq!((spare.len(), spare.capacity(), spare.as_ptr() as usize), (0, 100, at));
    }
}
