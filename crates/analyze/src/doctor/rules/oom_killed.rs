//! oom-killed: the kernel's OOM killer ended a process of the run (the recorder's note,
//! [`whyslow_model::OOM_NOTE`]). Where memory in use was recorded, what the process held when it was
//! killed, by call site, is the evidence: the stacks that filled its memory. Never guessed from a SIGKILL
//! alone (anyone may send one).

use super::memory_growth::sites_of;
use super::Text;
use crate::doctor::facts::Facts;
use crate::doctor::{Confidence, Finding, Verdict};
use whyslow_model::OOM_NOTE;

const TEXT: Text = Text {
    id: "oom-killed",
    title: "the kernel's OOM killer ended the process",
    why: "the process (or its cgroup: a container's or a unit's memory limit) ran out of memory and the \
          kernel killed it: whatever it was doing was lost, and it will be killed again when its memory \
          reaches the limit again",
    fix: "find what filled the memory in the stacks that held it (below): a leak or an unbounded cache \
          is fixed in the code (free on every path, bound the cache); memory that is needed and bounded \
          needs a higher limit (memory.max, the container's limit) or a smaller working set",
    shrinks: "in-use memory under the stacks that held it (`whyslow report --type inuse-bytes`)",
};

/// The pids the OOM notes name.
fn victims(f: &Facts) -> Vec<u32> {
    let mut pids: Vec<u32> =
        f.p.meta
            .notes
            .iter()
            .filter_map(|n| n.strip_prefix(OOM_NOTE))
            .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
            .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

pub fn check(f: &Facts) -> Verdict {
    let pids = victims(f);
    // A profile split by process keeps every note: the victim must be one of its own.
    let own: Vec<u32> = match f.p.threads.is_empty() {
        true => pids,
        false => pids.into_iter().filter(|&pid| f.p.threads.iter().any(|t| t.pid == pid)).collect(),
    };
    if own.is_empty() {
        return Verdict::Clear;
    }
    let mut evidence = Vec::new();
    for &pid in &own {
        let of_pid = |s: &whyslow_model::Sample| f.p.threads[s.thread as usize].pid == pid;
        let sites = sites_of(f, of_pid);
        let held: i64 = sites.iter().map(|s| s.bytes).sum();
        if held <= 0 {
            evidence
                .push(format!("pid {pid} was killed by the OOM killer (no memory in use recorded of it)"));
            continue;
        }
        evidence.push(format!(
            "pid {pid} was killed by the OOM killer holding {} (of what was allocated while it was followed)",
            whyslow_model::units::bytes(held)
        ));
        for s in sites.iter().filter(|s| s.bytes > 0).take(3) {
            evidence.push(format!(
                "{} ({:.1}%) under {} ({})",
                whyslow_model::units::bytes(s.bytes),
                100.0 * s.bytes as f64 / held as f64,
                s.site,
                s.path
            ));
        }
    }
    Verdict::Found(Finding {
        id: TEXT.id,
        title: TEXT.title.to_string(),
        impact_pct: 100.0,
        impact_of: "memory",
        confidence: Confidence::High,
        evidence,
        why: TEXT.why.to_string(),
        fix: TEXT.fix.to_string(),
        verify: super::verify(f, &TEXT),
        case: "",
    })
}

#[cfg(test)]
mod tests {
    use super::check;
    use crate::doctor::{Facts, Verdict};
    use whyslow_model::{sample_types as st, FrameKind, Metadata, ProfileBuilder, SampleType, OOM_NOTE};

    /// Two processes' in-use at one window's end; the note names pid 7: its stacks are the evidence,
    /// the other process's are not; without the note, nothing (a SIGKILL alone says nothing of memory).
    #[test]
    fn the_victims_last_in_use_is_the_evidence() {
        let profile = |notes: Vec<String>| {
            let meta = Metadata { notes, duration_ns: 1_000_000_000, ..Default::default() };
            let types = vec![SampleType { name: st::INUSE_BYTES.into(), unit: "bytes".into() }];
            let mut b = ProfileBuilder::new(meta, types);
            let app = b.module("/srv/app", "");
            let libc = b.module("/usr/lib/x86_64-linux-gnu/libc.so.6", "");
            let stack = |b: &mut ProfileBuilder, site: &str| {
                let f = [
                    b.frame("main", app, "", FrameKind::User),
                    b.frame(site, app, "", FrameKind::User),
                    b.frame("malloc", libc, "", FrameKind::User),
                ];
                b.stack(&f)
            };
            let (leak, lru, other) =
                (stack(&mut b, "cache_put"), stack(&mut b, "lru_put"), stack(&mut b, "idle"));
            let (t7, t8) = (b.thread(7, 7, "app"), b.thread(8, 8, "app"));
            b.add_sample_at(leak, t7, 9, &[48 << 20]);
            b.add_sample_at(lru, t7, 9, &[1 << 20]);
            b.add_sample_at(other, t8, 9, &[99 << 20]);
            b.finish()
        };
        let p = profile(vec![format!("{OOM_NOTE}7: its memory in use as of its end is kept")]);
        let Verdict::Found(f) = check(&Facts::new(&p)) else { panic!("no finding") };
        assert_eq!(f.id, "oom-killed");
        assert_eq!(
            f.evidence,
            [
                "pid 7 was killed by the OOM killer holding 49.0MiB (of what was allocated while it was followed)",
                "48.0MiB (98.0%) under cache_put (main > cache_put > malloc)",
                "1.00MiB (2.0%) under lru_put (main > lru_put > malloc)",
            ]
        );
        assert!(matches!(check(&Facts::new(&profile(vec![]))), Verdict::Clear));
        let elsewhere = profile(vec![format!("{OOM_NOTE}9")]);
        assert!(matches!(check(&Facts::new(&elsewhere)), Verdict::Clear), "pid 9 is not in this profile");
    }
}
