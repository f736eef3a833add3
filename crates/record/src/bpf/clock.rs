//! The filter of the per-CPU clock events (bpf/clock.bpf.c): the kernel keeps a sample only when it
//! interrupted a tracked process, and sends the goroutine stack of a Go thread sampled on the runtime's
//! system stack, or the rest of another thread's stack where it is deeper than the sample's copy (its
//! tail), which [`ClockFilter::join_goroutines`] adds to its sample, and the Python frames of a CPython
//! process's thread (bpf/python.h), which it adds too.

use super::clock_skel::types::ws_goroutine as Gor;
use super::clock_skel::types::{ws_py_frame as PyFr, ws_py_proc, ws_pystack as PyStack};
use super::clock_skel::{ClockSkel, ClockSkelBuilder, OpenClockSkel};
use super::{check_btf, classify, quiet_libbpf, u32_at, u64_at};
use crate::records::InRing;
use crate::RecordError;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{OpenObject, RingBuffer, RingBufferBuilder};
use std::cell::RefCell;
use std::mem::{offset_of, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd};
use std::rc::Rc;
use whyslow_convert::records::{GoroutineStack, PyFrame, Record, Sample, Timed};
use whyslow_python::Layout;

/// Where `struct ws_goroutine`'s stack bytes start (bpf/clock.bpf.c; the generated type has its layout).
const STACK_OFFSET: usize = offset_of!(Gor, stack);
/// The bytes of a goroutine stack sent at most (GO_COPY in bpf/clock.bpf.c): GO_BELOW below the frame
/// pointer the chain leads to, where the unwinder looks for a switching function's caller, and 8 KB up.
const GO_COPY: u64 = GO_BELOW + 8192;
/// GO_BELOW in bpf/go.h.
const GO_BELOW: u64 = 1024;
const _: () = assert!(GO_BELOW == whyslow_unwind::GO_SWITCH_BELOW);
/// The program that runs for a sample sends its goroutine stack within this long after the sample's time
/// (a few microseconds; a thread's samples are further apart).
const JOIN_NS: u64 = 200_000;

/// A goroutine stack, or a tail, the kernel sent for the next clock sample of thread `tid`.
struct Goroutine {
    time: u64,
    tid: u32,
    /// Where the bytes were copied from (a tail: where the sample's own copy ends).
    bp: u64,
    /// The rest of the thread's own stack, not a goroutine's.
    tail: bool,
    /// The goroutine's saved pc and frame pointer, where it was read from the registers it saved.
    parked: Option<(u64, u64)>,
    bytes: Vec<u8>,
    /// Drains it has waited for its sample.
    waited: u8,
}

/// Where `struct ws_pystack`'s frames start, and the size of one (bpf/python.h).
const PY_FRAMES_OFFSET: usize = offset_of!(PyStack, frame);
const PY_FRAME_BYTES: usize = std::mem::size_of::<PyFr>();
/// The most a sample's Python frames take in the ring (bpf/python.h PY_FRAMES).
const PY_STACK_BYTES: u64 = (PY_FRAMES_OFFSET + 64 * PY_FRAME_BYTES) as u64;

/// The Python frames the kernel sent for the next clock sample of thread `tid`.
pub(super) struct PyPending {
    time: u64,
    tid: u32,
    pub(super) frames: Vec<PyFrame>,
    waited: u8,
}

/// Decodes a `struct ws_pystack` record.
pub(super) fn decode_pystack(d: &[u8]) -> Option<PyPending> {
    if d.len() < PY_FRAMES_OFFSET {
        return None;
    }
    let n =
        (u32_at(d, offset_of!(PyStack, frames)) as usize).min((d.len() - PY_FRAMES_OFFSET) / PY_FRAME_BYTES);
    let entry = u64_at(d, offset_of!(PyStack, entry));
    let frames = (0..n)
        .map(|k| {
            let at = PY_FRAMES_OFFSET + k * PY_FRAME_BYTES;
            PyFrame {
                code: u64_at(d, at + offset_of!(PyFr, code)),
                instr: u64_at(d, at + offset_of!(PyFr, instr)),
                entry: entry >> k & 1 == 1,
                name: u64_at(d, at + offset_of!(PyFr, name)),
                hash: u64_at(d, at + offset_of!(PyFr, hash)),
            }
        })
        .collect();
    Some(PyPending {
        time: u64_at(d, offset_of!(PyStack, time)),
        tid: u32_at(d, offset_of!(PyStack, tid)),
        frames,
        waited: 0,
    })
}

/// A `py_procs` entry (bpf/python.h, shared by the programs that read Python frames): the CPython whose
/// `_PyRuntime` is at `runtime`, its structs laid out as `layout` says.
pub(super) fn py_proc(runtime: u64, layout: &Layout) -> ws_py_proc {
    ws_py_proc {
        runtime,
        interpreters_head: layout.runtime_interpreters_head,
        interp_next: layout.interp_next,
        interp_threads_head: layout.interp_threads_head,
        tstate_next: layout.tstate_next,
        tstate_thread_id: layout.tstate_thread_id,
        tstate_frame: layout.tstate_frame,
        cframe_current_frame: layout.cframe_current_frame.map_or(0, |o| o + 1),
        frame_previous: layout.frame_previous,
        frame_code: layout.frame_code,
        frame_instr: layout.frame_instr,
        frame_owner: layout.frame_owner,
        code_name: layout.code_name_field(),
        unicode_hash: layout.unicode_hash(),
        minor: layout.minor,
        ..Default::default()
    }
}

/// Loaded filter, following forks and execs of the tracked processes; detached when dropped.
pub struct ClockFilter<'obj> {
    skel: ClockSkel<'obj>,
    ring: RingBuffer<'static>,
    pending: Rc<RefCell<Vec<Goroutine>>>,
    py_pending: Rc<RefCell<Vec<PyPending>>>,
    /// The user stack each sample copies.
    stack_bytes: usize,
    /// Whether it reads Python frames (loaded with `python`).
    python: bool,
}

impl<'obj> ClockFilter<'obj> {
    /// `stack_bytes`: the user stack each sample copies; `frequency`: samples per second and CPU; `go`:
    /// whether a Go program may be tracked (goroutine stacks need a ring and code the verifier checks:
    /// neither is there otherwise); `python`: whether a CPython program may be, likewise for its Python
    /// frames ([`ClockFilter::track_python`] refuses without); `all`: every process's
    /// samples are kept, tracked or not (a whole-host recording, for its Python frames).
    pub fn load(
        obj: &'obj mut MaybeUninit<OpenObject>,
        stack_bytes: u32,
        frequency: u64,
        go: bool,
        python: bool,
        all: bool,
    ) -> Result<Self, RecordError> {
        check_btf()?;
        quiet_libbpf();
        let mut open: OpenClockSkel =
            ClockSkelBuilder::default().open(obj).map_err(|e| classify("open", e))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.stack_bytes = u64::from(stack_bytes);
            ro.keep_all = all;
            ro.go_on = go;
            ro.python_on = python;
        }
        // A quarter second of goroutine stacks should every sample have one (drained every 100 ms); the
        // whole ring counts in resident memory, twice (it is mapped twice).
        let cpus = crate::sys::online_cpus().len() as u64;
        // Without Go, tails only, which most stacks do not need: 512 KB, which wakes the reader at 128 KB
        // and leaves it six of the largest while it wakes (a tail that finds the ring full is not sent:
        // its sample's stack is cut, and counted so); an agent loads one per session. The 4 MB ring took
        // a third of loading this program (mapping and zeroing).
        let ring = match go {
            true => (frequency * cpus * GO_COPY / 4).next_power_of_two().clamp(1 << 19, 1 << 22),
            false => 1 << 19,
        };
        open.maps.goroutines.set_max_entries(ring as u32).map_err(|e| classify("ring buffer", e))?;
        // A stack being sent per CPU, by its id.
        let possible = libbpf_rs::num_possible_cpus().map_err(|e| classify("scratch", e))?;
        open.maps.scratch.set_max_entries(possible as u32).map_err(|e| classify("scratch", e))?;
        // A quarter second of Python stacks of the deepest kind, likewise.
        let py_ring = match python {
            true => (frequency * cpus * PY_STACK_BYTES / 4).next_power_of_two().clamp(1 << 16, 1 << 22),
            false => 4096,
        };
        open.maps.pystacks.set_max_entries(py_ring as u32).map_err(|e| classify("ring buffer", e))?;
        let mut skel = open.load().map_err(|e| classify("load", e))?;
        // Attaches the fork and exec hooks; the filter itself is attached to each event by the caller.
        skel.attach().map_err(|e| classify("attach", e))?;
        let pending = Rc::new(RefCell::new(Vec::new()));
        let sink = pending.clone();
        let mut b = RingBufferBuilder::new();
        b.add(&skel.maps.goroutines, move |d: &[u8]| {
            if d.len() >= STACK_OFFSET {
                let n = (u32_at(d, offset_of!(Gor, bytes)) as usize).min(d.len() - STACK_OFFSET);
                let bytes = d[STACK_OFFSET..STACK_OFFSET + n].to_vec();
                sink.borrow_mut().push(Goroutine {
                    time: u64_at(d, offset_of!(Gor, time)),
                    tid: u32_at(d, offset_of!(Gor, tid)),
                    bp: u64_at(d, offset_of!(Gor, bp)),
                    tail: u32_at(d, offset_of!(Gor, tail)) != 0,
                    parked: match u64_at(d, offset_of!(Gor, pc)) {
                        0 => None,
                        pc => Some((pc, u64_at(d, offset_of!(Gor, parked_bp)))),
                    },
                    bytes,
                    waited: 0,
                });
            }
            0
        })
        .map_err(|e| classify("ring buffer", e))?;
        let py_pending = Rc::new(RefCell::new(Vec::new()));
        let py_sink = py_pending.clone();
        b.add(&skel.maps.pystacks, move |d: &[u8]| {
            py_sink.borrow_mut().extend(decode_pystack(d));
            0
        })
        .map_err(|e| classify("ring buffer", e))?;
        let ring = b.build().map_err(|e| classify("ring buffer", e))?;
        Ok(ClockFilter { skel, ring, pending, py_pending, stack_bytes: stack_bytes as usize, python })
    }

    /// Keeps the samples of process `pid` (from its exec on when `launched`) and of the processes it forks;
    /// with their goroutine stacks when it runs Go (`go`).
    pub fn track(&self, pid: u32, launched: bool, go: bool) -> Result<(), RecordError> {
        super::track_go(&self.skel.maps.go_procs, pid, go)?;
        super::track(&self.skel.maps.tracked, pid, launched)
    }

    /// Reads the Python frames of process `pid`'s samples from now on: its CPython's `_PyRuntime` is at
    /// `runtime`, its structs are laid out as `layout` says.
    pub fn track_python(&self, pid: u32, runtime: u64, layout: &Layout) -> Result<(), RecordError> {
        if !self.python {
            return Err(RecordError::Bpf(
                "the clock's filter was loaded without Python frames (the command launched is not Python)"
                    .into(),
            ));
        }
        super::track_python(&self.skel.maps.py_procs, pid, runtime, layout)
    }

    /// Drops the samples of process `pid` from now on.
    pub fn untrack(&self, pid: u32) {
        super::untrack(&self.skel.maps.tracked, &self.skel.maps.go_procs, pid);
    }

    /// What the reader polls beside the perf rings: readable once a quarter of a ring of goroutine
    /// stacks, tails or Python frames has filled.
    pub fn wake_fd(&self) -> i32 {
        self.ring.epoll_fd()
    }

    /// The program to attach to each clock event (PERF_EVENT_IOC_SET_BPF).
    pub fn program_fd(&self) -> i32 {
        self.skel.progs.keep.as_fd().as_raw_fd()
    }

    /// Adds to each clock sample in `batch` or `in_ring` (`clock` tells their event ids) the goroutine
    /// stack or tail sent for it: the thread's sample timed right before the stack was sent (one read in
    /// place is copied into `batch` first, its stack to be extended). A tail extends the sample's own
    /// stack where its full copy ends. Call after reading the samples: the stack of each is sent before
    /// the sample is written. A stack whose sample is not in this batch waits for the next.
    pub fn join_goroutines(
        &self,
        batch: &mut Vec<Timed>,
        in_ring: &mut Vec<InRing<'_>>,
        clock: impl Fn(u64) -> bool,
    ) {
        // Reads what is there without waiting: no epoll_wait per drain.
        let _ = self.ring.consume();
        self.pending.borrow_mut().retain_mut(|g| {
            let near = |s: &Sample, time: u64| {
                s.tid == g.tid && clock(s.id) && time <= g.time && g.time - time < JOIN_NS
            };
            if let Some(i) = in_ring.iter().position(|r| near(&r.sample, r.time)) {
                batch.push(in_ring.swap_remove(i).owned());
            }
            let sample = batch.iter_mut().find_map(|t| match &mut t.record {
                Record::Sample(s) if near(s, t.time) => Some(s),
                _ => None,
            });
            if let Some(s) = sample {
                if !g.tail {
                    s.goroutine = Some(GoroutineStack { at: g.bp, offset: s.stack.len(), parked: g.parked });
                    s.stack.append(&mut g.bytes);
                } else if s.stack.len() == self.stack_bytes
                    && s.regs.is_some_and(|r| r.sp.wrapping_add(self.stack_bytes as u64) == g.bp)
                {
                    // Where the sample's copy ends: one stack, longer.
                    s.stack.append(&mut g.bytes);
                }
                return false;
            }
            g.waited += 1;
            g.waited < 2
        });
        // Python frames likewise (a sample read in place stays there: its stack does not change).
        self.py_pending.borrow_mut().retain_mut(|p| {
            let near = |s: &Sample, time: u64| {
                s.tid == p.tid && clock(s.id) && time <= p.time && p.time - time < JOIN_NS
            };
            let owned = batch.iter_mut().filter_map(|t| match &mut t.record {
                Record::Sample(s) => Some((t.time, s)),
                _ => None,
            });
            let sample = owned
                .chain(in_ring.iter_mut().map(|r| (r.time, &mut r.sample)))
                .find_map(|(time, s)| near(s, time).then_some(s));
            if let Some(s) = sample {
                s.python = std::mem::take(&mut p.frames);
                return false;
            }
            p.waited += 1;
            p.waited < 2
        });
    }
}
