//! The always-on doctor: every stored window is diagnosed per target as it arrives, its findings stored
//! with their evidence, and each target's windows fed to a regression detector
//! ([`whyslow_analyze::regress`]). What it reports (a regression, a finding that started) is stored as
//! an event, served by the API and delivered to webhooks.
//!
//! The store is the queue, as for push (outbox.rs): a cursor (`doctor` among the windows' cursors) names
//! the last window diagnosed, so nothing is skipped while the doctor is busy and a restart goes on where
//! it stopped. Windows are taken a cut at a time (the windows of one recording session stored
//! together), and a target's windows of one cut are merged: a target of several processes is one
//! series. Only the cheap sources are read (the window's own samples); the second-phase probes of
//! `whyslow doctor` (exact call counts) are not run here. The detectors live in memory: at start each
//! target's last windows before the cursor are replayed through its detector (nothing reported
//! again), so a restart of the agent keeps its baselines.
//!
//! Memory in use is judged over windows: each window holds what its processes held at its end (not a
//! series), so a target's last [`MEMORY_WINDOWS`] windows are kept per call site and the memory-growth
//! rule fits their series ([`whyslow_analyze::doctor::memory_growth_across_windows`]); steady growth is a
//! finding of every window it holds in, and its start is reported as a regression too.

use crate::outbox::{Outbox, Outcome, Reader};
use crate::shared::{merged, Shared};
use crate::store::{FindingRow, Queue, StoreError, WindowRow};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use whyslow_analyze::regress::{self, Detector, Regression};

/// The cursor (over the windows, beside the push backends') the doctor keeps its place under.
pub const CURSOR: &str = "doctor";
/// A finding absent from this many windows before is reported as started again.
const RESTART_WINDOWS: u64 = 3;
/// Windows of in-use memory the memory-growth rule fits (10 minutes of 10 s windows).
const MEMORY_WINDOWS: usize = 60;
/// The rule id whose findings come from the windows' series, not from one window.
const MEMORY_GROWTH: &str = "memory-growth";

/// One series' state: a target's windows of one set of sample types.
struct TargetState {
    detector: Detector,
    /// Windows seen, and the window each rule was last found in.
    seq: u64,
    last_seen: HashMap<String, u64>,
    /// The last windows' in-use by call site: (start, end, sites), oldest first.
    memory: VecDeque<(u64, u64, Vec<whyslow_analyze::doctor::SiteInUse>)>,
}

pub fn run(s: Arc<Shared>) {
    let outbox = Outbox { queue: Queue::Windows, name: CURSOR.to_string(), what: "doctor".to_string() };
    let cursor = match outbox.cursor(&s) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("whyslow serve: the doctor cannot start: {e}");
            return;
        }
    };
    let mut doctor = Doctor { states: HashMap::new() };
    replay(&s, cursor, &mut doctor.states);
    outbox.drain(&s, cursor, &mut doctor);
}

/// The doctor's end of the windows queue: each target's series.
struct Doctor {
    states: HashMap<(i64, String), TargetState>,
}

impl Reader for Doctor {
    /// The windows of one cut, each with its targets.
    type Batch = Vec<(WindowRow, Vec<i64>)>;

    fn next(&mut self, s: &Shared, cursor: i64) -> Result<Option<(Self::Batch, i64)>, StoreError> {
        let cut = s.store.lock().expect("store lock").cut_after(cursor)?;
        Ok(cut.last().map(|w| w.0.id).map(|last| (cut, last)))
    }

    fn deliver(&mut self, s: &Shared, cut: Self::Batch) -> Outcome {
        let t0 = thread_cpu_seconds();
        let mut by_target: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (row, targets) in &cut {
            for &t in targets {
                by_target.entry(t).or_default().push(row.id);
            }
        }
        for (target, ids) in by_target {
            let spec = s.targets.read().expect("targets lock").get(&target).cloned();
            let Some(spec) = spec else { continue };
            match merged(s, &ids) {
                Ok(p) => diagnose(s, target, &spec, &p, &mut self.states, true),
                Err(e) => eprintln!("whyslow serve: doctor: {e}"),
            }
        }
        s.doctor.lock().expect("doctor lock").cpu_seconds += thread_cpu_seconds() - t0;
        Outcome::Delivered
    }
}

/// Rebuilds each target's detector from its windows up to the cursor (as many as a baseline holds).
fn replay(s: &Shared, cursor: i64, states: &mut HashMap<(i64, String), TargetState>) {
    let cfg = regress::Config::default();
    let targets = s.targets.read().expect("targets lock").clone();
    for (target, spec) in targets {
        let cuts =
            s.store.lock().expect("store lock").last_cuts(target, cursor, cfg.max_baseline + cfg.after);
        for ids in cuts.unwrap_or_default() {
            if s.stopping() {
                return;
            }
            if let Ok(p) = merged(s, &ids) {
                diagnose(s, target, &spec, &p, states, false);
            }
        }
    }
}

/// Diagnoses one target window: its findings and the events they raise are stored (unless `report`
/// is false: a replay), its statistics go to the target's detector.
fn diagnose(
    s: &Shared,
    target: i64,
    spec: &crate::spec::TargetSpec,
    p: &whyslow_model::Profile,
    states: &mut HashMap<(i64, String), TargetState>,
    report: bool,
) {
    let name = spec.name.clone().unwrap_or_else(|| format!("target {target}"));
    let mut d = whyslow_analyze::doctor::diagnose(p, &name);
    let (start, end) = (p.meta.start_unix_ns, p.meta.start_unix_ns + p.meta.duration_ns);
    // One series per target and set of sample types: a target whose processes are recorded by sessions
    // of different sources (another target asks more of some) gets windows of each at their own times,
    // which one series would alternate between.
    let series = p.sample_types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(",");
    let st = states.entry((target, series)).or_insert_with(|| TargetState {
        detector: Detector::new(regress::Config::default()),
        seq: 0,
        last_seen: HashMap::new(),
        memory: VecDeque::new(),
    });
    st.seq += 1;
    let growth = memory_growth(st, p, start, end);
    if p.sample_type(whyslow_model::sample_types::INUSE_BYTES).is_some() {
        // A window's in-use is one moment: its growth is judged over the windows.
        d.findings.retain(|f| f.id != MEMORY_GROWTH);
        d.findings.extend(growth.clone());
        d.findings.sort_by(|a, b| b.impact_pct.total_cmp(&a.impact_pct).then(a.id.cmp(b.id)));
    }
    let mut events = Vec::new();
    let rows: Vec<FindingRow> = d
        .findings
        .iter()
        .map(|f| FindingRow {
            target,
            start_ns: start,
            end_ns: end,
            rule: f.id.to_string(),
            title: f.title.clone(),
            impact_pct: f.impact_pct,
            impact_of: f.impact_of.to_string(),
            confidence: serde_json::to_value(f.confidence)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            evidence: f.evidence.clone(),
        })
        .collect();
    let mut memory_regression = None;
    for f in &d.findings {
        let before = st.last_seen.insert(f.id.to_string(), st.seq);
        if before.is_none_or(|b| st.seq - b > RESTART_WINDOWS) {
            if f.id == MEMORY_GROWTH && growth.is_some() {
                memory_regression = Some(memory_regression_json(target, spec.name.as_deref(), st, f));
            }
            let body = serde_json::json!({
                "event": "finding",
                "target": target,
                "target_name": spec.name,
                "rule": f.id,
                "title": f.title,
                "impact_pct": f.impact_pct,
                "impact_of": f.impact_of,
                "confidence": f.confidence,
                "evidence": f.evidence,
                "window": { "from_ns": start, "until_ns": end },
            });
            events.push((target, end, "finding", body.to_string()));
        }
    }
    let build = build_of(p, spec);
    let regression = regress::window_stat(p, &d.findings, &build).and_then(|w| st.detector.push(w));
    if !report {
        return;
    }
    if let Some(r) = &regression {
        let body = regression_json(target, spec.name.as_deref(), r);
        eprintln!(
            "whyslow serve: regression in {name}: {} {} share {:.1}% -> {:.1}%{}",
            r.subject,
            r.measure,
            r.changes[0].before_pct,
            r.changes[0].after_pct,
            if r.deploy {
                format!(" (deploy {} -> {})", r.before_build, r.after_build)
            } else {
                String::new()
            }
        );
        events.push((target, r.after_until_ns, "regression", body.to_string()));
    }
    if let Some(body) = &memory_regression {
        eprintln!("whyslow serve: regression in {name}: memory in use grows steadily ({})", body["function"]);
        events.push((target, end, "regression", body.to_string()));
    }
    let stored = s.store.lock().expect("store lock").add_findings(&rows, &events);
    s.store_result(&stored);
    match stored {
        Ok(_) if !events.is_empty() => s.queued.ring(),
        Ok(_) => {}
        Err(e) => eprintln!("whyslow serve: doctor: the findings of {name} are lost: {e}"),
    }
    let mut stats = s.doctor.lock().expect("doctor lock");
    stats.windows += 1;
    for (key, v) in stats.impacts.iter_mut() {
        if key.0 == target {
            *v = 0.0;
        }
    }
    for f in &d.findings {
        stats.impacts.insert((target, f.id.to_string()), f.impact_pct);
    }
    if regression.is_some() {
        *stats.regressions.entry(target).or_default() += 1;
    }
    if memory_regression.is_some() {
        *stats.regressions.entry(target).or_default() += 1;
    }
}

/// Keeps window [start, end)'s in-use by call site in the target's series and judges its growth over
/// the series (None without in-use memory or without steady growth).
fn memory_growth(
    st: &mut TargetState,
    p: &whyslow_model::Profile,
    start: u64,
    end: u64,
) -> Option<whyslow_analyze::doctor::Finding> {
    p.sample_type(whyslow_model::sample_types::INUSE_BYTES)?;
    st.memory.push_back((start, end, whyslow_analyze::doctor::sites_in_use(p)));
    while st.memory.len() > MEMORY_WINDOWS {
        st.memory.pop_front();
    }
    let history: Vec<(f64, Vec<whyslow_analyze::doctor::SiteInUse>)> =
        st.memory.iter().map(|(_, end, sites)| (*end as f64 / 1e9, sites.clone())).collect();
    whyslow_analyze::doctor::memory_growth_across_windows(&history, crate::tracked::MEM_SAMPLE_BYTES)
}

/// Steady growth of memory in use as a regression event: the call site growing fastest, the first and
/// the last window of the series it was found over (with the diff of their in-use: what grew between),
/// and the finding's evidence.
fn memory_regression_json(
    target: i64,
    name: Option<&str>,
    st: &TargetState,
    f: &whyslow_analyze::doctor::Finding,
) -> serde_json::Value {
    let (first, last) = (st.memory.front(), st.memory.back());
    let span =
        |w: Option<&(u64, u64, Vec<whyslow_analyze::doctor::SiteInUse>)>| w.map_or((0, 0), |w| (w.0, w.1));
    let ((bf, bu), (af, au)) = (span(first), span(last));
    // The site named first in the evidence ("grows X/s (...) under SITE (PATH), ...").
    let site = f
        .evidence
        .iter()
        .find_map(|e| e.split(" under ").nth(1)?.split(" (").next().map(str::to_string))
        .unwrap_or_default();
    // The change as the other regressions give theirs: the site's share of what was in use, at the first
    // and at the last window of the series (a level's change: no interval or p of a comparison).
    let share = |w: Option<&(u64, u64, Vec<whyslow_analyze::doctor::SiteInUse>)>| {
        let sites = w.map(|w| w.2.as_slice()).unwrap_or_default();
        let total: i64 = sites.iter().map(|s| s.bytes).sum();
        let held = sites.iter().find(|s| s.site == site).map_or(0, |s| s.bytes);
        if total > 0 {
            100.0 * held as f64 / total as f64
        } else {
            0.0
        }
    };
    let change = serde_json::json!({
        "measure": MEMORY_GROWTH, "subject": site, "before_pct": share(first), "after_pct": share(last),
        "ci": null, "p": null,
    });
    let secs = |ns: u64| format!("{:.3}", ns as f64 / 1e9);
    let diff = format!(
        "/api/v1/diff?target={target}&type=inuse-bytes&before_from={}&before_until={}&after_from={}&after_until={}",
        secs(bf),
        secs(bu),
        secs(af),
        secs(au)
    );
    serde_json::json!({
        "event": "regression",
        "target": target,
        "target_name": name,
        "function": site,
        "measure": MEMORY_GROWTH,
        "before": { "from_ns": bf, "until_ns": bu, "windows": 1, "build": "" },
        "after": { "from_ns": af, "until_ns": au, "windows": 1, "build": "" },
        "windows": st.memory.len(),
        "deploy": false,
        "changes": [change],
        "evidence": f.evidence,
        "diff": diff,
        "diff_svg": format!("{diff}&format=svg"),
    })
}

/// What ran in a window: the main executables' build ids, behind the target's `version` label if any.
fn build_of(p: &whyslow_model::Profile, spec: &crate::spec::TargetSpec) -> String {
    let build = regress::main_builds(p).join(",");
    match spec.labels.get("version") {
        Some(v) => format!("version={v} {build}").trim_end().to_string(),
        None => build,
    }
}

/// Most windows one on-demand comparison reads per range.
pub const MAX_RANGE_WINDOWS: usize = 2000;

/// The detector's view of target `target`'s windows overlapping [from, until), one per cut (windows
/// of one start merged), oldest first; None when the range holds more than [`MAX_RANGE_WINDOWS`].
pub fn window_stats(
    s: &Shared,
    target: i64,
    spec: &crate::spec::TargetSpec,
    from: u64,
    until: u64,
) -> Result<Option<Vec<regress::WindowStat>>, crate::store::StoreError> {
    let rows = s.store.lock().expect("store lock").windows(&[target], from, until)?;
    if rows.len() > MAX_RANGE_WINDOWS {
        return Ok(None);
    }
    let mut out = Vec::new();
    for cut in rows.chunk_by(|a, b| a.start_ns == b.start_ns) {
        let ids: Vec<i64> = cut.iter().map(|w| w.id).collect();
        let p = merged(s, &ids)?;
        let d = whyslow_analyze::doctor::diagnose(&p, "range");
        out.extend(regress::window_stat(&p, &d.findings, &build_of(&p, spec)));
    }
    Ok(Some(out))
}

/// A regression as the API serves it and webhooks get it: what rose, the two ranges (with links to
/// their diff), and the builds on each side.
pub fn regression_json(target: i64, name: Option<&str>, r: &Regression) -> serde_json::Value {
    let secs = |ns: u64| format!("{:.3}", ns as f64 / 1e9);
    let diff = format!(
        "/api/v1/diff?target={target}&before_from={}&before_until={}&after_from={}&after_until={}",
        secs(r.before_from_ns),
        secs(r.before_until_ns),
        secs(r.after_from_ns),
        secs(r.after_until_ns)
    );
    let what = if r.measure == "finding" { "rule" } else { "function" };
    serde_json::json!({
        "event": "regression",
        "target": target,
        "target_name": name,
        what: r.subject,
        "measure": r.measure,
        "before": {
            "from_ns": r.before_from_ns, "until_ns": r.before_until_ns,
            "windows": r.before_windows, "build": r.before_build,
        },
        "after": {
            "from_ns": r.after_from_ns, "until_ns": r.after_until_ns,
            "windows": r.after_windows, "build": r.after_build,
        },
        "deploy": r.deploy,
        "changes": r.changes,
        "diff": diff,
        "diff_svg": format!("{diff}&format=svg"),
    })
}

/// CPU seconds this thread has used.
fn thread_cpu_seconds() -> f64 {
    whyslow_record::thread_cpu_ns() as f64 / 1e9
}

/// Adds the doctor's families to /metrics.
pub fn metrics(s: &Shared, o: &mut crate::prom::Out) {
    if !s.opts.doctor {
        return;
    }
    let st = s.doctor.lock().expect("doctor lock").clone();
    o.sample(
        "whyslow_doctor_windows_total",
        "counter",
        "Target windows the always-on doctor diagnosed.",
        &[],
        st.windows.to_string(),
    );
    o.sample(
        "whyslow_doctor_cpu_seconds_total",
        "counter",
        "CPU time the always-on doctor used.",
        &[],
        format!("{:.3}", st.cpu_seconds),
    );
    let (queued, _) = s.store.lock().expect("store lock").queue(Queue::Windows, CURSOR).unwrap_or_default();
    o.sample(
        "whyslow_doctor_queue_windows",
        "gauge",
        "Stored windows waiting for the always-on doctor.",
        &[],
        queued.to_string(),
    );
    let targets: Vec<i64> = s.targets.read().expect("targets lock").keys().copied().collect();
    for ((target, rule), v) in st.impacts.iter().filter(|((t, _), _)| targets.contains(t)) {
        o.sample(
            "whyslow_finding_impact_ratio",
            "gauge",
            "Impact of a doctor finding in the target's last window (share of CPU or wall time; 0: gone).",
            &[("target", &target.to_string()), ("rule", rule)],
            format!("{:.4}", v / 100.0),
        );
    }
    for t in targets {
        o.sample(
            "whyslow_regressions_total",
            "counter",
            "Regressions the always-on doctor reported.",
            &[("target", &t.to_string())],
            st.regressions.get(&t).copied().unwrap_or(0).to_string(),
        );
    }
}
