//! The live sources: samples a target's threads with perf_event_open (CPU time, syscall entries), counts
//! syscalls exactly with eBPF, unwinds each user stack while the run goes on, and normalizes every address
//! to (module, file offset) while the process is still alive.
//!
//! It hands a [`whyslow_model::raw::RawRecording`] to the symbolizer and never symbolizes or renders.
//! It must never stop or slow the target beyond the sampling itself: no ptrace, and all events are
//! disabled and closed on every exit path.

mod allocators;
mod bpf;
pub mod calls;
mod files;
mod layout;
pub mod load;
pub mod mem;
pub mod phases;
mod records;
mod session;
mod sideband;
pub mod signals;
mod sources;
mod sys;
pub mod target;
mod target_env;

pub use bpf::syscall_numbers;
pub use session::{record, End, Observer, ProbeLoad, Progress, Session};
pub use sources::Objects;
pub use sys::{monotonic_ns, sampling_period, thread_cpu_ns, Clock};
pub use target::Target;
pub use target::{stop_launched, yield_cpu};

/// Runs `f` while eBPF watches how processes `pids` end, and returns its result with those that a signal
/// ended meanwhile. A process that is not whyslow's child leaves no wait status to read, and each
/// recording's own watch sees only its run: a target killed between two recordings (the doctor's phases)
/// is seen by this one. Where eBPF is unavailable, `f` runs alone.
pub fn watching_exits<T>(pids: &[u32], f: impl FnOnce() -> T) -> (T, Vec<whyslow_model::Killed>) {
    if pids.is_empty() {
        return (f(), Vec::new());
    }
    let mut obj = std::mem::MaybeUninit::uninit();
    let watch =
        bpf::ExitWatch::load(&mut obj).ok().filter(|w| pids.iter().all(|&p| w.track(p, false).is_ok()));
    let out = f();
    let killed = watch.map_or_else(Vec::new, |w| {
        pids.iter().filter_map(|&p| whyslow_model::Killed::from_wait_status(p, w.status(p)?)).collect()
    });
    (out, killed)
}

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
    /// Record blocked (off-CPU) time by stack.
    pub offcpu: Option<OffCpuOptions>,
    /// Call [`Observer::snapshot`] this often with the counters so far.
    pub interval: Option<std::time::Duration>,
    /// Leave a launched command that is still running at the end running (its pid is the first of
    /// `meta.target_pids`; the caller ends it with [`stop_launched`]); otherwise it is stopped.
    pub leave_running: bool,
    /// Stop when another thread sets this (e.g. when a load command ends).
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Stop the probes that cost per call once their estimated cost exceeds this share of the target's
    /// CPU time since the start, plus [`BUDGET_CREDIT_NS`]: calls and allocation probes (each hit costs
    /// about [`HIT_COST_EMULATED_NS`] or [`HIT_COST_STEPPED_NS`] by how the kernel runs the probed
    /// instruction) and syscall counters (each syscall priced as measured at the start of the run, else
    /// [`SYSCALL_COST_NS`]; [`STACK_SAMPLE_COST_NS`] per stack sampled; every other process's syscalls
    /// meanwhile too, else at [`SYSCALL_OTHER_COST_NS`]). Their counts then cover the run
    /// until that point (`meta.syscalls_duration_ns`, `meta.calls_duration_ns`); CPU and off-CPU sampling
    /// go on, and a run with neither ends. Where sampling goes on, the syscall counters come back in
    /// short slices spread over the rest of the run, within the budget (`meta.syscall_slices`). None: no
    /// limit.
    pub probe_budget: Option<f64>,
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

/// Why a run recorded no samples: how the target ended, else what each source recorded would have
/// shown (a busy target that never allocates is not one that "did not run").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoSamples {
    /// The length of the run.
    pub after: std::time::Duration,
    /// The launched command's status, when it exited by itself.
    pub exit_code: Option<i32>,
    /// What the target did not do, one phrase per source recorded.
    pub unseen: Vec<&'static str>,
}

impl NoSamples {
    /// The diagnosis of a run of `opts` that ended as `meta` says with no samples.
    pub fn of(opts: &RecordOptions, meta: &whyslow_model::Metadata) -> NoSamples {
        let unseen = [
            (opts.cpu, "did not run on a CPU"),
            (opts.offcpu.is_some(), "did not block"),
            (opts.alloc.is_some(), "called no allocation function"),
            (opts.syscalls.as_ref().is_some_and(|s| s.stacks_period.is_some()), "made no syscall"),
        ]
        .into_iter()
        .filter_map(|(on, what)| on.then_some(what))
        .collect();
        NoSamples {
            after: std::time::Duration::from_nanos(meta.duration_ns),
            exit_code: meta.exit_code,
            unseen,
        }
    }

    /// Whether the launched command failed (a non-zero status): then its status is the answer and the
    /// missing samples only a note.
    pub fn target_failed(&self) -> bool {
        self.exit_code.is_some_and(|c| c != 0)
    }
}

impl std::fmt::Display for NoSamples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.after.as_secs_f64() * 1e3;
        match self.exit_code {
            Some(code) => {
                write!(
                    f,
                    "no samples: the target exited after {ms:.0} ms (exit code {code}) before any sample"
                )
            }
            None => {
                let what = match &self.unseen[..] {
                    [] => "recorded nothing".to_string(),
                    [one] => one.to_string(),
                    [init @ .., last] => format!("{} and {last}", init.join(", ")),
                };
                write!(f, "no samples in {ms:.0} ms: the target {what}")
            }
        }
    }
}

/// An option of a run that [`RecordError::BadOption`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordOption {
    /// [`RecordOptions::stack_bytes`].
    StackBytes,
    /// [`RecordOptions::frequency`].
    Frequency,
    /// [`AllocOptions::period`].
    AllocPeriod,
    /// [`SyscallOptions::stacks_period`].
    SyscallStacksPeriod,
    /// [`CallOptions::callers_period`].
    CallersPeriod,
    /// Caller stacks ([`CallOptions::callers_period`] set) over more than [`calls::MAX_CALLER_PROBES`].
    CallerStacks,
}

impl std::fmt::Display for RecordOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecordOption::StackBytes => "stack_bytes",
            RecordOption::Frequency => "frequency",
            RecordOption::AllocPeriod => "alloc.period",
            RecordOption::SyscallStacksPeriod => "syscalls.stacks_period",
            RecordOption::CallersPeriod => "calls.callers_period",
            RecordOption::CallerStacks => "sampling callers",
        })
    }
}

/// The default [`AllocOptions::period`]. Where one stack key covers several stacks (code without frame
/// pointers), each sample stands for the calls since the key's previous one, so the split over them is
/// off by at most this many calls per change of stack: 1024 keeps it small at one 16 KB copy per 1024
/// calls of a hot site.
pub const ALLOC_PERIOD: u64 = 1024;

/// How the note that the probe budget ended a run begins (see [`RecordOptions::probe_budget`]).
pub const BUDGET_NOTE: &str = "probes stopped after";

/// Cost of one syscall to the exact counters (the kernel's syscall tracepoint path and two eBPF programs),
/// in ns, where it could not be measured at the start of the run: about 550 ns measured on the 2-core test VM (redis-server under redis-benchmark: 1.55 µs more
/// CPU per request at 2.8 syscalls per request).
pub const SYSCALL_COST_NS: u64 = 600;
/// Cost of one syscall of a process that is not counted, while the counters are attached, where it could
/// not be measured: every syscall of the machine takes the traced path then (0.19-0.25 us measured on the
/// 2-core test VM, 0.13 us of it with empty programs).
pub const SYSCALL_OTHER_COST_NS: u64 = 300;
/// Cost of one sampled user stack of an event (a 16 KB copy into the ring, with interrupts off), in ns:
/// about 3.2 µs measured the same way with every syscall's stack sampled.
pub const STACK_SAMPLE_COST_NS: u64 = 3_500;

/// Cost of one uprobe hit whose instruction the kernel emulates (push, jmp, call), in ns; measured about
/// 1 µs on the 2-core test VM, with the eBPF counter and the stack copy of a sampled hit on top.
pub const HIT_COST_EMULATED_NS: u64 = 1_500;
/// Cost of one uprobe hit whose instruction is single-stepped (about 15 µs measured).
pub const HIT_COST_STEPPED_NS: u64 = 15_000;
/// Probe cost a budgeted run may spend before the target has used any CPU (so a short run counts a
/// little).
pub const BUDGET_CREDIT_NS: u64 = 20_000_000;

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
            stack_bytes: 32 * 1024,
            kernel: true,
            ring_pages: 1024,
            cpu: true,
            syscalls: None,
            calls: None,
            alloc: None,
            offcpu: None,
            interval: None,
            leave_running: false,
            stop: None,
            probe_budget: None,
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
    /// An option of [`RecordOptions`] out of its range, named as this library names it (a command line
    /// maps [`RecordOption`] to its own flag).
    #[error("{option} {problem}")]
    BadOption { option: RecordOption, problem: String },
    #[error("the target has no allocation function to probe")]
    NoAllocator,
    #[error(
        "not allowed to load eBPF programs ({0}): run as root or grant CAP_BPF and CAP_PERFMON \
         (e.g. `sudo setcap cap_bpf,cap_perfmon+ep $(which whyslow)`)"
    )]
    BpfPermission(String),
    #[error("this kernel has no BTF (/sys/kernel/btf/vmlinux is missing): eBPF sources need CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf,
    #[error("eBPF: {0}")]
    Bpf(String),
    #[error("no function matches '{pattern}'{}", whyslow_model::did_you_mean(.suggestions))]
    NoSuchFunction { pattern: String, suggestions: Vec<String> },
    #[error("an empty pattern names no function: give a name or a glob (malloc, 'json_*', '*::parse')")]
    EmptyPattern,
    #[error("{0}")]
    BadGlob(whyslow_symbols::GlobError),
    #[error("unknown syscall '{name}'{}", whyslow_model::did_you_mean(.suggestions))]
    NoSuchSyscall { name: String, suggestions: Vec<String> },
    #[error(
        "the server did not accept connections on 127.0.0.1:{port} within {seconds:.1} s (the ready timeout)"
    )]
    ServerNotReady { port: u16, seconds: f64 },
    #[error("the server exited with status {code} {when}")]
    ServerExited { code: i32, when: &'static str },
    #[error("port {0} already accepts connections before the server started: stop what listens there or pick another port")]
    PortInUse(u16),
    #[error("interrupted (Ctrl-C or SIGTERM) before the run finished")]
    Interrupted,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty run is explained by how the target ended, else by what each recorded source would have
    /// shown; the options named in an error are the library's, not a command line's.
    #[test]
    fn a_run_without_samples_says_why() {
        let meta = |exit_code, ms| whyslow_model::Metadata {
            exit_code,
            duration_ns: ms * 1_000_000u64,
            ..Default::default()
        };
        let opts = RecordOptions { cpu: true, alloc: Some(AllocOptions { period: 1 }), ..Default::default() };
        let why = NoSamples::of(&opts, &meta(None, 120));
        assert_eq!(
            why.to_string(),
            "no samples in 120 ms: the target did not run on a CPU and called no allocation function"
        );
        assert!(!why.target_failed());
        let why = NoSamples::of(&opts, &meta(Some(3), 2));
        assert_eq!(
            why.to_string(),
            "no samples: the target exited after 2 ms (exit code 3) before any sample"
        );
        assert!(why.target_failed());
        assert!(!NoSamples::of(&opts, &meta(Some(0), 2)).target_failed());
        let three = RecordOptions {
            offcpu: Some(OffCpuOptions::sampled_at(99, std::time::Duration::ZERO)),
            syscalls: Some(SyscallOptions { trace: Vec::new(), stacks_period: Some(1) }),
            ..opts
        };
        assert_eq!(
            NoSamples::of(&three, &meta(None, 5)).to_string(),
            "no samples in 5 ms: the target did not run on a CPU, did not block, called no allocation \
             function and made no syscall"
        );
    }

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
        let syscalls = SyscallOptions { trace: Vec::new(), stacks_period: Some(0) };
        assert_eq!(
            err(RecordOptions { cpu: false, syscalls: Some(syscalls), ..base }),
            "syscalls.stacks_period must be at least 1"
        );
    }

    struct NoObserver;
    impl Observer for NoObserver {}
}
