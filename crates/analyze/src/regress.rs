//! Regressions over time: a lasting rise in a function's share of CPU (self or total) or in a doctor
//! finding's impact, found by comparing the newest windows of a target with a baseline of its earlier
//! windows, with the statistics `compare` uses (the Mann-Whitney U test and a bootstrap interval of the
//! medians' shift, both at 95%), plus a minimum shift in points.
//!
//! Shares are of each window's own CPU samples, so a load swing that only changes how much CPU the
//! target uses changes none of them. Each change is reported once: once found, the changed windows
//! become the baseline (the new level is the normal one from then on). A window of another build (a
//! deploy) is compared with the previous build's windows, and then starts a new baseline of its own.
//! Windows mixing builds (a rolling deploy cut through), windows with too few samples and windows cut
//! short (the agent started or stopped within them: a part of the period, at the agent's own start-up
//! or shutdown) are skipped.
//!
//! Pure and deterministic: the windows go in, the regressions come out.

use crate::doctor::Finding;
use crate::stats;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use whyslow_model::{sample_types, Profile, NONE};

/// Functions under this share (percent of a window's CPU samples, self and total) are not kept for the
/// window: one under it everywhere cannot have grown by [`Config::min_points`].
pub const TRACKED_PCT: f64 = 1.0;

/// One window of a target, as the detector sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowStat {
    pub start_ns: u64,
    pub end_ns: u64,
    /// What ran: the main executables' build ids (comma-separated when processes differ), the target's
    /// `version` label in front when it has one; "" when unknown.
    pub build: String,
    /// CPU samples the shares are of.
    pub samples: i64,
    /// Function name -> (self %, total %) of the window's CPU samples.
    pub functions: BTreeMap<String, (f64, f64)>,
    /// Rule id -> impact % of the doctor's findings in the window.
    pub findings: BTreeMap<String, f64>,
}

/// The window's shares and findings; None when it has no CPU samples.
pub fn window_stat(p: &Profile, findings: &[Finding], build: &str) -> Option<WindowStat> {
    let v = p.sample_type(sample_types::CPU)?;
    let n = p.cpu_samples()?;
    // Each stack is walked once (a window's samples share few stacks), its functions counted by name
    // slot: a name's frames (lines, inlined copies, modules) are one function.
    let mut by_stack: HashMap<u32, i64> = HashMap::new();
    for s in p.samples.iter().filter(|s| s.stack != NONE && s.values[v] != 0) {
        *by_stack.entry(s.stack).or_default() += s.values[v];
    }
    let mut slots: HashMap<&str, usize> = HashMap::new();
    let slot_of: Vec<usize> = (0..p.frames.len() as u32)
        .map(|f| {
            let next = slots.len();
            *slots.entry(p.frame_name(f)).or_insert(next)
        })
        .collect();
    let (mut selfs, mut totals) = (vec![0i64; slots.len()], vec![0i64; slots.len()]);
    let mut seen: Vec<usize> = Vec::new();
    for (&leaf, &x) in &by_stack {
        seen.clear();
        let mut node = leaf;
        while node != NONE {
            let n = p.stacks[node as usize];
            seen.push(slot_of[n.frame as usize]);
            node = n.parent;
        }
        selfs[seen[0]] += x;
        seen.sort_unstable();
        seen.dedup();
        for &f in &seen {
            totals[f] += x;
        }
    }
    let pct = |x: i64| 100.0 * x as f64 / n as f64;
    let functions = slots
        .into_iter()
        .filter(|&(_, i)| totals[i] != 0)
        .map(|(name, i)| (name.to_string(), (pct(selfs[i]), pct(totals[i]))))
        .filter(|(_, (s, t))| *s >= TRACKED_PCT || *t >= TRACKED_PCT)
        .collect();
    Some(WindowStat {
        start_ns: p.meta.start_unix_ns,
        end_ns: p.meta.start_unix_ns + p.meta.duration_ns,
        build: build.to_string(),
        samples: n,
        functions,
        findings: findings.iter().map(|f| (f.id.to_string(), f.impact_pct)).collect(),
    })
}

/// The build ids of the main executables in a profile: the modules holding `main`, `main.main` or
/// `_start` frames of at least 1% of the CPU samples, sorted, each once ("" for a module without one).
pub fn main_builds(p: &Profile) -> Vec<String> {
    let Some(v) = p.sample_type(sample_types::CPU) else { return Vec::new() };
    let mut weight: BTreeMap<u32, i64> = BTreeMap::new();
    for s in &p.samples {
        if s.stack == NONE || s.values[v] == 0 {
            continue;
        }
        let mut node = s.stack;
        let mut seen = Vec::new();
        while node != NONE {
            let n = p.stacks[node as usize];
            let f = &p.frames[n.frame as usize];
            if f.module != NONE
                && matches!(p.str(f.name), "main" | "main.main" | "_start")
                && !seen.contains(&f.module)
            {
                seen.push(f.module);
                *weight.entry(f.module).or_default() += s.values[v];
            }
            node = n.parent;
        }
    }
    let total = p.total(v).max(1);
    let mut ids: Vec<String> = weight
        .into_iter()
        .filter(|&(_, w)| w * 100 >= total)
        .map(|(m, _)| p.modules[m as usize].build_id.clone())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// How the detector decides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// Windows a baseline needs before anything is compared with it.
    pub min_baseline: usize,
    /// Windows a baseline keeps (the newest).
    pub max_baseline: usize,
    /// The newest windows compared with the baseline: a change is found within this many windows.
    pub after: usize,
    /// The smallest rise of a median, in points of share (or of impact), that counts.
    pub min_points: f64,
    /// Windows with fewer CPU samples are skipped.
    pub min_samples: i64,
    /// How many standard errors of sampling the newest windows' pooled share must stand above the
    /// baseline's median: windows of few samples (a light load) scatter widely, and the rank test
    /// alone, with many functions tested at every window, would take that scatter for a change.
    pub min_z: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config { min_baseline: 8, max_baseline: 60, after: 2, min_points: 5.0, min_samples: 100, min_z: 4.0 }
    }
}

/// One measure that rose.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// `self` or `total` (a function's share of CPU), or `finding` (a rule's impact).
    pub measure: &'static str,
    /// The function name or rule id.
    pub subject: String,
    /// Medians over the baseline's and the newest windows, in percent.
    pub before_pct: f64,
    pub after_pct: f64,
    /// 95% bootstrap interval of the medians' shift, in points.
    pub ci: (f64, f64),
    /// Two-sided Mann-Whitney p value.
    pub p: f64,
}

/// A lasting change, reported once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Regression {
    /// The function (or rule) named first: the largest rise in self share, else in total share, else
    /// in impact.
    pub subject: String,
    pub measure: &'static str,
    /// Every measure that rose: the one named first, then the largest shift first.
    pub changes: Vec<Change>,
    pub before_from_ns: u64,
    pub before_until_ns: u64,
    pub after_from_ns: u64,
    pub after_until_ns: u64,
    pub before_windows: usize,
    pub after_windows: usize,
    pub before_build: String,
    pub after_build: String,
    /// The newest windows are of another build than the baseline.
    pub deploy: bool,
}

/// The detector of one target: feed it each window in order.
#[derive(Debug, Clone)]
pub struct Detector {
    cfg: Config,
    baseline: VecDeque<WindowStat>,
    recent: VecDeque<WindowStat>,
    /// The build of the last window taken.
    build: Option<String>,
    /// The baseline's build, while the first windows of a new build wait to be compared with it.
    deploy_from: Option<String>,
}

impl Detector {
    pub fn new(cfg: Config) -> Self {
        Detector { cfg, baseline: VecDeque::new(), recent: VecDeque::new(), build: None, deploy_from: None }
    }

    /// Windows in the baseline now.
    pub fn baseline_len(&self) -> usize {
        self.baseline.len()
    }

    /// Takes the next window; returns the regression it completes, if any.
    pub fn push(&mut self, w: WindowStat) -> Option<Regression> {
        let typical = typical_length(self.baseline.iter().chain(&self.recent));
        if !usable(&self.cfg, &w, typical) {
            return None;
        }
        match self.build.clone() {
            Some(b) if b != w.build => {
                if self.deploy_from.is_none() {
                    let old: Vec<WindowStat> = self.recent.drain(..).collect();
                    self.extend_baseline(old);
                    if self.baseline.len() >= self.cfg.min_baseline {
                        self.deploy_from = Some(b);
                    } else {
                        self.baseline.clear();
                    }
                } else {
                    // A third build before the second was judged: its windows are dropped.
                    self.recent.clear();
                }
            }
            _ => {}
        }
        self.build = Some(w.build.clone());
        self.recent.push_back(w);
        if self.recent.len() < self.cfg.after {
            return None;
        }
        while self.recent.len() > self.cfg.after {
            let w = self.recent.pop_front().expect("longer than after");
            self.extend_baseline([w]);
        }
        let found = (self.baseline.len() >= self.cfg.min_baseline).then(|| self.test()).flatten();
        if found.is_some() || self.deploy_from.is_some() {
            // The new level (or build) is the normal one from now on.
            self.baseline = self.recent.drain(..).collect();
            self.deploy_from = None;
        }
        found
    }

    fn extend_baseline(&mut self, w: impl IntoIterator<Item = WindowStat>) {
        self.baseline.extend(w);
        while self.baseline.len() > self.cfg.max_baseline {
            self.baseline.pop_front();
        }
    }

    /// The measures of the newest windows that rose against the baseline.
    fn test(&mut self) -> Option<Regression> {
        compare_windows(&self.cfg, self.baseline.make_contiguous(), self.recent.make_contiguous())
    }
}

/// The measures of `after` that rose against `before` (a baseline of one's choosing: the previous day,
/// a range before a change), by the detector's rules; windows with fewer than `min_samples` or of mixed
/// builds are left out. The regression is a deploy when the last windows' builds differ.
pub fn compare_windows(cfg: &Config, before: &[WindowStat], after: &[WindowStat]) -> Option<Regression> {
    let typical = typical_length(before.iter().chain(after));
    let before: Vec<&WindowStat> = before.iter().filter(|w| usable(cfg, w, typical)).collect();
    let after: Vec<&WindowStat> = after.iter().filter(|w| usable(cfg, w, typical)).collect();
    if before.len() < 2 || after.is_empty() {
        return None;
    }
    type Get = fn(&WindowStat, &str) -> f64;
    let measures: [(&'static str, Get); 3] = [
        ("self", |w, k| w.functions.get(k).map_or(0.0, |x| x.0)),
        ("total", |w, k| w.functions.get(k).map_or(0.0, |x| x.1)),
        ("finding", |w, k| w.findings.get(k).copied().unwrap_or(0.0)),
    ];
    let mut changes = Vec::new();
    for (measure, get) in measures {
        let mut subjects: Vec<&str> = after
            .iter()
            .flat_map(|w| -> Vec<&str> {
                if measure == "finding" {
                    w.findings.keys().map(String::as_str).collect()
                } else {
                    w.functions.keys().map(String::as_str).collect()
                }
            })
            .collect();
        subjects.sort_unstable();
        subjects.dedup();
        for k in subjects {
            let b: Vec<f64> = before.iter().map(|w| get(w, k)).collect();
            let a: Vec<f64> = after.iter().map(|w| get(w, k)).collect();
            let n: Vec<i64> = after.iter().map(|w| w.samples).collect();
            if let Some(c) = rose(cfg, measure, k, &b, &a, &n) {
                changes.push(c);
            }
        }
    }
    if changes.is_empty() {
        return None;
    }
    let shift = |c: &Change| c.after_pct - c.before_pct;
    changes.sort_by(|a, b| shift(b).total_cmp(&shift(a)).then(a.subject.cmp(&b.subject)));
    let named = ["self", "total", "finding"]
        .iter()
        .find_map(|m| changes.iter().position(|c| c.measure == *m))
        .expect("changes is not empty");
    let first = changes.remove(named);
    changes.insert(0, first);
    let first = &changes[0];
    let (b0, b1) = (before[0], before[before.len() - 1]);
    let (a0, a1) = (after[0], after[after.len() - 1]);
    Some(Regression {
        subject: first.subject.clone(),
        measure: first.measure,
        before_from_ns: b0.start_ns,
        before_until_ns: b1.end_ns,
        after_from_ns: a0.start_ns,
        after_until_ns: a1.end_ns,
        before_windows: before.len(),
        after_windows: after.len(),
        before_build: b1.build.clone(),
        after_build: a1.build.clone(),
        deploy: b1.build != a1.build,
        changes,
    })
}

/// The median length of `windows` (ns; None when there are none).
fn typical_length<'a>(windows: impl Iterator<Item = &'a WindowStat>) -> Option<f64> {
    let lengths: Vec<f64> = windows.map(|w| w.end_ns.saturating_sub(w.start_ns) as f64).collect();
    stats::median(&lengths)
}

/// Whether a window is compared: enough samples, one build, and not cut to less than half the
/// `typical` length (an agent's start or stop: the shares of its first or last moments).
fn usable(cfg: &Config, w: &WindowStat, typical: Option<f64>) -> bool {
    let length = w.end_ns.saturating_sub(w.start_ns) as f64;
    w.samples >= cfg.min_samples && !w.build.contains(',') && typical.is_none_or(|t| 2.0 * length >= t)
}

/// Whether `after` (windows of `samples` each) rose against `before`: by at least `min_points` in
/// median and `min_z` sampling errors in pooled share, significant by the Mann-Whitney test, with a
/// bootstrap interval of the shift above 0.
fn rose(
    cfg: &Config,
    measure: &'static str,
    subject: &str,
    before: &[f64],
    after: &[f64],
    samples: &[i64],
) -> Option<Change> {
    let (mb, ma) = (stats::median(before)?, stats::median(after)?);
    if ma - mb < cfg.min_points {
        return None;
    }
    let n: i64 = samples.iter().sum();
    let pooled = after.iter().zip(samples).map(|(v, &k)| v * k as f64).sum::<f64>() / n.max(1) as f64;
    let p = (pooled / 100.0).clamp(0.0, 1.0);
    let error = 100.0 * (p * (1.0 - p) / n.max(1) as f64).sqrt();
    if pooled - mb < cfg.min_z * error {
        return None;
    }
    let t = stats::mann_whitney(after, before)?;
    if t.p >= stats::ALPHA {
        return None;
    }
    let ci =
        stats::bootstrap_shift_ci(before, after, 0.95, stats::BOOTSTRAP_RESAMPLES, stats::BOOTSTRAP_SEED)?;
    (ci.0 > 0.0).then(|| Change {
        measure,
        subject: subject.to_string(),
        before_pct: mb,
        after_pct: ma,
        ci,
        p: t.p,
    })
}

#[cfg(test)]
mod tests {
    use super::{compare_windows, main_builds, window_stat, Config, Detector, WindowStat, TRACKED_PCT};
    use std::collections::BTreeMap;

    /// xorshift64*: reproducible draws for simulated windows.
    struct Rng(u64);
    impl Rng {
        fn unit(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A window of `n` samples drawn from the leaf `shares` (percent; each leaf called from `main`).
    fn window(rng: &mut Rng, i: u64, n: i64, shares: &[(&str, f64)], build: &str) -> WindowStat {
        let mut counts = vec![0i64; shares.len()];
        for _ in 0..n {
            let mut x = rng.unit() * 100.0;
            let mut k = shares.len() - 1;
            for (j, (_, s)) in shares.iter().enumerate() {
                if x < *s {
                    k = j;
                    break;
                }
                x -= s;
            }
            counts[k] += 1;
        }
        let mut functions = BTreeMap::new();
        functions.insert("main".to_string(), (0.0, 100.0));
        for ((name, _), c) in shares.iter().zip(counts) {
            let pct = 100.0 * c as f64 / n as f64;
            if pct >= TRACKED_PCT {
                functions.insert(name.to_string(), (pct, pct));
            }
        }
        WindowStat {
            start_ns: i * 1000,
            end_ns: i * 1000 + 1000,
            build: build.to_string(),
            samples: n,
            functions,
            findings: BTreeMap::new(),
        }
    }

    const STABLE: [(&str, f64); 5] = [("a", 50.0), ("b", 25.0), ("c", 15.0), ("d", 7.0), ("e", 3.0)];

    /// Regressions raised over `windows` stable windows of 100 to 1000 samples (the load swinging
    /// tenfold) from fixed shares.
    fn stable_run(cfg: Config, windows: u64) -> (usize, Detector) {
        let mut rng = Rng(0x1234_5678);
        let mut d = Detector::new(cfg);
        let mut raised = 0;
        for i in 0..windows {
            let n = 100 + (rng.unit() * 900.0) as i64;
            raised += d.push(window(&mut rng, i, n, &STABLE, "b1")).is_some() as usize;
        }
        (raised, d)
    }

    /// The false-positive rate on stable runs: none in 5000 windows (rule of three: below 0.06% per
    /// window at 95%). The rank test and interval alone, without the minimum shift and the sampling
    /// guard, take the scatter of light windows for changes (251 of the 5000 windows).
    #[test]
    fn stable_windows_raise_nothing_whatever_the_load() {
        let (raised, d) = stable_run(Config::default(), 5000);
        let bare = Config { min_points: 0.0, min_z: 0.0, ..Config::default() };
        let (unguarded, _) = stable_run(bare, 5000);
        eprintln!("stable: {raised} regressions in 5000 windows ({unguarded} without the guards)");
        assert_eq!(raised, 0);
        assert!(unguarded > 5, "the guards should be what keeps it at 0: {unguarded}");
        assert_eq!(d.baseline_len(), Config::default().max_baseline);
    }

    /// A new hot function is named once, within two windows of the change, and then becomes the
    /// baseline.
    #[test]
    fn a_new_hot_function_is_reported_once_within_two_windows() {
        let mut rng = Rng(99);
        let mut d = Detector::new(Config::default());
        let changed = [("a", 30.0), ("hot", 45.0), ("b", 15.0), ("c", 10.0)];
        let mut found = Vec::new();
        for i in 0..40u64 {
            let shares: &[(&str, f64)] = if i < 20 { &STABLE } else { &changed };
            if let Some(r) = d.push(window(&mut rng, i, 500, shares, "b1")) {
                found.push((i, r));
            }
        }
        assert_eq!(found.len(), 1, "{found:?}");
        let (i, r) = &found[0];
        assert!((20..=21).contains(i), "found at window {i}");
        assert_eq!((r.subject.as_str(), r.measure, r.deploy), ("hot", "self", false));
        assert_eq!((r.after_from_ns, r.after_windows), (20_000, 2));
        assert_eq!((r.changes[0].subject.as_str(), r.changes[0].measure), ("hot", "self"));
        assert!(r.changes[0].before_pct == 0.0 && (40.0..50.0).contains(&r.changes[0].after_pct), "{r:?}");
        // The falling function is no regression.
        assert!(r.changes.iter().all(|c| c.subject == "hot"), "{:?}", r.changes);
    }

    /// A function whose share drifts by less than the minimum shift is not reported, even when the
    /// shift is significant.
    #[test]
    fn small_shifts_are_not_regressions() {
        let mut rng = Rng(5);
        let mut d = Detector::new(Config::default());
        let nudged = [("a", 53.0), ("b", 22.0), ("c", 15.0), ("d", 7.0), ("e", 3.0)];
        for i in 0..60u64 {
            let shares: &[(&str, f64)] = if i < 20 { &STABLE } else { &nudged };
            assert!(d.push(window(&mut rng, i, 5000, shares, "b1")).is_none(), "window {i}");
        }
    }

    /// Windows cut short (an agent's restart) are not compared: two skewed ones raise nothing and stay
    /// out of the baseline, where the same two of full length are a regression.
    #[test]
    fn windows_cut_short_are_skipped() {
        let skewed = [("a", 70.0), ("b", 15.0), ("c", 10.0), ("d", 4.0), ("e", 1.0)];
        for (length, raised) in [(400, false), (1000, true)] {
            let mut rng = Rng(7);
            let mut d = Detector::new(Config::default());
            for i in 0..20u64 {
                assert!(d.push(window(&mut rng, i, 1000, &STABLE, "b1")).is_none(), "window {i}");
            }
            let before = d.baseline_len();
            let mut found = None;
            for i in 20..22u64 {
                let w = WindowStat { end_ns: i * 1000 + length, ..window(&mut rng, i, 1000, &skewed, "b1") };
                found = found.or(d.push(w));
            }
            assert_eq!(found.is_some(), raised, "length {length}: {found:?}");
            if !raised {
                assert_eq!(d.baseline_len(), before);
            }
        }
    }

    /// A deploy is compared with the previous build's windows (both named), then starts a new baseline:
    /// an unchanged deploy raises nothing, and the next build's change is found against it.
    #[test]
    fn deploys_are_compared_with_the_previous_build() {
        let mut rng = Rng(7);
        let mut d = Detector::new(Config::default());
        let changed = [("a", 20.0), ("hot", 60.0), ("b", 20.0)];
        let mut found = Vec::new();
        for i in 0..50u64 {
            let (shares, build): (&[(&str, f64)], &str) = match i {
                0..15 => (&STABLE, "v1"),
                // An unchanged deploy.
                15..30 => (&STABLE, "v2"),
                // One window mixing builds, skipped.
                30 => (&changed, "v2,v3"),
                _ => (&changed, "v3"),
            };
            if let Some(r) = d.push(window(&mut rng, i, 500, shares, build)) {
                found.push((i, r));
            }
        }
        assert_eq!(found.len(), 1, "{found:?}");
        let (i, r) = &found[0];
        assert_eq!(*i, 32);
        assert_eq!((r.subject.as_str(), r.deploy), ("hot", true));
        assert_eq!((r.before_build.as_str(), r.after_build.as_str()), ("v2", "v3"));
        // The baseline holds v2's windows only.
        assert_eq!((r.before_from_ns, r.before_windows), (15_000, 15));
        assert_eq!(d.baseline_len(), 17);
    }

    /// Two ranges of one's choosing: a changed range against a stable one is a regression (a deploy
    /// when the builds differ), a stable range against a stable one is not.
    #[test]
    fn chosen_ranges_are_compared_by_the_same_rules() {
        let mut rng = Rng(3);
        let changed = [("a", 30.0), ("hot", 45.0), ("b", 15.0), ("c", 10.0)];
        let day: Vec<WindowStat> = (0..30).map(|i| window(&mut rng, i, 400, &STABLE, "v1")).collect();
        let same: Vec<WindowStat> = (40..45).map(|i| window(&mut rng, i, 400, &STABLE, "v1")).collect();
        let worse: Vec<WindowStat> = (50..55).map(|i| window(&mut rng, i, 400, &changed, "v2")).collect();
        assert!(compare_windows(&Config::default(), &day, &same).is_none());
        let r = compare_windows(&Config::default(), &day, &worse).unwrap();
        assert_eq!((r.subject.as_str(), r.deploy, r.before_windows, r.after_windows), ("hot", true, 30, 5));
        assert_eq!((r.before_build.as_str(), r.after_build.as_str()), ("v1", "v2"));
        assert!(
            compare_windows(&Config::default(), &day[..1], &worse).is_none(),
            "one window is no baseline"
        );
    }

    #[test]
    fn a_new_finding_is_a_regression_too() {
        let mut rng = Rng(11);
        let mut d = Detector::new(Config::default());
        let mut found = Vec::new();
        for i in 0..30u64 {
            let mut w = window(&mut rng, i, 500, &STABLE, "b");
            if i >= 20 {
                w.findings.insert("tz-stat-storm".into(), 12.0 + (i % 3) as f64);
            }
            found.extend(d.push(w));
        }
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].subject.as_str(), found[0].measure), ("tz-stat-storm", "finding"));
    }

    #[test]
    fn window_stats_and_main_builds_come_from_the_profile() {
        use whyslow_model::{FrameKind, Metadata, ProfileBuilder, SampleType};
        let meta = Metadata { start_unix_ns: 5, duration_ns: 10, ..Default::default() };
        let mut b =
            ProfileBuilder::new(meta, vec![SampleType { name: "cpu".into(), unit: "samples".into() }]);
        let exe = b.module("/bin/app", "abcd");
        let libc = b.module("/lib/libc.so.6", "ffff");
        let main = b.frame("main", exe, "", FrameKind::User);
        let work = b.frame("work", exe, "", FrameKind::User);
        let memcpy = b.frame("memcpy", libc, "", FrameKind::User);
        let t = b.thread(1, 1, "app");
        let s1 = b.stack(&[main, work]);
        let s2 = b.stack(&[main, work, memcpy]);
        let s3 = b.stack(&[main]);
        // Recursion, and one name in two modules: each counts once in a stack's total.
        let work_lib = b.frame("work", libc, "", FrameKind::User);
        let s4 = b.stack(&[main, work, work_lib, work]);
        b.add_sample(s1, t, &[40]);
        b.add_sample(s2, t, &[30]);
        b.add_sample(s3, t, &[10]);
        b.add_sample(s4, t, &[15]);
        b.add_sample(s1, t, &[5]);
        let p = b.finish();
        let w = window_stat(&p, &[], "abcd").unwrap();
        assert_eq!((w.start_ns, w.end_ns, w.samples), (5, 15, 100));
        assert_eq!(w.functions["work"], (60.0, 90.0));
        assert_eq!(w.functions["memcpy"], (30.0, 30.0));
        assert_eq!(w.functions["main"], (10.0, 100.0));
        assert_eq!(w.functions.len(), 3);
        assert_eq!(main_builds(&p), ["abcd"]);
    }
}
