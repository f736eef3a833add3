//! `whyslow compare`: runs two commands interleaved (A B A B ...), records and measures every run (CPU
//! and wall time; with a load command, the load tool's throughput and latency), and turns the runs into
//! per-side statistics and one merged profile per side, scaled so function deltas add up to the change.
//! The caller saves and renders; this module never prints.

use crate::{InvestigateError, InvestigateOption};
use whyslow_analyze::diff::{Scale, Side};
use whyslow_analyze::load::{parse_load_output, LoadStats};
use whyslow_analyze::stats::Measure;
use whyslow_model::{sample_types, Profile};
use whyslow_record::load::{measured_run, LoadOptions};
use whyslow_record::{Observer, RecordOptions, Target};

/// The two sides' names, in run order.
pub const SIDES: [&str; 2] = ["before", "after"];

#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// The before and after commands (argv).
    pub commands: [Vec<String>; 2],
    /// Runs per side.
    pub runs: usize,
    /// CPU sampling frequency (Hz).
    pub frequency: u64,
    /// Run each command as a server under this load.
    pub load: Option<LoadOptions>,
}

impl CompareOptions {
    /// Whether the options are in range; run by [`compare`] before the first run.
    pub fn check(&self) -> Result<(), InvestigateError> {
        let bad =
            |option, problem: &str| Err(InvestigateError::BadOption { option, problem: problem.into() });
        if self.runs < 2 {
            return bad(
                InvestigateOption::Runs,
                "must be at least 2 per side (5 or more for a useful verdict)",
            );
        }
        if self.frequency == 0 {
            return bad(InvestigateOption::Frequency, "must be at least 1 Hz");
        }
        Ok(())
    }
}

/// What one run measured.
pub struct Run {
    /// Index into [`SIDES`].
    pub side: usize,
    /// 1-based run number of its side.
    pub number: usize,
    pub cpu_s: f64,
    pub wall_s: f64,
    /// Throughput and latency parsed from the load tool's output (wrk, redis-benchmark).
    pub load: Option<LoadStats>,
    /// The load tool's standard output.
    pub load_output: Option<String>,
    pub profile: Profile,
}

pub struct Comparison {
    pub runs: Vec<Run>,
    /// CPU time first, then wall time or the load tool's requests/s and latency.
    pub measures: Vec<Measure>,
    /// The measure the verdict is about (requests/s under load, else CPU time).
    pub primary: usize,
    /// Each side's runs merged into one profile.
    pub merged: [Profile; 2],
    /// Things the user should know (e.g. an unparsed load tool output).
    pub notes: Vec<String>,
}

/// Runs both commands `runs` times, interleaved; `on_run` sees each run as it ends (for progress).
pub fn compare(
    o: &CompareOptions,
    observer: &mut impl Observer,
    mut on_run: impl FnMut(&Run),
) -> Result<Comparison, InvestigateError> {
    o.check()?;
    let mut runs = Vec::new();
    for number in 1..=o.runs {
        for (side, command) in o.commands.iter().enumerate() {
            let opts = RecordOptions {
                target: Target::Launch(command.clone()),
                frequency: o.frequency,
                ..Default::default()
            };
            let name = SIDES[side];
            let m = measured_run(&opts, o.load.as_ref(), observer)
                .map_err(|source| InvestigateError::Run { side: name, number, source })?;
            match (&m.load, m.raw.meta.exit_code) {
                (None, Some(code)) if code != 0 => {
                    return Err(InvestigateError::CommandFailed { side: name, number, code })
                }
                (Some(l), _) if l.status != 0 => {
                    let stderr = l.stderr.trim().to_string();
                    return Err(InvestigateError::LoadFailed {
                        side: name,
                        number,
                        status: l.status,
                        stderr,
                    });
                }
                _ => {}
            }
            let run = Run {
                side,
                number,
                cpu_s: m.cpu.total().as_secs_f64(),
                wall_s: m.wall.as_secs_f64(),
                load: m.load.as_ref().and_then(|l| parse_load_output(&l.stdout)),
                load_output: m.load.map(|l| l.stdout),
                profile: whyslow_symbolize::symbolize(m.raw),
            };
            on_run(&run);
            runs.push(run);
        }
    }
    let mut notes = Vec::new();
    let column = |side: usize, f: &dyn Fn(&Run) -> Option<f64>| -> Option<Vec<f64>> {
        runs.iter().filter(|r| r.side == side).map(f).collect()
    };
    let measure = |name: &str, unit: &str, higher: bool, f: &dyn Fn(&Run) -> Option<f64>| {
        Some(Measure::new(name, unit, higher, column(0, f)?, column(1, f)?))
    };
    let mut measures: Vec<Measure> =
        measure("cpu time", "s", false, &|r| Some(r.cpu_s)).into_iter().collect();
    let mut primary = 0;
    if o.load.is_none() {
        measures.extend(measure("wall time", "s", false, &|r| Some(r.wall_s)));
    } else {
        match measure("requests/s", "req/s", true, &|r| r.load.as_ref().map(|l| l.requests_per_sec)) {
            Some(m) => {
                primary = measures.len();
                measures.push(m);
            }
            None => notes
                .push("the load command's output is not wrk's or redis-benchmark's: no requests/s".into()),
        }
        measures
            .extend(measure("latency avg", "ms", false, &|r| r.load.as_ref().and_then(|l| l.latency_avg_ms)));
    }
    let merged = [0, 1].map(|side| {
        let profiles: Vec<&Profile> = runs.iter().filter(|r| r.side == side).map(|r| &r.profile).collect();
        whyslow_analyze::diff::merge(&profiles)
    });
    Ok(Comparison { runs, measures, primary, merged, notes })
}

impl Comparison {
    /// The two merged profiles as diff sides, each scaled to its side's median CPU time so that the
    /// function deltas add up to the measured change (shares when a median is missing).
    pub fn sides(&self) -> Option<(Side<'_>, Side<'_>)> {
        let medians = self
            .measures
            .first()
            .and_then(|m| m.comparison.as_ref())
            .map(|c| [c.before.median, c.after.median]);
        let side = |i: usize| {
            let p = &self.merged[i];
            let value = p.sample_type(sample_types::CPU)?;
            let total = p.total(value);
            let scale = match medians {
                Some(m) if total > 0 => Scale::SecondsPerUnit(m[i] / total as f64),
                _ => Scale::Shares,
            };
            Some(Side { profile: p, value, scale })
        };
        side(0).zip(side(1))
    }
}
