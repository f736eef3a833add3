//! The doctor: rules that read one profile and name the known performance anti-patterns in it, each with
//! its impact, the evidence behind it, why it is slow, the fix and how to verify the fix. Pure functions
//! of the profile (a live run and a saved recording are diagnosed alike); a rule whose data the profile
//! lacks says so instead of guessing. Thresholds live in [`thresholds`], one rule per module in `rules/`.

mod facts;
mod fail_on;
mod rules;
pub mod software;
pub mod thresholds;

pub use facts::{Facts, IdleThread, WallSplit};
pub use fail_on::FailOn;
pub use rules::memory_growth::{across_windows as memory_growth_across_windows, sites_in_use, SiteInUse};
use serde::Serialize;
use whyslow_model::Profile;

/// How sure a rule is that the pattern is there (not how big it is: that is the impact).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    Low,
    Medium,
    High,
}

/// One diagnosed anti-pattern.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Stable rule id (part of the JSON contract), e.g. `tz-stat-storm`.
    pub id: &'static str,
    pub title: String,
    /// Share of CPU time (rules about running code) or of wall time (rules about blocking) the pattern
    /// explains, in percent; for too few workers, the share of the CPUs it may use that no worker ran on.
    pub impact_pct: f64,
    /// What `impact_pct` is a share of: `cpu`, `wall`, `memory` or `cpus`.
    pub impact_of: &'static str,
    pub confidence: Confidence,
    /// The facts behind the finding: stacks, counts, rates, call sites.
    pub evidence: Vec<String>,
    pub why: String,
    pub fix: String,
    pub verify: String,
    /// Which case of its rule this is, for advice that fits that case only (`file` for small writes to
    /// a regular file, "" for a rule's general case); the title says it to people.
    #[serde(skip)]
    pub case: &'static str,
}

/// A heavy call path, for the user to read when no rule matches (and after the findings when some do).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotPath {
    /// Function names, outermost first.
    pub frames: Vec<String>,
    pub pct: f64,
    /// `cpu` or `wall` (blocked paths are shown when the profile has off-CPU time).
    pub of: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// Most impact first.
    pub findings: Vec<Finding>,
    pub hot_paths: Vec<HotPath>,
    /// Rules that could not run on this profile, with what they need.
    pub skipped: Vec<String>,
    /// Share of CPU samples taken inside whyslow's own probes (uprobes, eBPF), left out of every share.
    pub instrumentation_pct: f64,
    /// The threads' time by state (with off-CPU data): running, blocked, waiting for a CPU, and idle
    /// (waiting for work) apart; wall shares are of the first three.
    pub wall: Option<WallSplit>,
    /// Threads that mostly waited for work (one summary line, never findings or hot paths).
    pub idle_threads: Vec<IdleThread>,
    /// When the target waited for a CPU without wanting more CPUs than it has: the other processes that
    /// took them (one line), else None.
    pub cpu_contention: Option<String>,
}

/// What a rule says about a profile.
pub(crate) enum Verdict {
    Found(Finding),
    Clear,
    /// The profile lacks the data this rule needs (e.g. call counts, off-CPU time).
    NeedsData(&'static str),
    /// The run could not read what the rule needs, and why (no cgroup access, no schedstat).
    Unchecked(String),
}

/// Runs every rule; findings sorted by impact (then id, for a stable order). `recording` is the file the
/// profile is saved in, for the verification commands.
pub fn diagnose(p: &Profile, recording: &str) -> Diagnosis {
    let mut f = Facts::new(p);
    f.recording = recording.to_string();
    let mut findings = Vec::new();
    let mut skipped = Vec::new();
    for (id, rule) in rules::ALL {
        match rule(&f) {
            Verdict::Found(x) => findings.push(x),
            Verdict::Clear => {}
            Verdict::NeedsData(what) => skipped.push(format!("{id}: needs {what}")),
            Verdict::Unchecked(why) => skipped.push(format!("{id}: {why}")),
        }
    }
    software::advise(&f, &mut findings);
    findings.sort_by(|a, b| b.impact_pct.total_cmp(&a.impact_pct).then(a.id.cmp(b.id)));
    Diagnosis {
        findings,
        hot_paths: f.hot_paths(thresholds::HOT_PATHS),
        skipped,
        instrumentation_pct: f.instrumentation_pct(),
        wall: f.wall_split(),
        idle_threads: f.idle_threads(),
        cpu_contention: rules::cpu_oversubscription::contention(&f),
    }
}

/// Functions worth counting exactly in a second phase: the hottest user functions by self CPU time and
/// their heaviest callees in the same file (a caller/callee call ratio needs both).
pub fn call_candidates(p: &Profile) -> Vec<String> {
    Facts::new(p).call_candidates(thresholds::CANDIDATE_FUNCTIONS, thresholds::CANDIDATE_CALLEES)
}

/// Rule ids, in the order they run.
pub fn rule_ids() -> Vec<&'static str> {
    rules::ALL.iter().map(|(id, _)| *id).collect()
}
