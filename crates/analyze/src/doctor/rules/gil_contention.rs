//! gil-contention: CPython threads wait for the interpreter lock (the GIL) to run their Python code: a
//! CPU-bound program spread over threads runs on one core at a time, the other threads waiting in
//! take_gil (time that looks like an idle thread's condition-variable wait, counted as blocked here: see
//! facts/waits.rs).

use super::{share_rule, Share, Text};
use crate::doctor::facts::{is_gil_take, Facts};
use crate::doctor::thresholds::GIL_WALL_PCT;
use crate::doctor::Verdict;

const TEXT: Text = Text {
    id: "gil-contention",
    title: "Python threads wait for the GIL",
    why: "CPython runs Python code in one thread at a time, under its global interpreter lock: threads that \
          compute in Python take turns (every 5 ms by default) and wait in take_gil the rest of the time, \
          so CPU-bound work split over threads uses about one core, whatever the number of cores and \
          threads",
    fix: "run CPU-bound Python work in processes (multiprocessing, concurrent.futures.ProcessPoolExecutor), \
          or move the hot loop into native code that releases the GIL while it computes (numpy and most C \
          extensions do; Py_BEGIN_ALLOW_THREADS in your own), or use CPython 3.13's free-threaded build \
          (python3.13t); threads that mostly wait for I/O release the GIL while they wait and are not this",
    shrinks: "blocked time under take_gil (`whyslow report --type offcpu`)",
};

pub fn check(f: &Facts) -> Verdict {
    share_rule(f, &TEXT, Share::blocked(&is_gil_take, GIL_WALL_PCT))
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;

    #[test]
    fn fires_on_threads_waiting_in_take_gil_not_on_idle_ones() {
        let gil = "pythread_wrapper;worker;spin;lib:take_gil;lib:pthread_cond_timedwait;k:futex_wait";
        let p = profile(&[(gil, 0, 60), ("pythread_wrapper;worker;spin", 40, 0)]);
        // The GIL wait is blocked time, not idle: 60 of 100.
        assert_eq!(fired(super::check, &p), Some(60.0));
        let idle = "pythread_wrapper;worker;lib:pthread_cond_timedwait;k:futex_wait";
        let p = profile(&[(idle, 0, 60), ("pythread_wrapper;worker;spin", 40, 0)]);
        assert_eq!(fired(super::check, &p), None);
        // Below the threshold (20% of the working time): one turn of a mostly running program.
        let p = profile(&[(gil, 0, 10), ("pythread_wrapper;worker;spin", 90, 0)]);
        assert_eq!(fired(super::check, &p), None);
    }
}
