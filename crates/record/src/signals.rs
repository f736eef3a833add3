//! Ctrl-C and SIGTERM become a stop request the recording loop polls, so a run always finishes writing and
//! detaches instead of dying with events attached. A loop that waits on file descriptors can wait on
//! [`stop_fd`] instead of polling the flag on a clock.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
/// An eventfd that becomes readable at the first stop request (-1: not made yet).
static STOP_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_: libc::c_int) {
    request_stop();
}

/// Installs SIGINT/SIGTERM/SIGHUP handlers that set the stop flag.
pub fn install() {
    stop_fd();
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to atomics and writes to an eventfd (async-signal-safe);
        // sigaction copies the struct.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
    let fd = STOP_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: writes 8 bytes from a live u64 to an eventfd this process keeps open for its lifetime.
        unsafe { libc::write(fd, (&1u64 as *const u64).cast(), 8) };
    }
}

/// A file descriptor that becomes readable (and stays so) once a stop was requested; open for the
/// process's lifetime. None when no eventfd could be made (then poll [`stop_requested`]).
pub fn stop_fd() -> Option<i32> {
    let fd = STOP_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        return Some(fd);
    }
    // SAFETY: eventfd takes no pointers.
    let made = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if made < 0 {
        return None;
    }
    match STOP_FD.compare_exchange(-1, made, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => {
            if stop_requested() {
                request_stop();
            }
            Some(made)
        }
        Err(other) => {
            // SAFETY: closes the eventfd made above, which nothing else has seen.
            unsafe { libc::close(made) };
            Some(other)
        }
    }
}
