//! alloc-churn: malloc/free/new/delete (or Go's mallocgc) take a large share of CPU: short-lived heap
//! objects created and destroyed at a high rate.

use super::{named, share_rule, Share, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::ALLOC_CPU_PCT;
use crate::doctor::Verdict;
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

/// The allocation call sites counted exactly in the kernel, when the run recorded them.
fn site_counts(f: &Facts) -> Vec<String> {
    let Some(count) = f.p.sample_type(sample_types::ALLOC_SITE_COUNT) else { return Vec::new() };
    let total: i64 = f.p.samples.iter().map(|s| s.values[count]).sum();
    let mut sites = crate::top_functions(f.p, count);
    sites.retain(|s| s.self_ > 0);
    let top: Vec<String> = sites.iter().take(3).map(|s| format!("{} ({} calls)", s.name, s.self_)).collect();
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
}
