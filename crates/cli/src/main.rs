//! The `whyslow` command: argument parsing only. Each subcommand turns its arguments into the libraries'
//! plain option structs, calls them, and hands the results to a renderer.

mod commands;
mod shell;

use clap::{CommandFactory, Parser, Subcommand};
use commands::{
    CallsArgs, CompareArgs, DiffArgs, DoctorArgs, ExportArgs, FlamegraphArgs, Outcome, PushFileArgs,
    RecordArgs, ReportArgs, ServeArgs, StacksArgs, SyscallsArgs, TopArgs, ViewArgs,
};
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
    /// Every thread's stack now (native, Java and Python frames) and what it waits on, without
    /// stopping the process (like `eu-stack`, `jstack`, `py-spy dump`): the first look at a hung one.
    Stacks(StacksArgs),
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

/// Old spellings still given: each says it is deprecated and sets its new one.
fn upgrade(command: &mut Command) {
    match command {
        Command::Record(a) => a.report.upgrade(),
        Command::Syscalls(a) => a.report.upgrade(),
        Command::Doctor(a) => a.report.upgrade(),
        Command::Calls(a) => a.upgrade(),
        Command::Diff(a) => a.upgrade(),
        Command::Compare(a) => a.upgrade(),
        _ => {}
    }
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
    let done = |r: anyhow::Result<()>| r.map(|()| Outcome::Ok);
    let result = match cli.command {
        Command::Record(a) => commands::record(a),
        Command::Report(a) => done(commands::report(a)),
        Command::Flamegraph(a) => done(commands::flamegraph(a)),
        Command::Export(a) => done(commands::export(a)),
        Command::Syscalls(a) => commands::syscalls(a),
        Command::Calls(a) => commands::calls(a),
        Command::Doctor(a) => commands::doctor(a),
        Command::Top(a) => done(commands::top(a)),
        Command::Stacks(a) => done(commands::stacks(a)),
        Command::Diff(a) => done(commands::diff(a)),
        Command::Compare(a) => done(commands::compare(a)),
        Command::Serve(a) => done(commands::serve(a)),
        Command::Push(a) => done(commands::push(a)),
        Command::View(a) => done(commands::view(a)),
        Command::Completions { shell } => done(commands::completions(Cli::command(), shell)),
        Command::Man { dir } => done(commands::man_pages(Cli::command(), &dir)),
        Command::Help { command } => done(commands::help(Cli::command(), &command)),
    };
    // A killed target is said after the output, also when the command then failed.
    let (outcome, result) = commands::split(result);
    if let Outcome::TargetKilled(k) = &outcome {
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
    match outcome.exit_status() {
        0 => {}
        status => std::process::exit(status),
    }
}
