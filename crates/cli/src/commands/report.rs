//! `whyslow report`: where the time of a recording went, as tables (top functions, threads, callers,
//! callees, source lines) or JSON.

use super::flags::{sliced, OutputFormat, SliceArgs, DEFAULT_LIMIT};
use super::flamegraph::write_flamegraph;
use super::recording::{load, value_index};
use anyhow::Result;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use whyslow_model::Profile;
use whyslow_render as render;

#[derive(Args)]
pub struct ReportArgs {
    /// Recording file, or a profile to import: pprof (file or http(s):// URL, e.g. Go's
    /// /debug/pprof/profile?seconds=10), folded stacks, `perf script` output (told apart by content).
    #[arg(default_value = "whyslow.data")]
    pub file: PathBuf,
    /// Split by thread.
    #[arg(long)]
    pub threads: bool,
    /// Show what this function calls, with shares: a name, a part of one, or a regular expression
    /// (the largest total wins; the others matched are listed).
    #[arg(long, value_name = "FUNCTION", conflicts_with = "callers")]
    pub callees: Option<String>,
    /// Show who calls this function, with shares (found as for --callees).
    #[arg(long, value_name = "FUNCTION")]
    pub callers: Option<String>,
    /// Show the source lines of the functions matching this regular expression with the samples of
    /// each line, self and total (as pprof -list). The source is read from the path in the line table,
    /// else from debuginfod (DEBUGINFOD_URLS).
    #[arg(long, value_name = "FUNCTION", conflicts_with_all = ["callers", "callees"])]
    pub source: Option<String>,
    /// Sample type to weigh by (e.g. cpu, cpu-ns, syscalls; default: cpu, else the recording's first).
    #[arg(long = "type")]
    pub value_type: Option<String>,
    /// Rows of each table.
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Also write the flame graph (SVG) of the same sample type here: one read of a large file for both.
    #[arg(long, value_name = "SVG")]
    pub flamegraph: Option<PathBuf>,
    #[command(flatten)]
    pub slice: SliceArgs,
}

pub fn report(a: ReportArgs) -> Result<()> {
    let p = sliced(load(&a.file, a.value_type.as_deref())?, &a.slice)?;
    let value = value_index(&p, a.value_type.as_deref())?;
    let mut out = std::io::stdout().lock();
    if let Some(query) = &a.source {
        return source(&mut out, &p, value, query, a.format);
    }
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
                writeln!(out, "\n{}:", render::syscalls::title(&p.meta))?;
                render::syscalls::table(
                    &mut out,
                    &p,
                    &whyslow_analyze::syscall_summary(&p, a.threads),
                    a.limit,
                )?;
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

/// `--source`: the matched functions' lines with their samples, the text read once per file.
fn source(out: &mut impl Write, p: &Profile, value: usize, query: &str, format: OutputFormat) -> Result<()> {
    use render::source::{Listing, Source};
    use std::collections::HashMap;
    use whyslow_analyze::source::FunctionLines;
    let found = whyslow_analyze::source::source_lines(p, value, query)?;
    let debuginfod = whyslow_debuginfod::Client::from_env();
    let key = |f: &FunctionLines| (f.file.clone(), f.build_id.clone());
    let mut texts: HashMap<(String, String), Source> = HashMap::new();
    for f in &found {
        texts.entry(key(f)).or_insert_with(|| read_source(&f.file, &f.build_id, debuginfod.as_ref()));
    }
    let listings: Vec<Listing> =
        found.iter().map(|f| Listing { function: f, source: &texts[&key(f)] }).collect();
    let t = &p.sample_types[value];
    let total = p.total(value);
    match format {
        OutputFormat::Text => render::source::text(out, &listings, total, render::units::Scale::of(&t.unit))?,
        OutputFormat::Json => render::source::json(out, &listings, &t.name, &t.unit, total)?,
    }
    out.flush()?;
    Ok(())
}

/// A source file's lines: from the path its line table names, else from debuginfod by the module's
/// build id; or why neither had it.
fn read_source(
    file: &str,
    build_id: &str,
    debuginfod: Option<&whyslow_debuginfod::Client>,
) -> render::source::Source {
    use render::source::Source;
    if file.is_empty() {
        return Source::Missing("the function has no line table".into());
    }
    let lines = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).lines().map(str::to_string).collect();
    let disk = match std::fs::read(file) {
        Ok(bytes) => return Source::Text { lines: lines(bytes), from: "disk".into() },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!("{file} is not on this machine"),
        Err(e) => format!("cannot read {file}: {e}"),
    };
    let Some(client) = debuginfod else {
        return Source::Missing(format!("{disk}, and no debuginfod server is set (DEBUGINFOD_URLS)"));
    };
    if build_id.is_empty() {
        return Source::Missing(format!("{disk}, and its module has no build id to ask debuginfod by"));
    }
    match client.fetch_source(build_id, file).map(std::fs::read) {
        Ok(Ok(bytes)) => {
            let from = format!("debuginfod {}", client.options().urls.join(" "));
            Source::Text { lines: lines(bytes), from }
        }
        Ok(Err(e)) => Source::Missing(format!("{disk}; debuginfod's copy cannot be read: {e}")),
        Err(e) => Source::Missing(format!("{disk}; {e}")),
    }
}
