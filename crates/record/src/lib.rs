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

/// Where memory in use of a running process cannot be measured (an allocator whyslow does not know, a Go
/// program without malloc), allocation counts where they can be: the options that count them (what
/// `--alloc` probes: malloc and the like, Go's runtime.mallocgc) and their objects, with a note that says
/// why; None when nothing can be counted either.
fn counts_instead(opts: &RecordOptions, why: &RecordError) -> Option<(Option<RecordOptions>, Objects)> {
    if opts.mem.is_none() || !matches!(why, RecordError::UnknownAllocator(_) | RecordError::GoHeap(_)) {
        return None;
    }
    let counts =
        RecordOptions { mem: None, alloc: Some(AllocOptions { period: ALLOC_PERIOD }), ..opts.clone() };
    let mut objects = Objects::new(&counts).ok()?;
    objects.notes.insert(
        0,
        format!(
            "memory: {why}; allocation counts by stack instead (alloc-count, alloc-bytes), nothing in use"
        ),
    );
    Some((Some(counts), objects))
}

/// Records until the duration passes, a stop signal arrives, or the target exits.
pub fn record(opts: &RecordOptions, observer: &mut impl Observer) -> Result<RawRecording, RecordError> {
    options::check(opts)?;
    let resolved = crate::phases::time("resolve allocation functions", || Objects::new(opts));
    let (counts, mut objects) = match resolved {
        Err(e) => match counts_instead(opts, &e) {
            Some(fallback) => fallback,
            None => return Err(e),
        },
        Ok(o) => (None, o),
    };
    let opts = counts.as_ref().unwrap_or(opts);
    let mut s = Session::start(opts, &mut objects, observer)?;
    let run = Instant::now();
    while s.step(observer).is_none() {}
    crate::phases::add("run (target)", run.elapsed());
    Ok(crate::phases::time("finish (drain, detach)", || s.finish(observer)))
}
