//! Terminal tables: the run header, top functions, per-thread splits, callers and callees.

use crate::units::Scale;
use crate::{pct, sample_type, RenderError};
use std::io::Write;
use whyslow_analyze::{FunctionStat, Neighbors};
use whyslow_model::{basename, sample_types, Profile};

#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Index of the sample type to weigh by.
    pub value: usize,
    /// Rows of the top-functions table (per-thread tables show at most 10).
    pub limit: usize,
    /// Add a per-thread table and each thread's top functions.
    pub threads: bool,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions { value: 0, limit: 20, threads: false }
    }
}

/// Function names wider than this push the module column out rather than widening every row.
const NAME_WIDTH: usize = 60;

/// Width of a value column: the widest of its header and its values as shown (a header is a unit name,
/// which an imported file can make any length: no wider than a name column).
fn width(header: &str, scale: Scale, values: impl Iterator<Item = i64>) -> usize {
    let widest = values.map(|v| scale.show(v).chars().count()).max().unwrap_or(0);
    widest.max(header.chars().count().min(NAME_WIDTH))
}

/// An amount of a sample type as words: `1.20s`, `285KiB`, `1000 samples` (counts keep their unit).
fn amount(value: i64, unit: &str) -> String {
    match Scale::of(unit) {
        Scale::Count => format!("{value} {unit}"),
        scale => scale.show(value),
    }
}

/// The run: command, event, duration, total value, lost samples, unwinding completeness, notes.
pub fn header(w: &mut impl Write, p: &Profile, value: usize) -> Result<(), RenderError> {
    let st = sample_type(p, value)?;
    let m = &p.meta;
    folded(w, "whyslow: ", &m.command.join(" "))?;
    let rate = if m.frequency_hz > 0 { format!(" @ {} Hz", m.frequency_hz) } else { String::new() };
    writeln!(
        w,
        "  {}{rate}, {:.2} s: {} ({}), {} lost",
        m.event,
        m.duration_ns as f64 / 1e9,
        amount(p.total(value), &st.unit),
        st.name,
        m.lost_samples
    )?;
    if m.lost_samples > 0 {
        folded(
            w,
            "  (lost: ",
            "the kernel's buffers filled faster than they were read: record at a lower rate (-F), copy less \
             stack (--stack-size), or follow fewer processes)",
        )?;
        let alloc = [sample_types::ALLOC_COUNT, sample_types::ALLOC_BYTES];
        if alloc.contains(&st.name.as_str()) && p.sample_type(sample_types::ALLOC_SITE_COUNT).is_some() {
            let text = format!(
                "are counted in the kernel: a lost sample loses a stack, not a count; what no sample named \
                 stays under {})",
                whyslow_model::LOST_STACK_FRAME
            );
            folded(w, "  (allocations ", &text)?;
        }
    }
    let u = m.unwind;
    // A recording's counters are whatever its file says: their sum must not overflow.
    let unwound = u.complete.saturating_add(u.partial);
    if unwound > 0 {
        let share = 100.0 * u.complete as f64 / unwound as f64;
        writeln!(w, "  user stacks: {} complete, {} partial ({share:.1}% complete)", u.complete, u.partial)?;
    }
    if let (Some(wall), Some(off)) = (p.sample_type(sample_types::WALL), p.sample_type(sample_types::OFFCPU))
    {
        let (wall, off) = (p.total(wall), p.total(off));
        let waiting: i64 = whyslow_analyze::stacks_ending_in(
            p,
            p.sample_type(sample_types::OFFCPU).unwrap_or(0),
            whyslow_model::PREEMPTED_FRAME,
        )
        .iter()
        .map(|s| s.1)
        .sum();
        writeln!(
            w,
            "  wall time: {:.1}% running, {:.1}% blocked, {:.1}% waiting for a CPU (of {:.2} thread-seconds)",
            pct(wall - off, wall),
            pct(off - waiting, wall),
            pct(waiting, wall),
            wall as f64 / 1e9
        )?;
    }
    // Samples inside our probes end in one frame (cut there at symbolization).
    let probe = whyslow_analyze::probe_total(p, value);
    if probe != 0 {
        let text = format!(
            "{:.1}% of the {} is inside whyslow's own probes ({}: the measurement, not the program); the \
             shares below leave it out",
            pct(probe, p.total(value)),
            st.name,
            whyslow_model::PROBE_FRAME
        );
        folded(w, "  ", &text)?;
    }
    for k in &m.killed {
        folded(w, "  ", &k.to_string())?;
    }
    if let Some(code) = m.exit_code.filter(|&c| c != 0 && m.killed.is_empty()) {
        writeln!(w, "  the command exited with status {code}")?;
    }
    for n in &m.notes {
        folded(w, "  note: ", n)?;
    }
    Ok(())
}

/// `text` folded under `label` in lines of at most [`crate::fit::WIDTH`].
fn folded(w: &mut impl Write, label: &str, text: &str) -> std::io::Result<()> {
    for line in crate::fit::wrap(label, text, crate::fit::WIDTH, None) {
        writeln!(w, "{line}")?;
    }
    Ok(())
}

pub(crate) fn functions_table(
    w: &mut impl Write,
    funcs: &[FunctionStat],
    total: i64,
    limit: usize,
    scale: Scale,
) -> Result<(), RenderError> {
    let shown = &funcs[..limit.min(funcs.len())];
    let sw = width("self", scale, shown.iter().map(|f| f.self_));
    let tw = width("total", scale, shown.iter().map(|f| f.total));
    let names: Vec<_> = shown.iter().map(|f| crate::short_name(&f.name)).collect();
    let nw = names.iter().map(|n| n.chars().count()).max().unwrap_or(0).clamp(8, NAME_WIDTH);
    writeln!(
        w,
        "{:>7} {:>sw$} {:>7} {:>tw$}  {:<nw$}  module",
        "self%", "self", "total%", "total", "function"
    )?;
    for (f, name) in shown.iter().zip(&names) {
        let (sp, tp) = (pct(f.self_, total), pct(f.total, total));
        let module = basename(&f.module);
        let (own, all) = (scale.show(f.self_), scale.show(f.total));
        writeln!(w, "{sp:>6.2}% {own:>sw$} {tp:>6.2}% {all:>tw$}  {name:<nw$}  {module}")?;
    }
    if funcs.len() > shown.len() {
        writeln!(w, "  ... {} more functions (--limit)", funcs.len() - shown.len())?;
    }
    Ok(())
}

/// Header and top-functions table; with `threads`, a thread table and each thread's top functions.
/// `-v`'s table: the wall time of each phase of a run, one line each, and since whyslow started, in
/// milliseconds with one decimal (a column to compare down, so one unit).
pub fn phases(all: &[(&str, std::time::Duration)], since_start: std::time::Duration) -> String {
    let last = "since whyslow started";
    let width = all.iter().map(|(n, _)| n.len()).chain([last.len()]).max().unwrap_or(0);
    let mut out = String::from("whyslow: time per phase\n");
    for (name, d) in all.iter().chain([&(last, since_start)]) {
        out += &format!("  {name:<width$}  {:8.1} ms\n", d.as_secs_f64() * 1e3);
    }
    out
}

pub fn report(w: &mut impl Write, p: &Profile, o: &ReportOptions) -> Result<(), RenderError> {
    header(w, p, o.value)?;
    let st = sample_type(p, o.value)?;
    let total = p.total(o.value);
    if total == 0 {
        writeln!(w, "\nno {} samples", st.name)?;
        return Ok(());
    }
    writeln!(w)?;
    let own = total - whyslow_analyze::probe_total(p, o.value);
    let scale = Scale::of(&st.unit);
    functions_table(w, &whyslow_analyze::program_functions(p, o.value), own, o.limit, scale)?;
    if !o.threads {
        return Ok(());
    }
    let threads = whyslow_analyze::threads(p, o.value);
    let vw = width(&st.unit, scale, threads.iter().map(|t| t.value));
    // Like function names, a long thread name pushes the columns after it out (a width above 65535 panics).
    let namew = threads.iter().map(|t| t.name.chars().count()).max().unwrap_or(0).clamp(6, NAME_WIDTH);
    writeln!(w, "\n{:>8} {:>8}  {:<namew$}  {:>vw$}   share", "pid", "tid", "thread", st.unit)?;
    for t in &threads {
        let share = pct(t.value, total);
        let v = scale.show(t.value);
        writeln!(w, "{:>8} {:>8}  {:<namew$}  {v:>vw$} {share:>6.2}%", t.pid, t.tid, t.name)?;
    }
    for t in threads.iter().filter(|t| t.value != 0) {
        let share = pct(t.value, total);
        let v = amount(t.value, &st.unit);
        writeln!(w, "\nthread {} '{}' (pid {}): {v} ({share:.2}%)", t.tid, t.name, t.pid)?;
        let funcs = whyslow_analyze::thread_top_functions(p, o.value, t.pid, t.tid);
        functions_table(w, &funcs, t.value, o.limit.min(10), scale)?;
    }
    Ok(())
}

/// A callers or callees listing with shares of the function's total, kcachegrind style.
/// The callers or callees of one function, the `limit` largest (the rest counted in one line).
/// Values are shown in `scale` (the sample type's unit).
pub fn neighbors(
    w: &mut impl Write,
    n: &Neighbors,
    callers: bool,
    limit: usize,
    scale: Scale,
) -> Result<(), RenderError> {
    let f = &n.function;
    let (total, own) = (scale.show(f.total), scale.show(f.self_));
    writeln!(w, "{} ({}): total {total}, self {own}", crate::short_name(&f.name), basename(&f.module))?;
    if !n.also_matched.is_empty() {
        writeln!(w, "  also matched: {}", n.also_matched.join(", "))?;
    }
    let own = (!callers && n.self_value != 0).then_some(n.self_value);
    let vw = width("value", scale, n.entries.iter().map(|e| e.value).chain(own));
    writeln!(w, "{:<8} {:>vw$}   share  function", if callers { "callers" } else { "callees" }, "value")?;
    for e in n.entries.iter().take(limit) {
        let module = if e.module.is_empty() { String::new() } else { format!("  ({})", basename(&e.module)) };
        let v = scale.show(e.value);
        let name = crate::short_name(&e.name);
        writeln!(w, "{:<8} {v:>vw$} {:>6.2}%  {name}{module}", "", e.pct_of_function_total)?;
    }
    if n.entries.len() > limit {
        writeln!(w, "{:<8} ... {} more (--limit)", "", n.entries.len() - limit)?;
    }
    if let Some(v) = own {
        writeln!(w, "{:<8} {:>vw$} {:>6.2}%  [self]", "", scale.show(v), pct(v, f.total))?;
    }
    Ok(())
}

/// For each leaf name, the stacks that end in it (sample type `value`, the stack of every `period`th
/// call, each standing for `period` calls), most first, up to `per` each, as `outer > ... > inner` chains
/// of 8 callers, or as many more as tell a row apart from the others shown (two stacks that differ only
/// further out would otherwise print the same).
pub fn stacks_ending_in(
    w: &mut impl Write,
    p: &Profile,
    value: usize,
    leaves: &[&str],
    per: usize,
    period: u64,
) -> std::io::Result<()> {
    for &name in leaves {
        let stacks = whyslow_analyze::stacks_ending_in(p, value, name);
        let total: i64 = stacks.iter().map(|s| s.1).sum();
        if total == 0 {
            continue;
        }
        match period {
            1 => writeln!(w, "\n{name}: {total} calls with stacks")?,
            n => writeln!(w, "\n{name}: about {total} calls (the stack of every {n}th, counted {n} times)")?,
        }
        let chains: Vec<&[String]> = stacks.iter().take(per).map(|(f, _)| &f[..f.len() - 1]).collect();
        let common = |a: &[String], b: &[String]| {
            a.iter().rev().zip(b.iter().rev()).take_while(|(x, y)| x == y).count()
        };
        for (i, (chain, (_, n))) in chains.iter().zip(&stacks).enumerate() {
            let alike = chains.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, c)| common(chain, c) + 1);
            let keep = alike.max().unwrap_or(0).max(8).min(chain.len());
            let shown = &chain[chain.len() - keep..];
            let more = if shown.len() < chain.len() { "... > " } else { "" };
            writeln!(w, "  {n:9} {:5.1}%  {more}{}", 100.0 * *n as f64 / total as f64, shown.join(" > "))?;
        }
        // The rows left out, so that the rows add up to the total.
        if stacks.len() > per {
            let rest: i64 = stacks[per..].iter().map(|s| s.1).sum();
            let k = stacks.len() - per;
            let pct = 100.0 * rest as f64 / total as f64;
            writeln!(w, "  {rest:9} {pct:5.1}%  ({k} more stack{})", if k == 1 { "" } else { "s" })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn phases_line_up_with_the_time_since_start_last() {
        use std::time::Duration;
        let all =
            [("eBPF load", Duration::from_micros(12_345)), ("run (target)", Duration::from_millis(1500))];
        assert_eq!(
            super::phases(&all, Duration::from_millis(1600)),
            "whyslow: time per phase\n  eBPF load                  12.3 ms\n  run (target)             1500.0 ms\n  \
             since whyslow started    1600.0 ms\n"
        );
    }

    use super::{neighbors, report, stacks_ending_in, ReportOptions};
    use crate::fixture::{self, check_golden, render};
    use crate::units::Scale;
    use whyslow_analyze::{callees, callers};

    #[test]
    fn stacks_that_differ_further_out_print_apart() {
        use whyslow_model::{FrameKind, Metadata, ProfileBuilder, SampleType};
        let types = vec![SampleType { name: "syscalls".into(), unit: "count".into() }];
        let mut b = ProfileBuilder::new(Metadata::default(), types);
        let m = b.module("/bin/app", "");
        let thread = b.thread(1, 1, "app");
        let inner: Vec<String> = (0..9).map(|i| format!("f{i}")).collect();
        for (outer, n) in [("a", 3), ("b", 2)] {
            let names =
                std::iter::once(outer.to_string()).chain(inner.iter().cloned()).chain(["write".into()]);
            let frames: Vec<u32> = names.map(|f| b.frame(&f, m, "", FrameKind::User)).collect();
            let stack = b.stack(&frames);
            b.add_sample(stack, thread, &[n]);
        }
        let p = b.finish();
        let out = String::from_utf8(render(|w| Ok(stacks_ending_in(w, &p, 0, &["write"], 5, 1)?))).unwrap();
        let rows: Vec<&str> = out.lines().filter(|l| l.contains('%')).collect();
        assert_eq!(rows.len(), 2, "{out}");
        assert!(rows[0].ends_with("%  a > f0 > f1 > f2 > f3 > f4 > f5 > f6 > f7 > f8"), "{out}");
        assert!(rows[1].ends_with("%  b > f0 > f1 > f2 > f3 > f4 > f5 > f6 > f7 > f8"), "{out}");
        // One row shown: the other stack's calls are one more row, and the rows add up to the total.
        let out = String::from_utf8(render(|w| Ok(stacks_ending_in(w, &p, 0, &["write"], 1, 1)?))).unwrap();
        let rows: Vec<&str> = out.lines().filter(|l| l.contains('%')).collect();
        assert_eq!(rows.len(), 2, "{out}");
        assert_eq!(rows[1].trim(), "2  40.0%  (1 more stack)", "{out}");
        assert!(out.starts_with("\nwrite: 5 calls with stacks\n"), "{out}");
    }

    #[test]
    fn report_golden() {
        let p = fixture::profile();
        let mut out = render(|w| report(w, &p, &ReportOptions { value: 0, limit: 20, threads: true }));
        out.extend(b"\n--- cpu-ns, limit 3, no threads ---\n");
        out.extend(render(|w| report(w, &p, &ReportOptions { value: 1, limit: 3, threads: false })));
        check_golden("report.txt", &out);
    }

    #[test]
    fn neighbors_golden() {
        let p = fixture::profile();
        let mut out = Vec::new();
        for (query, up) in
            [("run", false), ("burn_a", false), ("burn_a", true), ("main", true), ("burn", true)]
        {
            let n = if up { callers(&p, 0, query) } else { callees(&p, 0, query) }.unwrap();
            out.extend(render(|w| neighbors(w, &n, up, 20, Scale::Count)));
            out.push(b'\n');
        }
        out.extend(b"--- callees of run, limit 2 ---\n");
        out.extend(render(|w| neighbors(w, &callees(&p, 0, "run").unwrap(), false, 2, Scale::Count)));
        check_golden("neighbors.txt", &out);
    }
}
