//! `whyslow syscalls`: every syscall of a target counted exactly, some traced call by call, their
//! issuing stacks sampled; a live table with --interval.

use super::flags::{duration, seconds, target, OutputFormat, ReportTo, TargetArgs, DEFAULT_LIMIT};
use super::outcome::{ran, Outcome};
use super::output::{check_writable, Report};
use super::status::{announce, print_phases, wrote};
use anyhow::Result;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use whyslow_model::syscalls::TraceEvent;
use whyslow_model::{file, sample_types, SyscallStat};
use whyslow_record::{phases, signals, Observer, RecordOptions, SyscallOptions, Target};
use whyslow_render as render;

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

/// What `whyslow syscalls` shows while it runs: traced calls as they come, and the live table.
struct SyscallsView {
    attach: bool,
    t0_ns: u64,
    out: Report,
    tty: bool,
    previous: Vec<SyscallStat>,
    last: Duration,
    limit: usize,
}

impl Observer for SyscallsView {
    fn started(&mut self, pids: &[u32]) {
        if self.attach {
            announce("counting syscalls of", pids);
        }
    }

    fn trace(&mut self, e: &TraceEvent) {
        let _ = writeln!(self.out, "{}", render::syscalls::trace_line(e, self.t0_ns));
    }

    fn snapshot(&mut self, elapsed: Duration, stats: &[SyscallStat]) {
        let interval = whyslow_analyze::syscalls_since(&self.previous, stats);
        let out = &mut self.out;
        if self.tty {
            let _ = write!(out, "\x1b[H\x1b[2J");
        }
        let secs = (elapsed - self.last).as_secs_f64();
        let _ = render::syscalls::interval_table(out, elapsed.as_secs_f64(), secs, interval, self.limit);
        let _ = out.flush();
        self.previous = stats.to_vec();
        self.last = elapsed;
    }
}

pub fn syscalls(a: SyscallsArgs) -> Result<Outcome> {
    ran(|outcome| run(a, outcome))
}

/// The command, which says in `outcome` how its target ended.
fn run(a: SyscallsArgs, outcome: &mut Outcome) -> Result<()> {
    let output = a.output.clone().or_else(|| a.stacks.then(|| "whyslow.data".into()));
    if let Some(path) = &output {
        check_writable(path)?;
    }
    let interval = a.interval.map(|s| seconds("--interval", s, false)).transpose()?;
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
        limit: a.limit,
    };
    let raw = whyslow_record::record(&opts, &mut view)?;
    *outcome = Outcome::of(&raw.meta, a.target.duration);
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
            render::syscalls::table(&mut out, &profile, &rows, a.limit)?;
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
        wrote(&format!("wrote {}; next: `whyslow report {0} --type syscalls`{hint}", path.display()));
    }
    if a.verbose {
        print_phases();
    }
    Ok(())
}
