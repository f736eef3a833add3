//! Off-CPU time by stack from bpf/offcpu.bpf.c: the kernel keeps each tracked thread's switch-out and
//! sends a block only when the thread runs again (sampled below `sample_ns`), its user stacks taken as
//! it resumes where the kernel allows (else at the switch-out), with a CPython thread's Python frames,
//! so user space sees a bounded number of records however often the target switches. Load, track,
//! attach, drain.

use super::offcpu_skel::types::ws_block as Block;
use super::offcpu_skel::{OffcpuSkel, OffcpuSkelBuilder, OpenOffcpuSkel};
use super::{check_btf, classify, quiet_libbpf, u32_at, u64_at, STACK_MAX};
use crate::RecordError;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};
use std::mem::{offset_of, size_of, MaybeUninit};
use std::time::Duration;
use whyslow_convert::records::{GoroutineStack, Record, Sample, Timed, UserRegs};
use whyslow_python::Layout;

/// Where `struct ws_block`'s stacks start: its layout is the skeleton's generated type's.
const KSTACK_OFFSET: usize = offset_of!(Block, kstack);
const USTACK_OFFSET: usize = offset_of!(Block, ustack);
const _: () = assert!(size_of::<Block>() - USTACK_OFFSET >= 2 * STACK_MAX as usize);
const DROP_SLOTS: usize = 3;

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
    let u32_of = |at| u32_at(b, at);
    let u64_of = |at| u64_at(b, at);
    let since = u64_of(offset_of!(Block, since));
    let (time, ns) = match until {
        // A thread blocked again before its chosen block was sent (a task work still pending) stands for
        // that block's time too.
        Some(end) => {
            let at = offset_of!(Block, pending);
            let pending = b[at..at + 2] != [0, 0];
            (end, end.saturating_sub(since) + if pending { u64_of(offset_of!(Block, ns)) } else { 0 })
        }
        None => (u64_of(offset_of!(Block, until)), u64_of(offset_of!(Block, ns))),
    };
    let kbytes = (u32_of(offset_of!(Block, kstack_bytes)) as usize).min(USTACK_OFFSET - KSTACK_OFFSET);
    let ubytes = (u32_of(offset_of!(Block, ustack_bytes)) as usize).min(b.len() - USTACK_OFFSET);
    let gbytes = (u32_of(offset_of!(Block, go_bytes)) as usize).min(b.len() - USTACK_OFFSET - ubytes);
    let parked =
        Some((u64_of(offset_of!(Block, go_pc)), u64_of(offset_of!(Block, go_bp)))).filter(|&(pc, _)| pc != 0);
    let goroutine =
        (gbytes > 0).then(|| GoroutineStack { at: u64_of(offset_of!(Block, go_at)), offset: ubytes, parked });
    let kernel = (0..kbytes / 8).map(|i| u64_of(KSTACK_OFFSET + 8 * i)).filter(|&a| a != 0).collect();
    let py_at = offset_of!(Block, py);
    let python = super::clock::decode_pystack(&b[py_at..KSTACK_OFFSET]).map_or(Vec::new(), |p| p.frames);
    let regs = UserRegs {
        ip: u64_of(offset_of!(Block, ip)),
        sp: u64_of(offset_of!(Block, sp)),
        bp: u64_of(offset_of!(Block, bp)),
        ..Default::default()
    };
    let sample = Sample {
        pid: u32_of(offset_of!(Block, tgid)),
        tid: u32_of(offset_of!(Block, tid)),
        id: 0,
        period: 0,
        kernel,
        user: Vec::new(),
        regs: Some(regs),
        stack: b[USTACK_OFFSET..USTACK_OFFSET + ubytes + gbytes].to_vec(),
        goroutine,
        python,
        raw: u64::from(u32_of(offset_of!(Block, state))).to_ne_bytes().to_vec(),
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

    /// Reads the Python frames of process `pid`'s blocks from now on (see
    /// [`super::clock::ClockFilter::track_python`]).
    pub fn track_python(&self, pid: u32, runtime: u64, layout: &Layout) -> Result<(), RecordError> {
        super::track_python(&self.skel.maps.py_procs, pid, runtime, layout)
    }

    /// Records no more blocks of process `pid` from now on.
    pub fn untrack(&self, pid: u32) {
        super::untrack(&self.skel.maps.tracked, &self.skel.maps.go_procs, pid);
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
            .filter(|v| (1..end).contains(&u64_at(v, offset_of!(Block, since))))
            .filter_map(|v| decode(&v, Some(end)))
            .collect()
    }

    /// Blocks lost: those the ring had no room for, switch-outs no map entry could hold, and chosen
    /// blocks whose task work could not be scheduled.
    pub fn lost(&self) -> u64 {
        super::drops_total(self.skel.maps.bss_data.as_deref().map(|b| &b.drops[..]), 0..DROP_SLOTS)
    }
}

#[cfg(test)]
mod tests {
    use super::{decode, Block, Record, USTACK_OFFSET};

    /// A block as the C side lays it out (the generated type), with `ustack` bytes of stack copied and
    /// `go` of a goroutine's after them, cut where the program cuts its ring record.
    fn record(block: &Block, ustack: usize, go: usize) -> Vec<u8> {
        super::super::bytes_of(block)[..USTACK_OFFSET + ustack + go].to_vec()
    }

    fn block() -> Box<Block> {
        let mut b = Box::<Block>::default();
        (b.since, b.until, b.ns) = (1_000, 5_000, 4_000);
        (b.tgid, b.tid, b.state) = (41, 42, 2);
        (b.ip, b.sp, b.bp) = (0x401000, 0x7ffd_0000, 0x7ffd_0040);
        b.kstack[..3].copy_from_slice(&[0xffff_8000_0000_1000, 0xffff_8000_0000_2000, 0]);
        b.kstack_bytes = 3 * 8;
        b.ustack[..4].copy_from_slice(&[1, 2, 3, 4]);
        b.ustack_bytes = 4;
        b
    }

    #[test]
    fn a_block_decodes_field_by_field_from_the_c_layout() {
        let b = block();
        let t = decode(&record(&b, 4, 0), None).expect("decodes");
        assert_eq!(t.time, 5_000);
        let Record::OffCpu { sample: s, ns } = t.record else { panic!("{:?}", t.record) };
        assert_eq!((ns, s.pid, s.tid), (4_000, 41, 42));
        assert_eq!(s.raw, 2u64.to_ne_bytes().to_vec(), "the thread state");
        let r = s.regs.expect("regs");
        assert_eq!((r.ip, r.sp, r.bp), (0x401000, 0x7ffd_0000, 0x7ffd_0040));
        assert_eq!(s.kernel, vec![0xffff_8000_0000_1000, 0xffff_8000_0000_2000], "zero entries dropped");
        assert_eq!(s.stack, vec![1, 2, 3, 4]);
        assert!(s.goroutine.is_none());
    }

    #[test]
    fn a_goroutine_stack_follows_the_user_stack_and_in_progress_blocks_end_at_the_run() {
        let mut b = block();
        b.ustack[4..7].copy_from_slice(&[9, 9, 9]);
        (b.go_bytes, b.go_at, b.go_pc, b.go_bp) = (3, 0xc000_1000, 0x46_0000, 0xc000_2000);
        let t = decode(&record(&b, 4, 3), Some(9_000)).expect("decodes");
        assert_eq!(t.time, 9_000);
        let Record::OffCpu { sample: s, ns } = t.record else { panic!("{:?}", t.record) };
        assert_eq!(ns, 8_000, "from the switch-out to the end of the run");
        assert_eq!(s.stack, vec![1, 2, 3, 4, 9, 9, 9]);
        let g = s.goroutine.expect("goroutine");
        assert_eq!((g.at, g.offset, g.parked), (0xc000_1000, 4, Some((0x46_0000, 0xc000_2000))));
    }

    #[test]
    fn a_thread_blocked_again_before_its_chosen_block_was_sent_stands_for_both() {
        let mut b = block();
        b.pending = 1;
        let t = decode(&record(&b, 4, 0), Some(9_000)).expect("decodes");
        let Record::OffCpu { ns, .. } = t.record else { panic!("{:?}", t.record) };
        assert_eq!(ns, 8_000 + 4_000, "the block in progress, and the chosen one waiting to be sent");
    }

    #[test]
    fn lengths_past_the_record_are_cut_to_it_and_short_records_refused() {
        let mut b = block();
        b.ustack_bytes = 10_000; // more than the record carries
        let t = decode(&record(&b, 4, 0), None).expect("decodes");
        let Record::OffCpu { sample: s, .. } = t.record else { panic!() };
        assert_eq!(s.stack.len(), 4);
        assert!(decode(&record(&b, 0, 0)[..USTACK_OFFSET - 1], None).is_none());
    }
}
