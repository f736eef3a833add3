//! Memory in use of a running process from bpf/mem.bpf.c: entry and return probes on its allocation
//! functions, entry probes on its frees (one uprobe.multi link per module, program and process, the
//! probe index as the attach cookie), allocations sampled by bytes in the kernel and the sampled ones
//! sent with their stacks, the frees of sampled addresses sent too. [`crate::mem_attach`] pairs them.

use super::mem_skel::types::{ws_mem_alloc as Alloc, ws_mem_event as Event, ws_mem_how, ws_mem_site};
use super::mem_skel::{MemSkel, MemSkelBuilder, OpenMemSkel};
use super::{check_btf, classify, drops_total, quiet_libbpf, u32_at, u64_at, STACK_MAX};
use crate::allocators::{MemHow, MemSite};
use crate::calls::{HitCost, Probe};
use crate::RecordError;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, UprobeMultiOpts};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::mem::{offset_of, MaybeUninit};
use std::path::PathBuf;
use std::rc::Rc;
use whyslow_convert::records::UserRegs;

/// bpf/mem.bpf.c's interval table's size.
const INTERVALS: u32 = 4096;
const USTACK_OFFSET: usize = offset_of!(Alloc, ustack);
const _: () = assert!(std::mem::size_of::<Alloc>() - USTACK_OFFSET >= STACK_MAX as usize);
/// Slots of the program's `drops` and `hits` counters.
const DROP_RING: usize = 0;
const DROP_LIVE: usize = 1;
const HIT_ALLOC: usize = 0;
const HIT_FREE: usize = 1;
const HIT_RETURN: usize = 2;

/// What the program sent, in the order it sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemEvent {
    /// A sampled allocation's entry: its size, registers and user stack.
    Alloc { pid: u32, tid: u32, time: u64, entry: u32, size: u64, regs: UserRegs, stack: Vec<u8> },
    /// Its return on thread `tid`: the address (0: it failed, or the kernel could not keep it).
    Done { pid: u32, tid: u32, time: u64, addr: u64 },
    /// A sampled address freed.
    Freed { pid: u32, time: u64, addr: u64 },
}

/// Probe hits so far: entries of allocation functions, of frees, and returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemHits {
    pub allocs: u64,
    pub frees: u64,
    pub returns: u64,
}

fn decode(b: &[u8]) -> Option<MemEvent> {
    if b.len() < std::mem::size_of::<Event>() {
        return None;
    }
    let (pid, tid) = (u32_at(b, offset_of!(Event, tgid)), u32_at(b, offset_of!(Event, tid)));
    let (time, addr) = (u64_at(b, offset_of!(Event, time)), u64_at(b, offset_of!(Event, addr)));
    Some(match u32_at(b, offset_of!(Event, kind)) {
        1 if b.len() >= USTACK_OFFSET => {
            let bytes = (u32_at(b, offset_of!(Alloc, ustack_bytes)) as usize).min(b.len() - USTACK_OFFSET);
            let regs = UserRegs {
                ip: u64_at(b, offset_of!(Alloc, ip)),
                sp: u64_at(b, offset_of!(Alloc, sp)),
                bp: u64_at(b, offset_of!(Alloc, bp)),
                ..UserRegs::default()
            };
            MemEvent::Alloc {
                pid,
                tid,
                time,
                entry: u32_at(b, offset_of!(Event, entry)),
                size: u64_at(b, offset_of!(Event, size)),
                regs,
                stack: b[USTACK_OFFSET..USTACK_OFFSET + bytes].to_vec(),
            }
        }
        2 => MemEvent::Done { pid, tid, time, addr },
        3 => MemEvent::Freed { pid, time, addr },
        _ => return None,
    })
}

fn site(s: &MemSite) -> ws_mem_site {
    let how = match s.how {
        MemHow::Free => ws_mem_how::WS_MEM_FREE,
        MemHow::SizeRdi => ws_mem_how::WS_MEM_SIZE_RDI,
        MemHow::SizeRsi => ws_mem_how::WS_MEM_SIZE_RSI,
        MemHow::Product => ws_mem_how::WS_MEM_SIZE_PRODUCT,
        MemHow::Realloc => ws_mem_how::WS_MEM_REALLOC,
        MemHow::Reallocarray => ws_mem_how::WS_MEM_REALLOCARRAY,
        MemHow::PosixMemalign => ws_mem_how::WS_MEM_POSIX_MEMALIGN,
    };
    ws_mem_site { how, entry: s.entry as u32 }
}

/// The sampling intervals of mean `mean` bytes: the quantiles of the exponential distribution at the
/// middles of INTERVALS equal slices of probability, so a uniform pick among them is an exponential draw
/// (a Poisson process of allocated bytes, which the estimates assume).
fn intervals(mean: u64) -> Vec<u64> {
    (0..INTERVALS)
        .map(|i| {
            let u = (f64::from(i) + 0.5) / f64::from(INTERVALS);
            ((-(1.0 - u).ln() * mean as f64) as u64).max(1)
        })
        .collect()
}

/// The loaded memory probes; the links detach when dropped.
pub struct MemProbe<'obj> {
    skel: MemSkel<'obj>,
    /// The exec and exit hooks of the `tracked` map.
    _hooks: Vec<Link>,
    /// Return links (attached first, so that every counted entry has its return), then entry links, each
    /// with the process it was attached for.
    returns: Vec<(u32, Link)>,
    entries: Vec<(u32, Link)>,
    /// Detached for good (the probe budget was spent): processes followed later get no probes.
    stopped: bool,
    /// The programs' (run time ns, runs) when the run began: their runs since are the run's.
    stats_at: [Option<(u64, u64)>; 2],
    ring: libbpf_rs::RingBuffer<'static>,
    events: Rc<RefCell<Vec<MemEvent>>>,
}

impl<'obj> MemProbe<'obj> {
    /// Loads the programs: allocations sampled one every `sample_bytes` on average (0: every one), each
    /// sampled one with up to `stack_bytes` of its user stack, through a ring of `ring_bytes`; `sites`, one
    /// per probe index.
    pub fn load(
        obj: &'obj mut MaybeUninit<OpenObject>,
        sample_bytes: u64,
        stack_bytes: u32,
        ring_bytes: usize,
        sites: &[MemSite],
    ) -> Result<Self, RecordError> {
        check_btf()?;
        quiet_libbpf();
        let mut open: OpenMemSkel = MemSkelBuilder::default().open(obj).map_err(|e| classify("open", e))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.sample_bytes = sample_bytes;
            ro.stack_bytes = stack_bytes.min(STACK_MAX);
        }
        super::RecordRing::size(&mut open.maps.events, ring_bytes)?;
        let skel = open.load().map_err(|e| classify("load", e))?;
        for (i, s) in sites.iter().enumerate() {
            let value = site(s);
            skel.maps
                .sites
                .update(&(i as u32).to_ne_bytes(), super::bytes_of(&value), MapFlags::ANY)
                .map_err(|e| classify("memory probe sites", e))?;
        }
        if sample_bytes > 0 {
            for (i, v) in intervals(sample_bytes).into_iter().enumerate() {
                skel.maps
                    .intervals
                    .update(&(i as u32).to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)
                    .map_err(|e| classify("sampling intervals", e))?;
            }
        }
        let events = Rc::new(RefCell::new(Vec::new()));
        let sink = events.clone();
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(&skel.maps.events, move |data: &[u8]| {
            if let Some(e) = decode(data) {
                sink.borrow_mut().push(e);
            }
            0
        })
        .map_err(|e| classify("ring buffer", e))?;
        let ring = b.build().map_err(|e| classify("ring buffer", e))?;
        let hooks = vec![
            skel.progs.on_exec.attach().map_err(|e| classify("attach exec hook", e))?,
            skel.progs.on_process_exit.attach().map_err(|e| classify("attach exit hook", e))?,
        ];
        Ok(MemProbe {
            skel,
            _hooks: hooks,
            returns: Vec::new(),
            entries: Vec::new(),
            stopped: false,
            stats_at: [None; 2],
            ring,
            events,
        })
    }

    /// What a probe hit costs here: the trap measured with this program on whyslow's own calibration
    /// functions (the program returns at once there), see [`super::calibrate`].
    pub fn measure_hits(&mut self) -> Option<HitCost> {
        let (cost, _) = super::calibrate::measure(&self.skel.progs.on_entry)?;
        self.mark_stats();
        Some(cost)
    }

    /// Counts the programs' runs from now on as the run's (see [`MemProbe::program_ns`]).
    fn mark_stats(&mut self) {
        use std::os::fd::AsFd;
        if super::calibrate::enable_stats() {
            self.stats_at = [
                super::calibrate::program_stats(&self.skel.progs.on_entry.as_fd()),
                super::calibrate::program_stats(&self.skel.progs.on_return.as_fd()),
            ];
        }
    }

    /// The (entry, return) programs' time per run in this run (None: no runs yet, or no statistics).
    pub fn program_ns(&self) -> [Option<f64>; 2] {
        use std::os::fd::AsFd;
        let progs = [self.skel.progs.on_entry.as_fd(), self.skel.progs.on_return.as_fd()];
        let mut out = [None; 2];
        for (i, fd) in progs.iter().enumerate() {
            if let (Some((t0, n0)), Some((t, n))) = (self.stats_at[i], super::calibrate::program_stats(fd)) {
                out[i] = (n > n0).then(|| t.saturating_sub(t0) as f64 / (n - n0) as f64);
            }
        }
        out
    }

    /// Counts the allocations of process `pid` from now on.
    pub fn track(&self, pid: u32) -> Result<(), RecordError> {
        super::track(&self.skel.maps.tracked, pid, false)
    }

    /// Attaches `probes` (with `sites`, one per probe) for process `pid`: the return probes of every
    /// module first, then the entry probes. A function the kernel cannot probe is skipped and named in
    /// the returned notes.
    pub fn attach(&mut self, probes: &[(Probe, MemSite)], pid: u32) -> Result<Vec<String>, RecordError> {
        let mut by_module: BTreeMap<&PathBuf, Vec<usize>> = BTreeMap::new();
        for (i, (p, _)) in probes.iter().enumerate() {
            by_module.entry(&p.module).or_default().push(i);
        }
        let mut notes = Vec::new();
        let mut usable: Vec<(&PathBuf, Vec<usize>)> = Vec::new();
        for (module, ids) in by_module {
            let allocs: Vec<usize> =
                ids.iter().copied().filter(|&i| probes[i].1.how != MemHow::Free).collect();
            let mut kept = ids.clone();
            if !allocs.is_empty() {
                match self.link(probes, &allocs, module, pid, true) {
                    Ok(l) => self.returns.push((pid, l)),
                    Err(e @ RecordError::BpfPermission(_)) => return Err(e),
                    Err(_) => {
                        // One at a time, to find and skip the ones that cannot be probed.
                        for &i in &allocs {
                            match self.link(probes, &[i], module, pid, true) {
                                Ok(l) => self.returns.push((pid, l)),
                                Err(_) => {
                                    kept.retain(|&k| k != i);
                                    notes.push(format!(
                                        "{} in {} cannot be probed here: its allocations are not counted",
                                        probes[i].0.name,
                                        module.display()
                                    ));
                                }
                            }
                        }
                    }
                }
            }
            usable.push((module, kept));
        }
        for (module, ids) in usable.into_iter().filter(|(_, ids)| !ids.is_empty()) {
            match self.link(probes, &ids, module, pid, false) {
                Ok(l) => self.entries.push((pid, l)),
                Err(e @ RecordError::BpfPermission(_)) => return Err(e),
                Err(_) => {
                    for &i in &ids {
                        match self.link(probes, &[i], module, pid, false) {
                            Ok(l) => self.entries.push((pid, l)),
                            Err(_) => notes.push(format!(
                                "{} in {} cannot be probed here: not counted",
                                probes[i].0.name,
                                module.display()
                            )),
                        }
                    }
                }
            }
        }
        Ok(notes)
    }

    fn link(
        &self,
        probes: &[(Probe, MemSite)],
        ids: &[usize],
        module: &PathBuf,
        pid: u32,
        retprobe: bool,
    ) -> Result<Link, RecordError> {
        let opts = UprobeMultiOpts {
            offsets: ids.iter().map(|&i| probes[i].0.offset as usize).collect(),
            cookies: ids.iter().map(|&i| i as u64).collect(),
            retprobe,
            ..Default::default()
        };
        let prog = if retprobe { &self.skel.progs.on_return } else { &self.skel.progs.on_entry };
        prog.attach_uprobe_multi_with_opts(pid as i32, module, "", opts).map_err(|e| {
            classify(&format!("attaching {} memory probes to {}", ids.len(), module.display()), e)
        })
    }

    /// Stops the probes: the entry probes go first (an entry then always has its return), the rest once
    /// the returned links are dropped. What was sent stays readable with [`MemProbe::drain`].
    pub fn detach(&mut self) -> Vec<Link> {
        self.stopped = true;
        drop(std::mem::take(&mut self.entries));
        std::mem::take(&mut self.returns).into_iter().map(|(_, l)| l).collect()
    }

    /// Whether the probes were detached for good ([`MemProbe::detach`]).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Stops the probes of process `pid` (a followed process that ended or was let go), entries first.
    pub fn release(&mut self, pid: u32) {
        self.entries.retain(|(p, _)| *p != pid);
        self.returns.retain(|(p, _)| *p != pid);
        let _ = self.skel.maps.tracked.delete(&pid.to_ne_bytes());
    }

    /// The events sent since the last call, in the order sent.
    pub fn drain(&mut self, into: &mut Vec<MemEvent>) {
        // Read without a syscall: the ring is drained on the reader's clock (bpf/rings.h).
        let _ = self.ring.consume();
        into.append(&mut self.events.borrow_mut());
    }

    /// Probe hits so far.
    pub fn hits(&self) -> MemHits {
        let rows = self.skel.maps.bss_data.as_deref().map(|b| &b.hits[..]);
        let n = |slot: usize| drops_total(rows, slot..slot + 1);
        MemHits { allocs: n(HIT_ALLOC), frees: n(HIT_FREE), returns: n(HIT_RETURN) }
    }

    /// (records the ring had no room for, sampled allocations the kernel's live set had no room for).
    pub fn lost(&self) -> (u64, u64) {
        let rows = self.skel.maps.bss_data.as_deref().map(|b| &b.drops[..]);
        (drops_total(rows, DROP_RING..DROP_RING + 1), drops_total(rows, DROP_LIVE..DROP_LIVE + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::{decode, intervals, Alloc, Event, MemEvent, INTERVALS, USTACK_OFFSET};
    use crate::bpf::bytes_of;

    #[test]
    fn the_intervals_are_exponential_with_the_mean_asked() {
        let v = intervals(524_288);
        assert_eq!(v.len(), INTERVALS as usize);
        let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
        // The slices' middles leave out a little of the far tail.
        assert!((mean / 524_288.0 - 1.0).abs() < 0.01, "{mean}");
        let median = v[v.len() / 2] as f64;
        assert!((median / (524_288.0 * 2f64.ln()) - 1.0).abs() < 0.01, "{median}");
    }

    #[test]
    fn events_decode_from_the_c_layout() {
        let mut a = Box::<Alloc>::default();
        (a.head.kind, a.head.tgid, a.head.tid, a.head.entry, a.head.time, a.head.size) = (1, 7, 8, 2, 99, 48);
        (a.ip, a.sp, a.bp, a.ustack_bytes) = (0x10, 0x20, 0x30, 3);
        a.ustack[..3].copy_from_slice(&[1, 2, 3]);
        let got = decode(&bytes_of(&*a)[..USTACK_OFFSET + 3]).expect("decodes");
        let MemEvent::Alloc { pid, tid, time, entry, size, regs, stack } = got else { panic!("{got:?}") };
        assert_eq!((pid, tid, time, entry, size), (7, 8, 99, 2, 48));
        assert_eq!((regs.ip, regs.sp, regs.bp), (0x10, 0x20, 0x30));
        assert_eq!(stack, [1, 2, 3]);
        let e = Event { kind: 3, tgid: 7, tid: 9, time: 5, addr: 0xabc, ..Default::default() };
        assert_eq!(decode(bytes_of(&e)), Some(MemEvent::Freed { pid: 7, time: 5, addr: 0xabc }));
        let e = Event { kind: 2, tgid: 7, tid: 9, time: 6, addr: 0xdef, ..Default::default() };
        assert_eq!(decode(bytes_of(&e)), Some(MemEvent::Done { pid: 7, tid: 9, time: 6, addr: 0xdef }));
        assert_eq!(decode(&bytes_of(&e)[..8]), None, "short");
    }
}
