//! The `whyslow` command: argument parsing only. Each subcommand turns its arguments into the libraries'
//! plain option structs, calls them, and hands the results to a renderer.

mod commands;
mod shell;

use clap::{CommandFactory, Parser, Subcommand};
use commands::{
    CallsArgs, CompareArgs, DiffArgs, DoctorArgs, ExportArgs, FlamegraphArgs, PushFileArgs, RecordArgs,
    ReportArgs, ServeArgs, SyscallsArgs, TopArgs, ViewArgs,
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
