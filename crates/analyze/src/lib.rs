//! Aggregations over a [`Profile`]: totals, top functions (self and total), per-thread totals, and the
//! callers or callees of one function. Pure functions of the profile; they never print and never panic on
//! a profile that passes [`Profile::validate`].
//!
//! A function is identified by (name, module): several frames of one function (e.g. once inlined and once
//! not) count as one. `value` is the index of the sample type to weigh by; an index the profile does not
//! have weighs every sample as 0.

pub mod diff;
pub mod doctor;
pub mod loadtest;
pub mod memory;
pub mod regress;
pub mod slice;
pub mod source;
pub mod stats;

use serde::Serialize;
use std::collections::HashMap;
use whyslow_model::{basename, close_matches, CallStat, Profile, Sample, SyscallStat, NONE};

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("no function matches '{query}'{}", whyslow_model::did_you_mean(.suggestions))]
    NoSuchFunction { query: String, suggestions: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionStat {
    pub name: String,
    /// Module path, "" when the frame has none.
    pub module: String,
    /// Value of samples where this function is the innermost frame.
    #[serde(rename = "self")]
    pub self_: i64,
    /// Value of samples whose stack contains this function (recursion counted once).
    pub total: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadStat {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    pub value: i64,
}

/// Sizes of a profile for one value type; only samples with a non-zero value count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Sum of the value over all samples.
    pub value: i64,
    /// Value of samples with an empty stack (nothing could be unwound or symbolized).
    pub empty_stacks: i64,
    /// Distinct (stack, thread) entries.
    pub samples: usize,
    pub threads: usize,
    pub functions: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Neighbor {
    /// Function name, or [`ROOT`] in the callers view when the function is the outermost frame.
    pub name: String,
    pub module: String,
    pub value: i64,
    pub pct_of_function_total: f64,
}

/// Callers or callees of one function.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Neighbors {
    pub function: FunctionStat,
    /// Largest value first, then by name.
    pub entries: Vec<Neighbor>,
    /// Value of samples where the function's outermost occurrence is the leaf: the share it spends in
    /// itself rather than in a callee. With `entries` of the callees view it adds up to the total.
    pub self_value: i64,
    /// Other functions the query also matched (the one with the largest total was chosen).
    pub also_matched: Vec<String>,
}

/// Caller name used when the function is the outermost frame of a stack.
pub const ROOT: &str = "[root]";

fn value_of(s: &Sample, value: usize) -> i64 {
    s.values.get(value).copied().unwrap_or(0)
}

/// Function ids: one per distinct (name, module), mapped from frame ids.
struct Functions {
    of_frame: Vec<usize>,
    keys: Vec<(String, String)>,
}

impl Functions {
    fn new(p: &Profile) -> Functions {
        let mut ids: HashMap<(&str, &str), usize> = HashMap::new();
        let mut keys = Vec::new();
        let of_frame = (0..p.frames.len() as u32)
            .map(|f| {
                let key = (p.frame_name(f), p.frame_module(f));
                *ids.entry(key).or_insert_with(|| {
                    keys.push((key.0.to_string(), key.1.to_string()));
                    keys.len() - 1
                })
            })
            .collect();
        Functions { of_frame, keys }
    }

    /// Function ids of each kept sample's stack (root first) with its value; zero values are skipped.
    fn stacks<'a>(
        &'a self,
        p: &'a Profile,
        value: usize,
        keep: impl Fn(&Sample) -> bool + 'a,
    ) -> impl Iterator<Item = (Vec<usize>, i64)> + 'a {
        p.samples.iter().filter(move |s| value_of(s, value) != 0 && keep(s)).map(move |s| {
            let ids = p.stack_frames(s.stack).iter().map(|&f| self.of_frame[f as usize]).collect();
            (ids, value_of(s, value))
        })
    }

    /// Self and total value of every function, indexed by function id.
    fn stats(&self, p: &Profile, value: usize, keep: impl Fn(&Sample) -> bool) -> Vec<FunctionStat> {
        let n = self.keys.len();
        let (mut self_, mut total, mut seen) = (vec![0i64; n], vec![0i64; n], vec![usize::MAX; n]);
        for (i, (stack, v)) in self.stacks(p, value, keep).enumerate() {
            if let Some(&leaf) = stack.last() {
                self_[leaf] += v;
            }
            for &f in &stack {
                if seen[f] != i {
                    seen[f] = i;
                    total[f] += v;
                }
            }
        }
        self.keys
            .iter()
            .enumerate()
            .map(|(i, (name, module))| FunctionStat {
                name: name.clone(),
                module: module.clone(),
                self_: self_[i],
                total: total[i],
            })
            .collect()
    }
}

fn sorted_top(mut v: Vec<FunctionStat>) -> Vec<FunctionStat> {
    v.retain(|f| f.total != 0);
    v.sort_by(|a, b| {
        b.self_
            .cmp(&a.self_)
            .then(b.total.cmp(&a.total))
            .then(a.name.cmp(&b.name))
            .then(a.module.cmp(&b.module))
    });
    v
}

/// Every function with a non-zero total, by self value, then total, then name.
pub fn top_functions(p: &Profile, value: usize) -> Vec<FunctionStat> {
    sorted_top(Functions::new(p).stats(p, value, |_| true))
}

/// [`top_functions`] over the samples of one thread only (percentages are then of the thread's value).
pub fn thread_top_functions(p: &Profile, value: usize, pid: u32, tid: u32) -> Vec<FunctionStat> {
    let Some(idx) = p.threads.iter().position(|t| t.pid == pid && t.tid == tid) else {
        return Vec::new();
    };
    sorted_top(Functions::new(p).stats(p, value, |s| s.thread as usize == idx))
}

/// Every thread with its value (also those with 0), largest first, then by tid.
pub fn threads(p: &Profile, value: usize) -> Vec<ThreadStat> {
    let mut sums = vec![0i64; p.threads.len()];
    for s in &p.samples {
        if let Some(sum) = sums.get_mut(s.thread as usize) {
            *sum += value_of(s, value);
        }
    }
    let mut v: Vec<ThreadStat> = p
        .threads
        .iter()
        .zip(sums)
        .map(|(t, value)| ThreadStat { pid: t.pid, tid: t.tid, name: t.name.clone(), value })
        .collect();
    v.sort_by(|a, b| b.value.cmp(&a.value).then(a.tid.cmp(&b.tid)).then(a.pid.cmp(&b.pid)));
    v
}

pub fn totals(p: &Profile, value: usize) -> Totals {
    let live: Vec<&Sample> = p.samples.iter().filter(|s| value_of(s, value) != 0).collect();
    let mut threads: Vec<u32> = live.iter().map(|s| s.thread).collect();
    threads.sort_unstable();
    threads.dedup();
    Totals {
        value: live.iter().map(|s| value_of(s, value)).sum(),
        empty_stacks: live.iter().filter(|s| s.stack == NONE).map(|s| value_of(s, value)).sum(),
        samples: live.len(),
        threads: threads.len(),
        functions: top_functions(p, value).len(),
    }
}

/// The function's id: exact name first, else substring (case-sensitive, then not), else a regular
/// expression (as `--source` and `--focus` take one), the largest total winning.
fn find(
    query: &str,
    funcs: &Functions,
    stats: &[FunctionStat],
) -> Result<(usize, Vec<String>), AnalyzeError> {
    let live: Vec<usize> = (0..funcs.keys.len()).filter(|&i| stats[i].total != 0).collect();
    let lower = query.to_lowercase();
    let re = regex::Regex::new(query).ok();
    let pattern = |n: &str| re.as_ref().is_some_and(|re| re.is_match(n));
    let tests: [&dyn Fn(&str) -> bool; 4] =
        [&|n| n == query, &|n| n.contains(query), &|n| n.to_lowercase().contains(&lower), &pattern];
    let candidates: Vec<usize> = tests
        .iter()
        .map(|t| live.iter().copied().filter(|&i| t(&funcs.keys[i].0)).collect::<Vec<_>>())
        .find(|c| !c.is_empty())
        .unwrap_or_default();
    let Some(best) = candidates.iter().copied().max_by_key(|&i| (stats[i].total, std::cmp::Reverse(i)))
    else {
        let names = live.iter().map(|&i| funcs.keys[i].0.as_str());
        return Err(AnalyzeError::NoSuchFunction {
            query: query.to_string(),
            // An anchored pattern is compared without its anchors.
            suggestions: close_matches(query.trim_start_matches('^').trim_end_matches('$'), names, 5),
        });
    };
    // One name in several modules: say which module each one is.
    let name_count = |n: &str| candidates.iter().filter(|&&i| funcs.keys[i].0 == n).count();
    let mut also: Vec<String> = candidates
        .iter()
        .filter(|&&i| i != best)
        .map(|&i| {
            let (name, module) = &funcs.keys[i];
            if name_count(name) > 1 {
                format!("{name} ({})", basename(module))
            } else {
                name.clone()
            }
        })
        .collect();
    also.sort();
    also.dedup();
    Ok((best, also))
}

fn neighbors(p: &Profile, value: usize, query: &str, callers: bool) -> Result<Neighbors, AnalyzeError> {
    let funcs = Functions::new(p);
    let all = funcs.stats(p, value, |_| true);
    let (target, also_matched) = find(query, &funcs, &all)?;
    let mut by_fn: HashMap<Option<usize>, i64> = HashMap::new();
    let mut self_value = 0;
    for (stack, v) in funcs.stacks(p, value, |_| true) {
        // The outermost occurrence, so recursion is counted once per sample.
        let Some(i) = stack.iter().position(|&f| f == target) else { continue };
        if i + 1 == stack.len() {
            self_value += v;
        }
        if callers {
            *by_fn.entry(i.checked_sub(1).map(|j| stack[j])).or_default() += v;
        } else if let Some(&callee) = stack.get(i + 1) {
            *by_fn.entry(Some(callee)).or_default() += v;
        }
    }
    let function = all[target].clone();
    let pct = |v: i64| if function.total == 0 { 0.0 } else { 100.0 * v as f64 / function.total as f64 };
    let mut entries: Vec<Neighbor> = by_fn
        .into_iter()
        .map(|(f, v)| {
            let (name, module) = match f {
                Some(f) => funcs.keys[f].clone(),
                None => (ROOT.to_string(), String::new()),
            };
            Neighbor { name, module, value: v, pct_of_function_total: pct(v) }
        })
        .collect();
    entries.sort_by(|a, b| b.value.cmp(&a.value).then(a.name.cmp(&b.name)).then(a.module.cmp(&b.module)));
    Ok(Neighbors { function, entries, self_value, also_matched })
}

/// What the function calls: the frame right below its outermost occurrence in each sample.
pub fn callees(p: &Profile, value: usize, query: &str) -> Result<Neighbors, AnalyzeError> {
    neighbors(p, value, query, false)
}

/// Who calls the function: the frame right above its outermost occurrence in each sample ([`ROOT`] when
/// there is none).
pub fn callers(p: &Profile, value: usize, query: &str) -> Result<Neighbors, AnalyzeError> {
    neighbors(p, value, query, true)
}

/// One row of a syscall summary: a syscall's counters over the whole target, or over one thread.
#[derive(Debug, Clone, PartialEq)]
pub struct SyscallRow {
    /// The thread, or None for the whole target.
    pub thread: Option<(u32, u32)>,
    pub stat: SyscallStat,
}

/// The counters of the interval between two readings of a run's syscall counters (`previous`, then
/// `now`): each entry's growth (an entry new since `previous` as it is), entries without calls left out.
pub fn syscalls_since(previous: &[SyscallStat], now: &[SyscallStat]) -> Vec<SyscallStat> {
    now.iter()
        .map(|s| {
            let key = |o: &&SyscallStat| (o.pid, o.tid, &o.name) == (s.pid, s.tid, &s.name);
            previous.iter().find(key).map_or_else(|| s.clone(), |before| s.since(before))
        })
        .filter(|s| s.calls > 0)
        .collect()
}

/// Syscall counters merged over processes and threads (or per thread with `per_thread`), most total time
/// first (then most calls, then by name), like `strace -c`.
pub fn syscall_summary(p: &Profile, per_thread: bool) -> Vec<SyscallRow> {
    type Key<'a> = (Option<(u32, u32)>, &'a str);
    let mut rows: HashMap<Key, SyscallStat> = HashMap::new();
    for s in &p.syscalls {
        let thread = per_thread.then_some((s.pid, s.tid));
        rows.entry((thread, s.name.as_str()))
            .or_insert_with(|| SyscallStat { name: s.name.clone(), ..Default::default() })
            .merge(s);
    }
    let mut out: Vec<SyscallRow> = rows
        .into_iter()
        .map(|((thread, _), mut stat)| {
            (stat.pid, stat.tid) = thread.unwrap_or((0, 0));
            stat.errnos.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            SyscallRow { thread, stat }
        })
        .collect();
    out.sort_by(|a, b| {
        (a.thread, b.stat.total_ns, b.stat.calls, &a.stat.name).cmp(&(
            b.thread,
            a.stat.total_ns,
            a.stat.calls,
            &b.stat.name,
        ))
    });
    out
}

/// Call counts of one function over all target processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRow {
    pub stat: CallStat,
    /// Processes that called it.
    pub processes: usize,
}

/// Call counters merged over processes, grouped (groups in first-seen order), most calls first in a
/// group; functions never called are kept (a zero is an answer too).
pub fn call_summary(p: &Profile) -> Vec<CallRow> {
    let mut groups: Vec<&str> = Vec::new();
    let mut rows: Vec<CallRow> = Vec::new();
    for c in &p.calls {
        if !groups.contains(&c.group.as_str()) {
            groups.push(&c.group);
        }
        match rows.iter_mut().find(|r| (&r.stat.name, &r.stat.module) == (&c.name, &c.module)) {
            Some(r) => {
                r.stat.calls += c.calls;
                r.stat.timed += c.timed;
                r.stat.total_ns += c.total_ns;
                r.stat.max_ns = r.stat.max_ns.max(c.max_ns);
                r.processes += (c.calls > 0) as usize;
            }
            None => rows
                .push(CallRow { stat: CallStat { pid: 0, ..c.clone() }, processes: (c.calls > 0) as usize }),
        }
    }
    let group_index = |g: &str| groups.iter().position(|x| *x == g).unwrap_or(usize::MAX);
    rows.sort_by(|a, b| {
        (group_index(&a.stat.group), std::cmp::Reverse(a.stat.calls), &a.stat.name).cmp(&(
            group_index(&b.stat.group),
            std::cmp::Reverse(b.stat.calls),
            &b.stat.name,
        ))
    });
    rows
}

/// The stacks (root first, function names) whose leaf frame is named `leaf`, with their summed value,
/// largest first. Used to show which code issues a syscall.
/// The value of samples taken inside whyslow's own probes ([`whyslow_model::PROBE_FRAME`]): the
/// measurement, not the program. Shares of the program's functions are of the total without it.
pub fn probe_total(p: &Profile, value: usize) -> i64 {
    stacks_ending_in(p, value, whyslow_model::PROBE_FRAME).iter().map(|s| s.1).sum()
}

/// [`top_functions`] without the probes' own frame.
pub fn program_functions(p: &Profile, value: usize) -> Vec<FunctionStat> {
    let mut f = top_functions(p, value);
    f.retain(|f| f.name != whyslow_model::PROBE_FRAME);
    f
}

pub fn stacks_ending_in(p: &Profile, value: usize, leaf: &str) -> Vec<(Vec<String>, i64)> {
    let mut sums: HashMap<Vec<String>, i64> = HashMap::new();
    for s in p.samples.iter().filter(|s| value_of(s, value) != 0) {
        let frames = p.stack_frames(s.stack);
        if frames.last().is_some_and(|&f| p.frame_name(f) == leaf) {
            let names = frames.iter().map(|&f| p.frame_name(f).to_string()).collect();
            *sums.entry(names).or_default() += value_of(s, value);
        }
    }
    let mut v: Vec<_> = sums.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_interval_holds_what_each_syscall_did_since_the_last_reading() {
        use whyslow_model::SyscallStat;
        let stat = |tid, name: &str, calls, total_ns| SyscallStat {
            pid: 1,
            tid,
            name: name.into(),
            calls,
            total_ns,
            ..Default::default()
        };
        let previous = [stat(1, "read", 10, 1000), stat(1, "write", 5, 500), stat(2, "read", 3, 30)];
        let now = [
            stat(1, "read", 25, 2500),
            stat(1, "write", 5, 500),
            stat(2, "read", 4, 70),
            stat(2, "openat", 2, 9),
        ];
        let d = super::syscalls_since(&previous, &now);
        let got: Vec<(u32, &str, u64, u64)> =
            d.iter().map(|s| (s.tid, s.name.as_str(), s.calls, s.total_ns)).collect();
        assert_eq!(got, [(1, "read", 15, 1500), (2, "read", 1, 40), (2, "openat", 2, 9)]);
    }

    use super::{
        callees, callers, syscall_summary, thread_top_functions, threads, top_functions, totals,
        AnalyzeError, Neighbors, Totals, ROOT,
    };
    use whyslow_model::Profile;
    use whyslow_model::SyscallStat;
    use whyslow_model::{FrameKind, Metadata, ProfileBuilder, SampleType};

    /// main -> a (5), main -> b -> a (3, a inlined), main -> b (2), main -> r -> r (1), r alone (4),
    /// an empty stack (6); two threads plus an idle one. A second value type is 10x the first.
    fn profile() -> Profile {
        let mut b = ProfileBuilder::new(
            Metadata::default(),
            vec![
                SampleType { name: "cpu".into(), unit: "samples".into() },
                SampleType { name: "cpu-ns".into(), unit: "nanoseconds".into() },
            ],
        );
        let m = b.module("/bin/app", "");
        let lib = b.module("/lib/libx.so", "");
        let [main, a, bb, r] = ["main", "a", "b", "r"].map(|n| b.frame(n, m, "app.c", FrameKind::User));
        let a_inl = b.frame("a", m, "a.h", FrameKind::Inlined);
        b.frame("a_lib", lib, "", FrameKind::User); // a frame no sample uses
        let t1 = b.thread(1, 1, "app");
        let t2 = b.thread(1, 2, "helper");
        b.thread(1, 3, "idle");
        for (stack, t, n) in [
            (vec![main, a], t1, 5),
            (vec![main, bb, a_inl], t2, 3),
            (vec![main, bb], t1, 2),
            (vec![main, r, r], t2, 1),
            (vec![r], t2, 4),
            (vec![], t1, 6),
        ] {
            let s = b.stack(&stack);
            b.add_sample(s, t, &[n, 10 * n]);
        }
        b.finish()
    }

    fn pairs(n: &Neighbors) -> Vec<(&str, i64)> {
        n.entries.iter().map(|e| (e.name.as_str(), e.value)).collect()
    }

    #[test]
    fn self_and_total_merge_frames_of_one_function() {
        let top = top_functions(&profile(), 0);
        let got: Vec<(&str, i64, i64)> = top.iter().map(|f| (f.name.as_str(), f.self_, f.total)).collect();
        assert_eq!(got, [("a", 8, 8), ("r", 5, 5), ("b", 2, 5), ("main", 0, 11)]);
        let ns = top_functions(&profile(), 1);
        assert_eq!((ns[0].self_, ns[0].total), (80, 80), "weighs by the chosen value");
    }

    #[test]
    fn threads_sum_their_samples_and_keep_idle_ones() {
        let t = threads(&profile(), 0);
        let got: Vec<(&str, i64)> = t.iter().map(|t| (t.name.as_str(), t.value)).collect();
        assert_eq!(got, [("app", 13), ("helper", 8), ("idle", 0)]);
    }

    #[test]
    fn thread_top_functions_sees_one_thread() {
        let top = thread_top_functions(&profile(), 0, 1, 2);
        let got: Vec<(&str, i64, i64)> = top.iter().map(|f| (f.name.as_str(), f.self_, f.total)).collect();
        assert_eq!(got, [("r", 5, 5), ("a", 3, 3), ("main", 0, 4), ("b", 0, 3)]);
        assert!(thread_top_functions(&profile(), 0, 9, 9).is_empty());
    }

    #[test]
    fn totals_count_non_zero_samples() {
        let t = totals(&profile(), 0);
        assert_eq!(t, Totals { value: 21, empty_stacks: 6, samples: 6, threads: 2, functions: 4 });
    }

    #[test]
    fn callees_with_self_and_shares() {
        let p = profile();
        let c = callees(&p, 0, "main").unwrap();
        assert_eq!(pairs(&c), [("a", 5), ("b", 5), ("r", 1)]);
        assert_eq!(c.self_value, 0);
        let c = callees(&p, 0, "b").unwrap();
        assert_eq!((pairs(&c), c.self_value), (vec![("a", 3)], 2));
        assert!((c.entries[0].pct_of_function_total - 60.0).abs() < 1e-9);
        // r -> r: the outermost r calls r once; r alone is self.
        let c = callees(&p, 0, "r").unwrap();
        assert_eq!((pairs(&c), c.self_value), (vec![("r", 1)], 4));
    }

    #[test]
    fn callers_include_the_stack_root() {
        let p = profile();
        let c = callers(&p, 0, "a").unwrap();
        assert_eq!(pairs(&c), [("main", 5), ("b", 3)]);
        assert!((c.entries[0].pct_of_function_total - 62.5).abs() < 1e-9);
        let c = callers(&p, 0, "r").unwrap();
        assert_eq!(pairs(&c), [(ROOT, 4), ("main", 1)]);
        assert_eq!(c.entries[0].module, "");
    }

    #[test]
    fn substring_query_picks_the_largest_total() {
        let p = profile();
        // "a" is exact; "ai" matches only main; "A" matches nothing exactly or case-sensitively.
        assert_eq!(callees(&p, 0, "ai").unwrap().function.name, "main");
        let c = callers(&p, 0, "A").unwrap();
        assert_eq!(c.function.name, "main", "case-insensitive: main (11) beats a (8)");
        assert_eq!(c.also_matched, ["a"]);
    }

    #[test]
    fn a_query_no_name_contains_is_taken_as_a_regular_expression() {
        let p = profile();
        // Anchored: only "a", not main (which contains an "a").
        let c = callers(&p, 0, "^a$").unwrap();
        assert_eq!((c.function.name.as_str(), c.also_matched.len()), ("a", 0));
        assert_eq!(callees(&p, 0, "^m.in$").unwrap().function.name, "main");
        // Neither a name, a part of one nor a pattern that matches: close names are suggested.
        let AnalyzeError::NoSuchFunction { suggestions, .. } = callees(&p, 0, "^mian$").unwrap_err();
        assert_eq!(suggestions, ["main"]);
    }

    #[test]
    fn same_name_in_two_modules_is_told_apart() {
        let mut b = ProfileBuilder::new(
            Metadata::default(),
            vec![SampleType { name: "cpu".into(), unit: "samples".into() }],
        );
        let (m1, m2) = (b.module("/bin/app", ""), b.module("/lib/libc.so.6", ""));
        let (f1, f2) = (b.frame("init", m1, "", FrameKind::User), b.frame("init", m2, "", FrameKind::User));
        let t = b.thread(1, 1, "app");
        for (f, n) in [(f1, 1), (f2, 2)] {
            let s = b.stack(&[f]);
            b.add_sample(s, t, &[n]);
        }
        let p = b.finish();
        assert_eq!(top_functions(&p, 0).len(), 2);
        let c = callers(&p, 0, "init").unwrap();
        assert_eq!(
            (c.function.module.as_str(), c.also_matched),
            ("/lib/libc.so.6", vec!["init (app)".into()])
        );
    }

    #[test]
    fn unknown_function_suggests_close_names() {
        let AnalyzeError::NoSuchFunction { suggestions, .. } = callees(&profile(), 0, "mian").unwrap_err();
        assert_eq!(suggestions, ["main"]);
        // Functions without samples are neither found nor suggested.
        assert!(callees(&profile(), 0, "a_lib").is_err());
    }

    #[test]
    fn empty_profile_and_missing_value_type_give_empty_results() {
        let p = ProfileBuilder::new(Metadata::default(), vec![]).finish();
        assert!(top_functions(&p, 0).is_empty() && threads(&p, 0).is_empty());
        assert_eq!(totals(&p, 0), Totals::default());
        assert!(callers(&p, 0, "main").is_err());
        assert!(top_functions(&profile(), 7).is_empty());
    }

    #[test]
    fn syscall_summary_merges_threads_and_sorts_by_time() {
        let stat = |pid, tid, name: &str, calls, total_ns, errno: Option<(&str, u64)>| SyscallStat {
            pid,
            tid,
            name: name.into(),
            calls,
            errors: errno.map_or(0, |e| e.1),
            errnos: errno.map(|(n, c)| vec![(n.to_string(), c)]).unwrap_or_default(),
            total_ns,
            max_ns: total_ns / calls,
            hist: vec![calls],
            bytes: 0,
        };
        let p = Profile {
            syscalls: vec![
                stat(1, 1, "read", 10, 100, None),
                stat(1, 2, "read", 5, 50, None),
                stat(1, 1, "openat", 3, 900, Some(("ENOENT", 2))),
                stat(2, 3, "openat", 1, 100, Some(("ENOENT", 1))),
            ],
            ..Default::default()
        };
        let rows = syscall_summary(&p, false);
        let got: Vec<_> =
            rows.iter().map(|r| (r.stat.name.as_str(), r.stat.calls, r.stat.total_ns)).collect();
        assert_eq!(got, vec![("openat", 4, 1000), ("read", 15, 150)]);
        assert_eq!((rows[0].stat.errors, rows[0].stat.errnos.clone()), (3, vec![("ENOENT".to_string(), 3)]));
        let per = syscall_summary(&p, true);
        let got: Vec<_> = per.iter().map(|r| (r.thread, r.stat.name.as_str(), r.stat.calls)).collect();
        assert_eq!(
            got,
            vec![
                (Some((1, 1)), "openat", 3),
                (Some((1, 1)), "read", 10),
                (Some((1, 2)), "read", 5),
                (Some((2, 3)), "openat", 1)
            ]
        );
    }
}
