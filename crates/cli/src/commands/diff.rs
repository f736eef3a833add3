//! `whyslow diff`: per-function deltas of two recordings and a differential flame graph.

use super::flags::{deprecated, sliced, OutputFormat, SliceArgs, DEFAULT_LIMIT};
use super::output::write_output;
use super::recording::{load, value_index};
use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use whyslow_analyze::diff::Side;
use whyslow_render as render;

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

impl DiffArgs {
    /// Old spellings still given: each says it is deprecated and sets its new one.
    pub fn upgrade(&mut self) {
        if let Some(p) = self.old_output.take() {
            deprecated("diff -o", "--flamegraph");
            self.flamegraph.get_or_insert(p);
        }
    }
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
    if let Some(path) = &a.flamegraph {
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
