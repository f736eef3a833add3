//! The `whyslow` command: argument parsing only. Each subcommand turns its arguments into the libraries'
//! plain option structs, calls them, and hands the results to a renderer.

mod commands;
mod shell;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "whyslow",
    version = VERSION,
    about = "Find out why a native program is slow",
    max_term_width = 110,
    before_help = START_HERE,
    after_help = EXIT_STATUS,
    disable_help_subcommand = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The version and the git revision it was built from (`0.1.0 (abc1234)`; build.rs).
const VERSION: &str = env!("WHYSLOW_VERSION");

/// The three commands to try first, at the top of `--help`.
const START_HERE: &str = "Start here:
  whyslow doctor -- ./app ARGS    what is slow and why, with the evidence and the fix
  whyslow record -- ./app ARGS    a recording; then `whyslow report`, `whyslow flamegraph`
  whyslow serve                   continuous profiling: HTTP API, web UI, push to Pyroscope/OTLP
  (-p PID attaches to a running process instead of launching ./app)";

/// The exit statuses, as `--help` shows them.
const EXIT_STATUS: &str = "Exit status:
  0        success
  1        whyslow failed (the message says why)
  2        bad arguments
  N        record, syscalls and calls of a command that exited with status N pass N on (as strace does)
  128+S    a target process was killed by signal S during the run
  3        doctor --fail-on: a finding matched";

#[derive(Subcommand)]
enum Command {
    /// Sample a program's CPU time with complete stacks and save a recording.
    Record(RecordArgs),
    /// Show where the time went: top functions, threads, callers or callees.
    Report(ReportArgs),
    /// Write an interactive flame graph (SVG).
    Flamegraph(FlamegraphArgs),
    /// Convert a recording to pprof, folded stacks, speedscope or callgrind.
    Export(ExportArgs),
    /// Count every syscall exactly (like `strace -c`, at eBPF cost); trace some; sample their stacks.
    Syscalls(SyscallsArgs),
    /// Count calls of library and program functions exactly (like `ltrace -c`, at uprobe cost).
    Calls(CallsArgs),
    /// The hottest functions of running processes, refreshed every second (like `perf top`).
    Top(TopArgs),
    /// Investigate and explain: diagnose known performance anti-patterns with evidence and the fix.
    Doctor(DoctorArgs),
    /// Per-function deltas of two recordings and a differential flame graph.
    Diff(DiffArgs),
    /// Run two commands interleaved N times each, measure and record them, and say whether (and where)
    /// they differ.
    Compare(CompareArgs),
    /// Run as a continuous profiling agent: targets chosen over an HTTP API (or --config) are recorded in
    /// windows into an embedded store; profiles, the doctor and diffs over any time range.
    Serve(ServeArgs),
    /// Send a recording or an imported profile once to Pyroscope or an OTLP endpoint (--push KIND=URL).
    Push(PushFileArgs),
    /// Open recordings in the web UI (flame graph, table, doctor; two files: the diff), served on
    /// 127.0.0.1 until Ctrl-C.
    View(ViewArgs),
    /// Print a shell completion script: `whyslow completions bash > /etc/bash_completion.d/whyslow`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages (whyslow.1 and one per subcommand) into DIR.
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print this message or the help of the given subcommand.
    Help {
        /// The subcommand (and its subcommands) to explain.
        #[arg(value_name = "COMMAND")]
        command: Vec<String>,
    },
}

/// The rows every table shows unless `--limit` says otherwise (pprof's -top shows 10, perf report all:
/// a screenful).
pub const DEFAULT_LIMIT: usize = 25;

/// Says on stderr, once, that an old spelling still works but has a new one.
fn deprecated(old: &str, new: &str) {
    eprintln!("whyslow: warning: {old} is deprecated, use {new}");
}

/// Where a launching command's report goes.
#[derive(Args)]
pub struct ReportTo {
    /// Print the report (tables, JSON, traced calls) to FILE instead of standard output, which the
    /// launched command keeps for its own output (as strace -o does). Progress and errors stay on stderr.
    #[arg(long = "print-to", value_name = "FILE", display_order = 900)]
    pub report: Option<PathBuf>,
    /// Deprecated spelling of --print-to.
    #[arg(long = "report", value_name = "FILE", hide = true)]
    pub old_report: Option<PathBuf>,
}

impl ReportTo {
    fn upgrade(&mut self) {
        if let Some(p) = self.old_report.take() {
            deprecated("--report", "--print-to");
            self.report.get_or_insert(p);
        }
    }
}

/// Which processes to profile.
#[derive(Args)]
pub struct TargetArgs {
    /// Attach to running processes (comma-separated PIDs).
    #[arg(short = 'p', long = "pid", value_delimiter = ',', conflicts_with = "comm")]
    pub pids: Vec<u32>,
    /// Attach to every running process with this name.
    #[arg(long)]
    pub comm: Option<String>,
    /// Stop after this many seconds.
    #[arg(short = 'd', long = "duration")]
    pub duration: Option<f64>,
    /// Command to launch and profile (after `--`).
    #[arg(last = true)]
    pub command: Vec<String>,
}

#[derive(Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub report: ReportTo,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Sampling frequency in Hz.
    #[arg(short = 'F', long = "freq", default_value_t = 999)]
    pub freq: u64,
    /// Output recording file.
    #[arg(short = 'o', long, default_value = "whyslow.data")]
    pub output: PathBuf,
    /// Sampling clock: `auto` uses hardware cycles where the CPU has them, else cpu-clock.
    #[arg(short = 'e', long, value_enum, default_value_t = EventArg::Auto)]
    pub event: EventArg,
    /// Do not record kernel stacks.
    #[arg(long)]
    pub no_kernel: bool,
    /// Sample on-CPU time (the default when no other source is chosen).
    #[arg(long)]
    pub cpu: bool,
    /// Record blocked time by stack (eBPF at sched_switch): blocks of 1/F or longer as they are, shorter
    /// ones sampled (kept with probability length x F, valued 1/F), so the cost stays bounded.
    #[arg(long)]
    pub offcpu: bool,
    /// With --offcpu: leave out blocks shorter than this many microseconds.
    #[arg(long, default_value_t = 10, value_name = "US")]
    pub min_block_us: u64,
    /// Record allocations (count and bytes) by stack: malloc, calloc, realloc, posix_memalign,
    /// aligned_alloc, memalign (C++ operator new allocates through malloc), Go's runtime.mallocgc.
    #[arg(long)]
    pub alloc: bool,
    /// With --alloc: counts and bytes are exact per call site and stack, counted in the kernel; the stack
    /// of each is copied at its 1st, 2nd, 4th, ... call and then at least every Nth (1: every call).
    #[arg(long, default_value_t = whyslow_record::ALLOC_PERIOD, value_name = "N")]
    pub alloc_period: u64,
    /// Bytes of user stack copied per sample (deeper stacks are cut).
    #[arg(long, default_value_t = 32768)]
    pub stack_size: u32,
    /// Rows of each table of the summary printed at the end.
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Do not print the summary at the end.
    #[arg(short, long)]
    pub quiet: bool,
    /// Print the wall time of each phase (eBPF load, perf events, attach, run, symbolize, save) at the
    /// end.
    #[arg(short, long)]
    pub verbose: bool,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// Profiling a server under load.
#[derive(Args)]
pub struct LoadArgs {
    /// Load command to run against the server once it is ready (split into words like a shell does,
    /// not run by one); the recording ends when it ends and the server is stopped (SIGTERM, then SIGKILL
    /// after 3 s). wrk and redis-benchmark output is parsed for requests/s and latency.
    #[arg(long, value_name = "CMD")]
    pub load: Option<String>,
    /// With --load: the server is ready when 127.0.0.1:PORT accepts connections.
    #[arg(long, value_name = "PORT", requires = "load", conflicts_with = "ready_delay")]
    pub ready_port: Option<u16>,
    /// With --load: the server is ready this many seconds after it started.
    #[arg(long, value_name = "SECONDS", requires = "load")]
    pub ready_delay: Option<f64>,
    /// With --ready-port: give up when the port does not accept connections within this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub ready_timeout: f64,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum EventArg {
    Auto,
    Cycles,
    CpuClock,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum OutputFormat {
    /// Tables for people, values in units (1.20s, 3.50MiB).
    Text,
    /// One JSON document for programs: exact integers, each named with its unit.
    Json,
}

/// Slicing a recording after the fact (perf report's --comm/--dso/--pid/--tid, pprof's -focus/-ignore).
#[derive(Args, Default)]
pub struct SliceArgs {
    /// Leave kernel frames out (a sample entirely in the kernel shows as one `[kernel]` frame).
    #[arg(long, help_heading = "Slicing")]
    pub no_kernel: bool,
    /// Only these processes (comma-separated pids).
    #[arg(long, value_delimiter = ',', value_name = "PID", help_heading = "Slicing")]
    pub pid: Vec<u32>,
    /// Only these threads (comma-separated tids).
    #[arg(long, value_delimiter = ',', value_name = "TID", help_heading = "Slicing")]
    pub tid: Vec<u32>,
    /// Only threads whose name matches this regular expression.
    #[arg(long, value_name = "RE", help_heading = "Slicing")]
    pub comm: Option<String>,
    /// Only samples whose innermost frame is in a module (file name) matching this regular expression.
    #[arg(long, value_name = "RE", help_heading = "Slicing")]
    pub module: Option<String>,
    /// Only samples with a function matching this regular expression on their stack.
    #[arg(long, value_name = "RE", help_heading = "Slicing")]
    pub focus: Option<String>,
    /// Leave out samples with a function matching this regular expression on their stack.
    #[arg(long, value_name = "RE", help_heading = "Slicing")]
    pub ignore: Option<String>,
}

#[derive(Args)]
pub struct ReportArgs {
    /// Recording file, or a profile to import: pprof (file or http(s):// URL, e.g. Go's
    /// /debug/pprof/profile?seconds=10), folded stacks, `perf script` output (told apart by content).
    #[arg(default_value = "whyslow.data")]
    pub file: PathBuf,
    /// Split by thread.
    #[arg(long)]
    pub threads: bool,
    /// Show what this function calls, with shares.
    #[arg(long, value_name = "FUNCTION", conflicts_with = "callers")]
    pub callees: Option<String>,
    /// Show who calls this function, with shares.
    #[arg(long, value_name = "FUNCTION")]
    pub callers: Option<String>,
    /// Show the source lines of the functions matching this regular expression with the samples of
    /// each line, self and total (as pprof -list). The source is read from the path in the line table,
    /// else from debuginfod (DEBUGINFOD_URLS).
    #[arg(long, value_name = "FUNCTION", conflicts_with_all = ["callers", "callees"])]
    pub source: Option<String>,
    /// Sample type to weigh by (e.g. cpu, cpu-ns, syscalls; default: cpu, else the recording's first).
    #[arg(long = "type")]
    pub value_type: Option<String>,
    /// Rows of each table.
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Also write the flame graph (SVG) of the same sample type here: one read of a large file for both.
    #[arg(long, value_name = "SVG")]
    pub flamegraph: Option<PathBuf>,
    #[command(flatten)]
    pub slice: SliceArgs,
}

#[derive(Args)]
pub struct FlamegraphArgs {
    /// Recording file, or a profile to import: pprof (file or http(s):// URL, e.g. Go's
    /// /debug/pprof/profile?seconds=10), folded stacks, `perf script` output (told apart by content).
    #[arg(default_value = "whyslow.data")]
    pub file: PathBuf,
    /// Output SVG file.
    #[arg(short = 'o', long, default_value = "flamegraph.svg")]
    pub output: PathBuf,
    /// Sample type to weigh by.
    #[arg(long = "type")]
    pub value_type: Option<String>,
    /// Icicle graph: leaves at the top, merged by callee.
    #[arg(long)]
    pub reverse: bool,
    /// Title of the graph.
    #[arg(long)]
    pub title: Option<String>,
    #[command(flatten)]
    pub slice: SliceArgs,
}

#[derive(Args)]
pub struct SyscallsArgs {
    #[command(flatten)]
    pub report: ReportTo,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Print one line per call of these syscalls (comma-separated): arguments, result, duration.
    #[arg(long, value_delimiter = ',', value_name = "SYSCALLS")]
    pub trace: Vec<String>,
    /// Sample the user stack of each syscall and show which code issues them (saved to -o).
    #[arg(long)]
    pub stacks: bool,
    /// With --stacks: take the stack of every Nth syscall only (cheaper on syscall-heavy targets; N is
    /// rounded up to a prime, so that a loop making a multiple of N calls does not show the same one
    /// each time).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub stacks_period: u64,
    /// One table per thread.
    #[arg(long)]
    pub per_thread: bool,
    /// Refresh a live table of the last interval every this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub interval: Option<f64>,
    /// Save the recording here (default with --stacks: whyslow.data).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Rows of each table (text output; JSON has every row).
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Print the wall time of each phase (eBPF load, attach, run, symbolize, save) at the end.
    #[arg(short, long)]
    pub verbose: bool,
}

#[derive(Args)]
pub struct CallsArgs {
    #[command(flatten)]
    pub report: ReportTo,
    /// Function name globs (demangled or mangled; `*` and `?`), given before `--`. Default: the usual
    /// suspects (allocation, memory and strings, formatting and time, locking, exceptions).
    #[arg(value_name = "PATTERN")]
    pub patterns: Vec<String>,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Also measure the time of each call (return probes).
    #[arg(long)]
    pub latency: bool,
    /// Count children forked by the target too (probes then sit in every process mapping the files).
    #[arg(long)]
    pub follow_children: bool,
    /// Sample the user stack of each call and show the top call sites of each function (as syscalls
    /// --stacks does for syscalls).
    #[arg(long)]
    pub stacks: bool,
    /// With --stacks: take the stack of every Nth call only (N rounded up to a prime, so that a loop
    /// making a multiple of N calls does not show the same one each time).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub stacks_period: u64,
    /// Deprecated spelling of --stacks.
    #[arg(long = "callers", hide = true)]
    pub old_callers: bool,
    /// Deprecated spelling of --stacks-period.
    #[arg(long = "callers-period", value_name = "N", hide = true)]
    pub old_callers_period: Option<u64>,
    /// Also resolve the patterns in this library, which the target loads later with dlopen: its
    /// functions are counted from the first call (a library found loaded during the run without it is
    /// probed from when it is seen).
    #[arg(long, value_name = "PATH")]
    pub lib: Vec<PathBuf>,
    /// List the functions the patterns match, where each probe sits and how the kernel runs it, without
    /// running anything.
    #[arg(long)]
    pub list: bool,
    /// Probe more functions than the guard allows (every probed call traps into the kernel).
    #[arg(long)]
    pub yes: bool,
    /// Stop the probes once their estimated cost (each hit priced as measured at the start) passes PCT
    /// percent of the target's CPU time, as the doctor does; counts are then rates over the window
    /// they cover. Default: 5 for running processes (-p, --comm), none for a launched command (exact
    /// counts; it runs on to its end when the probes stop). `none`: never stop.
    #[arg(long, value_name = "PCT", value_parser = parse_budget)]
    pub budget: Option<Budget>,
    /// Rows of each table (text output; JSON has every row).
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

/// A probe budget given on the command line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// Never stop the probes.
    None,
    /// Percent of the target's CPU time.
    Pct(f64),
}

fn parse_budget(s: &str) -> Result<Budget, String> {
    if s == "none" {
        return Ok(Budget::None);
    }
    match s.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(Budget::Pct(p)),
        _ => Err("a percentage of the target's CPU time, above 0 and at most 100, or `none`".into()),
    }
}

impl CallsArgs {
    fn upgrade(&mut self) {
        self.report.upgrade();
        if std::mem::take(&mut self.old_callers) {
            deprecated("calls --callers", "--stacks");
            self.stacks = true;
        }
        if let Some(n) = self.old_callers_period.take() {
            deprecated("--callers-period", "--stacks-period");
            self.stacks_period = n;
        }
    }
}

#[derive(Args)]
#[command(
    after_help = "Keys on a terminal: s sort by self or total, k kernel frames, o on-CPU, off-CPU or wall \
                        time (with --offcpu), f or space freeze, q quit."
)]
pub struct TopArgs {
    /// Running processes to watch (comma-separated PIDs).
    #[arg(short = 'p', long = "pid", value_delimiter = ',', conflicts_with_all = ["comm", "all"])]
    pub pids: Vec<u32>,
    /// Every running process whose name matches this regular expression (and those that start later).
    #[arg(long, value_name = "RE", conflicts_with = "all")]
    pub comm: Option<String>,
    /// Every process of the host (and those that start later).
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Stop after this many seconds (default: until q, Ctrl-C, or the processes exit).
    #[arg(short = 'd', long = "duration", value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Seconds per table.
    #[arg(short = 'i', long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
    /// Sampling frequency in Hz.
    #[arg(short = 'F', long = "freq", default_value_t = 999)]
    pub freq: u64,
    /// Record blocked time too (eBPF at sched_switch): the o key cycles the table through on-CPU,
    /// off-CPU and wall time; it starts on off-CPU time.
    #[arg(long)]
    pub offcpu: bool,
    /// Sort by total (the function and what it calls) instead of self (key: s).
    #[arg(long)]
    pub total: bool,
    /// Leave kernel frames out (key: k).
    #[arg(long)]
    pub no_kernel: bool,
    /// Rows of each table (on a terminal, at most what fits).
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Output format: json prints one JSON object per interval, one line each (NDJSON), with the
    /// table's columns, also on a terminal.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Command to launch and watch (after `--`), instead of running processes.
    #[arg(last = true)]
    pub command: Vec<String>,
}

#[derive(Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub report: ReportTo,
    /// Diagnose this saved recording (or pprof file or URL, folded stacks, `perf script` output)
    /// instead of running a target.
    #[arg(value_name = "RECORDING")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Where to save the investigation's recording (for `whyslow diff` after a fix).
    #[arg(short = 'o', long, default_value = "whyslow.data")]
    pub output: PathBuf,
    /// CPU sampling frequency in Hz (default: 999 for a command, 99 for running processes: each sample
    /// interrupts a CPU, which a loaded server pays for in throughput).
    #[arg(short = 'F', long = "freq")]
    pub freq: Option<u64>,
    /// Take the stack of every Nth syscall (rounded up to a prime), and of each allocation stack at
    /// least every 4Nth call (allocations are counted exactly whatever N).
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub stacks_period: u64,
    /// The most the second phase's uprobes (allocation and call counters, which cost per call) may cost,
    /// in percent of the target's CPU time: they stop when they reach it, and their counts are rates
    /// over the shorter window.
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    pub budget: f64,
    /// Exit with status 3 when a finding matches: `any`, rule ids (`small-writes,tz-stat-storm`), or
    /// `impact>=PCT` (a finding explaining at least PCT% of the time it is about). For CI.
    #[arg(long, value_name = "WHICH")]
    pub fail_on: Option<whyslow_analyze::doctor::FailOn>,
    /// Rows of the hot paths and of the call counts (text output; JSON has every row).
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

#[derive(Args)]
pub struct DiffArgs {
    /// The before recording (or pprof file or URL, folded stacks, `perf script` output).
    pub before: PathBuf,
    /// The after recording (same choices).
    pub after: PathBuf,
    /// Also write a differential flame graph (SVG) here: red grew, blue shrank.
    #[arg(long, value_name = "SVG")]
    pub flamegraph: Option<PathBuf>,
    /// Deprecated spelling of --flamegraph.
    #[arg(short = 'o', long = "output", value_name = "SVG", hide = true)]
    pub old_output: Option<PathBuf>,
    /// With --flamegraph: widths from the before profile (shows what vanished), colors still after -
    /// before.
    #[arg(long)]
    pub negate: bool,
    /// Compare shares of each total even when both recordings give absolute time.
    #[arg(long)]
    pub shares: bool,
    /// Sample type to weigh by (default: cpu, else the recordings' first).
    #[arg(long = "type")]
    pub value_type: Option<String>,
    /// Rows of each table.
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    #[command(flatten)]
    pub slice: SliceArgs,
}

#[derive(Args)]
pub struct CompareArgs {
    /// Runs per side.
    #[arg(short = 'n', long = "runs", default_value_t = 10)]
    pub runs: usize,
    /// The before command (split into words like a shell does; use `sh -c '...'` for pipes).
    #[arg(long, value_name = "CMD")]
    pub before: String,
    /// The after command.
    #[arg(long, value_name = "CMD")]
    pub after: String,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Directory for the recordings (one per run, merged before.data and after.data) and diff.svg.
    #[arg(long, value_name = "DIR", default_value = "whyslow-compare")]
    pub output_dir: PathBuf,
    /// Deprecated spelling of --output-dir.
    #[arg(short = 'o', long = "output", value_name = "DIR", hide = true)]
    pub old_output: Option<PathBuf>,
    /// Sampling frequency in Hz.
    #[arg(short = 'F', long = "freq", default_value_t = 999)]
    pub freq: u64,
    /// Rows of each table.
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ExportFormat {
    /// pprof's profile.proto, gzipped (every sample type).
    Pprof,
    /// Folded stacks, one `a;b;c N` line per stack (Brendan Gregg's flamegraph.pl, inferno).
    Folded,
    /// speedscope's JSON file format.
    Speedscope,
    /// callgrind's format (kcachegrind, callgrind_annotate).
    Callgrind,
}

#[derive(Args)]
pub struct ExportArgs {
    /// Recording file, or a profile to import: pprof (file or http(s):// URL, e.g. Go's
    /// /debug/pprof/profile?seconds=10), folded stacks, `perf script` output (told apart by content).
    #[arg(default_value = "whyslow.data")]
    pub file: PathBuf,
    /// File format to write.
    #[arg(short, long, value_enum)]
    pub format: ExportFormat,
    /// Output file ("-" for standard output).
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    /// Sample type to weigh by (pprof carries all types).
    #[arg(long = "type")]
    pub value_type: Option<String>,
    #[command(flatten)]
    pub slice: SliceArgs,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on. Anything but loopback requires --token-file.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: std::net::SocketAddr,
    /// Where the store (whyslow.db) and the periodic files live.
    #[arg(long, default_value = "whyslow-data")]
    pub data_dir: PathBuf,
    /// TOML file with `[[target]]` definitions (as the API takes them), kept in the store by name.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// File holding the bearer token every request must carry.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Remove windows (and periodic files) older than this: 30m, 12h, 7d.
    #[arg(long, default_value = "7d")]
    pub retention: String,
    /// Keep the store's files (database and its log) under this size: 500MiB, 1GiB (oldest windows go
    /// first).
    #[arg(long, default_value = "1GiB")]
    pub max_disk: String,
    /// A host name requests may use in their Host header besides IP addresses and localhost
    /// (repeatable); other names are refused (DNS rebinding).
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// Profile every process of the host (a target named all-processes matching all, on-CPU at 19 Hz,
    /// labelled by each process's systemd unit, container and pod), with or without other targets.
    #[arg(long)]
    pub all: bool,
    /// Periodic files may only be written under this directory (default: DATA_DIR/output).
    #[arg(long)]
    pub output_root: Option<PathBuf>,
    /// Do not diagnose every window (findings, regressions and webhooks are then off).
    #[arg(long)]
    pub no_doctor: bool,
    /// POST each regression and each finding that starts to this URL as JSON (repeatable; retried with
    /// backoff, each event once).
    #[arg(long = "webhook", value_name = "URL")]
    pub webhooks: Vec<String>,
    #[command(flatten)]
    pub push: PushArgs,
}

/// Where and how profiles are pushed (serve: every stored window; push: one file).
#[derive(Args)]
pub struct PushArgs {
    /// Backend: pyroscope=URL (Push API), pyroscope-ingest=URL (legacy /ingest), otlp=URL (OTLP
    /// profiles over HTTP/protobuf, a collector's :4318), otlp-grpc=URL (OTLP over gRPC, :4317).
    /// Repeatable.
    #[arg(long = "push", value_name = "KIND=URL")]
    pub to: Vec<String>,
    /// Label added to every pushed series (repeatable).
    #[arg(long = "push-label", value_name = "NAME=VALUE")]
    pub labels: Vec<String>,
    /// Tenant sent as X-Scope-OrgID.
    #[arg(long = "push-tenant")]
    pub tenant: Option<String>,
    /// File holding `user:password` for HTTP basic authentication.
    #[arg(long = "push-basic-auth-file")]
    pub basic_auth_file: Option<PathBuf>,
    /// File holding a bearer token.
    #[arg(long = "push-bearer-file")]
    pub bearer_file: Option<PathBuf>,
    /// A pid label on each series (one series per process: mind the cardinality).
    #[arg(long = "push-per-process")]
    pub per_process: bool,
}

#[derive(Args)]
pub struct PushFileArgs {
    /// Recording or profile to push (anything `report` reads).
    pub file: PathBuf,
    /// The service the series are named by (default: the recorded command's name).
    #[arg(long)]
    pub service_name: Option<String>,
    #[command(flatten)]
    pub push: PushArgs,
}

#[derive(Args)]
pub struct ViewArgs {
    /// Recording or imported profile (anything `report` reads); a second one for the diff view
    /// (before, after).
    #[arg(default_value = "whyslow.data", num_args = 1..=2)]
    pub files: Vec<PathBuf>,
    /// Port on 127.0.0.1 [default: a free one].
    #[arg(long)]
    pub port: Option<u16>,
    /// Start a browser on the URL (xdg-open, else chromium).
    #[arg(long)]
    pub open: bool,
}

/// Old spellings still given: each says it is deprecated and sets its new one.
fn upgrade(command: &mut Command) {
    match command {
        Command::Record(a) => a.report.upgrade(),
        Command::Syscalls(a) => a.report.upgrade(),
        Command::Doctor(a) => a.report.upgrade(),
        Command::Calls(a) => a.upgrade(),
        Command::Diff(a) => {
            if let Some(p) = a.old_output.take() {
                deprecated("diff -o", "--flamegraph");
                a.flamegraph.get_or_insert(p);
            }
        }
        Command::Compare(a) => {
            if let Some(p) = a.old_output.take() {
                deprecated("compare -o", "--output-dir");
                a.output_dir = p;
            }
        }
        _ => {}
    }
}

/// `whyslow help [COMMAND...]`: the help of the command named, exactly as `whyslow COMMAND --help`.
fn help(path: &[String]) -> anyhow::Result<()> {
    let mut at = Cli::command();
    for name in path {
        let known: Vec<String> = at.get_subcommands().map(|c| c.get_name().to_string()).collect();
        at = at.find_subcommand(name).cloned().ok_or_else(|| {
            anyhow::anyhow!(
                "no command '{name}'{}",
                whyslow_model::did_you_mean(&whyslow_model::close_matches(
                    name,
                    known.iter().map(String::as_str),
                    3
                ))
            )
        })?;
    }
    let argv = std::iter::once("whyslow").chain(path.iter().map(String::as_str)).chain(["--help"]);
    match Cli::command().try_get_matches_from(argv) {
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => Ok(e.print()?),
        Err(e) => Err(e.into()),
        Ok(_) => Ok(()),
    }
}

/// whyslow.1 and whyslow-SUBCOMMAND.1 in `dir`.
fn man_pages(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cli = Cli::command();
    let mut pages = vec![("whyslow".to_string(), cli.clone())];
    for c in cli.get_subcommands() {
        let name = format!("whyslow-{}", c.get_name());
        // A page's title is its command's name; clap takes names as 'static (a few bytes, once).
        let title: &'static str = Box::leak(name.clone().into_boxed_str());
        pages.push((name, c.clone().name(title)));
    }
    for (name, cmd) in pages {
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut out)?;
        let path = dir.join(format!("{name}.1"));
        whyslow_model::file::write_atomic(&path, &out)?;
    }
    Ok(())
}

/// When main began (`-v` prints the phases against it).
pub static STARTED: std::sync::LazyLock<std::time::Instant> =
    std::sync::LazyLock::new(std::time::Instant::now);

fn main() {
    std::sync::LazyLock::force(&STARTED);
    let mut cli = Cli::parse();
    upgrade(&mut cli.command);
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        whyslow_symbolize::set_progress(|what| eprintln!("whyslow: {what}"));
    }
    let result = match cli.command {
        Command::Record(a) => commands::record(a),
        Command::Report(a) => commands::report(a),
        Command::Flamegraph(a) => commands::flamegraph(a),
        Command::Export(a) => commands::export(a),
        Command::Syscalls(a) => commands::syscalls(a),
        Command::Calls(a) => commands::calls(a),
        Command::Doctor(a) => commands::doctor(a),
        Command::Top(a) => commands::top(a),
        Command::Diff(a) => commands::diff(a),
        Command::Compare(a) => commands::compare(a),
        Command::Serve(a) => commands::serve(a),
        Command::Push(a) => commands::push(a),
        Command::View(a) => commands::view(a),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "whyslow", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { dir } => man_pages(&dir),
        Command::Help { command } => help(&command),
    };
    let killed = commands::target_killed();
    if let Some(k) = killed {
        eprintln!("whyslow: {k}");
    }
    if let Err(e) = result {
        let broken_pipe = |io: &std::io::Error| io.kind() == std::io::ErrorKind::BrokenPipe;
        if e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>().is_some_and(broken_pipe)
                || matches!(c.downcast_ref::<whyslow_render::RenderError>(), Some(whyslow_render::RenderError::Io(io)) if broken_pipe(io))
        }) {
            std::process::exit(0);
        }
        // Typed errors often name their source in their own message; print each cause once.
        let mut message = e.to_string();
        for cause in e.chain().skip(1).map(|c| c.to_string()) {
            if !message.contains(&cause) {
                message = format!("{message}: {cause}");
            }
        }
        // The libraries name their options as their APIs do; say the flags the user typed.
        let message = commands::in_flag_words(&e, &message).unwrap_or(message);
        eprintln!("whyslow: error: {message}");
        std::process::exit(1);
    }
    if let Some(k) = killed {
        std::process::exit(128 + k.signal);
    }
    if let Some(code) = commands::target_status() {
        std::process::exit(code);
    }
}
