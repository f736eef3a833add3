//! `whyslow export`: a recording converted to pprof, folded stacks, speedscope or callgrind.

use super::flags::{sliced, SliceArgs};
use super::output::write_output;
use super::recording::{load, value_index};
use anyhow::Result;
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use whyslow_render as render;

#[derive(Clone, Copy, ValueEnum)]
pub enum ExportFormat {
    /// pprof's profile.proto, gzipped (every sample type).
    Pprof,
    /// Folded stacks, one `a;b;c N` line per stack (Brendan Gregg's flamegraph.pl, inferno).
    Folded,
    /// speedscope's JSON file format.
    Speedscope,
    /// callgrind's format (kcachegrind, callgrind_annotate).
    Callgrind,
}

#[derive(Args)]
pub struct ExportArgs {
    /// Recording file, or a profile to import: pprof (file or http(s):// URL, e.g. Go's
    /// /debug/pprof/profile?seconds=10), folded stacks, `perf script` output (told apart by content).
    #[arg(default_value = "whyslow.data")]
    pub file: PathBuf,
    /// File format to write.
    #[arg(short, long, value_enum)]
    pub format: ExportFormat,
    /// Output file ("-" for standard output).
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    /// Sample type to weigh by (pprof carries all types).
    #[arg(long = "type")]
    pub value_type: Option<String>,
    #[command(flatten)]
    pub slice: SliceArgs,
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
