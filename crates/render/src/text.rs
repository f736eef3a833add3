//! Terminal tables: the run header, top functions, per-thread splits, callers and callees.

use crate::{pct, RenderError};
use std::io::Write;
use whyslow_analyze::{top_functions, FunctionStat, Neighbors};
use whyslow_model::{basename, Profile};

#[derive(Debug, Clone)]
pub struct ReportOptions {
    pub value: usize,
    pub limit: usize,
    pub threads: bool,
}

/// The run: command, event, duration, samples, lost events, unwinding completeness, notes.
pub fn header(w: &mut impl Write, p: &Profile, value: usize) -> Result<(), RenderError> {
    let m = &p.meta;
    writeln!(w, "whyslow: {}", m.command.join(" "))?;
    let total = p.total(value);
    let unwound = m.unwind.complete + m.unwind.partial;
    writeln!(
        w,
        "  {} @ {} Hz, {:.2} s, {} {} ({}), {} lost; stacks unwound completely: {:.1}% ({}/{})",
        m.event,
        m.frequency_hz,
        m.duration_ns as f64 / 1e9,
        total,
        p.sample_types[value].unit,
        p.sample_types[value].name,
        m.lost_samples,
        pct(m.unwind.complete as i64, unwound as i64),
        m.unwind.complete,
        unwound
    )?;
    if let Some(code) = m.exit_code {
        if code != 0 {
            writeln!(w, "  the command exited with status {code}")?;
        }
    }
    for n in &m.notes {
        writeln!(w, "  note: {n}")?;
    }
    Ok(())
}

fn functions_table(
    w: &mut impl Write,
    funcs: &[FunctionStat],
    total: i64,
    limit: usize,
) -> Result<(), RenderError> {
    writeln!(w, "{:>7} {:>9} {:>7} {:>9}  {:<60} module", "self%", "self", "total%", "total", "function")?;
    for f in funcs.iter().take(limit) {
        writeln!(
            w,
            "{:>6.2}% {:>9} {:>6.2}% {:>9}  {:<60} {}",
            pct(f.self_, total),
            f.self_,
            pct(f.total, total),
            f.total,
            f.name,
            basename(&f.module)
        )?;
    }
    if funcs.len() > limit {
        writeln!(w, "  ... {} more functions (--limit)", funcs.len() - limit)?;
    }
    Ok(())
}

/// Header and top-functions table; with `threads`, a thread table and each thread's top functions.
pub fn report(w: &mut impl Write, p: &Profile, o: &ReportOptions) -> Result<(), RenderError> {
    header(w, p, o.value)?;
    let total = p.total(o.value);
    if total == 0 {
        writeln!(w, "\nno {} samples", p.sample_types[o.value].name)?;
        return Ok(());
    }
    writeln!(w)?;
    functions_table(w, &top_functions(p, o.value), total, o.limit)?;
    if !o.threads {
        return Ok(());
    }
    let threads = whyslow_analyze::threads(p, o.value);
    writeln!(w, "\n{:>8} {:>8} {:<16} {:>9} {:>7}", "pid", "tid", "thread", "value", "share")?;
    for t in &threads {
        writeln!(w, "{:>8} {:>8} {:<16} {:>9} {:>6.2}%", t.pid, t.tid, t.name, t.value, pct(t.value, total))?;
    }
    for t in threads.iter().filter(|t| t.value > 0) {
        let mut sub = p.clone();
        let idx = p.threads.iter().position(|x| x.pid == t.pid && x.tid == t.tid).unwrap() as u32;
        sub.samples.retain(|s| s.thread == idx);
        writeln!(
            w,
            "\nthread {} '{}' (pid {}): {} ({:.2}%)",
            t.tid,
            t.name,
            t.pid,
            t.value,
            pct(t.value, total)
        )?;
        functions_table(w, &top_functions(&sub, o.value), t.value, o.limit.min(10))?;
    }
    Ok(())
}

/// A callers or callees listing with shares of the function's total, kcachegrind style.
pub fn neighbors(w: &mut impl Write, n: &Neighbors, callers: bool) -> Result<(), RenderError> {
    let f = &n.function;
    writeln!(w, "{} ({}): total {}, self {}", f.name, basename(&f.module), f.total, f.self_)?;
    if !n.also_matched.is_empty() {
        writeln!(w, "  (also matched: {})", n.also_matched.join(", "))?;
    }
    writeln!(w, "{} {:>9} {:>7}  function", if callers { "callers:" } else { "callees:" }, "value", "share")?;
    for e in &n.entries {
        writeln!(w, "         {:>9} {:>6.2}%  {}  [{}]", e.value, e.pct, e.name, basename(&e.module))?;
    }
    if n.own > 0 {
        let label = if callers { "[stack root]" } else { "[self]" };
        writeln!(w, "         {:>9} {:>6.2}%  {label}", n.own, pct(n.own, f.total))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{self, check_golden};

    #[test]
    fn report_golden() {
        let p = fixture::profile();
        let mut out = Vec::new();
        report(&mut out, &p, &ReportOptions { value: 0, limit: 20, threads: true }).unwrap();
        check_golden("report.txt", &out);
    }

    #[test]
    fn neighbors_golden() {
        let p = fixture::profile();
        let mut out = Vec::new();
        neighbors(&mut out, &whyslow_analyze::callees(&p, 0, "run").unwrap(), false).unwrap();
        neighbors(&mut out, &whyslow_analyze::callers(&p, 0, "burn_a").unwrap(), true).unwrap();
        check_golden("neighbors.txt", &out);
    }
}
