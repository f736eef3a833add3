//! Call count output, shaped like `ltrace -c` grown up: per group, calls and calls/s, and with time per
//! call the total, average, max and share of wall time; plus the JSON form.

use std::io::Write;
use whyslow_analyze::CallRow;
use whyslow_model::{basename, Profile};

fn shown_name(r: &CallRow) -> String {
    let s = &r.stat;
    let mut name = s.name.clone();
    if let Some(imp) = &s.implementation {
        name = format!("{name} -> {imp}");
    }
    if !s.aliases.is_empty() {
        name = format!("{name} (= {})", s.aliases.join(", "));
    }
    name
}

fn rate(calls: u64, secs: f64) -> String {
    let r = if secs > 0.0 { calls as f64 / secs } else { 0.0 };
    match r {
        r if r >= 1e6 => format!("{:.2}M/s", r / 1e6),
        r if r >= 1e3 => format!("{:.1}k/s", r / 1e3),
        r => format!("{r:.0}/s"),
    }
}

/// How `whyslow calls` ran, for its text report.
pub struct TextOptions<'a> {
    /// (pattern, functions it matched) of the patterns the user gave (empty: the default set).
    pub matched: &'a [(String, usize)],
    pub follow_children: bool,
    /// Every Nth call's stack was sampled (with --stacks).
    pub callers_period: u64,
    /// Rows of the table (of each group), and functions whose callers are shown.
    pub limit: usize,
}

/// The text report of `whyslow calls`: what the patterns matched, the table, the callers of each counted
/// function (when stacks were sampled), lost stacks and notes.
pub fn text(w: &mut impl Write, p: &Profile, rows: &[CallRow], how: &TextOptions) -> std::io::Result<()> {
    if !how.matched.is_empty() {
        let m: Vec<String> = how
            .matched
            .iter()
            .map(|(pat, n)| format!("'{pat}' {n} function{}", if *n == 1 { "" } else { "s" }))
            .collect();
        writeln!(w, "patterns: {}", m.join(", "))?;
    }
    // The resolved functions and those of libraries loaded during the run.
    let mut counted: Vec<(&str, &str)> =
        p.calls.iter().map(|c| (c.name.as_str(), c.module.as_str())).collect();
    counted.sort_unstable();
    counted.dedup();
    let n = counted.len();
    let window = if p.meta.calls_duration_ns > 0 {
        // The probe budget stopped the probes: the counts cover their window, the rates are per second of it.
        format!(
            "the first {} of the {} run (the probes stopped at the budget; calls/s are per second of that \
             window)",
            crate::units::duration(p.meta.calls_duration_ns as i64),
            crate::units::duration(p.meta.duration_ns as i64)
        )
    } else {
        crate::units::duration(p.meta.duration_ns as i64)
    };
    writeln!(
        w,
        "{n} function{} counted exactly in the kernel for {window}{}\n",
        if n == 1 { "" } else { "s" },
        if how.follow_children {
            " (target and its children)"
        } else {
            " (children not followed: --follow-children)"
        }
    )?;
    table(w, p, rows, !how.matched.is_empty(), how.limit)?;
    if let Some(value) = p.sample_type(whyslow_model::sample_types::CALLS) {
        let called: Vec<&str> =
            rows.iter().filter(|r| r.stat.calls > 0).map(|r| r.stat.name.as_str()).collect();
        let every = match how.callers_period {
            1 => "every call".to_string(),
            n => format!("every {n}th call"),
        };
        writeln!(w, "\ncallers (user stacks of {every}, aggregated in whyslow):")?;
        crate::text::stacks_ending_in(
            w,
            p,
            value,
            &called[..called.len().min(how.limit)],
            5,
            how.callers_period,
        )?;
        if p.meta.lost_samples > 0 {
            writeln!(
                w,
                "\n{} stack samples lost (the ring buffer was full): use --stacks-period N",
                p.meta.lost_samples
            )?;
        }
    }
    for n in &p.meta.notes {
        writeln!(w, "note: {n}")?;
    }
    Ok(())
}

/// The table, one block per group. Time columns appear when the run measured time per call. Functions
/// with no call are listed only with `zeros` (else counted in one line at the end). Each group shows its
/// first `limit` rows.
pub fn table(
    w: &mut impl Write,
    p: &Profile,
    rows: &[CallRow],
    zeros: bool,
    limit: usize,
) -> std::io::Result<()> {
    // Over the window the counters ran (the run, unless the probe budget stopped them).
    let secs = p.meta.calls_seconds();
    let uncalled = rows.iter().filter(|r| r.stat.calls == 0).count();
    let listed: Vec<&CallRow> = rows.iter().filter(|r| zeros || r.stat.calls > 0).collect();
    // The first `limit` of each group, and how many of each were left out.
    let mut shown: Vec<&CallRow> = Vec::new();
    let mut cut: Vec<(&str, usize)> = Vec::new();
    for r in &listed {
        let in_group = shown.iter().filter(|s| s.stat.group == r.stat.group).count();
        if in_group < limit {
            shown.push(r);
        } else {
            match cut.iter_mut().find(|(g, _)| *g == r.stat.group) {
                Some((_, n)) => *n += 1,
                None => cut.push((&r.stat.group, 1)),
            }
        }
    }
    let rows = &shown[..];
    let timed = rows.iter().any(|r| r.stat.timed > 0);
    let mut group = None;
    for r in rows {
        let s = &r.stat;
        if group != Some(&s.group) {
            group = Some(&s.group);
            writeln!(w, "{}{}", if std::ptr::eq(*r, rows[0]) { "" } else { "\n" }, s.group)?;
            if timed {
                writeln!(
                    w,
                    "{:>12} {:>10} {:>9} {:>9} {:>9} {:>7}  function  [module]",
                    "calls", "calls/s", "total", "avg", "max", "% wall"
                )?;
            } else {
                writeln!(w, "{:>12} {:>10}  function  [module]", "calls", "calls/s")?;
            }
        }
        let module = basename(&s.module);
        if timed {
            let avg = s.total_ns.checked_div(s.timed).unwrap_or(0);
            let wall = if secs > 0.0 { 100.0 * s.total_ns as f64 / (secs * 1e9) } else { 0.0 };
            let time = |ns: u64| crate::units::duration(ns as i64);
            writeln!(
                w,
                "{:>12} {:>10} {:>9} {:>9} {:>9} {wall:>6.1}%  {}  [{module}]",
                s.calls,
                rate(s.calls, secs),
                time(s.total_ns),
                time(avg),
                time(s.max_ns),
                shown_name(r)
            )?;
        } else {
            writeln!(w, "{:>12} {:>10}  {}  [{module}]", s.calls, rate(s.calls, secs), shown_name(r))?;
        }
    }
    for (group, n) in &cut {
        writeln!(w, "  ... {n} more functions of {group} (--limit)")?;
    }
    if rows.is_empty() {
        writeln!(w, "none of the probed functions was called")?;
    }
    if !zeros && uncalled > 0 && !rows.is_empty() {
        writeln!(w, "\n({uncalled} more probed functions were not called)")?;
    }
    if p.meta.lost_events > 0 {
        writeln!(w, "lost: {} calls not counted (a kernel map was full)", p.meta.lost_events)?;
    }
    Ok(())
}

/// `{"duration_s", "window_ns" (what the counts cover: the run, or less when "stopped_at_budget"),
/// "functions": [{"name", "module", "calls", "per_s" (over the window), "total_ns"?, ...}], "callers":
/// [{"name", "sampled", "stacks": [{"frames" (root first), "count"}]}], "lost_stacks", "unmatched", ...}`.
pub fn json(w: &mut impl Write, p: &Profile, rows: &[CallRow], unmatched: &[String]) -> std::io::Result<()> {
    let window_s = p.meta.calls_seconds();
    let functions: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let s = &r.stat;
            let per_s = if window_s > 0.0 { s.calls as f64 / window_s } else { 0.0 };
            let mut v = serde_json::json!({
                "name": s.name, "module": s.module, "calls": s.calls, "per_s": per_s, "group": s.group,
                "aliases": s.aliases, "implementation": s.implementation, "processes": r.processes,
            });
            if let Some(avg) = s.total_ns.checked_div(s.timed) {
                v["total_ns"] = s.total_ns.into();
                v["avg_ns"] = avg.into();
                v["max_ns"] = s.max_ns.into();
            }
            v
        })
        .collect();
    // With --callers: each counted function's sampled stacks, root first, most frequent first.
    let callers: Vec<serde_json::Value> = match p.sample_type(whyslow_model::sample_types::CALLS) {
        Some(value) => rows
            .iter()
            .filter(|r| r.stat.calls > 0)
            .filter_map(|r| {
                let stacks = whyslow_analyze::stacks_ending_in(p, value, &r.stat.name);
                let sampled: i64 = stacks.iter().map(|s| s.1).sum();
                (sampled > 0).then(|| {
                    let stacks: Vec<serde_json::Value> = stacks
                        .iter()
                        .map(|(frames, n)| serde_json::json!({"frames": frames, "count": n}))
                        .collect();
                    serde_json::json!({"name": r.stat.name, "sampled": sampled, "stacks": stacks})
                })
            })
            .collect(),
        None => Vec::new(),
    };
    let doc = serde_json::json!({
        "duration_s": p.meta.duration_ns as f64 / 1e9,
        "duration_ns": p.meta.duration_ns,
        "window_ns": if p.meta.calls_duration_ns > 0 { p.meta.calls_duration_ns } else { p.meta.duration_ns },
        "stopped_at_budget": p.meta.calls_duration_ns > 0,
        "functions": functions,
        "callers": callers,
        "lost_stacks": p.meta.lost_samples,
        "unmatched": unmatched,
        "lost_events": p.meta.lost_events,
        "killed": p.meta.killed,
        "notes": p.meta.notes,
    });
    serde_json::to_writer_pretty(&mut *w, &doc)?;
    writeln!(w)
}

#[cfg(test)]
mod tests {
    use super::{json, table, text, TextOptions};
    use whyslow_model::CallStat;
    use whyslow_model::Profile;

    fn profile() -> Profile {
        let stat = |name: &str, calls, total_ns, max_ns| CallStat {
            pid: 1,
            name: name.into(),
            module: "/lib/libc.so.6".into(),
            group: "allocation".into(),
            calls,
            timed: calls,
            total_ns,
            max_ns,
            ..Default::default()
        };
        let mut p = Profile::default();
        p.meta.duration_ns = 2_000_000_000;
        p.calls = vec![
            stat("malloc", 40_000, 50_000_000, 1_500_000),
            stat("free", 30_000, 3_000_000, 12_345),
            stat("calloc", 20, 2_000, 150),
        ];
        p
    }

    /// Times per call in their units (total 50.0ms, avg 1.25µs, max 1.50ms), one row per function up to
    /// the limit, the rest counted.
    #[test]
    fn the_table_shows_times_in_units_and_keeps_to_its_limit() {
        let p = profile();
        let mut out = Vec::new();
        table(&mut out, &p, &whyslow_analyze::call_summary(&p), false, 2).unwrap();
        let text = String::from_utf8(out).unwrap();
        let want = "\
allocation
       calls    calls/s     total       avg       max  % wall  function  [module]
       40000    20.0k/s    50.0ms    1.25µs    1.50ms    2.5%  malloc  [libc.so.6]
       30000    15.0k/s    3.00ms     100ns    12.3µs    0.1%  free  [libc.so.6]
  ... 1 more functions of allocation (--limit)
";
        assert_eq!(text, want);
    }

    /// Counters the budget stopped after 0.5 s of a 2 s run: the title says which window the counts
    /// cover, calls/s are per second of it (40000 calls in 0.5 s: 80.0k/s), and the JSON says both.
    #[test]
    fn counts_stopped_by_the_budget_are_rates_over_their_window() {
        let mut p = profile();
        p.meta.calls_duration_ns = 500_000_000;
        let rows = whyslow_analyze::call_summary(&p);
        let how = TextOptions { matched: &[], follow_children: false, callers_period: 1, limit: 1 };
        let mut out = Vec::new();
        text(&mut out, &p, &rows, &how).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with(
                "3 functions counted exactly in the kernel for the first 500ms of the 2.00s run (the probes \
                 stopped at the budget; calls/s are per second of that window)"
            ),
            "{text}"
        );
        assert!(
            text.contains("       40000    80.0k/s    50.0ms    1.25µs    1.50ms   10.0%  malloc"),
            "{text}"
        );
        let mut out = Vec::new();
        json(&mut out, &p, &rows, &[]).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["window_ns"], 500_000_000);
        assert_eq!(doc["stopped_at_budget"], true);
        assert_eq!(doc["functions"][0]["per_s"], 80_000.0);
    }
}
