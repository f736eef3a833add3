//! One recording run: open the events, follow the target's threads, processes and mappings through the
//! ring-buffer side-band records, unwind and normalize every sample as it arrives, stop on duration,
//! signal or target exit, and always detach.

use crate::bpf::{syscall_numbers, CallCount, CallProbe, ExitWatch, SyscallProbe};
use crate::calls::{PatternSpec, Probe};
use crate::records;
use crate::sys::{self, Clock, EventConfig, Ring, Source};
use crate::target::{self, Gated, Target};
use crate::{signals, RecordError, RecordOptions};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use whyslow_convert::records::Timed;
use whyslow_convert::{Converter, Host, ProcessInfo, SizeArg, Stream};
use whyslow_model::raw::RawRecording;
use whyslow_model::syscalls::TraceEvent;
use whyslow_model::{CallStat, Killed, Metadata, SampleType, SyscallStat};
use whyslow_symbols::placement::{Args, Needs, StackNeed};

/// Live counters for a status line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    pub elapsed: Duration,
    pub samples: u64,
    pub lost: u64,
}

/// How bpf/calls.bpf.c's `size_arg` map names where the size is.
fn bpf_size_code(size: SizeArg) -> u32 {
    match size {
        SizeArg::Arg(n) => n.min(2) as u32,
        SizeArg::Product => 3,
        SizeArg::GoFirst => 4,
    }
}

/// What a probe reading this size argument and the return address needs kept intact at its site.
fn size_needs(size: SizeArg) -> Needs {
    let args = match size {
        SizeArg::Arg(0) => Args::RDI,
        SizeArg::Arg(1) => Args::RSI,
        SizeArg::Arg(_) => Args::RDX,
        SizeArg::Product => Args::RDI.with(Args::RSI),
        SizeArg::GoFirst => Args::RAX,
    };
    Needs { stack: StackNeed::Known, args, ..Needs::default() }
}

/// The allocation functions of the target, each with where its size argument is.
fn alloc_probes(t: &Target, notes: &mut Vec<String>) -> Result<Vec<(Probe, SizeArg)>, RecordError> {
    // C++ operator new (every variant) allocates through malloc, so its allocations are counted once, at
    // malloc, with operator new as the caller in the stack.
    let table: [(&str, SizeArg); 7] = [
        ("malloc", SizeArg::Arg(0)),
        ("calloc", SizeArg::Product),
        ("realloc", SizeArg::Arg(1)),
        ("posix_memalign", SizeArg::Arg(2)),
        ("aligned_alloc", SizeArg::Arg(1)),
        ("memalign", SizeArg::Arg(1)),
        ("runtime.mallocgc", SizeArg::GoFirst),
    ];
    let patterns: Vec<PatternSpec> = table
        .iter()
        .map(|(p, _)| PatternSpec { group: p.to_string(), pattern: p.to_string(), required: false })
        .collect();
    let size_of = |group: &str| table.iter().find(|(pat, _)| *pat == group).map(|(_, s)| *s);
    let modules = crate::calls::target_modules(t)?;
    let res = crate::calls::resolve(&modules, &patterns, |spec| {
        size_of(&spec.group).map_or_else(Needs::default, size_needs)
    })?;
    notes.extend(res.notes);
    // The loader's own minimal malloc is not the program's allocator.
    let probes: Vec<(Probe, SizeArg)> = res
        .probes
        .into_iter()
        .filter(|p| !p.module.to_string_lossy().contains("/ld-linux"))
        .filter_map(|p| {
            let size = size_of(&p.group)?;
            Some((p, size))
        })
        .collect();
    if probes.is_empty() {
        return Err(RecordError::Invalid("--alloc: the target has no allocation function to probe".into()));
    }
    Ok(probes)
}

/// User stack bytes copied per event of streams that fire on every call (syscalls, calls, allocations).
const EVENT_STACK_BYTES: u32 = 16 * 1024;
/// Ring data pages per CPU for such streams (16 MB with 4 KB pages).
const EVENT_RING_PAGES: usize = 4096;

/// The (name, module) a probed function's stacks end in.
fn label_of(p: &Probe) -> (String, String) {
    (p.name.clone(), p.module.to_string_lossy().into_owned())
}

/// The live host of the converter: files as the target sees them (containers, chroots), the vDSO from
/// our own memory, processes from /proc.
struct LiveHost;

impl Host for LiveHost {
    fn file(&self, pid: u32, path: &str) -> Option<Vec<u8>> {
        if path == "[vdso]" {
            return vdso_bytes();
        }
        std::fs::read(format!("/proc/{pid}/root{path}")).or_else(|_| std::fs::read(path)).ok()
    }

    fn process(&self, pid: u32) -> Option<ProcessInfo> {
        let maps = target::exec_maps(pid).into_iter().map(|m| (m.start, m.end, m.pgoff, m.path)).collect();
        let threads =
            target::threads_of(pid).into_iter().filter_map(|t| Some((t, target::comm_of(pid, t)?))).collect();
        Some(ProcessInfo { maps, threads })
    }

    fn thread_name(&self, pid: u32, tid: u32) -> Option<String> {
        target::comm_of(pid, tid)
    }
}

fn vdso_bytes() -> Option<Vec<u8>> {
    // The vDSO image is the same in every process of this kernel; read our own.
    let m = target::exec_maps(std::process::id()).into_iter().find(|m| m.path == "[vdso]")?;
    let f = std::fs::File::open("/proc/self/mem").ok()?;
    let mut buf = vec![0u8; (m.end - m.start) as usize];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, m.start).ok()?;
    Some(buf)
}

/// The open events: one ring per CPU, plus the extra fds redirected into it.
struct Events {
    rings: Vec<Ring>,
    extra: Vec<OwnedFd>,
    cfgs: Vec<EventConfig>,
    cpus: Vec<i32>,
    /// Event id (as samples carry it) -> index into `cfgs`.
    ids: HashMap<u64, usize>,
    /// Data pages of each ring.
    pages: usize,
}

impl Events {
    /// Opens every event on every CPU for task `tid` (inherited by its future threads and children).
    fn open_task(&mut self, tid: u32) -> Result<(), std::io::Error> {
        let pages = self.pages;
        for (k, cfg) in self.cfgs.iter().enumerate() {
            for (i, &cpu) in self.cpus.iter().enumerate() {
                let fd = sys::open_event(cfg, tid as i32, cpu)?;
                self.ids.insert(sys::event_id(&fd)?, k);
                if let Some(ring) = self.rings.get(i) {
                    sys::redirect_output(&fd, ring.fd())?;
                    self.extra.push(fd);
                } else {
                    self.rings.push(Ring::map(fd, pages)?);
                }
            }
        }
        Ok(())
    }

    fn set_enabled(&self, on: bool) {
        for fd in self.rings.iter().map(Ring::fd).chain(self.extra.iter()) {
            if on {
                let _ = sys::enable(fd);
            } else {
                sys::disable(fd);
            }
        }
    }

    fn drain(&mut self, c: &mut Converter<LiveHost>, buf: &mut Vec<u8>) {
        let mut batch: Vec<Timed> = Vec::new();
        for ring in &mut self.rings {
            ring.drain(buf, |rec| match records::decode(rec) {
                Some(t) => batch.push(t),
                None => c.count_malformed(),
            });
        }
        c.handle_batch(batch, &self.ids);
    }

    fn clock(&self) -> Option<Clock> {
        self.cfgs.iter().find_map(|c| match c.source {
            Source::Clock(clock) => Some(clock),
            Source::Tracepoint { .. } => None,
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

fn raise_fd_limit() {
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
fn open_first(ev: &mut Events, tid: u32, notes: &mut Vec<String>) -> Result<(), RecordError> {
    loop {
        match ev.open_task(tid) {
            Ok(()) => return Ok(()),
            Err(e) => {
                ev.rings.clear();
                ev.extra.clear();
                ev.ids.clear();
                let code = e.raw_os_error();
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
                    _ if kernel && matches!(code, Some(libc::EACCES) | Some(libc::EPERM)) => {
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

/// Receives what a run learns while it runs. Every method has a default that ignores it.
pub trait Observer {
    /// Once every source is attached, before a launched command starts.
    fn started(&mut self, _pids: &[u32]) {}
    /// About four times a second.
    fn progress(&mut self, _p: &Progress) {}
    /// Each traced syscall, in the order they were drained.
    fn trace(&mut self, _e: &TraceEvent) {}
    /// Every [`RecordOptions::interval`]: the syscall counters so far.
    fn snapshot(&mut self, _elapsed: Duration, _stats: &[SyscallStat]) {}
}

/// The process ids to follow, how to name them, and the gated child when launching.
type Resolved = (Vec<u32>, Vec<String>, Option<Gated>);

fn resolve_target(target: &Target) -> Result<Resolved, RecordError> {
    Ok(match target {
        Target::Launch(argv) => {
            let g = Gated::spawn(argv)?;
            (vec![g.pid], argv.clone(), Some(g))
        }
        Target::Pids(pids) => {
            if let Some(&p) = pids.iter().find(|&&p| !target::alive(p)) {
                return Err(RecordError::NoSuchProcess(p));
            }
            let list = pids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            (pids.clone(), vec!["-p".into(), list], None)
        }
        Target::Comm(name) => (target::pids_named(name)?, vec!["--comm".into(), name.clone()], None),
    })
}

/// Records until the duration passes, a stop signal arrives, or the target exits.
pub fn record(opts: &RecordOptions, observer: &mut impl Observer) -> Result<RawRecording, RecordError> {
    if opts.stack_bytes == 0 || opts.stack_bytes > 65528 || !opts.stack_bytes.is_multiple_of(8) {
        return Err(RecordError::Invalid(format!(
            "--stack-size must be a multiple of 8 from 8 to 65528 bytes, not {}",
            opts.stack_bytes
        )));
    }
    if !opts.ring_pages.is_power_of_two() {
        return Err(RecordError::Invalid("ring pages must be a power of two".into()));
    }
    let max_rate =
        read_trim("/proc/sys/kernel/perf_event_max_sample_rate").parse::<u64>().unwrap_or(u64::MAX);
    if opts.cpu && (opts.frequency == 0 || opts.frequency > max_rate) {
        return Err(RecordError::Invalid(format!(
            "-F {} Hz: this kernel samples at 1 to {max_rate} Hz (kernel.perf_event_max_sample_rate; raise \
             it with `sysctl kernel.perf_event_max_sample_rate=N`)",
            opts.frequency
        )));
    }
    if !opts.cpu
        && opts.syscalls.is_none()
        && opts.calls.is_none()
        && opts.alloc.is_none()
        && opts.offcpu.is_none()
    {
        return Err(RecordError::Invalid("nothing to record".into()));
    }
    let trace = match &opts.syscalls {
        Some(s) => syscall_numbers(&s.trace)?,
        None => Vec::new(),
    };
    raise_fd_limit();
    let mut notes = Vec::new();
    let (pids, command, mut gate) = resolve_target(&opts.target)?;
    let alloc = match &opts.alloc {
        Some(_) => alloc_probes(&opts.target, &mut notes)?,
        None => Vec::new(),
    };
    let mut objects = BpfObjects::new(opts, &alloc)?;
    let started = start_sources(opts, &trace, &alloc, &pids, gate.is_some(), &mut objects, &mut notes);
    let Started { mut ev, syscalls: mut probe, mut calls, alloc_sites, exits, streams, sample_types } =
        match started {
            Ok(s) => s,
            Err(e) => {
                if let Some(g) = gate.take() {
                    g.abort();
                }
                return Err(e);
            }
        };
    let alloc_names: Vec<(String, String)> = alloc.iter().map(|(p, _)| label_of(p)).collect();
    let probe_names = opts.calls.iter().flat_map(|c| &c.probes).map(label_of).collect();
    let mut c = Converter::new(LiveHost, sample_types, streams).with_labels(probe_names, alloc_names);
    if alloc_sites.is_some() {
        // Call sites are read from the kernel after the run, also of processes that exited by then.
        c = c.retaining_exited();
    }
    if gate.is_none() {
        for &p in &pids {
            c.add_process(p);
        }
    } else if c.streams().iter().any(|s| !matches!(s, Stream::Cpu { .. })) {
        // Event streams start with a burst (the loader, static constructors): have the unwind tables of
        // the command's files ready before it runs, so the first samples drain fast.
        for m in crate::calls::target_modules(&opts.target).unwrap_or_default() {
            c.preload(pids[0], &m.to_string_lossy());
        }
    }
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    observer.started(&pids);
    let t0 = Instant::now();
    if let Some(g) = gate.as_mut() {
        g.release(&command[0])?;
    }
    let mut buf = Vec::new();
    let mut exit_code = None;
    let mut killed = Vec::new();
    let mut last_progress = Instant::now();
    let mut last_alive_check = Instant::now();
    let mut last_snapshot = Instant::now();
    let mut last_maps_check = Instant::now();
    // Every probe counted, in counter order: the resolved ones, then those of libraries loaded later.
    let mut probes: Vec<Probe> = opts.calls.iter().flat_map(|c| c.probes.clone()).collect();
    let mut late_seen: Vec<(u32, String)> = Vec::new();
    let poll_fd = probe.as_ref().and_then(|p| p.poll_fd());
    loop {
        sys::poll(&ev.rings, poll_fd, 100);
        ev.drain(&mut c, &mut buf);
        if let Some(p) = &probe {
            p.drain_events().iter().for_each(|e| observer.trace(e));
        }
        if last_progress.elapsed() >= Duration::from_millis(250) {
            let n = c.counters();
            observer.progress(&Progress { elapsed: t0.elapsed(), samples: n.samples, lost: n.lost });
            last_progress = Instant::now();
        }
        if let (Some(every), Some(p)) = (opts.interval, &probe) {
            if last_snapshot.elapsed() >= every {
                observer.snapshot(t0.elapsed(), &p.stats());
                last_snapshot = Instant::now();
            }
        }
        if let (Some(co), Some(cp)) = (&opts.calls, calls.as_mut()) {
            if last_maps_check.elapsed() >= Duration::from_millis(100) {
                last_maps_check = Instant::now();
                for (pid, path) in late_modules(&pids, co, &mut late_seen) {
                    notes.extend(probe_late_module(cp, co, &mut probes, pid, &path));
                }
            }
        }
        if signals::stop_requested()
            || opts.duration.is_some_and(|d| t0.elapsed() >= d)
            || opts.stop.as_ref().is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst))
        {
            break;
        }
        if let Some(g) = &gate {
            if let Some(status) = try_wait(g.pid) {
                exit_code = Some(exit_code_of(status));
                killed.extend(Killed::from_wait_status(g.pid, status));
                break;
            }
        } else if last_alive_check.elapsed() >= Duration::from_millis(500) {
            last_alive_check = Instant::now();
            if !pids.iter().any(|&p| target::alive(p)) {
                break;
            }
        }
    }
    let duration = t0.elapsed();
    if gate.is_none() {
        // Attached targets that a signal ended during the run (whyslow is not their parent to wait).
        let ended = exits.iter().flat_map(|w| pids.iter().filter_map(|&p| Some((p, w.status(p)?))));
        killed.extend(ended.filter_map(|(p, status)| Killed::from_wait_status(p, status)));
    }
    drop(exits);
    ev.set_enabled(false);
    ev.drain(&mut c, &mut buf);
    c.finish_blocked(sys::monotonic_ns());
    let mut lost_events = 0;
    if let Some(sites) = alloc_sites {
        c.add_alloc_sites(&sites.site_counts());
        lost_events += sites.lost();
    }
    let streams = c.streams().to_vec();
    let (mut raw, counters) = c.finish();
    add_wall(&mut raw);
    if let Some(p) = probe.take() {
        p.drain_events().iter().for_each(|e| observer.trace(e));
        raw.syscalls = p.stats();
        lost_events += p.lost();
        // Dropping the probe detaches its programs.
    }
    if let Some(cp) = calls {
        let mut counts = cp.counts();
        // A probed function nobody called is an answer too: zero calls in the first target process.
        for i in 0..probes.len() as u32 {
            if !counts.iter().any(|n| n.probe == i) {
                counts.push(CallCount {
                    pid: pids.first().copied().unwrap_or(0),
                    probe: i,
                    ..Default::default()
                });
            }
        }
        raw.calls = counts
            .into_iter()
            .filter_map(|n| {
                let p = probes.get(n.probe as usize)?;
                Some(CallStat {
                    pid: n.pid,
                    name: p.name.clone(),
                    module: p.module.to_string_lossy().into_owned(),
                    aliases: p.aliases.clone(),
                    implementation: p.implementation.clone(),
                    group: p.group.clone(),
                    calls: n.calls,
                    timed: n.timed,
                    total_ns: n.total_ns,
                    max_ns: n.max_ns,
                })
            })
            .collect();
        lost_events += cp.lost();
    }
    // What produced the samples and counters, e.g. "cpu-clock + uprobes".
    let mut sources: Vec<&str> = ev.clock().map(Clock::name).into_iter().collect();
    if streams.iter().any(|s| matches!(s, Stream::Syscalls { .. })) {
        sources.push("raw_syscalls:sys_enter");
    }
    if streams.iter().any(|s| matches!(s, Stream::OffCpu { .. })) {
        sources.push("sched:sched_switch");
    }
    if streams.iter().any(|s| matches!(s, Stream::Call { .. } | Stream::Alloc { .. })) {
        sources.push("uprobes");
    }
    if opts.syscalls.is_some() {
        sources.push("syscall counters (eBPF)");
    }
    if opts.calls.is_some() {
        sources.push("call counters (eBPF)");
    }
    let event = sources.join(" + ");
    drop(ev);
    if let Some(g) = gate.as_ref().filter(|_| !opts.leave_running) {
        if exit_code.is_none() {
            exit_code = Some(stop_launched(g.pid));
        }
    }
    observer.progress(&Progress { elapsed: duration, samples: counters.samples, lost: counters.lost });
    if counters.malformed > 0 {
        notes.push(format!("{} malformed records skipped", counters.malformed));
    }
    raw.meta = Metadata {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command,
        target_pids: pids,
        event,
        frequency_hz: if opts.cpu { opts.frequency } else { 0 },
        start_unix_ns,
        duration_ns: duration.as_nanos() as u64,
        lost_samples: counters.lost,
        lost_events,
        unwind: counters.unwind,
        exit_code,
        killed,
        hostname: read_trim("/proc/sys/kernel/hostname"),
        kernel_release: read_trim("/proc/sys/kernel/osrelease"),
        notes,
        calls_duration_ns: 0,
    };
    Ok(raw)
}

/// With on-CPU time in ns and off-CPU time, adds `wall`: their sum per sample, so running and blocked
/// time read in one unit and add up to the threads' wall time.
fn add_wall(raw: &mut RawRecording) {
    let pos = |n: &str| raw.sample_types.iter().position(|t| t.name == n);
    let (Some(cpu), Some(off)) = (pos("cpu-ns"), pos("offcpu")) else { return };
    raw.sample_types.push(SampleType { name: "wall".into(), unit: "nanoseconds".into() });
    for v in raw.samples.values_mut() {
        let wall = v[cpu] + v[off];
        v.push(wall);
    }
}

/// What the sources borrow for the length of a run: the eBPF skeletons' objects, and the tracefs
/// uprobes whose events sample stacks (removed when this is dropped, after the events are closed).
struct BpfObjects {
    syscalls: std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    calls: std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    alloc: std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    exits: std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    uprobes: Vec<sys::TraceUprobe>,
}

impl BpfObjects {
    /// `uprobes` holds the calls' probes (with --callers), then the allocation probes, in order.
    fn new(opts: &RecordOptions, alloc: &[(Probe, SizeArg)]) -> Result<Self, RecordError> {
        let callers = opts.calls.iter().filter(|c| c.callers_period.is_some()).flat_map(|c| &c.probes);
        let probes: Vec<&Probe> = callers.chain(alloc.iter().map(|a| &a.0)).collect();
        let mut uprobes = Vec::new();
        if !probes.is_empty() {
            static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            sys::TraceUprobe::remove_stale("whyslow_", target::alive);
            let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let group = format!("whyslow_{}_{run}", std::process::id());
            for (i, p) in probes.iter().enumerate() {
                let path = p.module.to_string_lossy();
                let u =
                    sys::TraceUprobe::create(&group, &format!("p{i}"), &path, p.offset).map_err(
                        |e| match e.raw_os_error() {
                            Some(libc::EACCES) | Some(libc::EPERM) => RecordError::Permission(e),
                            _ => RecordError::Io(format!("tracefs uprobe on {}+{:#x}", path, p.offset), e),
                        },
                    )?;
                uprobes.push(u);
            }
        }
        Ok(BpfObjects {
            syscalls: std::mem::MaybeUninit::uninit(),
            calls: std::mem::MaybeUninit::uninit(),
            alloc: std::mem::MaybeUninit::uninit(),
            exits: std::mem::MaybeUninit::uninit(),
            uprobes,
        })
    }
}

/// The sources of a run, attached and ready.
struct Started<'obj> {
    ev: Events,
    syscalls: Option<SyscallProbe<'obj>>,
    calls: Option<CallProbe<'obj>>,
    /// Exact allocation counts and bytes per call site, counted in the kernel.
    alloc_sites: Option<CallProbe<'obj>>,
    /// How attached targets end (None where eBPF is unavailable: then only their exit is seen).
    exits: Option<ExitWatch<'obj>>,
    streams: Vec<Stream>,
    sample_types: Vec<SampleType>,
}

/// Opens the perf events and loads and attaches the eBPF programs, all before a gated child may run.
fn start_sources<'obj>(
    opts: &RecordOptions,
    trace: &[u32],
    alloc: &[(Probe, SizeArg)],
    pids: &[u32],
    launched: bool,
    objects: &'obj mut BpfObjects,
    notes: &mut Vec<String>,
) -> Result<Started<'obj>, RecordError> {
    let base = EventConfig {
        source: Source::Clock(opts.clock),
        frequency: opts.frequency,
        stack_bytes: opts.stack_bytes,
        kernel: opts.kernel,
        enable_on_exec: launched,
        context_switch: false,
    };
    // Events that fire on every call come in bursts: a smaller stack copy each, and a larger ring.
    let event_base = EventConfig { stack_bytes: opts.stack_bytes.min(EVENT_STACK_BYTES), ..base };
    let mut cfgs = Vec::new();
    let mut streams = Vec::new();
    let mut sample_types = Vec::new();
    if opts.cpu {
        cfgs.push(base);
        streams.push(Stream::Cpu { slot: 0 });
        sample_types.push(SampleType { name: "cpu".into(), unit: "samples".into() });
        sample_types.push(SampleType { name: "cpu-ns".into(), unit: "nanoseconds".into() });
    }
    if let Some(period) = opts.syscalls.as_ref().and_then(|s| s.stacks_period) {
        let id = sys::tracepoint_id("raw_syscalls", "sys_enter").map_err(|e| match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => RecordError::Permission(e),
            _ => RecordError::Io("tracefs (raw_syscalls/sys_enter)".into(), e),
        })?;
        let source = Source::Tracepoint { id, period, kernel_stack: false };
        cfgs.push(EventConfig { source, ..event_base });
        streams.push(Stream::Syscalls { slot: sample_types.len() });
        sample_types.push(SampleType { name: "syscalls".into(), unit: "calls".into() });
    }
    if let Some((co, period)) = opts.calls.as_ref().and_then(|c| Some((c, c.callers_period?))) {
        let slot = sample_types.len();
        sample_types.push(SampleType { name: "calls".into(), unit: "calls".into() });
        for i in 0..co.probes.len() {
            let source = Source::Tracepoint { id: objects.uprobes[i].id, period, kernel_stack: false };
            cfgs.push(EventConfig { source, ..event_base });
            streams.push(Stream::Call { slot, probe: i });
        }
    }
    if let Some(oo) = &opts.offcpu {
        let tracefs = |e: std::io::Error| match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => RecordError::Permission(e),
            _ => RecordError::Io("tracefs (sched/sched_switch)".into(), e),
        };
        let id = sys::tracepoint_id("sched", "sched_switch").map_err(tracefs)?;
        let state_offset =
            sys::tracepoint_field_offset("sched", "sched_switch", "prev_state").map_err(tracefs)?;
        let source = Source::Tracepoint { id, period: 1, kernel_stack: true };
        cfgs.push(EventConfig { source, context_switch: true, ..event_base });
        let min_block_ns = oo.min_block.as_nanos() as u64;
        streams.push(Stream::OffCpu { slot: sample_types.len(), state_offset, min_block_ns });
        sample_types.push(SampleType { name: "offcpu".into(), unit: "nanoseconds".into() });
    }
    if let Some(ao) = &opts.alloc {
        let slot = sample_types.len();
        sample_types.push(SampleType { name: "alloc-count".into(), unit: "count".into() });
        sample_types.push(SampleType { name: "alloc-bytes".into(), unit: "bytes".into() });
        let first = objects.uprobes.len() - alloc.len();
        for (i, (_, size)) in alloc.iter().enumerate() {
            let id = objects.uprobes[first + i].id;
            let source = Source::Tracepoint { id, period: ao.period, kernel_stack: false };
            cfgs.push(EventConfig { source, ..event_base });
            streams.push(Stream::Alloc { slot, probe: i, size: *size, period: ao.period });
        }
    }
    let mut probe = match &opts.syscalls {
        Some(_) => Some(SyscallProbe::load(&mut objects.syscalls, trace)?),
        None => None,
    };
    let mut alloc_sites = match &opts.alloc {
        Some(_) => {
            let codes: Vec<(u32, u32)> =
                alloc.iter().map(|(p, s)| (bpf_size_code(*s), p.site.stack_delta)).collect();
            let mut p = CallProbe::load(&mut objects.alloc, false, false, Some(&codes))?;
            let probes: Vec<Probe> = alloc.iter().map(|(p, _)| p.clone()).collect();
            for &pid in pids {
                p.track(pid, launched)?;
                notes.extend(p.attach(&probes, 0..probes.len(), pid as i32)?);
            }
            Some(p)
        }
        None => None,
    };
    let mut calls = match &opts.calls {
        Some(c) => Some(CallProbe::load(&mut objects.calls, c.latency, c.follow_children, None)?),
        None => None,
    };
    let bursty = cfgs.iter().any(|c| !matches!(c.source, Source::Clock(_)));
    let pages = if bursty { opts.ring_pages.max(EVENT_RING_PAGES) } else { opts.ring_pages };
    let mut ev = Events {
        rings: Vec::new(),
        extra: Vec::new(),
        cfgs,
        cpus: sys::online_cpus(),
        ids: HashMap::new(),
        pages,
    };
    if !ev.cfgs.is_empty() {
        open_all(&mut ev, pids, launched, notes)?;
    }
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
    if alloc_sites.is_some() {
        sample_types.push(SampleType { name: "alloc-site-count".into(), unit: "count".into() });
        sample_types.push(SampleType { name: "alloc-site-bytes".into(), unit: "bytes".into() });
    }
    let exits = ExitWatch::load(&mut objects.exits).ok();
    for (w, &pid) in exits.iter().flat_map(|w| pids.iter().map(move |p| (w, p))) {
        w.track(pid, launched)?;
    }
    Ok(Started { ev, syscalls: probe, calls, alloc_sites: alloc_sites.take(), exits, streams, sample_types })
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
                    open_first(ev, tid, notes)
                } else {
                    ev.open_task(tid).map_err(|e| classify(e, tid))
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

/// Executable files the target processes map now that the patterns were not resolved against (libraries
/// loaded with dlopen after the start), each once: per process, or once in all with --follow-children.
/// `seen` keeps every mapping already looked at, so each file is compared with the modules only once.
fn late_modules(pids: &[u32], co: &crate::CallOptions, seen: &mut Vec<(u32, String)>) -> Vec<(u32, String)> {
    let mut new = Vec::new();
    for &pid in pids {
        for m in target::exec_maps(pid).into_iter().filter(|m| m.path.starts_with('/')) {
            let key = (if co.follow_children { 0 } else { pid }, m.path.clone());
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let path = std::path::Path::new(&m.path);
            if !co.modules.iter().any(|x| whyslow_symbols::same_file(x, path)) {
                new.push((pid, m.path));
            }
        }
    }
    new
}

/// Resolves the patterns in a library that process `pid` loaded after the start and probes its matches
/// from now on (calls made before that are not counted). Returns the note that tells the user (none
/// when there are no patterns: the probes were chosen by module, as the doctor does).
fn probe_late_module(
    cp: &mut CallProbe<'_>,
    co: &crate::CallOptions,
    probes: &mut Vec<Probe>,
    pid: u32,
    path: &str,
) -> Option<String> {
    if co.patterns.is_empty() {
        return None;
    }
    let file = PathBuf::from(format!("/proc/{pid}/root{path}"));
    let specs: Vec<PatternSpec> =
        co.patterns.iter().map(|p| PatternSpec { required: false, ..p.clone() }).collect();
    let needs = co.needs();
    let found = crate::calls::resolve(&[file], &specs, |_| needs).map(|r| r.probes).unwrap_or_default();
    let loaded = format!("{path} was loaded after the start (dlopen)");
    if found.is_empty() {
        return Some(format!("{loaded}: none of its functions match the patterns"));
    }
    let ids = probes.len()..probes.len() + found.len();
    probes.extend(found);
    let filter = if co.follow_children { -1 } else { pid as i32 };
    let n = ids.len();
    Some(match cp.attach(probes, ids, filter) {
        Ok(skipped) => format!(
            "{loaded}: its {n} matching function{} counted from when it was seen, up to 0.1 s later \
             (--lib {path} counts from the first call){}{}",
            if n == 1 { "" } else { "s" },
            if co.callers_period.is_some() { "; their callers are not sampled" } else { "" },
            skipped.iter().map(|s| format!("; {s}")).collect::<String>()
        ),
        Err(e) => format!("{loaded}: its functions could not be probed: {e}"),
    })
}

/// The wait status of launched child `pid` if it ended.
fn try_wait(pid: u32) -> Option<i32> {
    let mut st = 0;
    // SAFETY: waitpid only writes the status integer we own.
    let r = unsafe { libc::waitpid(pid as i32, &mut st, libc::WNOHANG) };
    (r == pid as i32).then_some(st)
}

fn exit_code_of(st: i32) -> i32 {
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        128 + libc::WTERMSIG(st)
    }
}

/// Ends a launched command that outlived the recording (or was left running by
/// [`RecordOptions::leave_running`]): SIGTERM, then SIGKILL after a grace period. Returns its exit code.
pub fn stop_launched(pid: u32) -> i32 {
    // SAFETY: kill takes no pointers.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Some(status) = try_wait(pid) {
            return exit_code_of(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill takes no pointers.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let mut st = 0;
    // SAFETY: st is an int owned by this frame.
    unsafe { libc::waitpid(pid as i32, &mut st, 0) };
    exit_code_of(st)
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}
