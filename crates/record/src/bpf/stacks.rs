//! Every thread of one process as it is now (bpf/stacks.bpf.c): a task iterator takes the threads off a
//! CPU from their saved registers, and asks those on one to take themselves as they next return to user
//! space (a task work). Load, run, collect; nothing is left attached once it is dropped.

use super::stacks_skel::types::ws_snap as Snap;
use super::stacks_skel::{OpenStacksSkel, StacksSkel, StacksSkelBuilder};
use super::{check_btf, classify, quiet_libbpf, u32_at, u64_at, STACK_MAX};
use crate::RecordError;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};
use std::mem::{offset_of, size_of, MaybeUninit};
use whyslow_convert::records::{Sample, UserRegs};
use whyslow_python::Layout;

const KSTACK_OFFSET: usize = offset_of!(Snap, kstack);
const USTACK_OFFSET: usize = offset_of!(Snap, ustack);
const PY_OFFSET: usize = offset_of!(Snap, py);
const _: () = assert!(size_of::<Snap>() - USTACK_OFFSET >= STACK_MAX as usize);
/// `status` of an entry once it is filled (SNAP_TAKEN), and `how` (HOW_*).
const TAKEN: u64 = 3;
const HOW_RUNNING: u32 = 2;

/// One thread as the program took it.
#[derive(Debug, Clone)]
pub struct Taken {
    /// Its stacks and Python frames, as the converter takes a sample.
    pub sample: Sample,
    /// On a CPU when asked (it took itself as it returned to user space).
    pub running: bool,
    /// The kernel's task state then (0 runnable, 1 sleeping, 2 uninterruptible, ...).
    pub state: u32,
    /// Off the CPU for this long (0 for a running thread).
    pub off_cpu_ns: u64,
    /// Runnable and waiting for a CPU for this long.
    pub queued_ns: u64,
    /// The syscall it is in and its arguments; None outside one (and for a running thread).
    pub syscall: Option<(u32, [u64; 6])>,
}

/// The loaded program for one process.
pub struct StacksProbe<'obj> {
    skel: StacksSkel<'obj>,
    pid: u32,
}

/// An entry as the thread it took; None while it is not taken (or for a short value).
fn decode(v: &[u8], pid: u32) -> Option<Taken> {
    if v.len() < USTACK_OFFSET || u64_at(v, offset_of!(Snap, status)) != TAKEN {
        return None;
    }
    let u32_of = |at| u32_at(v, at);
    let u64_of = |at| u64_at(v, at);
    let running = u32_of(offset_of!(Snap, how)) == HOW_RUNNING;
    let kbytes = (u32_of(offset_of!(Snap, kstack_bytes)) as usize).min(PY_OFFSET - KSTACK_OFFSET);
    let ubytes = (u32_of(offset_of!(Snap, ustack_bytes)) as usize).min(v.len() - USTACK_OFFSET);
    let kernel = (0..kbytes / 8).map(|i| u64_of(KSTACK_OFFSET + 8 * i)).filter(|&a| a != 0).collect();
    let python =
        super::clock::decode_pystack(&v[PY_OFFSET..USTACK_OFFSET]).map(|p| p.frames).unwrap_or_default();
    let nr = u64_of(offset_of!(Snap, syscall)) as i64;
    let args_at = offset_of!(Snap, args);
    let syscall =
        (!running && nr >= 0).then(|| (nr as u32, std::array::from_fn(|i| u64_of(args_at + 8 * i))));
    let regs = UserRegs {
        ip: u64_of(offset_of!(Snap, ip)),
        sp: u64_of(offset_of!(Snap, sp)),
        bp: u64_of(offset_of!(Snap, bp)),
        ..Default::default()
    };
    Some(Taken {
        sample: Sample {
            pid,
            tid: u32_of(offset_of!(Snap, tid)),
            id: 0,
            period: 1,
            kernel,
            user: Vec::new(),
            regs: (regs.sp != 0).then_some(regs),
            stack: v[USTACK_OFFSET..USTACK_OFFSET + ubytes].to_vec(),
            goroutine: None,
            python,
            raw: Vec::new(),
        },
        running,
        state: u32_of(offset_of!(Snap, state)),
        off_cpu_ns: u64_of(offset_of!(Snap, off_cpu_ns)),
        queued_ns: u64_of(offset_of!(Snap, queued_ns)),
        syscall,
    })
}

impl<'obj> StacksProbe<'obj> {
    /// Loads the program for process `pid`, copying up to `stack_bytes` of each thread's user stack, and
    /// the Python frames of a process running CPython (`python`: where its `_PyRuntime` is and its
    /// structs' layout). Only the variant needed is loaded: the Python frame walk costs the verifier
    /// seconds.
    pub fn load(
        obj: &'obj mut MaybeUninit<OpenObject>,
        pid: u32,
        stack_bytes: u32,
        python: Option<(u64, &Layout)>,
    ) -> Result<Self, RecordError> {
        check_btf()?;
        quiet_libbpf();
        let mut open: OpenStacksSkel =
            StacksSkelBuilder::default().open(obj).map_err(|e| classify("open", e))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.target = pid;
            ro.stack_bytes = stack_bytes.min(STACK_MAX);
        }
        open.progs.snapshot_python.set_autoload(python.is_some());
        open.progs.snapshot_native.set_autoload(python.is_none());
        let mut skel = open.load().map_err(|e| classify("load", e))?;
        if let Some((runtime, layout)) = python {
            super::track_python(&skel.maps.py_procs, pid, runtime, layout)?;
        }
        skel.attach().map_err(|e| classify("attach", e))?;
        Ok(StacksProbe { skel, pid })
    }

    /// Runs the iterator once: the threads off a CPU are taken, those on one are asked to take
    /// themselves. Threads taken already stay as they were.
    pub fn pass(&self) -> Result<(), RecordError> {
        let links = &self.skel.links;
        let link = links
            .snapshot_native
            .as_ref()
            .or(links.snapshot_python.as_ref())
            .ok_or_else(|| RecordError::Bpf("no iterator link".into()))?;
        let mut it = libbpf_rs::Iter::new(link).map_err(|e| classify("iterator", e))?;
        std::io::copy(&mut it, &mut std::io::sink())
            .map_err(|e| RecordError::Io("task iterator".into(), e))?;
        Ok(())
    }

    /// The threads seen by the passes so far: each thread's id, and how it was taken (None: not yet).
    pub fn threads(&self) -> Vec<(u32, Option<Taken>)> {
        let map = &self.skel.maps.snaps;
        map.keys()
            .filter_map(|k| {
                let tid = u32_at(&k, 0);
                let v = map.lookup(&k, MapFlags::ANY).ok().flatten()?;
                Some((tid, decode(&v, self.pid)))
            })
            .collect()
    }
}
