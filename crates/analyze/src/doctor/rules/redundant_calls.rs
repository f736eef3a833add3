//! redundant-calls (seed 003): a function called at a very high rate whose real work (a callee) runs at
//! least 100x less often: most calls return at once. Needs the exact call counts of the second phase.

use super::{finding, Text};
use crate::doctor::facts::{pct, Facts, Match};
use crate::doctor::thresholds::{REDUNDANT_CPU_PCT, REDUNDANT_RATIO};
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "redundant-calls",
    title: "a function is called far more often than it has work to do",
    why: "most calls find nothing to do and return at once, but each still pays the call, its checks and \
          its bookkeeping; the work callee runs only once per hundreds of calls",
    fix: "check the cheap condition at the caller before calling (e.g. only parse when a whole frame has \
          arrived), batch the calls, or remember that nothing changed since the last call",
    shrinks: "the frequently called function",
};

pub fn check(f: &Facts) -> Verdict {
    if !f.has_calls() {
        return Verdict::NeedsData("exact call counts of the hot functions (the live doctor's second phase)");
    }
    if !f.has_cpu() {
        return Verdict::NeedsData("CPU samples");
    }
    let secs = f.call_seconds().max(1e-9);
    // The worst pair: the caller with the most CPU in its own code.
    let mut best: Option<i64> = None;
    let mut evidence = Vec::new();
    for c in f.p.calls.iter().filter(|c| c.calls > 0) {
        let outer = f.cpu(&|x| x.name == c.name).value;
        let idle = f.cpu_self(&c.name);
        if pct(idle, f.cpu_total) < REDUNDANT_CPU_PCT {
            continue;
        }
        for (callee, _) in f.callees(&c.name) {
            let Some(work) = f.calls_of(&callee).filter(|&n| n > 0) else { continue };
            let ratio = c.calls as f64 / work as f64;
            if ratio < REDUNDANT_RATIO {
                continue;
            }
            if best.is_some_and(|b| b >= idle) {
                continue;
            }
            evidence = vec![
                format!("{} was called {} times ({:.0}/s while counted, slowed by the probes) but its work, {callee}, only {work} times: {ratio:.0} calls per unit of work", c.name, c.calls, c.calls as f64 / secs),
                format!("{} takes {:.1}% of CPU, {:.1}% in its own code", c.name, pct(outer, f.cpu_total), pct(idle, f.cpu_total)),
            ];
            let callers = f.cpu(&|x| x.name == c.name);
            if !callers.sites.is_empty() {
                evidence.push(format!("called from: {}", super::list(&callers.sites, f.cpu_total)));
            }
            best = Some(idle);
        }
    }
    match best {
        Some(idle) => {
            let m = Match { value: idle, pct: pct(idle, f.cpu_total), ..Default::default() };
            Verdict::Found(finding(f, &TEXT, &m, "cpu", Confidence::High, evidence))
        }
        None => Verdict::Clear,
    }
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;
    use whyslow_model::CallStat;

    fn with_counts(parse: u64, find: u64) -> whyslow_model::Profile {
        let mut p = profile(&[
            ("main;on_data;parse_frames", 40, 0),
            ("main;on_data;parse_frames;find_boundary", 10, 0),
            ("main;work", 50, 0),
        ]);
        for (name, calls) in [("parse_frames", parse), ("find_boundary", find)] {
            p.calls.push(CallStat { name: name.into(), calls, ..Default::default() });
        }
        p
    }

    #[test]
    fn fires_on_a_high_call_ratio_only() {
        assert_eq!(fired(super::check, &with_counts(1_000_000, 1_000)), Some(40.0));
        assert_eq!(fired(super::check, &with_counts(1_000, 1_000)), None);
        assert_eq!(fired(super::check, &profile(&[("main;parse_frames", 50, 0)])), None, "no call counts");
    }
}
