//! Query parameters: strictly parsed, the targets and labels a query selects, its time range and
//! threads, and the stored windows it loads. The bottom of the API's handlers: they all read their
//! queries through this file, and it imports none of them.

use super::reply::ApiError;
use crate::shared::Shared;
use crate::timespec;
use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::http::StatusCode;
use std::collections::BTreeMap;
use whyslow_model::unix_now_ns as now_ns;
use whyslow_model::Profile;

/// Query parameters, every one of them known to the endpoint.
pub(super) fn params(
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
    known: &[&str],
) -> Result<BTreeMap<String, String>, ApiError> {
    let Query(pairs) = q.map_err(|r| ApiError::bad(r.body_text()))?;
    let mut out = BTreeMap::new();
    for (k, v) in pairs {
        if !known.contains(&k.as_str()) {
            return Err(ApiError::bad(format!(
                "unknown parameter '{k}' (this endpoint takes {})",
                known.join(", ")
            )));
        }
        if out.insert(k.clone(), v).is_some() {
            return Err(ApiError::bad(format!("parameter '{k}' given twice")));
        }
    }
    Ok(out)
}

/// What a query names: targets, and optionally labels of the processes' cgroups (unit, container_id,
/// pod_uid) their windows must carry.
#[derive(Clone)]
pub(super) struct Selection {
    pub(super) targets: Vec<i64>,
    pub(super) process_labels: Vec<(String, String)>,
}

/// The targets a query names: `target=ID[,ID]`, `selector=label=value[,label=value]`, or both, where a
/// label is a target's label or one of a process's cgroup labels (`unit=nginx.service`, `container_id=`,
/// `pod_uid=`: the windows of those processes, in any target). Both together: the targets named by id
/// that carry the selector's target labels, narrowed to the processes with its cgroup labels
/// (`target=3&selector=unit=nginx.service`: nginx's windows of target 3).
pub(super) fn selected(s: &Shared, q: &BTreeMap<String, String>) -> Result<Selection, ApiError> {
    let (named, sel) = (q.get("target"), q.get("selector"));
    if named.is_none() && sel.is_none() {
        return Err(ApiError::bad("name the targets: target=ID or selector=label=value"));
    }
    let named: Option<Vec<i64>> = named
        .map(|t| t.split(',').map(|id| target_id(id.trim(), s)).collect::<Result<_, _>>())
        .transpose()?;
    let mut want = Vec::new();
    let mut process_labels = Vec::new();
    for pair in sel.into_iter().flat_map(|s| s.split(',')) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| ApiError::bad(format!("selector '{pair}' is not label=value")))?;
        let (k, v) = (k.trim(), v.trim());
        if crate::cgroup::LABELS.contains(&k) {
            process_labels.push((k.to_string(), v.to_string()));
        } else {
            want.push((k, v));
        }
    }
    let targets: Vec<i64> = match named {
        Some(ids) if want.is_empty() => ids,
        named => s
            .targets
            .read()
            .expect("targets lock")
            .iter()
            .filter(|(id, _)| named.as_ref().is_none_or(|n| n.contains(id)))
            .filter(|(_, t)| want.iter().all(|(k, v)| t.labels.get(*k).is_some_and(|x| x == v)))
            .map(|(&id, _)| id)
            .collect(),
    };
    if targets.is_empty() {
        let sel = sel.map_or("", String::as_str);
        return Err(ApiError::not_found(match q.get("target") {
            Some(t) => format!("no target of {t} has the labels {sel}"),
            None => format!("no target has the labels {sel}"),
        }));
    }
    Ok(Selection { targets, process_labels })
}

/// The [from, until) range of a query (`from` defaults to now-15m, `until` to now).
pub(super) fn range(
    q: &BTreeMap<String, String>,
    from_key: &str,
    until_key: &str,
) -> Result<(u64, u64), ApiError> {
    let now = now_ns();
    let get = |k: &str, default: &str| {
        timespec::parse(q.get(k).map_or(default, String::as_str), now).map_err(ApiError::bad)
    };
    let (from, until) = (get(from_key, "now-15m")?, get(until_key, "now")?);
    if from >= until {
        return Err(ApiError::bad(format!("{from_key} must be before {until_key}")));
    }
    Ok((from, until))
}

/// Target `id` (as a path or query gives it), which must be defined.
pub(super) fn target_id(id: &str, s: &Shared) -> Result<i64, ApiError> {
    let id: i64 = id.parse().map_err(|_| ApiError::bad(format!("target id '{id}' is not a number")))?;
    if s.targets.read().expect("targets lock").contains_key(&id) {
        Ok(id)
    } else {
        Err(ApiError::not_found(format!("no target {id}")))
    }
}

/// Target ids as an error message lists them: `1,2,3`.
pub(super) fn join(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// Largest sum of stored window bytes one query merges.
const MAX_QUERY_BYTES: u64 = 512 << 20;

/// How a range's windows hold memory in use, which each window stores as its level at its end (not a
/// change in it, as other values are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InUse {
    /// Each process's level at the range's end: of its last window that ended in the range (a flame
    /// graph of what it holds, a diff of two moments).
    AtEnd,
    /// Every window's, at its end (a timeline: the level over time).
    Each,
}

/// The samples of `targets` in [from, until): the stored windows overlapping it, merged, without the
/// samples of time slices outside it; memory in use as held at the range's end ([`InUse::AtEnd`]).
pub(super) fn load(s: &Shared, sel: &Selection, from: u64, until: u64) -> Result<Profile, ApiError> {
    load_as(s, sel, from, until, InUse::AtEnd)
}

/// [`load`], with memory in use as `in_use` says.
pub(super) fn load_as(
    s: &Shared,
    sel: &Selection,
    from: u64,
    until: u64,
    in_use: InUse,
) -> Result<Profile, ApiError> {
    let rows = window_rows(s, sel, from, until)?;
    let ids: Vec<i64> = rows.iter().map(|w| w.id).collect();
    let at_end = last_ended(&rows, until);
    let mut p = crate::shared::merged_with(s, &ids, |id| in_use == InUse::Each || at_end.contains(&id))?;
    p.retain_time(from, until);
    Ok(p)
}

/// Per process, the window that ended last by `until` (else the one that ended last): whose in-use is
/// the process's level at the end of a range.
pub(super) fn last_ended(rows: &[crate::store::WindowRow], until: u64) -> std::collections::HashSet<i64> {
    let mut last: BTreeMap<u32, (bool, u64, i64)> = BTreeMap::new();
    for w in rows {
        let key = (w.end_ns <= until, w.end_ns, w.id);
        let e = last.entry(w.pid).or_insert(key);
        if key > *e {
            *e = key;
        }
    }
    last.values().map(|&(_, _, id)| id).collect()
}

/// The threads a query names: `thread=TID[,TID]` and/or `pid=PID[,PID]` (None: any).
pub(super) struct ThreadFilter {
    tids: Option<Vec<u32>>,
    pids: Option<Vec<u32>>,
}

impl ThreadFilter {
    pub(super) fn of(q: &BTreeMap<String, String>) -> Result<Self, ApiError> {
        let ids = |k: &str| -> Result<Option<Vec<u32>>, ApiError> {
            let num =
                |x: &str| x.trim().parse().map_err(|_| ApiError::bad(format!("{k} '{x}' is not a number")));
            q.get(k).map(|v| v.split(',').map(num).collect()).transpose()
        };
        Ok(ThreadFilter { tids: ids("thread")?, pids: ids("pid")? })
    }

    /// Keeps the samples of the threads named.
    pub(super) fn apply(&self, p: &mut Profile) {
        if self.tids.is_some() || self.pids.is_some() {
            let has = |l: &Option<Vec<u32>>, v: u32| l.as_ref().is_none_or(|l| l.contains(&v));
            p.retain_threads(|t| has(&self.tids, t.tid) && has(&self.pids, t.pid));
        }
    }
}

/// Every stored window of `targets` overlapping [from, until) (with the selection's process labels),
/// oldest first; an error when there is none or they hold too much to merge.
pub(super) fn window_rows(
    s: &Shared,
    sel: &Selection,
    from: u64,
    until: u64,
) -> Result<Vec<crate::store::WindowRow>, ApiError> {
    let mut rows = s.store.lock().expect("store lock").windows(&sel.targets, from, until)?;
    if !sel.process_labels.is_empty() {
        rows.retain(|w| {
            let l = crate::cgroup::labels(&w.cgroup);
            sel.process_labels.iter().all(|(k, v)| l.get(k.as_str()) == Some(v))
        });
    }
    if rows.is_empty() {
        let ids = join(&sel.targets);
        let of = match sel.process_labels.is_empty() {
            true => String::new(),
            false => {
                let l: Vec<String> = sel.process_labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!(" with {}", l.join(","))
            }
        };
        return Err(ApiError::not_found(format!(
            "no recorded windows of target {ids}{of} in the range (yet)"
        )));
    }
    if rows.iter().map(|w| w.bytes).sum::<u64>() > MAX_QUERY_BYTES {
        return Err(ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the range holds too much data: query a shorter one".into(),
        ));
    }
    Ok(rows)
}

/// The index of the sample type a query asks for (`type`, default the profile's: cpu, else the first).
pub(super) fn value(p: &Profile, q: &BTreeMap<String, String>) -> Result<usize, ApiError> {
    match q.get("type") {
        None => Ok(p.default_type().unwrap_or(0)),
        Some(t) => p.sample_type(t).ok_or_else(|| {
            let have: Vec<&str> = p.sample_types.iter().map(|t| t.name.as_str()).collect();
            ApiError::unprocessable(format!(
                "no sample type '{t}' in this range (it has {})",
                have.join(", ")
            ))
        }),
    }
}
