//! Exact syscall counting and `--trace` events from bpf/syscalls.bpf.c: load, track processes, attach,
//! drain the trace ring buffer, and read the kernel's counters.

use super::skel::{OpenSyscallsSkel, SyscallsSkel, SyscallsSkelBuilder};
use super::{check_btf, classify, quiet_libbpf, u32_at, u64_at};
use crate::RecordError;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject, RingBuffer, RingBufferBuilder};
use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::rc::Rc;
use std::time::Duration;
use whyslow_model::syscalls::{errno_name, string_args, syscall_name, syscall_names, TraceEvent};
use whyslow_model::{close_matches, SyscallStat, HIST_BUCKETS};

/// Must match bpf/syscalls.bpf.c.
const MAX_SYSCALL: u32 = 1024;
const PATH_LEN: usize = 256;
const EVENT_LEN: usize = 8 * 4 + 8 + 8 * 6 + 2 * PATH_LEN;
const STAT_LEN: usize = 8 * (5 + HIST_BUCKETS);
const DROP_SLOTS: u32 = 2;

/// Loaded and attached syscall counters; detached when dropped.
pub struct SyscallProbe<'obj> {
    skel: SyscallsSkel<'obj>,
    ring: Option<(RingBuffer<'static>, Rc<RefCell<Vec<TraceEvent>>>)>,
}

/// Syscall numbers for names, or an error naming the unknown one with close matches.
pub fn syscall_numbers(names: &[String]) -> Result<Vec<u32>, RecordError> {
    names
        .iter()
        .map(|n| {
            whyslow_model::syscalls::syscall_number(n).ok_or_else(|| RecordError::NoSuchSyscall {
                name: n.clone(),
                suggestions: close_matches(n, syscall_names(), 5),
            })
        })
        .collect()
}

fn cstr(b: &[u8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

fn decode_event(b: &[u8]) -> Option<TraceEvent> {
    if b.len() < EVENT_LEN {
        return None;
    }
    let nr = u32_at(b, 24);
    let n_strings = syscall_name(nr).map_or(0, |n| string_args(n).len());
    let strings = (0..n_strings).map(|i| cstr(&b[88 + i * PATH_LEN..88 + (i + 1) * PATH_LEN])).collect();
    Some(TraceEvent {
        time_ns: u64_at(b, 0),
        dur_ns: u64_at(b, 8),
        pid: u32_at(b, 16),
        tid: u32_at(b, 20),
        nr,
        ret: u64_at(b, 32) as i64,
        args: std::array::from_fn(|i| u64_at(b, 40 + 8 * i)),
        strings,
    })
}

impl<'obj> SyscallProbe<'obj> {
    /// Loads the programs; `trace` lists the syscall numbers to send one by one.
    pub fn load(obj: &'obj mut MaybeUninit<OpenObject>, trace: &[u32]) -> Result<Self, RecordError> {
        check_btf()?;
        quiet_libbpf();
        let mut open: OpenSyscallsSkel =
            SyscallsSkelBuilder::default().open(obj).map_err(|e| classify("open", e))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.tracing = !trace.is_empty();
        }
        if trace.is_empty() {
            // Nothing is traced: one page, not 4 MB mapped and zeroed at load.
            open.maps.events.set_max_entries(4096).map_err(|e| classify("ring buffer", e))?;
        }
        let skel = open.load().map_err(|e| classify("load", e))?;
        for &nr in trace.iter().filter(|&&nr| nr < MAX_SYSCALL) {
            let idx = syscall_name(nr).map_or(&[][..], string_args);
            let cfg = [
                1u8,
                idx.first().map_or(-1, |&i| i as i8) as u8,
                idx.get(1).map_or(-1, |&i| i as i8) as u8,
                0,
            ];
            skel.maps
                .trace_cfg
                .update(&nr.to_ne_bytes(), &cfg, MapFlags::ANY)
                .map_err(|e| classify("trace config", e))?;
        }
        let mut probe = SyscallProbe { skel, ring: None };
        if !trace.is_empty() {
            let events = Rc::new(RefCell::new(Vec::new()));
            let sink = events.clone();
            let mut b = RingBufferBuilder::new();
            b.add(&probe.skel.maps.events, move |data: &[u8]| {
                if let Some(e) = decode_event(data) {
                    sink.borrow_mut().push(e);
                }
                0
            })
            .map_err(|e| classify("ring buffer", e))?;
            probe.ring = Some((b.build().map_err(|e| classify("ring buffer", e))?, events));
        }
        Ok(probe)
    }

    /// Counts the syscalls of process `pid` (and of the processes it forks from now on); of a `launched`
    /// command from its exec on.
    pub fn track(&self, pid: u32, launched: bool) -> Result<(), RecordError> {
        super::track(&self.skel.maps.tracked, pid, launched)
    }

    pub fn attach(&mut self) -> Result<(), RecordError> {
        self.skel.attach().map_err(|e| classify("attach", e))
    }

    /// Stops counting; the counts so far stay readable.
    pub fn detach(&mut self) {
        self.skel.links = Default::default();
    }

    /// Syscalls counted so far (cheap to read: one slot per CPU).
    pub fn counted(&self) -> u64 {
        super::per_cpu_total(&self.skel.maps.counted, 0..1)
    }

    /// The fd to poll for trace events, when tracing.
    pub fn poll_fd(&self) -> Option<i32> {
        self.ring.as_ref().map(|(r, _)| r.epoll_fd())
    }

    /// Trace events that arrived since the last call.
    pub fn drain_events(&self) -> Vec<TraceEvent> {
        match &self.ring {
            Some((ring, events)) => {
                let _ = ring.poll(Duration::ZERO);
                std::mem::take(&mut *events.borrow_mut())
            }
            None => Vec::new(),
        }
    }

    /// Events lost: trace events the ring had no room for, and calls a full map could not count.
    pub fn lost(&self) -> u64 {
        super::per_cpu_total(&self.skel.maps.drops, 0..DROP_SLOTS)
    }

    /// The counters so far, one entry per (process, thread, syscall).
    pub fn stats(&self) -> Vec<SyscallStat> {
        let mut errnos: HashMap<(u32, u32, u32), Vec<(String, u64)>> = HashMap::new();
        for k in self.skel.maps.errnos.keys() {
            if let Ok(Some(v)) = self.skel.maps.errnos.lookup(&k, MapFlags::ANY) {
                let key = (u32_at(&k, 0), u32_at(&k, 4), u32_at(&k, 8));
                errnos.entry(key).or_default().push((errno_name(u32_at(&k, 12)), u64_at(&v, 0)));
            }
        }
        let mut out = Vec::new();
        for k in self.skel.maps.stats.keys() {
            let Ok(Some(v)) = self.skel.maps.stats.lookup(&k, MapFlags::ANY) else { continue };
            if v.len() < STAT_LEN {
                continue;
            }
            let (pid, tid, nr) = (u32_at(&k, 0), u32_at(&k, 4), u32_at(&k, 8));
            let mut e = errnos.remove(&(pid, tid, nr)).unwrap_or_default();
            e.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            out.push(SyscallStat {
                pid,
                tid,
                name: syscall_name(nr).map(str::to_string).unwrap_or_else(|| format!("syscall_{nr}")),
                calls: u64_at(&v, 0),
                errors: u64_at(&v, 8),
                errnos: e,
                total_ns: u64_at(&v, 16),
                max_ns: u64_at(&v, 24),
                hist: (0..HIST_BUCKETS).map(|i| u64_at(&v, 32 + 8 * i)).collect(),
                bytes: u64_at(&v, 32 + 8 * HIST_BUCKETS),
            });
        }
        out.sort_by(|a, b| (a.pid, a.tid, &a.name).cmp(&(b.pid, b.tid, &b.name)));
        out
    }
}
