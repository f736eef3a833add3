//! `whyslow calls`: calls of library and program functions counted exactly with uprobes, within a
//! probe budget, with their latency and call sites on request.

use super::flags::{
    deprecated, duration, parse_budget, probe_budget, target, Budget, OutputFormat, ReportTo, TargetArgs,
    DEFAULT_LIMIT,
};
use super::outcome::{ran, Outcome};
use super::output::Report;
use super::status::{end_status_line, StatusLine};
use anyhow::{bail, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use whyslow_record::calls::{default_patterns, PatternSpec, ProbeCost};
use whyslow_record::{signals, CallOptions, RecordOptions, Target};
use whyslow_render as render;

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

impl CallsArgs {
    pub fn upgrade(&mut self) {
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

pub fn calls(a: CallsArgs) -> Result<Outcome> {
    ran(|outcome| run(a, outcome))
}

/// The command, which says in `outcome` how its target ended.
fn run(a: CallsArgs, outcome: &mut Outcome) -> Result<()> {
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
    let callers_period = a.stacks.then_some(a.stacks_period);
    let needs = CallOptions { latency: a.latency, callers_period, ..Default::default() }.needs();
    let res = whyslow_record::calls::resolve(&modules, &patterns, |_| needs)?;
    let unmatched: Vec<String> = res.matched.iter().filter(|m| m.1 == 0).map(|m| m.0.clone()).collect();
    if a.list {
        let mut out = std::io::stdout().lock();
        for p in &res.probes {
            writeln!(out, "{p}")?;
        }
        for s in &res.skipped {
            writeln!(out, "{s}  [{}]", s.module.display())?;
        }
        return Ok(());
    }
    if res.probes.is_empty() {
        bail!("none of the patterns matched a function of the target");
    }
    if res.probes.len() > whyslow_record::calls::MAX_PROBES_UNASKED && !a.yes {
        bail!(
            "{}. Narrow the patterns (`--list` shows them) or pass --yes to probe them all",
            ProbeCost::of(&res.probes)
        );
    }
    let launched = matches!(target, Target::Launch(_));
    // A running process is probed within a budget unless told otherwise; a launched command's counts
    // stay exact unless a budget is given.
    let budget = probe_budget(a.budget, launched);
    let run_duration = duration(&a.target)?;
    let opts = RecordOptions {
        duration: run_duration,
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
        probe_budget: budget,
        // When the budget stops the probes of a launched command, it runs on to its end (below).
        leave_running: launched && budget.is_some(),
        ..Default::default()
    };
    signals::install();
    let started = std::time::Instant::now();
    let mut line = StatusLine::new().about("calls", "counting calls of", !launched);
    let raw = whyslow_record::record(&opts, &mut line);
    end_status_line();
    let mut raw = raw?;
    if let (true, Some(&pid), None) = (opts.leave_running, raw.meta.target_pids.first(), raw.meta.exit_code) {
        if raw.meta.calls_duration_ns > 0 && !signals::stop_requested() {
            eprintln!(
                "whyslow: the probes stopped at the budget after {}; the command runs on to its end (Ctrl-C \
                 stops it)",
                render::units::duration(raw.meta.calls_duration_ns as i64)
            );
        }
        let deadline = run_duration.map(|d| started + d);
        let waited = if signals::stop_requested() {
            Err(whyslow_record::stop_launched(pid))
        } else {
            whyslow_record::target::wait_launched(pid, deadline)
        };
        match waited {
            Ok(status) => {
                raw.meta.exit_code = Some(whyslow_record::target::exit_code_of(status));
                raw.meta.killed.extend(whyslow_model::Killed::from_wait_status(pid, status));
            }
            Err(code) => raw.meta.exit_code = Some(code),
        }
        raw.meta.duration_ns = started.elapsed().as_nanos() as u64;
    }
    *outcome = Outcome::of(&raw.meta, a.target.duration);
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
                callers_period: whyslow_record::sampling_period(a.stacks_period),
                limit: a.limit,
            };
            render::calls::text(&mut out, &profile, &rows, &how)?
        }
    }
    out.flush()?;
    Ok(())
}
