//! What a thread's off-CPU time in one stack was: the functions threads wait for work in, and the lock
//! waits that make such a stack blocked after all. Name catalogues, user and kernel.

use super::Func;
use whyslow_model::PREEMPTED_FRAME;

/// What a thread's off-CPU time in one stack was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wait {
    /// Blocked on a resource: I/O, a lock, a page fault, a sleep.
    Blocked,
    /// Runnable but preempted: waiting for a CPU.
    Runnable,
    /// Waiting for work: an idle pool or runtime thread parked on a condition variable, semaphore or
    /// futex, or an event loop waiting with nothing ready. Not slowness: left out of every wall share.
    Idle,
}

/// What the off-CPU time of a stack (function ids outermost first, `func` naming each) was.
pub(super) fn wait_of<'a>(funcs: &[usize], func: impl Fn(usize) -> Func<'a>) -> Wait {
    if funcs.last().is_some_and(|&f| func(f).name == PREEMPTED_FRAME) {
        return Wait::Runnable;
    }
    match funcs.iter().position(|&f| is_idle_wait(&func(f))) {
        Some(i)
            if !funcs[i..].iter().any(|&f| is_lock_below_wait(&func(f)))
                && !sleeps_in(&funcs[..=i], &func)
                && !funcs[..i].iter().any(|&f| is_lock_park(&func(f))) =>
        {
            Wait::Idle
        }
        _ => Wait::Blocked,
    }
}

/// The innermost frame of `funcs` (outermost first) is a poll that a sleep function called: a sleep
/// without file descriptors to wait on, not an event loop waiting for work.
fn sleeps_in<'a>(funcs: &[usize], func: &impl Fn(usize) -> Func<'a>) -> bool {
    funcs.split_last().is_some_and(|(&poll, callers)| {
        is_poll_wait(&func(poll)) && callers.iter().any(|&f| is_sleep_by_poll(&func(f)))
    })
}

/// A stack (function ids outermost first) that waits for work in a poll: a poll wait not called by a
/// sleep function (see [`is_sleep_by_poll`]).
pub(super) fn polls_for_work<'a>(funcs: &[usize], func: impl Fn(usize) -> Func<'a>) -> bool {
    funcs.iter().position(|&f| is_poll_wait(&func(f))).is_some_and(|i| !sleeps_in(&funcs[..=i], &func))
}

/// A stack (function ids outermost first) that sleeps in a poll (see [`is_sleep_by_poll`]).
pub(super) fn sleeps_by_poll<'a>(funcs: &[usize], func: impl Fn(usize) -> Func<'a>) -> bool {
    funcs.iter().position(|&f| is_poll_wait(&func(f))).is_some_and(|i| sleeps_in(&funcs[..=i], &func))
}

/// A sleep that waits in a poll of no file descriptors, only a timeout (the kernel's frames are an event
/// loop's: do_select, poll_schedule_timeout): CPython 3.8-3.10's time.sleep (`time_sleep`, `pysleep`:
/// select; clock_nanosleep from 3.11), Tcl's `Tcl_Sleep` (select), a libc's `usleep` built on select.
/// Its time is a sleep's: blocked, as a nanosleep's is.
pub(super) fn is_sleep_by_poll(f: &Func) -> bool {
    const USER: [&str; 4] = ["time_sleep", "pysleep", "Tcl_Sleep", "usleep"];
    !f.kernel && USER.contains(&f.plain().trim_start_matches('_'))
}

/// The syscalls a sleep may wait in (with no file descriptors): a thread counted in them, and seen
/// sleeping in them, is no event loop for their count (see [`is_sleep_by_poll`]).
pub(super) const SLEEP_POLL_SYSCALLS: [&str; 4] = ["poll", "ppoll", "select", "pselect6"];

/// A function a thread waits for work in: a pool's condition variable or semaphore, an event loop's
/// poll, a listener's accept, the Go scheduler parking an idle M, a thread or process waiting for another
/// to finish (whose time is counted where it runs). User and kernel names, so a stack whose user part
/// could not be unwound is still known by its kernel frames.
pub(super) fn is_idle_wait(f: &Func) -> bool {
    const USER: [&str; 8] = [
        "sem_wait",
        "sem_timedwait",
        "sem_clockwait",
        "sigwaitinfo",
        "sigtimedwait",
        "wait4",
        "waitpid",
        "waitid",
    ];
    const GO: [&str; 8] = [
        "runtime.stopm",
        "runtime.notesleep",
        "runtime.notetsleep",
        "runtime.notetsleepg",
        "runtime.sysmon",
        "runtime.templateThread",
        "runtime.findRunnable",
        "runtime.findrunnable",
    ];
    const KERNEL: [&str; 2] = ["do_sigtimedwait", "do_wait"];
    if is_poll_wait(f) {
        return true;
    }
    if f.kernel {
        return KERNEL.contains(&f.name);
    }
    let plain = f.plain().trim_start_matches('_');
    (plain.starts_with("pthread_cond_") && plain.contains("wait"))
        || (plain.starts_with("pthread_") && plain.contains("join"))
        || USER.contains(&plain)
        || GO.contains(&f.name)
        || f.name == "runtime.netpoll"
}

/// A function an event loop waits for work in: a poll of its sockets or its listener's accept (user or
/// kernel names). Go's netpoller reaches the same kernel functions, but its threads are the scheduler's
/// (sized by GOMAXPROCS), not the program's event loops: see [`is_go_netpoll`].
pub(super) fn is_poll_wait(f: &Func) -> bool {
    // The user functions are the syscalls' wrappers, and two entry points named otherwise.
    const USER_ONLY: [&str; 2] = ["pselect", "io_uring_wait_cqe"];
    const KERNEL: [&str; 6] =
        ["do_epoll_wait", "do_sys_poll", "do_select", "core_sys_select", "io_cqring_wait", "inet_csk_accept"];
    if f.kernel {
        return KERNEL.contains(&f.name);
    }
    let name = f.plain().trim_start_matches('_');
    POLL_SYSCALLS.contains(&name) || USER_ONLY.contains(&name)
}

/// The syscalls an event loop waits for work in (a thread that always finds work may never be sampled
/// in them, but still makes them: the syscall counters count each).
pub(super) const POLL_SYSCALLS: [&str; 10] = [
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "accept",
    "accept4",
    "io_uring_enter",
];

/// Go's scheduler polling the network for its goroutines.
pub(super) fn is_go_netpoll(f: &Func) -> bool {
    !f.kernel && f.name.starts_with("runtime.netpoll")
}

/// A lock taken by a wait that looks idle, whose time is the lock's:
/// - a goroutine parked on a sync.Mutex or RWMutex: its thread's stack goes on past runtime.mcall into
///   the scheduler, where the thread idles for want of a goroutine to run; the threads would run the
///   parked goroutines, as a C thread blocked in pthread_mutex_lock would run on;
/// - a CPython thread taking the interpreter lock (the GIL): it waits on the lock's condition variable,
///   with Python code to run.
fn is_lock_park(f: &Func) -> bool {
    !f.kernel
        && (f.name.ends_with(".runtime_SemacquireMutex")
            || f.name.starts_with("sync.runtime_SemacquireRWMutex")
            || is_gil_take(f))
}

/// CPython taking its interpreter lock (3.8-3.13: `take_gil` in ceval_gil).
pub fn is_gil_take(f: &Func) -> bool {
    !f.kernel && f.name == "take_gil"
}

/// A lock wait below an idle wait makes the stack blocked: a woken waiter re-taking the condition
/// variable's mutex, the Go scheduler spinning on its own lock.
fn is_lock_below_wait(f: &Func) -> bool {
    !f.kernel
        && (f.name.contains("lll_lock_wait") || ["runtime.lock2", "runtime.lockWithRank"].contains(&f.name))
}
