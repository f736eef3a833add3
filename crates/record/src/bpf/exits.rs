//! How tracked processes ended (bpf/exits.bpf.c): the wait status of a process whyslow is not the parent
//! of, so an attached target killed by a signal during a run is reported with that signal.

use super::exits_skel::{ExitsSkel, ExitsSkelBuilder};
use super::{check_btf, classify, quiet_libbpf};
use crate::RecordError;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};
use std::mem::MaybeUninit;

/// Loaded and attached exit watcher; detached when dropped.
pub struct ExitWatch<'obj> {
    skel: ExitsSkel<'obj>,
}

impl<'obj> ExitWatch<'obj> {
    pub fn load(obj: &'obj mut MaybeUninit<OpenObject>) -> Result<Self, RecordError> {
        check_btf()?;
        quiet_libbpf();
        let open = ExitsSkelBuilder::default().open(obj).map_err(|e| classify("open", e))?;
        let mut skel = open.load().map_err(|e| classify("load", e))?;
        skel.attach().map_err(|e| classify("attach", e))?;
        Ok(ExitWatch { skel })
    }

    /// Watches process `pid` (from its exec on when `launched`) and the processes it forks.
    pub fn track(&self, pid: u32, launched: bool) -> Result<(), RecordError> {
        super::track(&self.skel.maps.tracked, pid, launched)
    }

    /// The wait status of `pid` if it ended (signal in the low 7 bits, 0x80 core dumped, code << 8).
    pub fn status(&self, pid: u32) -> Option<i32> {
        let v = self.skel.maps.exits.lookup(&pid.to_ne_bytes(), MapFlags::ANY).ok()??;
        Some(i32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
    }
}
