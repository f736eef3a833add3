//! memory-growth: memory in use keeps growing over the run (a leak, or a cache without a bound): the
//! in-use series grows steadily, still in its second half, under the call sites named by their first
//! function of user code. Memory that is large but levels off is not a finding.

use super::Text;
use crate::doctor::facts::Facts;
use crate::doctor::thresholds::{MEMORY_GROWTH_MIN_BYTES, MEMORY_GROWTH_MIN_SECS, MEMORY_GROWTH_STEADY};
use crate::doctor::{Confidence, Finding, Verdict};
use crate::memory::{growth, in_use_series, Growth};
use std::collections::HashMap;
use whyslow_model::sample_types;

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
    let whole = growth(series)?;
    let late = growth(&series[series.len() / 2..])?;
    (whole.surely_grows() && late.surely_grows() && late.per_sec >= MEMORY_GROWTH_STEADY * whole.per_sec)
        .then_some((whole, late))
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
        evidence.push(format!(
            "grows {}/s (±{}/s, 95%) under {name} ({path}), still {}/s over the second half; {} held at the end",
            bytes(g.per_sec),
            bytes(g.within),
            bytes(late.per_sec),
            bytes(g.last as f64)
        ));
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
    use super::check;
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
}
