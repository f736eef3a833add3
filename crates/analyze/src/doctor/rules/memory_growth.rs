//! memory-growth: memory in use keeps growing over the run (a leak, or a cache without a bound): the
//! in-use series grows steadily, still in its second half, under the call sites named by their first
//! function of user code. Memory that is large but levels off is not a finding.
//!
//! An agent's windows each hold what is in use at their end, not a series: [`across_windows`] judges the
//! series of a target's windows by the same rule (each call site's level at each window's end).

use super::Text;
use crate::doctor::facts::Facts;
use crate::doctor::thresholds::{MEMORY_GROWTH_MIN_BYTES, MEMORY_GROWTH_MIN_SECS, MEMORY_GROWTH_STEADY};
use crate::doctor::{Confidence, Finding, Verdict};
use crate::memory::{growth, growth_at, in_use_series, Growth};
use std::collections::{BTreeMap, HashMap};
use whyslow_model::{sample_types, Profile, Sample};

const TEXT: Text = Text {
    id: "memory-growth",
    title: "memory in use keeps growing (a leak or an unbounded cache)",
    why: "memory that is allocated and never freed, or kept in a container that only grows, adds up \
          until the process is killed for it (the OOM killer, a container's memory limit) or slows down \
          in swap; the longer it runs, the more it holds",
    fix: "free on every path, error paths included (or hold it in an owner: a smart pointer, a guard, \
          defer); bound caches and queues (a size or age limit with eviction, an LRU); drop per-request \
          state when the request ends; clear maps keyed by ids that never repeat",
    shrinks: "in-use memory under the growing call sites (`whyslow report --type inuse-bytes`)",
};

/// The first function of user code from the allocation outward (the allocator's own frames and system
/// libraries are not where a fix goes); the outermost frame when there is none.
fn site(f: &Facts, stack: u32) -> (String, Vec<String>) {
    let frames = f.p.stack_frames(stack);
    let names: Vec<String> = frames.iter().map(|&id| f.p.frame_name(id).to_string()).collect();
    let at = frames.iter().rposition(|&id| f.frame_func(id).is_user_code()).unwrap_or(0);
    (names.get(at).cloned().unwrap_or_default(), names)
}

/// `main > … > cache_put > malloc`: the outermost frame, the site and what it called.
fn path(names: &[String], site: &str) -> String {
    let at = names.iter().rposition(|n| n == site).unwrap_or(0);
    let mut shown: Vec<&str> = Vec::new();
    if at > 0 {
        shown.push(&names[0]);
        if at > 1 {
            shown.push("…");
        }
    }
    shown.extend(names[at..].iter().take(2).map(String::as_str));
    shown.join(" > ")
}

/// The growth of `series` over the run and over its second half, when both surely grow and the second
/// half keeps at least [`MEMORY_GROWTH_STEADY`] of the run's rate (memory that fills up and then stays
/// is bounded, however fast it filled).
fn steady(series: &[i64]) -> Option<(Growth, Growth)> {
    steady_with(series, growth)
}

/// [`steady`] with the slope taken by `fit` (over slices, or over windows at their times).
fn steady_with(series: &[i64], fit: impl Fn(&[i64]) -> Option<Growth>) -> Option<(Growth, Growth)> {
    let whole = fit(series)?;
    let late = fit(&series[series.len() / 2..])?;
    (whole.surely_grows() && late.surely_grows() && late.per_sec >= MEMORY_GROWTH_STEADY * whole.per_sec)
        .then_some((whole, late))
}

/// The evidence line of one growing call site.
fn site_line(path: &str, name: &str, g: &Growth, late: &Growth) -> String {
    format!(
        "grows {}/s (±{}/s, 95%) under {name} ({path}), still {}/s over the second half; {} held at the end",
        bytes(g.per_sec),
        bytes(g.within),
        bytes(late.per_sec),
        bytes(g.last as f64)
    )
}

/// What one call site holds at one moment (an agent's window's end), named as the rule names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteInUse {
    /// The first function of user code from the allocation outward.
    pub site: String,
    /// `main > … > cache_put > malloc`.
    pub path: String,
    pub bytes: i64,
}

/// Per call site, the `inuse-bytes` of the samples `keep` keeps, summed (what a profile of in-use at one
/// moment holds there), largest first; empty without in-use memory.
pub(crate) fn sites_of(f: &Facts, keep: impl Fn(&Sample) -> bool) -> Vec<SiteInUse> {
    let Some(inuse) = f.p.sample_type(sample_types::INUSE_BYTES) else { return Vec::new() };
    let mut sites: BTreeMap<String, SiteInUse> = BTreeMap::new();
    for s in f.p.samples.iter().filter(|s| s.values[inuse] != 0 && keep(s)) {
        let (name, names) = site(f, s.stack);
        let e = sites.entry(name.clone()).or_insert_with(|| SiteInUse {
            path: path(&names, &name),
            site: name,
            bytes: 0,
        });
        e.bytes += s.values[inuse];
    }
    let mut out: Vec<SiteInUse> = sites.into_values().collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
    out
}

/// [`sites_of`] every sample of `p`: what an agent keeps of each window for [`across_windows`].
pub fn sites_in_use(p: &Profile) -> Vec<SiteInUse> {
    sites_of(&Facts::new(p), |_| true)
}

/// memory-growth over a target's windows, oldest first, each as (its end in seconds, what each call site
/// held then): the same judgement as over one run's slices (a steady slope with its interval, still
/// growing over the second half). For windows of allocations sampled every `sample_bytes` on average (0:
/// exact), the growth must also stand above what sampling scatters: at least eight intervals, and four
/// times the scatter of the site's highest level L (about sqrt(L x interval): a 4 MiB cache replaced every
/// second reads anywhere in 2-6 MiB at 512 KiB, and a run of such windows can look like a slope). None
/// below five windows or without steady growth.
pub fn across_windows(history: &[(f64, Vec<SiteInUse>)], sample_bytes: u64) -> Option<Finding> {
    let secs: Vec<f64> = history.iter().map(|(t, _)| *t).collect();
    let fit = |series: &[i64]| growth_at(&secs[secs.len() - series.len()..], series);
    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    for s in history.iter().flat_map(|(_, sites)| sites) {
        names.entry(&s.site).or_insert(&s.path);
    }
    let series_of = |name: &str| -> Vec<i64> {
        history
            .iter()
            .map(|(_, sites)| sites.iter().find(|s| s.site == name).map_or(0, |s| s.bytes))
            .collect()
    };
    let interval = sample_bytes as f64;
    let mut growing: Vec<(String, String, Growth, Growth)> = names
        .iter()
        .filter_map(|(&name, &path)| {
            let series = series_of(name);
            let (g, late) = steady_with(&series, fit)?;
            let high = series.iter().copied().max().unwrap_or(0).max(0) as f64;
            let least =
                (MEMORY_GROWTH_MIN_BYTES as f64).max(8.0 * interval).max(4.0 * (high * interval).sqrt());
            let enough = g.per_sec * g.seconds >= least && g.seconds >= MEMORY_GROWTH_MIN_SECS;
            enough.then(|| (path.to_string(), name.to_string(), g, late))
        })
        .collect();
    if growing.is_empty() {
        return None;
    }
    growing.sort_by(|a, b| b.2.per_sec.total_cmp(&a.2.per_sec).then(a.1.cmp(&b.1)));
    let totals: Vec<i64> = history.iter().map(|(_, sites)| sites.iter().map(|s| s.bytes).sum()).collect();
    let mut evidence = Vec::new();
    if let Some(all) = growth_at(&secs, &totals) {
        evidence.push(format!(
            "in use over the last {} windows ({:.0} s): {} at the first one's end, {} at the last one's ({}/s \
             on average)",
            history.len(),
            all.seconds,
            bytes(all.first as f64),
            bytes(all.last as f64),
            bytes(all.per_sec),
        ));
    }
    for (path, name, g, late) in growing.iter().take(3) {
        evidence.push(site_line(path, name, g, late));
    }
    let total = totals.last().copied().unwrap_or(0);
    let held: i64 = growing.iter().map(|(_, _, g, _)| g.last.max(0)).sum();
    let impact = if total > 0 { (100.0 * held as f64 / total as f64).min(100.0) } else { 0.0 };
    let (g, late) = (growing[0].2, growing[0].3);
    Some(Finding {
        id: TEXT.id,
        title: TEXT.title.to_string(),
        impact_pct: (impact * 10.0).round() / 10.0,
        impact_of: "memory",
        confidence: if late.per_sec >= 0.8 * g.per_sec { Confidence::High } else { Confidence::Medium },
        evidence,
        why: TEXT.why.to_string(),
        fix: TEXT.fix.to_string(),
        verify: format!(
            "after the fix, the in-use of {} levels off over the target's next windows (its memory view, \
             `/api/v1/inuse`), and the agent no longer reports {}",
            growing[0].1, TEXT.id
        ),
        case: "",
    })
}

pub fn check(f: &Facts) -> Verdict {
    // Without memory in use there is nothing to judge; not a gap worth a line in every report.
    let Some(inuse) = f.p.sample_type(sample_types::INUSE_BYTES) else { return Verdict::Clear };
    // The call sites, each judged on its own series: a leak is not hidden by a cache freed beside it.
    let mut sites: HashMap<String, (Vec<u32>, Vec<String>)> = HashMap::new();
    for s in f.p.samples.iter().filter(|s| s.values[inuse] != 0) {
        let (name, names) = site(f, s.stack);
        let e = sites.entry(name).or_insert_with(|| (Vec::new(), names));
        if !e.0.contains(&s.stack) {
            e.0.push(s.stack);
        }
    }
    let mut growing: Vec<(String, String, Growth, Growth)> = sites
        .into_iter()
        .filter_map(|(name, (stacks, names))| {
            let (g, late) = steady(&in_use_series(f.p, |s| stacks.contains(&s.stack)))?;
            let enough = g.per_sec * g.seconds >= MEMORY_GROWTH_MIN_BYTES as f64
                && g.seconds >= MEMORY_GROWTH_MIN_SECS;
            enough.then(|| (path(&names, &name), name, g, late))
        })
        .collect();
    if growing.is_empty() {
        return Verdict::Clear;
    }
    growing.sort_by(|a, b| b.2.per_sec.total_cmp(&a.2.per_sec).then(a.1.cmp(&b.1)));
    let mut evidence = Vec::new();
    if let Some(all) = growth(&in_use_series(f.p, |_| true)) {
        evidence.push(format!(
            "in use over the {:.1} s run: {} at its start, {} at its end ({}/s on average)",
            all.seconds,
            bytes(all.first as f64),
            bytes(all.last as f64),
            bytes(all.per_sec),
        ));
    }
    for (path, name, g, late) in growing.iter().take(3) {
        evidence.push(site_line(path, name, g, late));
    }
    let total = f.p.total(inuse);
    let held: i64 = growing.iter().map(|(_, _, g, _)| g.last.max(0)).sum();
    let impact = if total > 0 { (100.0 * held as f64 / total as f64).min(100.0) } else { 0.0 };
    let (g, late) = (growing[0].2, growing[0].3);
    Verdict::Found(Finding {
        id: TEXT.id,
        title: TEXT.title.to_string(),
        impact_pct: (impact * 10.0).round() / 10.0,
        impact_of: "memory",
        confidence: if late.per_sec >= 0.8 * g.per_sec { Confidence::High } else { Confidence::Medium },
        evidence,
        why: TEXT.why.to_string(),
        fix: TEXT.fix.to_string(),
        verify: super::verify(f, &TEXT),
        case: "",
    })
}

/// Bytes as `512B`, `1.50KiB`, `12.3MiB`.
fn bytes(n: f64) -> String {
    whyslow_model::units::bytes(n.round() as i64)
}

#[cfg(test)]
mod tests {
    use super::{across_windows, check, SiteInUse};
    use crate::doctor::{Facts, Verdict};
    use whyslow_model::{sample_types as st, FrameKind, Metadata, Profile, ProfileBuilder, SampleType};

    /// 20 slices (2 s): `cache_put` adds `leak` bytes a slice, `lru_put` fills to 64 KiB in 4 slices
    /// and stays there.
    fn profile(leak: i64) -> Profile {
        let meta = Metadata { duration_ns: 2_000_000_000, ..Default::default() };
        let types = vec![SampleType { name: st::INUSE_BYTES.into(), unit: "bytes".into() }];
        let mut b = ProfileBuilder::new(meta, types);
        let app = b.module("/srv/app", "");
        let libc = b.module("/usr/lib/x86_64-linux-gnu/libc.so.6", "");
        let t = b.thread(1, 1, "app");
        let stack = |b: &mut ProfileBuilder, site: &str| {
            let f = [
                b.frame("main", app, "", FrameKind::User),
                b.frame("serve", app, "", FrameKind::User),
                b.frame(site, app, "", FrameKind::User),
                b.frame("malloc", libc, "", FrameKind::User),
            ];
            b.stack(&f)
        };
        let (leaks, lru) = (stack(&mut b, "cache_put"), stack(&mut b, "lru_put"));
        for k in 0..20 {
            if leak > 0 {
                b.add_sample_at(leaks, t, k, &[leak]);
            }
            if k < 4 {
                b.add_sample_at(lru, t, k, &[16384]);
            }
        }
        b.finish()
    }

    #[test]
    fn a_steady_leak_is_named_by_its_site() {
        let p = profile(11_000);
        let Verdict::Found(f) = check(&Facts::new(&p)) else { panic!("no finding") };
        assert_eq!(f.id, "memory-growth");
        assert_eq!(
            f.evidence[1],
            "grows 107KiB/s (±0B/s, 95%) under cache_put (main > … > cache_put > malloc), still 107KiB/s over \
             the second half; 215KiB held at the end"
        );
        assert_eq!(f.evidence.len(), 2, "the bounded cache is not named: {:?}", f.evidence);
        assert_eq!(f.impact_pct, 77.0, "cache_put's share of what is held at the end");
    }

    #[test]
    fn large_but_bounded_memory_is_no_finding() {
        assert!(matches!(check(&Facts::new(&profile(0))), Verdict::Clear));
    }

    fn at(site: &str, bytes: i64) -> SiteInUse {
        SiteInUse { site: site.into(), path: format!("main > {site} > malloc"), bytes }
    }

    /// Windows of 2 s: `cache_put` holds 100 KiB more at each window's end, `lru_put` fills to 256 KiB and
    /// stays, scattering by a sampling quantum. The leak is found from the fifth window on, by its
    /// exact slope; the bounded cache never, nor growth below `min_bytes`.
    #[test]
    fn growth_across_windows_is_judged_by_the_same_rule() {
        let history: Vec<(f64, Vec<SiteInUse>)> = (0..8)
            .map(|k| {
                let lru = if k == 0 { 0 } else { 262_144 + [0, 524_288, 0][k % 3] };
                (2.0 * k as f64, vec![at("cache_put", 102_400 * (k as i64 + 1)), at("lru_put", lru)])
            })
            .collect();
        assert!(across_windows(&history[..4], 0).is_none(), "four windows are too few");
        let f = across_windows(&history[..5], 0).expect("a finding at the fifth window");
        assert_eq!(f.id, "memory-growth");
        assert_eq!(
            f.evidence[1],
            "grows 50.0KiB/s (±0B/s, 95%) under cache_put (main > cache_put > malloc), still 50.0KiB/s over \
             the second half; 500KiB held at the end"
        );
        assert_eq!(f.evidence.len(), 2, "the bounded cache is not named: {:?}", f.evidence);
        assert!(across_windows(&history, 256 << 10).is_none(), "1.4 MiB grown is under 8 intervals (2 MiB)");
        let bounded: Vec<(f64, Vec<SiteInUse>)> =
            history.iter().map(|(t, s)| (*t, vec![s[1].clone()])).collect();
        assert!(across_windows(&bounded, 0).is_none());
    }

    /// Sampled every 512 KiB: a 4 MiB cache read as CI's agent read it under load (2.1 MiB rising to 5.9
    /// MiB over 11 windows, a slope of 465 KiB/s ±194) is no finding. A leak beside it is, once it has
    /// grown four times the scatter of its level (sqrt(level x 512 KiB)): 2 MiB/s from the fifth window
    /// (10 MiB over 5 windows, at 10 MiB: 8.9 MiB needed), 1 MiB/s from the eighth (8 MiB, 8 MiB needed).
    #[test]
    fn sampled_windows_must_grow_past_their_scatter() {
        const MIB: f64 = 1048576.0;
        let cache = [2.13, 2.6, 3.1, 2.9, 3.6, 4.1, 3.9, 4.6, 5.0, 5.4, 5.85];
        let history: Vec<(f64, Vec<SiteInUse>)> = cache
            .iter()
            .enumerate()
            .map(|(k, c)| (k as f64, vec![at("lru_put", (c * MIB) as i64)]))
            .collect();
        assert!(across_windows(&history, 0).is_some(), "exact, that series is a steady slope");
        assert!(across_windows(&history, 512 << 10).is_none());
        let leak = |mib_per_s: f64, windows: usize| -> Vec<(f64, Vec<SiteInUse>)> {
            (0..windows)
                .map(|k| {
                    let held = (mib_per_s * MIB * (k + 1) as f64) as i64;
                    (k as f64, vec![at("cache_put", held), at("lru_put", 4 << 20)])
                })
                .collect()
        };
        assert!(across_windows(&leak(2.0, 5), 512 << 10).is_some());
        assert!(across_windows(&leak(1.0, 7), 512 << 10).is_none());
        assert!(across_windows(&leak(1.0, 8), 512 << 10).is_some());
    }
}
