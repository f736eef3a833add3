//! Subcommand bodies, one thin file each: options in, library calls, renderer out. What they share is
//! here: the target and durations from the command line, the live status line, where a report goes, the
//! target's exit status passed on, loading and slicing a recording, and the libraries' option errors
//! said with the flags the user typed.

mod calls;
mod compare;
mod diff;
mod doctor;
mod export;
mod flamegraph;
mod push;
mod record;
mod report;
mod serve;
mod syscalls;
mod top;
mod view;

pub use calls::calls;
pub use compare::compare;
pub use diff::diff;
pub use doctor::doctor;
pub use export::export;
pub use flamegraph::flamegraph;
pub use push::push;
pub use record::record;
pub use report::report;
pub use serve::serve;
pub use syscalls::syscalls;
pub use top::top;
pub use view::view;

use crate::shell::split_command;
use crate::{LoadArgs, ReportTo, SliceArgs, TargetArgs};
use anyhow::{anyhow, bail, Context, Result};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;
use whyslow_investigate::loadtest::{LoadOptions, LoadTestError, Ready};
use whyslow_investigate::{InvestigateError, InvestigateOption};
use whyslow_model::{file, Killed, Profile};
use whyslow_record::{phases, signals, Observer, Progress, RecordError, RecordOption, Target};

/// A library's complaint about one of its options (`stack_bytes must be ...`), said with the flag the
/// user typed (`--stack-size must be ...`) wherever it sits in the error's message; None for other
/// errors.
pub fn in_flag_words(e: &anyhow::Error, message: &str) -> Option<String> {
    for cause in e.chain() {
        let (library, cli) = if let Some(RecordError::BadOption { option, problem }) = cause.downcast_ref() {
            let flag = match option {
                RecordOption::StackBytes => "--stack-size",
                RecordOption::Frequency => "-F",
                RecordOption::AllocPeriod => "--alloc-period",
                RecordOption::SyscallStacksPeriod => "--stacks-period",
                RecordOption::CallersPeriod => "--stacks-period",
                RecordOption::CallerStacks => "--stacks",
            };
            (cause.to_string(), format!("{flag} {problem}"))
        } else if let Some(e @ LoadTestError::ServerNotReady { .. }) = cause.downcast_ref() {
            let library = e.to_string();
            let cli = library.replace("(the ready timeout)", "(--ready-timeout)");
            (library, cli)
        } else if let Some(InvestigateError::BadOption { option, problem }) = cause.downcast_ref() {
            let cli = match option {
                InvestigateOption::StacksPeriod | InvestigateOption::AllocPeriod => {
                    format!("--stacks-period {problem}")
                }
                InvestigateOption::Budget => {
                    "--budget is a percentage of the target's CPU time, above 0 and at most 100".to_string()
                }
                InvestigateOption::Runs => format!("-n {problem}"),
                InvestigateOption::Frequency => format!("-F {problem}"),
            };
            (cause.to_string(), cli)
        } else {
            continue;
        };
        return Some(message.replace(&library, &cli));
    }
    None
}

fn target(t: &TargetArgs) -> Result<Target> {
    Ok(match (&t.pids[..], &t.comm, &t.command[..]) {
        ([], None, []) => bail!("nothing to profile: give a command after `--`, -p PID or --comm NAME"),
        ([], None, cmd) => Target::Launch(cmd.to_vec()),
        (pids, None, []) => Target::Pids(pids.to_vec()),
        ([], Some(name), []) => Target::Comm(name.clone()),
        _ => bail!("give only one of: a command after `--`, -p PID, --comm NAME"),
    })
}

fn duration(t: &TargetArgs) -> Result<Option<Duration>> {
    t.duration.map(|d| seconds("-d (duration)", d, false)).transpose()
}

/// Seconds given on the command line: finite, positive (or zero where `zero` is allowed), and small
/// enough for a Duration (`-d 1e20` is an error, not a panic).
fn seconds(what: &str, s: f64, zero: bool) -> Result<Duration> {
    let ok = s.is_finite() && (s > 0.0 || (zero && s == 0.0));
    match Duration::try_from_secs_f64(s) {
        Ok(d) if ok => Ok(d),
        _ if !ok => {
            bail!("{what} must be a {}number of seconds, not {s}", if zero { "" } else { "positive " })
        }
        _ => bail!("{what}: {s} seconds is longer than whyslow can wait"),
    }
}

/// Shows a live status line on a terminal; nothing otherwise. With probes that cost per hit (calls,
/// allocations, syscall counters), the line says their hits per second and what they cost the target.
struct StatusLine {
    tty: bool,
    /// Symbolizing ahead (see [`StatusLine::prefetching`]): what to read, then the thread reading it.
    prefetch: Option<(Target, bool)>,
    prefetched: Option<std::thread::JoinHandle<whyslow_symbolize::Prefetch>>,
    /// What the run is doing, first on the line ("recording", "calls", or a phase the run named).
    what: String,
    /// Announce the start of an attached run on stderr, once: "whyslow: {this} pid N (Ctrl-C to stop)".
    announce: Option<&'static str>,
    /// The probes' hits per second: when and at how many hits it was last computed, and the rate.
    rate: Option<(Duration, u64, f64)>,
}

impl StatusLine {
    fn new() -> StatusLine {
        StatusLine {
            tty: std::io::stderr().is_terminal(),
            prefetch: None,
            prefetched: None,
            what: "recording".into(),
            announce: None,
            rate: None,
        }
    }

    /// A line about `what`, which announces an attached run's start (`doing`, as "counting calls of")
    /// when `attached`.
    fn about(mut self, what: &'static str, doing: &'static str, attached: bool) -> StatusLine {
        self.what = what.into();
        self.announce = attached.then_some(doing);
        self
    }

    /// The probes' hits per second, computed again about every second (over the first second, since
    /// the start).
    fn hit_rate(&mut self, elapsed: Duration, hits: u64) -> f64 {
        let since_start = hits as f64 / elapsed.as_secs_f64().max(1e-3);
        let (at, then, rate) = self.rate.unwrap_or((Duration::ZERO, 0, since_start));
        if elapsed.saturating_sub(at) < Duration::from_secs(1) {
            return rate;
        }
        let rate = hits.saturating_sub(then) as f64 / (elapsed - at).as_secs_f64();
        self.rate = Some((elapsed, hits, rate));
        rate
    }

    /// Starts symbolizing on other threads once the run has samples (its first progress with some,
    /// 0.25 s in): the kernel's symbol table (with `kernel`) and the symbols and debug information of
    /// a launched command's files (libc's compressed DWARF alone takes ~25 ms to inflate). A run over
    /// by then, or without samples, reads nothing ahead.
    fn prefetching(mut self, target: Target, kernel: bool) -> StatusLine {
        self.prefetch = Some((target, kernel));
        self
    }

    /// What was read ahead (nothing if the prefetch never started).
    fn prefetched(&mut self) -> whyslow_symbolize::Prefetch {
        self.prefetched.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Observer for StatusLine {
    fn progress(&mut self, p: &Progress) {
        // Progress comes every 0.25 s of a run, and once at its end (too late to read ahead).
        if p.samples > 0 && p.elapsed >= Duration::from_millis(250) {
            if let Some((target, kernel)) = self.prefetch.take() {
                self.prefetched = Some(std::thread::spawn(move || {
                    let files: Vec<String> = match target {
                        Target::Launch(_) => whyslow_record::calls::target_modules(&target)
                            .unwrap_or_default()
                            .iter()
                            .filter_map(|m| std::fs::canonicalize(m).ok())
                            .map(|m| m.to_string_lossy().into_owned())
                            .collect(),
                        _ => Vec::new(),
                    };
                    whyslow_symbolize::Prefetch::start(&files, kernel.then_some(""))
                }));
            }
        }
        if self.tty {
            let mut line = format!("{}: {:6.1}s", self.what, p.elapsed.as_secs_f64());
            if p.samples > 0 || p.probes.is_none() {
                line += &format!("  {} samples  {} lost", p.samples, p.lost);
            }
            if let Some(load) = &p.probes {
                let rate = self.hit_rate(p.elapsed, load.hits);
                line += &format!("  {}", probe_cost_line(rate, load));
            }
            eprint!("\r\x1b[2K{line}");
        }
    }

    fn started(&mut self, pids: &[u32]) {
        if let Some(doing) = self.announce.take() {
            announce(doing, pids);
        }
    }

    fn phase(&mut self, name: &str) {
        self.what = name.to_string();
        if self.tty {
            eprint!("\r\x1b[2K{name}...");
        }
    }
}

/// What the probes cost, for the live line: `204.1k hits/s, probes ~1.20s of the target's 1.90s of CPU
/// (~2.7x slower)`; the slowdown is the probes' time over the rest of the target's CPU time (a hit's
/// time is the thread's own).
fn probe_cost_line(hits_per_s: f64, load: &whyslow_record::ProbeLoad) -> String {
    let rate = match hits_per_s {
        r if r >= 1e6 => format!("{:.2}M", r / 1e6),
        r if r >= 1e3 => format!("{:.1}k", r / 1e3),
        r => format!("{r:.0}"),
    };
    let rate = if load.stopped { "stopped at the budget".to_string() } else { format!("{rate} hits/s") };
    let seconds = |ns: u64| whyslow_render::units::duration(ns as i64);
    let own = load.target_cpu_ns.saturating_sub(load.cost_ns);
    let slower = match load.cost_ns as f64 / own.max(1) as f64 {
        _ if load.target_cpu_ns == 0 => return format!("{rate}, probes ~{} so far", seconds(load.cost_ns)),
        _ if own == 0 => "nearly all of it: many times slower".to_string(),
        s if s < 1.0 => format!("~{:.0}% slower", s * 100.0),
        s => format!("~{:.1}x slower", 1.0 + s),
    };
    format!(
        "{rate}, probes ~{} of the target's {} of CPU ({slower})",
        seconds(load.cost_ns),
        seconds(load.target_cpu_ns)
    )
}

fn end_status_line() {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
}

/// Where a command's report goes: standard output, or the file of `--print-to`, created before the run
/// starts (so a bad path fails before anything is recorded) and written as the report is produced.
enum Report {
    Stdout(std::io::Stdout),
    File(std::io::BufWriter<std::fs::File>),
}

impl Report {
    fn open(args: &ReportTo) -> Result<Report> {
        Ok(match &args.report {
            None => Report::Stdout(std::io::stdout()),
            Some(p) => Report::File(std::io::BufWriter::new(
                std::fs::File::create(p).with_context(|| format!("--print-to {}", p.display()))?,
            )),
        })
    }

    /// Whether it is a terminal (live tables redraw in place there).
    fn is_terminal(&self) -> bool {
        matches!(self, Report::Stdout(s) if s.is_terminal())
    }
}

impl Write for Report {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Report::Stdout(s) => s.lock().write(buf),
            Report::File(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Report::Stdout(s) => s.lock().flush(),
            Report::File(f) => f.flush(),
        }
    }
}

/// Fails before a run when its recording could not be written: the directory of `path` must exist and
/// take a new file (checked with a probe file, removed at once; `path` itself is not touched).
fn check_writable(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let probe = dir.join(format!(".whyslow-write-check-{}", std::process::id()));
    std::fs::File::create(&probe)
        .and_then(|_| std::fs::remove_file(&probe))
        .with_context(|| format!("cannot write {} (-o): {}", path.display(), dir.display()))
}

/// The first target process a signal ended during this command's run: main reports it after the output
/// and exits with 128 + the signal, as a shell does, so a crash never hides behind a normal exit.
static KILLED: std::sync::OnceLock<Killed> = std::sync::OnceLock::new();

/// The status a launched command exited with when not 0: main exits with it, as strace, ltrace and time
/// do, so a failing command fails the script that profiles it.
static EXITED: std::sync::OnceLock<i32> = std::sync::OnceLock::new();

fn remember_killed(meta: &whyslow_model::Metadata) {
    if let Some(k) = meta.killed.first() {
        let _ = KILLED.set(k.clone());
    }
}

/// [`remember_killed`], and the launched command's status to pass through: only when it ended by
/// itself, not when whyslow stopped it (Ctrl-C or SIGTERM to whyslow, or the end of `-d`).
fn remember_outcome(meta: &whyslow_model::Metadata, duration_s: Option<f64>) {
    remember_killed(meta);
    let stopped_by_us =
        signals::stop_requested() || duration_s.is_some_and(|d| meta.duration_ns as f64 / 1e9 >= d - 0.05);
    if let Some(code) = meta.exit_code.filter(|&c| c != 0 && !stopped_by_us) {
        let _ = EXITED.set(code);
    }
}

pub fn target_killed() -> Option<&'static Killed> {
    KILLED.get()
}

/// The non-zero status of the launched command (see [`EXITED`]).
pub fn target_status() -> Option<i32> {
    EXITED.get().copied()
}

/// Reads a whyslow recording, pprof (file or http(s):// URL), folded stacks or `perf script` output;
/// `value_type` names the one type of folded stacks (they carry no name of their own).
fn load(source: &Path, value_type: Option<&str>) -> Result<Profile> {
    if source == Path::new(DEFAULT_RECORDING) && !source.exists() {
        bail!(
            "no {DEFAULT_RECORDING} here: record one first (`whyslow record -- ./app`), or name a recording"
        );
    }
    let opts =
        whyslow_import::ImportOptions { folded_type: value_type.map(str::to_string), ..Default::default() };
    Ok(whyslow_import::load(&source.to_string_lossy(), &opts)?)
}

/// The recording record and doctor write, and report, flamegraph and export read, when none is named.
const DEFAULT_RECORDING: &str = "whyslow.data";

/// The sample type asked for; without one, the recording's default ([`Profile::default_type`]).
fn value_index(p: &Profile, name: Option<&str>) -> Result<usize> {
    let name = match (name, p.default_type()) {
        (Some(n), _) => n,
        (None, Some(i)) => return Ok(i),
        (None, None) => whyslow_model::sample_types::CPU,
    };
    p.sample_type(name).with_context(|| {
        let have: Vec<&str> = p.sample_types.iter().map(|t| t.name.as_str()).collect();
        format!("this recording has no '{name}' samples (it has: {})", have.join(", "))
    })
}

/// The part of a loaded profile the slicing options keep.
fn sliced(p: Profile, a: &SliceArgs) -> Result<Profile> {
    use whyslow_analyze::slice::{pattern, Slice};
    let re = |option, p: &Option<String>| p.as_deref().map(|p| pattern(option, p)).transpose();
    let slice = Slice {
        no_kernel: a.no_kernel,
        pids: a.pid.clone(),
        tids: a.tid.clone(),
        comm: re("--comm", &a.comm)?,
        module: re("--module", &a.module)?,
        focus: re("--focus", &a.focus)?,
        ignore: re("--ignore", &a.ignore)?,
    };
    Ok(if slice.is_everything() { p } else { slice.apply(&p) })
}

/// Writes a rendered output to a file atomically ("-" is standard output).
fn write_output(path: &Path, render: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> Result<()> {
    let mut buf = Vec::new();
    render(&mut buf)?;
    if path == Path::new("-") {
        std::io::stdout().lock().write_all(&buf)?;
        return Ok(());
    }
    file::write_atomic(path, &buf)?;
    Ok(())
}

/// `-v`: the wall time of each phase so far, one line each, and since whyslow started.
fn print_phases() {
    let text = whyslow_render::text::phases(&phases::all(), crate::STARTED.elapsed());
    eprint!("{text}");
}

/// Tells the user (and scripts waiting for it) that counting has begun on attached processes.
/// Says on stderr that an attached run started (as strace and perf say they attached): "whyslow:
/// counting calls of pid 12 (Ctrl-C to stop)".
fn announce(doing: &str, pids: &[u32]) {
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    eprintln!("whyslow: {doing} pid {} (Ctrl-C to stop)", list.join(","));
}

/// The load options from the command line (None without --load).
fn load_options(l: &LoadArgs) -> Result<Option<LoadOptions>> {
    let Some(cmd) = &l.load else { return Ok(None) };
    let command = split_command(cmd).map_err(|e| anyhow!("--load: {e}"))?;
    let seconds = |what: &str, s: f64| seconds(what, s, true);
    let ready = match (l.ready_port, l.ready_delay) {
        (Some(0), _) => bail!("--ready-port must be a port number (1-65535)"),
        (Some(p), _) => Ready::Port(p),
        (None, Some(d)) => Ready::Delay(seconds("--ready-delay", d)?),
        (None, None) => {
            bail!("--load needs --ready-port PORT or --ready-delay SECONDS to know when the server is ready")
        }
    };
    let ready_timeout = seconds("--ready-timeout", l.ready_timeout)?;
    Ok(Some(LoadOptions { command, ready, ready_timeout }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_record::ProbeLoad;

    /// The live line's cost part: hits per second, the probes' time beside the target's CPU time, and
    /// the slowdown it makes (probe time over the rest of the target's CPU time).
    #[test]
    fn the_live_line_says_hits_per_second_and_the_slowdown() {
        let load = |cost_ms: u64, cpu_ms: u64| ProbeLoad {
            hits: 0,
            cost_ns: cost_ms * 1_000_000,
            target_cpu_ns: cpu_ms * 1_000_000,
            stopped: false,
        };
        assert_eq!(
            probe_cost_line(204_100.0, &load(3310, 3920)),
            "204.1k hits/s, probes ~3.31s of the target's 3.92s of CPU (~6.4x slower)"
        );
        assert_eq!(
            probe_cost_line(950.0, &load(12, 1012)),
            "950 hits/s, probes ~12.0ms of the target's 1.01s of CPU (~1% slower)"
        );
        assert_eq!(probe_cost_line(2.5e6, &load(40, 0)), "2.50M hits/s, probes ~40.0ms so far");
        // The estimate can pass the CPU time read (ticks of 10 ms): then the ratio is not said.
        assert_eq!(
            probe_cost_line(27_300.0, &load(80, 70)),
            "27.3k hits/s, probes ~80.0ms of the target's 70.0ms of CPU (nearly all of it: many times slower)"
        );
        let stopped = ProbeLoad { stopped: true, ..load(30, 500) };
        assert_eq!(
            probe_cost_line(0.0, &stopped),
            "stopped at the budget, probes ~30.0ms of the target's 500ms of CPU (~6% slower)"
        );
    }

    /// The rate is over the first second until there is one, then over each second since the last.
    #[test]
    fn the_hit_rate_is_recomputed_about_every_second() {
        let mut line = StatusLine { tty: false, ..StatusLine::new() };
        let ms = Duration::from_millis;
        assert_eq!(line.hit_rate(ms(250), 1000), 4000.0);
        assert_eq!(line.hit_rate(ms(1000), 2000), 2000.0);
        // Kept until a second more has passed.
        assert_eq!(line.hit_rate(ms(1500), 9000), 2000.0);
        assert_eq!(line.hit_rate(ms(2000), 12000), 10000.0);
    }
}
