//! cpu-oversubscription: the target keeps more threads runnable than it has CPUs, so they queue for a
//! CPU (its own run-queue delay). Told apart from throttling (a cgroup quota that throttled is
//! cpu-throttling's) and from other processes taking the CPUs (the target wanted no more CPUs than it
//! has: no finding, but [`contention`] names the busiest other processes for the report). Time waiting comes from the off-CPU data (sched_switch: threads that ended count too),
//! else from the threads' schedstat read at the start and end; the CPUs from the target's affinity.

use super::{finding, Text};
use crate::doctor::facts::{Facts, Match};
use crate::doctor::thresholds::{OVERSUB_DEMAND_RATIO, OVERSUB_WAIT_PCT, THROTTLED_PERIODS_PCT};
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "cpu-oversubscription",
    title: "more runnable threads than CPUs: the program's threads queue for a CPU",
    why:
        "a thread that is ready to run waits on a run queue until a CPU is free: with more busy threads than \
          CPUs each piece of work waits for the others' time slices (latency grows with the queue) and the \
          threads pay context switches and cold caches, for no more throughput",
    fix: "size the worker pools to the CPUs the program may use (its affinity, or its cgroup quota), not to \
          the work items or connections; put work in a queue that a fixed pool drains; for Go, GOMAXPROCS no \
          higher than the CPUs",
    shrinks: "the time waiting for a CPU (`whyslow report --type offcpu`)",
};

/// The target's time running and waiting for a CPU (ns) and where it was read.
fn run_and_wait(f: &Facts) -> Option<(i64, i64, &'static str)> {
    if let Some(w) = f.wall_split() {
        return Some((w.running_ns, w.runnable_ns, "sched_switch"));
    }
    let rq = f.p.meta.target_env.as_ref()?.run_queue.as_ref()?;
    Some((rq.run_ns as i64, rq.wait_ns as i64, "schedstat"))
}

/// The CPUs the target may use: its affinity, else the host's.
fn cpus(f: &Facts) -> Option<u32> {
    let env = f.p.meta.target_env.as_ref()?;
    env.run_queue.as_ref().map(|r| r.cpus).filter(|&n| n > 0).or(Some(env.host_cpus).filter(|&n| n > 0))
}

/// A CPU quota that throttled the target: cpu-throttling's finding, not another rule's.
pub(super) fn throttled(f: &Facts) -> bool {
    let q = f.p.meta.target_env.as_ref().and_then(|e| e.cpu_quota.as_ref());
    q.is_some_and(|q| {
        q.quota_us.is_some()
            && q.periods > 0
            && 100.0 * q.throttled_periods as f64 / q.periods as f64 >= THROTTLED_PERIODS_PCT
    })
}

pub fn check(f: &Facts) -> Verdict {
    let Some(env) = &f.p.meta.target_env else {
        return Verdict::NeedsData("the target's CPU count and run-queue delay (read during a live run)");
    };
    let Some((run, wait, source)) = run_and_wait(f) else {
        let why = env.unavailable.iter().find(|u| u.0 == "run-queue").map_or("unreadable", |u| u.1.as_str());
        return Verdict::Unchecked(format!("needs off-CPU time or the threads' schedstat: {why}"));
    };
    let Some(cpus) = cpus(f) else { return Verdict::Unchecked("needs the target's CPU count".into()) };
    let wait_pct = crate::doctor::facts::pct(wait, run + wait);
    let secs = f.seconds().max(1e-9);
    let demand = (run + wait) as f64 / 1e9 / secs;
    if wait_pct < OVERSUB_WAIT_PCT || demand < OVERSUB_DEMAND_RATIO * cpus as f64 || throttled(f) {
        return Verdict::Clear;
    }
    let evidence = vec![
        format!(
            "the threads waited for a CPU {wait_pct:.1}% of their working time ({:.2} s waiting, {:.2} s running; \
             {source})",
            wait as f64 / 1e9,
            run as f64 / 1e9
        ),
        format!(
            "{demand:.1} threads wanted a CPU on average over the {secs:.2} s run, on {cpus} CPUs the target may \
             use"
        ),
    ];
    let impact = Match { pct: wait_pct, value: wait, ..Default::default() };
    Verdict::Found(finding(f, &TEXT, &impact, "wall", Confidence::High, evidence))
}

/// When the target waited for a CPU but wanted no more CPUs than it has: who else used them (one line
/// for the report), or None.
pub fn contention(f: &Facts) -> Option<String> {
    let env = f.p.meta.target_env.as_ref()?;
    let (run, wait, _) = run_and_wait(f)?;
    let cpus = cpus(f)?;
    let wait_pct = crate::doctor::facts::pct(wait, run + wait);
    let demand = (run + wait) as f64 / 1e9 / f.seconds().max(1e-9);
    if wait_pct < OVERSUB_WAIT_PCT || demand >= OVERSUB_DEMAND_RATIO * cpus as f64 || throttled(f) {
        return None;
    }
    let others = env.run_queue.as_ref().map(|r| &r.others).filter(|o| !o.is_empty())?;
    let list: Vec<String> = others
        .iter()
        .map(|(pid, name, ns)| format!("{name} (pid {pid}, {:.2} s of CPU)", *ns as f64 / 1e9))
        .collect();
    Some(format!(
        "the target wanted {demand:.1} of its {cpus} CPUs and waited {wait_pct:.1}% of its working time: other \
         processes took the CPUs, the busiest {}",
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::{Facts, Verdict};
    use whyslow_model::{CpuQuota, RunQueue, TargetEnv};

    /// 10 s profile: `run` and `wait` seconds of all threads.
    fn with(run: i64, wait: i64, cpus: u32) -> whyslow_model::Profile {
        let mut p = profile(&[
            ("main;worker;work", run * 1_000_000_000, 0),
            ("main;worker;work;k:[waiting for a CPU]", 0, wait * 1_000_000_000),
        ]);
        p.meta.target_env = Some(TargetEnv {
            window_ns: 10_000_000_000,
            host_cpus: cpus,
            run_queue: Some(RunQueue {
                threads: 9,
                cpus,
                others: vec![(7, "cc1plus".into(), 3_000_000_000)],
                ..Default::default()
            }),
            ..Default::default()
        });
        p
    }

    #[test]
    fn fires_when_the_target_wants_more_cpus_than_it_has() {
        let Verdict::Found(x) = super::check(&Facts::new(&with(20, 60, 2))) else { panic!("not found") };
        assert_eq!((x.impact_pct, x.impact_of), (75.0, "wall"));
        assert_eq!(
            x.evidence,
            [
                "the threads waited for a CPU 75.0% of their working time (60.00 s waiting, 20.00 s running; \
                 sched_switch)",
                "8.0 threads wanted a CPU on average over the 10.00 s run, on 2 CPUs the target may use",
            ]
        );
        assert_eq!(super::contention(&Facts::new(&with(20, 60, 2))), None);
    }

    /// Two threads on two CPUs waiting because others ran: not this rule; the contention line names them.
    /// A quota that throttled is cpu-throttling's.
    #[test]
    fn others_and_throttling_are_told_apart() {
        let p = with(10, 10, 2);
        assert!(matches!(super::check(&Facts::new(&p)), Verdict::Clear));
        let line = super::contention(&Facts::new(&p)).unwrap();
        assert!(
            line.contains("wanted 2.0 of its 2 CPUs") && line.ends_with("cc1plus (pid 7, 3.00 s of CPU)"),
            "{line}"
        );
        let mut p = with(20, 60, 2);
        p.meta.target_env.as_mut().unwrap().cpu_quota = Some(CpuQuota {
            quota_us: Some(50_000),
            period_us: 100_000,
            periods: 100,
            throttled_periods: 90,
            ..Default::default()
        });
        assert!(matches!(super::check(&Facts::new(&p)), Verdict::Clear));
    }
}
