//! Subcommand bodies: options in, library calls, renderer out.

use crate::shell::split_command;
use crate::SliceArgs;
use crate::{
    CallsArgs, CompareArgs, DiffArgs, DoctorArgs, EventArg, ExportArgs, ExportFormat, FlamegraphArgs,
    LoadArgs, OutputFormat, RecordArgs, ReportArgs, ReportTo, SyscallsArgs, TargetArgs,
};
use anyhow::{anyhow, bail, Context, Result};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;
use whyslow_analyze::diff::Side;
use whyslow_investigate::compare::{CompareOptions, SIDES};
use whyslow_model::syscalls::TraceEvent;
use whyslow_model::{file, sample_types, Killed, Profile, SyscallStat};
use whyslow_record::calls::{default_patterns, hit_cost_ns, Execution, PatternSpec};
use whyslow_record::load::{LoadOptions, LoadOutput, Ready};
use whyslow_record::{
    phases, signals, AllocOptions, CallOptions, Clock, Observer, OffCpuOptions, Progress, RecordOptions,
    SyscallOptions, Target,
};
use whyslow_render as render;

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

/// Shows a live status line on a terminal; nothing otherwise.
struct StatusLine {
    tty: bool,
    /// Symbolizing ahead (see [`StatusLine::prefetching`]): what to read, then the thread reading it.
    prefetch: Option<(Target, bool)>,
    prefetched: Option<std::thread::JoinHandle<whyslow_symbolize::Prefetch>>,
}

impl StatusLine {
    fn new() -> StatusLine {
        StatusLine { tty: std::io::stderr().is_terminal(), prefetch: None, prefetched: None }
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
            eprint!(
                "\r\x1b[2Krecording: {:6.1}s  {} samples  {} lost",
                p.elapsed.as_secs_f64(),
                p.samples,
                p.lost
            );
        }
    }
}

fn end_status_line() {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
}

pub fn record(a: RecordArgs) -> Result<()> {
    let mut report = Report::open(&a.report)?;
    check_writable(&a.output)?;
    let opts = RecordOptions {
        target: target(&a.target)?,
        frequency: a.freq,
        duration: duration(&a.target)?,
        clock: match a.event {
            EventArg::Auto => Clock::Auto,
            EventArg::Cycles => Clock::Cycles,
            EventArg::CpuClock => Clock::CpuClock,
        },
        stack_bytes: a.stack_size,
        kernel: !a.no_kernel,
        cpu: a.cpu || !(a.alloc || a.offcpu),
        alloc: a.alloc.then_some(AllocOptions { period: a.alloc_period }),
        offcpu: a.offcpu.then(|| OffCpuOptions::sampled_at(a.freq, Duration::from_micros(a.min_block_us))),
        ..Default::default()
    };
    if a.alloc_period == 0 {
        bail!("--alloc-period must be at least 1");
    }
    let load = load_options(&a.load)?;
    if load.is_some() {
        if !matches!(opts.target, Target::Launch(_)) {
            bail!("--load needs the server command after `--` (it is started, loaded, then stopped)");
        }
        if opts.duration.is_some() {
            bail!("--load ends the recording when the load command ends: leave out -d");
        }
    }
    signals::install();
    let mut status = StatusLine::new().prefetching(opts.target.clone(), opts.kernel);
    let (raw, load_run) = match &load {
        Some(l) => {
            let run = whyslow_record::load::record_under_load(&opts, l, &mut status);
            end_status_line();
            let run = run?;
            (run.raw, Some((run.load, run.ready_after)))
        }
        None => {
            let raw = whyslow_record::record(&opts, &mut status);
            end_status_line();
            (raw?, None)
        }
    };
    remember_outcome(&raw.meta, a.target.duration);
    if let Some((out, ready_after)) = &load_run {
        show_load(out, *ready_after, raw.meta.exit_code)?;
    }
    if raw.samples.is_empty() {
        let ms = raw.meta.duration_ns as f64 / 1e6;
        match raw.meta.exit_code {
            // A command that failed: its status is the answer (passed through), the missing samples a note.
            Some(code) if code != 0 => {
                eprintln!("whyslow: no samples: the target exited after {ms:.0} ms (exit code {code}) before any sample");
                return Ok(());
            }
            Some(code) => {
                bail!("no samples: the target exited after {ms:.0} ms (exit code {code}) before any sample")
            }
            None => {
                // Say what each source recorded would have shown (a busy target that never allocates
                // is not one that "did not run").
                let unseen: Vec<&str> = [
                    (opts.cpu, "did not run on a CPU"),
                    (opts.offcpu.is_some(), "did not block"),
                    (opts.alloc.is_some(), "called no allocation function"),
                ]
                .into_iter()
                .filter_map(|(on, what)| on.then_some(what))
                .collect();
                bail!("no samples in {ms:.0} ms: the target {}", unseen.join(" and "))
            }
        }
    }
    let prefetch = status.prefetched();
    let profile = phases::time("symbolize", || whyslow_symbolize::symbolize_with(raw, prefetch));
    // The summary comes first: a save that fails (disk full) must not cost the user what was recorded.
    let saved = phases::time("save", || file::save(&profile, &a.output));
    let reported = std::time::Instant::now();
    if !a.quiet {
        let value = value_index(&profile, None)?;
        render::text::report(
            &mut report,
            &profile,
            &render::text::ReportOptions { value, limit: a.limit, threads: false },
        )?;
        writeln!(report)?;
        report.flush()?;
    }
    phases::add("report", reported.elapsed());
    if a.verbose {
        print_phases();
    }
    saved?;
    // The first sample type's total: "1234 samples", or "0.77 s offcpu" for a time.
    let amount = match profile.sample_types.first() {
        Some(t) if t.unit == "nanoseconds" => format!("{:.2} s {}", profile.total(0) as f64 / 1e9, t.name),
        Some(t) if t.unit != "samples" => format!("{} {} {}", profile.total(0), t.unit, t.name),
        _ => format!("{} samples", profile.total(0)),
    };
    eprintln!(
        "whyslow: wrote {} ({amount}, {:.1}s); next: `whyslow report {0}`, `whyslow flamegraph {0}`",
        a.output.display(),
        profile.meta.duration_ns as f64 / 1e9
    );
    Ok(())
}

/// Where a command's report goes: standard output, or the file of `--report`, created before the run
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
                std::fs::File::create(p).with_context(|| format!("--report {}", p.display()))?,
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

/// The sample type asked for; without one, `cpu` when the recording has it, else its first type.
fn value_index(p: &Profile, name: Option<&str>) -> Result<usize> {
    let name = match name {
        Some(n) => n,
        None if p.sample_type(sample_types::CPU).is_some() => sample_types::CPU,
        None => p.sample_types.first().map_or(sample_types::CPU, |t| t.name.as_str()),
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

pub fn report(a: ReportArgs) -> Result<()> {
    let p = sliced(load(&a.file, a.value_type.as_deref())?, &a.slice)?;
    let value = value_index(&p, a.value_type.as_deref())?;
    let mut out = std::io::stdout().lock();
    let neighbors = match (&a.callees, &a.callers) {
        (Some(f), _) => Some((whyslow_analyze::callees(&p, value, f)?, false)),
        (_, Some(f)) => Some((whyslow_analyze::callers(&p, value, f)?, true)),
        _ => None,
    };
    match (neighbors, a.format) {
        (Some((n, callers)), OutputFormat::Text) => {
            let scale = render::units::Scale::of(&p.sample_types[value].unit);
            render::text::neighbors(&mut out, &n, callers, a.limit, scale)?
        }
        (Some((n, _)), OutputFormat::Json) => {
            serde_json::to_writer_pretty(&mut out, &n)?;
            writeln!(out)?;
        }
        (None, OutputFormat::Text) => {
            render::text::report(
                &mut out,
                &p,
                &render::text::ReportOptions { value, limit: a.limit, threads: a.threads },
            )?;
            if !p.syscalls.is_empty() {
                writeln!(out, "\nsyscalls (exact counts):")?;
                render::syscalls::table(&mut out, &p, &whyslow_analyze::syscall_summary(&p, a.threads))?;
            }
        }
        (None, OutputFormat::Json) => render::json::report(&mut out, &p, value)?,
    }
    out.flush()?;
    if let Some(svg) = &a.flamegraph {
        write_flamegraph(&p, value, svg, None, false)?;
    }
    Ok(())
}

pub fn flamegraph(a: FlamegraphArgs) -> Result<()> {
    let p = sliced(load(&a.file, a.value_type.as_deref())?, &a.slice)?;
    let value = value_index(&p, a.value_type.as_deref())?;
    write_flamegraph(&p, value, &a.output, a.title, a.reverse)
}

/// The SVG flame graph of sample type `value` (titled by the type and command unless `title` is given).
fn write_flamegraph(
    p: &Profile,
    value: usize,
    path: &Path,
    title: Option<String>,
    reverse: bool,
) -> Result<()> {
    let title = title
        .unwrap_or_else(|| format!("whyslow {}: {}", p.sample_types[value].name, p.meta.command.join(" ")));
    let opts = render::flamegraph::FlameOptions { title, subtitle: None, reverse };
    write_output(path, |w| Ok(render::flamegraph::svg(w, p, value, &opts)?))?;
    eprintln!("whyslow: wrote {}", path.display());
    Ok(())
}

pub fn export(a: ExportArgs) -> Result<()> {
    let p = sliced(load(&a.file, a.value_type.as_deref())?, &a.slice)?;
    let value = value_index(&p, a.value_type.as_deref())?;
    write_output(&a.output, |w| {
        match a.format {
            ExportFormat::Pprof => render::export::pprof(w, &p)?,
            ExportFormat::Folded => render::export::folded(w, &p, value)?,
            ExportFormat::Speedscope => render::export::speedscope(w, &p, value)?,
            ExportFormat::Callgrind => render::export::callgrind(w, &p, value)?,
        }
        Ok(())
    })?;
    if a.output != Path::new("-") {
        eprintln!("whyslow: wrote {}", a.output.display());
    }
    Ok(())
}

/// What `whyslow syscalls` shows while it runs: traced calls as they come, and the live table.
struct SyscallsView {
    attach: bool,
    t0_ns: u64,
    out: Report,
    tty: bool,
    previous: Vec<SyscallStat>,
    last: Duration,
}

impl Observer for SyscallsView {
    fn started(&mut self, pids: &[u32]) {
        if self.attach {
            announce("syscalls", pids);
        }
    }

    fn trace(&mut self, e: &TraceEvent) {
        let _ = writeln!(self.out, "{}", render::syscalls::trace_line(e, self.t0_ns));
    }

    fn snapshot(&mut self, elapsed: Duration, stats: &[SyscallStat]) {
        let interval: Vec<SyscallStat> = stats
            .iter()
            .map(|s| {
                let key = |o: &&SyscallStat| (o.pid, o.tid, &o.name) == (s.pid, s.tid, &s.name);
                self.previous.iter().find(key).map_or_else(|| s.clone(), |before| s.since(before))
            })
            .filter(|s| s.calls > 0)
            .collect();
        let p = Profile { syscalls: interval, ..Default::default() };
        let out = &mut self.out;
        if self.tty {
            let _ = write!(out, "\x1b[H\x1b[2J");
        }
        let secs = (elapsed - self.last).as_secs_f64();
        let calls: u64 = p.syscalls.iter().map(|s| s.calls).sum();
        let _ = writeln!(
            out,
            "whyslow syscalls: {:.1} s into the run, last {secs:.1} s: {:.0} calls/s",
            elapsed.as_secs_f64(),
            calls as f64 / secs.max(1e-9)
        );
        let _ = render::syscalls::table(out, &p, &whyslow_analyze::syscall_summary(&p, false));
        let _ = writeln!(out);
        let _ = out.flush();
        self.previous = stats.to_vec();
        self.last = elapsed;
    }
}

pub fn syscalls(a: SyscallsArgs) -> Result<()> {
    let output = a.output.clone().or_else(|| a.stacks.then(|| "whyslow.data".into()));
    if let Some(path) = &output {
        check_writable(path)?;
    }
    let interval = a.interval.map(|s| seconds("--interval", s, false)).transpose()?;
    if a.stacks_period == 0 {
        bail!("--stacks-period must be at least 1");
    }
    let opts = RecordOptions {
        target: target(&a.target)?,
        duration: duration(&a.target)?,
        cpu: false,
        syscalls: Some(SyscallOptions {
            trace: a.trace.clone(),
            stacks_period: a.stacks.then_some(a.stacks_period),
        }),
        interval,
        ..Default::default()
    };
    signals::install();
    let out = Report::open(&a.report)?;
    let mut view = SyscallsView {
        attach: !matches!(opts.target, Target::Launch(_)),
        t0_ns: whyslow_record::monotonic_ns(),
        tty: out.is_terminal(),
        out,
        previous: Vec::new(),
        last: Duration::ZERO,
    };
    let raw = whyslow_record::record(&opts, &mut view)?;
    remember_outcome(&raw.meta, a.target.duration);
    let profile = phases::time("symbolize", || whyslow_symbolize::symbolize(raw));
    let reported = std::time::Instant::now();
    let rows = whyslow_analyze::syscall_summary(&profile, a.per_thread);
    let mut out = view.out;
    match a.format {
        OutputFormat::Json => render::syscalls::json(&mut out, &profile, &rows)?,
        OutputFormat::Text => {
            if !a.trace.is_empty() || interval.is_some() {
                writeln!(out)?;
            }
            render::syscalls::table(&mut out, &profile, &rows)?;
            if let Some(value) = profile.sample_type(sample_types::SYSCALLS) {
                let merged = whyslow_analyze::syscall_summary(&profile, false);
                let period = whyslow_record::sampling_period(a.stacks_period);
                render::syscalls::issuing_stacks(&mut out, &profile, value, &merged, 5, 3, period)?;
                if profile.meta.lost_samples > 0 {
                    writeln!(
                        out,
                        "\n{} stack samples lost (the ring buffer was full): use --stacks-period N to sample",
                        profile.meta.lost_samples
                    )?;
                }
            }
        }
    }
    out.flush()?;
    phases::add("report", reported.elapsed());
    if let Some(path) = output {
        phases::time("save", || file::save(&profile, &path))?;
        let hint = if a.stacks {
            format!(", `whyslow flamegraph {} --type syscalls`", path.display())
        } else {
            String::new()
        };
        eprintln!("whyslow: wrote {}; next: `whyslow report {0} --type syscalls`{hint}", path.display());
    }
    if a.verbose {
        print_phases();
    }
    Ok(())
}

/// `-v`: the wall time of each phase so far, one line each, and since whyslow started.
fn print_phases() {
    let all = phases::all();
    let width = all.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    eprintln!("whyslow: time per phase");
    for (name, d) in &all {
        eprintln!("  {name:<width$}  {:8.1} ms", d.as_secs_f64() * 1e3);
    }
    eprintln!(
        "  {:<width$}  {:8.1} ms",
        "since whyslow started",
        crate::STARTED.elapsed().as_secs_f64() * 1e3
    );
}

/// Says when an attached run started (so Ctrl-C has something to stop); silent for launched commands.
struct Attached {
    what: &'static str,
}

impl Observer for Attached {
    fn started(&mut self, pids: &[u32]) {
        announce(self.what, pids);
    }
}

/// Tells the user (and scripts waiting for it) that counting has begun on attached processes.
fn announce(what: &str, pids: &[u32]) {
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    eprintln!("whyslow: counting {what} of pid {} (Ctrl-C to stop)", list.join(","));
}

/// More probes than this need --yes: every call of every probed function traps into the kernel.
const MAX_PROBES_WITHOUT_YES: usize = 500;

/// --callers opens one perf event per function and CPU for each target thread.
const MAX_CALLERS_PROBES: usize = 64;

pub fn calls(a: CallsArgs) -> Result<()> {
    let target = target(&a.target)?;
    let report = Report::open(&a.report)?;
    let patterns: Vec<PatternSpec> = if a.patterns.is_empty() {
        default_patterns()
    } else {
        a.patterns
            .iter()
            .map(|p| PatternSpec { group: p.clone(), pattern: p.clone(), required: true })
            .collect()
    };
    let mut modules = whyslow_record::calls::target_modules(&target)?;
    for lib in &a.lib {
        if !lib.is_file() {
            bail!("--lib {}: no such file", lib.display());
        }
        whyslow_record::calls::add_module(&mut modules, lib.clone());
    }
    let callers_period = a.callers.then_some(a.callers_period);
    let needs = CallOptions { latency: a.latency, callers_period, ..Default::default() }.needs();
    let res = whyslow_record::calls::resolve(&modules, &patterns, |_| needs)?;
    let unmatched: Vec<String> = res.matched.iter().filter(|m| m.1 == 0).map(|m| m.0.clone()).collect();
    if a.list {
        let mut out = std::io::stdout().lock();
        for p in &res.probes {
            let imp = p.implementation.as_ref().map_or(String::new(), |i| format!(" -> {i}"));
            let at = match p.site.moved {
                0 => "entry".to_string(),
                n => format!("entry+{n:#x}"),
            };
            let mut how = match p.site.execution {
                Execution::Emulated => "emulated".to_string(),
                Execution::SingleStepped => "single-stepped".to_string(),
            };
            if let [first, rest @ ..] = &p.site.compensate[..] {
                let more = if rest.is_empty() { String::new() } else { format!(" and {} more", rest.len()) };
                how += &format!("; minus the jump into it at {first:#x}{more}");
            }
            writeln!(
                out,
                "{}{imp}  [{}+{:#x}]  ({})  probe at {at}: {} ({how})",
                p.name,
                p.module.display(),
                p.offset,
                p.group,
                p.site.instruction
            )?;
        }
        for s in &res.skipped {
            writeln!(out, "{s}  [{}]", s.module.display())?;
        }
        return Ok(());
    }
    if res.probes.is_empty() {
        bail!("none of the patterns matched a function of the target");
    }
    if res.probes.len() > MAX_PROBES_WITHOUT_YES && !a.yes {
        let (mut emulated, mut stepped) = (0, 0);
        for p in &res.probes {
            match p.site.execution {
                Execution::Emulated => emulated += 1,
                Execution::SingleStepped => stepped += 1,
            }
        }
        // What a hit costs on this machine (measured), else the assumed costs.
        let measured = whyslow_record::calls::measure_hit_cost();
        let cost = |e: Execution| measured.map_or(hit_cost_ns(e) as f64, |h| h.ns(e, None));
        let avg_ns = res.probes.iter().map(|p| cost(p.site.execution)).sum::<f64>() / res.probes.len() as f64;
        bail!(
            "these patterns match {} functions ({emulated} probed on an emulated instruction at ~{:.2} us per \
             call, {stepped} on a single-stepped one at ~{:.2} us, {} here): a target making 100k such calls per \
             second would spend ~{:.0}% of a CPU in the probes. Narrow the patterns (`--list` shows them) or \
             pass --yes to probe them all",
            res.probes.len(),
            cost(Execution::Emulated) / 1e3,
            cost(Execution::SingleStepped) / 1e3,
            if measured.is_some() { "measured" } else { "assumed" },
            avg_ns * 100_000.0 / 1e9 * 100.0
        );
    }
    if a.callers && res.probes.len() > MAX_CALLERS_PROBES {
        bail!(
            "--callers samples stacks with one event per function and CPU: give patterns matching at most \
             {MAX_CALLERS_PROBES} functions (these match {})",
            res.probes.len()
        );
    }
    if a.callers_period == 0 {
        bail!("--callers-period must be at least 1");
    }
    let opts = RecordOptions {
        duration: duration(&a.target)?,
        cpu: false,
        calls: Some(CallOptions {
            probes: res.probes.clone(),
            modules: modules.clone(),
            patterns,
            latency: a.latency,
            follow_children: a.follow_children,
            callers_period,
        }),
        target,
        ..Default::default()
    };
    signals::install();
    let raw = if matches!(opts.target, Target::Launch(_)) {
        whyslow_record::record(&opts, &mut StatusLine { tty: false, prefetch: None, prefetched: None })?
    } else {
        whyslow_record::record(&opts, &mut Attached { what: "calls" })?
    };
    remember_outcome(&raw.meta, a.target.duration);
    let mut profile = whyslow_symbolize::symbolize(raw);
    profile.meta.notes.extend(res.notes.iter().cloned());
    let rows = whyslow_analyze::call_summary(&profile);
    let mut out = report;
    match a.format {
        OutputFormat::Json => render::calls::json(&mut out, &profile, &rows, &unmatched)?,
        OutputFormat::Text => {
            let how = render::calls::TextOptions {
                matched: if a.patterns.is_empty() { &[] } else { &res.matched },
                follow_children: a.follow_children,
                callers_period: whyslow_record::sampling_period(a.callers_period),
            };
            render::calls::text(&mut out, &profile, &rows, &how)?
        }
    }
    out.flush()?;
    Ok(())
}

pub fn doctor(a: DoctorArgs) -> Result<()> {
    let t = &a.target;
    let report = Report::open(&a.report)?;
    let live = !(t.pids.is_empty() && t.comm.is_none() && t.command.is_empty());
    if live {
        check_writable(&a.output)?;
    }
    let profile = match (&a.file, live) {
        (Some(_), true) => {
            bail!("give either a recording file or a target (-- CMD, -p PID, --comm NAME), not both")
        }
        (Some(f), false) => load(f, None)?,
        (None, _) => {
            if a.stacks_period == 0 {
                bail!("--stacks-period must be at least 1");
            }
            if !(a.budget > 0.0 && a.budget <= 100.0) {
                bail!("--budget is a percentage of the target's CPU time, above 0 and at most 100");
            }
            let target = target(t)?;
            let frequency = a.freq.unwrap_or(match target {
                Target::Launch(_) => whyslow_investigate::Options::default().frequency,
                _ => whyslow_investigate::LIVE_FREQUENCY,
            });
            let opts = whyslow_investigate::Options {
                target,
                duration: duration(t)?,
                frequency,
                stacks_period: a.stacks_period,
                alloc_period: a.stacks_period * 4,
                budget: a.budget / 100.0,
                ..Default::default()
            };
            signals::install();
            let profile = whyslow_investigate::investigate(&opts, &mut StatusLine::new());
            end_status_line();
            let profile = profile?;
            remember_killed(&profile.meta);
            profile
        }
    };
    let recording = a.file.as_ref().unwrap_or(&a.output).display().to_string();
    let d = whyslow_analyze::doctor::diagnose(&profile, &recording);
    let mut out = report;
    match a.format {
        OutputFormat::Text => render::doctor::text(&mut out, &profile, &d)?,
        OutputFormat::Json => render::doctor::json(&mut out, &profile, &d)?,
    }
    out.flush()?;
    if a.file.is_none() {
        // Saved after the findings are shown: a save that fails must not cost the diagnosis.
        file::save(&profile, &a.output)?;
        eprintln!(
            "whyslow: wrote {}; next: `whyslow report {0} --type wall`, `whyslow flamegraph {0}`",
            a.output.display()
        );
    }
    if let Some(fail_on) = &a.fail_on {
        let hits: Vec<&str> = fail_on.matching(&d).iter().map(|f| f.id).collect();
        if !hits.is_empty() {
            eprintln!("whyslow: --fail-on matched: {}", hits.join(", "));
            let _ = EXITED.set(FINDINGS_MATCHED);
        }
    }
    Ok(())
}

/// The status of a doctor run whose `--fail-on` matched a finding.
pub const FINDINGS_MATCHED: i32 = 3;
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

/// The load tool's own output, then what whyslow read from it and how the server ended.
fn show_load(out: &LoadOutput, ready_after: Duration, server_exit: Option<i32>) -> Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(out.stdout.as_bytes())?;
    if !out.stdout.is_empty() && !out.stdout.ends_with('\n') {
        writeln!(o)?;
    }
    o.flush()?;
    eprint!("{}", out.stderr);
    let stats = whyslow_analyze::load::parse_load_output(&out.stdout);
    render::load::summary(&mut o, stats.as_ref(), ready_after, out.elapsed, server_exit)?;
    if out.status != 0 {
        eprintln!("whyslow: warning: the load command exited with status {}", out.status);
    }
    Ok(())
}

pub fn diff(a: DiffArgs) -> Result<()> {
    let vt = a.value_type.as_deref();
    let (before, after) = (sliced(load(&a.before, vt)?, &a.slice)?, sliced(load(&a.after, vt)?, &a.slice)?);
    let bv = value_index(&before, a.value_type.as_deref())?;
    let name = before.sample_types[bv].name.clone();
    let av = value_index(&after, Some(&name)).with_context(|| format!("{}", a.after.display()))?;
    let (b, af) = (Side::new(&before, bv), Side::new(&after, av));
    let d = whyslow_analyze::diff::diff(b, af, a.shares);
    let mut out = std::io::stdout().lock();
    match a.format {
        OutputFormat::Text => render::diff::report(&mut out, &d, a.limit)?,
        OutputFormat::Json => render::diff::json(&mut out, &d, a.limit)?,
    }
    out.flush()?;
    if let Some(path) = &a.output {
        let opts = render::diff::DiffFlameOptions {
            title: format!("whyslow diff ({name}): {} -> {}", a.before.display(), a.after.display()),
            negate: a.negate,
            shares_only: a.shares,
        };
        write_output(path, |w| Ok(render::diff::svg(w, b, af, &opts)?))?;
        eprintln!("whyslow: wrote {}", path.display());
    }
    Ok(())
}

pub fn compare(a: CompareArgs) -> Result<()> {
    if a.runs < 2 {
        bail!("-n must be at least 2 runs per side (5 or more for a useful verdict)");
    }
    if a.freq == 0 {
        bail!("-F must be at least 1 Hz");
    }
    let before = split_command(&a.before).map_err(|e| anyhow!("--before: {e}"))?;
    let after = split_command(&a.after).map_err(|e| anyhow!("--after: {e}"))?;
    let load = load_options(&a.load)?;
    if a.runs < 4 {
        eprintln!("whyslow: note: with fewer than 4 runs per side no difference can reach p < 0.05");
    }
    std::fs::create_dir_all(&a.output).with_context(|| format!("cannot create {}", a.output.display()))?;
    signals::install();
    let opts =
        CompareOptions { commands: [before.clone(), after.clone()], runs: a.runs, frequency: a.freq, load };
    let c = whyslow_investigate::compare::compare(
        &opts,
        &mut StatusLine { tty: false, prefetch: None, prefetched: None },
        |r| {
            let rps =
                r.load.as_ref().map_or(String::new(), |l| format!(", {:.0} requests/s", l.requests_per_sec));
            let (n, side) = (a.runs, SIDES[r.side]);
            eprintln!(
                "whyslow: run {}/{n} {side:<6}: cpu {:.3} s, wall {:.3} s{rps}",
                r.number, r.cpu_s, r.wall_s
            );
        },
    )?;
    for r in &c.runs {
        let name = format!("{}-{}", SIDES[r.side], r.number);
        if let Some(out) = &r.load_output {
            let path = a.output.join(format!("{name}.load.txt"));
            std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
        }
        file::save(&r.profile, &a.output.join(format!("{name}.data")))?;
    }
    for (side, p) in c.merged.iter().enumerate() {
        file::save(p, &a.output.join(format!("{}.data", SIDES[side])))?;
    }
    for n in &c.notes {
        eprintln!("whyslow: note: {n}");
    }
    let sides_diff = c.sides();
    let d = sides_diff.map(|(b, af)| whyslow_analyze::diff::diff(b, af, false));
    let svg_path = a.output.join("diff.svg");
    let mut flamegraph = None;
    if let Some((b, af)) = sides_diff {
        let opts = render::diff::DiffFlameOptions {
            title: format!("whyslow compare: {} -> {}", a.before, a.after),
            ..Default::default()
        };
        match write_output(&svg_path, |w| Ok(render::diff::svg(w, b, af, &opts)?)) {
            Ok(()) => flamegraph = Some(svg_path.display().to_string()),
            Err(e) => eprintln!("whyslow: note: no diff flame graph: {e:#}"),
        }
    }
    let dir = a.output.display().to_string();
    let view = render::compare::CompareView {
        before: &before,
        after: &after,
        load: opts.load.as_ref().map(|l| l.command.as_slice()),
        runs: a.runs,
        measures: &c.measures,
        primary: c.primary,
        diff: d.as_ref(),
        flamegraph: flamegraph.as_deref(),
        output_dir: &dir,
        limit: a.limit,
    };
    let mut out = std::io::stdout().lock();
    match a.format {
        OutputFormat::Text => render::compare::report(&mut out, &view)?,
        OutputFormat::Json => render::compare::json(&mut out, &view)?,
    }
    out.flush()?;
    Ok(())
}

/// `10GiB`, `500MiB`, `1000000` (bytes); KB/MB/GB are powers of 1000.
fn size_bytes(what: &str, s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => bail!("{what} '{s}' is not a size like 500MiB or 1GiB"),
    };
    n.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&b| b > 0)
        .ok_or_else(|| anyhow!("{what} '{s}' is not a size like 500MiB or 1GiB"))
}

pub fn serve(a: crate::ServeArgs) -> Result<()> {
    let retention = whyslow_serve::timespec::duration_ns(&a.retention)
        .filter(|&n| n > 0)
        .ok_or_else(|| anyhow!("--retention '{}' is not a duration like 30m, 12h or 7d", a.retention))?;
    let mut targets = match &a.config {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            whyslow_serve::parse_config(&text).with_context(|| format!("{}", path.display()))?
        }
        None => Vec::new(),
    };
    if a.all {
        if targets.iter().any(|t| t.name.as_deref() == Some(whyslow_serve::ALL_TARGET)) {
            bail!(
                "--all defines the target '{}': the config file has one of that name",
                whyslow_serve::ALL_TARGET
            );
        }
        targets.push(whyslow_serve::all_target());
    }
    let token = match &a.token_file {
        Some(path) => {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path)
                .with_context(|| format!("cannot read {}", path.display()))?
                .permissions()
                .mode();
            // As ssh does with private keys: a secret others can read is no secret.
            if mode & 0o077 != 0 {
                bail!(
                    "{} is readable or writable by others (mode {:o}): chmod 600 it",
                    path.display(),
                    mode & 0o777
                );
            }
            let t =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            let t = t.trim().to_string();
            if t.len() < 16 {
                bail!("the token in {} is shorter than 16 characters", path.display());
            }
            Some(t)
        }
        None => None,
    };
    if a.no_doctor && !a.webhooks.is_empty() {
        bail!("--webhook sends the doctor's events: it cannot go with --no-doctor");
    }
    if let Some(w) = a.webhooks.iter().find(|w| !(w.starts_with("http://") || w.starts_with("https://"))) {
        bail!("--webhook '{w}' is not an http:// or https:// URL");
    }
    let opts = whyslow_serve::ServeOptions {
        listen: a.listen,
        output_root: a.output_root.unwrap_or_else(|| a.data_dir.join("output")),
        data_dir: a.data_dir,
        token,
        retention: Duration::from_nanos(retention),
        max_disk: size_bytes("--max-disk", &a.max_disk)?,
        targets,
        max_body: 1 << 20,
        push: push_options(&a.push)?,
        push_labels: labels(&a.push.labels)?,
        push_per_process: a.push.per_process,
        allow_hosts: a.allow_hosts,
        doctor: !a.no_doctor,
        webhooks: a.webhooks,
    };
    Ok(whyslow_serve::run(opts)?)
}

fn labels(list: &[String]) -> Result<Vec<(String, String)>> {
    list.iter()
        .map(|l| match l.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("--push-label '{l}' is not NAME=VALUE"),
        })
        .collect()
}

fn push_options(a: &crate::PushArgs) -> Result<Vec<whyslow_serve::PushOptions>> {
    let secret = |path: &Option<std::path::PathBuf>| -> Result<Option<String>> {
        path.as_ref()
            .map(|p| {
                std::fs::read_to_string(p)
                    .map(|s| s.trim().to_string())
                    .with_context(|| format!("cannot read {}", p.display()))
            })
            .transpose()
    };
    let auth = whyslow_push::Auth {
        tenant: a.tenant.clone(),
        basic: secret(&a.basic_auth_file)?,
        bearer: secret(&a.bearer_file)?,
    };
    a.to.iter()
        .map(|t| {
            let backend = whyslow_push::Backend::parse(t).map_err(|e| anyhow!("--push: {e}"))?;
            Ok(whyslow_serve::PushOptions { backend, auth: auth.clone() })
        })
        .collect()
}

pub fn push(a: crate::PushFileArgs) -> Result<()> {
    let targets = push_options(&a.push)?;
    if targets.is_empty() {
        bail!("push needs a backend: --push pyroscope=URL, pyroscope-ingest=URL, otlp=URL or otlp-grpc=URL");
    }
    let p = load(&a.file, None)?;
    let program = p.meta.command.first().map(|c| whyslow_model::basename(c).to_string()).unwrap_or_default();
    let labels = whyslow_push::Labels {
        service: a.service_name.clone().unwrap_or_else(|| {
            if program.is_empty() {
                "whyslow".into()
            } else {
                program.clone()
            }
        }),
        process: program,
        hostname: p.meta.hostname.clone(),
        pid: a.push.per_process.then(|| p.meta.target_pids.first().copied()).flatten(),
        extra: labels(&a.push.labels)?,
    };
    for t in &targets {
        let sent =
            whyslow_push::Sender::new(&t.backend, &t.auth).send(&labels, &p).map_err(|e| anyhow!("{e}"))?;
        eprintln!("whyslow: pushed {} ({} bytes) to {}", a.file.display(), sent.bytes, t.backend.name());
        if sent.rejected_profiles > 0 || !sent.message.is_empty() {
            eprintln!(
                "whyslow: {} rejected {} profiles: {}",
                t.backend.name(),
                sent.rejected_profiles,
                sent.message
            );
        }
    }
    Ok(())
}
