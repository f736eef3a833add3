//! The profile model every source feeds and every consumer reads, and the recording file that stores it.
//!
//! A [`Profile`] holds interned strings, function-level frames, a stack trie, threads, aggregated samples
//! with one or more value types, and the run's metadata. It never knows how the data was collected: live
//! recording and imported files enter through the same [`ProfileBuilder`].

pub mod file;
pub mod pprof;
pub mod raw;
pub mod stacks;
pub mod syscalls;
pub mod units;

use serde::{Deserialize, Serialize};

/// Leaf frame of off-CPU time a thread spent runnable (preempted) rather than blocked.
pub const PREEMPTED_FRAME: &str = "[waiting for a CPU]";

/// Root frame of a user stack the unwinder could not follow to its end (deeper than the stack bytes
/// copied, or than the frame cap, or through code without unwind information): the frames under it are
/// real, the callers above them are missing. Such stacks are also counted as partial.
pub const CUT_FRAME: &str = "[stack cut here]";

/// The one frame of a sample that has no frame at all, so its value still shows in stack-based formats.
pub const NO_STACK_FRAME: &str = "[no stack]";

/// `part` as a percentage of `whole`: 0 when the whole is 0 (or, for a total that cannot be, negative).
pub fn percent(part: i64, whole: i64) -> f64 {
    if whole <= 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Nanoseconds since the Unix epoch by the wall clock (0 if the clock is set before 1970).
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Root frame of allocations counted exactly at their call site whose stack no sample named (the ring
/// buffer had no room for it, or no map for its stack key): the frames under it are the allocator and its
/// caller.
pub const LOST_STACK_FRAME: &str = "[stack lost]";

/// The one frame that stands for everything a sample ran inside whyslow's own probes (a uprobe's trap and
/// single-step, an eBPF program on a syscall): such samples measure the measurement, not the program.
pub const PROBE_FRAME: &str = "[whyslow probe]";

/// Module of [`PROBE_FRAME`].
pub const PROBE_MODULE: &str = "[whyslow]";

/// Whether a frame only runs because a probe of ours fired: the kernel's uprobe and eBPF paths, the
/// `[uprobes]` page, or [`PROBE_FRAME`] itself.
pub fn is_probe_frame(name: &str, module: &str) -> bool {
    const PROBE: [&str; 15] = [
        "uprobe_",
        "handle_swbp",
        "handle_singlestep",
        "exc_int3",
        "asm_exc_int3",
        "exc_debug",
        "asm_exc_debug",
        "noist_exc_debug",
        "bpf_prog_",
        "__bpf_prog",
        "bpf_trace_run",
        "syscall_trace_enter",
        "syscall_exit_work",
        "perf_syscall_",
        "trace_call_bpf",
    ];
    name == PROBE_FRAME
        || module == "[uprobes]"
        || module == PROBE_MODULE
        || PROBE.iter().any(|p| name.starts_with(p))
}

/// Whether a user address no mapping covers is in the page where the kernel single-steps the
/// instructions uprobes replaced (the "XOL" area, mapped as `[uprobes]` one page below the top of the
/// 47-bit user address space and not reported to perf as a mapping).
pub fn is_probe_address(addr: u64) -> bool {
    (0x7fff_ffff_e000..0x7fff_ffff_f000).contains(&addr)
}

/// Names of the sample types sources write and consumers look up.
pub mod sample_types {
    /// On-CPU samples (count) and their period in ns (or `CYCLES` where the PMU has them).
    pub const CPU: &str = "cpu";
    pub const CPU_NS: &str = "cpu-ns";
    pub const CYCLES: &str = "cycles";
    /// Blocked and preempted time (ns), and its sum with on-CPU ns.
    pub const OFFCPU: &str = "offcpu";
    pub const WALL: &str = "wall";
    /// Sampled syscall entries and probed calls (count) by stack.
    pub const SYSCALLS: &str = "syscalls";
    pub const CALLS: &str = "calls";
    /// Threads by stack, one sample per thread at one moment (`whyslow stacks`).
    pub const THREADS: &str = "threads";
    /// Sampled allocations by stack, and exact ones by call site.
    pub const ALLOC_COUNT: &str = "alloc-count";
    pub const ALLOC_BYTES: &str = "alloc-bytes";
    pub const ALLOC_SITE_COUNT: &str = "alloc-site-count";
    pub const ALLOC_SITE_BYTES: &str = "alloc-site-bytes";
    /// Memory in use by stack: the change in each time slice (summed over a run, what was still held at
    /// its end; over a time range, what grew in it), and what was held when the heap was at its peak.
    pub const INUSE_BYTES: &str = "inuse-bytes";
    pub const INUSE_COUNT: &str = "inuse-count";
    pub const PEAK_BYTES: &str = "peak-bytes";
    pub const PEAK_COUNT: &str = "peak-count";

    /// The name pprof readers know a type by: Go's heap profile names the memory types
    /// (`go tool pprof -sample_index=inuse_space`); the others keep their own.
    pub fn pprof_name(name: &str) -> &str {
        match name {
            ALLOC_COUNT => "alloc_objects",
            ALLOC_BYTES => "alloc_space",
            INUSE_COUNT => "inuse_objects",
            INUSE_BYTES => "inuse_space",
            other => other,
        }
    }
}

/// Start of the note an importer leaves on a profile it read from elsewhere (pprof, folded stacks, perf
/// script): such a profile was not recorded by whyslow, so no command can be re-run to check a fix.
pub const IMPORTED_NOTE: &str = "imported from ";

/// Start of the note of a doctor investigation's second phase (call and allocation counts, over
/// `calls_duration_ns` after the `duration_ns` of the first).
pub const PHASE2_NOTE: &str = "phase 2: ";

/// Start of the note giving the measured price of a counted syscall (under a probe budget).
pub const SYSCALL_COST_NOTE: &str = "a counted syscall cost ";

/// Start of the note saying how the syscall counters were sliced over the run (under a probe budget).
pub const SYSCALL_SLICES_NOTE: &str = "syscall counters: ";

/// Start of the note saying the probes were stopped when their cost reached the budget.
pub const BUDGET_NOTE: &str = "probes stopped after";

/// Start of the note saying the kernel's OOM killer ended a target process (`{OOM_NOTE}PID`, then what
/// was kept of it): the doctor's `oom-killed` rule reads it.
pub const OOM_NOTE: &str = "the kernel's OOM killer ended pid ";

/// Whether note `n` says how the probes spent their budget (a second phase's window, when they stopped,
/// the price of a counted syscall, the counters' slices) rather than something the reader must know to trust the
/// numbers: such notes are for `-v` and JSON, not the default text.
pub fn is_detail_note(n: &str) -> bool {
    [PHASE2_NOTE, BUDGET_NOTE, SYSCALL_COST_NOTE, SYSCALL_SLICES_NOTE].iter().any(|p| n.starts_with(p))
}

/// Marker for "no parent" in the stack trie and "no module" on a frame.
pub const NONE: u32 = u32::MAX;

/// What kind of code a frame stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FrameKind {
    /// A user-space function found in a symbol table or debug info.
    User,
    /// A function inlined into its caller (it has no return address of its own).
    Inlined,
    /// A kernel function from /proc/kallsyms.
    Kernel,
    /// An address no symbol covers: the name is `module+0xOFFSET` (or a bare address).
    Unknown,
}

/// One function-level frame. Frames are deduplicated: the same function in the same module is one frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Interned function name (demangled).
    pub name: u32,
    /// Index into [`Profile::modules`], or [`NONE`].
    pub module: u32,
    /// Interned source file of the function, or 0 ("") when unknown.
    pub file: u32,
    pub kind: FrameKind,
}

/// A loaded object file (executable, shared library, `[kernel]`, `[vdso]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Module {
    pub path: String,
    /// GNU build id as lowercase hex, empty when the file has none.
    pub build_id: String,
    /// Compilers and flags of its compile units (DWARF `DW_AT_producer`), when it has debug info.
    pub producers: Vec<String>,
    /// Which source named its frames, in words ("its symbols and DWARF", "Go's .gopclntab",
    /// "debuginfod (...)"); empty where nothing was symbolized from it.
    pub symbols: String,
}

/// A node of the stack trie: the frame, the source line it was at, and the node of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StackNode {
    pub parent: u32,
    pub frame: u32,
    /// The line (in the frame's [`Frame::file`]) of the sampled instruction in a leaf, of the call in a
    /// caller; 0 when unknown (no line table, an imported profile, a recording older than format 10).
    /// One function at two lines is two nodes with the same frame.
    pub line: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    pub pid: u32,
    pub tid: u32,
    /// Thread name (comm) as last seen.
    pub name: String,
}

/// A value type carried by every sample, like pprof's sample_type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleType {
    /// `cpu`, `cpu-ns`, `offcpu`, `alloc-bytes`, ...
    pub name: String,
    /// `samples`, `nanoseconds`, `bytes`, `count`.
    pub unit: String,
}

/// Width of the time slices samples are aggregated in ([`Sample::time`]).
pub const TIME_BUCKET_NS: u64 = 100_000_000;

/// Aggregated samples: one entry per (stack, thread, time slice), values parallel to
/// [`Profile::sample_types`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Leaf node in [`Profile::stacks`] (innermost frame), or [`NONE`] for an empty stack.
    pub stack: u32,
    /// Index into [`Profile::threads`].
    pub thread: u32,
    /// The [`TIME_BUCKET_NS`] slice of the run the events fell in, counted from
    /// [`Metadata::start_unix_ns`]; 0 for sources without times and for counts read at the end of a run.
    pub time: u32,
    pub values: Vec<i64>,
}

/// How far user stacks were unwound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnwindStats {
    /// The unwinder reached the outermost frame (the CFI says there is no caller).
    pub complete: u64,
    /// Unwinding stopped early (missing unwind info, stack copy too short, bad address).
    pub partial: u64,
}

/// Facts about the run that produced the profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// whyslow version that wrote the file.
    pub tool_version: String,
    /// The profiled command line, or a description of the attached target (`-p 4242`, `--comm name`).
    pub command: Vec<String>,
    /// Process ids that were targeted at the start.
    pub target_pids: Vec<u32>,
    /// Sampling event (`cpu-clock`, `cycles`).
    pub event: String,
    pub frequency_hz: u64,
    pub start_unix_ns: u64,
    pub duration_ns: u64,
    /// Samples the kernel dropped because the ring buffer was full.
    pub lost_samples: u64,
    /// Other events lost: traced syscalls the ring buffer had no room for, calls a full map could not count.
    pub lost_events: u64,
    pub unwind: UnwindStats,
    /// Exit status of a launched command (None when attached or still running at the end).
    pub exit_code: Option<i32>,
    pub hostname: String,
    pub kernel_release: String,
    /// Things the user should know about the run (fallbacks, partial coverage).
    pub notes: Vec<String>,
    /// How long the exact syscall counters ran when that was not the whole run (the doctor's probe budget
    /// stopped them); 0: for `duration_ns`.
    pub syscalls_duration_ns: u64,
    /// How long the exact call counters ran when that was not the whole run (the doctor counts calls in
    /// a second phase); 0: for `duration_ns`.
    pub calls_duration_ns: u64,
    /// Target processes a signal ended during the run (not the stop at its end).
    pub killed: Vec<Killed>,
    /// What the target's cgroup and the kernel's accounting said over the run (CPU quota and throttling,
    /// memory pressure, run-queue delay); None where nothing was read (imports, recordings before format 8).
    pub target_env: Option<TargetEnv>,
    /// What one counted syscall cost in this run, in ns, as measured at its start (0: not measured;
    /// recordings before format 9).
    pub syscall_cost_ns: u64,
    /// The windows the exact syscall counters ran in, each as (ns, syscalls counted), when a budget kept
    /// them from running the whole run: the first until the budget was spent, then the slices that
    /// sampled the rest of the run. `syscalls_duration_ns` is their sum. Empty: one window.
    pub syscall_slices: Vec<(u64, u64)>,
}

/// The target's surroundings over a run: what slows it without showing in its stacks. Counters are
/// differences between a reading at the start and one at the end, over `window_ns`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetEnv {
    pub window_ns: u64,
    /// CPUs online on the host.
    pub host_cpus: u32,
    pub cpu_quota: Option<CpuQuota>,
    pub memory: Option<MemoryPressure>,
    pub run_queue: Option<RunQueue>,
    /// What could not be read, as (`cpu-quota`, `memory` or `run-queue`, why).
    pub unavailable: Vec<(String, String)>,
}

impl TargetEnv {
    /// Adds the readings of a following window (an agent's next window, another run of the command):
    /// counters and windows add up; the limits, CPUs and other processes stay the first's; a counter one
    /// side lacks, or of another cgroup, is dropped rather than made up.
    pub fn add(&mut self, o: &TargetEnv) {
        fn sum(a: &mut Option<u64>, b: Option<u64>) {
            *a = a.zip(b).map(|(a, b)| a + b);
        }
        self.window_ns += o.window_ns;
        self.cpu_quota = match (self.cpu_quota.take(), &o.cpu_quota) {
            (Some(mut a), Some(b)) if a.cgroup == b.cgroup && a.quota_us == b.quota_us => {
                a.periods += b.periods;
                a.throttled_periods += b.throttled_periods;
                a.throttled_us += b.throttled_us;
                sum(&mut a.usage_us, b.usage_us);
                sum(&mut a.pressure_some_us, b.pressure_some_us);
                Some(a)
            }
            _ => None,
        };
        self.memory = match (self.memory.take(), &o.memory) {
            (Some(mut a), Some(b)) if a.pressure_of == b.pressure_of => {
                a.major_faults += b.major_faults;
                sum(&mut a.host_swap_ins, b.host_swap_ins);
                sum(&mut a.pressure_some_us, b.pressure_some_us);
                sum(&mut a.pressure_full_us, b.pressure_full_us);
                Some(a)
            }
            _ => None,
        };
        self.run_queue = match (self.run_queue.take(), &o.run_queue) {
            (Some(mut a), Some(b)) => {
                a.run_ns += b.run_ns;
                a.wait_ns += b.wait_ns;
                a.threads = a.threads.max(b.threads);
                Some(a)
            }
            _ => None,
        };
        for u in &o.unavailable {
            if !self.unavailable.contains(u) {
                self.unavailable.push(u.clone());
            }
        }
    }
}

/// The CPU limit of the target's cgroup (or of the ancestor with the tightest one) and its throttling.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuQuota {
    /// The cgroup's directory (`/sys/fs/cgroup/cpu/docker/ab12`).
    pub cgroup: String,
    /// 1 or 2.
    pub version: u8,
    /// Run time allowed per period, µs; None: no limit.
    pub quota_us: Option<u64>,
    pub period_us: u64,
    /// Periods with runnable tasks, those that hit the quota, and the time throttled (µs).
    pub periods: u64,
    pub throttled_periods: u64,
    pub throttled_us: u64,
    /// CPU time the cgroup's tasks used (µs), when the cgroup counts it.
    pub usage_us: Option<u64>,
    /// Time some task of the cgroup waited for a CPU (cpu.pressure `some`, µs; cgroup v2 with PSI).
    pub pressure_some_us: Option<u64>,
}

impl CpuQuota {
    /// The quota in CPUs (0.2 for 20000 of 100000 µs).
    pub fn cpus(&self) -> Option<f64> {
        self.quota_us.map(|q| q as f64 / self.period_us.max(1) as f64)
    }
}

/// Memory pressure on the target: its processes' major page faults and the memory stall time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPressure {
    /// Major faults of the target processes alive at the end (page reads from disk or swap).
    pub major_faults: u64,
    /// Pages swapped in on the whole host (/proc/vmstat pswpin).
    pub host_swap_ins: Option<u64>,
    /// memory.pressure `some` and `full` stall time (µs), and where it was read (the target's cgroup,
    /// else the host's /proc/pressure/memory).
    pub pressure_some_us: Option<u64>,
    pub pressure_full_us: Option<u64>,
    pub pressure_of: String,
}

/// The target's threads' time waiting on a run queue (/proc/PID/task/TID/schedstat), of the threads
/// alive at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunQueue {
    pub threads: u32,
    /// CPUs the target may run on (its affinity mask).
    pub cpus: u32,
    pub run_ns: u64,
    pub wait_ns: u64,
    /// The busiest other processes over the run, as (pid, name, CPU ns).
    pub others: Vec<(u32, String, u64)>,
}

impl Metadata {
    /// Seconds the exact syscall counters ran (the whole run unless a budget stopped them).
    pub fn syscalls_seconds(&self) -> f64 {
        window_seconds(self.syscalls_duration_ns, self.duration_ns)
    }

    /// Seconds the exact call counters ran (the whole run unless they ran in a window of their own).
    pub fn calls_seconds(&self) -> f64 {
        window_seconds(self.calls_duration_ns, self.duration_ns)
    }

    /// How far a syscall rate over the counters' windows may be from the rate over the whole run when
    /// the windows sampled it ([`Metadata::syscall_slices`], at least 3): the 95% bound, as a share of the
    /// rate, of the ratio estimate (all syscalls counted over all the windows' time). None: one window, or
    /// too few to say.
    pub fn syscall_rate_error(&self) -> Option<f64> {
        slices_rate_error(&self.syscall_slices)
    }
}

/// The relative 95% sampling error of the rate sum(count) / sum(ns) over windows `slices` of (ns, count):
/// windows of unequal length are clusters of a ratio estimate, whose variance is
/// sum((count - rate * ns)^2) / (n (n - 1) mean_ns^2).
pub fn slices_rate_error(slices: &[(u64, u64)]) -> Option<f64> {
    let n = slices.len();
    let ns: f64 = slices.iter().map(|s| s.0 as f64).sum();
    let count: f64 = slices.iter().map(|s| s.1 as f64).sum();
    if n < 3 || ns <= 0.0 || count <= 0.0 {
        return None;
    }
    let rate = count / ns;
    let mean_ns = ns / n as f64;
    let sq: f64 = slices.iter().map(|&(t, c)| (c as f64 - rate * t as f64).powi(2)).sum();
    let var = sq / (n as f64 * (n as f64 - 1.0) * mean_ns * mean_ns);
    Some(1.96 * var.sqrt() / rate)
}

/// A counter window of `ns` (0: the whole run of `whole_ns`), in seconds.
fn window_seconds(ns: u64, whole_ns: u64) -> f64 {
    (if ns == 0 { whole_ns } else { ns }) as f64 / 1e9
}

/// A target process that a signal ended during a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Killed {
    pub pid: u32,
    pub signal: i32,
    pub core_dumped: bool,
}

impl Killed {
    /// From a wait status (signal in the low 7 bits, 0x80 when it dumped core); None for a normal exit.
    pub fn from_wait_status(pid: u32, status: i32) -> Option<Killed> {
        let signal = status & 0x7f;
        (signal != 0 && signal != 0x7f).then_some(Killed { pid, signal, core_dumped: status & 0x80 != 0 })
    }
}

impl std::fmt::Display for Killed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "target pid {} was killed by {}", self.pid, signal_name(self.signal))?;
        if self.core_dumped {
            write!(f, " (core dumped)")?;
        }
        write!(f, " during the run")
    }
}

/// `SIGSEGV` for 11; `signal 40` for those without a name.
pub fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 32] = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match NAMES.get(signal as usize) {
        Some(n) if signal > 0 => n.to_string(),
        _ => format!("signal {signal}"),
    }
}

/// A whole profile: what one recording file holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub meta: Metadata,
    /// Interned strings; index 0 is always "".
    pub strings: Vec<String>,
    pub modules: Vec<Module>,
    pub frames: Vec<Frame>,
    pub stacks: Vec<StackNode>,
    pub threads: Vec<Thread>,
    pub sample_types: Vec<SampleType>,
    pub samples: Vec<Sample>,
    /// Exact syscall counters per (process, thread, syscall), when the run counted syscalls.
    pub syscalls: Vec<SyscallStat>,
    /// Exact call counters per (process, function), when the run counted calls.
    pub calls: Vec<CallStat>,
}

/// Exact call counts of one function in one process, counted in the kernel by a uprobe.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallStat {
    pub pid: u32,
    /// The function's (demangled) name and the file it is in.
    pub name: String,
    pub module: String,
    /// Other names of the same code (`__libc_malloc`), and for an IFUNC the implementation probed.
    pub aliases: Vec<String>,
    pub implementation: Option<String>,
    /// Output group (`allocation`, ..., or the pattern that matched).
    pub group: String,
    pub calls: u64,
    /// Time per call was measured for `timed` calls (0 when latency was not asked for).
    pub timed: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

/// Number of log2 latency buckets in [`SyscallStat::hist`].
pub const HIST_BUCKETS: usize = 40;

/// Exact counters of one syscall in one thread, aggregated in the kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallStat {
    pub pid: u32,
    pub tid: u32,
    /// Syscall name (`newfstatat`), or `syscall_<nr>` for a number the table does not know.
    pub name: String,
    pub calls: u64,
    /// Calls that returned an error; the split by errno name is in `errnos`.
    pub errors: u64,
    pub errnos: Vec<(String, u64)>,
    /// Time from entry to exit, summed and the largest one.
    pub total_ns: u64,
    pub max_ns: u64,
    /// `hist[i]` counts calls that took [2^i, 2^(i+1)) ns; the last bucket takes everything above.
    pub hist: Vec<u64>,
    /// Bytes moved by the data-moving syscalls (read, write, send, recv and their variants): the sum of
    /// their positive results; 0 for the others.
    pub bytes: u64,
}

impl SyscallStat {
    /// Adds another entry's counters (same syscall, another thread or process).
    pub fn merge(&mut self, o: &SyscallStat) {
        self.calls += o.calls;
        self.errors += o.errors;
        self.total_ns += o.total_ns;
        self.bytes += o.bytes;
        self.max_ns = self.max_ns.max(o.max_ns);
        if self.hist.len() < o.hist.len() {
            self.hist.resize(o.hist.len(), 0);
        }
        for (a, b) in self.hist.iter_mut().zip(&o.hist) {
            *a += b;
        }
        for (name, n) in &o.errnos {
            match self.errnos.iter_mut().find(|e| &e.0 == name) {
                Some(e) => e.1 += n,
                None => self.errnos.push((name.clone(), *n)),
            }
        }
    }

    /// The counters gathered since `earlier` (an older reading of the same entry); `max_ns` stays the
    /// maximum of the whole run, which cannot be split.
    pub fn since(&self, earlier: &SyscallStat) -> SyscallStat {
        let mut d = self.clone();
        d.calls = self.calls.saturating_sub(earlier.calls);
        d.errors = self.errors.saturating_sub(earlier.errors);
        d.total_ns = self.total_ns.saturating_sub(earlier.total_ns);
        d.bytes = self.bytes.saturating_sub(earlier.bytes);
        for (a, b) in d.hist.iter_mut().zip(&earlier.hist) {
            *a = a.saturating_sub(*b);
        }
        for (name, n) in d.errnos.iter_mut() {
            let before = earlier.errnos.iter().find(|e| &e.0 == name).map_or(0, |e| e.1);
            *n = n.saturating_sub(before);
        }
        d.errnos.retain(|e| e.1 > 0);
        d
    }

    /// The duration below which `q` (0..=1) of the calls finished, interpolated inside the log2 bucket and
    /// never above the largest call seen.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let n: u64 = self.hist.iter().sum();
        if n == 0 {
            return 0;
        }
        let rank = (q * n as f64).ceil().max(1.0);
        let mut seen = 0u64;
        for (i, &c) in self.hist.iter().enumerate() {
            if c > 0 && (seen + c) as f64 >= rank {
                let lo = if i == 0 { 0.0 } else { (1u64 << i) as f64 };
                let hi = (1u64 << (i + 1)) as f64;
                let v = lo + (hi - lo) * (rank - seen as f64) / c as f64;
                return (v as u64).min(self.max_ns);
            }
            seen += c;
        }
        self.max_ns
    }
}

impl Profile {
    /// Whether an importer made this profile (see [`IMPORTED_NOTE`]).
    pub fn is_imported(&self) -> bool {
        self.meta.notes.iter().any(|n| n.starts_with(IMPORTED_NOTE))
    }

    pub fn str(&self, id: u32) -> &str {
        self.strings.get(id as usize).map(String::as_str).unwrap_or("")
    }

    pub fn frame_name(&self, frame: u32) -> &str {
        self.str(self.frames[frame as usize].name)
    }

    /// Module path of a frame, "" when it has none.
    pub fn frame_module(&self, frame: u32) -> &str {
        let m = self.frames[frame as usize].module;
        if m == NONE {
            ""
        } else {
            self.modules[m as usize].path.as_str()
        }
    }

    /// Frames of a stack from the outermost caller (root) to the innermost (leaf).
    pub fn stack_frames(&self, leaf: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut node = leaf;
        while node != NONE {
            let n = self.stacks[node as usize];
            out.push(n.frame);
            node = n.parent;
        }
        out.reverse();
        out
    }

    /// Frames of a stack with the source line each was at ([`StackNode::line`]), root first.
    pub fn stack_lines(&self, leaf: u32) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut node = leaf;
        while node != NONE {
            let n = self.stacks[node as usize];
            out.push((n.frame, n.line));
            node = n.parent;
        }
        out.reverse();
        out
    }

    /// Index of a sample type by name.
    pub fn sample_type(&self, name: &str) -> Option<usize> {
        self.sample_types.iter().position(|t| t.name == name)
    }

    /// The sample type shown when none is asked for: `cpu` where the profile has it (a recording with
    /// allocations or off-CPU time besides is first about CPU time), else its first type; None without
    /// any. Every consumer (the CLI, the HTTP API, the UI) starts from this one.
    pub fn default_type(&self) -> Option<usize> {
        self.sample_type(sample_types::CPU).or((!self.sample_types.is_empty()).then_some(0))
    }

    /// Sum of one value type over all samples.
    pub fn total(&self, value: usize) -> i64 {
        self.samples.iter().map(|s| s.values[value]).sum()
    }

    /// How many CPU samples the shares of CPU time come from (None when there are none: not sampled).
    pub fn cpu_samples(&self) -> Option<i64> {
        self.sample_type(sample_types::CPU).map(|v| self.total(v)).filter(|&n| n > 0)
    }

    /// The unix time (ns) a time slice starts at.
    pub fn slice_start_ns(&self, time: u32) -> u64 {
        self.meta.start_unix_ns.saturating_add(u64::from(time) * TIME_BUCKET_NS)
    }

    /// Keeps the samples whose time slice starts in [from_unix_ns, until_unix_ns).
    pub fn retain_time(&mut self, from_unix_ns: u64, until_unix_ns: u64) {
        let start = self.meta.start_unix_ns;
        let slice = |t: u32| start.saturating_add(u64::from(t) * TIME_BUCKET_NS);
        self.samples.retain(|s| (from_unix_ns..until_unix_ns).contains(&slice(s.time)));
    }

    /// Keeps the samples of the threads `keep` accepts.
    pub fn retain_threads(&mut self, keep: impl Fn(&Thread) -> bool) {
        let kept: Vec<bool> = self.threads.iter().map(keep).collect();
        self.samples.retain(|s| kept[s.thread as usize]);
    }

    /// One value type summed per time slice, from slice 0 to the last one with a sample.
    pub fn timeline(&self, value: usize) -> Vec<i64> {
        let n = self.samples.iter().map(|s| s.time as usize + 1).max().unwrap_or(0);
        let mut out = vec![0i64; n];
        for s in &self.samples {
            out[s.time as usize] += s.values[value];
        }
        out
    }

    /// Checks the counter tables: at most [`HIST_BUCKETS`] latency buckets, and every column summed over
    /// all rows (the latency buckets all together) fits in a u64, so merging rows, the summaries and the
    /// quantiles never overflow.
    fn validate_counters(&self) -> Result<(), String> {
        let overflow = |what: &str| format!("the {what} counters overflow");
        let add = |sum: &mut u64, v: u64, what: &str| {
            *sum = sum.checked_add(v).ok_or_else(|| overflow(what))?;
            Ok::<(), String>(())
        };
        let (mut calls, mut errors, mut ns, mut bytes, mut errnos, mut hist) = (0, 0, 0, 0, 0, 0);
        for (i, s) in self.syscalls.iter().enumerate() {
            if s.hist.len() > HIST_BUCKETS {
                return Err(format!(
                    "syscall row {i} has {} latency buckets (at most {HIST_BUCKETS})",
                    s.hist.len()
                ));
            }
            add(&mut calls, s.calls, "syscall")?;
            add(&mut errors, s.errors, "syscall")?;
            add(&mut ns, s.total_ns, "syscall")?;
            add(&mut bytes, s.bytes, "syscall")?;
            for &v in &s.hist {
                add(&mut hist, v, "syscall")?; // all buckets together: a quantile sums a row's
            }
            for (_, n) in &s.errnos {
                add(&mut errnos, *n, "syscall")?;
            }
        }
        let (mut calls, mut timed, mut ns) = (0, 0, 0);
        for c in &self.calls {
            add(&mut calls, c.calls, "call")?;
            add(&mut timed, c.timed, "call")?;
            add(&mut ns, c.total_ns, "call")?;
        }
        Ok(())
    }

    /// Checks internal references so a file that decodes but lies (or a buggy source) cannot panic consumers.
    pub fn validate(&self) -> Result<(), String> {
        let ns = self.strings.len() as u32;
        if self.strings.first().map(String::as_str) != Some("") {
            return Err("string table must start with \"\"".into());
        }
        for (i, f) in self.frames.iter().enumerate() {
            if f.name >= ns || f.file >= ns {
                return Err(format!("frame {i} names a missing string"));
            }
            if f.module != NONE && f.module as usize >= self.modules.len() {
                return Err(format!("frame {i} names a missing module"));
            }
        }
        for (i, n) in self.stacks.iter().enumerate() {
            if n.frame as usize >= self.frames.len() {
                return Err(format!("stack node {i} names a missing frame"));
            }
            // Parents always come before children, which also rules out cycles.
            if n.parent != NONE && n.parent as usize >= i {
                return Err(format!("stack node {i} has a bad parent"));
            }
        }
        let nt = self.sample_types.len();
        for (i, s) in self.samples.iter().enumerate() {
            if s.stack != NONE && s.stack as usize >= self.stacks.len() {
                return Err(format!("sample {i} names a missing stack"));
            }
            if s.thread as usize >= self.threads.len() {
                return Err(format!("sample {i} names a missing thread"));
            }
            if s.values.len() != nt {
                return Err(format!("sample {i} has {} values, expected {nt}", s.values.len()));
            }
        }
        self.validate_counters()?;
        // Every sum a consumer takes (totals, a function's share, a diff) stays exact.
        let mut totals = vec![0i64; nt];
        for s in &self.samples {
            for (k, (t, v)) in totals.iter_mut().zip(&s.values).enumerate() {
                *t = v.checked_abs().and_then(|a| t.checked_add(a)).ok_or_else(|| {
                    format!("the values of sample type {} overflow", self.sample_types[k].name)
                })?;
            }
        }
        Ok(())
    }
}

/// Builds a [`Profile`] with interning and aggregation; the one entry point for every source. Its maps
/// are looked up for every frame of every sample added: hashed with foldhash ([`raw::FastMap`]).
pub struct ProfileBuilder {
    profile: Profile,
    strings: raw::FastMap<String, u32>,
    frames: raw::FastMap<Frame, u32>,
    nodes: raw::FastMap<StackNode, u32>,
    samples: raw::FastMap<(u32, u32, u32), usize>,
    modules: raw::FastMap<String, u32>,
}

impl ProfileBuilder {
    pub fn new(meta: Metadata, sample_types: Vec<SampleType>) -> Self {
        let mut b = ProfileBuilder {
            profile: Profile { meta, sample_types, ..Default::default() },
            strings: Default::default(),
            frames: Default::default(),
            nodes: Default::default(),
            samples: Default::default(),
            modules: Default::default(),
        };
        b.intern("");
        b
    }

    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.profile.strings.len() as u32;
        self.profile.strings.push(s.to_string());
        self.strings.insert(s.to_string(), id);
        id
    }

    /// Adds a module (deduplicated by path) and returns its index.
    /// Interns a module of another profile, with its compile-unit producers.
    pub fn module_of(&mut self, m: &Module) -> u32 {
        let id = self.module(&m.path, &m.build_id);
        let ours = &mut self.profile.modules[id as usize];
        if ours.producers.is_empty() {
            ours.producers.clone_from(&m.producers);
        }
        if ours.symbols.is_empty() {
            ours.symbols.clone_from(&m.symbols);
        }
        id
    }

    pub fn module(&mut self, path: &str, build_id: &str) -> u32 {
        if let Some(&id) = self.modules.get(path) {
            return id;
        }
        let id = self.profile.modules.len() as u32;
        self.profile.modules.push(Module {
            path: path.to_string(),
            build_id: build_id.to_string(),
            producers: Vec::new(),
            symbols: String::new(),
        });
        self.modules.insert(path.to_string(), id);
        id
    }

    pub fn frame(&mut self, name: &str, module: u32, file: &str, kind: FrameKind) -> u32 {
        let f = Frame { name: self.intern(name), module, file: self.intern(file), kind };
        if let Some(&id) = self.frames.get(&f) {
            return id;
        }
        let id = self.profile.frames.len() as u32;
        self.profile.frames.push(f.clone());
        self.frames.insert(f, id);
        id
    }

    /// Interns a stack given root-first frame ids and returns its leaf node ([`NONE`] when empty).
    pub fn stack(&mut self, frames_root_first: &[u32]) -> u32 {
        let mut parent = NONE;
        for &frame in frames_root_first {
            parent = self.node(parent, frame, 0);
        }
        parent
    }

    /// [`ProfileBuilder::stack`] with the source line of each frame ([`StackNode::line`]), root first.
    pub fn stack_at_lines(&mut self, root_first: &[(u32, u32)]) -> u32 {
        let mut parent = NONE;
        for &(frame, line) in root_first {
            parent = self.node(parent, frame, line);
        }
        parent
    }

    fn node(&mut self, parent: u32, frame: u32, line: u32) -> u32 {
        let node = StackNode { parent, frame, line };
        if let Some(&id) = self.nodes.get(&node) {
            return id;
        }
        let id = self.profile.stacks.len() as u32;
        self.profile.stacks.push(node);
        self.nodes.insert(node, id);
        id
    }

    pub fn thread(&mut self, pid: u32, tid: u32, name: &str) -> u32 {
        if let Some(i) = self.profile.threads.iter().position(|t| t.pid == pid && t.tid == tid) {
            if !name.is_empty() {
                self.profile.threads[i].name = name.to_string();
            }
            return i as u32;
        }
        self.profile.threads.push(Thread { pid, tid, name: name.to_string() });
        (self.profile.threads.len() - 1) as u32
    }

    /// Adds values to the (stack, thread) sample of time slice 0, creating it when new.
    pub fn add_sample(&mut self, stack: u32, thread: u32, values: &[i64]) {
        self.add_sample_at(stack, thread, 0, values)
    }

    /// Adds values to the (stack, thread) sample of time slice `time`, creating it when new.
    pub fn add_sample_at(&mut self, stack: u32, thread: u32, time: u32, values: &[i64]) {
        let n = self.profile.sample_types.len();
        let idx = *self.samples.entry((stack, thread, time)).or_insert_with(|| {
            self.profile.samples.push(Sample { stack, thread, time, values: vec![0; n] });
            self.profile.samples.len() - 1
        });
        for (acc, v) in self.profile.samples[idx].values.iter_mut().zip(values) {
            *acc += v;
        }
    }

    pub fn meta_mut(&mut self) -> &mut Metadata {
        &mut self.profile.meta
    }

    pub fn finish(self) -> Profile {
        self.profile
    }
}

#[cfg(test)]
mod tests {

    /// Two windows' readings add up; another cgroup's quota counters are dropped, not mixed.
    /// Three windows of one second with 100, 120 and 80 syscalls: a rate of 100/s whose 95% bound is
    /// 1.96 * sqrt(800 / (3 * 2)) / 100 = 22.6%; equal windows at one rate have none; two say nothing.
    #[test]
    fn the_rate_over_sampled_windows_has_its_error() {
        let s = 1_000_000_000;
        let e = slices_rate_error(&[(s, 100), (s, 120), (s, 80)]).unwrap();
        assert!((e - 0.2263).abs() < 1e-3, "{e}");
        assert_eq!(slices_rate_error(&[(s, 50), (2 * s, 100), (s / 2, 25)]), Some(0.0));
        assert_eq!(slices_rate_error(&[(s, 100), (s, 120)]), None);
        let m = Metadata { syscall_slices: vec![(s, 100), (s, 120), (s, 80)], ..Default::default() };
        assert_eq!(m.syscall_rate_error(), Some(e));
    }

    #[test]
    fn target_env_windows_add_up() {
        let q = |periods, throttled| crate::CpuQuota {
            cgroup: "/sys/fs/cgroup/cpu/app".into(),
            quota_us: Some(20_000),
            period_us: 100_000,
            periods,
            throttled_periods: throttled,
            throttled_us: throttled * 80_000,
            usage_us: Some(periods * 20_000),
            ..Default::default()
        };
        let env = |w, quota| crate::TargetEnv { window_ns: w, cpu_quota: Some(quota), ..Default::default() };
        let mut a = env(1_000_000_000, q(10, 9));
        a.add(&env(2_000_000_000, q(20, 20)));
        let sum = a.cpu_quota.clone().unwrap();
        assert_eq!((a.window_ns, sum.periods, sum.throttled_periods), (3_000_000_000, 30, 29));
        assert_eq!((sum.throttled_us, sum.usage_us), (2_320_000, Some(600_000)));
        let mut other = q(5, 5);
        other.cgroup = "/sys/fs/cgroup/cpu/other".into();
        a.add(&env(1, other));
        assert_eq!(a.cpu_quota, None);
    }
    use super::{
        raw, signal_name, slices_rate_error, FrameKind, Killed, Metadata, Profile, ProfileBuilder,
        SampleType, SyscallStat, HIST_BUCKETS, NONE,
    };

    #[test]
    fn killed_targets_are_read_from_wait_statuses_and_named_by_signal() {
        assert_eq!(Killed::from_wait_status(7, 3 << 8), None, "exit(3) is not a kill");
        let k = Killed::from_wait_status(7, 11 | 0x80).unwrap();
        assert_eq!(k.to_string(), "target pid 7 was killed by SIGSEGV (core dumped) during the run");
        let k = Killed::from_wait_status(8, 9).unwrap();
        assert_eq!(k.to_string(), "target pid 8 was killed by SIGKILL during the run");
        assert_eq!(signal_name(40), "signal 40");
    }

    #[test]
    fn the_default_sample_type_is_cpu_where_there_is_one_else_the_first() {
        let with = |names: &[&str]| Profile {
            sample_types: names
                .iter()
                .map(|n| SampleType { name: n.to_string(), unit: "count".into() })
                .collect(),
            ..Default::default()
        };
        assert_eq!(with(&["alloc-count", "alloc-bytes", "cpu", "cpu-ns"]).default_type(), Some(2));
        assert_eq!(with(&["offcpu", "wall"]).default_type(), Some(0));
        assert_eq!(with(&[]).default_type(), None);
    }

    pub(crate) fn sample_profile() -> Profile {
        let mut b = ProfileBuilder::new(
            Metadata { event: "cpu-clock".into(), frequency_hz: 999, ..Default::default() },
            vec![SampleType { name: "cpu".into(), unit: "samples".into() }],
        );
        let m = b.module("/bin/app", "abcd");
        let main = b.frame("main", m, "app.c", FrameKind::User);
        let f = b.frame("f", m, "app.c", FrameKind::User);
        let g = b.frame("g", m, "app.c", FrameKind::Inlined);
        let t = b.thread(10, 10, "app");
        let s1 = b.stack(&[main, f]);
        let s2 = b.stack(&[main, f, g]);
        b.add_sample(s1, t, &[3]);
        b.add_sample(s2, t, &[2]);
        b.add_sample(s1, t, &[1]);
        // f at two lines: two nodes of one frame under main's line 7.
        let s3 = b.stack_at_lines(&[(main, 7), (f, 12)]);
        let s4 = b.stack_at_lines(&[(main, 7), (f, 13)]);
        b.add_sample(s3, t, &[4]);
        b.add_sample(s4, t, &[5]);
        b.finish()
    }

    #[test]
    fn builder_interns_and_aggregates() {
        let p = sample_profile();
        assert_eq!(p.frames.len(), 3);
        assert_eq!(p.stacks.len(), 6, "main->f shared between two stacks, main:7 between two others");
        assert_eq!(p.samples.len(), 4);
        assert_eq!(p.total(0), 15);
        let names: Vec<&str> = p.stack_frames(p.samples[1].stack).iter().map(|&f| p.frame_name(f)).collect();
        assert_eq!(names, ["main", "f", "g"]);
        assert_eq!(p.stack_lines(p.samples[3].stack), [(0, 7), (1, 13)]);
        assert_eq!(p.stack_lines(p.samples[0].stack), [(0, 0), (1, 0)]);
        p.validate().unwrap();
    }

    #[test]
    fn samples_are_kept_by_time_slice_and_thread() {
        let mut b = ProfileBuilder::new(
            Metadata { start_unix_ns: 5_000_000_000, ..Default::default() },
            vec![SampleType { name: "cpu".into(), unit: "samples".into() }],
        );
        let f = b.frame("f", NONE, "", FrameKind::User);
        let s = b.stack(&[f]);
        let (t1, t2) = (b.thread(1, 1, "a"), b.thread(1, 2, "b"));
        b.add_sample_at(s, t1, 0, &[1]);
        b.add_sample_at(s, t1, 3, &[2]);
        b.add_sample_at(s, t2, 3, &[4]);
        b.add_sample_at(s, t1, 3, &[8]);
        let p = b.finish();
        assert_eq!(p.samples.len(), 3, "one entry per (stack, thread, slice)");
        assert_eq!(p.timeline(0), vec![1, 0, 0, 14]);
        assert_eq!(p.slice_start_ns(3), 5_300_000_000);
        let mut q = p.clone();
        q.retain_time(5_100_000_000, 5_300_000_001);
        assert_eq!(q.total(0), 14);
        q.retain_time(0, 5_300_000_000);
        assert_eq!(q.total(0), 0, "slice 3 starts at the end of the range");
        let mut q = p.clone();
        q.retain_threads(|t| t.tid == 2);
        assert_eq!(q.total(0), 4);
    }

    #[test]
    fn validate_rejects_dangling_references() {
        let mut p = sample_profile();
        p.samples[0].stack = 99;
        assert!(p.validate().is_err());
    }

    #[test]
    fn values_whose_sums_overflow_are_refused_or_left_out() {
        let mut p = sample_profile();
        p.samples[0].values[0] = i64::MAX;
        assert!(p.validate().unwrap_err().contains("overflow"));
        let mut raw = raw::RawRecording { sample_types: p.sample_types.clone(), ..Default::default() };
        let n = raw.sample_types.len();
        let thread = raw::RawThread { pid: 1, tid: 1 };
        raw.add(&[raw::RawFrame::Kernel(1)], &thread, 0, &vec![i64::MAX - 1; n]);
        raw.add(&[raw::RawFrame::Kernel(2)], &thread, 0, &vec![2; n]);
        raw.add(&[raw::RawFrame::Kernel(2)], &thread, 0, &vec![1; n]);
        assert_eq!((raw.samples.len(), raw.overflowed, raw.totals[0]), (2, 1, i64::MAX));
        let mut p = sample_profile();
        let row = SyscallStat { calls: u64::MAX, hist: vec![0; HIST_BUCKETS], ..Default::default() };
        p.syscalls = vec![row.clone()];
        assert!(p.validate().is_ok());
        p.syscalls.push(row);
        assert!(p.validate().unwrap_err().contains("syscall counters overflow"));
        p.syscalls = vec![SyscallStat { hist: vec![1; 80], ..Default::default() }];
        assert!(p.validate().unwrap_err().contains("80 latency buckets"));
    }
}

/// File name of a path (the whole string when it has no `/`).
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// ` (did you mean: a, b?)` for error messages, or "" when there is nothing to suggest.
pub fn did_you_mean(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        format!(" (did you mean: {}?)", suggestions.join(", "))
    }
}

/// Up to `max` candidates that look like `query`: substring matches first, then by edit distance.
/// Used for every "did you mean" in the tool (functions, syscalls, process names, patterns).
pub fn close_matches<'a>(
    query: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    max: usize,
) -> Vec<String> {
    let q = query.to_lowercase();
    let mut scored: Vec<(usize, usize, &str)> = candidates
        .into_iter()
        .filter_map(|c| {
            let lc = c.to_lowercase();
            if lc.contains(&q) || (lc.len() >= 3 && q.contains(&lc)) {
                return Some((0, c.len(), c));
            }
            let d = edit_distance(&q, &lc);
            (d <= (q.chars().count() / 3).max(2)).then_some((d, c.len(), c))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.2 == b.2);
    scored.into_iter().take(max).map(|(_, _, c)| c.to_string()).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + (ca != *cb) as usize).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod match_tests {
    use super::close_matches;

    #[test]
    fn close_matches_prefers_substrings_then_distance() {
        let c = ["parse_frames", "find_boundary", "parse_header", "malloc"];
        assert_eq!(close_matches("parse", c, 5), ["parse_frames", "parse_header"]);
        assert_eq!(close_matches("maloc", c, 5), ["malloc"]);
        assert!(close_matches("zzzzzz", c, 5).is_empty());
    }
}
