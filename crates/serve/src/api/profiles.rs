//! Profiles of the stored windows: merged, as trees, timelines and tables; the doctor's findings and
//! regressions; diffs of two ranges.

use super::query::{
    join, load, load_as, params, range, selected, target_id, value, InUse, Selection, ThreadFilter,
};
use super::reply::{blocking, bytes, internal, json, ApiError, ApiResult};
use crate::shared::Shared;
use crate::timespec;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use std::sync::Arc;
use whyslow_model::unix_now_ns as now_ns;
use whyslow_model::Profile;

pub(super) async fn profile(
    State(s): State<Arc<Shared>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let keys = [
        &["target", "selector", "type", "from", "until", "thread", "pid", "format"][..],
        &crate::slicing::KEYS,
    ];
    let q = params(q, &keys.concat())?;
    let targets = selected(&s, &q)?;
    let (from, until) = range(&q, "from", "until")?;
    let only = ThreadFilter::of(&q)?;
    let slice = crate::slicing::of(&q).map_err(ApiError::bad)?;
    let format = q.get("format").map_or("json", String::as_str).to_string();
    const FORMATS: [&str; 7] = ["json", "tree", "timeline", "folded", "pprof", "speedscope", "svg"];
    if !FORMATS.contains(&format.as_str()) {
        return Err(ApiError::bad(format!("format '{format}' is not one of {}", FORMATS.join(", "))));
    }
    blocking(move || {
        // A timeline shows memory in use at each window's end; everything else what was held at the end.
        let in_use = if format == "timeline" { InUse::Each } else { InUse::AtEnd };
        let mut p = load_as(&s, &targets, from, until, in_use)?;
        if !slice.is_everything() {
            p = slice.apply(&p);
        }
        let v = value(&p, &q)?;
        let threads = (format == "timeline").then(|| thread_totals(&p, v));
        only.apply(&mut p);
        let mut out = Vec::new();
        let ct = match format.as_str() {
            "timeline" => {
                let t = &p.sample_types[v];
                let body = serde_json::json!({
                    "sample_type": t.name,
                    "unit": t.unit,
                    "start_unix_ns": p.meta.start_unix_ns,
                    "slice_ns": whyslow_model::TIME_BUCKET_NS,
                    "values": p.timeline(v),
                    "threads": threads,
                });
                serde_json::to_writer(&mut out, &body).map_err(internal)?;
                "application/json"
            }
            "json" => {
                whyslow_render::json::report(&mut out, &p, v)?;
                "application/json"
            }
            "tree" => {
                whyslow_render::tree::json(&mut out, &p, v)?;
                "application/json"
            }
            "folded" => {
                whyslow_render::export::folded(&mut out, &p, v)?;
                "text/plain; charset=utf-8"
            }
            "pprof" => {
                whyslow_render::export::pprof(&mut out, &p)?;
                "application/octet-stream"
            }
            "speedscope" => {
                whyslow_render::export::speedscope(&mut out, &p, v)?;
                "application/json"
            }
            _ => {
                let title = format!("target {} ({})", join(&targets.targets), p.sample_types[v].name);
                let o = whyslow_render::flamegraph::FlameOptions { title, subtitle: None, reverse: false };
                whyslow_render::flamegraph::svg(&mut out, &p, v, &o)?;
                "image/svg+xml"
            }
        };
        Ok(bytes(ct, out))
    })
    .await
}

/// The threads with samples of value `v`: `[{pid, tid, name, value}]`, largest first.
fn thread_totals(p: &Profile, v: usize) -> Vec<serde_json::Value> {
    let mut sums = vec![0i64; p.threads.len()];
    for smp in &p.samples {
        sums[smp.thread as usize] += smp.values[v];
    }
    let mut order: Vec<usize> = (0..sums.len()).filter(|&i| sums[i] != 0).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(sums[i]), p.threads[i].tid));
    order
        .into_iter()
        .map(|i| {
            let t = &p.threads[i];
            serde_json::json!({ "pid": t.pid, "tid": t.tid, "name": t.name, "value": sums[i] })
        })
        .collect()
}

pub(super) async fn doctor(
    State(s): State<Arc<Shared>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let q = params(q, &["target", "selector", "from", "until", "thread", "pid"])?;
    let targets = selected(&s, &q)?;
    let (from, until) = range(&q, "from", "until")?;
    let only = ThreadFilter::of(&q)?;
    blocking(move || {
        let mut p = load(&s, &targets, from, until)?;
        only.apply(&mut p);
        let d = whyslow_analyze::doctor::diagnose(&p, &format!("target {}", join(&targets.targets)));
        let mut out = Vec::new();
        whyslow_render::doctor::json(&mut out, &p, &d).map_err(internal)?;
        Ok(bytes("application/json", out))
    })
    .await
}

/// The always-on doctor's findings of the targets in windows overlapping [from, until), one entry per
/// target and rule: its episodes (runs of windows it was found in: when it started and stopped, its peak
/// and last impact), every window's impact, and the latest evidence.
pub(super) async fn findings(
    State(s): State<Arc<Shared>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let q = params(q, &["target", "selector", "from", "until"])?;
    let targets = selected(&s, &q)?;
    let (from, until) = range(&q, "from", "until")?;
    blocking(move || {
        let rows = s.store.lock().expect("store lock").findings(&targets.targets, from, until)?;
        let mut out = Vec::new();
        for group in rows.chunk_by(|a, b| a.target == b.target && a.rule == b.rule) {
            let mut episodes: Vec<serde_json::Value> = Vec::new();
            let mut run: Vec<&crate::store::FindingRow> = Vec::new();
            let close = |run: &[&crate::store::FindingRow], episodes: &mut Vec<serde_json::Value>| {
                if let (Some(a), Some(z)) = (run.first(), run.last()) {
                    let peak = run.iter().map(|f| f.impact_pct).fold(0.0, f64::max);
                    episodes.push(serde_json::json!({
                        "start_ns": a.start_ns, "end_ns": z.end_ns, "windows": run.len(),
                        "peak_impact_pct": peak, "last_impact_pct": z.impact_pct,
                    }));
                }
            };
            for f in group {
                // A gap longer than a window ends an episode.
                if let Some(prev) = run.last() {
                    if f.start_ns > prev.end_ns + (prev.end_ns - prev.start_ns) {
                        close(&run, &mut episodes);
                        run.clear();
                    }
                }
                run.push(f);
            }
            close(&run, &mut episodes);
            let last = group.last().expect("chunks are not empty");
            let points: Vec<serde_json::Value> = group
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "start_ns": f.start_ns, "end_ns": f.end_ns, "impact_pct": f.impact_pct,
                        "confidence": f.confidence,
                    })
                })
                .collect();
            out.push(serde_json::json!({
                "target": last.target,
                "rule": last.rule,
                "title": last.title,
                "impact_of": last.impact_of,
                "windows": group.len(),
                "episodes": episodes,
                "points": points,
                "evidence": last.evidence,
            }));
        }
        Ok(json(
            StatusCode::OK,
            &serde_json::json!({ "doctor": s.opts.doctor, "from_ns": from, "until_ns": until, "findings": out }),
        ))
    })
    .await
}

/// The regressions the always-on doctor reported, oldest first: of every target, or of those named;
/// `from` and `until` bound when they were found (default: everything stored).
pub(super) async fn regressions(
    State(s): State<Arc<Shared>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let q = params(q, &["target", "selector", "from", "until"])?;
    let targets = if q.contains_key("target") || q.contains_key("selector") {
        selected(&s, &q)?.targets
    } else {
        s.targets.read().expect("targets lock").keys().copied().collect()
    };
    let now = now_ns();
    let at = |k: &str, default: u64| {
        q.get(k).map_or(Ok(default), |v| timespec::parse(v, now).map_err(ApiError::bad))
    };
    let (from, until) = (at("from", 0)?, at("until", u64::MAX)?);
    blocking(move || {
        let events = s.store.lock().expect("store lock").events(&targets, Some("regression"), from, until)?;
        let list: Vec<serde_json::Value> = events
            .iter()
            .map(|e| {
                let mut v: serde_json::Value = serde_json::from_str(&e.body).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("id".into(), e.id.into());
                    o.insert("at_ns".into(), e.at_ns.into());
                }
                v
            })
            .collect();
        Ok(json(StatusCode::OK, &serde_json::json!({ "doctor": s.opts.doctor, "regressions": list })))
    })
    .await
}

/// Compares two ranges of one target of one's choosing (the previous day, the week before a change)
/// by the always-on doctor's rules: `{before_windows, after_windows, regression}` (null: none).
pub(super) async fn regression_check(
    State(s): State<Arc<Shared>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let q = params(q, &["target", "before_from", "before_until", "after_from", "after_until"])?;
    let id = target_id(q.get("target").ok_or_else(|| ApiError::bad("name the target: target=ID"))?, &s)?;
    for k in ["before_from", "before_until", "after_from", "after_until"] {
        if !q.contains_key(k) {
            return Err(ApiError::bad(format!(
                "a check needs before_from, before_until, after_from, after_until ({k} missing)"
            )));
        }
    }
    let before = range(&q, "before_from", "before_until")?;
    let after = range(&q, "after_from", "after_until")?;
    blocking(move || {
        let spec = s.targets.read().expect("targets lock").get(&id).cloned();
        let spec = spec.ok_or_else(|| ApiError::not_found(format!("no target {id}")))?;
        let side = |(from, until): (u64, u64)| -> Result<Vec<_>, ApiError> {
            crate::watch::window_stats(&s, id, &spec, from, until)?.ok_or_else(|| {
                ApiError(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "a range holds more than {} windows: query a shorter one",
                        crate::watch::MAX_RANGE_WINDOWS
                    ),
                )
            })
        };
        let (b, a) = (side(before)?, side(after)?);
        let cfg = whyslow_analyze::regress::Config::default();
        let r = whyslow_analyze::regress::compare_windows(&cfg, &b, &a)
            .map(|r| crate::watch::regression_json(id, spec.name.as_deref(), &r));
        Ok(json(
            StatusCode::OK,
            &serde_json::json!({ "before_windows": b.len(), "after_windows": a.len(), "regression": r }),
        ))
    })
    .await
}

pub(super) async fn diff(
    State(s): State<Arc<Shared>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let keys = [
        "target",
        "selector",
        "after_target",
        "type",
        "before_from",
        "before_until",
        "after_from",
        "after_until",
        "thread",
        "pid",
        "format",
    ];
    let q = params(q, &[&keys[..], &crate::slicing::KEYS].concat())?;
    let slice = crate::slicing::of(&q).map_err(ApiError::bad)?;
    let targets = selected(&s, &q)?;
    // The after range may come from other targets (two recordings opened by `whyslow view`).
    let after_targets = match q.get("after_target") {
        Some(t) => Selection {
            targets: t.split(',').map(|id| target_id(id.trim(), &s)).collect::<Result<Vec<_>, _>>()?,
            process_labels: targets.process_labels.clone(),
        },
        None => targets.clone(),
    };
    for k in ["before_from", "before_until", "after_from", "after_until"] {
        if !q.contains_key(k) {
            return Err(ApiError::bad(format!(
                "diff needs before_from, before_until, after_from, after_until ({k} missing)"
            )));
        }
    }
    let before = range(&q, "before_from", "before_until")?;
    let after = range(&q, "after_from", "after_until")?;
    let only = ThreadFilter::of(&q)?;
    let format = q.get("format").map_or("json", String::as_str).to_string();
    if !["json", "tree", "svg"].contains(&format.as_str()) {
        return Err(ApiError::bad(format!("format '{format}' is not one of json, tree, svg")));
    }
    blocking(move || {
        let mut b = load(&s, &targets, before.0, before.1)?;
        let mut a = load(&s, &after_targets, after.0, after.1)?;
        only.apply(&mut b);
        only.apply(&mut a);
        if !slice.is_everything() {
            (b, a) = (slice.apply(&b), slice.apply(&a));
        }
        let vb = value(&b, &q)?;
        let va = a.sample_type(&b.sample_types[vb].name).ok_or_else(|| {
            ApiError::unprocessable(format!("the after range has no '{}' samples", b.sample_types[vb].name))
        })?;
        let (sb, sa) = (whyslow_analyze::diff::Side::new(&b, vb), whyslow_analyze::diff::Side::new(&a, va));
        let mut out = Vec::new();
        if format == "svg" {
            let title = format!("target {}: after vs before", join(&targets.targets));
            let o = whyslow_render::diff::DiffFlameOptions { title, negate: false, shares_only: false };
            whyslow_render::diff::svg(&mut out, sb, sa, &o)?;
            return Ok(bytes("image/svg+xml", out));
        }
        if format == "tree" {
            whyslow_render::diff::tree_json(&mut out, sb, sa)?;
            return Ok(bytes("application/json", out));
        }
        let d = whyslow_analyze::diff::diff(sb, sa, false);
        whyslow_render::diff::json(&mut out, &d, 50)?;
        Ok(bytes("application/json", out))
    })
    .await
}
