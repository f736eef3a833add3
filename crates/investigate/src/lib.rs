//! The doctor's investigation of a live target, in two phases. Phase 1 records what costs little
//! however busy the target is: CPU samples, off-CPU time (sampled in the kernel), exact syscall counters
//! with sampled issuing stacks. Phase 2 puts uprobes on the allocation functions and on the hottest
//! functions phase 1 found and their callees, so allocation sites, call rates and caller/callee ratios are
//! known. Uprobes cost per call (a hot allocator can slow a target many times over), so phase 2 stops
//! once their estimated cost reaches the budget (a share of the target's CPU time): its counts are then
//! rates over a shorter window, and the report says so. The result is one profile the doctor's rules read.
//!
//! A launched command still running after phase 1 is probed in place; one that already ended is run a
//! second time for phase 2 (and ended when the budget is spent). Nothing stops the target.
//!
//! [`compare`] runs two commands interleaved for `whyslow compare`; [`loadtest`] records a server under
//! load and measures runs for it.

pub mod compare;
pub mod goheap;
pub mod loadtest;

use std::time::{Duration, Instant};
use whyslow_model::Profile;
use whyslow_record::calls::PatternSpec;
use whyslow_record::{
    AllocOptions, CallOptions, Observer, OffCpuOptions, RecordError, RecordOptions, SyscallOptions, Target,
};

#[derive(Debug, thiserror::Error)]
pub enum InvestigateError {
    #[error(transparent)]
    Record(#[from] RecordError),
    /// An option out of its range, named as this library names it (a command line maps
    /// [`InvestigateOption`] to its own flag).
    #[error("{option} {problem}")]
    BadOption { option: InvestigateOption, problem: String },
    #[error("{0}")]
    NoSamples(whyslow_record::NoSamples),
    #[error("{side} run {number}: {source}")]
    Run { side: &'static str, number: usize, source: loadtest::LoadTestError },
    #[error("the {side} command exited with status {code} (run {number}): compare needs runs that succeed")]
    CommandFailed { side: &'static str, number: usize, code: i32 },
    #[error("the load command exited with status {status} ({side} run {number}): {stderr}")]
    LoadFailed { side: &'static str, number: usize, status: i32, stderr: String },
}

/// How to investigate.
#[derive(Debug, Clone)]
pub struct Options {
    pub target: Target,
    /// Whole investigation (both phases); None: phase 1 until the target exits (or a stop signal).
    pub duration: Option<Duration>,
    /// CPU sampling frequency (Hz).
    pub frequency: u64,
    /// Sample the stack of every Nth syscall.
    pub stacks_period: u64,
    /// Copy each allocation stack at least every Nth call of it (allocations are counted exactly; see
    /// [`AllocOptions::period`]).
    pub alloc_period: u64,
    /// Phase 2 length when the whole duration is not given and the target keeps running.
    pub calls_duration: Duration,
    /// Share of the target's CPU time phase 2's uprobes may cost (see [`RecordOptions::probe_budget`]).
    pub budget: f64,
}

/// An option [`InvestigateError::BadOption`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvestigateOption {
    /// [`Options::stacks_period`].
    StacksPeriod,
    /// [`Options::alloc_period`].
    AllocPeriod,
    /// [`Options::budget`].
    Budget,
    /// [`compare::CompareOptions::runs`].
    Runs,
    /// [`compare::CompareOptions::frequency`].
    Frequency,
}

impl std::fmt::Display for InvestigateOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InvestigateOption::StacksPeriod => "stacks_period",
            InvestigateOption::AllocPeriod => "alloc_period",
            InvestigateOption::Budget => "budget",
            InvestigateOption::Runs => "runs",
            InvestigateOption::Frequency => "frequency",
        })
    }
}

impl Options {
    /// Whether the options are in range; run by [`investigate`] before anything starts.
    pub fn check(&self) -> Result<(), InvestigateError> {
        let bad =
            |option, problem: &str| Err(InvestigateError::BadOption { option, problem: problem.into() });
        if self.stacks_period == 0 {
            return bad(InvestigateOption::StacksPeriod, "must be at least 1");
        }
        if self.alloc_period == 0 {
            return bad(InvestigateOption::AllocPeriod, "must be at least 1");
        }
        if !(self.budget > 0.0 && self.budget <= 1.0) {
            return bad(
                InvestigateOption::Budget,
                "is a share of the target's CPU time, above 0 and at most 1",
            );
        }
        Ok(())
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            target: Target::Pids(Vec::new()),
            duration: None,
            frequency: 999,
            stacks_period: 16,
            alloc_period: 64,
            calls_duration: Duration::from_secs(3),
            budget: 0.05,
        }
    }
}

/// The CPU sampling frequency for running processes (a live server): each sample is a timer interrupt
/// on every CPU, paid for in the server's throughput. A Go HTTP server under wrk on a 2-CPU VM lost 24% of
/// its requests/s to a 999 Hz per-CPU clock (perf's as much as ours) and 5-7% to 99 Hz; redis-server lost
/// 2.5% at 999 Hz. Six seconds at 99 Hz of a busy thread are ~600 samples: shares within ±4 points.
pub const LIVE_FREQUENCY: u64 = 99;

/// whyslow's nice value while it watches a live process (`doctor -p`, `--comm`).
pub const YIELD_NICE: i32 = 10;

/// Runs both phases and returns the joined profile; what was done is in `meta.notes`.
pub fn investigate(opts: &Options, observer: &mut impl Observer) -> Result<Profile, InvestigateError> {
    opts.check()?;
    let attached = match &opts.target {
        Target::Launch(_) => return both_phases(opts, observer),
        Target::Pids(pids) => pids.clone(),
        Target::Comm(name) => whyslow_record::target::pids_named(name)?,
        Target::All => Vec::new(),
    };
    // A live service comes first: reading the rings, symbolizing and the analysis between and after the
    // phases run at a lower priority (the probes' cost, in the service's own threads, is bounded by the
    // budget).
    whyslow_record::yield_cpu(YIELD_NICE);
    // A target killed between the phases is seen by neither phase's recording.
    let (profile, killed) = whyslow_record::watching_exits(&attached, || both_phases(opts, observer));
    profile.map(|mut p| {
        for k in killed {
            if !p.meta.killed.iter().any(|seen| seen.pid == k.pid) {
                p.meta.killed.push(k);
            }
        }
        p
    })
}

fn both_phases(opts: &Options, observer: &mut impl Observer) -> Result<Profile, InvestigateError> {
    let started = Instant::now();
    let phase1 = RecordOptions {
        target: opts.target.clone(),
        frequency: opts.frequency,
        duration: opts.duration.map(|d| d.mul_f64(2.0 / 3.0)),
        cpu: true,
        offcpu: Some(OffCpuOptions::sampled_at(opts.frequency, Duration::from_micros(10))),
        syscalls: Some(SyscallOptions { trace: Vec::new(), stacks_period: Some(opts.stacks_period) }),
        // The syscall counters cost per call too (priced as measured at the start): they stop at the
        // budget, then sample the rest of the phase in slices the budget pays for; CPU and off-CPU
        // sampling go on.
        probe_budget: Some(opts.budget),
        leave_running: true,
        ..Default::default()
    };
    observer.phase(PHASE1);
    let (raw, denied) = match whyslow_record::record(&phase1, observer) {
        // Without root (perf_event_paranoid 2, no CAP_BPF/CAP_PERFMON) the eBPF sources and tracepoints
        // are refused, while sampling a process's own user-space CPU time is allowed: that much runs, and
        // the report lists the rules it could not check.
        Err(e @ (RecordError::BpfPermission(_) | RecordError::Permission(_))) => {
            let cpu_only = RecordOptions {
                offcpu: None,
                syscalls: None,
                probe_budget: None,
                kernel: false,
                ..phase1.clone()
            };
            observer.phase(PHASE1_CPU_ONLY);
            let mut raw = whyslow_record::record(&cpu_only, observer)?;
            raw.meta.notes.insert(0, unprivileged_note(&e));
            (raw, true)
        }
        other => (other?, false),
    };
    let launched = matches!(opts.target, Target::Launch(_));
    let running = launched && raw.meta.exit_code.is_none();
    let pids = raw.meta.target_pids.clone();
    let elapsed = Duration::from_nanos(raw.meta.duration_ns);
    // One symbolizer for both phases: phase 2's samples are in the same files (a Go binary's compressed
    // debug information is inflated once, the kernel's symbol table read once).
    let mut symbolizer = whyslow_symbolize::Resident::default();
    let phases = Phases { started, denied, observer };
    let result = second_phase(opts, &phase1, raw, running, elapsed, &mut symbolizer, phases);
    if running {
        whyslow_record::stop_launched(pids[0]);
    }
    result.map(|mut p| {
        merge_budget_notes(&mut p.meta.notes);
        p
    })
}

/// What the live line says during phase 1, phase 1 without privileges, between the phases and in
/// phase 2 (see [`Observer::phase`]).
pub const PHASE1: &str = "phase 1/2 (CPU, off-CPU, syscalls)";
pub const PHASE1_CPU_ONLY: &str = "phase 1/2 (user CPU only: not privileged)";
pub const SYMBOLIZING: &str = "symbolizing phase 1";
pub const PHASE2: &str = "phase 2/2 (call and allocation counts)";

/// The note of a doctor run without the privileges for eBPF and tracepoints: what it did instead.
fn unprivileged_note(e: &RecordError) -> String {
    format!(
        "without privileges only the target's user-space CPU time was sampled: off-CPU time, syscall, call \
         and allocation counts were not recorded ({e})"
    )
}

/// One note for the probe budget when both phases reached it: `probes stopped after 0.40 s: ... (phase
/// 1's syscall counters); and after 0.12 s: ... (phase 2's call and allocation counters); their counts
/// cover those windows`.
fn merge_budget_notes(notes: &mut Vec<String>) {
    const TAIL: &str = "; their counts cover that window";
    let at: Vec<usize> =
        (0..notes.len()).filter(|&i| notes[i].starts_with(whyslow_record::BUDGET_NOTE)).collect();
    let [first, second] = at[..] else { return };
    let body = |n: &str| {
        let n = n[whyslow_record::BUDGET_NOTE.len()..].trim_start();
        n.strip_suffix(TAIL).unwrap_or(n).to_string()
    };
    let merged = format!(
        "{} {} (phase 1's syscall counters); and after {} (phase 2's call and allocation counters); their \
         counts cover those windows",
        whyslow_record::BUDGET_NOTE,
        body(&notes[first]),
        body(&notes[second])
    );
    notes.remove(second);
    notes[first] = merged;
}

/// What the second phase needs of the first: when the investigation started (`-d` covers both
/// phases), whether privileges were missing, and the live line.
struct Phases<'a, O: Observer> {
    started: Instant,
    denied: bool,
    observer: &'a mut O,
}

fn second_phase<O: Observer>(
    opts: &Options,
    phase1: &RecordOptions,
    raw: whyslow_model::raw::RawRecording,
    running: bool,
    elapsed: Duration,
    symbolizer: &mut whyslow_symbolize::Resident,
    phases: Phases<'_, O>,
) -> Result<Profile, InvestigateError> {
    if raw.samples.is_empty() {
        return Err(InvestigateError::NoSamples(whyslow_record::NoSamples::of(phase1, &raw.meta)));
    }
    let Phases { started, denied, observer } = phases;
    observer.phase(SYMBOLIZING);
    let mut profile = symbolizer.symbolize(raw);
    if whyslow_record::signals::stop_requested() {
        profile.meta.notes.push("phase 2 (allocation and call counts) skipped: stopped".into());
        return Ok(profile);
    }
    if denied {
        // Uprobes need the privileges phase 1 lacked.
        return Ok(profile);
    }
    // `-d` is the whole investigation: phase 2 gets what phase 1 and symbolizing left of it.
    let left = opts.duration.map(|d| d.saturating_sub(started.elapsed()));
    if left.is_some_and(|l| l < MIN_PHASE2) {
        profile.meta.notes.push(format!(
            "phase 2 (allocation and call counts) skipped: phase 1 and symbolizing took the {:.1} s of the \
             duration",
            opts.duration.unwrap_or_default().as_secs_f64()
        ));
        return Ok(profile);
    }
    let attached = !matches!(opts.target, Target::Launch(_));
    let (target, duration, how) = if running || attached {
        let d = left.unwrap_or(opts.calls_duration);
        (Target::Pids(profile.meta.target_pids.clone()), Some(d), "in the same process")
    } else {
        // The command ended during phase 1: run it again, about as long as it ran (within `-d`).
        let cap = (elapsed * 2).max(Duration::from_secs(5));
        (opts.target.clone(), Some(left.map_or(cap, |l| l.min(cap))), "in a second run of the command")
    };
    let candidates = whyslow_analyze::doctor::call_candidates(&profile);
    let modules = match whyslow_record::calls::target_modules(&target) {
        // The target ended with phase 1: what it recorded is diagnosed without call counts.
        Err(RecordError::NoSuchProcess(pid)) => {
            profile.meta.notes.push(format!("phase 2 (allocation and call counts) skipped: pid {pid} ended"));
            return Ok(profile);
        }
        modules => modules?,
    };
    let patterns: Vec<PatternSpec> = candidates
        .iter()
        // Names, not globs: `operator[]`, `<[T]>::iter` and `operator*` match only themselves.
        .map(|n| PatternSpec {
            group: n.clone(),
            pattern: whyslow_record::calls::glob_escape(n),
            required: false,
        })
        .collect();
    let res = whyslow_record::calls::resolve(&modules, &patterns, |_| Default::default())?;
    let mut phase2 = RecordOptions {
        target,
        duration,
        cpu: false,
        calls: (!res.probes.is_empty()).then(|| CallOptions {
            probes: res.probes.clone(),
            modules,
            ..Default::default()
        }),
        alloc: Some(AllocOptions { period: opts.alloc_period }),
        probe_budget: Some(opts.budget),
        ..Default::default()
    };
    // Resolving the probes took a while too: what is left of `-d` now.
    if let (Some(d), Some(total)) = (phase2.duration.as_mut(), opts.duration) {
        *d = (*d).min(total.saturating_sub(started.elapsed()).max(MIN_PHASE2));
    }
    observer.phase(PHASE2);
    let mut raw2 = whyslow_record::record(&phase2, observer);
    if matches!(raw2, Err(RecordError::NoAllocator)) && phase2.calls.is_some() {
        // No allocation function to probe (a static binary with its own allocator): calls alone.
        phase2.alloc = None;
        raw2 = whyslow_record::record(&phase2, observer);
    }
    observer.phase(SYMBOLIZING_PHASE2);
    let mut raw2 = match raw2 {
        Ok(r) => r,
        // The target ended between the phases: the diagnosis goes on without call counts.
        Err(RecordError::NoSuchProcess(pid)) => {
            profile.meta.notes.push(format!("phase 2 (allocation and call counts) skipped: pid {pid} ended"));
            return Ok(profile);
        }
        Err(why @ (RecordError::Invalid(_) | RecordError::BadOption { .. } | RecordError::NoAllocator)) => {
            profile.meta.notes.push(format!("phase 2 (allocation and call counts) skipped: {why}"));
            return Ok(profile);
        }
        Err(e) => return Err(e.into()),
    };
    if res.probes.is_empty() {
        profile.meta.notes.push("no hot user functions with symbols to count calls of".into());
    }
    let counted = match (res.probes.len(), phase2.alloc.is_some()) {
        (0, _) => "the allocation functions".to_string(),
        (n, true) => format!("the allocation functions and {n} hot functions"),
        (n, false) => format!("{n} hot functions"),
    };
    let window = raw2.meta.duration_ns;
    let mut notes = std::mem::take(&mut profile.meta.notes);
    notes.push(format!(
        "{}{counted} counted exactly for {:.1} s {how}",
        whyslow_model::PHASE2_NOTE,
        window as f64 / 1e9
    ));
    notes.extend(raw2.meta.notes.iter().filter(|n| n.starts_with(whyslow_record::BUDGET_NOTE)).cloned());
    let mut meta = profile.meta.clone();
    meta.notes = notes;
    meta.calls_duration_ns = window.max(1);
    meta.lost_events += raw2.meta.lost_events;
    meta.lost_samples += raw2.meta.lost_samples;
    meta.killed.extend(raw2.meta.killed.iter().cloned());
    // Allocation samples and sites join phase 1's samples (their rates are over phase 2's window).
    let mut calls = std::mem::take(&mut raw2.calls);
    let probed = symbolizer.symbolize(raw2);
    let mut profile = whyslow_analyze::diff::merge(&[&profile, &probed]);
    profile.meta = meta;
    // Each pattern was a function name of the profile: name the counters the same way (a GCC clone such as
    // `parse.constprop.0` is counted for `parse`), so rules join calls and samples by name.
    for c in &mut calls {
        if c.name != c.group {
            c.aliases.push(std::mem::replace(&mut c.name, c.group.clone()));
        }
    }
    profile.calls = calls;
    Ok(profile)
}

/// Phase 2 shorter than this is not worth its setup (probes resolved and attached, a second run).
const MIN_PHASE2: Duration = Duration::from_millis(200);

pub const SYMBOLIZING_PHASE2: &str = "symbolizing phase 2";

#[cfg(test)]
mod tests {
    use super::{compare, merge_budget_notes, Options};

    /// Both phases' budget notes become one, the numbers of each kept.
    #[test]
    fn budget_notes_are_merged() {
        let note = |s: &str, hits: u32| {
            format!(
                "{} {s} s: {hits} hits cost about 21.0 ms, past the budget of 5% of the target's 10 ms of CPU; \
                 their counts cover that window",
                whyslow_record::BUDGET_NOTE
            )
        };
        let mut notes = vec!["a".to_string(), note("0.40", 7), "phase 2: x".into(), note("0.12", 9)];
        merge_budget_notes(&mut notes);
        assert_eq!(
            notes,
            [
                "a".to_string(),
                "probes stopped after 0.40 s: 7 hits cost about 21.0 ms, past the budget of 5% of the target's \
                 10 ms of CPU (phase 1's syscall counters); and after 0.12 s: 9 hits cost about 21.0 ms, past \
                 the budget of 5% of the target's 10 ms of CPU (phase 2's call and allocation counters); \
                 their counts cover those windows"
                    .into(),
                "phase 2: x".into(),
            ]
        );
        let mut one = vec![note("0.40", 7)];
        merge_budget_notes(&mut one);
        assert_eq!(one, [note("0.40", 7)], "a single note stays as it is");
    }

    #[test]
    fn options_out_of_range_are_named_as_this_library_names_them() {
        let check = |o: Options| o.check().err().map(|e| e.to_string());
        assert_eq!(check(Options::default()), None);
        assert_eq!(
            check(Options { stacks_period: 0, ..Default::default() }).as_deref(),
            Some("stacks_period must be at least 1")
        );
        assert_eq!(
            check(Options { budget: 1.5, ..Default::default() }).as_deref(),
            Some("budget is a share of the target's CPU time, above 0 and at most 1")
        );
        let compare = |runs, frequency| {
            let o = compare::CompareOptions { commands: Default::default(), runs, frequency, load: None };
            o.check().err().map(|e| e.to_string())
        };
        assert_eq!(compare(2, 99), None);
        assert_eq!(
            compare(1, 99).as_deref(),
            Some("runs must be at least 2 per side (5 or more for a useful verdict)")
        );
        assert_eq!(compare(5, 0).as_deref(), Some("frequency must be at least 1 Hz"));
    }
}
