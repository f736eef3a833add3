//! Subcommand bodies: options in, library calls, renderer out.

use crate::{
    EventArg, ExportArgs, ExportFormat, FlamegraphArgs, OutputFormat, RecordArgs, ReportArgs, TargetArgs,
};
use anyhow::{bail, Context, Result};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;
use whyslow_model::{file, Profile};
use whyslow_record::{signals, Clock, RecordOptions, Target};
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
    match t.duration {
        Some(d) if !(d > 0.0 && d.is_finite()) => bail!("duration must be a positive number of seconds"),
        Some(d) => Ok(Some(Duration::from_secs_f64(d))),
        None => Ok(None),
    }
}

/// Shows a live status line on a terminal; nothing otherwise.
fn status_line() -> impl FnMut(&whyslow_record::Progress) {
    let tty = std::io::stderr().is_terminal();
    move |p| {
        if tty {
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
        ..Default::default()
    };
    signals::install();
    let raw = whyslow_record::record(&opts, status_line());
    end_status_line();
    let raw = raw?;
    if raw.samples.is_empty() {
        let ms = raw.meta.duration_ns as f64 / 1e6;
        match raw.meta.exit_code {
            Some(code) => {
                bail!("no samples: the target exited after {ms:.0} ms (exit code {code}) before any sample")
            }
            None => bail!("no samples in {ms:.0} ms: the target did not run on a CPU"),
        }
    }
    let stopped = std::time::Instant::now();
    let profile = whyslow_symbolize::symbolize(raw);
    file::save(&profile, &a.output)?;
    if a.verbose {
        eprintln!("whyslow: post-processing {:.3} s (symbolize + save)", stopped.elapsed().as_secs_f64());
    }
    if !a.quiet {
        let value = value_index(&profile, "cpu")?;
        let mut out = std::io::stdout().lock();
        render::text::report(
            &mut out,
            &profile,
            &render::text::ReportOptions { value, limit: a.limit, threads: false },
        )?;
        writeln!(out)?;
    }
    eprintln!(
        "whyslow: wrote {} ({} samples, {:.1}s); next: `whyslow report {0}`, `whyslow flamegraph {0}`",
        a.output.display(),
        profile.total(0),
        profile.meta.duration_ns as f64 / 1e9
    );
    Ok(())
}

fn load(path: &Path) -> Result<Profile> {
    Ok(file::load(path)?)
}

fn value_index(p: &Profile, name: &str) -> Result<usize> {
    p.sample_type(name).with_context(|| {
        let have: Vec<&str> = p.sample_types.iter().map(|t| t.name.as_str()).collect();
        format!("this recording has no '{name}' samples (it has: {})", have.join(", "))
    })
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
    let p = load(&a.file)?;
    let value = value_index(&p, &a.value_type)?;
    let mut out = std::io::stdout().lock();
    let neighbors = match (&a.callees, &a.callers) {
        (Some(f), _) => Some((whyslow_analyze::callees(&p, value, f)?, false)),
        (_, Some(f)) => Some((whyslow_analyze::callers(&p, value, f)?, true)),
        _ => None,
    };
    match (neighbors, a.format) {
        (Some((n, callers)), OutputFormat::Text) => render::text::neighbors(&mut out, &n, callers)?,
        (Some((n, _)), OutputFormat::Json) => {
            serde_json::to_writer_pretty(&mut out, &n)?;
            writeln!(out)?;
        }
        (None, OutputFormat::Text) => render::text::report(
            &mut out,
            &p,
            &render::text::ReportOptions { value, limit: a.limit, threads: a.threads },
        )?,
        (None, OutputFormat::Json) => render::json::report(&mut out, &p, value)?,
    }
    out.flush()?;
    Ok(())
}

pub fn flamegraph(a: FlamegraphArgs) -> Result<()> {
    let p = load(&a.file)?;
    let value = value_index(&p, &a.value_type)?;
    let title = a.title.unwrap_or_else(|| format!("whyslow {}: {}", a.value_type, p.meta.command.join(" ")));
    let opts = render::flamegraph::FlameOptions { title, subtitle: None, reverse: a.reverse };
    write_output(&a.output, |w| Ok(render::flamegraph::svg(w, &p, value, &opts)?))?;
    eprintln!("whyslow: wrote {}", a.output.display());
    Ok(())
}

pub fn export(a: ExportArgs) -> Result<()> {
    let p = load(&a.file)?;
    let value = value_index(&p, &a.value_type)?;
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
