//! `whyslow flamegraph`: an interactive SVG flame graph of a recording.

use super::flags::{sliced, SliceArgs};
use super::output::write_output;
use super::recording::{load, value_index};
use anyhow::Result;
use clap::Args;
use std::path::{Path, PathBuf};
use whyslow_model::Profile;
use whyslow_render as render;

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

pub fn flamegraph(a: FlamegraphArgs) -> Result<()> {
    let p = sliced(load(&a.file, a.value_type.as_deref())?, &a.slice)?;
    let value = value_index(&p, a.value_type.as_deref())?;
    write_flamegraph(&p, value, &a.output, a.title, a.reverse)
}

/// The SVG flame graph of sample type `value` (titled by the type and command unless `title` is given).
pub(super) fn write_flamegraph(
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
