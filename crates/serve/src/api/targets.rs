//! Targets: defined, changed and removed through the API, and the processes followed now.

use super::guard::body;
use super::query::{params, target_id};
use super::reply::{json, ApiError, ApiResult};
use crate::shared::Shared;
use crate::spec::TargetSpec;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use std::sync::Arc;
use whyslow_model::unix_now_ns as now_ns;

pub(super) fn target_json(id: i64, spec: &TargetSpec) -> serde_json::Value {
    let mut v = serde_json::to_value(spec).expect("a spec serializes");
    v.as_object_mut().expect("a spec is an object").insert("id".into(), id.into());
    v
}

/// The targets; with `windows=true` each also tells the windows stored of it:
/// `windows: {count, first_unix_ns, last_unix_ns}` (the UI picks its time range from them).
pub(super) async fn list_targets(
    State(s): State<Arc<Shared>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let q = params(q, &["windows"])?;
    let windows = match q.get("windows").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(ApiError::bad(format!("windows '{other}' is not true or false"))),
    };
    let t = s.targets.read().expect("targets lock").clone();
    let mut list = Vec::with_capacity(t.len());
    for (id, spec) in &t {
        let mut v = target_json(*id, spec);
        if windows {
            let (count, first, last) = s.store.lock().expect("store lock").span(*id)?;
            v.as_object_mut().expect("a spec is an object").insert(
                "windows".into(),
                serde_json::json!({ "count": count, "first_unix_ns": first, "last_unix_ns": last }),
            );
        }
        list.push(v);
    }
    Ok(json(StatusCode::OK, &serde_json::Value::Array(list)))
}

/// A name another target has already (names key config targets, files and pushed series): 409.
fn name_taken(s: &Shared, spec: &TargetSpec, except: Option<i64>) -> Result<(), ApiError> {
    let Some(name) = &spec.name else { return Ok(()) };
    let t = s.targets.read().expect("targets lock");
    match t.iter().find(|(id, o)| Some(**id) != except && o.name.as_ref() == Some(name)) {
        Some((id, _)) => {
            Err(ApiError(StatusCode::CONFLICT, format!("target {id} is named '{name}' already")))
        }
        None => Ok(()),
    }
}

pub(super) async fn add_target(State(s): State<Arc<Shared>>, b: Result<Bytes, BytesRejection>) -> ApiResult {
    let spec = TargetSpec::from_json(&body(b)?)?;
    name_taken(&s, &spec, None)?;
    let id = s.store.lock().expect("store lock").add_target(&spec, now_ns())?;
    let v = target_json(id, &spec);
    s.targets.write().expect("targets lock").insert(id, spec);
    Ok(json(StatusCode::CREATED, &v))
}

pub(super) async fn get_target(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> ApiResult {
    let id = target_id(&id, &s)?;
    let t = s.targets.read().expect("targets lock");
    Ok(json(StatusCode::OK, &target_json(id, &t[&id])))
}

/// A JSON merge patch (RFC 7396) of the definition; the result is checked like a new one.
pub(super) async fn patch_target(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = target_id(&id, &s)?;
    let patch: serde_json::Value =
        serde_json::from_slice(&body(b)?).map_err(|e| ApiError::bad(format!("invalid JSON: {e}")))?;
    if !patch.is_object() {
        return Err(ApiError::bad("a patch is a JSON object (RFC 7396 merge patch)"));
    }
    let current = s.targets.read().expect("targets lock")[&id].clone();
    let mut v = serde_json::to_value(&current).expect("a spec serializes");
    merge_patch(&mut v, &patch);
    let spec = TargetSpec::from_json(&serde_json::to_vec(&v).expect("a value serializes"))?;
    name_taken(&s, &spec, Some(id))?;
    if !s.store.lock().expect("store lock").update_target(id, &spec)? {
        return Err(ApiError::not_found(format!("no target {id}")));
    }
    s.targets.write().expect("targets lock").insert(id, spec.clone());
    Ok(json(StatusCode::OK, &target_json(id, &spec)))
}

fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    match (target, patch) {
        (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

pub(super) async fn delete_target(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> ApiResult {
    let id = target_id(&id, &s)?;
    s.store.lock().expect("store lock").delete_target(id)?;
    s.targets.write().expect("targets lock").remove(&id);
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(super) async fn processes(
    State(s): State<Arc<Shared>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let q = params(q, &["target"])?;
    let only: Option<i64> = match q.get("target") {
        Some(t) => Some(target_id(t, &s)?),
        None => None,
    };
    let tracked = s.tracked.lock().expect("tracked lock").clone();
    let host = s.host_tracked.lock().expect("tracked lock").clone();
    let list: Vec<serde_json::Value> = tracked
        .values()
        .chain(host.values())
        .filter(|t| t.gone_ns.is_none() && only.is_none_or(|id| t.targets.contains(&id)))
        .map(|t| {
            serde_json::json!({
                "pid": t.view.pid,
                "ppid": t.view.ppid,
                "comm": t.view.comm,
                "cmdline": t.view.cmdline,
                "cgroup": t.view.cgroup,
                "labels": crate::cgroup::labels(&t.view.cgroup),
                "targets": t.targets,
                "sources": t.key.name(),
                // Recorded once for all its targets: with the shortest window any of them asks for.
                "window_s": t.key.window_s,
                "frequency": t.key.frequency,
                "followed": if t.host { "host-wide".to_string() } else if t.root == t.view.pid { "directly".to_string() } else { format!("inherited from {}", t.root) },
                "since_unix_ns": t.since_ns,
            })
        })
        .collect();
    Ok(json(StatusCode::OK, &serde_json::Value::Array(list)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn merge_patch_follows_rfc_7396() {
        let mut v = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}});
        super::merge_patch(&mut v, &serde_json::json!({"a": null, "b": {"c": 5}, "e": [1]}));
        assert_eq!(v, serde_json::json!({"b": {"c": 5, "d": 3}, "e": [1]}));
    }
}
