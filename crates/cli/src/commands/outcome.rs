//! How a target's run ended, for main to pass on as whyslow's exit status.

use whyslow_model::Killed;
use whyslow_record::signals;

/// The first target process a signal ended during this command's run: main reports it after the output
/// and exits with 128 + the signal, as a shell does, so a crash never hides behind a normal exit.
pub static KILLED: std::sync::OnceLock<Killed> = std::sync::OnceLock::new();

/// The status a launched command exited with when not 0: main exits with it, as strace, ltrace and time
/// do, so a failing command fails the script that profiles it.
pub static EXITED: std::sync::OnceLock<i32> = std::sync::OnceLock::new();

pub fn remember_killed(meta: &whyslow_model::Metadata) {
    if let Some(k) = meta.killed.first() {
        let _ = KILLED.set(k.clone());
    }
}

/// [`remember_killed`], and the launched command's status to pass through: only when it ended by
/// itself, not when whyslow stopped it (Ctrl-C or SIGTERM to whyslow, or the end of `-d`).
pub fn remember_outcome(meta: &whyslow_model::Metadata, duration_s: Option<f64>) {
    remember_killed(meta);
    let stopped_by_us =
        signals::stop_requested() || duration_s.is_some_and(|d| meta.duration_ns as f64 / 1e9 >= d - 0.05);
    if let Some(code) = meta.exit_code.filter(|&c| c != 0 && !stopped_by_us) {
        let _ = EXITED.set(code);
    }
}

pub fn target_killed() -> Option<&'static Killed> {
    KILLED.get()
}

/// The non-zero status of the launched command (see [`EXITED`]).
pub fn target_status() -> Option<i32> {
    EXITED.get().copied()
}
