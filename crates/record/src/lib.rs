//! The live sources: samples a target's threads with perf_event_open (CPU time, syscall entries), counts
//! syscalls exactly with eBPF, unwinds each user stack while the run goes on, and normalizes every address
//! to (module, file offset) while the process is still alive.
//!
//! It hands a [`whyslow_model::raw::RawRecording`] to the symbolizer and never symbolizes or renders.
//! It must never stop or slow the target beyond the sampling itself: no ptrace, and all events are
//! disabled and closed on every exit path.

use std::time::Instant;
use whyslow_model::raw::RawRecording;

mod allocators;
mod bpf;
mod budget;
pub mod calls;
mod error;
mod exits;
mod files;
pub mod follow;
mod host;
mod hotspot;
pub mod jvm;
mod layout;
pub mod mem;
mod mem_attach;
mod options;
pub mod phases;
pub mod procfs;
mod records;
mod session;
mod sideband;
pub mod signals;
mod sources;
pub mod stacks;
mod sys;
mod syscall_sampler;
pub mod target;
mod target_env;
mod waits;

pub use bpf::syscall_numbers;
pub use budget::{
    ProbeLoad, BUDGET_CREDIT_NS, BUDGET_NOTE, HIT_COST_EMULATED_NS, HIT_COST_STEPPED_NS,
    STACK_SAMPLE_COST_NS, SYSCALL_COST_NS, SYSCALL_OTHER_COST_NS,
};
pub use error::{NoSamples, RecordError, RecordOption};
pub use exits::watching_exits;
pub use options::{AllocOptions, CallOptions, OffCpuOptions, RecordOptions, SyscallOptions, ALLOC_PERIOD};
pub use session::{End, Observer, Progress, Session};
pub use sources::Objects;
pub use sys::{monotonic_ns, sampling_period, thread_cpu_ns, Clock};
pub use target::Target;
pub use target::{stop_launched, yield_cpu};

/// Records until the duration passes, a stop signal arrives, or the target exits.
pub fn record(opts: &RecordOptions, observer: &mut impl Observer) -> Result<RawRecording, RecordError> {
    options::check(opts)?;
    let mut objects = crate::phases::time("resolve allocation functions", || Objects::new(opts))?;
    let mut s = Session::start(opts, &mut objects, observer)?;
    let run = Instant::now();
    while s.step(observer).is_none() {}
    crate::phases::add("run (target)", run.elapsed());
    Ok(crate::phases::time("finish (drain, detach)", || s.finish(observer)))
}
