//! Process and thread state: each process's mappings and unwinder (forked with it, kept a while after it
//! exits, then forgotten so a long run stays bounded), and threads blocked off-CPU until they run again.

use crate::jitcode::{Jit, JitUpdate};
use crate::python::PyProc;
use crate::{Converter, Host, Stream};
use whyslow_model::raw::{RawFrame, RawThread};
use whyslow_unwind::ProcessUnwinder;

/// An executable file mapping of a process: [start, end) maps `path` from file offset `pgoff`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub path: String,
}

impl Mapping {
    /// One line of /proc/PID/maps, when it maps executable code from a named object (a file, `[vdso]`).
    pub fn from_maps_line(line: &str) -> Option<Mapping> {
        let mut it = line.splitn(6, ' ');
        let range = it.next()?;
        let perms = it.next()?;
        let pgoff = u64::from_str_radix(it.next()?, 16).ok()?;
        let _dev = it.next()?;
        let _inode = it.next()?;
        let path = it.next().unwrap_or("").trim_start().to_string();
        if !perms.contains('x') || path.is_empty() {
            return None;
        }
        let (s, e) = range.split_once('-')?;
        Some(Mapping {
            start: u64::from_str_radix(s, 16).ok()?,
            end: u64::from_str_radix(e, 16).ok()?,
            pgoff,
            path,
        })
    }
}

/// A process as a host sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Executable mappings.
    pub maps: Vec<Mapping>,
    /// (tid, name) of each thread.
    pub threads: Vec<(u32, String)>,
}

/// How long the state of an exited process is kept for records that follow its exit.
pub(crate) const EXITED_GRACE_NS: u64 = 1_000_000_000;

/// A mapping of a process as the converter keeps it: its file as a module id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mapped {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) pgoff: u64,
    pub(crate) module: u32,
}

/// A process: its executable mappings and an unwinder over them, and the symbols of its JIT code.
#[derive(Default)]
pub(crate) struct Proc {
    pub(crate) maps: Vec<Mapped>,
    pub(crate) unwinder: ProcessUnwinder,
    pub(crate) jit: Jit,
    /// Lazily (see [`Converter::lazily`]): the mappings its records described, not read or parsed until
    /// its first sample; None once they were (or when not lazy).
    pub(crate) pending: Option<Vec<Mapping>>,
    /// Whether a sample of it was seen (since its last exec).
    pub(crate) sampled: bool,
    /// The CPython interpreter it runs, if any.
    pub(crate) python: Option<Box<PyProc>>,
}

impl Proc {
    /// A child: the parent's mappings; JIT code is the child's own to publish (its own file).
    pub(crate) fn fork(&self) -> Proc {
        Proc {
            maps: self.maps.clone(),
            unwinder: self.unwinder.fork(),
            jit: Jit::default(),
            pending: self.pending.clone(),
            sampled: false,
            python: self.python.clone(),
        }
    }

    /// Takes in what the process published about its JIT code; returns the lines skipped.
    pub(crate) fn take_jit(&mut self, u: JitUpdate) -> u64 {
        let skipped = u.skipped;
        if let Some(code) = self.jit.take(u) {
            self.unwinder.set_jit_code(code);
        }
        skipped
    }

    /// A process whose mappings are kept unread until its first sample.
    pub(crate) fn lazy() -> Proc {
        Proc { pending: Some(Vec::new()), ..Proc::default() }
    }

    pub(crate) fn normalize(&self, addr: u64) -> RawFrame {
        match self.maps.iter().find(|m| m.start <= addr && addr < m.end) {
            // A corrupt perf.data can name any page offset: wrap as the kernel's arithmetic would.
            Some(m) => RawFrame::User { module: m.module, offset: (addr - m.start).wrapping_add(m.pgoff) },
            None => RawFrame::Unmapped(addr),
        }
    }
}

/// A thread that blocked and has not run since.
pub(crate) struct Blocked {
    pub(crate) since: u64,
    pub(crate) stack: Vec<RawFrame>,
    pub(crate) thread: RawThread,
}

impl<H: Host> Converter<H> {
    /// Processes whose state is held (for bounded-memory checks).
    pub fn live_processes(&self) -> usize {
        self.procs.len()
    }

    /// The processes it keeps state of: added, or seen forking from one that was.
    pub fn process_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.procs.keys().copied()
    }

    /// Forgets process `pid` as if it exited at `now` (event clock): a process let go while it runs sends
    /// no exit record through a side band that stopped following it, and its state (mappings, unwinder,
    /// its cache) would stay for the rest of the run.
    pub fn forget(&mut self, pid: u32, now: u64) {
        if !self.retain_exited && self.procs.contains_key(&pid) && !self.exited.iter().any(|&(p, _)| p == pid)
        {
            self.exited.push((pid, now));
        }
    }

    /// Drops the state of processes that exited more than [`EXITED_GRACE_NS`] before `now` (event clock).
    /// Records arriving do it; a recording whose processes all ended gets no more, and does it per window.
    pub fn forget_exited(&mut self, now: u64) {
        let procs = &mut self.procs;
        self.exited.retain(|&(pid, at)| {
            let keep = now < at.saturating_add(EXITED_GRACE_NS);
            if !keep {
                procs.remove(&pid);
            }
            keep
        });
    }

    /// Learns a process that existed before the records began from the host.
    pub fn add_process(&mut self, pid: u32) {
        self.procs.entry(pid).or_default();
        let Some(info) = self.host.process(pid) else { return };
        for m in &info.maps {
            self.add_mapping(pid, m.start, m.end, m.pgoff, &m.path);
        }
        for (tid, name) in info.threads {
            self.raw.thread_names.insert((pid, tid), name);
        }
    }

    /// A thread runs again: the time since it blocked is off-CPU time of the stack it blocked in.
    pub(crate) fn switched_in(&mut self, tid: u32, time: u64) {
        if let Some(b) = self.blocked.remove(&tid) {
            self.add_blocked(b, time);
        }
    }

    pub(crate) fn add_blocked(&mut self, b: Blocked, until: u64) {
        let ns = until.saturating_sub(b.since);
        if let (Some(Stream::OffCpu { slot, min_block_ns, .. }), true) = (self.offcpu, ns > 0) {
            if ns >= min_block_ns {
                let mut values = vec![0i64; self.raw.sample_types.len()];
                values[slot] = ns as i64;
                let time = self.slice(until);
                self.raw.add(&b.stack, &b.thread, time, &values);
            }
        }
    }

    /// Values the threads still blocked at `end` with their time so far.
    pub fn finish_blocked(&mut self, end: u64) {
        let blocked: Vec<Blocked> = self.blocked.drain().map(|(_, b)| b).collect();
        for b in blocked {
            self.add_blocked(b, end);
        }
    }
}
