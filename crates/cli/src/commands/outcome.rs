//! How a command's run ended, which main passes on as whyslow's exit status: a target process killed by
//! a signal, a launched command's own failing status, a doctor finding that matched `--fail-on`.

use whyslow_model::{Killed, Metadata};
use whyslow_record::signals;

/// The status of a doctor run whose `--fail-on` matched a finding.
pub const FINDINGS_MATCHED: i32 = 3;

/// How a command ended, besides an error it may have had.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Nothing to pass on: status 0.
    Ok,
    /// The first target process a signal ended during the run: main reports it after the output and
    /// exits with 128 + the signal, as a shell does, so a crash never hides behind a normal exit.
    TargetKilled(Killed),
    /// The status a launched command exited with when not 0: main exits with it, as strace, ltrace and
    /// time do, so a failing command fails the script that profiles it.
    TargetExited(i32),
    /// `doctor --fail-on` matched a finding.
    FindingsMatched,
}

impl Outcome {
    /// The first target process a signal ended, if any.
    pub fn killed(meta: &Metadata) -> Outcome {
        meta.killed.first().map_or(Outcome::Ok, |k| Outcome::TargetKilled(k.clone()))
    }

    /// [`Outcome::killed`], else the launched command's status to pass through: only when it ended by
    /// itself, not when whyslow stopped it (Ctrl-C or SIGTERM to whyslow, or the end of `-d`).
    pub fn of(meta: &Metadata, duration_s: Option<f64>) -> Outcome {
        let stopped_by_us = signals::stop_requested()
            || duration_s.is_some_and(|d| meta.duration_ns as f64 / 1e9 >= d - 0.05);
        match (Outcome::killed(meta), meta.exit_code.filter(|&c| c != 0 && !stopped_by_us)) {
            (Outcome::Ok, Some(code)) => Outcome::TargetExited(code),
            (outcome, _) => outcome,
        }
    }

    /// The status whyslow exits with.
    pub fn exit_status(&self) -> i32 {
        match self {
            Outcome::Ok => 0,
            Outcome::TargetKilled(k) => 128 + k.signal,
            Outcome::TargetExited(code) => *code,
            Outcome::FindingsMatched => FINDINGS_MATCHED,
        }
    }
}

/// An error a command met after its target ran, with how the target ended: a kill is still reported
/// (before the error), as it happened.
#[derive(Debug)]
struct AfterRun {
    outcome: Outcome,
    error: anyhow::Error,
}

impl std::fmt::Display for AfterRun {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for AfterRun {}

/// Runs a command's body, which sets `outcome` once its target has run, and returns that outcome; an
/// error after the run carries it too (see [`split`]).
pub fn ran(body: impl FnOnce(&mut Outcome) -> anyhow::Result<()>) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::Ok;
    match body(&mut outcome) {
        Ok(()) => Ok(outcome),
        Err(error) if matches!(outcome, Outcome::Ok) => Err(error),
        Err(error) => Err(AfterRun { outcome, error }.into()),
    }
}

/// A command's result as how its target ended and the command's own error (as it was raised).
pub fn split(result: anyhow::Result<Outcome>) -> (Outcome, anyhow::Result<()>) {
    match result {
        Ok(outcome) => (outcome, Ok(())),
        Err(e) => match e.downcast::<AfterRun>() {
            Ok(after) => (after.outcome, Err(after.error)),
            Err(e) => (Outcome::Ok, Err(e)),
        },
    }
}
