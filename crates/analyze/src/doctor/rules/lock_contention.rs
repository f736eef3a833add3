//! lock-contention: threads blocked waiting for a mutex or rwlock (futex waits under pthread_mutex_lock
//! and friends), with the code that takes the lock.

use super::{finding, list, named, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::LOCK_WALL_PCT;
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "lock-contention",
    title: "threads wait for a lock",
    why: "while one thread holds the lock the others sleep in futex_wait and are woken one by one: the \
          critical section runs serially, whatever the number of cores",
    fix: "hold the lock for less (compute outside, publish inside), split it (per-bucket or per-thread \
          data merged at the end), or use atomics or a reader-writer lock where reads dominate",
    shrinks: "blocked time under pthread_mutex_lock (`whyslow report --type offcpu`)",
};

fn is_lock_wait(f: &Func) -> bool {
    !f.kernel
        && named(
            f.plain(),
            &[
                "pthread_mutex_lock",
                "pthread_mutex_timedlock",
                "pthread_mutex_clocklock",
                "mutex_lock_full",
                "lll_lock_wait",
                "lll_lock_wait_private",
                "pthread_rwlock_rdlock",
                "pthread_rwlock_wrlock",
                "pthread_rwlock_timedrdlock",
                "pthread_rwlock_timedwrlock",
                "pthread_spin_lock",
            ],
            &[
                "std::mutex::lock",
                "std::shared_mutex::lock",
                "sync.(*Mutex).Lock",
                "sync.(*RWMutex).Lock",
                "sync.(*RWMutex).RLock",
                "sync.runtime_SemacquireMutex",
            ],
        )
}

pub fn check(f: &Facts) -> Verdict {
    if !f.has_offcpu() {
        return Verdict::NeedsData("off-CPU time (record --offcpu)");
    }
    let m = f.blocked(&is_lock_wait);
    if m.pct < LOCK_WALL_PCT {
        return Verdict::Clear;
    }
    let mut evidence = vec![format!(
        "{:.1}% of the threads' wall time is spent blocked in: {}",
        m.pct,
        list(&m.entries, f.wall_total)
    )];
    if !m.sites.is_empty() {
        evidence.push(format!("lock taken in: {}", list(&m.sites, f.wall_total)));
    }
    if f.has_syscalls() {
        let futex = f.syscall(&["futex"]);
        evidence.push(format!(
            "{} futex syscalls, {:.1} ms in total",
            futex.calls,
            futex.total_ns as f64 / 1e6
        ));
    }
    Verdict::Found(finding(f, &TEXT, &m, "wall", Confidence::High, evidence))
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;

    #[test]
    fn fires_on_blocked_time_under_mutex_lock() {
        let p = profile(&[
            ("worker;add_sample;lib:pthread_mutex_lock;lib:__lll_lock_wait;k:futex_wait;k:schedule", 0, 30),
            ("worker;add_sample", 50, 0),
            ("worker;lib:pthread_cond_wait;k:futex_wait", 0, 20),
        ]);
        assert_eq!(fired(super::check, &p), Some(30.0));
        let idle =
            profile(&[("worker;lib:pthread_cond_wait;k:futex_wait", 0, 50), ("worker;add_sample", 50, 0)]);
        assert_eq!(fired(super::check, &idle), None);
    }
}
