//! `whyslow doctor`: investigate a target (or read a recording) and explain what is slow and why, with
//! the evidence and the fix; --fail-on makes a finding fail CI.

use super::flags::{duration, target, OutputFormat, ReportTo, TargetArgs, DEFAULT_LIMIT};
use super::outcome::{ran, Outcome};
use super::output::{check_writable, Report};
use super::recording::load;
use super::status::{end_status_line, wrote, StatusLine};
use anyhow::{bail, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use whyslow_model::file;
use whyslow_record::{signals, Target};
use whyslow_render as render;

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
    /// Everything in the text: each finding whole, why rules were not checked, how the probes spent
    /// their budget (JSON always has it all).
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

pub fn doctor(a: DoctorArgs) -> Result<Outcome> {
    ran(|outcome| run(a, outcome))
}

/// The command, which says in `outcome` how its target ended and whether a finding failed it.
fn run(a: DoctorArgs, outcome: &mut Outcome) -> Result<()> {
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
                alloc_period: a.stacks_period.saturating_mul(4),
                budget: a.budget / 100.0,
                ..Default::default()
            };
            signals::install();
            let attached = !matches!(opts.target, Target::Launch(_));
            let mut line = StatusLine::new().about("diagnosing", "diagnosing", attached);
            let profile = whyslow_investigate::investigate(&opts, &mut line);
            end_status_line();
            let profile = profile?;
            *outcome = Outcome::killed(&profile.meta);
            profile
        }
    };
    let recording = a.file.as_ref().unwrap_or(&a.output).display().to_string();
    let d = whyslow_analyze::doctor::diagnose(&profile, &recording);
    let mut out = report;
    match a.format {
        OutputFormat::Text => {
            let o = render::doctor::TextOptions { limit: a.limit, width: out.width(), verbose: a.verbose };
            render::doctor::text(&mut out, &profile, &d, &o)?
        }
        OutputFormat::Json => render::doctor::json(&mut out, &profile, &d)?,
    }
    out.flush()?;
    if a.file.is_none() {
        // Saved after the findings are shown: a save that fails must not cost the diagnosis.
        file::save(&profile, &a.output)?;
        wrote(&format!(
            "wrote {}; next: `whyslow report {0} --type wall`, `whyslow flamegraph {0}`",
            a.output.display()
        ));
    }
    if let Some(fail_on) = &a.fail_on {
        let hits: Vec<&str> = fail_on.matching(&d).iter().map(|f| f.id).collect();
        if !hits.is_empty() {
            eprintln!("whyslow: --fail-on matched: {}", hits.join(", "));
            // A killed target's status comes first (128 + the signal).
            if let Outcome::Ok = outcome {
                *outcome = Outcome::FindingsMatched;
            }
        }
    }
    Ok(())
}
