//! The filter of the per-CPU clock events (bpf/clock.bpf.c): the kernel keeps a sample only when it
//! interrupted a tracked process.

use super::clock_skel::{ClockSkel, ClockSkelBuilder};
use super::{check_btf, classify, quiet_libbpf};
use crate::RecordError;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, OpenObject};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};

/// Loaded filter, following forks and execs of the tracked processes; detached when dropped.
pub struct ClockFilter<'obj> {
    skel: ClockSkel<'obj>,
}

impl<'obj> ClockFilter<'obj> {
    pub fn load(obj: &'obj mut MaybeUninit<OpenObject>) -> Result<Self, RecordError> {
        check_btf()?;
        quiet_libbpf();
        let open = ClockSkelBuilder::default().open(obj).map_err(|e| classify("open", e))?;
        let mut skel = open.load().map_err(|e| classify("load", e))?;
        // Attaches the fork and exec hooks; the filter itself is attached to each event by the caller.
        skel.attach().map_err(|e| classify("attach", e))?;
        Ok(ClockFilter { skel })
    }

    /// Keeps the samples of process `pid` (from its exec on when `launched`) and of the processes it forks.
    pub fn track(&self, pid: u32, launched: bool) -> Result<(), RecordError> {
        super::track(&self.skel.maps.tracked, pid, launched)
    }

    /// Drops the samples of process `pid` from now on.
    pub fn untrack(&self, pid: u32) {
        let _ = self.skel.maps.tracked.delete(&pid.to_ne_bytes());
    }

    /// The program to attach to each clock event (PERF_EVENT_IOC_SET_BPF).
    pub fn program_fd(&self) -> i32 {
        self.skel.progs.keep.as_fd().as_raw_fd()
    }
}
