//! One recording run: open the sources, follow the target's threads, processes and mappings through the
//! ring-buffer side-band records, unwind and normalize every sample as it arrives, stop on duration,
//! signal or target exit, and always detach. A [`Session`] is that run step by step: `record` drives it to
//! the end, a long-running service follows processes as they appear and cuts it into windows.

use crate::bpf::{syscall_numbers, CallCount, CallProbe};
use crate::budget::{cpu_since, ProbeLoad};
use crate::calls::{PatternSpec, Probe};
use crate::host::LiveHost;
use crate::mem::MemRun;
use crate::mem_attach::Ledger;
use crate::sources::{raise_fd_limit, Objects, Sources};
use crate::sys::{self, Clock};
use crate::syscall_sampler::SyscallSampler;
use crate::target::{self, exit_code_of, stop_launched, try_wait, Gated};
use crate::{signals, RecordError, RecordOptions};
use std::time::{Duration, Instant};
use whyslow_convert::{Converter, Stream};
use whyslow_model::raw::RawRecording;
use whyslow_model::syscalls::TraceEvent;
use whyslow_model::{sample_types, unix_now_ns, CallStat, Killed, Metadata, SampleType, SyscallStat};

/// Live counters for a status line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    pub elapsed: Duration,
    pub samples: u64,
    pub lost: u64,
    /// What the probes that cost per hit (call, allocation and syscall counters) cost so far; None
    /// when the run has none.
    pub probes: Option<ProbeLoad>,
}

/// The (name, module) a probed function's stacks end in.
fn label_of(p: &Probe) -> (String, String) {
    (p.name.clone(), p.module.to_string_lossy().into_owned())
}

/// Receives what a run learns while it runs. Every method has a default that ignores it.
pub trait Observer {
    /// Once every source is attached, before a launched command starts.
    fn started(&mut self, _pids: &[u32]) {}
    /// About four times a second.
    fn progress(&mut self, _p: &Progress) {}
    /// A multi-step caller (the doctor) starts a step: `name` says what it does, in words for a live
    /// line; [`Observer::progress`] of a run that follows counts from that run's start.
    fn phase(&mut self, _name: &str) {}
    /// Each traced syscall, in the order they were drained.
    fn trace(&mut self, _e: &TraceEvent) {}
    /// Every [`RecordOptions::interval`]: the syscall counters so far.
    fn snapshot(&mut self, _elapsed: Duration, _stats: &[SyscallStat]) {}
}

/// Why a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The duration passed, a stop signal arrived, or the stop flag was set.
    Stopped,
    /// The launched command exited, or no attached process is left.
    TargetEnded,
}

/// The phase (`-v`) of the readings of the target's surroundings, at the start and at the end.
const ENV_PHASE: &str = "read the target's surroundings";

/// A run in progress: its sources attached, the converter fed from them.
pub struct Session<'a> {
    opts: &'a RecordOptions,
    src: Sources<'a>,
    c: Converter<LiveHost>,
    pids: Vec<u32>,
    command: Vec<String>,
    gate: Option<Gated>,
    notes: Vec<String>,
    /// Every probe counted, in counter order: the resolved ones, then those of libraries loaded later.
    probes: Vec<Probe>,
    late_seen: Vec<(u32, String)>,
    t0: Instant,
    /// When the current window began (the run's start until the first cut).
    window_t0: Instant,
    start_unix_ns: u64,
    /// Samples lost before the current window.
    lost_before: u64,
    exit_code: Option<i32>,
    killed: Vec<Killed>,
    last_progress: Instant,
    last_alive_check: Instant,
    /// Whether the followed processes still run (checked every 500 ms).
    liveness: target::Liveness,
    last_snapshot: Instant,
    last_maps_check: Instant,
    last_budget_check: Instant,
    /// The processes whose allocations are probed: the targets, and the children seen forking from them.
    alloc_followed: std::collections::HashSet<u32>,
    last_release_check: Instant,
    /// When the probe budget stopped the per-call probes (since `t0`).
    per_call_stopped: Option<Duration>,
    /// What [`Session::step`] waits on.
    waiter: sys::Waiter,
    /// The syscall counters' slices once the budget stopped their first window (while sampling goes on).
    sampler: Option<SyscallSampler>,
    /// CPU time of the target processes at the start, for the probe budget.
    cpu_at_start: u64,
    /// The target's cgroup, memory and scheduler counters at the start.
    env: Option<crate::target_env::EnvStart>,
    /// Its end reading, when taken early (a launched command ended before the run).
    env_end: Option<whyslow_model::TargetEnv>,
    /// Memory in use of a launched command: read once it ended.
    mem: Option<MemRun>,
    /// Memory in use of running processes: the allocations and frees the memory probes sent, paired.
    ledger: Option<Ledger>,
    /// When the memory probes stopped (event clock), under the probe budget.
    mem_stopped: Option<u64>,
    /// Processes the kernel's OOM killer ended since the last window (said in its notes).
    oom: Vec<u32>,
}

impl<'a> Session<'a> {
    /// Opens and attaches every source, then lets a launched command run.
    pub fn start(
        opts: &'a RecordOptions,
        objects: &'a mut Objects,
        observer: &mut impl Observer,
    ) -> Result<Self, RecordError> {
        crate::options::check(opts)?;
        let trace = match &opts.syscalls {
            Some(s) => syscall_numbers(&s.trace)?,
            None => Vec::new(),
        };
        raise_fd_limit();
        let mut notes = std::mem::take(&mut objects.notes);
        let alloc_names: Vec<(String, String)> =
            objects.alloc.probes.iter().map(|(p, _)| label_of(p)).collect();
        let nesting = objects.alloc.nesting.clone();
        // Memory in use: the library a launched command runs with, and the directory its files go to
        // (running processes are followed by the probes' ledger instead).
        let mem = match (opts.mem, &opts.target) {
            (Some(m), crate::Target::Launch(_)) => {
                Some(MemRun::new(m).map_err(|e| RecordError::Io("memory library".into(), e))?)
            }
            _ => None,
        };
        let mem_env = mem.as_ref().map(MemRun::env).unwrap_or_default();
        let (pids, command, mut gate) =
            crate::phases::time("start target", || target::resolve(&opts.target, &mem_env))?;
        // The surroundings' first reading (a /proc scan of every process) runs beside the loading of the
        // eBPF programs: it is on a short command's critical path otherwise.
        // A whole host has no target surroundings of its own.
        let host = matches!(opts.target, crate::Target::All);
        let env_pids = pids.clone();
        let env = (!host).then(|| {
            std::thread::spawn(move || crate::target_env::start(std::path::Path::new("/"), &env_pids))
        });
        // A gate dropped on an error here lets its child exit without running the command.
        let src = Sources::start(opts, &trace, &pids, gate.is_some(), objects, &mut notes)?;
        let probe_names = opts.calls.iter().flat_map(|c| &c.probes).map(label_of).collect();
        let jvms = crate::jvm::Jvms::new();
        let mut c =
            Converter::new(LiveHost::new(jvms.clone()), src.sample_types.clone(), src.streams.clone())
                .with_labels(probe_names, alloc_names)
                .with_nesting(nesting);
        if src.alloc_sites.is_some() || src.mem.is_some() {
            // Call sites are read from the kernel after the run, also of processes that exited by then;
            // in-use stacks are normalized after it.
            c = c.retaining_exited();
        }
        if src.host {
            c = c.lazily();
        }
        if gate.is_none() {
            for &p in &pids {
                c.add_process(p);
            }
            // JVMs write the names of their compiled code while the run starts.
            ask_jvms(&jvms, &pids);
        } else if c.streams().iter().any(|s| !matches!(s, Stream::Cpu { .. })) {
            // Event streams start with a burst (the loader, static constructors): have the unwind tables of
            // the command's files ready before it runs, so the first samples drain fast.
            for m in crate::calls::target_modules(&opts.target).unwrap_or_default() {
                c.preload(pids[0], &m.to_string_lossy());
            }
        }
        let start_unix_ns = unix_now_ns();
        let cpu_at_start = cpu_since(&pids, 0);
        let ledger = match (&opts.mem, &src.mem) {
            (Some(m), Some(_)) => Some(Ledger::new(
                sys::monotonic_ns(),
                m.sample_bytes,
                m.period_ms.max(1) * 1_000_000,
                src.mem_probes.allocator.clone(),
            )),
            _ => None,
        };
        let env = crate::phases::time(ENV_PHASE, || env.and_then(|e| e.join().ok()));
        c.set_origin(sys::monotonic_ns());
        observer.started(&pids);
        // A running target was counted since its counters went on; a launched command from its release.
        let t0 = if gate.is_some() { Instant::now() } else { src.counting_since };
        if let Some(g) = gate.as_mut() {
            g.release(&command[0])?;
        }
        let mut s = Session {
            opts,
            src,
            c,
            alloc_followed: pids.iter().copied().collect(),
            pids,
            command,
            gate,
            notes,
            probes: opts.calls.iter().flat_map(|c| c.probes.clone()).collect(),
            late_seen: Vec::new(),
            t0,
            window_t0: t0,
            start_unix_ns,
            lost_before: 0,
            exit_code: None,
            killed: Vec::new(),
            last_progress: t0,
            last_alive_check: t0,
            liveness: target::Liveness::default(),
            last_snapshot: t0,
            last_maps_check: t0,
            last_budget_check: t0,
            last_release_check: t0,
            per_call_stopped: None,
            waiter: sys::Waiter::default(),
            sampler: None,
            cpu_at_start,
            env,
            env_end: None,
            mem,
            ledger,
            mem_stopped: None,
            oom: Vec::new(),
        };
        // The Python processes among those read above get their frames from the first samples on, not
        // from the first drain's (a tenth of a second of samples later).
        s.follow_python();
        Ok(s)
    }

    /// When sampling began: the run's duration counts from here.
    pub fn started(&self) -> Instant {
        self.t0
    }

    /// The processes followed (the target's, then those added with [`Session::follow`]).
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Follows process `pid` from now on too (its current threads, and the threads and children it
    /// starts later).
    pub fn follow(&mut self, pid: u32) -> Result<(), RecordError> {
        if self.pids.contains(&pid) {
            return Ok(());
        }
        self.src.follow(pid, self.opts, &mut self.notes)?;
        self.alloc_followed.insert(pid);
        self.c.add_process(pid);
        self.follow_python();
        ask_jvms(&self.c.host().jvms, &[pid]);
        self.pids.push(pid);
        Ok(())
    }

    /// The processes the converter follows: those followed and those seen forking from them.
    pub fn processes(&self) -> impl Iterator<Item = u32> + '_ {
        self.c.process_ids()
    }

    /// The processes sampled for the first time (or first since their last exec) since the last call: in a
    /// whole-host run ([`crate::Target::All`]), what the caller may want to learn about while they run.
    pub fn take_first_sampled(&mut self) -> Vec<u32> {
        self.c.take_first_sampled()
    }

    /// Lets process `pid` go: closes its events, and the converter drops its state a second later (no exit
    /// record of it comes through the side band from now on).
    pub fn forget(&mut self, pid: u32) {
        // Read before the exit watch lets it go.
        self.note_oom(pid);
        self.src.forget(pid);
        self.c.forget(pid, sys::monotonic_ns());
        self.c.host().jvms.forget(pid);
        self.pids.retain(|&p| p != pid);
    }

    /// Waits up to 100 ms (20 ms under a probe budget) for data and takes it in. Returns why the run should
    /// end, if it should.
    pub fn step(&mut self, observer: &mut impl Observer) -> Option<End> {
        let poll_fd = self.src.syscalls.as_ref().and_then(|p| p.poll_fd());
        // A budget is checked more often than data may arrive.
        let budget = self.pending_budget();
        // A launched command's exit ends the wait at once (short commands pay no timeout).
        let exit_fd = self.gate.as_ref().and_then(Gated::exit_fd);
        self.waiter.wait(
            self.src.ev.rings(),
            poll_fd.into_iter().chain(exit_fd).chain(self.src.wake_fd()),
            if budget.is_some() || self.sampler.is_some() { 20 } else { 100 },
        );
        self.src.drain(&mut self.c);
        self.take_mem();
        self.follow_python();
        if let Some(p) = &self.src.syscalls {
            p.drain_events().iter().for_each(|e| observer.trace(e));
        }
        if self.last_progress.elapsed() >= Duration::from_millis(250) {
            let n = self.c.counters();
            let probes = self.probe_load();
            observer.progress(&Progress {
                elapsed: self.t0.elapsed(),
                samples: n.samples,
                lost: n.lost,
                probes,
            });
            self.last_progress = Instant::now();
        }
        if let (Some(every), Some(p)) = (self.opts.interval, &self.src.syscalls) {
            if self.last_snapshot.elapsed() >= every {
                observer.snapshot(self.t0.elapsed(), &p.stats());
                self.last_snapshot = Instant::now();
            }
        }
        if let (Some(co), Some(cp), None) = (&self.opts.calls, self.src.calls.as_mut(), self.per_call_stopped)
        {
            if self.last_maps_check.elapsed() >= Duration::from_millis(100) {
                self.last_maps_check = Instant::now();
                for (pid, path) in late_modules(&self.pids, co, &mut self.late_seen) {
                    self.notes.extend(probe_late_module(cp, co, &mut self.probes, pid, &path));
                }
            }
        }
        if self.src.alloc_sites.is_some() && self.per_call_stopped.is_none() {
            self.follow_forked_allocations();
        }
        if let Some(share) = budget {
            if let Some((note, at, spent)) = self.over_budget(share) {
                // The counters' window ends when the note says (removing the probes takes a while).
                self.notes.push(note);
                self.per_call_stopped = Some(at);
                if !self.opts.cpu && self.opts.offcpu.is_none() && !self.opts.windowed {
                    return Some(End::Stopped);
                }
                self.src.stop_per_call();
                // Stack samples sent before the probes went (allocation counts are split over them below).
                self.src.drain(&mut self.c);
                self.take_mem();
                if self.ledger.is_some() {
                    self.mem_stopped = Some(sys::monotonic_ns());
                }
                self.sampler = self.src.syscalls.as_ref().map(|p| {
                    let cpu = self.target_cpu();
                    SyscallSampler::new(at, p.seen(), spent, self.src.syscall_prices(), share, cpu)
                });
            }
        }
        if let (Some(sm), Some(p)) = (self.sampler.as_mut(), self.src.syscalls.as_mut()) {
            let (pids, at_start) = (&self.pids, self.cpu_at_start);
            sm.step(p, || cpu_since(pids, at_start));
        }
        if signals::stop_requested()
            || self.opts.duration.is_some_and(|d| self.t0.elapsed() >= d)
            || self.opts.stop.as_ref().is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst))
        {
            return Some(End::Stopped);
        }
        if let Some(g) = &self.gate {
            if target::ended_unreaped(g.pid) {
                // The end reading of the surroundings, while the ended command's /proc entry is there.
                if let Some(e) = self.env.take() {
                    let pids = &self.pids;
                    self.env_end = Some(crate::phases::time(ENV_PHASE, || e.finish(pids)));
                }
            }
            if let Some(status) = try_wait(g.pid) {
                self.exit_code = Some(exit_code_of(status));
                self.killed.extend(Killed::from_wait_status(g.pid, status));
                return Some(End::TargetEnded);
            }
        } else if !self.src.host && self.last_alive_check.elapsed() >= Duration::from_millis(500) {
            self.last_alive_check = Instant::now();
            self.liveness.keep(&self.pids);
            let liveness = &mut self.liveness;
            if !self.pids.iter().any(|&p| liveness.alive(p)) {
                return Some(End::TargetEnded);
            }
        }
        None
    }

    /// Has the kernel read the Python frames of the processes the converter found to run CPython; a
    /// version with no known layout is a note.
    fn follow_python(&mut self) {
        for f in self.c.take_python_found() {
            let Some(layout) = f.layout else {
                let note = whyslow_convert::unknown_layout_note(f.minor);
                if !self.notes.contains(&note) {
                    self.notes.push(note);
                }
                continue;
            };
            // A process that is gone (or a map that is full) keeps its native frames.
            if let Err(e) = self.src.track_python(f.pid, f.runtime, layout) {
                let note = format!("Python frames of process {} not read: {e}", f.pid);
                if !self.notes.contains(&note) {
                    self.notes.push(note);
                }
            }
        }
    }

    /// Probes the allocations of the children the converter saw forking from a followed process (soon
    /// after the fork: what they allocate before is not counted), and lets the probes of ended ones go.
    fn follow_forked_allocations(&mut self) {
        let forked: Vec<u32> = self.c.process_ids().filter(|p| !self.alloc_followed.contains(p)).collect();
        for pid in forked {
            self.alloc_followed.insert(pid);
            // A child that is gone already (or exits meanwhile) is no note: there is nothing to count.
            if let Ok(notes) = self.src.follow_allocations(pid) {
                if target::alive(pid) {
                    self.notes.extend(notes);
                }
            }
        }
        if self.last_release_check.elapsed() >= Duration::from_millis(500) {
            self.last_release_check = Instant::now();
            self.src.release_ended();
        }
    }

    /// Remembers for the next window's notes that the kernel's OOM killer ended process `pid`, if it did.
    fn note_oom(&mut self, pid: u32) {
        if !self.oom.contains(&pid) && self.src.exits.as_ref().is_some_and(|w| w.oom_killed(pid)) {
            self.oom.push(pid);
        }
    }

    /// The notes of the processes the OOM killer ended, taken (each said once).
    fn oom_notes(&mut self) -> Vec<String> {
        let kept = if self.ledger.is_some() { "its memory in use as of its end is kept" } else { "" };
        std::mem::take(&mut self.oom)
            .into_iter()
            .map(|pid| {
                format!("{}{pid}{}{kept}", whyslow_model::OOM_NOTE, if kept.is_empty() { "" } else { ": " })
            })
            .collect()
    }

    /// Pairs what the memory probes sent since the last call (their stacks unwound with the mappings
    /// the converter has now).
    fn take_mem(&mut self) {
        let (Some(m), Some(l)) = (self.src.mem.as_mut(), self.ledger.as_mut()) else { return };
        let mut events = Vec::new();
        m.drain(&mut events);
        l.take(events, &mut self.c, sys::monotonic_ns());
    }

    /// What the memory probes cost and could not keep, for the notes (before they are closed).
    fn mem_notes(&self) -> Vec<String> {
        let Some(m) = &self.src.mem else { return Vec::new() };
        let mut notes = Vec::new();
        let [entry, ret] = self.src.mem_prices(m);
        let hits = m.hits();
        let cost = (hits.allocs + hits.frees) * entry + hits.returns * ret;
        let sampled = match self.opts.mem.map_or(0, |o| o.sample_bytes) {
            0 => "every allocation counted".to_string(),
            n => {
                format!("allocations sampled one every {} on average", whyslow_model::units::bytes(n as i64))
            }
        };
        notes.push(format!(
            "memory probes ({} allocation and free functions, {sampled}): a hit costs {:.2} us at an entry and \
             {:.2} us at a return here ({}, the probes' programs included); {} allocations and {} frees cost \
             the target about {:.1} ms",
            self.src.mem_probes.probes.len(),
            entry as f64 / 1e3,
            ret as f64 / 1e3,
            if self.src.mem_hit_cost.is_some() { "measured at the start of the run" } else { "assumed" },
            hits.allocs,
            hits.frees,
            cost as f64 / 1e6
        ));
        if let Some(share) = self.opts.probe_budget {
            // Two traps per allocation, one per free: at about as many frees as allocations, each pair
            // costs 2 entries and a return.
            let pair = (2 * entry + ret).max(1) as f64;
            notes.push(format!(
                "memory probes: within the probe budget of {}% of the target's CPU time they keep up with \
                 about {:.0} allocations and frees per second of it; past it they stop and in-use is as of then",
                share * 100.0,
                share * 1e9 / pair * 2.0
            ));
        }
        let (ring, live) = m.lost();
        if ring + live > 0 {
            notes.push(format!(
                "memory probes: {ring} records found the ring full and {live} sampled allocations found the \
                 kernel's live set full: not counted"
            ));
        }
        notes
    }

    /// The target processes' CPU time since the start.
    fn target_cpu(&self) -> u64 {
        cpu_since(&self.pids, self.cpu_at_start)
    }

    /// What the per-hit probes cost so far (None without any).
    fn probe_load(&self) -> Option<ProbeLoad> {
        if self.src.calls.is_none()
            && self.src.alloc_sites.is_none()
            && self.src.syscalls.is_none()
            && self.src.mem.is_none()
        {
            return None;
        }
        let latency = self.opts.calls.as_ref().is_some_and(|c| c.latency);
        let stacks_period = self.opts.syscalls.as_ref().and_then(|s| s.stacks_period);
        let cost = self.src.probe_cost(&self.probes, latency, stacks_period);
        Some(ProbeLoad {
            hits: cost.hits,
            cost_ns: cost.ns,
            target_cpu_ns: self.target_cpu(),
            stopped: self.per_call_stopped.is_some(),
        })
    }

    /// The probe budget, while the per-call probes it limits still run.
    fn pending_budget(&self) -> Option<f64> {
        self.opts.probe_budget.filter(|_| self.per_call_stopped.is_none())
    }

    /// Whether the probes' estimated cost went past `share` of the target's CPU time (checked every
    /// 20 ms: a hot allocator spends a 20 ms credit in a few ms), with the note that says so.
    fn over_budget(&mut self, share: f64) -> Option<(String, Duration, u64)> {
        if self.last_budget_check.elapsed() < Duration::from_millis(20) {
            return None;
        }
        self.last_budget_check = Instant::now();
        let latency = self.opts.calls.as_ref().is_some_and(|c| c.latency);
        let stacks_period = self.opts.syscalls.as_ref().and_then(|s| s.stacks_period);
        let cost = self.src.probe_cost(&self.probes, latency, stacks_period);
        let cpu = self.target_cpu();
        let allowed = crate::budget::allowed(share, cpu);
        let at = self.t0.elapsed();
        (cost.ns > allowed).then(|| {
            let others = match cost.others {
                0 => String::new(),
                n => format!(" (and {n} syscalls of other processes, which the syscall counters slow too)"),
            };
            let note = format!(
                "{} {:.2} s: {} hits{others} cost about {:.1} ms, past the budget of {}% of the target's {} ms \
                 of CPU; their counts cover that window",
                crate::BUDGET_NOTE,
                at.as_secs_f64(),
                cost.hits,
                cost.ns as f64 / 1e6,
                share * 100.0,
                cpu / 1_000_000
            );
            (note, at, cost.ns)
        })
    }

    /// Everything converted since the last cut (or the start), as one window; the state of live
    /// processes is kept for the next one. Syscall and call counters are not windowed.
    pub fn cut(&mut self) -> RawRecording {
        if let Some(sites) = &self.src.alloc_sites {
            // Allocations counted since the last window, over the stacks sampled so far.
            self.c.add_alloc_counts(&sites.site_counts(), &sites.stack_counts());
        }
        // Processes that are gone, whatever the records said: one whose exit record never came (a full
        // ring) would keep its state for the rest of the run. (After this machine's pids wrapped around,
        // an agent held hundreds: the eBPF programs kept the pids of ended processes and sampled the new
        // processes under them, which nothing followed to their exit; bpf/track.h now lets them go.)
        let now = sys::monotonic_ns();
        let gone: Vec<u32> = self.c.process_ids().filter(|&p| !target::alive(p)).collect();
        for pid in gone {
            self.note_oom(pid);
            self.c.forget(pid, now);
        }
        // Memory in use at the end of the window (what was allocated since the probes were attached and
        // is still live), of the processes that ended in it too.
        self.take_mem();
        if let Some(l) = self.ledger.as_mut() {
            for p in l.window(now, target::alive) {
                self.c.add_heap(&p);
            }
        }
        self.c.host().jvms.forget_ended();
        self.c.forget_exited(now);
        // JIT code compiled since a JVM last wrote its map (the map asked for meanwhile, not waited for).
        self.c.name_late_jit_code();
        self.notes.extend(self.c.host().jvms.take_notes());
        let mut raw = self.c.cut();
        add_wall(&mut raw);
        let n = self.c.counters();
        raw.meta = self.metadata(self.window_t0.elapsed(), n);
        raw.meta.lost_samples = n.lost - self.lost_before;
        raw.meta.notes.extend(self.oom_notes());
        // Each window carries its surroundings' readings (an agent's doctor checks quotas too).
        let pids = self.pids.clone();
        // The next window starts from this one's end readings (the whole host keeps none).
        let (env, next) = match self.env.take() {
            Some(e) if !self.src.host => {
                let (env, next) = e.finish_and_restart(&pids);
                (Some(env), Some(next))
            }
            Some(e) => (Some(e.finish(&pids)), None),
            None => {
                (None, (!self.src.host).then(|| crate::target_env::start(std::path::Path::new("/"), &pids)))
            }
        };
        raw.meta.target_env = env;
        self.env = next;
        self.lost_before = n.lost;
        self.window_t0 = Instant::now();
        self.start_unix_ns = unix_now_ns();
        self.c.set_origin(sys::monotonic_ns());
        raw
    }

    /// Counters of the converter so far.
    pub fn counters(&self) -> whyslow_convert::Counters {
        self.c.counters()
    }

    fn metadata(&self, duration: Duration, counters: whyslow_convert::Counters) -> Metadata {
        Metadata {
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            command: self.command.clone(),
            target_pids: self.pids.clone(),
            event: self.event_name(),
            frequency_hz: if self.opts.cpu { self.opts.frequency } else { 0 },
            start_unix_ns: self.start_unix_ns,
            duration_ns: duration.as_nanos() as u64,
            lost_samples: counters.lost,
            lost_events: 0,
            unwind: counters.unwind,
            exit_code: self.exit_code,
            killed: self.killed.clone(),
            target_env: None,
            hostname: crate::procfs::read_trim("/proc/sys/kernel/hostname"),
            kernel_release: crate::procfs::read_trim("/proc/sys/kernel/osrelease"),
            notes: self.notes.clone(),
            syscalls_duration_ns: match &self.sampler {
                Some(sm) => sm.slices.iter().map(|s| s.0).sum::<u64>().max(1),
                None => self.per_call_window(self.opts.syscalls.is_some()),
            },
            calls_duration_ns: self.per_call_window(self.opts.calls.is_some() || self.opts.alloc.is_some()),
            syscall_cost_ns: self.src.syscall_cost.map_or(0, |c| c.ns().round() as u64),
            syscall_slices: self.sampler.as_ref().map(|sm| sm.slices.clone()).unwrap_or_default(),
        }
    }

    /// How long the per-call probes ran, when the budget stopped them and `probed`; else 0 (the whole run).
    fn per_call_window(&self, probed: bool) -> u64 {
        self.per_call_stopped.filter(|_| probed).map_or(0, |d| d.as_nanos().max(1) as u64)
    }

    /// What produced the samples and counters, e.g. "cpu-clock + uprobes".
    fn event_name(&self) -> String {
        let streams = self.c.streams();
        let mut sources: Vec<&str> = self.src.ev.clock().map(Clock::name).into_iter().collect();
        if streams.iter().any(|s| matches!(s, Stream::Syscalls { .. })) {
            sources.push("syscall stacks (eBPF)");
        }
        if streams.iter().any(|s| matches!(s, Stream::OffCpu { .. })) {
            sources.push("sched_switch (eBPF)");
        }
        if streams.iter().any(|s| matches!(s, Stream::Call { .. } | Stream::Alloc { .. })) {
            sources.push("uprobes");
        }
        if self.opts.syscalls.is_some() {
            sources.push("syscall counters (eBPF)");
        }
        if self.opts.calls.is_some() {
            sources.push("call counters (eBPF)");
        }
        match (&self.opts.mem, &self.src.mem) {
            (Some(_), Some(_)) => sources.push("allocations and frees (uprobes)"),
            (Some(_), None) => sources.push("allocations and frees (in-process)"),
            _ => {}
        }
        sources.join(" + ")
    }

    /// Detaches everything, ends a launched command still running (unless asked to leave it), and
    /// returns what was recorded since the last cut (the whole run when there was none) with the counters.
    pub fn finish(mut self, observer: &mut impl Observer) -> RawRecording {
        // The probes' cost up to the end, read while they are there.
        let probes = self.probe_load();
        if self.gate.is_none() {
            for pid in self.pids.clone() {
                self.note_oom(pid);
            }
            // Attached targets that a signal ended during the run (whyslow is not their parent to wait).
            if let Some(w) = self.src.exits.take() {
                let ended = self.pids.iter().filter_map(|&p| Killed::from_wait_status(p, w.status(p)?));
                self.killed.extend(ended.collect::<Vec<_>>());
            }
        }
        self.src.exits = None;
        if let (Some(sm), Some(p)) = (self.sampler.as_mut(), self.src.syscalls.as_mut()) {
            sm.end_slice(p);
            self.notes.push(sm.describe());
        }
        if let Some(c) = self.src.syscall_cost {
            self.notes.push(format!(
                "{}{:.2} us here (measured at the start of the run, the counters attached \
                 to whyslow's own thread: {:.2} us more per getppid, {:.2} us per stat, {:.2} us per socket \
                 write or read); a syscall of any other process {:.2} us while they were attached, priced in \
                 too",
                whyslow_model::SYSCALL_COST_NOTE,
                c.ns() / 1e3,
                c.light_ns / 1e3,
                c.path_ns / 1e3,
                c.socket_ns / 1e3,
                c.other_ns / 1e3
            ));
        }
        self.src.ev.set_enabled(false);
        self.src.drain(&mut self.c);
        // The probes that cost the target at every call go next, all at once (their counts stay
        // readable), once what their events wrote is read.
        let mem_notes = self.mem_notes();
        self.src.stop_per_call();
        // Stack samples sent before the probes went (allocation counts are split over them below).
        self.src.drain(&mut self.c);
        self.take_mem();
        // Threads still blocked were blocked until now.
        let end = sys::monotonic_ns();
        if let Some(p) = self.src.offcpu.take() {
            self.c.handle_batch(p.in_progress(end), &std::collections::HashMap::new());
        }
        self.c.finish_blocked(end);
        // Methods a JVM compiled since it last wrote its map: asked for once more, and waited for.
        self.c.host().jvms.ask_all_now();
        self.c.name_late_jit_code();
        self.notes.extend(self.c.host().jvms.take_notes());
        // What the per-call probes' hits cost in this run (measured, with the counting program's time).
        if let Some(h) = self.src.hit_cost {
            let probe = self.src.calls.as_ref().or(self.src.alloc_sites.as_ref());
            self.notes.push(h.describe(probe.and_then(CallProbe::program_ns)));
        }
        // Losses of every source add up: the allocation sites', the syscall and the call counters'.
        let mut lost_events = 0;
        if let Some(sites) = self.src.alloc_sites.take() {
            self.c.add_alloc_counts(&sites.site_counts(), &sites.stack_counts());
            lost_events += sites.lost();
        }
        let mut syscalls = Vec::new();
        if let Some(p) = self.src.syscalls.take() {
            p.drain_events().iter().for_each(|e| observer.trace(e));
            syscalls = p.stats();
            lost_events += p.lost();
            // Dropping the probe detaches its programs.
        }
        let mut calls = Vec::new();
        if let Some(cp) = self.src.calls.take() {
            calls = call_stats(cp.counts(), &self.probes, self.pids.first().copied().unwrap_or(0));
            lost_events += cp.lost();
        }
        let counters = self.c.counters();
        if counters.malformed > 0 {
            self.notes.push(format!("{} malformed records skipped", counters.malformed));
        }
        if counters.jit_skipped > 0 {
            self.notes.push(format!(
                "{} lines of JIT perf maps named no symbol and were skipped",
                counters.jit_skipped
            ));
        }
        let duration = self.window_t0.elapsed();
        let mut meta = self.metadata(duration, counters);
        // Read while a launched command is still running (it is stopped below).
        meta.target_env = self.env_end.take().or_else(|| self.env.take().map(|e| e.finish(&self.pids)));
        meta.lost_events = lost_events;
        // Lost samples of this last window only (the earlier ones went with their windows).
        meta.lost_samples = counters.lost - self.lost_before;
        meta.notes.extend(self.oom_notes());
        let Session { opts, src, mut c, gate, t0, mem, ledger, mem_stopped, .. } = self;
        // The events close before a launched command is ended.
        drop(src);
        if let Some(g) = gate.as_ref().filter(|_| !opts.leave_running) {
            if meta.exit_code.is_none() {
                meta.exit_code = Some(stop_launched(g.pid));
            }
        }
        if let Some(m) = mem {
            // The command has ended: its processes' files are whole (or cut where one was killed).
            let (profiles, errors) = m.read();
            for p in &profiles {
                c.add_heap(p);
            }
            meta.notes.extend(crate::mem::notes(&profiles, &errors, gate.as_ref().map(|g| g.pid)));
        }
        match ledger {
            Some(mut l) if opts.windowed => {
                // The last window, as every one before it: in use at its end.
                for p in l.window(end, |_| true) {
                    c.add_heap(&p);
                }
                meta.notes.extend(mem_notes);
            }
            Some(l) => {
                // In use at the end of the run (or where the budget stopped the probes): what was
                // allocated while they were attached and is still live.
                let profiles = l.finish(mem_stopped.unwrap_or(end));
                for p in &profiles {
                    c.add_heap(p);
                }
                meta.notes.extend(mem_notes);
                meta.notes.extend(crate::mem::notes(&profiles, &[], None));
            }
            None => {}
        }
        observer.progress(&Progress {
            elapsed: t0.elapsed(),
            samples: counters.samples,
            lost: counters.lost,
            probes,
        });
        let (mut raw, _) = c.finish();
        add_wall(&mut raw);
        raw.syscalls = syscalls;
        raw.calls = calls;
        raw.meta = meta;
        raw
    }
}

/// Asks the JVMs among `pids` for the perf maps of their JIT code, in the background: the run does not
/// wait for a JVM to answer.
fn ask_jvms(jvms: &std::sync::Arc<crate::jvm::Jvms>, pids: &[u32]) {
    let (jvms, pids) = (jvms.clone(), pids.to_vec());
    std::thread::spawn(move || {
        pids.iter().for_each(|&p| {
            jvms.ask_now(p);
        })
    });
}

/// The call counters as the recording keeps them, each named by its probe. A probed function nobody
/// called is an answer too: zero calls in the first target process.
fn call_stats(mut counts: Vec<CallCount>, probes: &[Probe], first_pid: u32) -> Vec<CallStat> {
    for i in 0..probes.len() as u32 {
        if !counts.iter().any(|n| n.probe == i) {
            counts.push(CallCount { pid: first_pid, probe: i, ..Default::default() });
        }
    }
    counts
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
        .collect()
}

/// With on-CPU time in ns and off-CPU time, adds `wall`: their sum per sample, so running and blocked
/// time read in one unit and add up to the threads' wall time.
fn add_wall(raw: &mut RawRecording) {
    let pos = |n: &str| raw.sample_types.iter().position(|t| t.name == n);
    let (Some(cpu), Some(off)) = (pos(sample_types::CPU_NS), pos(sample_types::OFFCPU)) else { return };
    raw.sample_types.push(SampleType { name: sample_types::WALL.into(), unit: "nanoseconds".into() });
    for v in raw.samples.values_mut() {
        let wall = v[cpu] + v[off];
        v.push(wall);
    }
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
    let file = crate::files::through_root(pid, path);
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
