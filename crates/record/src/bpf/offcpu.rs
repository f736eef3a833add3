//! Off-CPU time by stack from bpf/offcpu.bpf.c: the kernel keeps each tracked thread's stacks at its
//! switch-out and sends a block only when the thread runs again (sampled below `sample_ns`), so user space
//! sees a bounded number of records however often the target switches. Load, track, attach, drain.

use super::offcpu_skel::{OffcpuSkel, OffcpuSkelBuilder, OpenOffcpuSkel};
use super::{check_btf, classify, quiet_libbpf, u32_at, u64_at};
use crate::RecordError;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};
use std::mem::MaybeUninit;
use std::time::Duration;
use whyslow_convert::records::{GoroutineStack, Record, Sample, Timed, UserRegs};

/// Must match `struct ws_block` in bpf/offcpu.bpf.c.
const STACK_MAX: u32 = 16384;
const KSTACK_OFFSET: usize = 96;
const USTACK_OFFSET: usize = KSTACK_OFFSET + 64 * 8;
const DROP_SLOTS: u32 = 2;

/// How the kernel side samples blocks.
#[derive(Debug, Clone, Copy)]
pub struct OffCpuConfig {
    pub min_block: Duration,
    /// Blocks shorter than this are sent with probability length / period, valued one period.
    pub sample_period: Duration,
    pub stack_bytes: u32,
    pub kernel_stack: bool,
    pub ring_bytes: usize,
}

/// Loaded and attached off-CPU source; detached when dropped.
pub struct OffCpuProbe<'obj> {
    skel: OffcpuSkel<'obj>,
    ring: super::RecordRing,
}

/// A block as the converter's record: the thread's stacks when it blocked, the time it stands for, and
/// its state in `raw` (the stream's `state_offset` is 0). None for a short or inconsistent record.
fn decode(b: &[u8], until: Option<u64>) -> Option<Timed> {
    if b.len() < USTACK_OFFSET {
        return None;
    }
    let since = u64_at(b, 0);
    let (time, ns) = match until {
        Some(end) => (end, end.saturating_sub(since)),
        None => (u64_at(b, 8), u64_at(b, 16)),
    };
    let kbytes = (u32_at(b, 36) as usize).min(USTACK_OFFSET - KSTACK_OFFSET);
    let ubytes = (u32_at(b, 40) as usize).min(b.len() - USTACK_OFFSET);
    let gbytes = (u32_at(b, 44) as usize).min(b.len() - USTACK_OFFSET - ubytes);
    let parked = Some((u64_at(b, 80), u64_at(b, 88))).filter(|&(pc, _)| pc != 0);
    let goroutine = (gbytes > 0).then(|| GoroutineStack { at: u64_at(b, 72), offset: ubytes, parked });
    let kernel = (0..kbytes / 8).map(|i| u64_at(b, KSTACK_OFFSET + 8 * i)).filter(|&a| a != 0).collect();
    let regs = UserRegs { ip: u64_at(b, 48), sp: u64_at(b, 56), bp: u64_at(b, 64), ..Default::default() };
    let sample = Sample {
        pid: u32_at(b, 24),
        tid: u32_at(b, 28),
        id: 0,
        period: 0,
        kernel,
        user: Vec::new(),
        regs: Some(regs),
        stack: b[USTACK_OFFSET..USTACK_OFFSET + ubytes + gbytes].to_vec(),
        goroutine,
        raw: u64::from(u32_at(b, 32)).to_ne_bytes().to_vec(),
    };
    Some(Timed { time, record: Record::OffCpu { sample, ns } })
}

impl<'obj> OffCpuProbe<'obj> {
    pub fn load(obj: &'obj mut MaybeUninit<OpenObject>, cfg: &OffCpuConfig) -> Result<Self, RecordError> {
        check_btf()?;
        quiet_libbpf();
        let mut open: OpenOffcpuSkel =
            OffcpuSkelBuilder::default().open(obj).map_err(|e| classify("open", e))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.min_block_ns = cfg.min_block.as_nanos() as u64;
            ro.sample_ns = cfg.sample_period.as_nanos() as u64;
            ro.stack_bytes = cfg.stack_bytes.min(STACK_MAX);
            ro.kernel_stack = cfg.kernel_stack;
        }
        super::RecordRing::size(&mut open.maps.events, cfg.ring_bytes)?;
        let skel = open.load().map_err(|e| classify("load", e))?;
        let ring = super::RecordRing::new(&skel.maps.events, |data| decode(data, None))?;
        Ok(OffCpuProbe { skel, ring })
    }

    /// Records the blocks of process `pid`'s threads (and of the processes it forks from now on); of a
    /// `launched` command from its exec on. The stacks of a Go program's threads blocked on the runtime's
    /// system stack go on with their goroutine's (`go`).
    pub fn track(&self, pid: u32, launched: bool, go: bool) -> Result<(), RecordError> {
        super::track_go(&self.skel.maps.go_procs, pid, go)?;
        super::track(&self.skel.maps.tracked, pid, launched)
    }

    pub fn attach(&mut self) -> Result<(), RecordError> {
        self.skel.attach().map_err(|e| classify("attach", e))
    }

    /// The blocks that ended since the last call, and a lost record for those lost meanwhile (see
    /// [`OffCpuProbe::lost`]).
    pub fn drain(&mut self, into: &mut Vec<Timed>) {
        let lost = self.lost();
        self.ring.drain(into, lost);
    }

    /// The threads blocked now, each valued from its switch-out until `end` (the end of a run), with the
    /// kernel stack the `blocked_stacks` iterator takes of each first.
    pub fn in_progress(&self, end: u64) -> Vec<Timed> {
        if let Some(mut it) =
            self.skel.links.blocked_stacks.as_ref().and_then(|l| libbpf_rs::Iter::new(l).ok())
        {
            let _ = std::io::copy(&mut it, &mut std::io::sink());
        }
        let map = &self.skel.maps.blocks;
        map.keys()
            .filter_map(|k| map.lookup(&k, MapFlags::ANY).ok().flatten())
            .filter(|v| u64_at(v, 0) != 0 && u64_at(v, 0) < end)
            .filter_map(|v| decode(&v, Some(end)))
            .collect()
    }

    /// Blocks lost: those the ring had no room for, and switch-outs no map entry could hold.
    pub fn lost(&self) -> u64 {
        super::per_cpu_total(&self.skel.maps.drops, 0..DROP_SLOTS)
    }
}
