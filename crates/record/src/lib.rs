//! The live sources: samples a target's threads with perf_event_open (CPU time, syscall entries), counts
//! syscalls exactly with eBPF, unwinds each user stack while the run goes on, and normalizes every address
//! to (module, file offset) while the process is still alive.
//!
//! It hands a [`whyslow_model::raw::RawRecording`] to the symbolizer and never symbolizes or renders.
//! It must never stop or slow the target beyond the sampling itself: no ptrace, and all events are
//! disabled and closed on every exit path.

mod bpf;
pub mod calls;
mod files;
pub mod load;
pub mod phases;
mod records;
mod session;
pub mod signals;
mod sources;
mod sys;
pub mod target;
mod target_env;

pub use bpf::syscall_numbers;
pub use session::{record, End, Observer, Progress, Session};
pub use sources::Objects;
pub use sys::{monotonic_ns, sampling_period, Clock};
pub use target::Target;
pub use target::{stop_launched, yield_cpu};

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
    /// [`SYSCALL_COST_NS`]; [`STACK_SAMPLE_COST_NS`] per stack sampled). Their counts then cover the run
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
    #[error("unknown syscall '{name}'{}", whyslow_model::did_you_mean(.suggestions))]
    NoSuchSyscall { name: String, suggestions: Vec<String> },
    #[error(
        "the server did not accept connections on 127.0.0.1:{port} within {seconds:.1} s (--ready-timeout)"
    )]
    ServerNotReady { port: u16, seconds: f64 },
    #[error("the server exited with status {code} {when}")]
    ServerExited { code: i32, when: &'static str },
    #[error("port {0} already accepts connections before the server started: stop what listens there or pick another port")]
    PortInUse(u16),
    #[error("interrupted (Ctrl-C or SIGTERM) before the run finished")]
    Interrupted,
}
