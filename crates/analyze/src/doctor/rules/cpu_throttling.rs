//! cpu-throttling: the target's cgroup has a CPU quota (cgroup v1 `cpu.cfs_quota_us`, v2 `cpu.max`) and
//! hit it in a large share of its periods: the quota, not the machine, is the limit. The numbers come from
//! the cgroup's own counters (`cpu.stat`), read at the run's start and end; they need no symbols. Told
//! apart from a busy machine: without throttling, waiting for a CPU is run-queue's.

use super::{finding, Text};
use crate::doctor::facts::Facts;
use crate::doctor::thresholds::{THROTTLED_PERIODS_PCT, THROTTLED_WALL_PCT};
use crate::doctor::{Confidence, Verdict};
use whyslow_model::CpuQuota;

const TEXT: Text = Text {
    id: "cpu-throttling",
    title: "the cgroup's CPU quota throttles the program",
    why: "the CFS bandwidth controller lets the cgroup's threads run only `quota` µs of CPU per period (all \
          threads together); once they used it the threads are stopped until the next period, however idle \
          the machine is: latency grows by up to a period and throughput is capped at the quota",
    fix: "raise the limit to what the program uses at its busiest (cpu.max / cpu.cfs_quota_us; Kubernetes \
          resources.limits.cpu; docker --cpus), or cut the program's parallelism to the quota (worker threads \
          and pools sized to the quota in CPUs, not to the host's CPU count: a JVM with \
          -XX:ActiveProcessorCount, Go with GOMAXPROCS); bursts within a period can borrow with \
          cpu.max.burst / cpu.cfs_burst_us",
    shrinks: "the time waiting for a CPU (`whyslow report --type offcpu`)",
};

/// A Go program (recognised by its runtime's functions; stripped ones too: .gopclntab names them).
fn is_go(f: &Facts) -> bool {
    crate::doctor::software::recognise(f).is_some_and(|r| r.known.name == "Go")
}

fn files(q: &CpuQuota) -> String {
    let quota = q.quota_us.unwrap_or(0);
    match q.version {
        1 => format!("cpu.cfs_quota_us {quota} per cpu.cfs_period_us {}", q.period_us),
        _ => format!("cpu.max \"{quota} {}\"", q.period_us),
    }
}

pub fn check(f: &Facts) -> Verdict {
    let Some(env) = &f.p.meta.target_env else {
        return Verdict::NeedsData("the target's cgroup counters (read during a live run)");
    };
    let Some(q) = &env.cpu_quota else {
        let why = env.unavailable.iter().find(|u| u.0 == "cpu-quota").map_or("unreadable", |u| u.1.as_str());
        return Verdict::Unchecked(format!("needs the target's cgroup CPU counters: {why}"));
    };
    let (Some(cpus), true) = (q.cpus(), q.periods > 0) else { return Verdict::Clear };
    let window_s = env.window_ns as f64 / 1e9;
    let periods_pct = 100.0 * q.throttled_periods as f64 / q.periods as f64;
    let throttled_s = q.throttled_us as f64 / 1e6;
    let wall_pct = 100.0 * throttled_s / window_s.max(1e-9);
    if periods_pct < THROTTLED_PERIODS_PCT || wall_pct < THROTTLED_WALL_PCT {
        return Verdict::Clear;
    }
    let host = match env.host_cpus {
        0 => String::new(),
        n => format!(", on a host with {n} CPUs"),
    };
    let mut evidence = vec![
        format!("cgroup {} (v{}) allows {cpus:.2} CPU: {}{host}", q.cgroup, q.version, files(q)),
        format!(
            "throttled in {} of {} periods ({periods_pct:.1}%): {throttled_s:.2} s throttled in the {window_s:.2} s \
             run ({wall_pct:.1}%)",
            q.throttled_periods, q.periods
        ),
    ];
    if let Some(u) = q.usage_us {
        evidence.push(format!(
            "the cgroup used {:.2} CPU on average over the run (its quota: {cpus:.2})",
            u as f64 / 1e6 / window_s.max(1e-9)
        ));
    }
    if let Some(w) = f.wall_split() {
        let working = (w.running_ns + w.blocked_ns + w.runnable_ns).max(1) as f64;
        evidence.push(format!(
            "the threads waited for a CPU {:.1}% of their working time: the quota, not the machine, kept them \
             waiting",
            100.0 * w.runnable_ns as f64 / working
        ));
    }
    if let Some(rq) = &env.run_queue {
        if rq.threads as f64 > cpus {
            evidence.push(format!("{} threads share {cpus:.2} CPU of quota", rq.threads));
        }
    }
    if let Some(p) = q.pressure_some_us {
        evidence.push(format!(
            "cpu.pressure: some task of the cgroup waited {:.2} s ({:.1}% of the run)",
            p as f64 / 1e6,
            100.0 * p as f64 / 1e6 / window_s.max(1e-9)
        ));
    }
    let impact = crate::doctor::facts::Match { pct: wall_pct, ..Default::default() };
    let mut found = finding(f, &TEXT, &impact, "wall", Confidence::High, evidence);
    found.title = format!("the cgroup's CPU quota ({cpus:.2} CPU) throttles the program");
    if is_go(f) {
        found.fix = format!(
            "Go: set GOMAXPROCS={} (the quota rounded up; Go 1.25 and later read the quota themselves, \
             go.uber.org/automaxprocs does it for older ones) so the runtime does not run more threads than \
             the quota pays for; else {}",
            cpus.ceil().max(1.0),
            TEXT.fix
        );
    }
    Verdict::Found(found)
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::{Facts, Verdict};
    use whyslow_model::{CpuQuota, Profile, TargetEnv};

    fn throttled(stacks: &[(&str, i64, i64)], quota: Option<u64>, throttled_periods: u64) -> Profile {
        let mut p = profile(stacks);
        p.meta.target_env = Some(TargetEnv {
            window_ns: 12_000_000_000,
            host_cpus: 2,
            cpu_quota: Some(CpuQuota {
                cgroup: "/sys/fs/cgroup/cpu/app".into(),
                version: 1,
                quota_us: quota,
                period_us: 100_000,
                periods: 65,
                throttled_periods,
                throttled_us: throttled_periods * 166_153,
                usage_us: Some(2_400_000),
                pressure_some_us: None,
            }),
            ..Default::default()
        });
        p
    }

    const STACKS: [(&str, i64, i64); 2] = [("main;work", 10, 0), ("main;work;k:[waiting for a CPU]", 0, 90)];

    #[test]
    fn fires_when_the_quota_throttles() {
        let Verdict::Found(x) = super::check(&Facts::new(&throttled(&STACKS, Some(20_000), 65))) else {
            panic!("not found")
        };
        assert_eq!((x.impact_pct, x.impact_of), (90.0, "wall"));
        assert_eq!(
            x.evidence,
            [
                "cgroup /sys/fs/cgroup/cpu/app (v1) allows 0.20 CPU: cpu.cfs_quota_us 20000 per \
                 cpu.cfs_period_us 100000, on a host with 2 CPUs",
                "throttled in 65 of 65 periods (100.0%): 10.80 s throttled in the 12.00 s run (90.0%)",
                "the cgroup used 0.20 CPU on average over the run (its quota: 0.20)",
                "the threads waited for a CPU 90.0% of their working time: the quota, not the machine, kept \
                 them waiting",
            ]
        );
        assert!(
            x.title.contains("0.20 CPU") && x.fix.contains("raise the limit") && !x.fix.starts_with("Go")
        );
    }

    #[test]
    fn quiet_without_a_quota_or_throttling_and_names_what_is_missing() {
        assert!(matches!(super::check(&Facts::new(&throttled(&STACKS, None, 0))), Verdict::Clear));
        assert!(matches!(super::check(&Facts::new(&throttled(&STACKS, Some(150_000), 2))), Verdict::Clear));
        let mut p = profile(&STACKS);
        assert!(matches!(super::check(&Facts::new(&p)), Verdict::NeedsData(_)));
        p.meta.target_env = Some(TargetEnv {
            unavailable: vec![("cpu-quota".into(), "cannot read /proc/1/cgroup: gone".into())],
            ..Default::default()
        });
        let Verdict::Unchecked(why) = super::check(&Facts::new(&p)) else { panic!("checked") };
        assert!(why.ends_with("cannot read /proc/1/cgroup: gone"), "{why}");
    }

    /// A Go program is told GOMAXPROCS first, sized to the quota.
    #[test]
    fn go_gets_gomaxprocs() {
        let go =
            [("runtime.goexit;main.work", 10, 0), ("runtime.goexit;main.work;k:[waiting for a CPU]", 0, 90)];
        let Verdict::Found(x) = super::check(&Facts::new(&throttled(&go, Some(150_000), 65))) else {
            panic!("not found")
        };
        assert!(x.fix.starts_with("Go: set GOMAXPROCS=2 "), "{}", x.fix);
    }
}
