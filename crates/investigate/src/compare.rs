//! `whyslow compare`: runs two commands interleaved (A B A B ...), records and measures every run (CPU
//! and wall time; with a load command, the load tool's throughput and latency), and turns the runs into
//! per-side statistics and one merged profile per side, scaled so function deltas add up to the change.
//! The caller saves and renders; this module never prints.

use crate::loadtest::{measured_run, LoadOptions};
use crate::{InvestigateError, InvestigateOption};
use whyslow_analyze::diff::{Scale, Side};
use whyslow_analyze::loadtest::{parse_load_output, LoadStats};
use whyslow_analyze::stats::Measure;
use whyslow_model::{sample_types, Profile};
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

#[cfg(test)]
mod tests {
    use super::{compare, CompareOptions};
    use whyslow_analyze::diff::Scale;
    use whyslow_record::Observer;

    struct Quiet;
    impl Observer for Quiet {}

    /// A shell loop of `n` iterations: CPU time the command itself controls.
    fn shell_loop(n: u32) -> Vec<String> {
        let script = format!("i=0; while [ $i -lt {n} ]; do i=$((i+1)); done");
        ["/bin/sh", "-c", &script].map(String::from).to_vec()
    }

    /// Two commands run interleaved (before, after, before, ...), each run recorded and measured; a command
    /// doing twice the work measures about twice the CPU time (CPU time, not wall time: it holds on a busy
    /// machine), and each side's profile is scaled by its median so that its total is that median. Sized so
    /// each run is 0.7-1.5 s of CPU (350-700 samples at 499 Hz): CI's busy machine once measured 2.62 from
    /// 0.18 s runs.
    #[test]
    fn twice_the_work_measures_twice_the_cpu_time_in_interleaved_runs() {
        let o = CompareOptions {
            commands: [shell_loop(400_000), shell_loop(800_000)],
            runs: 3,
            frequency: 499,
            load: None,
        };
        let mut order = Vec::new();
        let c = compare(&o, &mut Quiet, |r| order.push((r.side, r.number))).expect("both commands run");
        assert_eq!(order, [(0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3)]);
        let cpu = c.measures[0].comparison.as_ref().expect("CPU time on both sides");
        let ratio = cpu.after.median / cpu.before.median;
        assert!((1.6..=2.5).contains(&ratio), "after/before CPU time {ratio:.2} (want about 2)");
        assert_eq!(c.measures[1].name, "wall time");
        assert_eq!(c.primary, 0, "without a load, the verdict is about CPU time");
        let (before, after) = c.sides().expect("both sides have CPU samples");
        for (side, median) in [(before, cpu.before.median), (after, cpu.after.median)] {
            let Scale::SecondsPerUnit(per) = side.scale else { panic!("scaled by the median") };
            let seconds = per * side.profile.total(side.value) as f64;
            assert!((seconds - median).abs() < 1e-9 * median.max(1.0), "{seconds} s vs median {median} s");
        }
    }

    #[test]
    fn fewer_than_two_runs_per_side_are_refused_before_running() {
        let o =
            CompareOptions { commands: [shell_loop(1), shell_loop(1)], runs: 1, frequency: 99, load: None };
        let e = compare(&o, &mut Quiet, |_| panic!("nothing runs")).err().expect("refused");
        assert_eq!(e.to_string(), "runs must be at least 2 per side (5 or more for a useful verdict)");
    }
}
