//! The follow rule: whether a process a follower wants (the agent's manager, `top`) is recorded already
//! through the events a followed ancestor's children inherit, or must be followed by itself. Inherited
//! events exist only for processes forked after the ancestor's events were opened, and the session says
//! so only once it has seen the fork: a process that started before is followed directly, one that
//! started after is covered once its fork shows, and followed directly if the fork does not show within
//! [`FORK_WAIT`]. It decides only; it opens nothing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long to wait for the fork record of a process that may have inherited its ancestor's events.
pub const FORK_WAIT: Duration = Duration::from_secs(1);

/// Ancestors looked at above a process (a cycle in a racy read of /proc ends there).
const MAX_DEPTH: usize = 64;

/// How a wanted process is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cover {
    /// Through the inherited events of this followed process (the root whose events are open).
    By(u32),
    /// By opening its own events.
    Direct,
    /// Not decided yet: its fork may still show; ask again at the next look.
    Wait,
}

/// A followed ancestor, as the follower knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Followed {
    /// The process whose events are open and inherited (the ancestor itself, or the root it is
    /// recorded through); None while they are not open yet (chosen in this very look): nothing is
    /// inherited then.
    pub root: Option<u32>,
    /// When those events were opened, in clock ticks since boot (the unit of start times; 0 when they
    /// were inherited from further up: the ancestor's own start is the bound then).
    pub since_ticks: u64,
}

/// A process of the table: its parent and its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub ppid: u32,
    pub start_ticks: u64,
}

/// The nearest ancestor of a process with parent `ppid` that `followed` names, with its entry: walked
/// up through `table` (pid -> entry) from the parent.
pub fn followed_ancestor<F>(
    ppid: u32,
    table: impl Fn(u32) -> Option<Entry>,
    mut followed: impl FnMut(u32) -> Option<F>,
) -> Option<(u32, F, Option<Entry>)> {
    let mut up = ppid;
    for _ in 0..MAX_DEPTH {
        let entry = table(up);
        if let Some(f) = followed(up) {
            return Some((up, f, entry));
        }
        match entry {
            Some(e) if e.ppid != up => up = e.ppid,
            _ => break,
        }
    }
    None
}

/// The processes waiting for their fork to show, and since when.
#[derive(Debug, Default)]
pub struct ForkWaits {
    pending: HashMap<u32, Instant>,
}

impl ForkWaits {
    /// Forgets the processes that `live` no longer lists.
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.pending.retain(|&pid, _| live(pid));
    }

    /// How process `pid`, started at `start_ticks` with parent `ppid`, is recorded: `table` is the
    /// process table, `followed` names the followed processes, `forked_seen` says whether the session
    /// has seen its fork. A followed "ancestor" younger than the process cannot be its parent's line
    /// (its pid was reused after a stale read): the process is followed directly.
    pub fn cover(
        &mut self,
        pid: u32,
        start_ticks: u64,
        ppid: u32,
        table: impl Fn(u32) -> Option<Entry>,
        followed: impl FnMut(u32) -> Option<Followed>,
        forked_seen: impl FnOnce() -> bool,
    ) -> Cover {
        let Some((_, a, entry)) = followed_ancestor(ppid, table, followed) else { return Cover::Direct };
        let Some(root) = a.root else { return Cover::Direct };
        if start_ticks < a.since_ticks || entry.is_some_and(|e| e.start_ticks > start_ticks) {
            return Cover::Direct;
        }
        if forked_seen() {
            self.pending.remove(&pid);
            return Cover::By(root);
        }
        let since = *self.pending.entry(pid).or_insert_with(Instant::now);
        if since.elapsed() < FORK_WAIT {
            Cover::Wait
        } else {
            Cover::Direct
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cover, Entry, Followed, ForkWaits, FORK_WAIT};
    use std::collections::HashMap;
    use std::time::{Duration, Instant};

    /// init (1) -> shell (10, started at tick 100) -> server (20, tick 200) -> worker (30, tick 300);
    /// the server followed since tick 250.
    fn table() -> HashMap<u32, Entry> {
        [(1, 0, 1), (10, 1, 100), (20, 10, 200), (30, 20, 300)]
            .into_iter()
            .map(|(pid, ppid, start_ticks)| (pid, Entry { ppid, start_ticks }))
            .collect()
    }

    fn cover(w: &mut ForkWaits, t: &HashMap<u32, Entry>, pid: u32, since: u64, seen: bool) -> Cover {
        let e = t[&pid];
        let followed = |p: u32| (p == 20).then_some(Followed { root: Some(20), since_ticks: since });
        w.cover(pid, e.start_ticks, e.ppid, |p| t.get(&p).copied(), followed, || seen)
    }

    /// A child forked after its followed parent's events were opened is covered once the fork shows,
    /// waited for until then, and followed directly if it never shows.
    #[test]
    fn a_child_forked_after_following_is_covered_once_its_fork_shows() {
        let t = table();
        let mut w = ForkWaits::default();
        assert_eq!(cover(&mut w, &t, 30, 250, false), Cover::Wait);
        assert_eq!(cover(&mut w, &t, 30, 250, true), Cover::By(20));
        assert!(w.pending.is_empty(), "a covered process waits no more");
        w.pending.insert(30, Instant::now() - FORK_WAIT - Duration::from_millis(1));
        assert_eq!(cover(&mut w, &t, 30, 250, false), Cover::Direct, "the fork never showed");
    }

    /// A child that started before its parent was followed inherited nothing.
    #[test]
    fn a_child_older_than_the_following_is_followed_directly() {
        let t = table();
        assert_eq!(cover(&mut ForkWaits::default(), &t, 30, 350, true), Cover::Direct);
    }

    /// The followed pid was reused by a process younger than the child: not its parent's line.
    #[test]
    fn pid_reuse_by_a_younger_process_is_not_covered() {
        let mut t = table();
        t.insert(20, Entry { ppid: 10, start_ticks: 400 });
        assert_eq!(cover(&mut ForkWaits::default(), &t, 30, 0, true), Cover::Direct);
    }

    /// Ancestors are looked at up the line (not only the parent); none followed, or one whose events
    /// are not open yet, covers nothing; processes no longer listed stop waiting.
    #[test]
    fn the_line_is_walked_and_unopened_ancestors_cover_nothing() {
        let mut t = table();
        t.insert(40, Entry { ppid: 30, start_ticks: 500 });
        let mut w = ForkWaits::default();
        assert_eq!(cover(&mut w, &t, 40, 250, true), Cover::By(20));
        assert_eq!(cover(&mut w, &t, 20, 0, true), Cover::Direct, "its own ancestors are not followed");
        let unopened = |p: u32| (p == 20).then_some(Followed { root: None, since_ticks: 0 });
        assert_eq!(w.cover(40, 500, 30, |p| t.get(&p).copied(), unopened, || true), Cover::Direct);
        assert_eq!(cover(&mut w, &t, 40, 250, false), Cover::Wait);
        w.retain(|p| p != 40);
        assert!(w.pending.is_empty());
    }
}
