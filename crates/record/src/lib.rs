//! The live source: samples a target's threads with perf_event_open, unwinds each user stack while the
//! run goes on, and normalizes every address to (module, file offset) while the process is still alive.
//!
//! It hands a [`whyslow_model::raw::RawRecording`] to the symbolizer and never symbolizes or renders.
//! It must never stop or slow the target beyond the sampling itself: no ptrace, and all events are
//! disabled and closed on every exit path.

mod records;
mod session;
pub mod signals;
mod sys;
pub mod target;

pub use session::{record, Progress};
pub use sys::Clock;
pub use target::Target;

/// How to record.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub target: Target,
    /// Sampling frequency in Hz.
    pub frequency: u64,
    /// Stop after this long (None: until the target exits or a stop signal).
    pub duration: Option<std::time::Duration>,
    /// Preferred clock; `Cycles` falls back to `CpuClock` where the PMU has none.
    pub clock: Clock,
    /// Bytes of user stack copied per sample (max 65528).
    pub stack_bytes: u32,
    /// Record kernel stacks too.
    pub kernel: bool,
    /// Data pages per CPU ring buffer (power of two).
    pub ring_pages: usize,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            target: Target::Pids(Vec::new()),
            frequency: 999,
            duration: None,
            clock: Clock::Auto,
            stack_bytes: 32 * 1024,
            kernel: true,
            ring_pages: 1024,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(
        "not allowed to open perf events ({0}): run as root, grant CAP_PERFMON, or lower \
         /proc/sys/kernel/perf_event_paranoid (e.g. `sudo sysctl kernel.perf_event_paranoid=1`)"
    )]
    Permission(std::io::Error),
    #[error("no such process: {0}")]
    NoSuchProcess(u32),
    #[error("no running process is named '{name}'{}", whyslow_model::did_you_mean(.suggestions))]
    NoSuchComm { name: String, suggestions: Vec<String> },
    #[error("no command given")]
    NoCommand,
    #[error("argument contains a NUL byte: {0:?}")]
    BadArgument(String),
    #[error("cannot run {0}: {1}")]
    Exec(String, std::io::Error),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("perf_event_open failed: {0}")]
    PerfEvent(std::io::Error),
    #[error("invalid option: {0}")]
    Invalid(String),
}
