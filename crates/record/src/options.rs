//! How to record: the options of a run, plain structs with defaults, and the check of their ranges made
//! before anything is opened. Nothing here talks to the kernel beyond reading its sampling limit.

use crate::{calls, Clock, RecordError, RecordOption, Target};

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
    /// Sample on-CPU time.
    pub cpu: bool,
    /// Count syscalls exactly (and optionally trace them or sample their stacks).
    pub syscalls: Option<SyscallOptions>,
    /// Count calls of functions exactly.
    pub calls: Option<CallOptions>,
    /// Record allocations (count and bytes) by stack.
    pub alloc: Option<AllocOptions>,
    /// Record memory in use by stack (a launched command: the in-process library of [`crate::mem`]).
    pub mem: Option<crate::mem::MemOptions>,
    /// Record blocked (off-CPU) time by stack.
    pub offcpu: Option<OffCpuOptions>,
    /// Call [`Observer::snapshot`](crate::Observer::snapshot) this often with the counters so far.
    pub interval: Option<std::time::Duration>,
    /// Leave a launched command that is still running at the end running (its pid is the first of
    /// `meta.target_pids`; the caller ends it with [`stop_launched`](crate::stop_launched)); otherwise it is stopped.
    pub leave_running: bool,
    /// Stop when another thread sets this (e.g. when a load command ends).
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Stop the probes that cost per call once their estimated cost exceeds this share of the target's
    /// CPU time since the start, plus [`BUDGET_CREDIT_NS`](crate::BUDGET_CREDIT_NS): calls and allocation probes (each hit costs
    /// about [`HIT_COST_EMULATED_NS`](crate::HIT_COST_EMULATED_NS) or [`HIT_COST_STEPPED_NS`](crate::HIT_COST_STEPPED_NS) by how the kernel runs the probed
    /// instruction) and syscall counters (each syscall priced as measured at the start of the run, else
    /// [`SYSCALL_COST_NS`](crate::SYSCALL_COST_NS); [`STACK_SAMPLE_COST_NS`](crate::STACK_SAMPLE_COST_NS) per stack sampled; every other process's syscalls
    /// meanwhile too, else at [`SYSCALL_OTHER_COST_NS`](crate::SYSCALL_OTHER_COST_NS)). Their counts then cover the run
    /// until that point (`meta.syscalls_duration_ns`, `meta.calls_duration_ns`); CPU and off-CPU sampling
    /// go on, and a run with neither ends. Where sampling goes on, the syscall counters come back in
    /// short slices spread over the rest of the run, within the budget (`meta.syscall_slices`). None: no
    /// limit.
    pub probe_budget: Option<f64>,
    /// The caller cuts the run into windows and keeps it going (an agent): memory in use of running
    /// processes is kept per window as what is held at its end, and the probe budget stops the probes
    /// that cost per call without ending a run that samples nothing else (its windows keep the in-use
    /// as of then).
    pub windowed: bool,
}

/// Which functions to count and how.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// From [`calls::resolve`].
    pub probes: Vec<calls::Probe>,
    /// Every file the patterns were resolved against.
    pub modules: Vec<std::path::PathBuf>,
    /// The patterns, resolved again in a library the target loads later (dlopen) to probe its matches.
    pub patterns: Vec<calls::PatternSpec>,
    /// Also time each call (return probes).
    pub latency: bool,
    /// Probe every process mapping the files and count the target and the children it forks (other
    /// processes calling these functions take the probe trap too); otherwise only the target processes.
    pub follow_children: bool,
    /// Sample the user stack of every Nth call of each function (copied by the counting eBPF program),
    /// for the callers.
    pub callers_period: Option<u64>,
}

impl CallOptions {
    /// What the probes of these options read at their sites: with `latency`, a return probe hijacks the
    /// return address on top of the stack, so nothing may have been pushed before the site; with callers,
    /// every hit samples a stack, so every hit must be a call of the function.
    pub fn needs(&self) -> whyslow_symbols::placement::Needs {
        use whyslow_symbols::placement::{Needs, StackNeed};
        Needs {
            stack: if self.latency { StackNeed::Untouched } else { StackNeed::Any },
            per_call: self.callers_period.is_some(),
            ..Needs::default()
        }
    }
}

/// How to record off-CPU time.
#[derive(Debug, Clone)]
pub struct OffCpuOptions {
    /// Blocks shorter than this are left out.
    pub min_block: std::time::Duration,
    /// Blocks shorter than this are kept with probability length / period and valued one period (an
    /// unbiased estimate at about one record per period of blocked time per thread, however often the
    /// target switches); longer ones are kept as they are. Zero keeps every block.
    pub sample_period: std::time::Duration,
}

impl OffCpuOptions {
    /// Blocked time sampled at the rate CPU time is: one period is 1 / `frequency`.
    pub fn sampled_at(frequency: u64, min_block: std::time::Duration) -> Self {
        let sample_period = std::time::Duration::from_nanos(1_000_000_000 / frequency.max(1));
        OffCpuOptions { min_block, sample_period }
    }
}

/// How to record allocations. Counts and bytes are exact per call site and stack key, counted in the
/// kernel; stacks are copied as samples of those keys.
#[derive(Debug, Clone)]
pub struct AllocOptions {
    /// Copy the stack of each key at its 1st, 2nd, 4th, ... call and then at least every `period`th (1:
    /// every call).
    pub period: u64,
}

/// The default [`AllocOptions::period`]. Where one stack key covers several stacks (code without frame
/// pointers), each sample stands for the calls since the key's previous one, so the split over them is
/// off by at most this many calls per change of stack: 1024 keeps it small at one 16 KB copy per 1024
/// calls of a hot site.
pub const ALLOC_PERIOD: u64 = 1024;

/// What to collect about syscalls besides the exact counters.
#[derive(Debug, Clone, Default)]
pub struct SyscallOptions {
    /// Syscall names to report one by one (arguments, result, duration).
    pub trace: Vec<String>,
    /// Sample the user stack of every `stacks_period`-th syscall entry (None: no stacks).
    pub stacks_period: Option<u64>,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            target: Target::Pids(Vec::new()),
            frequency: 999,
            duration: None,
            clock: Clock::Auto,
            stack_bytes: 16 * 1024,
            kernel: true,
            ring_pages: 1024,
            cpu: true,
            syscalls: None,
            calls: None,
            alloc: None,
            mem: None,
            offcpu: None,
            interval: None,
            leave_running: false,
            stop: None,
            probe_budget: None,
            windowed: false,
        }
    }
}

/// Checks what the kernel and the options allow before anything is opened.
pub(crate) fn check(opts: &RecordOptions) -> Result<(), RecordError> {
    let bad = |option, problem: String| Err(RecordError::BadOption { option, problem });
    if opts.stack_bytes == 0 || opts.stack_bytes > 65528 || !opts.stack_bytes.is_multiple_of(8) {
        return bad(
            RecordOption::StackBytes,
            format!("must be a multiple of 8 from 8 to 65528 bytes, not {}", opts.stack_bytes),
        );
    }
    if !opts.ring_pages.is_power_of_two() {
        return Err(RecordError::Invalid("ring pages must be a power of two".into()));
    }
    let max_rate = crate::procfs::read_trim("/proc/sys/kernel/perf_event_max_sample_rate")
        .parse::<u64>()
        .unwrap_or(u64::MAX);
    if opts.cpu && (opts.frequency == 0 || opts.frequency > max_rate) {
        return bad(
            RecordOption::Frequency,
            format!(
                "{} Hz: this kernel samples at 1 to {max_rate} Hz (kernel.perf_event_max_sample_rate; raise \
                 it with `sysctl kernel.perf_event_max_sample_rate=N`)",
                opts.frequency
            ),
        );
    }
    let at_least_1 = |option, n: Option<u64>| match n {
        Some(0) => bad(option, "must be at least 1".into()),
        _ => Ok(()),
    };
    at_least_1(RecordOption::AllocPeriod, opts.alloc.as_ref().map(|a| a.period))?;
    at_least_1(RecordOption::SyscallStacksPeriod, opts.syscalls.as_ref().and_then(|s| s.stacks_period))?;
    if let Some(calls) = &opts.calls {
        at_least_1(RecordOption::CallersPeriod, calls.callers_period)?;
        if calls.callers_period.is_some() && calls.probes.len() > crate::calls::MAX_CALLER_PROBES {
            return bad(
                RecordOption::CallerStacks,
                format!(
                    "takes stacks with one event per function and CPU: at most {} functions (these patterns \
                     match {})",
                    crate::calls::MAX_CALLER_PROBES,
                    calls.probes.len()
                ),
            );
        }
    }
    if let Some(mem) = &opts.mem {
        if opts.target == Target::All {
            return Err(RecordError::MemWholeHost);
        }
        if opts.alloc.is_some() {
            return Err(RecordError::Invalid(
                "memory in use counts every allocation itself: record it without allocation probes".into(),
            ));
        }
        if let Target::Launch(argv) = &opts.target {
            crate::mem::check_command(argv)?;
        }
        if mem.sample_bytes > 1 << 40 {
            return bad(RecordOption::MemSample, format!("must be at most 1 TiB, not {}", mem.sample_bytes));
        }
    }
    if !opts.cpu
        && opts.syscalls.is_none()
        && opts.calls.is_none()
        && opts.alloc.is_none()
        && opts.mem.is_none()
        && opts.offcpu.is_none()
    {
        return Err(RecordError::Invalid("nothing to record".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{record, AllocOptions, CallOptions, Observer, RecordOptions, SyscallOptions, Target};

    #[test]
    fn options_out_of_range_are_refused_before_anything_opens() {
        let err = |opts: RecordOptions| record(&opts, &mut NoObserver).unwrap_err().to_string();
        let base = RecordOptions { target: Target::Launch(vec!["/bin/true".into()]), ..Default::default() };
        assert_eq!(
            err(RecordOptions { stack_bytes: 100, ..base.clone() }),
            "stack_bytes must be a multiple of 8 from 8 to 65528 bytes, not 100"
        );
        assert_eq!(
            err(RecordOptions { alloc: Some(AllocOptions { period: 0 }), ..base.clone() }),
            "alloc.period must be at least 1"
        );
        let calls = CallOptions { callers_period: Some(0), ..Default::default() };
        assert_eq!(
            err(RecordOptions { cpu: false, calls: Some(calls), ..base.clone() }),
            "calls.callers_period must be at least 1"
        );
        let mem = Some(crate::mem::MemOptions { sample_bytes: 0, period_ms: 100 });
        assert_eq!(
            err(RecordOptions { target: Target::All, cpu: false, mem, ..base.clone() }),
            "memory in use is recorded for a command (after `--`) or running processes (-p), not a whole host"
        );
        let syscalls = SyscallOptions { trace: Vec::new(), stacks_period: Some(0) };
        assert_eq!(
            err(RecordOptions { cpu: false, syscalls: Some(syscalls), ..base }),
            "syscalls.stacks_period must be at least 1"
        );
    }

    struct NoObserver;
    impl Observer for NoObserver {}
}
