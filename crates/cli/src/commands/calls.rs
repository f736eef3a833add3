use super::*;
use crate::{CallsArgs, OutputFormat};
use whyslow_record::calls::{default_patterns, PatternSpec, ProbeCost};
use whyslow_record::{CallOptions, RecordOptions};
use whyslow_render as render;

pub fn calls(a: CallsArgs) -> Result<()> {
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
    let opts = RecordOptions {
        duration: duration(&a.target)?,
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
        ..Default::default()
    };
    signals::install();
    let raw = if matches!(opts.target, Target::Launch(_)) {
        whyslow_record::record(&opts, &mut StatusLine { tty: false, ..StatusLine::new() })?
    } else {
        whyslow_record::record(&opts, &mut Attached { what: "calls" })?
    };
    remember_outcome(&raw.meta, a.target.duration);
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
