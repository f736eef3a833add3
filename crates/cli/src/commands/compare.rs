//! `whyslow compare`: two commands run interleaved, measured and recorded, and whether (and where) they
//! differ.

use super::flags::{deprecated, load_options, LoadArgs, OutputFormat, DEFAULT_LIMIT};
use super::output::write_output;
use super::status::StatusLine;
use crate::shell::split_command;
use anyhow::{anyhow, Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use whyslow_investigate::compare::{CompareOptions, SIDES};
use whyslow_model::file;
use whyslow_record::signals;
use whyslow_render as render;

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

impl CompareArgs {
    /// Old spellings still given: each says it is deprecated and sets its new one.
    pub fn upgrade(&mut self) {
        if let Some(p) = self.old_output.take() {
            deprecated("compare -o", "--output-dir");
            self.output_dir = p;
        }
    }
}

pub fn compare(a: CompareArgs) -> Result<()> {
    let before = split_command(&a.before).map_err(|e| anyhow!("--before: {e}"))?;
    let after = split_command(&a.after).map_err(|e| anyhow!("--after: {e}"))?;
    let load = load_options(&a.load)?;
    let opts =
        CompareOptions { commands: [before.clone(), after.clone()], runs: a.runs, frequency: a.freq, load };
    opts.check()?;
    if a.runs < 4 {
        eprintln!("whyslow: note: with fewer than 4 runs per side no difference can reach p < 0.05");
    }
    std::fs::create_dir_all(&a.output_dir)
        .with_context(|| format!("cannot create {}", a.output_dir.display()))?;
    signals::install();
    let c = whyslow_investigate::compare::compare(&opts, &mut StatusLine::silent(), |r| {
        let rps = r.load.as_ref().map(|l| l.requests_per_sec);
        let line = render::compare::run_line(r.number, a.runs, SIDES[r.side], r.cpu_s, r.wall_s, rps);
        eprintln!("whyslow: {line}");
    })?;
    for r in &c.runs {
        let name = format!("{}-{}", SIDES[r.side], r.number);
        if let Some(out) = &r.load_output {
            let path = a.output_dir.join(format!("{name}.load.txt"));
            std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
        }
        file::save(&r.profile, &a.output_dir.join(format!("{name}.data")))?;
    }
    for (side, p) in c.merged.iter().enumerate() {
        file::save(p, &a.output_dir.join(format!("{}.data", SIDES[side])))?;
    }
    for n in &c.notes {
        eprintln!("whyslow: note: {n}");
    }
    let sides_diff = c.sides();
    let d = sides_diff.map(|(b, af)| whyslow_analyze::diff::diff(b, af, false));
    let svg_path = a.output_dir.join("diff.svg");
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
    let dir = a.output_dir.display().to_string();
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
