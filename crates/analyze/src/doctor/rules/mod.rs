//! One module per rule; each reads [`Facts`] and returns a [`Verdict`]. Shared here: the shape of a
//! "too much CPU under these functions" rule and the wording of evidence and verification.

mod alloc_churn;
pub(crate) mod blocking_io;
mod cache_misses;
pub(crate) mod cpu_oversubscription;
mod cpu_throttling;
mod endpoint;
mod excess_copying;
mod gc_pressure;
mod gil_contention;
mod hot_logging;
mod hot_python_code;
mod jvm_runtime;
mod lock_contention;
pub(crate) mod memory_growth;
pub(crate) mod memory_pressure;
mod oom_killed;
mod protobuf_reflection;
mod python_c_extension;
mod redundant_calls;
mod reflection_dispatch;
mod repeated_lookups;
mod small_writes;
mod tiny_container_lookups;
mod tiny_reads;
mod too_few_workers;
mod tz_stat_storm;
mod unoptimized_build;

use super::facts::{Facts, Func, Match};
use super::thresholds::EVIDENCE_ROWS;
use super::{Confidence, Finding, Verdict};

pub type Rule = fn(&Facts) -> Verdict;

pub const ALL: [(&str, Rule); 26] = [
    ("tz-stat-storm", tz_stat_storm::check),
    ("repeated-lookups", repeated_lookups::check),
    ("hot-logging", hot_logging::check),
    ("small-writes", small_writes::check),
    ("tiny-reads", tiny_reads::check),
    ("alloc-churn", alloc_churn::check),
    ("excess-copying", excess_copying::check),
    ("protobuf-reflection", protobuf_reflection::check),
    ("reflection-dispatch", reflection_dispatch::check),
    ("gc-pressure", gc_pressure::check),
    ("jvm-runtime", jvm_runtime::check),
    ("redundant-calls", redundant_calls::check),
    ("tiny-container-lookups", tiny_container_lookups::check),
    ("unoptimized-build", unoptimized_build::check),
    ("lock-contention", lock_contention::check),
    ("gil-contention", gil_contention::check),
    ("hot-python-code", hot_python_code::check),
    ("python-c-extension", python_c_extension::check),
    ("blocking-io", blocking_io::check),
    ("cache-misses", cache_misses::check),
    ("cpu-throttling", cpu_throttling::check),
    ("memory-pressure", memory_pressure::check),
    ("memory-growth", memory_growth::check),
    ("oom-killed", oom_killed::check),
    ("cpu-oversubscription", cpu_oversubscription::check),
    ("too-few-workers", too_few_workers::check),
];

/// The words of a finding that do not depend on the numbers.
pub struct Text {
    pub id: &'static str,
    pub title: &'static str,
    pub why: &'static str,
    pub fix: &'static str,
    /// What should shrink after the fix (for the verify line).
    pub shrinks: &'static str,
}

/// "`a` 12.3%, `b` 4.5%" for the first rows of a ranked list, shares of `total`.
pub fn list(rows: &[(String, i64)], total: i64) -> String {
    rows.iter()
        .take(EVIDENCE_ROWS)
        .map(|(n, v)| format!("{n} ({:.1}%)", super::facts::pct(*v, total)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How to check the fix: run the doctor again and diff against this recording.
pub fn verify(f: &Facts, t: &Text) -> String {
    if f.p.is_imported() {
        // Nothing to re-run: the user takes the same kind of profile again after the fix.
        let before = if f.recording.contains("://") {
            "BEFORE AFTER` (both saved with `curl -o`)".to_string()
        } else {
            format!("{} AFTER`", f.recording)
        };
        return format!(
            "after the fix, take the profile again (AFTER): `whyslow doctor AFTER` no longer reports {}; \
             `whyslow diff {before} shows {} shrinking",
            t.id, t.shrinks
        );
    }
    let cmd = if f.p.meta.command.is_empty() { "CMD".to_string() } else { f.p.meta.command.join(" ") };
    let target =
        if f.p.meta.command.first().is_some_and(|c| c.starts_with('-')) { cmd } else { format!("-- {cmd}") };
    format!(
        "after the fix, `whyslow doctor -o after.data {target}` no longer reports {}; `whyslow diff {} \
         after.data` shows {} shrinking",
        t.id, f.recording, t.shrinks
    )
}

pub fn finding(
    f: &Facts,
    t: &Text,
    impact: &Match,
    of: &'static str,
    confidence: Confidence,
    evidence: Vec<String>,
) -> Finding {
    Finding {
        id: t.id,
        title: t.title.to_string(),
        impact_pct: (impact.pct * 10.0).round() / 10.0,
        impact_of: of,
        confidence,
        evidence,
        why: t.why.to_string(),
        fix: t.fix.to_string(),
        verify: verify(f, t),
        case: "",
    }
}

/// What a "too much time under these functions" rule looks for.
pub struct Share<'a> {
    pub pred: &'a dyn Fn(&Func) -> bool,
    /// Blocked (off-CPU) time as a share of wall time; otherwise CPU time as a share of CPU time.
    pub blocked: bool,
    pub min_pct: f64,
    /// Least value (ns) in all, for rules where a share of a short run means little.
    pub min_value: i64,
    pub confidence: Confidence,
    /// Evidence lines beyond where the time went and who called it.
    pub extra: &'a dyn Fn(&Facts) -> Vec<String>,
    /// Stacks through a function this matches are another rule's (blocked time only).
    pub except: &'a dyn Fn(&Func) -> bool,
    /// Leave out the blocked time of background workers (blocked time only; see
    /// [`Facts::background_thread_ids`]).
    pub foreground: bool,
    /// With `blocked` and `foreground`: the on-CPU time under the functions this matches counts too
    /// (the call's own work in the kernel, between its waits).
    pub running: Option<&'a dyn Fn(&Func) -> bool>,
}

impl<'a> Share<'a> {
    pub fn cpu(pred: &'a dyn Fn(&Func) -> bool, min_pct: f64) -> Share<'a> {
        Share {
            pred,
            blocked: false,
            min_pct,
            min_value: 0,
            confidence: Confidence::High,
            extra: &|_| Vec::new(),
            except: &|_| false,
            foreground: false,
            running: None,
        }
    }

    pub fn blocked(pred: &'a dyn Fn(&Func) -> bool, min_pct: f64) -> Share<'a> {
        Share { blocked: true, ..Share::cpu(pred, min_pct) }
    }
}

/// Fires when the time under the functions `s.pred` matches reaches the thresholds; the evidence says
/// where it went and which user code called into it.
pub fn share_rule(f: &Facts, t: &Text, s: Share) -> Verdict {
    let (m, total, of) = match s.blocked {
        true if !f.has_offcpu() => return Verdict::NeedsData("off-CPU time (record --offcpu)"),
        false if !f.has_cpu() => return Verdict::NeedsData("CPU samples"),
        true if s.foreground => (f.blocked_in_foreground_except(s.pred, s.except), f.wall_total, "wall"),
        true => (f.blocked_except(s.pred, s.except), f.wall_total, "wall"),
        false => (f.cpu(s.pred), f.cpu_total, "cpu"),
    };
    let running = match s.running {
        Some(pred) if s.blocked && s.foreground => f.running_in_foreground_except(pred, s.except),
        _ => Match::default(),
    };
    let (blocked, m) = (m.pct, m.plus(&running));
    if m.pct < s.min_pct || m.value < s.min_value {
        return Verdict::Clear;
    }
    let (what, split) = match (s.blocked, running.value) {
        (false, _) => ("of CPU time is spent in", String::new()),
        (true, 0) => ("of the threads' wall time is spent blocked in", String::new()),
        (true, _) => (
            "of the threads' wall time is spent in",
            format!(" ({blocked:.1}% blocked, {:.1}% on CPU)", running.pct),
        ),
    };
    let mut evidence = vec![format!("{:.1}% {what}: {}{split}", m.pct, list(&m.entries, total))];
    if !m.sites.is_empty() {
        evidence.push(format!("called from: {}", list(&m.sites, total)));
    }
    evidence.extend((s.extra)(f));
    Verdict::Found(finding(f, t, &m, of, s.confidence, evidence))
}

/// A rule that fires when the CPU share under functions `pred` matches reaches `min_pct`.
pub fn cpu_share_rule(f: &Facts, t: &Text, min_pct: f64, pred: &dyn Fn(&Func) -> bool) -> Verdict {
    share_rule(f, t, Share::cpu(pred, min_pct))
}

/// Whether `name` is one of `names` or starts with one of `prefixes`.
pub fn named(name: &str, names: &[&str], prefixes: &[&str]) -> bool {
    names.contains(&name) || prefixes.iter().any(|p| name.starts_with(p))
}

#[cfg(test)]
pub mod tests {
    use crate::doctor::{Facts, Verdict};
    use whyslow_model::Profile;

    /// Runs a rule on a profile: Some(impact) when it fired.
    pub fn fired(rule: super::Rule, p: &Profile) -> Option<f64> {
        match rule(&Facts::new(p)) {
            Verdict::Found(x) => Some(x.impact_pct),
            _ => None,
        }
    }
}
