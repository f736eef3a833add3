//! alloc-churn: malloc/free/new/delete (or Go's mallocgc) take a large share of CPU: short-lived heap
//! objects created and destroyed at a high rate.

use super::{named, share_rule, Share, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::ALLOC_CPU_PCT;
use crate::doctor::Verdict;
use std::collections::HashMap;
use whyslow_model::sample_types;

const TEXT: Text = Text {
    id: "alloc-churn",
    title: "heap allocation churn",
    why: "every allocation and free runs the allocator (locking, size-class bookkeeping, cache misses on \
          fresh memory); temporaries created per item or per request make it a hot path of its own",
    fix: "reuse buffers and objects across iterations (clear() instead of a new container, reserve() \
          once, object pools, arena allocation per request), pass by reference instead of copying, and \
          build strings in place",
    shrinks: "malloc/free/operator new/delete",
};

pub fn is_allocator(f: &Func) -> bool {
    !f.kernel
        && named(
            f.plain(),
            &[
                "malloc",
                "free",
                "calloc",
                "realloc",
                "cfree",
                "posix_memalign",
                "aligned_alloc",
                "memalign",
                "int_malloc",
                "int_free",
                "int_realloc",
                "malloc_consolidate",
                "runtime.mallocgc",
                "runtime.newobject",
                "runtime.makeslice",
            ],
            &[
                "operator new",
                "operator delete",
                "tcache",
                "int_free",
                "runtime.(*mcache)",
                "runtime.(*mheap)",
                "runtime.mallocgc",
            ],
        )
}

/// The exact allocation counts by call site (each is a two-frame sample: the caller, then the
/// allocator's label). A site in library or runtime code (Go's `runtime.newobject` calling
/// `runtime.mallocgc`, C++'s `operator new` calling malloc) is named by the first user-code caller above
/// it instead, its count split as the sampled allocation stacks through it split.
fn site_counts(f: &Facts) -> Vec<String> {
    let Some(count) = f.p.sample_type(sample_types::ALLOC_SITE_COUNT) else { return Vec::new() };
    let mut exact: HashMap<&str, i64> = HashMap::new();
    for s in f.p.samples.iter().filter(|s| s.values[count] > 0) {
        let frames = f.p.stack_frames(s.stack);
        if let [.., site, _label] = frames[..] {
            *exact.entry(f.p.frame_name(site)).or_default() += s.values[count];
        }
    }
    let total: i64 = f.p.samples.iter().map(|s| s.values[count]).sum();
    let callers = f.p.sample_type(sample_types::ALLOC_COUNT).map(|i| f.user_callers_of_leaf_callers(i));
    let mut by: HashMap<String, i64> = HashMap::new();
    for (site, n) in exact {
        let Some(users) = callers.as_ref().and_then(|c| c.get(site)) else {
            *by.entry(site.to_string()).or_default() += n;
            continue;
        };
        let sampled: i64 = users.iter().map(|u| u.1).sum();
        let share = |x: i64| (n as i128 * x as i128 / sampled as i128) as i64;
        // Cumulative shares, so that the parts add up to the site's count.
        let mut before = 0;
        for (user, x) in users {
            *by.entry(user.clone()).or_default() += share(before + x) - share(before);
            before += x;
        }
    }
    let mut sites: Vec<(String, i64)> = by.into_iter().collect();
    sites.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let top: Vec<String> = sites.iter().take(3).map(|(name, n)| format!("{name} ({n} calls)")).collect();
    // The live doctor counts them in its second phase, over that phase's window.
    let seconds = f.call_seconds();
    let rate = total as f64 / seconds.max(1e-9);
    vec![format!(
        "{total} allocations counted exactly in {seconds:.1} s ({rate:.0}/s); top call sites: {}",
        top.join(", ")
    )]
}

pub fn check(f: &Facts) -> Verdict {
    share_rule(f, &TEXT, Share { extra: &site_counts, ..Share::cpu(&is_allocator, ALLOC_CPU_PCT) })
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;

    #[test]
    fn counts_allocator_time_under_new_and_free() {
        let p = profile(&[
            ("main;build;operator new(unsigned long);lib:malloc;lib:_int_malloc", 15, 0),
            ("main;build;lib:free", 10, 0),
            ("main;build", 75, 0),
        ]);
        assert_eq!(fired(super::check, &p), Some(25.0));
        assert_eq!(
            fired(super::check, &profile(&[("main;build;lib:malloc", 5, 0), ("main;build", 95, 0)])),
            None
        );
    }

    /// Go's exact counts are by the caller of runtime.mallocgc (runtime.newobject, runtime.makeslice):
    /// named by the first user function above them, split as the sampled stacks split.
    #[test]
    fn runtime_sites_are_named_by_their_first_user_caller() {
        use crate::doctor::Facts;
        use whyslow_model::{sample_types as st, FrameKind, Metadata, ProfileBuilder, SampleType};
        let types = [st::CPU_NS, st::ALLOC_COUNT, st::ALLOC_SITE_COUNT]
            .map(|n| SampleType { name: n.into(), unit: "count".into() });
        let meta = Metadata { duration_ns: 1_000_000_000, ..Default::default() };
        let mut b = ProfileBuilder::new(meta, types.to_vec());
        let m = b.module("/srv/app", "");
        let t = b.thread(1, 1, "app");
        let add = |b: &mut ProfileBuilder, stack: &str, values: [i64; 3]| {
            let frames: Vec<u32> = stack.split(';').map(|n| b.frame(n, m, "", FrameKind::User)).collect();
            let s = b.stack(&frames);
            b.add_sample(s, t, &values);
        };
        let sampled = [
            ("main.main;main.handle;runtime.newobject;runtime.mallocgc", 3),
            ("main.main;main.parse;runtime.newobject;runtime.mallocgc", 1),
            ("main.main;main.decode;runtime.makeslice;runtime.mallocgc", 2),
        ];
        for (stack, n) in sampled {
            add(&mut b, stack, [0, n, 0]);
        }
        for (site, n) in [("runtime.newobject", 4000), ("runtime.makeslice", 1000), ("main.direct", 10)] {
            add(&mut b, &format!("{site};runtime.mallocgc"), [0, 0, n]);
        }
        let p = b.finish();
        assert_eq!(
            super::site_counts(&Facts::new(&p)),
            ["5010 allocations counted exactly in 1.0 s (5010/s); top call sites: main.handle (3000 calls), \
              main.decode (1000 calls), main.parse (1000 calls)"]
        );
    }
}
