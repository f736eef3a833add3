//! Exact syscall counting, `--trace` events and syscall stack samples from bpf/syscalls.bpf.c: load,
//! track processes, attach (for the whole run, or in slices), measure what a counted syscall costs,
//! drain the trace and stack ring buffers, and read the kernel's counters.

use super::calls::StackSampling;
use super::skel::types::{ws_event as Event, ws_inflight, ws_key, ws_stat, ws_trace_cfg};
use super::skel::{OpenSyscallsSkel, SyscallsSkel, SyscallsSkelBuilder};
use super::{bytes_of, check_btf, classify, plain, quiet_libbpf, u64_at, STACK_MAX};
use crate::RecordError;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, RingBuffer, RingBufferBuilder};
use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::rc::Rc;
use whyslow_convert::records::{Record, Timed};
use whyslow_model::syscalls::{errno_name, string_args, syscall_name, syscall_names, TraceEvent};
use whyslow_model::{close_matches, SyscallStat, HIST_BUCKETS};

/// Slots of the `counted` map (SEEN_COUNTED and SEEN_OTHERS in bpf/syscalls.bpf.c).
const SEEN_COUNTED: u32 = 0;
const SEEN_OTHERS: u32 = 1;
/// Slots of the program's `drops` array (DROP_TRACE and DROP_STACK in bpf/syscalls.bpf.c).
const DROP_TRACE: usize = 0;
const DROP_STACK: usize = 2;

/// Loaded and attached syscall counters; detached when dropped.
pub struct SyscallProbe<'obj> {
    skel: SyscallsSkel<'obj>,
    ring: Option<(RingBuffer<'static>, Rc<RefCell<Vec<TraceEvent>>>)>,
    /// The stack samples' ring and their period, when stacks are sampled.
    stacks: Option<(super::RecordRing, u64)>,
    /// The fork and exec hooks (attached for the whole run: processes forked while the counters are
    /// off are followed too).
    hooks: Vec<Link>,
    /// The two counting programs' links, while they are attached.
    counters: Vec<Link>,
    /// Syscalls seen during the cost measurement (whyslow's own and others' meanwhile), left out of
    /// [`SyscallProbe::seen`].
    calibration: Seen,
}

/// Syscalls the counting programs saw while attached: the targets' (counted) and those of every other
/// process, which pay for the attached programs too (see [`SyscallCost::other_ns`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Seen {
    pub counted: u64,
    pub others: u64,
}

/// What a counted syscall costs on this kernel and CPU, measured at the start of a run: the same
/// syscalls timed in whyslow's own thread with the counting programs attached (the thread counted as a
/// target's, then not) and without them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyscallCost {
    /// ns more per getppid (the least work a syscall does: the floor of the tracepoints and programs).
    pub light_ns: f64,
    /// ns more per stat of "/" (a path walk: the programs' cache footprint shows too).
    pub path_ns: f64,
    /// ns more per write or read of 32 bytes on a Unix socket pair (a server's requests and replies).
    pub socket_ns: f64,
    /// ns more per syscall of a process that is not counted, the largest of the three kinds: an attached
    /// sys_enter program puts every syscall of the machine on the traced path (~0.2 us here).
    pub other_ns: f64,
}

impl SyscallCost {
    /// The price of one counted syscall: the largest of the three (a budget must not run over on code
    /// that is heavier on the caches than getppid).
    pub fn ns(&self) -> f64 {
        self.light_ns.max(self.path_ns).max(self.socket_ns)
    }
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

/// The least CPU time per call over a few batches (this thread's: a wait for a CPU adds nothing) of
/// getppid, of a stat of "/", and of a write and a read of 32 bytes through the socket `pair`.
fn time_syscalls(pair: &[std::os::fd::OwnedFd; 2]) -> [f64; 3] {
    use crate::sys::thread_cpu_ns;
    use std::os::fd::AsRawFd;
    const N: u32 = 300;
    let mut best = [f64::MAX; 3];
    let mut buf = [0u8; 64];
    let (tx, rx) = (pair[0].as_raw_fd(), pair[1].as_raw_fd());
    let root = c"/";
    // SAFETY: an all-zero stat is a valid value of the plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    for _ in 0..5 {
        let t = thread_cpu_ns();
        for _ in 0..N {
            // SAFETY: getppid has no arguments and cannot fail.
            std::hint::black_box(unsafe { libc::getppid() });
        }
        best[0] = best[0].min((thread_cpu_ns() - t) as f64 / f64::from(N));
        let t = thread_cpu_ns();
        for _ in 0..N {
            // SAFETY: root is a NUL-terminated path and st a stat owned by this frame.
            std::hint::black_box(unsafe { libc::stat(root.as_ptr(), &mut st) });
        }
        best[1] = best[1].min((thread_cpu_ns() - t) as f64 / f64::from(N));
        let t = thread_cpu_ns();
        for _ in 0..N {
            // SAFETY: buf is owned by this frame and longer than both lengths; both fds are open.
            unsafe {
                libc::write(tx, buf.as_ptr().cast(), 32);
                libc::read(rx, buf.as_mut_ptr().cast(), buf.len());
            }
        }
        best[2] = best[2].min((thread_cpu_ns() - t) as f64 / f64::from(2 * N));
    }
    best
}

/// A C string of a fixed-size field (up to its first NUL).
fn cstr(b: &[u8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

/// A trace event as the program lays it out (`struct ws_event`); None when the record is short.
fn decode_event(b: &[u8]) -> Option<TraceEvent> {
    if b.len() < std::mem::size_of::<Event>() {
        return None;
    }
    let e: Event = plain(b);
    let n_strings = syscall_name(e.nr).map_or(0, |n| string_args(n).len());
    let strings =
        [&e.str_a, &e.str_b].into_iter().take(n_strings).map(|s| cstr(&s.map(|c| c as u8))).collect();
    Some(TraceEvent {
        time_ns: e.ts,
        dur_ns: e.dur_ns,
        pid: e.tgid,
        tid: e.tid,
        nr: e.nr,
        ret: e.ret,
        args: e.args,
        strings,
    })
}

/// A stack sample (bpf/ustack.h's `struct ws_sample`): a sample of event id `s.first_id` standing for
/// `s.period` syscalls, its raw data the syscall's number; None when the record is short.
fn decode_stack(b: &[u8], s: &StackSampling) -> Option<Timed> {
    let u = super::decode_user_sample(b)?;
    let mut sample = u.sample;
    (sample.id, sample.period, sample.raw) = (s.first_id, s.period, u.ret.to_ne_bytes().to_vec());
    Some(Timed { time: u.time, record: Record::Sample(sample) })
}

impl<'obj> SyscallProbe<'obj> {
    /// Loads the programs; `trace` lists the syscall numbers to send one by one; `stacks` samples the
    /// stacks of every `period`th syscall of each thread (from [`SyscallProbe::attach`] on).
    pub fn load(
        obj: &'obj mut MaybeUninit<OpenObject>,
        trace: &[u32],
        stacks: Option<StackSampling>,
    ) -> Result<Self, RecordError> {
        check_btf()?;
        quiet_libbpf();
        let mut open: OpenSyscallsSkel =
            SyscallsSkelBuilder::default().open(obj).map_err(|e| classify("open", e))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.tracing = !trace.is_empty();
            if let Some(st) = &stacks {
                ro.stack_bytes = st.stack_bytes.min(STACK_MAX);
            }
        }
        if trace.is_empty() {
            // Nothing is traced: one page, not 4 MB mapped and zeroed at load.
            open.maps.events.set_max_entries(4096).map_err(|e| classify("ring buffer", e))?;
        }
        if let Some(st) = &stacks {
            super::RecordRing::size(&mut open.maps.stacks, st.ring_bytes)?;
        }
        let skel = open.load().map_err(|e| classify("load", e))?;
        let stacks = match stacks {
            Some(st) => Some((
                super::RecordRing::new(&skel.maps.stacks, move |data| decode_stack(data, &st))?,
                st.period,
            )),
            None => None,
        };
        // One entry per syscall number (MAX_SYSCALL in the program).
        let max_syscall = skel.maps.trace_cfg.max_entries();
        for &nr in trace.iter().filter(|&&nr| nr < max_syscall) {
            let idx = syscall_name(nr).map_or(&[][..], string_args);
            let cfg = ws_trace_cfg {
                on: 1,
                str_a: idx.first().map_or(-1, |&i| i as i8),
                str_b: idx.get(1).map_or(-1, |&i| i as i8),
                pad: 0,
            };
            skel.maps
                .trace_cfg
                .update(&nr.to_ne_bytes(), bytes_of(&cfg), MapFlags::ANY)
                .map_err(|e| classify("trace config", e))?;
        }
        let mut probe = SyscallProbe {
            skel,
            ring: None,
            stacks,
            hooks: Vec::new(),
            counters: Vec::new(),
            calibration: Seen::default(),
        };
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

    /// Attaches the fork and exec hooks and starts counting, and sampling stacks when loaded to.
    pub fn attach(&mut self) -> Result<(), RecordError> {
        if self.hooks.is_empty() {
            let p = &self.skel.progs;
            self.hooks.push(p.on_fork.attach().map_err(|e| classify("attach fork hook", e))?);
            self.hooks.push(p.on_exec.attach().map_err(|e| classify("attach exec hook", e))?);
            self.hooks.push(p.on_process_exit.attach().map_err(|e| classify("attach exit hook", e))?);
            self.set_stack_period(self.stacks.as_ref().map_or(0, |(_, period)| *period));
        }
        self.resume()
    }

    /// Samples no more stacks (the counters go on while attached).
    pub fn stop_stacks(&mut self) {
        self.set_stack_period(0);
    }

    fn set_stack_period(&mut self, period: u64) {
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            bss.stack_period = period;
        }
    }

    /// Counts again after [`SyscallProbe::detach`] (a new slice: a syscall that entered before is not
    /// counted when it returns).
    pub fn resume(&mut self) -> Result<(), RecordError> {
        if !self.counters.is_empty() {
            return Ok(());
        }
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            bss.slice = bss.slice.wrapping_add(1);
        }
        let p = &self.skel.progs;
        let enter = p.sys_enter.attach().map_err(|e| classify("attach", e))?;
        let exit = p.sys_exit.attach().map_err(|e| classify("attach", e))?;
        self.counters = vec![enter, exit];
        Ok(())
    }

    /// Stops counting; the counts so far stay readable.
    pub fn detach(&mut self) {
        self.counters.clear();
    }

    /// Whether the counters are attached.
    pub fn counting(&self) -> bool {
        !self.counters.is_empty()
    }

    /// Syscalls of the targets counted so far, and of other processes seen (cheap to read: a slot per
    /// CPU each).
    pub fn seen(&self) -> Seen {
        Seen {
            counted: self.total_seen(SEEN_COUNTED).saturating_sub(self.calibration.counted),
            others: self.total_seen(SEEN_OTHERS).saturating_sub(self.calibration.others),
        }
    }

    fn total_seen(&self, slot: u32) -> u64 {
        super::per_cpu_total(&self.skel.maps.counted, slot..slot + 1)
    }

    /// Measures what a syscall costs here while the counters are attached, counted and not (see
    /// [`SyscallCost`]): about 15 ms, before the counters are attached for the targets. None where the
    /// calling thread cannot be counted (no pidfd for it: kernels before 6.9) or the programs cannot be
    /// attached.
    pub fn measure_cost(&mut self) -> Option<SyscallCost> {
        if self.counting() {
            return None;
        }
        let mut pair = [0i32; 2];
        // SAFETY: pair is two ints owned by this frame, where socketpair writes the new fds.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: socketpair succeeded: both fds are new and owned by nobody else.
        let pair =
            pair.map(|fd| unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
        let without = time_syscalls(&pair);
        // Attached, this thread not counted: what every other process pays meanwhile.
        let others = self.resume().is_ok().then(|| time_syscalls(&pair));
        let with = others.and_then(|_| self.time_counted(&pair));
        self.detach();
        // whyslow's own syscalls are no target's: their counters go, and [`SyscallProbe::seen`] leaves them out.
        let me = std::process::id();
        let mine = |k: &Vec<u8>| plain::<ws_key>(k).tgid == me;
        for k in self.skel.maps.stats.keys().filter(mine) {
            let _ = self.skel.maps.stats.delete(&k);
        }
        for k in self.skel.maps.errnos.keys().filter(mine) {
            let _ = self.skel.maps.errnos.delete(&k);
        }
        self.calibration =
            Seen { counted: self.total_seen(SEEN_COUNTED), others: self.total_seen(SEEN_OTHERS) };
        let (with, others) = (with?, others?);
        let more = |t: [f64; 3], i: usize| (t[i] - without[i]).max(0.0);
        Some(SyscallCost {
            light_ns: more(with, 0),
            path_ns: more(with, 1),
            socket_ns: more(with, 2),
            other_ns: (0..3).map(|i| more(others, i)).fold(0.0, f64::max),
        })
    }

    /// [`time_syscalls`] with the calling thread counted as a target's (the counters attached); None
    /// where it cannot be (no pidfd for a thread: kernels before 6.9).
    fn time_counted(&mut self, pair: &[std::os::fd::OwnedFd; 2]) -> Option<[f64; 3]> {
        // SAFETY: pidfd_open takes a tid and flags and returns a new fd or -1; PIDFD_THREAD (O_EXCL) names
        // the calling thread rather than its process.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::gettid(), libc::O_EXCL) };
        if fd < 0 {
            return None;
        }
        // SAFETY: a non-negative result is a new fd owned by nobody else.
        let _pidfd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
        let key = (fd as i32).to_ne_bytes();
        let empty = ws_inflight::default();
        let given = self.skel.maps.inflight.update(&key, bytes_of(&empty), MapFlags::ANY).is_ok();
        let with = given.then(|| time_syscalls(pair));
        let _ = self.skel.maps.inflight.delete(&key);
        with
    }

    /// The fd to poll for trace events, when tracing.
    pub fn poll_fd(&self) -> Option<i32> {
        self.ring.as_ref().map(|(r, _)| r.epoll_fd())
    }

    /// Trace events that arrived since the last call.
    pub fn drain_events(&self) -> Vec<TraceEvent> {
        match &self.ring {
            Some((ring, events)) => {
                let _ = ring.consume();
                std::mem::take(&mut *events.borrow_mut())
            }
            None => Vec::new(),
        }
    }

    /// The stack samples that arrived since the last call, and a lost record for those the ring had no
    /// room for meanwhile.
    pub fn drain(&mut self, into: &mut Vec<Timed>) {
        let lost = self.dropped(DROP_STACK..DROP_STACK + 1);
        if let Some((ring, _)) = self.stacks.as_mut() {
            ring.drain(into, lost);
        }
    }

    /// Events lost: trace events the ring had no room for, and calls a full map could not count (lost
    /// stack samples are in [`SyscallProbe::drain`]'s records).
    pub fn lost(&self) -> u64 {
        self.dropped(DROP_TRACE..DROP_STACK)
    }

    fn dropped(&self, slots: std::ops::Range<usize>) -> u64 {
        super::drops_total(self.skel.maps.bss_data.as_deref().map(|b| &b.drops[..]), slots)
    }

    /// The counters so far, one entry per (process, thread, syscall).
    pub fn stats(&self) -> Vec<SyscallStat> {
        let mut errnos: HashMap<(u32, u32, u32), Vec<(String, u64)>> = HashMap::new();
        for k in self.skel.maps.errnos.keys() {
            if let Ok(Some(v)) = self.skel.maps.errnos.lookup(&k, MapFlags::ANY) {
                let k: ws_key = plain(&k);
                errnos.entry((k.tgid, k.tid, k.nr)).or_default().push((errno_name(k.err), u64_at(&v, 0)));
            }
        }
        let mut out = Vec::new();
        for k in self.skel.maps.stats.keys() {
            let Ok(Some(v)) = self.skel.maps.stats.lookup(&k, MapFlags::ANY) else { continue };
            if v.len() < std::mem::size_of::<ws_stat>() {
                continue;
            }
            let (k, v): (ws_key, ws_stat) = (plain(&k), plain(&v));
            let (pid, tid, nr) = (k.tgid, k.tid, k.nr);
            let mut e = errnos.remove(&(pid, tid, nr)).unwrap_or_default();
            e.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            out.push(SyscallStat {
                pid,
                tid,
                name: syscall_name(nr).map(str::to_string).unwrap_or_else(|| format!("syscall_{nr}")),
                calls: v.calls,
                errors: v.errors,
                errnos: e,
                total_ns: v.total_ns,
                max_ns: v.max_ns,
                hist: v.hist[..HIST_BUCKETS].to_vec(),
                bytes: v.bytes,
            });
        }
        out.sort_by(|a, b| (a.pid, a.tid, &a.name).cmp(&(b.pid, b.tid, &b.name)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{decode_stack, SyscallProbe};
    use crate::bpf::{bytes_of, StackSampling, UserSampleRec, USTACK_OFFSET};
    use std::mem::MaybeUninit;
    use whyslow_convert::records::Record;

    /// A syscall's stack sample is the programs' shared record: the sample stands for the period under
    /// the syscall stacks' event id, with the syscall's number as its raw data.
    #[test]
    fn a_syscall_stack_sample_carries_its_number() {
        let mut r = Box::<UserSampleRec>::default();
        (r.time, r.tgid, r.tid, r.ustack_bytes, r.ip, r.sp, r.bp, r.ret) = (9, 3, 4, 2, 10, 20, 30, 232);
        r.ustack[..2].copy_from_slice(&[7, 8]);
        let st =
            StackSampling { period: 16, stack_bytes: 4096, ring_bytes: 1 << 20, first_id: 40, keyed: false };
        let t = decode_stack(&bytes_of(&*r)[..USTACK_OFFSET + 2], &st).expect("decodes");
        let Record::Sample(s) = t.record else { panic!("{:?}", t.record) };
        assert_eq!((t.time, s.pid, s.tid, s.id, s.period), (9, 3, 4, 40, 16));
        let g = s.regs.expect("regs");
        assert_eq!(([g.ip, g.sp, g.bp], s.stack), ([10, 20, 30], vec![7, 8]));
        assert_eq!(s.raw, 232u64.to_ne_bytes(), "epoll_wait's number");
        assert!(decode_stack(&bytes_of(&*r)[..USTACK_OFFSET - 1], &st).is_none(), "short");
    }

    /// The syscalls of a process that is not counted are seen while the counters are attached (they pay
    /// for them too) and not while detached; they are never counted as a target's. The cost measurement
    /// leaves its own syscalls out of both.
    #[test]
    fn other_processes_syscalls_are_seen_while_attached() {
        let mut obj = MaybeUninit::uninit();
        let mut p = SyscallProbe::load(&mut obj, &[], None).expect("syscall counters (needs root)");
        let mut target = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        p.track(target.id(), false).expect("track");
        p.measure_cost().expect("the cost measured (Linux 6.9 or later)");
        // SAFETY: getppid has no arguments and cannot fail.
        let getppid = |n| (0..n).for_each(|_| _ = std::hint::black_box(unsafe { libc::getppid() }));
        let before = p.seen();
        getppid(1000);
        assert_eq!(p.seen(), before, "detached: no syscall is seen");
        p.attach().expect("attach");
        let attached = p.seen();
        getppid(1000);
        let after = p.seen();
        p.detach();
        let _ = target.kill();
        let _ = target.wait();
        assert!(after.others - attached.others >= 1000, "{attached:?} -> {after:?}");
        let me = std::process::id();
        assert!(p.stats().iter().all(|s| s.pid != me), "this thread is no target: {:?}", p.stats());
    }
}
