use super::*;
use crate::{DoctorArgs, OutputFormat};
use whyslow_model::file;
use whyslow_render as render;

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
            remember_killed(&profile.meta);
            profile
        }
    };
    let recording = a.file.as_ref().unwrap_or(&a.output).display().to_string();
    let d = whyslow_analyze::doctor::diagnose(&profile, &recording);
    let mut out = report;
    match a.format {
        OutputFormat::Text => render::doctor::text(&mut out, &profile, &d, a.limit)?,
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
