//! The target's surroundings: what slows it without showing in its stacks. Its cgroup's CPU quota and
//! throttling (cgroup v1 `cpu.cfs_quota_us`/`cpu.stat`, v2 `cpu.max`/`cpu.stat`/`cpu.pressure`), memory
//! pressure (its major faults, memory PSI, the host's swap-ins) and its threads' run-queue delay
//! (`/proc/PID/task/TID/schedstat`), read once at the start of a run and once at its end; the recording
//! keeps the differences. Plain file reads under a root directory ("/" live, a fake tree in tests). It
//! never fails a run: what cannot be read is named with the reason, for the doctor's "not checked" list.

use crate::procfs::Stat;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use whyslow_model::{CpuQuota, MemoryPressure, RunQueue, TargetEnv};

/// Run and wait-for-a-CPU ns per (pid, tid).
type SchedTimes = HashMap<(u32, u32), (u64, u64)>;

/// The readings at the start of a run.
pub struct EnvStart {
    root: PathBuf,
    t0: Instant,
    cpu: Result<CpuQuota, String>,
    memory: Result<MemoryPressure, String>,
    /// Per (pid, tid): run and wait ns.
    sched: Result<SchedTimes, String>,
    /// CPU ns of every process on the host, by pid (with its name).
    procs: HashMap<u32, (String, u64)>,
}

fn read(root: &Path, path: &str) -> Result<String, String> {
    let full = root.join(path.trim_start_matches('/'));
    std::fs::read_to_string(&full).map_err(|e| format!("cannot read {path}: {e}"))
}

/// `key value` lines (cpu.stat, memory.stat, /proc/vmstat): the value of `key`.
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A PSI file's `total=` of its `some` or `full` line, µs.
fn psi_total(text: &str, line: &str) -> Option<u64> {
    let l = text.lines().find(|l| l.starts_with(line))?;
    l.split(' ').find_map(|f| f.strip_prefix("total=")?.parse().ok())
}

/// Where the target's cgroup of one hierarchy is: its directory (as seen from the root) and version.
#[derive(Debug, Clone, PartialEq)]
struct CgroupDir {
    dir: String,
    /// The mount point: the walk up to ancestors stops there.
    mount: String,
    version: u8,
}

/// The directory of the target's cgroup holding controller `controller` (v1), or its v2 cgroup
/// (`controller` None), from /proc/PID/cgroup and the mount table.
fn cgroup_dir(root: &Path, pid: u32, controller: Option<&str>) -> Result<CgroupDir, String> {
    let cgroups = read(root, &format!("/proc/{pid}/cgroup"))?;
    let mountinfo = read(root, "/proc/self/mountinfo")?;
    let (version, path) = cgroups
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let (_, ctl, path) = (it.next()?, it.next()?, it.next()?);
            match controller {
                Some(c) if ctl.split(',').any(|x| x == c) => Some((1u8, path)),
                None if ctl.is_empty() => Some((2u8, path)),
                _ => None,
            }
        })
        .next()
        .ok_or_else(|| match controller {
            Some(c) => format!("the target's cgroup has no {c} controller of cgroup v1"),
            None => "the target is in no cgroup v2".to_string(),
        })?;
    for l in mountinfo.lines() {
        // id parent major:minor root mount-point options [optional fields] - fstype source super-options
        let (head, tail) = l.split_once(" - ").unwrap_or((l, ""));
        let f: Vec<&str> = head.split(' ').collect();
        let t: Vec<&str> = tail.split(' ').collect();
        let (Some(mroot), Some(mpoint), Some(fstype)) = (f.get(3), f.get(4), t.first()) else { continue };
        let ok = match controller {
            Some(c) => *fstype == "cgroup" && t.get(2).is_some_and(|o| o.split(',').any(|x| x == c)),
            None => *fstype == "cgroup2",
        };
        // A mount of a sub-tree (inside a container) holds the paths under its root.
        let Some(rel) = path.strip_prefix(mroot.trim_end_matches('/')) else { continue };
        if ok {
            let dir = format!("{}/{}", mpoint.trim_end_matches('/'), rel.trim_start_matches('/'));
            return Ok(CgroupDir {
                dir: dir.trim_end_matches('/').to_string(),
                mount: mpoint.to_string(),
                version,
            });
        }
    }
    Err(format!("no mount of the target's cgroup {path} (cgroup v{version})"))
}

/// The quota of one cgroup directory: (quota µs or None, period µs).
fn quota_of(root: &Path, dir: &str, version: u8) -> Result<(Option<u64>, u64), String> {
    if version == 1 {
        let q: i64 =
            read(root, &format!("{dir}/cpu.cfs_quota_us"))?.trim().parse().map_err(|_| "bad quota")?;
        let p: u64 =
            read(root, &format!("{dir}/cpu.cfs_period_us"))?.trim().parse().map_err(|_| "bad period")?;
        Ok(((q > 0).then_some(q as u64), p))
    } else {
        let max = read(root, &format!("{dir}/cpu.max"))?;
        let mut it = max.split_whitespace();
        let q = it.next().and_then(|q| q.parse().ok());
        let p = it.next().and_then(|p| p.parse().ok()).unwrap_or(100_000);
        Ok((q, p))
    }
}

/// The target's CPU limit: of its cgroup or the ancestor with the tightest quota (a pod's limit above a
/// container's), with that cgroup's throttling counters so far.
fn cpu_quota(root: &Path, pid: u32) -> Result<CpuQuota, String> {
    // cgroup v1's cpu controller where it is mounted (hybrid hosts), else v2 where cpu.max exists.
    let at = match cgroup_dir(root, pid, Some("cpu")) {
        Ok(d) => d,
        Err(v1) => {
            let d = cgroup_dir(root, pid, None).map_err(|v2| format!("{v1}; {v2}"))?;
            if !root.join(d.dir.trim_start_matches('/')).join("cpu.max").exists() && d.dir != d.mount {
                return Err(format!("{v1}; the cgroup v2 {} has no cpu controller (no cpu.max)", d.dir));
            }
            d
        }
    };
    let mut best: Option<(String, u64, u64)> = None;
    let mut dir = at.dir.clone();
    loop {
        if let Ok((Some(q), p)) = quota_of(root, &dir, at.version) {
            let tighter =
                best.as_ref().is_none_or(|(_, bq, bp)| (q as f64 / p as f64) < *bq as f64 / *bp as f64);
            if tighter {
                best = Some((dir.clone(), q, p));
            }
        }
        if dir.len() <= at.mount.trim_end_matches('/').len() {
            break;
        }
        match dir.rsplit_once('/') {
            Some((up, _)) if !up.is_empty() => dir = up.to_string(),
            _ => break,
        }
    }
    let (dir, quota, period) = match best {
        Some((d, q, p)) => (d, Some(q), p),
        None => {
            let period = quota_of(root, &at.dir, at.version).map_or(100_000, |x| x.1);
            (at.dir.clone(), None, period)
        }
    };
    let stat = read(root, &format!("{dir}/cpu.stat")).unwrap_or_default();
    let (throttled_us, usage_us) = if at.version == 1 {
        let usage =
            read(root, &format!("{dir}/cpuacct.usage")).ok().and_then(|u| u.trim().parse::<u64>().ok());
        (keyed(&stat, "throttled_time").unwrap_or(0) / 1000, usage.map(|n| n / 1000))
    } else {
        (keyed(&stat, "throttled_usec").unwrap_or(0), keyed(&stat, "usage_usec"))
    };
    let pressure = match at.version {
        2 => read(root, &format!("{dir}/cpu.pressure")).ok().and_then(|t| psi_total(&t, "some")),
        _ => None,
    };
    Ok(CpuQuota {
        cgroup: dir,
        version: at.version,
        quota_us: quota,
        period_us: period,
        periods: keyed(&stat, "nr_periods").unwrap_or(0),
        throttled_periods: keyed(&stat, "nr_throttled").unwrap_or(0),
        throttled_us,
        usage_us,
        pressure_some_us: pressure,
    })
}

fn memory(root: &Path, pids: &[u32]) -> Result<MemoryPressure, String> {
    let mut major_faults = 0;
    let mut any = false;
    for &pid in pids {
        if let Some(n) =
            read(root, &format!("/proc/{pid}/stat")).ok().and_then(|s| Some(Stat::parse(&s)?.major_faults))
        {
            major_faults += n;
            any = true;
        }
    }
    if !any {
        return Err("no target process to read /proc/PID/stat of".into());
    }
    // The target's own cgroup v2 (not the root: that is the host) holds its memory PSI; else the host's.
    let cg = pids.first().and_then(|&p| cgroup_dir(root, p, None).ok()).filter(|d| d.dir != d.mount);
    let (psi, of) =
        match cg.and_then(|d| Some((read(root, &format!("{}/memory.pressure", d.dir)).ok()?, d.dir))) {
            Some((t, dir)) => (Some(t), format!("cgroup {dir}")),
            None => (read(root, "/proc/pressure/memory").ok(), "host".to_string()),
        };
    Ok(MemoryPressure {
        major_faults,
        host_swap_ins: read(root, "/proc/vmstat").ok().and_then(|t| keyed(&t, "pswpin")),
        pressure_some_us: psi.as_deref().and_then(|t| psi_total(t, "some")),
        pressure_full_us: psi.as_deref().and_then(|t| psi_total(t, "full")),
        pressure_of: if psi.is_some() { of } else { String::new() },
    })
}

fn sched(root: &Path, pids: &[u32]) -> Result<SchedTimes, String> {
    let mut by = HashMap::new();
    let mut why = "no target process".to_string();
    for &pid in pids {
        let tasks = match std::fs::read_dir(root.join(format!("proc/{pid}/task"))) {
            Ok(d) => d,
            Err(e) => {
                why = format!("cannot list /proc/{pid}/task: {e}");
                continue;
            }
        };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            match read(root, &format!("/proc/{pid}/task/{tid}/schedstat")) {
                Ok(s) => {
                    let mut it = s.split_whitespace().filter_map(|x| x.parse::<u64>().ok());
                    if let (Some(run), Some(wait)) = (it.next(), it.next()) {
                        by.insert((pid, tid), (run, wait));
                    }
                }
                Err(e) => why = format!("{e} (a kernel without CONFIG_SCHEDSTATS has none)"),
            }
        }
    }
    if by.is_empty() {
        return Err(why);
    }
    Ok(by)
}

/// CPUs in a list like `0-3,8` (/proc/PID/status Cpus_allowed_list).
fn cpu_list_len(list: &str) -> u32 {
    list.trim()
        .split(',')
        .filter_map(|r| match r.split_once('-') {
            Some((a, b)) => Some(b.parse::<u32>().ok()?.saturating_sub(a.parse().ok()?) + 1),
            None => r.parse::<u32>().ok().map(|_| 1),
        })
        .sum()
}

/// CPU ns of every process on the host, with its name.
fn processes(root: &Path) -> HashMap<u32, (String, u64)> {
    let hz = crate::procfs::ticks_per_second();
    let mut by = HashMap::new();
    for e in std::fs::read_dir(root.join("proc")).into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = read(root, &format!("/proc/{pid}/stat")) else { continue };
        let Some(s) = Stat::parse(&stat) else { continue };
        by.insert(pid, (s.comm, (s.utime_ticks + s.stime_ticks) * (1_000_000_000 / hz)));
    }
    by
}

/// Reads the start values for the target processes `pids`.
pub fn start(root: &Path, pids: &[u32]) -> EnvStart {
    let first = pids.first().copied().unwrap_or(0);
    EnvStart {
        root: root.to_path_buf(),
        t0: Instant::now(),
        cpu: cpu_quota(root, first),
        memory: memory(root, pids),
        sched: sched(root, pids),
        procs: processes(root),
    }
}

impl EnvStart {
    /// Reads the end values and returns the differences. `pids`: the target processes at the end.
    pub fn finish(self, pids: &[u32]) -> TargetEnv {
        self.end(pids, false).0
    }

    /// [`EnvStart::finish`], and the start of the next window from the same readings (a service's windows
    /// follow each other: reading every process twice at each cut was a tenth of its work).
    pub fn finish_and_restart(self, pids: &[u32]) -> (TargetEnv, EnvStart) {
        let (env, next) = self.end(pids, true);
        (env, next.expect("asked for"))
    }

    fn end(self, pids: &[u32], again: bool) -> (TargetEnv, Option<EnvStart>) {
        let root = &self.root;
        let t1 = Instant::now();
        let first = pids.first().copied().unwrap_or(0);
        let mut env = TargetEnv {
            window_ns: t1.duration_since(self.t0).as_nanos() as u64,
            host_cpus: read(root, "/sys/devices/system/cpu/online").map_or(0, |l| cpu_list_len(&l)),
            ..Default::default()
        };
        let mut unavailable = |what: &str, why: String| env.unavailable.push((what.to_string(), why));
        match self.cpu {
            Ok(a) => {
                // The end reading is of the same cgroup directory (a process that moved is not followed).
                let b = cpu_quota_at(root, &a);
                env.cpu_quota = Some(CpuQuota {
                    periods: b.periods.saturating_sub(a.periods),
                    throttled_periods: b.throttled_periods.saturating_sub(a.throttled_periods),
                    throttled_us: b.throttled_us.saturating_sub(a.throttled_us),
                    usage_us: b.usage_us.zip(a.usage_us).map(|(b, a)| b.saturating_sub(a)),
                    pressure_some_us: b
                        .pressure_some_us
                        .zip(a.pressure_some_us)
                        .map(|(b, a)| b.saturating_sub(a)),
                    ..a
                });
            }
            Err(why) => unavailable("cpu-quota", why),
        }
        let (memory_now, sched_now) = (memory(root, pids), sched(root, pids));
        match (self.memory, memory_now.clone()) {
            (Ok(a), Ok(b)) => {
                let d = |b: Option<u64>, a: Option<u64>| b.zip(a).map(|(b, a)| b.saturating_sub(a));
                env.memory = Some(MemoryPressure {
                    major_faults: b.major_faults.saturating_sub(a.major_faults),
                    host_swap_ins: d(b.host_swap_ins, a.host_swap_ins),
                    pressure_some_us: d(b.pressure_some_us, a.pressure_some_us),
                    pressure_full_us: d(b.pressure_full_us, a.pressure_full_us),
                    pressure_of: a.pressure_of,
                });
            }
            (Err(why), _) | (_, Err(why)) => unavailable("memory", why),
        }
        let mut procs_now = None;
        match (&self.sched, &sched_now) {
            (Ok(a), Ok(b)) => {
                let (mut run_ns, mut wait_ns) = (0, 0);
                for (k, (run, wait)) in b {
                    let (r0, w0) = a.get(k).copied().unwrap_or((0, 0));
                    run_ns += run.saturating_sub(r0);
                    wait_ns += wait.saturating_sub(w0);
                }
                let cpus = read(root, &format!("/proc/{first}/status"))
                    .ok()
                    .and_then(|s| {
                        s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(cpu_list_len))
                    })
                    .unwrap_or(env.host_cpus);
                let now = procs_now.insert(processes(root));
                let mut others: Vec<(u32, String, u64)> = now
                    .iter()
                    .filter(|(pid, _)| !pids.contains(pid))
                    .map(|(&pid, (name, ns))| {
                        let before = self.procs.get(&pid).filter(|p| p.0 == *name).map_or(0, |p| p.1);
                        (pid, name.clone(), ns.saturating_sub(before))
                    })
                    .filter(|x| x.2 > 0)
                    .collect();
                others.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
                others.truncate(3);
                env.run_queue = Some(RunQueue { threads: b.len() as u32, cpus, run_ns, wait_ns, others });
            }
            (Err(why), _) | (_, Err(why)) => unavailable("run-queue", why.clone()),
        }
        let next = again.then(|| EnvStart {
            t0: t1,
            cpu: cpu_quota(root, pids.first().copied().unwrap_or(0)),
            memory: memory_now,
            sched: sched_now,
            procs: procs_now.unwrap_or_else(|| processes(root)),
            root: self.root.clone(),
        });
        (env, next)
    }
}

/// The counters of the cgroup `a` was read from, read again.
fn cpu_quota_at(root: &Path, a: &CpuQuota) -> CpuQuota {
    let stat = read(root, &format!("{}/cpu.stat", a.cgroup)).unwrap_or_default();
    let v1 = a.version == 1;
    let usage = if v1 {
        read(root, &format!("{}/cpuacct.usage", a.cgroup))
            .ok()
            .and_then(|u| u.trim().parse::<u64>().ok())
            .map(|n| n / 1000)
    } else {
        keyed(&stat, "usage_usec")
    };
    CpuQuota {
        periods: keyed(&stat, "nr_periods").unwrap_or(a.periods),
        throttled_periods: keyed(&stat, "nr_throttled").unwrap_or(a.throttled_periods),
        throttled_us: if v1 {
            keyed(&stat, "throttled_time").map_or(a.throttled_us, |n| n / 1000)
        } else {
            keyed(&stat, "throttled_usec").unwrap_or(a.throttled_us)
        },
        usage_us: usage,
        pressure_some_us: match a.version {
            2 => read(root, &format!("{}/cpu.pressure", a.cgroup)).ok().and_then(|t| psi_total(&t, "some")),
            _ => None,
        },
        ..a.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::{start, Path};

    fn write(root: &Path, path: &str, text: &str) {
        let p = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    const PID: u32 = 4242;

    /// /proc/4242/stat of "my prog" with these major faults and user ticks.
    fn stat_line(majflt: u64, ticks: u64) -> String {
        format!("4242 (my prog) R 1 4242 4242 0 -1 4194304 100 0 {majflt} 0 {ticks} 0 0 0 20 0 2 0 100\n")
    }

    /// A hybrid host (this VM's layout): cgroup v1's cpu controller beside a v2 tree without it.
    fn v1_tree(root: &Path, quota: &str) {
        write(root, "/proc/4242/cgroup", "4:memory:/\n1:cpu:/app\n0::/\n");
        write(
            root,
            "/proc/self/mountinfo",
            "30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu\n\
             40 25 0:29 / /sys/fs/cgroup/unified rw,relatime shared:7 - cgroup2 cgroup2 rw\n",
        );
        write(root, "/sys/fs/cgroup/cpu/app/cpu.cfs_quota_us", quota);
        write(root, "/sys/fs/cgroup/cpu/app/cpu.cfs_period_us", "100000\n");
        write(root, "/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
        write(root, "/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
    }

    #[test]
    fn cgroup_v1_quota_and_throttling() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        v1_tree(root, "20000\n");
        write(
            root,
            "/sys/fs/cgroup/cpu/app/cpu.stat",
            "nr_periods 10\nnr_throttled 5\nthrottled_time 7000000\n",
        );
        let start = start(root, &[PID]);
        write(
            root,
            "/sys/fs/cgroup/cpu/app/cpu.stat",
            "nr_periods 75\nnr_throttled 70\nthrottled_time 10807000000\n",
        );
        let env = start.finish(&[PID]);
        let q = env.cpu_quota.unwrap();
        assert_eq!(
            (q.cgroup.as_str(), q.version, q.quota_us, q.period_us),
            ("/sys/fs/cgroup/cpu/app", 1, Some(20000), 100000)
        );
        assert_eq!((q.periods, q.throttled_periods, q.throttled_us), (65, 65, 10_800_000));
        assert_eq!(q.cpus(), Some(0.2));
        // No /proc/4242/stat or task directory in the fake tree: named, not guessed.
        let what: Vec<&str> = env.unavailable.iter().map(|u| u.0.as_str()).collect();
        assert_eq!(what, ["memory", "run-queue"]);
    }

    /// cgroup v2: cpu.max and throttled_usec; the tighter quota of an ancestor (a pod's) wins; PSI read.
    #[test]
    fn cgroup_v2_quota_of_the_tightest_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "/proc/4242/cgroup", "0::/pod/ctr\n");
        write(root, "/proc/self/mountinfo", "40 25 0:29 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        write(root, "/sys/fs/cgroup/pod/ctr/cpu.max", "max 100000\n");
        write(root, "/sys/fs/cgroup/pod/cpu.max", "50000 100000\n");
        let stat = |n: u64| {
            format!(
                "usage_usec {}\nnr_periods {n}\nnr_throttled {}\nthrottled_usec {}\n",
                n * 50_000,
                n / 2,
                n * 1000
            )
        };
        write(root, "/sys/fs/cgroup/pod/cpu.stat", &stat(100));
        write(
            root,
            "/sys/fs/cgroup/pod/cpu.pressure",
            "some avg10=1.00 avg60=0 avg300=0 total=1000\nfull avg10=0 avg60=0 avg300=0 total=0\n",
        );
        let start = start(root, &[PID]);
        write(root, "/sys/fs/cgroup/pod/cpu.stat", &stat(300));
        write(root, "/sys/fs/cgroup/pod/cpu.pressure", "some avg10=1.00 avg60=0 avg300=0 total=501000\n");
        let q = start.finish(&[PID]).cpu_quota.unwrap();
        assert_eq!((q.cgroup.as_str(), q.version, q.quota_us), ("/sys/fs/cgroup/pod", 2, Some(50000)));
        assert_eq!((q.periods, q.throttled_periods, q.throttled_us), (200, 100, 200_000));
        assert_eq!((q.usage_us, q.pressure_some_us), (Some(10_000_000), Some(500_000)));
    }

    #[test]
    fn no_cgroup_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let env = start(dir.path(), &[PID]).finish(&[PID]);
        assert!(env.cpu_quota.is_none());
        assert!(env.unavailable[0].0 == "cpu-quota" && env.unavailable[0].1.contains("/proc/4242/cgroup"));
    }

    #[test]
    fn memory_and_run_queue() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        v1_tree(root, "-1\n");
        write(root, "/proc/4242/stat", &stat_line(10, 5));
        write(root, "/proc/4242/status", "Name:\tx\nCpus_allowed_list:\t0-1\n");
        write(root, "/proc/4242/task/4242/schedstat", "1000 500 3\n");
        write(root, "/proc/7/stat", &stat_line(0, 100).replace("4242 (my prog)", "7 (cc1plus)"));
        write(root, "/proc/vmstat", "pgfault 5\npswpin 100\n");
        write(
            root,
            "/proc/pressure/memory",
            "some avg10=0 avg60=0 avg300=0 total=10\nfull avg10=0 avg60=0 avg300=0 total=5\n",
        );
        write(root, "/sys/devices/system/cpu/online", "0-1\n");
        let start = start(root, &[PID]);
        write(root, "/proc/4242/stat", &stat_line(510, 5));
        write(root, "/proc/4242/task/4242/schedstat", "3000 4500 9\n");
        write(root, "/proc/4242/task/4243/schedstat", "100 200 1\n");
        write(root, "/proc/7/stat", &stat_line(0, 300).replace("4242 (my prog)", "7 (cc1plus)"));
        write(root, "/proc/vmstat", "pgfault 5\npswpin 160\n");
        write(
            root,
            "/proc/pressure/memory",
            "some avg10=0 avg60=0 avg300=0 total=2010\nfull avg10=0 avg60=0 avg300=0 total=1005\n",
        );
        let env = start.finish(&[PID]);
        let m = env.memory.unwrap();
        assert_eq!(
            (m.major_faults, m.host_swap_ins, m.pressure_some_us, m.pressure_full_us, m.pressure_of.as_str()),
            (500, Some(60), Some(2000), Some(1000), "host")
        );
        let r = env.run_queue.unwrap();
        assert_eq!((r.threads, r.cpus, r.run_ns, r.wait_ns), (2, 2, 2100, 4200));
        // SAFETY: sysconf only reads a configuration value.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        assert_eq!(r.others, [(7, "cc1plus".to_string(), 200 * (1_000_000_000 / hz))]);
        assert_eq!(env.host_cpus, 2);
        // The quota: none (-1).
        assert_eq!(env.cpu_quota.unwrap().quota_us, None);
    }

    /// A window's end readings start the next one: the next window counts from them, as a fresh start would.
    #[test]
    fn the_next_window_starts_from_the_last_ones_end() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        v1_tree(root, "-1\n");
        let other = |ticks: u64| stat_line(0, ticks).replace("4242 (my prog)", "7 (cc1plus)");
        write(root, "/proc/4242/stat", &stat_line(10, 5));
        write(root, "/proc/4242/task/4242/schedstat", "1000 500 3\n");
        write(root, "/proc/7/stat", &other(100));
        let first = start(root, &[PID]);
        write(root, "/proc/4242/stat", &stat_line(110, 5));
        write(root, "/proc/4242/task/4242/schedstat", "3000 1500 9\n");
        write(root, "/proc/7/stat", &other(300));
        let (env, next) = first.finish_and_restart(&[PID]);
        assert_eq!(env.memory.unwrap().major_faults, 100);
        let r = env.run_queue.unwrap();
        assert_eq!((r.run_ns, r.wait_ns, r.others.len()), (2000, 1000, 1));
        write(root, "/proc/4242/stat", &stat_line(140, 5));
        write(root, "/proc/4242/task/4242/schedstat", "3500 1600 10\n");
        // cc1plus used no CPU in the second window.
        let env = next.finish(&[PID]);
        assert_eq!(env.memory.unwrap().major_faults, 30);
        let r = env.run_queue.unwrap();
        assert_eq!((r.run_ns, r.wait_ns, r.others.len()), (500, 100, 0));
    }
}
