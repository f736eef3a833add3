use super::*;
use crate::CompareArgs;
use crate::OutputFormat;

use whyslow_investigate::compare::{CompareOptions, SIDES};
use whyslow_model::file;
use whyslow_render as render;

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
    let c = whyslow_investigate::compare::compare(
        &opts,
        &mut StatusLine { tty: false, ..StatusLine::new() },
        |r| {
            let rps = r.load.as_ref().map(|l| l.requests_per_sec);
            let line = render::compare::run_line(r.number, a.runs, SIDES[r.side], r.cpu_s, r.wall_s, rps);
            eprintln!("whyslow: {line}");
        },
    )?;
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
