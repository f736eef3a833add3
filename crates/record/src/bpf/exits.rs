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

    /// Watches process `pid` (from its exec on when `launched`) and the processes it forks; a status that
    /// an earlier process under the same pid left is forgotten.
    pub fn track(&self, pid: u32, launched: bool) -> Result<(), RecordError> {
        let _ = self.skel.maps.exits.delete(&pid.to_ne_bytes());
        let _ = self.skel.maps.oom_victims.delete(&pid.to_ne_bytes());
        super::track(&self.skel.maps.tracked, pid, launched)
    }

    /// Watches process `pid` no more, and forgets its status.
    pub fn untrack(&self, pid: u32) {
        let _ = self.skel.maps.tracked.delete(&pid.to_ne_bytes());
        let _ = self.skel.maps.exits.delete(&pid.to_ne_bytes());
        let _ = self.skel.maps.oom_victims.delete(&pid.to_ne_bytes());
    }

    /// Whether the kernel's OOM killer chose process `pid` (its SIGKILL was the OOM killer's).
    pub fn oom_killed(&self, pid: u32) -> bool {
        self.skel.maps.oom_victims.lookup(&pid.to_ne_bytes(), MapFlags::ANY).ok().flatten().is_some()
    }

    /// The wait status of `pid` if it ended (signal in the low 7 bits, 0x80 core dumped, code << 8).
    pub fn status(&self, pid: u32) -> Option<i32> {
        let v = self.skel.maps.exits.lookup(&pid.to_ne_bytes(), MapFlags::ANY).ok()??;
        Some(i32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::{ExitWatch, MapFlags, MaybeUninit};
    use libbpf_rs::MapCore;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    fn tracks(w: &ExitWatch<'_>, pid: u32) -> bool {
        w.skel.maps.tracked.lookup(&pid.to_ne_bytes(), MapFlags::ANY).ok().flatten().is_some()
    }

    /// A tracked process and the child it forked leave `tracked` when they end (their pids go to other
    /// processes sooner or later), keeping their status; one let go leaves with its status.
    #[test]
    fn processes_that_end_leave_the_tracked_map() {
        let mut obj = MaybeUninit::uninit();
        let w = ExitWatch::load(&mut obj).expect("exit watch (needs root)");
        let mut sh = Command::new("sh")
            .args(["-c", "read go; sleep 0.3 & echo $!; wait; exit 3"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh");
        let pid = sh.id();
        w.track(pid, false).expect("track");
        writeln!(sh.stdin.take().expect("stdin"), "go").expect("go");
        let mut line = String::new();
        BufReader::new(sh.stdout.take().expect("stdout")).read_line(&mut line).expect("child pid");
        let child: u32 = line.trim().parse().expect("a pid");
        assert!(tracks(&w, pid) && tracks(&w, child), "the shell and the child it forked are tracked");
        assert_eq!(sh.wait().expect("wait").code(), Some(3));
        assert!(!tracks(&w, pid) && !tracks(&w, child), "both ended: neither is tracked");
        assert_eq!(w.status(pid), Some(3 << 8), "the status stays");
        w.untrack(pid);
        assert_eq!(w.status(pid), None, "let go: its status goes too");
    }
}
