//! Before/after renderers: the per-function delta table, its JSON, and differential flame graphs (inferno's
//! two-count folded format: red grew, blue shrank).

use crate::{folded_lines, sample_type, units, RenderError};
use serde_json::json;
use std::io::Write;
use whyslow_analyze::diff::{Diff, DiffUnit, FunctionDelta, Scale, Side, Status};

/// Function names wider than this push the module column out rather than widening every row.
const NAME_WIDTH: usize = 50;

/// A change: time with its unit (`+1.20s`, `-350µs`), or points of a share (`+1.25%`).
fn signed(v: f64, unit: DiffUnit) -> String {
    match unit {
        DiffUnit::Seconds => units::signed_duration((v * 1e9).round() as i64),
        // No "-0.00%" for a change that rounds to nothing.
        DiffUnit::Percent if (v * 1e2).round() == 0.0 => "+0.00%".to_string(),
        DiffUnit::Percent => format!("{v:+.2}%"),
    }
}

fn plain(v: f64, unit: DiffUnit) -> String {
    match unit {
        DiffUnit::Seconds => units::seconds(v),
        DiffUnit::Percent => format!("{v:.2}%"),
    }
}

fn status_mark(f: &FunctionDelta) -> &'static str {
    match f.status {
        Status::Both => "",
        Status::New => "  [new]",
        Status::Vanished => "  [vanished]",
    }
}

/// The delta table: `limit` rows, then the new and vanished functions by name.
pub fn table(w: &mut impl Write, d: &Diff, limit: usize) -> Result<(), RenderError> {
    let u = d.unit;
    let shown = &d.functions[..limit.min(d.functions.len())];
    let nw = shown.iter().map(|f| f.name.chars().count()).max().unwrap_or(0).clamp(8, NAME_WIDTH);
    match u {
        DiffUnit::Seconds => {
            writeln!(w, "{:<29} {:<17} {:>9}", "   self time", "    self share", "total")?;
            writeln!(
                w,
                "{:>9} {:>9} {:>9} {:>8} {:>8} {:>9}  {:<nw$}  module",
                "before", "after", "delta", "before", "after", "delta", "function"
            )?
        }
        DiffUnit::Percent => {
            writeln!(w, "   self % of each total          total % of each total")?;
            writeln!(
                w,
                "{:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:<nw$}  module",
                "before", "after", "delta", "before", "after", "delta", "function"
            )?
        }
    }
    for f in shown {
        match u {
            DiffUnit::Seconds => writeln!(
                w,
                "{:>9} {:>9} {:>9} {:>7.2}% {:>7.2}% {:>9}  {:<nw$}  {}{}",
                plain(f.self_before, u),
                plain(f.self_after, u),
                signed(f.self_delta, u),
                f.self_pct_before,
                f.self_pct_after,
                signed(f.total_delta, u),
                f.name,
                f.module,
                status_mark(f)
            )?,
            DiffUnit::Percent => writeln!(
                w,
                "{:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:<nw$}  {}{}",
                plain(f.self_before, u),
                plain(f.self_after, u),
                signed(f.self_delta, u),
                plain(f.total_before, u),
                plain(f.total_after, u),
                signed(f.total_delta, u),
                f.name,
                f.module,
                status_mark(f)
            )?,
        }
    }
    if d.functions.len() > shown.len() {
        writeln!(w, "  ... {} more functions (--limit)", d.functions.len() - shown.len())?;
    }
    for (what, list) in [
        ("new", d.new_functions().collect::<Vec<_>>()),
        ("vanished", d.vanished_functions().collect::<Vec<_>>()),
    ] {
        if list.is_empty() {
            continue;
        }
        let names: Vec<&str> = list.iter().take(10).map(|f| f.name.as_str()).collect();
        let more = if list.len() > 10 { format!(" and {} more", list.len() - 10) } else { String::new() };
        writeln!(w, "{what} functions: {}{more}", names.join(", "))?;
    }
    Ok(())
}

/// `whyslow diff`: both sides, the change of the total, and the delta table.
pub fn report(w: &mut impl Write, d: &Diff, limit: usize) -> Result<(), RenderError> {
    let what = match d.unit {
        DiffUnit::Seconds => "absolute time",
        DiffUnit::Percent => "shares of each side's total",
    };
    writeln!(w, "whyslow diff ({}, {what}): before -> after", d.sample_type)?;
    for (name, s) in [("before", &d.before), ("after", &d.after)] {
        // A time already in its unit needs no "= seconds".
        let secs = match s.seconds {
            Some(x) if units::Scale::of(&s.total_unit) != units::Scale::Nanoseconds => {
                format!(" = {}", units::seconds(x))
            }
            _ => String::new(),
        };
        writeln!(
            w,
            "  {name:<6}  {}: {}{secs} over {}",
            s.command.join(" "),
            units::total(s.total, &s.total_unit),
            units::seconds(s.duration_s)
        )?;
    }
    if let (Some(b), Some(a)) = (d.before.seconds, d.after.seconds) {
        let rel = if b != 0.0 { format!(" ({:+.1}%)", 100.0 * (a / b - 1.0)) } else { String::new() };
        writeln!(w, "  change: {}{rel}", signed(a - b, DiffUnit::Seconds))?;
    }
    writeln!(w)?;
    if d.functions.is_empty() {
        writeln!(w, "no {} samples on either side", d.sample_type)?;
        return Ok(());
    }
    table(w, d, limit)
}

fn round(x: f64, digits: i32) -> f64 {
    let k = 10f64.powi(digits);
    (x * k).round() / k
}

/// The diff as a JSON value (also embedded in `whyslow compare --format json`). Field names are a
/// contract: add, never rename.
pub fn json_value(d: &Diff, limit: usize) -> serde_json::Value {
    let digits = if d.unit == DiffUnit::Seconds { 6 } else { 4 };
    let functions: Vec<_> = d
        .functions
        .iter()
        .take(limit)
        .map(|f| {
            json!({
                "name": f.name, "module": f.module, "status": f.status,
                "self_before": round(f.self_before, digits), "self_after": round(f.self_after, digits),
                "self_delta": round(f.self_delta, digits),
                "total_before": round(f.total_before, digits), "total_after": round(f.total_after, digits),
                "total_delta": round(f.total_delta, digits),
                "self_pct_before": round(f.self_pct_before, 2), "self_pct_after": round(f.self_pct_after, 2),
                "total_pct_before": round(f.total_pct_before, 2),
                "total_pct_after": round(f.total_pct_after, 2),
                // Exact, [before, after], in each side's total_unit.
                "self_values": f.self_values, "total_values": f.total_values,
            })
        })
        .collect();
    let side = |s: &whyslow_analyze::diff::SideTotal| {
        json!({"command": s.command, "total": s.total, "total_unit": s.total_unit,
               "seconds": s.seconds.map(|x| round(x, 6)),
               "duration_s": round(s.duration_s, 6)})
    };
    json!({
        "sample_type": d.sample_type,
        "unit": d.unit,
        "before": side(&d.before),
        "after": side(&d.after),
        "functions": functions,
        "new": d.new_functions().map(|f| &f.name).collect::<Vec<_>>(),
        "vanished": d.vanished_functions().map(|f| &f.name).collect::<Vec<_>>(),
    })
}

pub fn json(w: &mut impl Write, d: &Diff, limit: usize) -> Result<(), RenderError> {
    serde_json::to_writer_pretty(&mut *w, &json_value(d, limit)).map_err(std::io::Error::from)?;
    writeln!(w)?;
    Ok(())
}

#[derive(Debug, Clone, Default)]
pub struct DiffFlameOptions {
    pub title: String,
    /// Widths from the before profile (so what vanished shows), colors still red for what grew.
    pub negate: bool,
    /// Compare shares even when both sides have a time scale (before is scaled to after's total).
    pub shares_only: bool,
}

/// Two-count folded lines `stack before after`, sorted: microseconds when both sides have a time scale,
/// else the before counts scaled to the after total (inferno's `--normalize`). With `negate` the counts
/// are swapped (`stack after before`).
pub fn folded_pairs(before: Side, after: Side, o: &DiffFlameOptions) -> Result<Vec<String>, RenderError> {
    sample_type(before.profile, before.value)?;
    sample_type(after.profile, after.value)?;
    let (lb, la) =
        (folded_lines(before.profile, before.value, false), folded_lines(after.profile, after.value, false));
    let (tb, ta): (i64, i64) = (lb.iter().map(|l| l.1).sum(), la.iter().map(|l| l.1).sum());
    let (kb, ka) = match (before.scale, after.scale) {
        (Scale::SecondsPerUnit(b), Scale::SecondsPerUnit(a)) if !o.shares_only => (b * 1e6, a * 1e6),
        _ if tb > 0 => (ta as f64 / tb as f64, 1.0),
        _ => (1.0, 1.0),
    };
    let mut pairs: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for (stack, v) in lb {
        pairs.entry(stack).or_default().0 += v;
    }
    for (stack, v) in la {
        pairs.entry(stack).or_default().1 += v;
    }
    Ok(pairs
        .into_iter()
        .map(|(s, (b, a))| ((b as f64 * kb).round() as i64, (a as f64 * ka).round() as i64, s))
        .filter(|&(b, a, _)| b > 0 || a > 0)
        .map(|(b, a, s)| {
            if o.negate {
                format!("{s} {} {}", a.max(0), b.max(0))
            } else {
                format!("{s} {} {}", b.max(0), a.max(0))
            }
        })
        .collect())
}

/// The call trees of both sides merged by stack (frame names from the root), as nested JSON for a
/// differential flame graph drawn by the web UI: `{"sample_type", "unit", "tree": {name, kind, before,
/// after, before_self, after_self, children}}`, values in the diff's unit (seconds when both sides have a
/// time scale, else percent of each side's total, like [`whyslow_analyze::diff::diff`]).
pub fn tree_json(w: &mut impl Write, before: Side, after: Side) -> Result<(), RenderError> {
    let st = sample_type(before.profile, before.value)?.name.clone();
    sample_type(after.profile, after.value)?;
    struct Node {
        name: String,
        kind: &'static str,
        value: [f64; 2],
        self_value: [f64; 2],
    }
    let mut nodes = vec![Node { name: "all".into(), kind: "root", value: [0.0; 2], self_value: [0.0; 2] }];
    let mut children: Vec<Vec<usize>> = vec![Vec::new()];
    let mut index: std::collections::HashMap<(usize, String), usize> = Default::default();
    let seconds = matches!((before.scale, after.scale), (Scale::SecondsPerUnit(_), Scale::SecondsPerUnit(_)));
    for (k, side) in [before, after].into_iter().enumerate() {
        let tree = crate::tree::build(side.profile, side.value)?;
        let unit = match side.scale {
            Scale::SecondsPerUnit(s) if seconds => s,
            _ => 100.0 / (tree[0].value.max(1) as f64),
        };
        // (node of this side's tree, merged node)
        let mut todo = vec![(0usize, 0usize)];
        while let Some((t, m)) = todo.pop() {
            nodes[m].value[k] += tree[t].value as f64 * unit;
            nodes[m].self_value[k] += tree[t].self_value as f64 * unit;
            for &c in &tree[t].children {
                let name = crate::tree::frame_label(side.profile, tree[c].frame).to_string();
                let mc = *index.entry((m, name.clone())).or_insert_with(|| {
                    let kind = crate::tree::kind(side.profile, tree[c].frame);
                    nodes.push(Node { name, kind, value: [0.0; 2], self_value: [0.0; 2] });
                    children.push(Vec::new());
                    children[m].push(nodes.len() - 1);
                    nodes.len() - 1
                });
                todo.push((c, mc));
            }
        }
    }
    let mut out = Vec::with_capacity(96 * nodes.len());
    write!(
        out,
        "{{\"sample_type\":{},\"unit\":{},\"tree\":",
        serde_json::Value::from(st),
        serde_json::Value::from(if seconds { "seconds" } else { "percent" })
    )?;
    let num = |v: f64| serde_json::Value::from((v * 1e9).round() / 1e9);
    crate::tree::nested(
        &mut out,
        children,
        |i| nodes[i].name.as_str(),
        |out, i| {
            let n = &nodes[i];
            write!(
                out,
                ",\"kind\":\"{}\",\"before\":{},\"after\":{},\"before_self\":{},\"after_self\":{}",
                n.kind,
                num(n.value[0]),
                num(n.value[1]),
                num(n.self_value[0]),
                num(n.self_value[1])
            )
        },
    )?;
    out.extend_from_slice(b"}\n");
    w.write_all(&out)?;
    Ok(())
}

/// A differential flame graph: frame widths from the after profile (before with `negate`), red where
/// time grew, blue where it shrank, the deeper the color the larger the change.
pub fn svg(w: &mut impl Write, before: Side, after: Side, o: &DiffFlameOptions) -> Result<(), RenderError> {
    let lines = folded_pairs(before, after, o)?;
    let width_side = if o.negate { before } else { after };
    // Every frame needs a width on the side the graph is drawn from.
    let drawn = |l: &String| l.rsplit(' ').next().is_some_and(|c| c != "0");
    if !lines.iter().any(drawn) {
        let st = sample_type(width_side.profile, width_side.value)?;
        return Err(RenderError::Empty(st.name.clone()));
    }
    let seconds = matches!((before.scale, after.scale), (Scale::SecondsPerUnit(_), Scale::SecondsPerUnit(_)))
        && !o.shares_only;
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = o.title.clone();
    opts.subtitle = Some(
        if o.negate {
            "widths: before; red: grew, blue: shrank (after - before)"
        } else {
            "widths: after; red: grew, blue: shrank (after - before)"
        }
        .to_string(),
    );
    opts.count_name =
        if seconds { "µs".to_string() } else { sample_type(after.profile, after.value)?.unit.clone() };
    opts.negate_differentials = o.negate;
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{folded_pairs, json, report, svg, tree_json, DiffFlameOptions};
    use crate::fixture::{check_golden, render};
    use whyslow_analyze::diff::diff;
    use whyslow_analyze::diff::Side;
    use whyslow_model::{FrameKind, Metadata, Profile, ProfileBuilder, SampleType};

    /// main -> run -> work_a/work_b/work_c (+ one function only on one side), at 100 Hz; the after build
    /// does twice the work_b and lives in another directory.
    pub fn pair() -> (Profile, Profile) {
        let build = |path: &str, b: i64, only: (&str, i64)| {
            let meta = Metadata {
                command: vec![path.to_string(), "300".into()],
                event: "cpu-clock".into(),
                frequency_hz: 100,
                duration_ns: 4_000_000_000 + b as u64 * 10_000_000,
                ..Default::default()
            };
            let mut pb =
                ProfileBuilder::new(meta, vec![SampleType { name: "cpu".into(), unit: "samples".into() }]);
            let m = pb.module(path, "");
            let k = pb.module("[kernel.kallsyms]", "");
            let main = pb.frame("main", m, "w.c", FrameKind::User);
            let run = pb.frame("run", m, "w.c", FrameKind::User);
            let t = pb.thread(7, 7, "diffwork");
            for (name, module, n) in
                [("work_a", m, 200), ("work_b", m, b), ("work_c", m, 100), (only.0, k, only.1)]
            {
                let f = pb.frame(name, module, "", FrameKind::User);
                let s = pb.stack(&[main, run, f]);
                pb.add_sample(s, t, &[n]);
            }
            pb.finish()
        };
        (build("/src/v1/diffwork", 100, ("clear_page", 20)), build("/src/v2/diffwork", 200, ("memset", 5)))
    }

    fn sides<'a>(p: &'a (Profile, Profile)) -> (Side<'a>, Side<'a>) {
        (Side::new(&p.0, 0), Side::new(&p.1, 0))
    }

    #[test]
    fn diff_tree_merges_stacks_and_agrees_with_the_deltas() {
        let p = pair();
        let (b, a) = sides(&p);
        let v: serde_json::Value = serde_json::from_slice(&render(|w| tree_json(w, b, a))).unwrap();
        assert_eq!((v["unit"].as_str(), v["sample_type"].as_str()), (Some("seconds"), Some("cpu")));
        let run = &v["tree"]["children"][0]["children"][0];
        assert_eq!(run["name"], "run");
        let kids: Vec<(&str, f64, f64)> = run["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (c["name"].as_str().unwrap(), c["before"].as_f64().unwrap(), c["after"].as_f64().unwrap())
            })
            .collect();
        // At 100 Hz: work_b 100 -> 200 samples is 1 s -> 2 s; each side's own function is there at 0 on the other.
        assert_eq!(
            kids,
            vec![
                ("clear_page", 0.2, 0.0),
                ("memset", 0.0, 0.05),
                ("work_a", 2.0, 2.0),
                ("work_b", 1.0, 2.0),
                ("work_c", 1.0, 1.0)
            ]
        );
        let d = diff(b, a, false);
        let wb = d.functions.iter().find(|f| f.name == "work_b").unwrap();
        let node = &run["children"][3];
        let delta = node["after"].as_f64().unwrap() - node["before"].as_f64().unwrap();
        assert!(
            (delta - wb.total_delta).abs() < 1e-9
                && (node["after_self"].as_f64().unwrap() - 2.0).abs() < 1e-9
        );
        let (tb, ta) = (v["tree"]["before"].as_f64().unwrap(), v["tree"]["after"].as_f64().unwrap());
        assert!((tb - 4.2).abs() < 1e-9 && (ta - 5.05).abs() < 1e-9, "{tb} {ta}");
    }

    #[test]
    fn diff_text_golden() {
        let p = pair();
        let (b, a) = sides(&p);
        let mut out = render(|w| report(w, &diff(b, a, false), 20));
        out.extend(b"\n--- shares, limit 3 ---\n");
        out.extend(render(|w| report(w, &diff(b, a, true), 3)));
        check_golden("diff.txt", &out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("change: +850ms (+20.2%)"), "{text}");
        // Times in their units, three significant digits; the totals named by their unit.
        assert!(text.contains("420 samples = 4.20s over 5.00s"), "{text}");
        let work_b = text.lines().find(|l| l.contains("work_b")).unwrap();
        assert_eq!(work_b.split_whitespace().take(3).collect::<Vec<_>>(), ["1.00s", "2.00s", "+1.00s"]);
    }

    #[test]
    fn diff_json_golden() {
        let p = pair();
        let (b, a) = sides(&p);
        let out = render(|w| json(w, &diff(b, a, false), 100));
        check_golden("diff.json", &out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["functions"][0]["name"], "work_b");
        assert_eq!(v["functions"][0]["self_delta"], 1.0);
        assert_eq!(v["new"], json!(["memset"]));
        assert_eq!(v["vanished"], json!(["clear_page"]));
        assert_eq!(v["unit"], "seconds");
        // The exact values behind the seconds, in the unit each side names.
        assert_eq!(v["functions"][0]["self_values"], json!([100, 200]));
        assert_eq!((&v["before"]["total"], &v["before"]["total_unit"]), (&json!(420), &json!("samples")));
    }

    fn frame<'a>(s: &'a str, name: &str) -> &'a str {
        let at = s.find(&format!("<title>{name} (")).unwrap_or_else(|| panic!("{name} missing"));
        &s[s[..at].rfind("<g>").unwrap()..at + s[at..].find("</g>").unwrap()]
    }

    fn fill(g: &str) -> Vec<u32> {
        let at = g.find("fill=\"rgb(").unwrap() + 10;
        g[at..at + g[at..].find(')').unwrap()].split(',').map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn diff_svg_golden_red_grew_blue_shrank() {
        let p = pair();
        let (b, a) = sides(&p);
        let o = DiffFlameOptions { title: "whyslow diff".into(), ..Default::default() };
        let out = render(|w| svg(w, b, a, &o));
        check_golden("diff.svg", &out);
        let s = String::from_utf8(out).unwrap();
        // Widths from after, in µs: work_b 2 s; its delta is +1 s.
        assert!(frame(&s, "work_b").contains("(2,000,000 µs"), "{}", frame(&s, "work_b"));
        let (grew, same) = (fill(frame(&s, "work_b")), fill(frame(&s, "work_a")));
        assert!(grew[0] == 255 && grew[1] < 200, "red: {grew:?}");
        assert_eq!(same, [250, 250, 250], "unchanged is white-grey");
        assert!(!s.contains("<title>clear_page ("), "vanished stacks have no width in the after view");
        // The negated view: widths from before, clear_page shows and shrank (blue).
        let neg =
            String::from_utf8(render(|w| svg(w, b, a, &DiffFlameOptions { negate: true, ..o.clone() })))
                .unwrap();
        let gone = fill(frame(&neg, "clear_page"));
        assert!(gone[2] == 255 && gone[0] < 250, "blue: {gone:?}");
        assert!(fill(frame(&neg, "work_b"))[0] == 255, "still red for what grew");
        assert!(frame(&neg, "work_b").contains("(1,000,000 µs"));
    }

    #[test]
    fn shares_scale_before_to_the_after_total() {
        let p = pair();
        let (b, a) = sides(&p);
        let lines =
            folded_pairs(b, a, &DiffFlameOptions { shares_only: true, ..Default::default() }).unwrap();
        // before total 420 -> after total 505: work_a 200 * 505/420 = 240.5 -> 240 (round half even-ish).
        assert!(
            lines.contains(&"main;run;work_a 240 200".to_string())
                || lines.contains(&"main;run;work_a 241 200".to_string()),
            "{lines:?}"
        );
        assert!(lines.contains(&"main;run;memset 0 5".to_string()));
    }
}
