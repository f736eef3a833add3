//! gc-pressure: Go's allocator and garbage collector (mark workers, scanning, sweeping, assists) take a
//! large share of CPU.

use super::{cpu_share_rule, named, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::GC_CPU_PCT;
use crate::doctor::Verdict;

const TEXT: Text = Text {
    id: "gc-pressure",
    title: "Go garbage collector pressure",
    why: "a high allocation rate of short-lived objects makes the GC run often: background mark workers \
          take CPU from the program and allocating goroutines are drafted into mark assists",
    fix: "allocate less on the hot path: reuse buffers (sync.Pool, slices reset with [:0]), preallocate \
          with make(..., 0, n), avoid converting between string and []byte, and keep pointers out of large \
          long-lived structures; GOGC/GOMEMLIMIT trade memory for fewer collections",
    shrinks: "runtime.gcBgMarkWorker, runtime.mallocgc and runtime.scanobject",
};

fn is_gc(f: &Func) -> bool {
    !f.kernel
        && named(
            f.name,
            &[
                "runtime.mallocgc",
                "runtime.newobject",
                "runtime.makeslice",
                "runtime.bgsweep",
                "runtime.sweepone",
                "runtime.scanobject",
                "runtime.scanblock",
                "runtime.scanstack",
                "runtime.greyobject",
                "runtime.findObject",
                "runtime.wbBufFlush",
                "runtime.bulkBarrierPreWrite",
            ],
            &[
                "runtime.gc",
                "runtime.markroot",
                "runtime.(*gcWork)",
                "runtime.(*mspan).sweep",
                "runtime.(*mheap)",
                "runtime.(*mcache)",
                "runtime.(*sweepLocked)",
                "runtime.mallocgc",
            ],
        )
}

pub fn check(f: &Facts) -> Verdict {
    cpu_share_rule(f, &TEXT, GC_CPU_PCT, &is_gc)
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;

    #[test]
    fn counts_mark_workers_and_mallocgc() {
        let p = profile(&[
            ("runtime.goexit;runtime.gcBgMarkWorker;runtime.gcDrain;runtime.scanobject", 20, 0),
            ("runtime.main;main.main;main.build;runtime.mallocgc", 10, 0),
            ("runtime.main;main.main;main.build", 70, 0),
        ]);
        assert_eq!(fired(super::check, &p), Some(30.0));
        assert_eq!(
            fired(
                super::check,
                &profile(&[
                    ("runtime.main;main.main;runtime.mallocgc", 5, 0),
                    ("runtime.main;main.main", 95, 0)
                ])
            ),
            None
        );
    }
}
