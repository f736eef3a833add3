//! Records in: the state machine that feeds each record (mmap, comm, fork, exit, sample, switch, lost)
//! to the state it changes, and turns a sample into a stack and values by what its event means.

use crate::alloc::STACKS_PER_KEY;
use crate::process::{Blocked, Proc, EXITED_GRACE_NS};
use crate::records::{Record, SampleRef, Timed, UserRegs};
use crate::{Converter, Host, Mapping, Stream};
use std::borrow::Cow;
use std::collections::HashMap;
use whyslow_model::raw::{RawFrame, RawThread};
use whyslow_model::syscalls::syscall_name;
use whyslow_model::FrameKind;
use whyslow_unwind::{Goroutine, Outcome, Regs};

pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl<H: Host> Converter<H> {
    /// Handles records from several rings: in time order, so a mapping is known before the samples
    /// that use it. `ids` maps a sample's event id to its stream index.
    pub fn handle_batch(&mut self, mut batch: Vec<Timed>, ids: &HashMap<u64, usize>) {
        batch.sort_by_key(|t| t.time);
        for t in batch {
            self.handle(t, ids);
        }
    }

    pub fn handle(&mut self, t: Timed, ids: &HashMap<u64, usize>) {
        self.forget_due(t.time);
        match t.record {
            Record::Sample(s) => self.sample_of(s.borrowed(), t.time, ids),
            Record::OffCpu { sample, ns } => {
                if let Some(stream) = self.offcpu {
                    self.sample(sample.borrowed(), stream, t.time, Some(ns))
                }
            }
            Record::Switch { tid, out: false } => self.switched_in(tid, t.time),
            Record::Switch { .. } | Record::Other => {}
            Record::Mmap { exec: false, .. } => {}
            Record::Mmap { pid, start, len, pgoff, path, .. } => {
                if !self.lazy {
                    self.add_mapping(pid, start, start.saturating_add(len), pgoff, &path);
                } else if let Some(p) = self.procs.get_mut(&pid) {
                    match &mut p.pending {
                        Some(pending) => {
                            pending.push(Mapping { start, end: start.saturating_add(len), pgoff, path })
                        }
                        None => self.add_mapping(pid, start, start.saturating_add(len), pgoff, &path),
                    }
                }
                // (Lazily, a process not described yet is read whole at its first sample.)
            }
            Record::Comm { pid, tid, name, exec } => {
                if exec {
                    // A new program image: the old address space is gone.
                    let fresh = if self.lazy { Proc::lazy() } else { Proc::default() };
                    self.procs.insert(pid, fresh);
                }
                self.raw.thread_names.insert((pid, tid), name);
            }
            Record::Fork { pid, ppid, tid, ptid } => {
                let reused = self.exited.iter().position(|&(p, _)| p == pid);
                if let Some(i) = reused {
                    // A new process under the pid of one that exited moments ago.
                    self.exited.swap_remove(i);
                    self.procs.remove(&pid);
                }
                if pid != ppid && !self.procs.contains_key(&pid) {
                    match self.procs.get(&ppid).map(Proc::fork) {
                        Some(child) => {
                            self.procs.insert(pid, child);
                        }
                        // Lazily, the child of a process not described is read at its first sample.
                        None if self.lazy => {}
                        None => {
                            self.procs.insert(pid, Proc::default());
                        }
                    }
                    self.raw.forks.push((pid, ppid));
                }
                if let Some(name) = self.raw.thread_names.get(&(ppid, ptid)).cloned() {
                    self.raw.thread_names.entry((pid, tid)).or_insert(name);
                }
            }
            Record::Exit { pid, tid } => {
                // A thread that ends while blocked was blocked until then.
                if let Some(b) = self.blocked.remove(&tid) {
                    self.add_blocked(b, t.time);
                }
                if pid == tid && !self.retain_exited {
                    self.exited.push((pid, t.time));
                }
            }
            Record::Lost(n) => self.counters.lost += n,
        }
    }

    /// Forgets the processes that exited long enough before `time`, the time of the record at hand.
    fn forget_due(&mut self, time: u64) {
        // Exits arrive in time order: only when the oldest is due is there anything to forget.
        if self.exited.first().is_some_and(|&(_, at)| time >= at.saturating_add(EXITED_GRACE_NS)) {
            self.forget_exited(time);
        }
    }

    /// A sample whose bytes stay the source's (handled like [`Record::Sample`] in [`Converter::handle`]):
    /// a perf.data file or a ring buffer read in place.
    pub fn handle_sample(&mut self, s: SampleRef<'_>, time: u64, ids: &HashMap<u64, usize>) {
        self.forget_due(time);
        self.sample_of(s, time, ids)
    }

    fn sample_of(&mut self, s: SampleRef<'_>, time: u64, ids: &HashMap<u64, usize>) {
        if let Some(&stream) = ids.get(&s.id).and_then(|&k| self.streams.get(k)) {
            self.sample(s, stream, time, None)
        }
    }

    /// Makes process `pid`'s unwinder ready for a stack of it: the process added when it is new, the
    /// mappings kept for its first sample (see [`Converter::lazily`]) read.
    pub(crate) fn ready(&mut self, pid: u32) {
        match self.procs.get_mut(&pid) {
            None => self.add_process(pid),
            Some(p) => {
                if let Some(pending) = p.pending.take() {
                    for m in pending {
                        self.add_mapping(pid, m.start, m.end, m.pgoff, &m.path);
                    }
                }
            }
        }
    }

    /// `offcpu_ns`: the blocked time of an off-CPU sample whose block already ended (else it is valued
    /// when the thread runs again).
    pub(crate) fn sample(&mut self, s: SampleRef<'_>, stream: Stream, time: u64, offcpu_ns: Option<u64>) {
        let (mut stack, mut values) = (std::mem::take(&mut self.stack), std::mem::take(&mut self.values));
        stack.clear();
        values.clear();
        values.resize(self.raw.sample_types.len(), 0);
        self.sample_into(s, stream, time, offcpu_ns, &mut stack, &mut values);
        (self.stack, self.values) = (stack, values);
    }

    /// [`Converter::sample`] with its stack and values built in the buffers given (empty, and zeros).
    fn sample_into(
        &mut self,
        s: SampleRef<'_>,
        stream: Stream,
        time: u64,
        offcpu_ns: Option<u64>,
        stack: &mut Vec<RawFrame>,
        values: &mut [i64],
    ) {
        self.counters.samples += 1;
        // A sample of a thread means it runs: a block whose switch-in no record showed (a perf.data file
        // of sched_switch alone holds only the switch-outs of the threads it follows) ends here.
        if let Some(b) = self.blocked.remove(&s.tid) {
            self.add_blocked(b, time);
        }
        self.ready(s.pid);
        let p = self.procs.get_mut(&s.pid).expect("inserted above");
        if !p.sampled && self.lazy {
            p.sampled = true;
            self.first_sampled.push(s.pid);
        }
        if !self.raw.thread_names.contains_key(&(s.pid, s.tid)) {
            let name = self.host.thread_name(s.pid, s.tid).unwrap_or_default();
            self.raw.thread_names.insert((s.pid, s.tid), name);
        }
        // A probe in a function: its first frame is the function itself, replaced by the label.
        let mut skip_leaf = false;
        match stream {
            Stream::Cpu { slot } => {
                values[slot] = 1;
                values[slot + 1] = s.period as i64;
                stack.extend(s.kernel.iter().map(|&a| RawFrame::Kernel(a)));
            }
            // An event sampled every Nth hit stands for N hits.
            Stream::Syscalls { slot } => {
                values[slot] = s.period as i64;
                let nr = u64_at(s.raw, 0).unwrap_or(u64::MAX) as u32;
                let name: Cow<str> =
                    syscall_name(nr).map_or_else(|| format!("syscall_{nr}").into(), Cow::Borrowed);
                stack.push(RawFrame::Label(self.raw.label(&name, "[syscall]", FrameKind::Kernel)));
            }
            Stream::Call { slot, probe } => {
                values[slot] = s.period as i64;
                skip_leaf = true;
                let (name, module) =
                    self.probe_names.get(probe).map_or(("", ""), |(n, m)| (n.as_str(), m.as_str()));
                stack.push(RawFrame::Label(self.raw.label(name, module, FrameKind::User)));
            }
            Stream::OffCpu { state_offset, .. } => {
                let state = s.raw.get(state_offset..state_offset.saturating_add(8)); // the offset is from the file
                let state = state.map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")));
                // TASK_RUNNING (0): preempted, so waiting for a CPU rather than blocked; marked as such so
                // the wall view still adds up and the two can be told apart.
                if state & 0xff == 0 {
                    stack.push(RawFrame::Label(self.raw.label(
                        whyslow_model::PREEMPTED_FRAME,
                        "[sched]",
                        FrameKind::Kernel,
                    )));
                }
                stack.extend(s.kernel.iter().map(|&a| RawFrame::Kernel(a)));
            }
            Stream::Events { slot } => {
                values[slot] = 1;
                stack.extend(s.kernel.iter().map(|&a| RawFrame::Kernel(a)));
            }
            Stream::Alloc { slot, probe, size } => {
                let bytes = s.regs.as_ref().map_or(0, |r| size.bytes(r));
                values[slot] = s.period as i64;
                values[slot + 1] = bytes.saturating_mul(s.period).min(i64::MAX as u64) as i64;
                skip_leaf = true;
                let (name, module) =
                    self.alloc_names.get(probe).map_or(("", ""), |(n, m)| (n.as_str(), m.as_str()));
                stack.push(RawFrame::Label(self.raw.label(name, module, FrameKind::User)));
            }
        }
        if let Some(UserRegs { bp, sp, ip, .. }) = s.regs {
            let proc = self.procs.get_mut(&s.pid).expect("inserted above");
            let (own, goroutine) = match s.goroutine {
                Some(g) if g.offset <= s.stack.len() => {
                    let (own, rest) = s.stack.split_at(g.offset);
                    (
                        own,
                        Some(Goroutine {
                            at: g.at,
                            stack: rest,
                            parked: g.parked.map(|(ip, bp)| Regs { ip, sp: g.at, bp }),
                        }),
                    )
                }
                _ => (s.stack, None),
            };
            let outcome = proc.unwinder.unwind(Regs { ip, sp, bp }, own, goroutine, &mut self.frames);
            let interpreted = proc.unwinder.interpreted().to_vec();
            let mut cut = outcome == Outcome::Partial;
            if self.frames.is_empty() {
                self.frames.push(ip);
            }
            // Past the leaf, an address in no executable mapping is not a return address but data the
            // unwinder read: the stack is cut there.
            let known = !proc.maps.is_empty();
            let all = std::mem::take(&mut self.frames);
            stack.reserve(all.len() + 1);
            // Each native frame of CPython's eval loop stands for the Python frames that call runs.
            let frames = &all[(skip_leaf as usize).min(all.len())..];
            let mut python = self.python_frames(s.pid, time, s.python, frames, cut);
            for (i, &a) in frames.iter().enumerate() {
                if let Some(py) = python.runs.get_mut(i).and_then(Option::take) {
                    stack.extend(py);
                    continue;
                }
                let mut f = self.jit_frame(s.pid, a, time);
                if let Some(&(_, method)) = interpreted.iter().find(|(j, _)| *j == i + skip_leaf as usize) {
                    f = self.interpreted_frame(s.pid, method).unwrap_or(f);
                }
                if i + skip_leaf as usize > 0 && known && matches!(f, RawFrame::Unmapped(_)) {
                    cut = true;
                    break;
                }
                stack.push(f);
            }
            // Callers the native stack did not reach (it was cut).
            stack.extend(python.rest);
            self.frames = all;
            if cut {
                self.counters.unwind.partial += 1;
                let label = self.raw.label(whyslow_model::CUT_FRAME, "[unwind]", FrameKind::Unknown);
                stack.push(RawFrame::Label(label));
            } else {
                self.counters.unwind.complete += 1;
            }
        } else if !s.user.is_empty() {
            for &a in s.user.iter().skip(skip_leaf as usize) {
                let f = self.jit_frame(s.pid, a, time);
                stack.push(f);
            }
        }
        if matches!(stream, Stream::Alloc { .. }) && self.nested(stack.get(1)) {
            return;
        }
        let thread = RawThread { pid: s.pid, tid: s.tid };
        if let (Stream::Alloc { probe, .. }, Some(ret), Some(id)) =
            (stream, u64_at(s.raw, 0), u64_at(s.raw, 8))
        {
            // A sample of a stack key: it names the stack of the key's exact counts (added with them).
            let kept = self.alloc_stacks.entry((s.pid, probe as u32, ret, id)).or_default();
            match kept.iter().position(|(f, t, _)| f == stack && *t == thread) {
                Some(i) => kept[i].2 += s.period,
                None if kept.len() < STACKS_PER_KEY => kept.push((stack.clone(), thread, s.period)),
                None => kept[0].2 += s.period,
            }
            return;
        }
        if let (Stream::OffCpu { slot, .. }, Some(ns)) = (stream, offcpu_ns) {
            values[slot] = ns.min(i64::MAX as u64) as i64;
            let time = self.slice(time);
            self.raw.add(stack, &thread, time, values);
        } else if matches!(stream, Stream::OffCpu { .. }) {
            // Valued when the thread runs again.
            self.blocked.insert(s.tid, Blocked { since: time, stack: stack.clone(), thread });
        } else {
            let time = self.slice(time);
            self.raw.add(stack, &thread, time, values);
        }
    }
}
