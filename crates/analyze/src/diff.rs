//! Before/after: per-function deltas of two profiles, and merging the profiles of several runs into one.
//!
//! Functions are joined by name and module file name (never by address or full path), so two builds of a
//! program, or the same program installed in two places, compare function by function; a name left over
//! exactly once on each side is joined too (the program was renamed: `app` and `app_v2`). Both profiles are
//! normalized: to seconds when both sides know what one unit of their value is worth (a time unit, a
//! sampling frequency, or a measured total given by the caller), else to shares of each side's total.
//! Pure functions: they never print and never panic on profiles that pass [`Profile::validate`].

use crate::{top_functions, FunctionStat};
use serde::Serialize;
use std::collections::HashMap;
use whyslow_model::{
    basename, percent as pct, sample_types, Metadata, Profile, ProfileBuilder, SampleType, Thread,
};

/// How one side's value turns into seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    /// Shares of the side's total only.
    Shares,
    /// Seconds per unit of the value.
    SecondsPerUnit(f64),
}

/// What one unit of a profile's value type is worth in seconds: nanosecond types directly, `cpu` samples
/// through the sampling frequency; other types (bytes, calls) have no time scale.
pub fn time_scale(p: &Profile, value: usize) -> Scale {
    match p.sample_types.get(value) {
        Some(t) if t.unit == "nanoseconds" => Scale::SecondsPerUnit(1e-9),
        Some(t) if t.unit == "samples" && t.name == sample_types::CPU && p.meta.frequency_hz > 0 => {
            Scale::SecondsPerUnit(1.0 / p.meta.frequency_hz as f64)
        }
        _ => Scale::Shares,
    }
}

/// One side of a diff: a profile, the value type to weigh by, and its scale.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    pub profile: &'a Profile,
    pub value: usize,
    pub scale: Scale,
}

impl<'a> Side<'a> {
    /// The side with its own time scale ([`time_scale`]).
    pub fn new(profile: &'a Profile, value: usize) -> Side<'a> {
        Side { profile, value, scale: time_scale(profile, value) }
    }
}

/// Whether numbers of a diff are seconds or percent of each side's total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffUnit {
    Seconds,
    Percent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// In both profiles.
    Both,
    /// Only in the after profile.
    New,
    /// Only in the before profile.
    Vanished,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideTotal {
    pub command: Vec<String>,
    /// Sum of the value.
    pub total: i64,
    /// The unit of the value (`samples`, `nanoseconds`, `bytes`, ...).
    pub total_unit: String,
    /// The total in seconds, when the diff is in seconds.
    pub seconds: Option<f64>,
    /// Wall time the recording covered.
    pub duration_s: f64,
}

/// One function in either profile; values in the diff's [`DiffUnit`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionDelta {
    pub name: String,
    /// File name of the module ("" when none).
    pub module: String,
    pub status: Status,
    pub self_before: f64,
    pub self_after: f64,
    pub self_delta: f64,
    pub total_before: f64,
    pub total_after: f64,
    pub total_delta: f64,
    /// Shares of each side's total, whatever the unit.
    pub self_pct_before: f64,
    pub self_pct_after: f64,
    pub total_pct_before: f64,
    pub total_pct_after: f64,
    /// The exact values behind the row, before and after, each in its side's
    /// [`SideTotal::total_unit`].
    pub self_values: [i64; 2],
    pub total_values: [i64; 2],
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    pub sample_type: String,
    pub unit: DiffUnit,
    pub before: SideTotal,
    pub after: SideTotal,
    /// Largest absolute self change first, then total change, then by name.
    pub functions: Vec<FunctionDelta>,
}

impl Diff {
    /// Sum of the after total minus the before total, in the diff's unit (0 in percent).
    pub fn total_delta(&self) -> f64 {
        match (self.before.seconds, self.after.seconds) {
            (Some(b), Some(a)) => a - b,
            _ => 0.0,
        }
    }

    pub fn new_functions(&self) -> impl Iterator<Item = &FunctionDelta> {
        self.functions.iter().filter(|f| f.status == Status::New)
    }

    pub fn vanished_functions(&self) -> impl Iterator<Item = &FunctionDelta> {
        self.functions.iter().filter(|f| f.status == Status::Vanished)
    }
}

/// Self and total per (name, module file name).
fn by_key(p: &Profile, value: usize) -> HashMap<(String, String), (i64, i64)> {
    let mut m: HashMap<(String, String), (i64, i64)> = HashMap::new();
    for FunctionStat { name, module, self_, total } in top_functions(p, value) {
        let e = m.entry((name, basename(&module).to_string())).or_default();
        e.0 += self_;
        e.1 += total;
    }
    m
}

type Key = (String, String);

/// Pairs functions of the two sides: the same (name, module file name) first; then a name left over
/// exactly once on each side is the same function in a renamed module (two builds `app` and `app_v2`).
fn join<'a, V>(b: &'a HashMap<Key, V>, a: &'a HashMap<Key, V>) -> Vec<(Option<&'a Key>, Option<&'a Key>)> {
    let mut pairs: Vec<(Option<&Key>, Option<&Key>)> = Vec::new();
    let mut left_b: Vec<&Key> = Vec::new();
    for k in b.keys() {
        match a.get_key_value(k) {
            Some((ka, _)) => pairs.push((Some(k), Some(ka))),
            None => left_b.push(k),
        }
    }
    let mut left_a: Vec<&Key> = a.keys().filter(|k| !b.contains_key(*k)).collect();
    left_b.sort();
    left_a.sort();
    let count = |v: &[&Key], name: &str| v.iter().filter(|k| k.0 == name).count();
    let mut used_a = vec![false; left_a.len()];
    for kb in &left_b {
        let unique = count(&left_b, &kb.0) == 1 && count(&left_a, &kb.0) == 1;
        let found = left_a.iter().position(|ka| ka.0 == kb.0).filter(|_| unique);
        match found {
            Some(i) => {
                used_a[i] = true;
                pairs.push((Some(kb), Some(left_a[i])));
            }
            None => pairs.push((Some(kb), None)),
        }
    }
    for (i, ka) in left_a.iter().enumerate() {
        if !used_a[i] {
            pairs.push((None, Some(ka)));
        }
    }
    pairs
}

/// Per-function deltas from `before` to `after`. In seconds when both sides have a time scale (and
/// `shares_only` is false), else in percent of each side's total.
pub fn diff(before: Side, after: Side, shares_only: bool) -> Diff {
    let (tb, ta) = (before.profile.total(before.value), after.profile.total(after.value));
    let scales = match (before.scale, after.scale) {
        (Scale::SecondsPerUnit(b), Scale::SecondsPerUnit(a)) if !shares_only => Some((b, a)),
        _ => None,
    };
    let (fb, fa) = (by_key(before.profile, before.value), by_key(after.profile, after.value));
    let mut functions: Vec<FunctionDelta> = join(&fb, &fa)
        .into_iter()
        .map(|(kb, ka)| {
            let (sb, tob) = kb.and_then(|k| fb.get(k)).copied().unwrap_or_default();
            let (sa, toa) = ka.and_then(|k| fa.get(k)).copied().unwrap_or_default();
            let (status, name, module) = match (kb, ka) {
                (Some(b), Some(a)) if b.1 == a.1 => (Status::Both, a.0.clone(), a.1.clone()),
                (Some(b), Some(a)) => (Status::Both, a.0.clone(), format!("{} -> {}", b.1, a.1)),
                (None, Some(a)) => (Status::New, a.0.clone(), a.1.clone()),
                (Some(b), None) => (Status::Vanished, b.0.clone(), b.1.clone()),
                (None, None) => unreachable!("join pairs at least one side"),
            };
            let [self_before, self_after, total_before, total_after] = match scales {
                Some((b, a)) => [sb as f64 * b, sa as f64 * a, tob as f64 * b, toa as f64 * a],
                None => [pct(sb, tb), pct(sa, ta), pct(tob, tb), pct(toa, ta)],
            };
            FunctionDelta {
                name,
                module,
                status,
                self_before,
                self_after,
                self_delta: self_after - self_before,
                total_before,
                total_after,
                total_delta: total_after - total_before,
                self_pct_before: pct(sb, tb),
                self_pct_after: pct(sa, ta),
                total_pct_before: pct(tob, tb),
                total_pct_after: pct(toa, ta),
                self_values: [sb, sa],
                total_values: [tob, toa],
            }
        })
        .collect();
    functions.sort_by(|a, b| {
        b.self_delta
            .abs()
            .total_cmp(&a.self_delta.abs())
            .then(b.total_delta.abs().total_cmp(&a.total_delta.abs()))
            .then(a.name.cmp(&b.name))
            .then(a.module.cmp(&b.module))
    });
    let side = |s: &Side, total: i64, scale: Option<f64>| SideTotal {
        command: s.profile.meta.command.clone(),
        total,
        total_unit: s.profile.sample_types.get(s.value).map(|t| t.unit.clone()).unwrap_or_default(),
        seconds: scale.map(|k| total as f64 * k),
        duration_s: s.profile.meta.duration_ns as f64 / 1e9,
    };
    Diff {
        sample_type: before
            .profile
            .sample_types
            .get(before.value)
            .map(|t| t.name.clone())
            .unwrap_or_default(),
        unit: if scales.is_some() { DiffUnit::Seconds } else { DiffUnit::Percent },
        before: side(&before, tb, scales.map(|s| s.0)),
        after: side(&after, ta, scales.map(|s| s.1)),
        functions,
    }
}

/// One profile holding the samples of all `profiles` (several runs of one command): frames, modules and
/// threads are re-interned, values are summed by sample type name (the first profile's types, then those
/// only later ones have). Metadata is the first profile's, with durations, lost counts and unwinding
/// statistics summed, and the target's surroundings added up where every profile has them.
pub fn merge(profiles: &[&Profile]) -> Profile {
    let Some(first) = profiles.first() else { return Profile::default() };
    let mut types = first.sample_types.clone();
    for t in profiles.iter().flat_map(|p| &p.sample_types) {
        if !types.iter().any(|u| u.name == t.name) {
            types.push(t.clone());
        }
    }
    let mut meta = Metadata { notes: Vec::new(), exit_code: None, ..first.meta.clone() };
    for p in &profiles[1..] {
        meta.duration_ns += p.meta.duration_ns;
        meta.lost_samples += p.meta.lost_samples;
        meta.lost_events += p.meta.lost_events;
        meta.unwind.complete += p.meta.unwind.complete;
        meta.unwind.partial += p.meta.unwind.partial;
        meta.target_pids.extend(&p.meta.target_pids);
        meta.target_env = match (meta.target_env.take(), &p.meta.target_env) {
            (Some(mut a), Some(b)) => {
                a.add(b);
                Some(a)
            }
            _ => None,
        };
    }
    for n in profiles.iter().flat_map(|p| &p.meta.notes) {
        if !meta.notes.contains(n) {
            meta.notes.push(n.clone());
        }
    }
    // Time slices are rebased on the earliest start, so the merged timeline spans every run.
    meta.start_unix_ns = profiles.iter().map(|p| p.meta.start_unix_ns).min().unwrap_or(0);
    let mut b = ProfileBuilder::new(meta.clone(), types.clone());
    for p in profiles {
        let shift = (p.meta.start_unix_ns - meta.start_unix_ns) / whyslow_model::TIME_BUCKET_NS;
        copy_samples(&mut b, &types, p, shift.min(u64::from(u32::MAX)) as u32, |_| true);
    }
    let mut merged = b.finish();
    merged.syscalls = profiles.iter().flat_map(|p| p.syscalls.iter().cloned()).collect();
    merged.calls = profiles.iter().flat_map(|p| p.calls.iter().cloned()).collect();
    merged
}

/// Adds the samples of `p` that `keep` accepts to `b` (whose sample types are `types`), `shift` time
/// slices later: frames, modules and threads re-interned, values mapped by type name.
fn copy_samples(
    b: &mut ProfileBuilder,
    types: &[SampleType],
    p: &Profile,
    shift: u32,
    keep: impl Fn(&Thread) -> bool,
) {
    let value_map: Vec<Option<usize>> =
        types.iter().map(|t| p.sample_types.iter().position(|u| u.name == t.name)).collect();
    let modules: Vec<u32> = p.modules.iter().map(|m| b.module_of(m)).collect();
    let mut frames: Vec<Option<u32>> = vec![None; p.frames.len()];
    let mut threads: Vec<Option<u32>> = vec![None; p.threads.len()];
    for s in &p.samples {
        let t = &p.threads[s.thread as usize];
        if !keep(t) {
            continue;
        }
        let thread = *threads[s.thread as usize].get_or_insert_with(|| b.thread(t.pid, t.tid, &t.name));
        let stack: Vec<(u32, u32)> = p
            .stack_lines(s.stack)
            .iter()
            .map(|&(f, line)| {
                let frame = *frames[f as usize].get_or_insert_with(|| {
                    let fr = &p.frames[f as usize];
                    let module = if fr.module == whyslow_model::NONE {
                        fr.module
                    } else {
                        modules[fr.module as usize]
                    };
                    b.frame(p.str(fr.name), module, p.str(fr.file), fr.kind)
                });
                (frame, line)
            })
            .collect();
        let leaf = b.stack_at_lines(&stack);
        let values: Vec<i64> =
            value_map.iter().map(|i| i.and_then(|i| s.values.get(i).copied()).unwrap_or(0)).collect();
        b.add_sample_at(leaf, thread, s.time.saturating_add(shift), &values);
    }
}

/// The profile cut in parts by the process its samples are of: `owner` maps a pid to the key of its part
/// (None: left out). Each part keeps the metadata, with its own pids, and the counters of its processes.
pub fn split(p: &Profile, owner: impl Fn(u32) -> Option<u32>) -> std::collections::BTreeMap<u32, Profile> {
    let mut keys: Vec<u32> = p.threads.iter().filter_map(|t| owner(t.pid)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
        .map(|k| {
            let mut pids: Vec<u32> =
                p.threads.iter().map(|t| t.pid).filter(|&pid| owner(pid) == Some(k)).collect();
            pids.sort_unstable();
            pids.dedup();
            let meta = Metadata { target_pids: pids.clone(), ..p.meta.clone() };
            let mut b = ProfileBuilder::new(meta, p.sample_types.clone());
            copy_samples(&mut b, &p.sample_types, p, 0, |t| owner(t.pid) == Some(k));
            let mut part = b.finish();
            part.syscalls = p.syscalls.iter().filter(|s| pids.contains(&s.pid)).cloned().collect();
            part.calls = p.calls.iter().filter(|c| pids.contains(&c.pid)).cloned().collect();
            (k, part)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{
        diff, merge, split, Diff, DiffUnit, FunctionDelta, Metadata, Profile, ProfileBuilder, Scale, Side,
        Status,
    };
    use crate::top_functions;
    use whyslow_model::{FrameKind, SampleType};

    /// main -> work_a (a), main -> work_b (b), main -> extra (x) in module `path`, at 100 Hz.
    fn profile(path: &str, a: i64, b: i64, extra: Option<(&str, i64)>) -> Profile {
        let mut pb = ProfileBuilder::new(
            Metadata { frequency_hz: 100, duration_ns: 2_000_000_000, ..Default::default() },
            vec![SampleType { name: "cpu".into(), unit: "samples".into() }],
        );
        let m = pb.module(path, "");
        let main = pb.frame("main", m, "", FrameKind::User);
        let t = pb.thread(1, 1, "w");
        let add = |pb: &mut ProfileBuilder, name: &str, n: i64| {
            let f = pb.frame(name, m, "", FrameKind::User);
            let s = pb.stack(&[main, f]);
            pb.add_sample(s, t, &[n]);
        };
        add(&mut pb, "work_a", a);
        add(&mut pb, "work_b", b);
        if let Some((name, n)) = extra {
            add(&mut pb, name, n);
        }
        pb.finish()
    }

    fn row<'a>(d: &'a Diff, name: &str) -> &'a FunctionDelta {
        d.functions.iter().find(|f| f.name == name).unwrap()
    }

    #[test]
    fn joins_functions_of_two_builds_by_name_in_seconds() {
        let b = profile("/old/build/app", 200, 100, Some(("gone", 10)));
        let a = profile("/new/build/app", 200, 200, Some(("fresh", 30)));
        let d = diff(Side::new(&b, 0), Side::new(&a, 0), false);
        assert_eq!(d.unit, DiffUnit::Seconds);
        let wb = row(&d, "work_b");
        assert_eq!((wb.module.as_str(), wb.status), ("app", Status::Both));
        assert!((wb.self_delta - 1.0).abs() < 1e-9, "100 samples at 100 Hz: {wb:?}");
        assert_eq!(d.functions[0].name, "work_b", "largest change first");
        assert_eq!(row(&d, "work_a").self_delta, 0.0);
        assert!((row(&d, "main").total_delta - 1.2).abs() < 1e-9);
        assert_eq!(row(&d, "gone").status, Status::Vanished);
        assert_eq!(row(&d, "fresh").status, Status::New);
        // Self deltas add up to the change of the total.
        let sum: f64 = d.functions.iter().map(|f| f.self_delta).sum();
        assert!((sum - d.total_delta()).abs() < 1e-9 && (d.total_delta() - 1.2).abs() < 1e-9);
        assert_eq!(d.new_functions().count() + d.vanished_functions().count(), 2);
    }

    #[test]
    fn a_renamed_program_is_joined_by_function_name() {
        let b = profile("/bin/app", 200, 100, None);
        let a = profile("/bin/app_v2", 200, 200, None);
        let d = diff(Side::new(&b, 0), Side::new(&a, 0), false);
        assert_eq!(d.functions.len(), 3, "{:?}", d.functions);
        let wb = row(&d, "work_b");
        assert_eq!((wb.module.as_str(), wb.status), ("app -> app_v2", Status::Both));
        assert!((wb.self_delta - 1.0).abs() < 1e-9);
    }

    #[test]
    fn shares_when_a_side_has_no_time_scale() {
        let b = profile("/bin/app", 300, 100, None);
        let a = profile("/bin/app", 100, 100, None);
        let d = diff(Side::new(&b, 0), Side { scale: Scale::Shares, ..Side::new(&a, 0) }, false);
        assert_eq!(d.unit, DiffUnit::Percent);
        assert!((row(&d, "work_b").self_delta - 25.0).abs() < 1e-9);
        assert!((row(&d, "work_a").self_delta + 25.0).abs() < 1e-9);
        assert_eq!(d.before.seconds, None);
        assert_eq!(diff(Side::new(&b, 0), Side::new(&a, 0), true).unit, DiffUnit::Percent);
    }

    #[test]
    fn merge_sums_runs_and_keeps_stacks() {
        let runs = [profile("/bin/app", 10, 5, None), profile("/bin/app", 20, 5, Some(("x", 1)))];
        let m = merge(&[&runs[0], &runs[1]]);
        m.validate().unwrap();
        assert_eq!(m.total(0), 41);
        assert_eq!(m.meta.duration_ns, 4_000_000_000);
        let top = top_functions(&m, 0);
        let got: Vec<(&str, i64, i64)> = top.iter().map(|f| (f.name.as_str(), f.self_, f.total)).collect();
        assert_eq!(got, [("work_a", 30, 30), ("work_b", 10, 10), ("x", 1, 1), ("main", 0, 41)]);
        assert_eq!(merge(&[]), Profile::default());
    }

    #[test]
    fn split_cuts_by_owner_and_merge_puts_back() {
        // Process 1 (work_a 10, work_b 5) and process 2 (work_a 20, work_b 5, x 1), 3 left out.
        let mut second = profile("/bin/app", 20, 5, Some(("x", 1)));
        second.threads[0].pid = 2;
        let mut third = profile("/bin/app", 7, 7, None);
        third.threads[0].pid = 3;
        let all = merge(&[&profile("/bin/app", 10, 5, None), &second, &third]);
        let parts = split(&all, |pid| (pid < 3).then_some(pid * 100));
        assert_eq!(parts.keys().copied().collect::<Vec<_>>(), [100, 200]);
        assert_eq!((parts[&100].total(0), parts[&200].total(0)), (15, 26));
        assert_eq!(parts[&200].meta.target_pids, [2]);
        parts[&200].validate().unwrap();
        let back = merge(&[&parts[&100], &parts[&200]]);
        assert_eq!(back.total(0), 41);
        assert!(top_functions(&back, 0).iter().any(|f| f.name == "x" && f.self_ == 1));
    }
}
