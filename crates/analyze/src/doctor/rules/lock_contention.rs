//! lock-contention: threads blocked waiting for a mutex or rwlock (futex waits under pthread_mutex_lock
//! and friends; Go threads idle after their goroutine parked on a sync.Mutex), with the code that takes
//! the lock.

use super::{named, share_rule, Share, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::LOCK_WALL_PCT;
use crate::doctor::Verdict;

const TEXT: Text = Text {
    id: "lock-contention",
    title: "threads wait for a lock",
    why: "while one thread (or goroutine) holds the lock the others sleep in futex_wait (or park, their \
          threads left with nothing to run) and are woken one by one: the critical section runs serially, \
          whatever the number of cores",
    fix: "hold the lock for less (compute outside, publish inside), split it (per-bucket or per-thread \
          data merged at the end), or use atomics or a reader-writer lock where reads dominate",
    shrinks: "blocked time under pthread_mutex_lock or sync.(*Mutex).Lock (`whyslow report --type offcpu`)",
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

fn futexes(f: &Facts) -> Vec<String> {
    if !f.has_syscalls() {
        return Vec::new();
    }
    let futex = f.syscall(&["futex"]);
    vec![format!("{} futex syscalls, {:.1} ms in total", futex.calls, futex.total_ns as f64 / 1e6)]
}

pub fn check(f: &Facts) -> Verdict {
    share_rule(f, &TEXT, Share { extra: &futexes, ..Share::blocked(&is_lock_wait, LOCK_WALL_PCT) })
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
        // The condition-variable wait is idle time, out of the working time: 30 of 80.
        assert_eq!(fired(super::check, &p), Some(37.5));
        let idle =
            profile(&[("worker;lib:pthread_cond_wait;k:futex_wait", 0, 50), ("worker;add_sample", 50, 0)]);
        assert_eq!(fired(super::check, &idle), None);
    }
}
