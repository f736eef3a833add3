//! One recording run: open the events, follow the target's threads, processes and mappings through the
//! ring-buffer side-band records, unwind and normalize every sample as it arrives, stop on duration,
//! signal or target exit, and always detach.

use crate::records::{self, Record, Sample, Timed};
use crate::sys::{self, Clock, EventConfig, Ring};
use crate::target::{self, Gated, Target};
use crate::{signals, RecordError, RecordOptions};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use whyslow_model::raw::{RawFrame, RawModule, RawRecording, RawThread};
use whyslow_model::{close_matches, Metadata, SampleType, UnwindStats};
use whyslow_unwind::{ObjectImage, Outcome, ProcessUnwinder, Regs};

/// Live counters for a status line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    pub elapsed: Duration,
    pub samples: u64,
    pub lost: u64,
}

/// A process as the recording sees it: its executable mappings and an unwinder over them.
#[derive(Default)]
struct Proc {
    maps: Vec<(u64, u64, u64, u32)>, // start, end, pgoff, module
    unwinder: ProcessUnwinder,
}

impl Proc {
    fn fork(&self) -> Proc {
        Proc { maps: self.maps.clone(), unwinder: self.unwinder.fork() }
    }

    fn normalize(&self, addr: u64) -> RawFrame {
        match self.maps.iter().find(|m| m.0 <= addr && addr < m.1) {
            Some(&(start, _, pgoff, module)) => RawFrame::User { module, offset: addr - start + pgoff },
            None => RawFrame::Unmapped(addr),
        }
    }
}

/// Everything learned from the records so far.
struct Collector {
    procs: HashMap<u32, Proc>,
    images: HashMap<String, Option<Arc<ObjectImage>>>,
    module_ids: HashMap<String, u32>,
    raw: RawRecording,
    samples: u64,
    lost: u64,
    bad_records: u64,
    unwind: UnwindStats,
    frames: Vec<u64>,
}

impl Collector {
    fn image(&mut self, pid: u32, path: &str) -> Option<Arc<ObjectImage>> {
        if let Some(img) = self.images.get(path) {
            return img.clone();
        }
        let bytes = if path == "[vdso]" {
            vdso_bytes()
        } else {
            // Prefer the path as the process sees it (containers, chroots).
            std::fs::read(format!("/proc/{pid}/root{path}")).or_else(|_| std::fs::read(path)).ok()
        };
        let img = bytes.and_then(|b| ObjectImage::parse(path, &b).ok()).map(Arc::new);
        self.images.insert(path.to_string(), img.clone());
        img
    }

    fn module_id(&mut self, path: &str, build_id: &str) -> u32 {
        if let Some(&id) = self.module_ids.get(path) {
            return id;
        }
        let id = self.raw.modules.len() as u32;
        let image = if path == "[vdso]" { vdso_bytes() } else { None };
        self.raw.modules.push(RawModule { path: path.to_string(), build_id: build_id.to_string(), image });
        self.module_ids.insert(path.to_string(), id);
        id
    }

    fn add_mapping(&mut self, pid: u32, start: u64, end: u64, pgoff: u64, path: &str) {
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        if !(path.starts_with('/') || path == "[vdso]") {
            return;
        }
        let image = self.image(pid, path);
        let module = self.module_id(path, image.as_ref().map(|i| i.build_id.as_str()).unwrap_or(""));
        let proc = self.procs.entry(pid).or_default();
        proc.maps.retain(|m| m.1 <= start || end <= m.0);
        proc.maps.push((start, end, pgoff, module));
        if let Some(image) = image {
            proc.unwinder.add_mapping(start, end, pgoff, image);
        }
    }

    /// Learns a process that existed before the recording from /proc.
    fn synthesize(&mut self, pid: u32) {
        self.procs.entry(pid).or_default();
        for m in target::exec_maps(pid) {
            self.add_mapping(pid, m.start, m.end, m.pgoff, &m.path);
        }
        for tid in target::threads_of(pid) {
            if let Some(name) = target::comm_of(pid, tid) {
                self.raw.thread_names.insert((pid, tid), name);
            }
        }
    }

    fn handle(&mut self, t: Timed) {
        match t.record {
            Record::Sample(s) => self.sample(s),
            Record::Mmap { pid, start, len, pgoff, exec, path } => {
                if exec {
                    self.add_mapping(pid, start, start + len, pgoff, &path);
                }
            }
            Record::Comm { pid, tid, name, exec } => {
                if exec {
                    // A new program image: the old address space is gone.
                    self.procs.insert(pid, Proc::default());
                }
                self.raw.thread_names.insert((pid, tid), name);
            }
            Record::Fork { pid, ppid, tid, ptid } => {
                if pid != ppid && !self.procs.contains_key(&pid) {
                    let child = self.procs.get(&ppid).map(Proc::fork).unwrap_or_default();
                    self.procs.insert(pid, child);
                }
                if let Some(name) = self.raw.thread_names.get(&(ppid, ptid)).cloned() {
                    self.raw.thread_names.entry((pid, tid)).or_insert(name);
                }
            }
            Record::Other => {}
            Record::Lost(n) => self.lost += n,
        }
    }

    fn sample(&mut self, s: Sample) {
        self.samples += 1;
        self.raw
            .thread_names
            .entry((s.pid, s.tid))
            .or_insert_with(|| target::comm_of(s.pid, s.tid).unwrap_or_default());
        if !self.procs.contains_key(&s.pid) {
            self.synthesize(s.pid);
        }
        let mut stack: Vec<RawFrame> = s.kernel.iter().map(|&a| RawFrame::Kernel(a)).collect();
        if let Some([bp, sp, ip]) = s.regs {
            let proc = self.procs.get_mut(&s.pid).expect("inserted above");
            let outcome = proc.unwinder.unwind(Regs { ip, sp, bp }, &s.stack, &mut self.frames);
            match outcome {
                Outcome::Complete => self.unwind.complete += 1,
                Outcome::Partial => self.unwind.partial += 1,
            }
            if self.frames.is_empty() {
                self.frames.push(ip);
            }
            stack.extend(self.frames.iter().map(|&a| proc.normalize(a)));
        }
        let thread = RawThread { pid: s.pid, tid: s.tid };
        self.raw.add(stack, thread, &[1, s.period as i64]);
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
    cfg: EventConfig,
    cpus: Vec<i32>,
}

impl Events {
    /// Opens one event per CPU on task `tid` (inherited by its future threads and children).
    fn open_task(&mut self, tid: u32, pages: usize) -> Result<(), std::io::Error> {
        for i in 0..self.cpus.len() {
            let fd = sys::open_event(&self.cfg, tid as i32, self.cpus[i])?;
            if let Some(ring) = self.rings.get(i) {
                sys::redirect_output(&fd, ring.fd())?;
                self.extra.push(fd);
            } else {
                self.rings.push(Ring::map(fd, pages)?);
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

    fn drain(&mut self, c: &mut Collector, buf: &mut Vec<u8>) {
        let mut batch: Vec<Timed> = Vec::new();
        for ring in &mut self.rings {
            ring.drain(buf, |rec| match records::decode(rec) {
                Some(t) => batch.push(t),
                None => c.bad_records += 1,
            });
        }
        // Rings are per CPU; order by time so a mapping is known before the samples that use it.
        batch.sort_by_key(|t| t.time);
        for t in batch {
            c.handle(t);
        }
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
fn open_first(
    opts: &RecordOptions,
    ev: &mut Events,
    tid: u32,
    notes: &mut Vec<String>,
) -> Result<(), RecordError> {
    loop {
        match ev.open_task(tid, opts.ring_pages) {
            Ok(()) => return Ok(()),
            Err(e) => {
                ev.rings.clear();
                ev.extra.clear();
                let code = e.raw_os_error();
                if ev.cfg.clock != Clock::CpuClock
                    && matches!(code, Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL))
                {
                    if ev.cfg.clock == Clock::Cycles {
                        notes.push("no hardware cycles counter here: sampled cpu-clock instead".into());
                    }
                    ev.cfg.clock = Clock::CpuClock;
                } else if ev.cfg.kernel && matches!(code, Some(libc::EACCES) | Some(libc::EPERM)) {
                    notes.push("kernel stacks not allowed (perf_event_paranoid): user stacks only".into());
                    ev.cfg.kernel = false;
                } else {
                    return Err(classify(e, tid));
                }
            }
        }
    }
}

/// Records until the duration passes, a stop signal arrives, or the target exits.
pub fn record(
    opts: &RecordOptions,
    mut progress: impl FnMut(&Progress),
) -> Result<RawRecording, RecordError> {
    if opts.frequency == 0 || opts.stack_bytes > 65528 || !opts.ring_pages.is_power_of_two() {
        return Err(RecordError::Invalid(
            "frequency > 0, stack <= 65528 bytes, ring pages a power of two".into(),
        ));
    }
    raise_fd_limit();
    let mut notes = Vec::new();
    let (pids, command, mut gate) = match &opts.target {
        Target::Launch(argv) => {
            let g = Gated::spawn(argv)?;
            (vec![g.pid], argv.clone(), Some(g))
        }
        Target::Pids(pids) => {
            if let Some(&p) = pids.iter().find(|&&p| !target::alive(p)) {
                return Err(RecordError::NoSuchProcess(p));
            }
            (
                pids.clone(),
                vec!["-p".into(), pids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")],
                None,
            )
        }
        Target::Comm(name) => {
            let pids = target::pids_by_comm(name);
            if pids.is_empty() {
                let all = target::all_comms();
                let suggestions = close_matches(name, all.iter().map(String::as_str), 5);
                return Err(RecordError::NoSuchComm { name: name.clone(), suggestions });
            }
            (pids, vec!["--comm".into(), name.clone()], None)
        }
    };
    let cfg = EventConfig {
        clock: opts.clock,
        frequency: opts.frequency,
        stack_bytes: opts.stack_bytes,
        kernel: opts.kernel,
        enable_on_exec: gate.is_some(),
    };
    let mut ev = Events { rings: Vec::new(), extra: Vec::new(), cfg, cpus: sys::online_cpus() };
    let opened = open_all(opts, &mut ev, &pids, gate.is_some(), &mut notes);
    if let Err(e) = opened {
        if let Some(g) = gate.take() {
            g.abort();
        }
        return Err(e);
    }
    let sample_types = vec![
        SampleType { name: "cpu".into(), unit: "samples".into() },
        match ev.cfg.clock {
            Clock::CpuClock => SampleType { name: "cpu-ns".into(), unit: "nanoseconds".into() },
            Clock::Auto | Clock::Cycles => SampleType { name: "cycles".into(), unit: "count".into() },
        },
    ];
    let mut c = Collector {
        procs: HashMap::new(),
        images: HashMap::new(),
        module_ids: HashMap::new(),
        raw: RawRecording { sample_types, ..Default::default() },
        samples: 0,
        lost: 0,
        bad_records: 0,
        unwind: UnwindStats::default(),
        frames: Vec::new(),
    };
    if gate.is_none() {
        for &p in &pids {
            c.synthesize(p);
        }
    }
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let t0 = Instant::now();
    if let Some(g) = gate.as_mut() {
        g.release(&command[0])?;
    }
    let mut buf = Vec::new();
    let mut exit_code = None;
    let mut last_progress = Instant::now();
    let mut last_alive_check = Instant::now();
    loop {
        sys::poll(&ev.rings, 100);
        ev.drain(&mut c, &mut buf);
        if last_progress.elapsed() >= Duration::from_millis(250) {
            progress(&Progress { elapsed: t0.elapsed(), samples: c.samples, lost: c.lost });
            last_progress = Instant::now();
        }
        if signals::stop_requested() || opts.duration.is_some_and(|d| t0.elapsed() >= d) {
            break;
        }
        if let Some(g) = &gate {
            if let Some(code) = try_wait(g.pid) {
                exit_code = Some(code);
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
    ev.set_enabled(false);
    ev.drain(&mut c, &mut buf);
    let event = ev.cfg.clock.name();
    drop(ev);
    if let Some(g) = &gate {
        if exit_code.is_none() {
            exit_code = Some(stop_child(g.pid));
        }
    }
    progress(&Progress { elapsed: duration, samples: c.samples, lost: c.lost });
    if c.bad_records > 0 {
        notes.push(format!("{} malformed records skipped", c.bad_records));
    }
    c.raw.meta = Metadata {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command,
        target_pids: pids,
        event: event.to_string(),
        frequency_hz: opts.frequency,
        start_unix_ns,
        duration_ns: duration.as_nanos() as u64,
        lost_samples: c.lost,
        unwind: c.unwind,
        exit_code,
        hostname: read_trim("/proc/sys/kernel/hostname"),
        kernel_release: read_trim("/proc/sys/kernel/osrelease"),
        notes,
    };
    Ok(c.raw)
}

/// Opens events on every thread of every target process. Threads created while we open are caught by
/// re-listing until the set is stable (each new thread of an already-opened one inherits its events).
fn open_all(
    opts: &RecordOptions,
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
                    open_first(opts, ev, tid, notes)
                } else {
                    ev.open_task(tid, opts.ring_pages).map_err(|e| classify(e, tid))
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

fn try_wait(pid: u32) -> Option<i32> {
    let mut st = 0;
    let r = unsafe { libc::waitpid(pid as i32, &mut st, libc::WNOHANG) };
    (r == pid as i32).then(|| exit_code(st))
}

fn exit_code(st: i32) -> i32 {
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        128 + libc::WTERMSIG(st)
    }
}

/// Ends a launched command that outlived the recording: SIGTERM, then SIGKILL after a grace period.
fn stop_child(pid: u32) -> i32 {
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Some(code) = try_wait(pid) {
            return code;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let mut st = 0;
    unsafe { libc::waitpid(pid as i32, &mut st, 0) };
    exit_code(st)
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}
