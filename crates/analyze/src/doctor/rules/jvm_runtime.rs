//! jvm-runtime: a JVM's own threads, its garbage collector's or its JIT compilers', take a large share of
//! CPU. Told by thread name (HotSpot names them: `GC Thread#0`, `G1 Conc#0`, `C2 CompilerThre`), so it
//! holds whether or not their frames are named.

use super::{finding, list, Text};
use crate::doctor::facts::{Facts, Match};
use crate::doctor::thresholds::{JVM_GC_CPU_PCT, JVM_JIT_CPU_PCT};
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "jvm-runtime",
    title: "JVM garbage collection or JIT compilation takes the CPU",
    why: "the JVM's garbage collector threads run in proportion to how fast the program allocates and how \
          much of the heap stays live; its JIT compiler threads run while hot code is (re)compiled, after a \
          start, a deoptimization, or when the code cache is full",
    fix: "GC: allocate less on the hot path (reuse buffers, avoid boxing and temporary collections), size \
          the heap (-Xmx, -Xms) so collections are rarer, pick the collector for the goal (G1 default, \
          ZGC/Shenandoah for pauses, Parallel for throughput); JIT: profile after warm-up, check \
          -XX:ReservedCodeCacheSize when the code cache fills, and look for deoptimization loops with \
          -Xlog:jit+compilation=debug",
    shrinks: "the CPU of the GC and compiler threads",
};

/// HotSpot's garbage collector threads (G1, Parallel, Serial, ZGC, Shenandoah) and the VM thread that
/// runs their safepoint operations.
pub fn is_gc_thread(name: &str) -> bool {
    ["GC Thread#", "G1 ", "VM Thread", "ZWorker", "ZDriver", "ZDirector", "Shenandoah", "Conc#", "GC Conc"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// HotSpot's JIT compiler threads (`C1 CompilerThread0`, `C2 CompilerThread1`, truncated by the kernel to
/// 15 bytes).
pub fn is_jit_thread(name: &str) -> bool {
    name.starts_with("C1 CompilerThre") || name.starts_with("C2 CompilerThre")
}

pub fn check(f: &Facts) -> Verdict {
    if !f.has_cpu() {
        return Verdict::NeedsData("CPU samples");
    }
    let (gc, gc_cpu) = f.cpu_of_threads(&is_gc_thread);
    let (jit, jit_cpu) = f.cpu_of_threads(&is_jit_thread);
    let pct = |v: i64| 100.0 * v as f64 / f.cpu_total.max(1) as f64;
    if pct(gc_cpu) < JVM_GC_CPU_PCT && pct(jit_cpu) < JVM_JIT_CPU_PCT {
        return Verdict::Clear;
    }
    let program = f.cpu_total - gc_cpu - jit_cpu;
    let evidence = vec![
        format!(
            "{:.1}% of CPU time is the garbage collector's threads, {:.1}% the JIT compiler's, {:.1}% the \
             program's",
            pct(gc_cpu),
            pct(jit_cpu),
            pct(program)
        ),
        format!("by thread: {}", list(&[gc, jit].concat(), f.cpu_total)),
    ];
    let value = gc_cpu + jit_cpu;
    let m = Match { value, pct: pct(value), ..Default::default() };
    Verdict::Found(finding(f, &TEXT, &m, "cpu", Confidence::High, evidence))
}

#[cfg(test)]
mod tests {
    use crate::doctor::rules::tests::fired;
    use crate::doctor::{Facts, Verdict};
    use whyslow_model::{FrameKind, Metadata, Profile, ProfileBuilder, SampleType};

    /// CPU ns per thread name, one frame each.
    fn threads(cpu: &[(&str, i64)]) -> Profile {
        let types = vec![SampleType { name: "cpu-ns".into(), unit: "nanoseconds".into() }];
        let mut b =
            ProfileBuilder::new(Metadata { duration_ns: 10_000_000_000, ..Default::default() }, types);
        let m = b.module("/usr/lib/jvm/lib/server/libjvm.so", "");
        for (i, (name, ns)) in cpu.iter().enumerate() {
            let t = b.thread(1, 10 + i as u32, name);
            let fr = b.frame("JavaThread::run()", m, "", FrameKind::User);
            let s = b.stack(&[fr]);
            b.add_sample(s, t, &[*ns]);
        }
        b.finish()
    }

    #[test]
    fn gc_and_compiler_threads_are_told_from_the_program_by_name() {
        let p = threads(&[("java", 60), ("GC Thread#0", 15), ("G1 Conc#0", 5), ("C2 CompilerThre", 20)]);
        assert_eq!(fired(super::check, &p), Some(40.0));
        let Verdict::Found(x) = super::check(&Facts::new(&p)) else { panic!("fired") };
        assert_eq!(
            x.evidence[0],
            "20.0% of CPU time is the garbage collector's threads, 20.0% the JIT compiler's, 60.0% the program's"
        );
        assert!(
            x.evidence[1].contains("C2 CompilerThre (20.0%)")
                && x.evidence[1].contains("GC Thread#0 (15.0%)")
        );
        // Below both thresholds: the program's own time.
        assert_eq!(
            fired(super::check, &threads(&[("java", 80), ("GC Thread#0", 12), ("C1 CompilerThre", 8)])),
            None
        );
    }
}
