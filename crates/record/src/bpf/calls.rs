//! Exact call counts (and optionally time per call) from bpf/calls.bpf.c: one uprobe.multi link per
//! (module, process) carrying every probed offset, the probe index as the attach cookie. Optionally the
//! stacks of every Nth call, sent by the same program (so removing the probes is removing the links:
//! one grace period, where a perf event per probe took one each, one after the other).

use super::calls_skel::types::{
    ws_alloc_role, ws_call_key, ws_call_val, ws_site_key, ws_site_val, ws_size_arg, ws_size_how,
    ws_stack_key, ws_stack_val,
};
use super::calls_skel::{CallsSkel, CallsSkelBuilder, OpenCallsSkel};
use super::{check_btf, classify, entries, quiet_libbpf, STACK_MAX};
use crate::allocators::{AllocRole, AllocSite};
use crate::calls::{HitCost, Probe};
use crate::RecordError;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, UprobeMultiOpts};
use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::path::PathBuf;
use whyslow_convert::records::{Record, Timed};
use whyslow_convert::SizeArg;

/// Attach-cookie bit of a probe whose hits are subtracted from its function's calls (bpf/calls.bpf.c).
const SUBTRACT: u64 = 1 << 63;

/// Counters of one probe in one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCount {
    pub pid: u32,
    pub probe: u32,
    pub calls: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Calls whose return was seen (the time is over these).
    pub timed: u64,
}

pub use whyslow_convert::SiteCount;

/// Counters in the program's `drops` array: calls or sites no counter could hold, stack samples the
/// ring had no room for.
const DROP_MAP: usize = 0;
const DROP_RING: usize = 1;

/// Stacks of every `period`th call of each probe (per CPU), `stack_bytes` of user stack each, as
/// samples with event id `first_id + probe`, through a ring of `ring_bytes`.
#[derive(Debug, Clone, Copy)]
pub struct StackSampling {
    pub period: u64,
    pub stack_bytes: u32,
    pub ring_bytes: usize,
    pub first_id: u64,
    /// Allocation stacks: one sample per (call site, stack id) key at its 1st, 2nd, 4th, ... hit and at
    /// least every `period`th after, each carrying its key (in `Sample::raw`, see [`StackCount`]) and
    /// the hits it stands for (its period), instead of every `period`th call.
    pub keyed: bool,
}

/// Calls and requested bytes of one allocation function from one call site and stack id, counted in the
/// kernel (bpf/calls.bpf.c `stack_counts`).
pub use whyslow_convert::StackCount;

/// Loaded call counters; the links detach when dropped.
pub struct CallProbe<'obj> {
    skel: CallsSkel<'obj>,
    /// The entry program's (run time ns, runs) when the hit cost was measured: its runs since are the run's.
    stats_at: Option<(u64, u64)>,
    /// The probes' links, each with the process it is for (-1: every process mapping the file).
    links: Vec<(i32, Link)>,
    latency: bool,
    samples: Option<super::RecordRing>,
}

fn decode(b: &[u8], s: &StackSampling) -> Option<Timed> {
    let u = super::decode_user_sample(b)?;
    let mut sample = u.sample;
    sample.id = s.first_id + u64::from(u.probe);
    sample.period = if s.keyed { u.weight } else { s.period };
    if s.keyed {
        sample.raw = [u.ret.to_ne_bytes(), u.stack.to_ne_bytes()].concat();
    }
    Some(Timed { time: u.time, record: Record::Sample(sample) })
}

/// An allocation probe's entry of bpf/calls.bpf.c's `size_arg` map.
fn size_arg(site: &AllocSite) -> ws_size_arg {
    let how = match site.size {
        SizeArg::Arg(0) => ws_size_how::WS_SIZE_RDI,
        SizeArg::Arg(1) => ws_size_how::WS_SIZE_RSI,
        SizeArg::Arg(_) => ws_size_how::WS_SIZE_RDX,
        SizeArg::Product => ws_size_how::WS_SIZE_RDI_TIMES_RSI,
        SizeArg::GoFirst => ws_size_how::WS_SIZE_GO_RAX,
    };
    let role = match site.role {
        AllocRole::Other => ws_alloc_role::WS_ROLE_OTHER,
        AllocRole::Wrapper => ws_alloc_role::WS_ROLE_WRAPPER,
        AllocRole::Malloc => ws_alloc_role::WS_ROLE_MALLOC,
    };
    ws_size_arg { how, stack_delta: site.stack_delta, role, pad: 0 }
}

impl<'obj> CallProbe<'obj> {
    /// Loads the programs. Only tracked processes count (see [`CallProbe::track`]). With `everywhere`,
    /// probes go into every process mapping the files (children are followed); otherwise each target
    /// process gets its own links.
    /// With `size_args` (one per probe, see [`AllocSite`]), calls and requested bytes are also counted
    /// per call site. With `stacks`, calls' stacks are sampled (see [`CallProbe::drain`]).
    pub fn load(
        obj: &'obj mut MaybeUninit<OpenObject>,
        latency: bool,
        everywhere: bool,
        size_args: Option<&[AllocSite]>,
        stacks: Option<StackSampling>,
    ) -> Result<Self, RecordError> {
        check_btf()?;
        quiet_libbpf();
        let mut open: OpenCallsSkel =
            CallsSkelBuilder::default().open(obj).map_err(|e| classify("open", e))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.latency = latency;
            ro.sites = size_args.is_some();
            if let Some(st) = &stacks {
                ro.sample_period = st.period;
                ro.keyed_stacks = st.keyed && size_args.is_some();
                ro.stack_bytes = st.stack_bytes.min(STACK_MAX);
            }
        }
        open.progs.on_return.set_autoload(latency);
        match &stacks {
            Some(st) => super::RecordRing::size(&mut open.maps.samples, st.ring_bytes)?,
            // No stacks are sent: one page, not 4 MB mapped and zeroed at load.
            None => open.maps.samples.set_max_entries(4096).map_err(|e| classify("ring buffer", e))?,
        }
        let skel = open.load().map_err(|e| classify("load", e))?;
        let samples = match stacks {
            Some(st) => Some(super::RecordRing::new(&skel.maps.samples, move |data| decode(data, &st))?),
            None => None,
        };
        let mut links = Vec::new();
        if everywhere {
            links.push((-1, skel.progs.on_fork.attach().map_err(|e| classify("attach fork hook", e))?));
        }
        links.push((-1, skel.progs.on_exec.attach().map_err(|e| classify("attach exec hook", e))?));
        links.push((-1, skel.progs.on_process_exit.attach().map_err(|e| classify("attach exit hook", e))?));
        for (i, site) in size_args.unwrap_or_default().iter().enumerate() {
            let key = (i as u32).to_ne_bytes();
            let value = size_arg(site);
            skel.maps
                .size_arg
                .update(&key, super::bytes_of(&value), MapFlags::ANY)
                .map_err(|e| classify("size args", e))?;
        }
        Ok(CallProbe { skel, stats_at: None, links, latency, samples })
    }

    /// Measures what a hit of this program's probe costs here (see `calibrate`): whyslow's own two
    /// calibration functions probed for its own process, each called with and without the probe. About
    /// 5 ms; the probe's removal (a grace period) happens on a thread of its own.
    pub fn measure_hits(&mut self) -> Option<HitCost> {
        let (cost, stats) = super::calibrate::measure(&self.skel.progs.on_entry)?;
        self.stats_at = stats;
        Some(cost)
    }

    /// Counts the entry program's runs from now on as the run's (see [`CallProbe::program_ns`]).
    pub fn mark_stats(&mut self) {
        use std::os::fd::AsFd;
        if super::calibrate::enable_stats() {
            self.stats_at = super::calibrate::program_stats(&self.skel.progs.on_entry.as_fd());
        }
    }

    /// The entry program's time per run since the hit cost was measured (None: no runs, or no stats).
    pub fn program_ns(&self) -> Option<f64> {
        use std::os::fd::AsFd;
        let (t0, n0) = self.stats_at?;
        let (t, n) = super::calibrate::program_stats(&self.skel.progs.on_entry.as_fd())?;
        (n > n0).then(|| t.saturating_sub(t0) as f64 / (n - n0) as f64)
    }

    /// Counts the calls of process `pid` (of a `launched` command from its exec on).
    pub fn track(&self, pid: u32, launched: bool) -> Result<(), RecordError> {
        super::track(&self.skel.maps.tracked, pid, launched)
    }

    /// Attaches the probes `ids` of `probes` (an index is the probe's number in the counters) for process
    /// `pid` (-1: every process). A function the kernel cannot probe (its first instruction is one
    /// uprobes do not support) is skipped and named in the returned notes.
    pub fn attach(
        &mut self,
        probes: &[Probe],
        ids: Range<usize>,
        pid: i32,
    ) -> Result<Vec<String>, RecordError> {
        let mut by_module: BTreeMap<&PathBuf, Vec<usize>> = BTreeMap::new();
        for i in ids {
            by_module.entry(&probes[i].module).or_default().push(i);
        }
        let mut notes = Vec::new();
        for (module, ids) in by_module {
            if self.attach_batch(probes, &ids, module, pid).is_ok() {
                continue;
            }
            // One at a time, to find and skip the ones that cannot be probed.
            for &i in &ids {
                if let Err(e) = self.attach_batch(probes, &[i], module, pid) {
                    if matches!(e, RecordError::BpfPermission(_)) {
                        return Err(e);
                    }
                    notes.push(format!(
                        "{} in {} cannot be probed here: not counted",
                        probes[i].name,
                        module.display()
                    ));
                }
            }
        }
        Ok(notes)
    }

    fn attach_batch(
        &mut self,
        probes: &[Probe],
        ids: &[usize],
        module: &PathBuf,
        pid: i32,
    ) -> Result<(), RecordError> {
        // A probe's own site counts up; the jumps into the instructions before it count down (see
        // whyslow_symbols::placement; sites of return probes never have such jumps).
        let mut offsets: Vec<usize> = Vec::new();
        let mut cookies: Vec<u64> = Vec::new();
        for &i in ids {
            offsets.push(probes[i].offset as usize);
            cookies.push(i as u64);
            for &c in &probes[i].site.compensate {
                offsets.push(c as usize);
                cookies.push(i as u64 | SUBTRACT);
            }
        }
        let progs = [(&self.skel.progs.on_entry, false), (&self.skel.progs.on_return, true)];
        let mut links = Vec::new();
        for (prog, retprobe) in progs.into_iter().take(if self.latency { 2 } else { 1 }) {
            let opts = UprobeMultiOpts {
                offsets: offsets.clone(),
                cookies: cookies.clone(),
                retprobe,
                ..Default::default()
            };
            let link = prog.attach_uprobe_multi_with_opts(pid, module, "", opts).map_err(|e| {
                classify(&format!("attaching {} probes to {}", offsets.len(), module.display()), e)
            })?;
            links.push((pid, link));
        }
        self.links.extend(links);
        Ok(())
    }

    /// Stops counting once the returned links are dropped; the counts so far stay readable.
    pub fn detach(&mut self) -> Vec<Link> {
        std::mem::take(&mut self.links).into_iter().map(|(_, l)| l).collect()
    }

    /// Drops the links of the processes that ended (`alive` says which still run).
    pub fn release_ended(&mut self, alive: impl Fn(u32) -> bool) {
        self.links.retain(|&(pid, _)| pid < 0 || alive(pid as u32));
    }

    /// Calls a full map could not count.
    pub fn lost(&self) -> u64 {
        self.dropped(DROP_MAP)
    }

    fn dropped(&self, slot: usize) -> u64 {
        super::drops_total(self.skel.maps.bss_data.as_deref().map(|b| &b.drops[..]), slot..slot + 1)
    }

    /// The stack samples that arrived since the last call, and a lost record for those the ring had no
    /// room for meanwhile.
    pub fn drain(&mut self, into: &mut Vec<Timed>) {
        let lost = self.dropped(DROP_RING);
        if let Some(ring) = self.samples.as_mut() {
            ring.drain(into, lost);
        }
    }

    pub fn site_counts(&self) -> Vec<SiteCount> {
        entries(&self.skel.maps.site_counts)
            .into_iter()
            .map(|(k, v): (ws_site_key, ws_site_val)| SiteCount {
                pid: k.tgid,
                probe: k.probe,
                ret: k.ret,
                calls: v.calls,
                bytes: v.bytes,
            })
            .collect()
    }

    /// The counts per (call site, stack id) of allocation stacks sampled by key.
    pub fn stack_counts(&self) -> Vec<StackCount> {
        entries(&self.skel.maps.stack_counts)
            .into_iter()
            .map(|(k, v): (ws_stack_key, ws_stack_val)| StackCount {
                pid: k.tgid,
                probe: k.probe,
                ret: k.ret,
                stack: k.stack,
                calls: v.calls,
                bytes: v.bytes,
            })
            .collect()
    }

    pub fn counts(&self) -> Vec<CallCount> {
        let mut out: Vec<CallCount> = entries(&self.skel.maps.counts)
            .into_iter()
            .map(|(k, v): (ws_call_key, ws_call_val)| CallCount {
                pid: k.tgid,
                probe: k.probe,
                // Subtracting probes may run ahead of the site they correct for a moment: never below 0.
                calls: (v.calls as i64).max(0) as u64,
                total_ns: v.total_ns,
                max_ns: v.max_ns,
                timed: v.timed,
            })
            .collect();
        out.sort_by_key(|c| (c.pid, c.probe));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{decode, ws_call_val, ws_stack_key, Record, StackSampling, STACK_MAX};
    use crate::bpf::bytes_of;
    use crate::bpf::{UserSampleRec as Rec, USTACK_OFFSET};

    fn sample() -> Box<Rec> {
        let mut r = Box::<Rec>::default();
        (r.time, r.tgid, r.tid, r.probe, r.ustack_bytes) = (7_000, 51, 52, 3, 5);
        (r.ip, r.sp, r.bp, r.ax, r.di, r.si, r.dx) = (1, 2, 3, 4, 5, 6, 7);
        (r.ret, r.stack, r.weight) = (0x40_1234, 99, 16);
        r.ustack[..5].copy_from_slice(&[1, 2, 3, 4, 5]);
        r
    }

    fn sampling(keyed: bool) -> StackSampling {
        StackSampling { period: 1000, stack_bytes: STACK_MAX, ring_bytes: 1 << 20, first_id: 100, keyed }
    }

    #[test]
    fn a_keyed_stack_sample_decodes_field_by_field_from_the_c_layout() {
        let r = sample();
        let b = &bytes_of(&*r)[..USTACK_OFFSET + 5];
        let t = decode(b, &sampling(true)).expect("decodes");
        assert_eq!(t.time, 7_000);
        let Record::Sample(s) = t.record else { panic!("{:?}", t.record) };
        assert_eq!((s.pid, s.tid, s.id, s.period), (51, 52, 103, 16), "period: the hits the key stands for");
        let g = s.regs.expect("regs");
        assert_eq!([g.ip, g.sp, g.bp, g.ax, g.di, g.si, g.dx], [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(s.stack, vec![1, 2, 3, 4, 5]);
        assert_eq!(s.raw, [0x40_1234u64.to_ne_bytes(), 99u64.to_ne_bytes()].concat(), "the key");
    }

    #[test]
    fn an_unkeyed_sample_stands_for_its_period_and_short_records_are_refused() {
        let r = sample();
        let t = decode(&bytes_of(&*r)[..USTACK_OFFSET + 5], &sampling(false)).expect("decodes");
        let Record::Sample(s) = t.record else { panic!() };
        assert_eq!((s.period, s.raw.len()), (1000, 0));
        assert!(decode(&bytes_of(&*r)[..USTACK_OFFSET - 1], &sampling(false)).is_none());
    }

    #[test]
    fn map_entries_read_as_their_c_structs() {
        let k = ws_stack_key { tgid: 1, probe: 2, ret: 3, stack: 4 };
        let read: ws_stack_key = super::super::plain(bytes_of(&k));
        assert_eq!((read.tgid, read.probe, read.ret, read.stack), (1, 2, 3, 4));
        let short: ws_call_val =
            super::super::plain(&bytes_of(&ws_call_val { calls: 9, ..Default::default() })[..8]);
        assert_eq!((short.calls, short.total_ns), (9, 0), "bytes past a short value read as zero");
    }
}
