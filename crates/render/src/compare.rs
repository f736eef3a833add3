//! `whyslow compare`: per-side medians and spreads, the change with its confidence interval and test,
//! the verdict, and the diff of the merged profiles that explains it.

use crate::RenderError;
use serde_json::json;
use std::io::Write;
use whyslow_analyze::diff::Diff;
use whyslow_analyze::stats::{Comparison, Measure, UMethod, ALPHA, BOOTSTRAP_RESAMPLES};

/// Everything a comparison report shows.
#[derive(Debug, Clone)]
pub struct CompareView<'a> {
    pub before: &'a [String],
    pub after: &'a [String],
    pub load: Option<&'a [String]>,
    /// Runs per side.
    pub runs: usize,
    pub measures: &'a [Measure],
    /// Index in `measures` of the one the verdict is about.
    pub primary: usize,
    /// The merged profiles' diff, scaled to the median CPU time of each side.
    pub diff: Option<&'a Diff>,
    pub flamegraph: Option<&'a str>,
    pub output_dir: &'a str,
    pub limit: usize,
}

fn value(v: f64, unit: &str) -> String {
    match unit {
        "req/s" => format!("{v:.0}"),
        // Times carry their unit, to three significant digits: 1.20s, 850ms.
        "s" => crate::units::seconds(v),
        "ms" => crate::units::seconds(v / 1e3),
        // Short runs keep their digits: 0.0012 s rather than 0.001.
        _ if v.abs() < 1.0 => format!("{v:.4}"),
        _ => format!("{v:.3}"),
    }
}

/// The progress line of one run: `run 3/10 before: cpu 1.20s, wall 1.31s, 5230 requests/s`.
pub fn run_line(number: usize, runs: usize, side: &str, cpu_s: f64, wall_s: f64, rps: Option<f64>) -> String {
    let rps = rps.map_or(String::new(), |r| format!(", {r:.0} requests/s"));
    format!(
        "run {number}/{runs} {side:<6}: cpu {}, wall {}{rps}",
        crate::units::seconds(cpu_s),
        crate::units::seconds(wall_s)
    )
}

fn method(m: UMethod) -> &'static str {
    match m {
        UMethod::Exact => "exact",
        UMethod::Normal => "normal approx.",
    }
}

/// One sentence: the change, its interval and test, and what it means.
pub fn verdict(m: &Measure) -> String {
    let Some(c) = &m.comparison else {
        return format!("{}: no comparison (a side has no usable value)", m.name);
    };
    let stats = format!(
        "{:+.1}% (95% CI {:+.1}% .. {:+.1}%; Mann-Whitney U p = {:.4}, {})",
        100.0 * c.change,
        100.0 * c.ci.0,
        100.0 * c.ci.1,
        c.test.p,
        method(c.test.method)
    );
    if !c.significant {
        let why = if c.test.p >= ALPHA { format!("p >= {ALPHA}") } else { "the interval includes 0".into() };
        return format!("{}: {stats}: no significant difference ({why})", m.name);
    }
    let better = (c.change > 0.0) == m.higher_is_better;
    let (more, less) = if m.higher_is_better { ("more", "fewer") } else { ("more", "less") };
    format!(
        "{}: {stats}: significant, after has {} {} ({})",
        m.name,
        if c.change > 0.0 { more } else { less },
        m.name,
        if better { "better" } else { "worse" }
    )
}

fn spread(c: &Comparison, before: bool, unit: &str) -> String {
    let s = if before { c.before } else { c.after };
    format!("{} [{} .. {}]", value(s.median, unit), value(s.min, unit), value(s.max, unit))
}

pub fn report(w: &mut impl Write, v: &CompareView) -> Result<(), RenderError> {
    writeln!(w, "whyslow compare: {} runs per side, interleaved (before, after, before, ...)", v.runs)?;
    writeln!(w, "  before: {}", v.before.join(" "))?;
    writeln!(w, "  after:  {}", v.after.join(" "))?;
    if let Some(l) = v.load {
        writeln!(w, "  load:   {}", l.join(" "))?;
    }
    writeln!(w)?;
    let rows: Vec<[String; 6]> = v
        .measures
        .iter()
        .map(|m| {
            // A time shows its unit in each value; other measures name it here.
            let name = match m.unit.as_str() {
                "s" | "ms" => m.name.clone(),
                unit => format!("{} ({unit})", m.name),
            };
            match &m.comparison {
                Some(c) => [
                    name,
                    spread(c, true, &m.unit),
                    spread(c, false, &m.unit),
                    format!("{:+.1}%", 100.0 * c.change),
                    format!("[{:+.1}%, {:+.1}%]", 100.0 * c.ci.0, 100.0 * c.ci.1),
                    format!(
                        "{:.4} {}{}",
                        c.test.p,
                        method(c.test.method),
                        if c.significant { "  significant" } else { "" }
                    ),
                ],
                None => [name, "-".into(), "-".into(), "-".into(), "-".into(), "-".into()],
            }
        })
        .collect();
    let head = [
        "measure",
        "before: median [min .. max]",
        "after: median [min .. max]",
        "change",
        "95% CI (bootstrap)",
        "p (Mann-Whitney U)",
    ];
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).chain([head[i].len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: [&str; 6]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == 5 {
                s.push_str(c);
            } else if i == 0 {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            } else {
                s.push_str(&format!("{c:>w$}  ", w = widths[i]));
            }
        }
        s.trim_end().to_string()
    };
    writeln!(w, "{}", line(head))?;
    for r in &rows {
        writeln!(w, "{}", line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]].map(String::as_str)))?;
    }
    writeln!(
        w,
        "  (change of the medians; interval: percentile bootstrap, {BOOTSTRAP_RESAMPLES} resamples, fixed seed; \
         significant: p < {ALPHA} and the interval excludes 0)"
    )?;
    if let Some(m) = v.measures.get(v.primary) {
        writeln!(w, "\nverdict: {}", verdict(m))?;
    }
    if let Some(d) = v.diff {
        writeln!(
            w,
            "\nwhere the CPU time changed (all runs of a side merged, scaled to its median CPU time; the deltas \
             add up to {}):",
            crate::units::signed_duration((d.total_delta() * 1e9).round() as i64)
        )?;
        if d.functions.is_empty() {
            writeln!(w, "no CPU samples were recorded (runs shorter than the sampling period?)")?;
        } else {
            crate::diff::table(w, d, v.limit)?;
        }
    }
    if let Some(f) = v.flamegraph {
        writeln!(w, "\ndiff flame graph: {f} (red grew, blue shrank; widths: after)")?;
    }
    writeln!(
        w,
        "recordings: {}/before.data, {0}/after.data (merged), one per run beside them",
        v.output_dir
    )?;
    Ok(())
}

fn round(x: f64, digits: i32) -> f64 {
    let k = 10f64.powi(digits);
    (x * k).round() / k
}

pub fn json(w: &mut impl Write, v: &CompareView) -> Result<(), RenderError> {
    let measures: Vec<_> = v
        .measures
        .iter()
        .map(|m| {
            let mut o = json!({
                "name": m.name, "unit": m.unit, "higher_is_better": m.higher_is_better,
                "before": m.before.iter().map(|x| round(*x, 6)).collect::<Vec<_>>(),
                "after": m.after.iter().map(|x| round(*x, 6)).collect::<Vec<_>>(),
            });
            if let Some(c) = &m.comparison {
                let side = |s: whyslow_analyze::stats::Summary| {
                    json!({"median": round(s.median, 6), "min": round(s.min, 6), "max": round(s.max, 6),
                           "q1": round(s.q1, 6), "q3": round(s.q3, 6), "n": s.n})
                };
                o["before_summary"] = side(c.before);
                o["after_summary"] = side(c.after);
                o["change"] = json!(round(c.change, 6));
                o["ci95"] = json!([round(c.ci.0, 6), round(c.ci.1, 6)]);
                o["test"] = json!("mann-whitney-u");
                o["test_method"] = json!(c.test.method);
                o["u"] = json!(c.test.u);
                o["p"] = json!(c.test.p);
                o["significant"] = json!(c.significant);
            }
            o
        })
        .collect();
    let primary = v.measures.get(v.primary);
    let doc = json!({
        "runs_per_side": v.runs,
        "interleaved": true,
        "before": v.before,
        "after": v.after,
        "load": v.load,
        "measures": measures,
        "verdict": primary.map(|m| json!({
            "measure": m.name,
            "significant": m.comparison.as_ref().map(|c| c.significant),
            "change": m.comparison.as_ref().map(|c| round(c.change, 6)),
            "text": verdict(m),
        })),
        "diff": v.diff.map(|d| crate::diff::json_value(d, v.limit)),
        "flamegraph": v.flamegraph,
        "output_dir": v.output_dir,
    });
    serde_json::to_writer_pretty(&mut *w, &doc).map_err(std::io::Error::from)?;
    writeln!(w)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{json, report, run_line, verdict, CompareView};
    use crate::fixture::render;
    use whyslow_analyze::stats::Measure;

    fn view_of(measures: &[Measure]) -> String {
        let (b, a) = (vec!["./old".to_string()], vec!["./new".to_string()]);
        let v = CompareView {
            before: &b,
            after: &a,
            load: None,
            runs: 5,
            measures,
            primary: 0,
            diff: None,
            flamegraph: None,
            output_dir: "out",
            limit: 10,
        };
        String::from_utf8(render(|w| report(w, &v))).unwrap()
    }

    /// A comparison of the diff fixture's two builds: 5 runs per side, the after side 25% slower, wall
    /// time noisy; both report formats against golden files.
    #[test]
    fn a_run_is_said_in_units() {
        assert_eq!(run_line(3, 10, "before", 1.2, 1.3149, None), "run 3/10 before: cpu 1.20s, wall 1.31s");
        assert_eq!(
            run_line(1, 6, "after", 0.0123, 2.0, Some(5230.4)),
            "run 1/6 after : cpu 12.3ms, wall 2.00s, 5230 requests/s"
        );
    }

    #[test]
    fn compare_golden() {
        use whyslow_analyze::diff::{diff, Scale, Side};
        let (pb, pa) = crate::diff::tests::pair();
        let before_cpu = vec![4.2, 4.25, 4.18, 4.3, 4.22];
        let after_cpu = vec![5.25, 5.3, 5.2, 5.31, 5.27];
        let measures = vec![
            Measure::new("cpu time", "s", false, before_cpu.clone(), after_cpu.clone()),
            Measure::new(
                "wall time",
                "s",
                false,
                vec![5.0, 6.1, 4.9, 5.5, 5.2],
                vec![5.4, 5.0, 6.3, 5.1, 5.6],
            ),
        ];
        let scale = |p: &whyslow_model::Profile, m: f64| Scale::SecondsPerUnit(m / p.total(0) as f64);
        let (mb, ma) = (4.22, 5.27);
        let d = diff(
            Side { profile: &pb, value: 0, scale: scale(&pb, mb) },
            Side { profile: &pa, value: 0, scale: scale(&pa, ma) },
            false,
        );
        let (b, a) = (pb.meta.command.clone(), pa.meta.command.clone());
        let v = CompareView {
            before: &b,
            after: &a,
            load: None,
            runs: 5,
            measures: &measures,
            primary: 0,
            diff: Some(&d),
            flamegraph: Some("out/diff.svg"),
            output_dir: "out",
            limit: 5,
        };
        let mut out = render(|w| report(w, &v));
        out.extend(b"\n--- json ---\n");
        out.extend(render(|w| json(w, &v)));
        crate::fixture::check_golden("compare.txt", &out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("the deltas add up to +1.05s"), "{text}");
        assert!(
            text.contains("wall time ") && !text.contains("wall time (s)") && text.contains("+24.9%"),
            "{text}"
        );
    }

    #[test]
    fn verdicts_say_significant_or_not_and_which_test() {
        let slower = Measure::new("cpu time", "s", false, vec![1.0, 1.01, 0.99, 1.02, 0.98], vec![1.25; 5]);
        let text = view_of(&[slower]);
        assert!(text.contains("verdict: cpu time: +25.0% (95% CI"), "{text}");
        assert!(text.contains("p = 0.0079, exact): significant, after has more cpu time (worse)"), "{text}");
        let same = Measure::new(
            "cpu time",
            "s",
            false,
            vec![1.0, 1.1, 0.9, 1.05, 0.95],
            vec![1.02, 0.92, 1.08, 0.97, 1.01],
        );
        let text = view_of(&[same]);
        assert!(text.contains("no significant difference (p >= 0.05)"), "{text}");
        let faster = Measure::new(
            "requests/s",
            "req/s",
            true,
            vec![100.0, 101.0, 99.0, 102.0, 98.0],
            vec![150.0, 151.0, 149.0, 152.0, 148.0],
        );
        assert!(
            verdict(&faster).ends_with("significant, after has more requests/s (better)"),
            "{}",
            verdict(&faster)
        );
    }
}
