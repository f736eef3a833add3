//! How the threads' time splits: running, blocked, waiting for a CPU, idle (waiting for work), and in
//! whyslow's probes; and which threads were mostly idle.

use super::waits::{
    is_go_netpoll, is_idle_wait, polls_for_work, sleeps_by_poll, Wait, POLL_SYSCALLS, SLEEP_POLL_SYSCALLS,
};
use super::{pct, Facts};
use crate::doctor::thresholds::{BACKGROUND_IDLE_PCT, BACKGROUND_RUNNING_PCT, IDLE_THREAD_PCT};
use std::collections::{HashMap, HashSet};

/// One thread's time (ns): on and off CPU, idle, and the longest idle stack's value with the function it
/// waits in.
#[derive(Default)]
struct ThreadTime {
    all: i64,
    idle: i64,
    longest_wait: Option<(i64, usize)>,
}

/// A thread that spent most of its time waiting for work, for the one-line summary of idle threads.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct IdleThread {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    /// The function it waits in most (the outermost idle-wait frame of its longest idle stack).
    pub waits_in: String,
    /// Idle share of the thread's time (on + off CPU), percent.
    pub idle_pct: f64,
}

/// One thread's time by state (its `probe_ns` left 0: time in whyslow's probes is left out).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThreadSplit {
    /// Index into the profile's threads.
    pub thread: u32,
    pub split: WallSplit,
    /// It waits for work in an event loop: epoll_wait, poll, select, accept, io_uring.
    pub event_loop: bool,
}

impl ThreadSplit {
    /// All its time (ns): running, blocked, waiting for a CPU and waiting for work.
    pub fn all_ns(&self) -> i64 {
        let s = &self.split;
        s.running_ns + s.blocked_ns + s.runnable_ns + s.idle_ns
    }
}

/// How the threads' time splits, in ns: the three states of working time, and apart from them idle time
/// and off-CPU time inside whyslow's probes (a thread descheduled in a probe's trap).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct WallSplit {
    pub running_ns: i64,
    pub blocked_ns: i64,
    pub runnable_ns: i64,
    pub idle_ns: i64,
    pub probe_ns: i64,
}

impl Facts<'_> {
    /// The threads' time by state (ns), None without CPU time in ns and off-CPU time.
    pub fn wall_split(&self) -> Option<WallSplit> {
        if self.wall_total == 0 {
            return None;
        }
        let mut w = WallSplit { running_ns: self.cpu_total, ..Default::default() };
        for v in &self.views {
            match v.wait {
                _ if v.instrumentation => w.probe_ns += v.off,
                Wait::Blocked => w.blocked_ns += v.off,
                Wait::Runnable => w.runnable_ns += v.off,
                Wait::Idle => w.idle_ns += v.off,
            }
        }
        Some(w)
    }

    /// Per thread (index into the profile's threads, ascending): its time by state, and whether it is an
    /// event loop: a poll on any of its stacks (Go's netpoller left out), or counted among its syscalls (a
    /// loop that always finds work spends too little time in epoll_wait to be sampled there, but calls
    /// it). None without off-CPU data.
    pub fn thread_splits(&self) -> Option<Vec<ThreadSplit>> {
        if self.wall_total == 0 {
            return None;
        }
        let mut by: HashMap<u32, ThreadSplit> = HashMap::new();
        // Threads seen sleeping in a poll (CPython 3.8-3.10's time.sleep): their select and poll calls
        // may be those sleeps, not an event loop's.
        let mut sleepers: HashSet<u32> = HashSet::new();
        for v in self.views.iter().filter(|v| !v.instrumentation) {
            let t =
                by.entry(v.thread).or_insert_with(|| ThreadSplit { thread: v.thread, ..Default::default() });
            t.split.running_ns += v.cpu;
            match v.wait {
                _ if v.off == 0 => {}
                Wait::Blocked => t.split.blocked_ns += v.off,
                Wait::Runnable => t.split.runnable_ns += v.off,
                Wait::Idle => t.split.idle_ns += v.off,
            }
            let func = |f: usize| self.func(f);
            t.event_loop |=
                polls_for_work(&v.funcs, func) && !v.funcs.iter().any(|&f| is_go_netpoll(&func(f)));
            if sleeps_by_poll(&v.funcs, func) {
                sleepers.insert(v.thread);
            }
        }
        // A thread that calls a poll is an event loop, but for one seen sleeping in a poll (and never
        // waiting for work in one), whose select and poll calls are taken as its sleeps.
        let polls = |sleeper: bool| -> HashSet<(u32, u32)> {
            let syscalls = self.p.syscalls.iter().filter(|s| s.calls > 0);
            syscalls
                .filter(|s| {
                    POLL_SYSCALLS.contains(&s.name.as_str())
                        && !(sleeper && SLEEP_POLL_SYSCALLS.contains(&s.name.as_str()))
                })
                .map(|s| (s.pid, s.tid))
                .collect()
        };
        let (polls, polls_of_sleepers) = (polls(false), polls(true));
        let mut out: Vec<ThreadSplit> = by.into_values().collect();
        for t in &mut out {
            let thread = self.p.threads.get(t.thread as usize);
            let polls = match sleepers.contains(&t.thread) && !t.event_loop {
                true => &polls_of_sleepers,
                false => &polls,
            };
            t.event_loop |= thread.is_some_and(|th| polls.contains(&(th.pid, th.tid)));
        }
        out.sort_by_key(|t| t.thread);
        Some(out)
    }

    /// Per thread (index into the profile's threads): its time and idle time.
    fn thread_times(&self) -> HashMap<u32, ThreadTime> {
        let mut by: HashMap<u32, ThreadTime> = HashMap::new();
        for v in self.views.iter().filter(|v| !v.instrumentation) {
            let t = by.entry(v.thread).or_default();
            t.all += v.cpu + v.off;
            if v.wait == Wait::Idle && v.off > 0 {
                t.idle += v.off;
                let wait = v.funcs.iter().copied().find(|&f| is_idle_wait(&self.func(f)));
                if let Some(f) = wait.filter(|_| t.longest_wait.is_none_or(|(x, _)| v.off > x)) {
                    t.longest_wait = Some((v.off, f));
                }
            }
        }
        by
    }

    /// The share of their time the threads with these tids worked (ran, blocked or waited for a CPU)
    /// rather than waited for work, from the samples; 1 without off-CPU data or samples of them.
    pub fn working_fraction(&self, tids: &HashSet<u32>) -> f64 {
        if self.wall_total == 0 {
            return 1.0;
        }
        let of = |thread: u32| self.p.threads.get(thread as usize).is_some_and(|t| tids.contains(&t.tid));
        let (all, idle) = self
            .thread_times()
            .into_iter()
            .filter(|(thread, _)| of(*thread))
            .fold((0, 0), |(a, i), (_, t)| (a + t.all, i + t.idle));
        if all == 0 {
            1.0
        } else {
            (all - idle) as f64 / all as f64
        }
    }

    /// Background workers (index into the profile's threads): threads that waited for work for at least
    /// [`BACKGROUND_IDLE_PCT`] of their time and ran for under [`BACKGROUND_RUNNING_PCT`] of the rest,
    /// the rest being their waits (Redis's bio_aof_fsync syncing the AOF once a second): what they wait
    /// for holds up no request, which runs on other threads.
    pub fn background_thread_ids(&self) -> HashSet<u32> {
        let mut running: HashMap<u32, i64> = HashMap::new();
        for v in self.views.iter().filter(|v| !v.instrumentation) {
            *running.entry(v.thread).or_default() += v.cpu;
        }
        let times = self.thread_times().into_iter();
        times
            .filter(|(thread, t)| {
                let working = t.all - t.idle;
                pct(t.idle, t.all) >= BACKGROUND_IDLE_PCT
                    && pct(running.get(thread).copied().unwrap_or(0), working) < BACKGROUND_RUNNING_PCT
            })
            .map(|(thread, _)| thread)
            .collect()
    }

    /// The threads (index into the profile's threads) idle for at least [`IDLE_THREAD_PCT`] of their time.
    pub(super) fn idle_thread_ids(&self) -> HashSet<u32> {
        let times = self.thread_times().into_iter();
        times.filter(|(_, t)| pct(t.idle, t.all) >= IDLE_THREAD_PCT).map(|(t, _)| t).collect()
    }

    /// Threads idle (waiting for work) for at least [`IDLE_THREAD_PCT`] of their time, most idle first,
    /// then by tid.
    pub fn idle_threads(&self) -> Vec<IdleThread> {
        if self.wall_total == 0 {
            return Vec::new();
        }
        let mut out: Vec<IdleThread> = self
            .thread_times()
            .into_iter()
            .filter_map(|(thread, time)| {
                let t = self.p.threads.get(thread as usize)?;
                let idle_pct = pct(time.idle, time.all);
                (idle_pct >= IDLE_THREAD_PCT).then(|| IdleThread {
                    pid: t.pid,
                    tid: t.tid,
                    name: t.name.clone(),
                    waits_in: time
                        .longest_wait
                        .map(|(_, f)| self.func(f).plain().trim_start_matches('_').to_string())
                        .unwrap_or_default(),
                    idle_pct,
                })
            })
            .collect();
        out.sort_by(|a, b| b.idle_pct.total_cmp(&a.idle_pct).then(a.tid.cmp(&b.tid)).then(a.pid.cmp(&b.pid)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_profile::profile;
    use super::{Facts, WallSplit};
    use whyslow_model::SyscallStat;

    /// Idle waits (a pool's condvar, an event loop, Go's parked Ms, a join) are apart from blocked time
    /// and from waiting for a CPU; a woken waiter re-taking the mutex is blocked.
    #[test]
    fn splits_running_blocked_runnable_and_idle() {
        let p = profile(&[
            ("main;work", 40, 0),
            ("main;work;k:[waiting for a CPU]", 0, 20),
            ("main;save;lib:fdatasync;k:__x64_sys_fdatasync", 0, 15),
            ("pool;lib:pthread_cond_wait;k:futex_wait", 0, 100),
            ("pool;lib:pthread_cond_wait;lib:__lll_lock_wait;k:futex_wait", 0, 5),
            ("loop;lib:epoll_wait;k:do_epoll_wait", 0, 200),
            ("runtime.mstart;runtime.schedule;runtime.findRunnable;runtime.stopm;runtime.notesleep", 0, 300),
            ("main;lib:__pthread_clockjoin_ex;k:futex_wait", 0, 50),
            ("main;work;lib:malloc;[whyslow probe]", 0, 7),
        ]);
        let f = Facts::new(&p);
        let split = f.wall_split().unwrap();
        assert_eq!(
            split,
            WallSplit { running_ns: 40, blocked_ns: 20, runnable_ns: 20, idle_ns: 650, probe_ns: 7 }
        );
        assert_eq!(f.wall_total, 80);
        // The one thread (tid 1) worked 80 of its 730 ns (the 7 in a probe left out).
        let working = f.working_fraction(&[1].into());
        assert!((working - 80.0 / 730.0).abs() < 1e-9, "{working}");
        assert_eq!(f.working_fraction(&[2].into()), 1.0, "no samples of tid 2");
        assert!(f.background_thread_ids().is_empty(), "it ran for half its working time");
        let of: Vec<(&str, f64)> = f.hot_paths(10).iter().map(|h| (h.of, h.pct)).collect();
        assert_eq!(
            of,
            [
                ("wall (running)", 50.0),
                ("wall (waiting for a CPU)", 25.0),
                ("wall (blocked)", 18.75),
                ("wall (blocked)", 6.25)
            ]
        );
    }

    /// A sleep in a poll of no file descriptors (CPython 3.8-3.10's time.sleep calls select) is blocked
    /// time, as a nanosleep's, and makes no event loop, nor do the select calls it counts; a select
    /// waiting for work is idle, and an epoll_wait counted makes an event loop still.
    #[test]
    fn a_sleep_in_select_is_blocked_and_no_event_loop() {
        let sleep = "main;time_sleep;pysleep;lib:__GI___select;k:core_sys_select;k:do_select";
        let p = profile(&[
            ("main;work", 900, 0),
            (sleep, 0, 100),
            ("main;time_sleep;pysleep;lib:clock_nanosleep;k:do_nanosleep", 0, 30),
            ("loop;lib:__GI___select;k:core_sys_select;k:do_select", 0, 50),
        ]);
        let split = Facts::new(&p).wall_split().unwrap();
        assert_eq!(
            split,
            WallSplit { running_ns: 900, blocked_ns: 130, runnable_ns: 0, idle_ns: 50, probe_ns: 0 }
        );
        let mut p = profile(&[("main;work", 900, 0), (sleep, 0, 100)]);
        let select = SyscallStat { pid: 1, tid: 1, name: "select".into(), calls: 90, ..Default::default() };
        p.syscalls.push(select.clone());
        let splits = Facts::new(&p).thread_splits().unwrap();
        assert_eq!((splits[0].split.blocked_ns, splits[0].split.idle_ns), (100, 0));
        assert!(!splits[0].event_loop, "its selects are its sleeps");
        p.syscalls.push(SyscallStat { name: "epoll_wait".into(), ..select });
        assert!(Facts::new(&p).thread_splits().unwrap()[0].event_loop, "it calls epoll_wait too");
        let p = profile(&[("main;work", 900, 0), ("main;lib:__GI___select;k:do_select", 0, 100)]);
        assert!(Facts::new(&p).thread_splits().unwrap()[0].event_loop, "a select for work");
    }

    /// A Go thread idle in the scheduler after its goroutine parked (the stack goes on past runtime.mcall
    /// with the goroutine's) is idle, unless the goroutine parked on a sync.Mutex or RWMutex: then the
    /// thread waits for the lock.
    #[test]
    fn go_threads_idle_after_a_goroutine_parked_on_a_lock_are_blocked() {
        let sched =
            "runtime.gopark;runtime.mcall;runtime.park_m;runtime.schedule;runtime.findRunnable;runtime.stopm";
        let stacks = [
            format!(
                "runtime.goexit;main.worker;sync.(*Mutex).Lock;internal/sync.runtime_SemacquireMutex;{sched}"
            ),
            format!(
                "runtime.goexit;main.reader;sync.(*RWMutex).RLock;sync.runtime_SemacquireRWMutexR;{sched}"
            ),
            format!("runtime.goexit;main.serve;internal/poll.runtime_pollWait;runtime.netpollblock;{sched}"),
            format!("runtime.goexit;main.worker;main.wait;runtime.chanrecv1;{sched}"),
        ];
        let p = profile(&[
            ("runtime.goexit;main.worker;main.work", 40, 0),
            (&stacks[0], 0, 30),
            (&stacks[1], 0, 10),
            (&stacks[2], 0, 100),
            (&stacks[3], 0, 200),
        ]);
        let split = Facts::new(&p).wall_split().unwrap();
        assert_eq!(
            split,
            WallSplit { running_ns: 40, blocked_ns: 40, runnable_ns: 0, idle_ns: 300, probe_ns: 0 }
        );
    }
}
