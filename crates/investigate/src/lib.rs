//! The doctor's investigation of a live target, in two phases. Phase 1 records everything at once: CPU
//! samples, off-CPU time, exact syscall counters with sampled issuing stacks, and allocations. Phase 2
//! counts calls exactly (uprobes) on the hottest functions phase 1 found and their callees, so call rates
//! and caller/callee ratios are known. The result is one profile the doctor's rules read.
//!
//! A launched command still running after phase 1 is counted in place; one that already ended is run a
//! second time for phase 2. It never stops or slows the target beyond the probes themselves.
//!
//! [`compare`] runs two commands interleaved for `whyslow compare`.

pub mod compare;

use std::time::Duration;
use whyslow_model::Profile;
use whyslow_record::calls::PatternSpec;
use whyslow_record::{
    AllocOptions, CallOptions, Observer, OffCpuOptions, RecordError, RecordOptions, SyscallOptions, Target,
};

#[derive(Debug, thiserror::Error)]
pub enum InvestigateError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("no samples: the target {0}")]
    NoSamples(String),
    #[error("{side} run {number}: {source}")]
    Run { side: &'static str, number: usize, source: RecordError },
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
    /// Sample the stack of every Nth syscall and of every Nth call of each allocation function.
    pub stacks_period: u64,
    pub alloc_period: u64,
    /// Phase 2 length when the whole duration is not given and the target keeps running.
    pub calls_duration: Duration,
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
        }
    }
}

/// Runs both phases and returns the joined profile; what was done is in `meta.notes`.
pub fn investigate(opts: &Options, observer: &mut impl Observer) -> Result<Profile, InvestigateError> {
    let phase1 = RecordOptions {
        target: opts.target.clone(),
        frequency: opts.frequency,
        duration: opts.duration.map(|d| d.mul_f64(2.0 / 3.0)),
        cpu: true,
        offcpu: Some(OffCpuOptions::sampled_at(opts.frequency, Duration::from_micros(10))),
        syscalls: Some(SyscallOptions { trace: Vec::new(), stacks_period: Some(opts.stacks_period) }),
        alloc: Some(AllocOptions { period: opts.alloc_period }),
        leave_running: true,
        ..Default::default()
    };
    let raw = whyslow_record::record(&phase1, observer)?;
    let launched = matches!(opts.target, Target::Launch(_));
    let running = launched && raw.meta.exit_code.is_none();
    let pids = raw.meta.target_pids.clone();
    let elapsed = Duration::from_nanos(raw.meta.duration_ns);
    let result = second_phase(opts, raw, running, elapsed);
    if running {
        whyslow_record::stop_launched(pids[0]);
    }
    result
}

fn second_phase(
    opts: &Options,
    raw: whyslow_model::raw::RawRecording,
    running: bool,
    elapsed: Duration,
) -> Result<Profile, InvestigateError> {
    if raw.samples.is_empty() {
        let how = match raw.meta.exit_code {
            Some(code) => {
                format!("exited after {} ms (exit code {code}) before any sample", elapsed.as_millis())
            }
            None => format!("did not run on a CPU in {} ms", elapsed.as_millis()),
        };
        return Err(InvestigateError::NoSamples(how));
    }
    let mut profile = whyslow_symbolize::symbolize(raw);
    let candidates = whyslow_analyze::doctor::call_candidates(&profile);
    if candidates.is_empty() || whyslow_record::signals::stop_requested() {
        profile.meta.notes.push("phase 2 (exact call counts) skipped: no hot user functions to count".into());
        return Ok(profile);
    }
    let attached = !matches!(opts.target, Target::Launch(_));
    let (target, duration, how) = if running || attached {
        let d = opts.duration.map_or(opts.calls_duration, |d| d.mul_f64(1.0 / 3.0));
        (Target::Pids(profile.meta.target_pids.clone()), Some(d), "in the same process")
    } else {
        // The command ended during phase 1: run it again, about as long as it ran.
        let cap = (elapsed * 2).max(Duration::from_secs(5));
        (opts.target.clone(), Some(cap), "in a second run of the command")
    };
    let modules = whyslow_record::calls::target_modules(&target)?;
    let patterns: Vec<PatternSpec> = candidates
        .iter()
        .map(|n| PatternSpec { group: n.clone(), pattern: n.clone(), required: false })
        .collect();
    let res = whyslow_record::calls::resolve(&modules, &patterns, |_| Default::default())?;
    if res.probes.is_empty() {
        profile
            .meta
            .notes
            .push("phase 2 (exact call counts) skipped: the hot functions have no symbols to probe".into());
        return Ok(profile);
    }
    let phase2 = RecordOptions {
        target,
        duration,
        cpu: false,
        calls: Some(CallOptions { probes: res.probes.clone(), modules, ..Default::default() }),
        ..Default::default()
    };
    let raw2 = match whyslow_record::record(&phase2, &mut NoObserver) {
        Ok(r) => r,
        // The target ended between the phases: the diagnosis goes on without call counts.
        Err(RecordError::NoSuchProcess(pid)) => {
            profile.meta.notes.push(format!("phase 2 (exact call counts) skipped: pid {pid} ended"));
            return Ok(profile);
        }
        Err(e) => return Err(e.into()),
    };
    profile.meta.notes.push(format!(
        "phase 2: {} hot functions counted exactly for {:.1} s {how}",
        res.probes.len(),
        raw2.meta.duration_ns as f64 / 1e9
    ));
    profile.meta.calls_duration_ns = raw2.meta.duration_ns.max(1);
    profile.meta.lost_events += raw2.meta.lost_events;
    profile.meta.killed.extend(raw2.meta.killed);
    // Each pattern was a function name of the profile: name the counters the same way (a GCC clone such as
    // `parse.constprop.0` is counted for `parse`), so rules join calls and samples by name.
    profile.calls = raw2.calls;
    for c in &mut profile.calls {
        if c.name != c.group {
            c.aliases.push(std::mem::replace(&mut c.name, c.group.clone()));
        }
    }
    Ok(profile)
}

struct NoObserver;

impl Observer for NoObserver {}
