//! too-few-workers: a server's event-loop workers never wait for work, yet there are fewer of them than
//! the CPUs it may use (nginx `worker_processes 1`, memcached `-t 1` on a bigger machine): the requests
//! queue for the busy workers while CPUs it could use have none. Measured from what the program controls,
//! not from how much CPU it got (on a busy machine a saturated worker spends much of its time waiting for a
//! CPU): each worker's time running or waiting for a CPU, against waiting for work in its poll, and the
//! count of such workers against the CPUs its affinity and CPU quota allow. A worker that sometimes waits
//! for work means the load does not need more of them, and an idle event loop named as the busy ones is a
//! worker the connections missed (the load is spread unevenly): no finding.

use super::cpu_oversubscription::throttled;
use super::{verify, Text};
use crate::doctor::facts::{pct, Facts, ThreadSplit};
use crate::doctor::thresholds::{WORKER_BUSY_PCT, WORKER_MIN_RUN_PCT, WORKER_MIN_SEEN_PCT};
use crate::doctor::{Confidence, Finding, Verdict};

const TEXT: Text = Text {
    id: "too-few-workers",
    title: "too few workers for the CPUs: every event-loop worker is always busy",
    why: "a worker serves its connections one event at a time: when every worker always has work waiting, each \
          request queues behind the others' (latency grows with the load) while CPUs the program may use run no \
          worker, so throughput stops at the workers' count of CPUs",
    fix: "run one worker per CPU the program may use (its affinity, or its cgroup quota in CPUs): the server's \
          worker processes or threads setting, or more processes behind one port (SO_REUSEPORT)",
    shrinks: "the workers' time waiting for a CPU and their share of one CPU each",
};

/// The CPUs the target may use: its affinity (else the host's), lowered to its CPU quota; and where
/// that was read.
fn usable_cpus(f: &Facts) -> Option<(f64, &'static str)> {
    let env = f.p.meta.target_env.as_ref()?;
    let affinity = env.run_queue.as_ref().map(|r| r.cpus).filter(|&n| n > 0);
    let (mut cpus, mut from) = match affinity {
        Some(n) => (n as f64, "its affinity"),
        None => (env.host_cpus as f64, "the host's"),
    };
    if let Some(q) = env.cpu_quota.as_ref().and_then(|q| q.cpus()).filter(|&q| q < cpus) {
        (cpus, from) = (q, "its cgroup's CPU quota");
    }
    (cpus > 0.0).then_some((cpus, from))
}

/// The share of its time a thread had work: running or waiting for a CPU.
fn busy_pct(t: &ThreadSplit) -> f64 {
    pct(t.split.running_ns + t.split.runnable_ns, t.all_ns())
}

/// The event-loop workers: threads that wait for work in a poll, seen for most of the run, that ran for
/// a real share of it (a listener that only accepts, a timer thread, are not workers).
fn workers(f: &Facts, threads: &[ThreadSplit]) -> Vec<ThreadSplit> {
    let run_ns = f.p.meta.duration_ns as i64;
    threads
        .iter()
        .filter(|t| {
            t.event_loop
                && pct(t.all_ns(), run_ns) >= WORKER_MIN_SEEN_PCT
                && pct(t.split.running_ns, run_ns) >= WORKER_MIN_RUN_PCT
        })
        .cloned()
        .collect()
}

pub fn check(f: &Facts) -> Verdict {
    if f.p.meta.target_env.is_none() {
        return Verdict::NeedsData("the CPUs the target may use (read during a live run)");
    }
    let Some(threads) = f.thread_splits() else {
        return Verdict::NeedsData("off-CPU time (record --offcpu)");
    };
    let Some((cpus, cpus_from)) = usable_cpus(f) else {
        return Verdict::Unchecked("needs the target's CPU count".into());
    };
    // Go's scheduler runs the goroutines on GOMAXPROCS threads, polling the network for them all: its
    // threads are no event-loop workers (GOMAXPROCS below the CPUs is cpu-throttling's advice).
    if crate::doctor::software::recognise(f).is_some_and(|r| r.known.name == "Go") {
        return Verdict::Clear;
    }
    let workers = workers(f, &threads);
    let n = workers.len();
    if n == 0 || n as f64 >= cpus || throttled(f) || workers.iter().any(|t| busy_pct(t) < WORKER_BUSY_PCT) {
        return Verdict::Clear;
    }
    // An event loop named as the workers that did almost nothing is a worker too, one the clients'
    // connections missed: the load is spread unevenly, the pool is not too small.
    let name = |t: &ThreadSplit| f.p.threads.get(t.thread as usize).map(|t| t.name.as_str());
    let spare = threads.iter().any(|t| {
        t.event_loop
            && !workers.iter().any(|w| w.thread == t.thread)
            && workers.iter().any(|w| name(w) == name(t))
    });
    if spare {
        return Verdict::Clear;
    }
    let all: i64 = workers.iter().map(ThreadSplit::all_ns).sum();
    let sum = |g: fn(&ThreadSplit) -> i64| pct(workers.iter().map(g).sum(), all);
    let (running, runnable, idle) =
        (sum(|t| t.split.running_ns), sum(|t| t.split.runnable_ns), sum(|t| t.split.idle_ns));
    let names: Vec<String> = workers
        .iter()
        .take(3)
        .map(|t| {
            f.p.threads.get(t.thread as usize).map_or(String::new(), |t| format!("{} {}", t.name, t.tid))
        })
        .collect();
    let more = if n > 3 { format!(" and {} more", n - 3) } else { String::new() };
    let evidence = vec![
        format!(
            "{n} event-loop worker{s} ({}{more}) had work {:.1}% of {their} time: running {running:.1}%, waiting \
             for a CPU {runnable:.1}%; waiting for work {idle:.1}%",
            names.join(", "),
            running + runnable,
            s = if n == 1 { "" } else { "s" },
            their = if n == 1 { "its" } else { "their" },
        ),
        format!("{cpus:.1} CPUs the target may use ({cpus_from}): {n} busy worker{} on them", if n == 1 { "" } else { "s" }),
    ];
    // What the fix may gain: the share of the usable CPUs no worker could run on.
    let unused = 100.0 * (cpus - n as f64) / cpus;
    Verdict::Found(Finding {
        id: TEXT.id,
        title: TEXT.title.to_string(),
        impact_pct: (unused * 10.0).round() / 10.0,
        impact_of: "cpus",
        confidence: Confidence::High,
        evidence,
        why: TEXT.why.to_string(),
        fix: TEXT.fix.to_string(),
        verify: verify(f, &TEXT),
        case: "",
    })
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::on_threads;
    use crate::doctor::{Facts, Verdict};
    use whyslow_model::{CpuQuota, Profile, RunQueue, SyscallStat, TargetEnv};

    const LOOP: &str = "main;ngx_worker_process_cycle;ngx_process_events_and_timers";

    /// 10 s on `cpus` CPUs: each worker (tid, ms running, ms waiting for a CPU, ms waiting for work in
    /// epoll_wait), and a listener thread that only waits.
    /// `calls` of syscall `name` counted on thread 1 of process 1.
    fn count(p: &mut Profile, name: &str, calls: u64) {
        p.syscalls.push(SyscallStat { pid: 1, tid: 1, name: name.into(), calls, ..Default::default() });
    }

    fn server(workers: &[(u32, i64, i64, i64)], cpus: u32) -> Profile {
        let ms = 1_000_000;
        let running = format!("{LOOP};ngx_http_process_request");
        let preempted = format!("{LOOP};ngx_http_process_request;k:[waiting for a CPU]");
        let polling = format!("{LOOP};lib:epoll_wait;k:do_epoll_wait");
        let mut stacks: Vec<(u32, &str, i64, i64)> =
            vec![(99, "main;lib:epoll_wait;k:do_epoll_wait", 0, 10_000 * ms)];
        for &(tid, run, wait, idle) in workers {
            stacks.extend([(tid, running.as_str(), run * ms, 0), (tid, preempted.as_str(), 0, wait * ms)]);
            stacks.push((tid, polling.as_str(), ms, idle * ms));
        }
        let mut p = on_threads(&stacks);
        p.threads[0].name = "main".into();
        p.meta.target_env = Some(TargetEnv {
            window_ns: 10_000_000_000,
            host_cpus: cpus,
            run_queue: Some(RunQueue { threads: 3, cpus, ..Default::default() }),
            ..Default::default()
        });
        p
    }

    /// One worker always busy (half of it waiting for a CPU, as beside other work) on 2 CPUs: found,
    /// with its split and the CPUs; half the CPUs had no worker.
    #[test]
    fn one_busy_worker_on_two_cpus() {
        let Verdict::Found(x) = super::check(&Facts::new(&server(&[(1, 5_000, 4_900, 100)], 2))) else {
            panic!("not found")
        };
        assert_eq!((x.id, x.impact_pct, x.impact_of), ("too-few-workers", 50.0, "cpus"));
        assert_eq!(
            x.evidence,
            [
                "1 event-loop worker (app 1) had work 99.0% of its time: running 50.0%, waiting for a CPU 49.0%; \
                 waiting for work 1.0%",
                "2.0 CPUs the target may use (its affinity): 1 busy worker on them",
            ]
        );
    }

    /// A worker so busy it was never sampled in its epoll_wait is known by the syscall counters' count of
    /// them; without either it is a computation, and a Go program's threads are the scheduler's.
    #[test]
    fn a_loop_never_sampled_in_its_poll_is_known_by_its_syscalls() {
        let ms = 1_000_000;
        let mut p = on_threads(&[
            (1, "main;ngx_worker_process_cycle;deflate", 6_000 * ms, 0),
            (1, "main;ngx_worker_process_cycle;deflate;k:[waiting for a CPU]", 0, 4_000 * ms),
        ]);
        p.meta.target_env = server(&[], 2).meta.target_env;
        assert!(matches!(super::check(&Facts::new(&p)), Verdict::Clear));
        count(&mut p, "epoll_wait", 900);
        let Verdict::Found(x) = super::check(&Facts::new(&p)) else { panic!("not found") };
        assert!(x.evidence[0].contains("had work 100.0% of its time"), "{:?}", x.evidence);
        let mut go = on_threads(&[
            (1, "runtime.goexit;main.handler;compress/flate.(*compressor).deflate", 6_000 * ms, 0),
            (
                1,
                "runtime.goexit;main.handler;compress/flate.(*compressor).deflate;k:[waiting for a CPU]",
                0,
                4_000 * ms,
            ),
        ]);
        go.meta.target_env = p.meta.target_env.clone();
        go.syscalls = p.syscalls.clone();
        assert!(matches!(super::check(&Facts::new(&go)), Verdict::Clear));
    }

    /// As many busy workers as CPUs, a worker that sometimes waits for work, and a quota of one CPU:
    /// no finding.
    #[test]
    fn enough_workers_spare_time_or_a_quota_are_clear() {
        let clear = |p: &Profile| matches!(super::check(&Facts::new(p)), Verdict::Clear);
        assert!(clear(&server(&[(1, 5_000, 4_900, 100), (2, 5_000, 4_900, 100)], 2)));
        assert!(clear(&server(&[(1, 5_000, 2_000, 3_000)], 2)), "waited for work 30% of its time");
        assert!(
            clear(&server(&[(1, 5_000, 4_900, 100), (2, 3_000, 1_000, 6_000)], 4)),
            "one has time to spare"
        );
        assert!(clear(&server(&[(1, 5_000, 4_900, 100), (2, 10, 0, 9_990)], 4)), "one got no connections");
        let mut p = server(&[(1, 5_000, 4_900, 100)], 4);
        p.meta.target_env.as_mut().unwrap().cpu_quota =
            Some(CpuQuota { quota_us: Some(100_000), period_us: 100_000, ..Default::default() });
        assert!(clear(&p), "a quota of one CPU");
        p.meta.target_env.as_mut().unwrap().cpu_quota.as_mut().unwrap().quota_us = Some(250_000);
        let Verdict::Found(x) = super::check(&Facts::new(&p)) else { panic!("2.5 CPUs, 1 worker") };
        assert_eq!(x.impact_pct, 60.0);
        assert!(
            x.evidence[1].starts_with("2.5 CPUs the target may use (its cgroup's CPU quota)"),
            "{:?}",
            x.evidence
        );
    }

    /// A Python thread busy but for its time.sleep calls, which CPython 3.8-3.10 make as select() with
    /// no file descriptors (counted among its syscalls): a sleep, no event-loop worker, no finding.
    #[test]
    fn a_thread_that_sleeps_in_select_is_no_worker() {
        let ms = 1_000_000;
        let py = "main;_PyEval_EvalFrameDefault;doze";
        let sleep = format!("{py};cfunction_vectorcall_O;time_sleep;pysleep;lib:__GI___select;k:do_select");
        let mut p = on_threads(&[
            (1, "main;_PyEval_EvalFrameDefault;work", 6_000 * ms, 0),
            (1, "main;_PyEval_EvalFrameDefault;work;k:[waiting for a CPU]", 0, 3_200 * ms),
            (1, sleep.as_str(), 0, 800 * ms),
        ]);
        p.meta.target_env = server(&[], 2).meta.target_env;
        count(&mut p, "select", 400);
        if let Verdict::Found(x) = super::check(&Facts::new(&p)) {
            panic!("found: {:?}", x.evidence);
        }
        // The same waits in a select for work: a busy event-loop worker.
        let polling = "main;_PyEval_EvalFrameDefault;serve;lib:__GI___select;k:do_select";
        let mut p = on_threads(&[
            (1, "main;_PyEval_EvalFrameDefault;work", 6_000 * ms, 0),
            (1, "main;_PyEval_EvalFrameDefault;work;k:[waiting for a CPU]", 0, 3_200 * ms),
            (1, polling, 0, 800 * ms),
        ]);
        p.meta.target_env = server(&[], 2).meta.target_env;
        assert!(matches!(super::check(&Facts::new(&p)), Verdict::Found(_)));
    }

    /// A thread busy all the time that never waits for work in a poll (a computation) is no worker; a
    /// profile without the target's CPUs says what it needs.
    #[test]
    fn computations_are_not_workers() {
        let mut p = on_threads(&[
            (1, "main;compute", 9_000_000_000, 0),
            (1, "main;compute;k:[waiting for a CPU]", 0, 1_000_000_000),
        ]);
        assert!(matches!(super::check(&Facts::new(&p)), Verdict::NeedsData(_)));
        p.meta.target_env = server(&[], 2).meta.target_env;
        assert!(matches!(super::check(&Facts::new(&p)), Verdict::Clear));
    }
}
