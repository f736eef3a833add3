//! What can go wrong in a run: [`RecordError`] (each naming the fix where there is one), the option an
//! error is about ([`RecordOption`], named as this library names it), and [`NoSamples`], why a run
//! recorded nothing.

use crate::RecordOptions;

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
            (opts.mem.is_some(), "allocated nothing"),
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
    /// [`RecordOptions::stack_bytes`](crate::RecordOptions::stack_bytes).
    StackBytes,
    /// [`RecordOptions::frequency`](crate::RecordOptions::frequency).
    Frequency,
    /// [`AllocOptions::period`](crate::AllocOptions::period).
    AllocPeriod,
    /// [`SyscallOptions::stacks_period`](crate::SyscallOptions::stacks_period).
    SyscallStacksPeriod,
    /// [`CallOptions::callers_period`](crate::CallOptions::callers_period).
    CallersPeriod,
    /// Caller stacks ([`CallOptions::callers_period`](crate::CallOptions::callers_period) set) over more than [`calls::MAX_CALLER_PROBES`](crate::calls::MAX_CALLER_PROBES).
    CallerStacks,
    /// [`MemOptions::sample_bytes`](crate::mem::MemOptions::sample_bytes).
    MemSample,
}

impl std::fmt::Display for RecordOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecordOption::StackBytes => "stack_bytes",
            RecordOption::Frequency => "frequency",
            RecordOption::AllocPeriod => "alloc.period",
            RecordOption::MemSample => "mem.sample_bytes",
            RecordOption::SyscallStacksPeriod => "syscalls.stacks_period",
            RecordOption::CallersPeriod => "calls.callers_period",
            RecordOption::CallerStacks => "sampling callers",
        })
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
    #[error("process {0} exited while its stacks were taken")]
    Ended(u32),
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
    /// Memory in use of a running process needs an allocator whose entry points it knows: what its files
    /// lack (and, where every file lacks a symbol table, that).
    #[error("the target links no allocator whyslow knows: {0}")]
    UnknownAllocator(String),
    /// A Go program without malloc: its heap is the runtime's own.
    #[error(
        "{0} is a Go program without malloc: its heap is Go's own (garbage-collected, runtime.mallocgc); for \
         memory in use give its net/http/pprof address (whyslow record --mem http://HOST:PORT/debug/pprof)"
    )]
    GoHeap(String),
    #[error(
        "{0} is statically linked and has no symbol table: the memory library cannot be loaded into it \
         (LD_PRELOAD) and no symbol names its allocator to probe"
    )]
    StaticStripped(String),
    #[error(
        "memory in use is recorded for a command (after `--`) or running processes (-p), not a whole host"
    )]
    MemWholeHost,
    #[error(
        "{0} is statically linked: the memory library cannot be loaded into it (LD_PRELOAD); allocation \
         counts (--alloc) work there"
    )]
    StaticBinary(String),
    #[error(
        "{0} is setuid or setgid: the loader ignores LD_PRELOAD there, so its memory cannot be recorded"
    )]
    SetuidBinary(String),
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
}

#[cfg(test)]
mod tests {
    use crate::{AllocOptions, NoSamples, OffCpuOptions, RecordOptions, SyscallOptions};

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
}
