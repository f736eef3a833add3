//! Memory in use over time: `GET /api/v1/inuse`, each stack's level at the end of every window of a
//! range (the windows of one cut summed: a target of several processes is one series), the largest
//! stacks at the range's end first, with the slope of each series and its 95% interval. The flame graph
//! of what grew between two moments is `/api/v1/diff?type=inuse-bytes` of two windows.

use super::query::{params, range, selected, window_rows, ThreadFilter};
use super::reply::{blocking, json, ApiError, ApiResult};
use crate::shared::{merged, Shared};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use std::collections::BTreeMap;
use std::sync::Arc;
use whyslow_model::{sample_types as st, Profile, NONE};

/// Stacks listed when `top` is not given, and at most.
const TOP: usize = 10;
const MAX_TOP: usize = 100;

/// A profile's in-use bytes per stack (its frames' names, outermost first, joined by `;`).
fn by_stack(p: &Profile) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let Some(v) = p.sample_type(st::INUSE_BYTES) else { return out };
    for smp in p.samples.iter().filter(|smp| smp.values[v] != 0) {
        let name = match smp.stack {
            NONE => String::new(),
            leaf => p.stack_frames(leaf).iter().map(|&f| p.frame_name(f)).collect::<Vec<_>>().join(";"),
        };
        *out.entry(name).or_default() += smp.values[v];
    }
    out
}

pub(super) async fn inuse(
    State(s): State<Arc<Shared>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let q = params(q, &["target", "selector", "from", "until", "thread", "pid", "top"])?;
    let targets = selected(&s, &q)?;
    let (from, until) = range(&q, "from", "until")?;
    let only = ThreadFilter::of(&q)?;
    let top = match q.get("top") {
        None => TOP,
        Some(t) => t
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_TOP).contains(n))
            .ok_or_else(|| ApiError::bad(format!("top '{t}' is not a number from 1 to {MAX_TOP}")))?,
    };
    blocking(move || {
        let rows = window_rows(&s, &targets, from, until)?;
        let mut windows = Vec::new();
        let mut levels: Vec<BTreeMap<String, i64>> = Vec::new();
        for cut in rows.chunk_by(|a, b| a.start_ns == b.start_ns) {
            let ids: Vec<i64> = cut.iter().map(|w| w.id).collect();
            let mut p = merged(&s, &ids)?;
            if p.sample_type(st::INUSE_BYTES).is_none() {
                continue;
            }
            only.apply(&mut p);
            let end = cut.iter().map(|w| w.end_ns).max().unwrap_or(0);
            let level = by_stack(&p);
            windows.push(serde_json::json!({
                "start_ns": cut[0].start_ns, "end_ns": end, "total": level.values().sum::<i64>(),
            }));
            levels.push(level);
        }
        if windows.is_empty() {
            return Err(ApiError::unprocessable(
                "no memory in use in the range: the targets' sources do not include mem".to_string(),
            ));
        }
        let secs: Vec<f64> = windows.iter().map(|w| w["end_ns"].as_u64().unwrap_or(0) as f64 / 1e9).collect();
        let last = levels.last().cloned().unwrap_or_default();
        let mut names: Vec<&String> = levels.iter().flat_map(|l| l.keys()).collect();
        names.sort();
        names.dedup();
        names.sort_by_key(|n| std::cmp::Reverse(last.get(*n).copied().unwrap_or(0)));
        let stacks: Vec<serde_json::Value> = names
            .into_iter()
            .take(top)
            .map(|name| {
                let values: Vec<i64> = levels.iter().map(|l| l.get(name).copied().unwrap_or(0)).collect();
                let growth = whyslow_analyze::memory::growth_at(&secs, &values)
                    .map(|g| serde_json::json!({ "bytes_per_s": g.per_sec, "within": g.within }));
                serde_json::json!({ "stack": name, "values": values, "growth": growth })
            })
            .collect();
        Ok(json(
            StatusCode::OK,
            &serde_json::json!({
                "sample_type": st::INUSE_BYTES, "unit": "bytes", "windows": windows, "stacks": stacks,
            }),
        ))
    })
    .await
}
