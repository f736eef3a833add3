//! Aggregations over a [`Profile`]: top functions (self and total), per-thread totals, and the callers or
//! callees of one function. Pure functions of the profile; they never print.
//!
//! A function is identified by (name, module): several frames of one function (e.g. once inlined and once
//! not) count as one. `value` is the index of the sample type to weigh by.

use serde::Serialize;
use std::collections::HashMap;
use whyslow_model::{close_matches, Profile};

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("no function matches '{query}'{}", whyslow_model::did_you_mean(.suggestions))]
    NoSuchFunction { query: String, suggestions: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionStat {
    pub name: String,
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

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Neighbor {
    pub name: String,
    pub module: String,
    pub value: i64,
    /// Share of the function's total value.
    pub pct: f64,
}

/// Callers or callees of one function.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Neighbors {
    pub function: FunctionStat,
    /// Value spent in the function itself (callees view) or reached from the stack root (callers view).
    pub own: i64,
    pub entries: Vec<Neighbor>,
    /// Other functions the query also matched (the one with the largest total was chosen).
    pub also_matched: Vec<String>,
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

    /// Function ids of each sample's stack, root first.
    fn stacks<'a>(&'a self, p: &'a Profile, value: usize) -> impl Iterator<Item = (Vec<usize>, i64)> + 'a {
        p.samples.iter().filter(move |s| s.values[value] != 0).map(move |s| {
            (p.stack_frames(s.stack).iter().map(|&f| self.of_frame[f as usize]).collect(), s.values[value])
        })
    }
}

fn stats(p: &Profile, value: usize, funcs: &Functions) -> Vec<FunctionStat> {
    let mut self_ = vec![0i64; funcs.keys.len()];
    let mut total = vec![0i64; funcs.keys.len()];
    let mut seen = vec![usize::MAX; funcs.keys.len()];
    for (i, (stack, v)) in funcs.stacks(p, value).enumerate() {
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
    funcs
        .keys
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

/// All functions with samples, by self value, then total, then name.
pub fn top_functions(p: &Profile, value: usize) -> Vec<FunctionStat> {
    let mut v: Vec<FunctionStat> =
        stats(p, value, &Functions::new(p)).into_iter().filter(|f| f.total != 0).collect();
    v.sort_by(|a, b| b.self_.cmp(&a.self_).then(b.total.cmp(&a.total)).then(a.name.cmp(&b.name)));
    v
}

/// Every thread with its value, largest first.
pub fn threads(p: &Profile, value: usize) -> Vec<ThreadStat> {
    let mut sums = vec![0i64; p.threads.len()];
    for s in &p.samples {
        sums[s.thread as usize] += s.values[value];
    }
    let mut v: Vec<ThreadStat> = p
        .threads
        .iter()
        .zip(sums)
        .map(|(t, value)| ThreadStat { pid: t.pid, tid: t.tid, name: t.name.clone(), value })
        .collect();
    v.sort_by(|a, b| b.value.cmp(&a.value).then(a.tid.cmp(&b.tid)));
    v
}

/// The function's id: exact name first, else the substring match with the largest total.
fn find(
    query: &str,
    funcs: &Functions,
    stats: &[FunctionStat],
) -> Result<(usize, Vec<String>), AnalyzeError> {
    let live = |i: &usize| stats[*i].total > 0;
    let exact: Vec<usize> =
        (0..funcs.keys.len()).filter(|&i| funcs.keys[i].0 == query).filter(live).collect();
    let candidates = if exact.is_empty() {
        (0..funcs.keys.len()).filter(|&i| funcs.keys[i].0.contains(query)).filter(live).collect()
    } else {
        exact
    };
    let best =
        candidates.iter().copied().max_by_key(|&i| (stats[i].total, std::cmp::Reverse(i))).ok_or_else(
            || AnalyzeError::NoSuchFunction {
                query: query.to_string(),
                suggestions: close_matches(
                    query,
                    stats.iter().filter(|s| s.total > 0).map(|s| s.name.as_str()),
                    5,
                ),
            },
        )?;
    let mut also: Vec<String> =
        candidates.iter().filter(|&&i| i != best).map(|&i| funcs.keys[i].0.clone()).collect();
    also.sort();
    also.dedup();
    Ok((best, also))
}

fn neighbors(p: &Profile, value: usize, query: &str, callers: bool) -> Result<Neighbors, AnalyzeError> {
    let funcs = Functions::new(p);
    let all = stats(p, value, &funcs);
    let (target, also_matched) = find(query, &funcs, &all)?;
    let mut by_fn: HashMap<usize, i64> = HashMap::new();
    let mut own = 0;
    for (stack, v) in funcs.stacks(p, value) {
        // The outermost occurrence, so recursion is counted once per sample.
        let Some(i) = stack.iter().position(|&f| f == target) else { continue };
        let next = if callers { i.checked_sub(1) } else { stack.get(i + 1).map(|_| i + 1) };
        match next {
            Some(j) => *by_fn.entry(stack[j]).or_default() += v,
            None => own += v,
        }
    }
    let function = all[target].clone();
    let pct = |v: i64| if function.total == 0 { 0.0 } else { 100.0 * v as f64 / function.total as f64 };
    let mut entries: Vec<Neighbor> = by_fn
        .into_iter()
        .map(|(f, v)| Neighbor {
            name: funcs.keys[f].0.clone(),
            module: funcs.keys[f].1.clone(),
            value: v,
            pct: pct(v),
        })
        .collect();
    entries.sort_by(|a, b| b.value.cmp(&a.value).then(a.name.cmp(&b.name)));
    Ok(Neighbors { function, own, entries, also_matched })
}

/// What the function calls: the frame right below its outermost occurrence in each sample.
pub fn callees(p: &Profile, value: usize, query: &str) -> Result<Neighbors, AnalyzeError> {
    neighbors(p, value, query, false)
}

/// Who calls the function: the frame right above its outermost occurrence in each sample.
pub fn callers(p: &Profile, value: usize, query: &str) -> Result<Neighbors, AnalyzeError> {
    neighbors(p, value, query, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::{FrameKind, Metadata, ProfileBuilder, SampleType};

    /// main -> a (5), main -> b -> a (3), main -> b (2), recursive r -> r (1); two threads.
    fn profile() -> Profile {
        let mut b = ProfileBuilder::new(
            Metadata::default(),
            vec![SampleType { name: "cpu".into(), unit: "samples".into() }],
        );
        let m = b.module("/bin/app", "");
        let [main, a, bb, r] = ["main", "a", "b", "r"].map(|n| b.frame(n, m, "", FrameKind::User));
        let a_inl = b.frame("a", m, "", FrameKind::Inlined);
        let t1 = b.thread(1, 1, "app");
        let t2 = b.thread(1, 2, "helper");
        let s = b.stack(&[main, a]);
        b.add_sample(s, t1, &[5]);
        let s = b.stack(&[main, bb, a_inl]);
        b.add_sample(s, t2, &[3]);
        let s = b.stack(&[main, bb]);
        b.add_sample(s, t1, &[2]);
        let s = b.stack(&[main, r, r]);
        b.add_sample(s, t2, &[1]);
        b.finish()
    }

    #[test]
    fn self_and_total_merge_frames_of_one_function() {
        let top = top_functions(&profile(), 0);
        let get = |n: &str| top.iter().find(|f| f.name == n).unwrap();
        assert_eq!((get("a").self_, get("a").total), (8, 8));
        assert_eq!((get("b").self_, get("b").total), (2, 5));
        assert_eq!((get("main").self_, get("main").total), (0, 11));
        assert_eq!((get("r").self_, get("r").total), (1, 1), "recursion counted once");
        assert_eq!(top[0].name, "a");
    }

    #[test]
    fn threads_sum_their_samples() {
        let t = threads(&profile(), 0);
        assert_eq!((t[0].name.as_str(), t[0].value), ("app", 7));
        assert_eq!((t[1].name.as_str(), t[1].value), ("helper", 4));
    }

    #[test]
    fn callers_and_callees_with_shares() {
        let p = profile();
        let c = callees(&p, 0, "main").unwrap();
        let got: Vec<(&str, i64)> = c.entries.iter().map(|e| (e.name.as_str(), e.value)).collect();
        assert_eq!(got, [("a", 5), ("b", 5), ("r", 1)]);
        assert_eq!(c.own, 0);
        let c = callers(&p, 0, "a").unwrap();
        let got: Vec<(&str, i64)> = c.entries.iter().map(|e| (e.name.as_str(), e.value)).collect();
        assert_eq!(got, [("main", 5), ("b", 3)]);
        assert!((c.entries[0].pct - 62.5).abs() < 1e-9);
        let c = callees(&p, 0, "b").unwrap();
        assert_eq!((c.own, c.entries[0].value), (2, 3));
    }

    #[test]
    fn unknown_function_suggests_close_names() {
        let e = callees(&profile(), 0, "mian").unwrap_err();
        let AnalyzeError::NoSuchFunction { suggestions, .. } = e;
        assert_eq!(suggestions, ["main"]);
    }
}
