//! The HTTP API. Every error is JSON `{"error": "..."}` with a 4xx status for bad input; only a failure of
//! the agent itself (its store) is a 5xx. Queries and bodies are parsed strictly: unknown parameters and
//! fields are errors, never ignored.

use crate::spec::{self, TargetSpec, STACKPROBE_PREFIX};
use crate::{now_ns, timespec, Shared};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use whyslow_model::Profile;
use whyslow_render::RenderError;

mod conns;
mod guard;
mod profiles;
mod query;
mod targets;
mod ui;

use guard::guard;
use profiles::{diff, doctor, findings, profile, regression_check, regressions};
use targets::{
    add_target, delete_target, get_flamegraph, get_target, list_targets, patch_target, processes,
    put_flamegraph,
};
use ui::{ui_asset, ui_index};

/// An answer that is not a success.
pub struct ApiError(StatusCode, String);

impl ApiError {
    fn bad(m: impl Into<String>) -> Self {
        ApiError(StatusCode::BAD_REQUEST, m.into())
    }
    fn unprocessable(m: impl Into<String>) -> Self {
        ApiError(StatusCode::UNPROCESSABLE_ENTITY, m.into())
    }
    fn not_found(m: impl Into<String>) -> Self {
        ApiError(StatusCode::NOT_FOUND, m.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json(self.0, &serde_json::json!({ "error": self.1 }))
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        let code = match e {
            crate::store::StoreError::Full { .. } => StatusCode::INSUFFICIENT_STORAGE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(code, e.to_string())
    }
}

impl From<spec::SpecError> for ApiError {
    fn from(e: spec::SpecError) -> Self {
        match e {
            spec::SpecError::Syntax(m) => ApiError::bad(format!("invalid JSON: {m}")),
            spec::SpecError::Invalid(m) => ApiError::unprocessable(m),
        }
    }
}

impl From<RenderError> for ApiError {
    fn from(e: RenderError) -> Self {
        match e {
            RenderError::Io(e) => ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            other => ApiError::not_found(other.to_string()),
        }
    }
}

type ApiResult = Result<Response, ApiError>;

fn json(status: StatusCode, v: &serde_json::Value) -> Response {
    let mut body = serde_json::to_vec_pretty(v).expect("a JSON value serializes");
    body.push(b'\n');
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn bytes(content_type: &'static str, body: Vec<u8>) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

pub async fn serve(shared: Arc<Shared>, listener: std::net::TcpListener) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let max_body = shared.opts.max_body;
    let app = Router::new()
        .route("/", get(ui_index))
        .route("/ui/{file}", get(ui_asset))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/api/v1/targets", get(list_targets).post(add_target))
        .route("/api/v1/targets/{id}", get(get_target).patch(patch_target).delete(delete_target))
        .route("/api/v1/processes", get(processes))
        .route("/api/v1/profile", get(profile))
        .route("/api/v1/doctor", get(doctor))
        .route("/api/v1/findings", get(findings))
        .route("/api/v1/regressions", get(regressions))
        .route("/api/v1/regressions/check", get(regression_check))
        .route("/api/v1/diff", get(diff))
        .route("/flamegraph", get(get_flamegraph).put(put_flamegraph))
        .fallback(|| async { ApiError::not_found("no such endpoint (see /api/v1/targets, /api/v1/profile)") })
        .method_not_allowed_fallback(|| async {
            ApiError(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint".into())
        })
        .layer(middleware::from_fn_with_state(shared.clone(), guard))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(shared.clone());
    conns::accept(shared, listener, app).await
}

/// Cheap (no store query, no lock held for long) and open: the store's last write and the recorder's
/// last scan, 503 when either is failing.
async fn healthz(State(s): State<Arc<Shared>>) -> Response {
    let tracked = s.tracked.lock().expect("tracked lock").values().filter(|t| t.gone_ns.is_none()).count()
        + s.host_tracked.lock().expect("tracked lock").values().filter(|t| t.gone_ns.is_none()).count();
    let store_error = s.store_error.lock().expect("store error lock").clone();
    let beat = s.manager_beat_ns.load(Ordering::Relaxed);
    // No manager (whyslow view) is not a failure; a manager that has not scanned for 10 s is.
    let recorder_ok = beat == 0 || now_ns().saturating_sub(beat) < 10_000_000_000;
    let ok = store_error.is_none() && recorder_ok;
    let body = serde_json::json!({
        "status": if ok { "ok" } else { "failing" },
        "store": { "ok": store_error.is_none(), "error": store_error },
        "recorder": {
            "ok": recorder_ok,
            "last_scan_unix_ns": beat,
            "session_errors": s.counters.session_errors.load(Ordering::Relaxed),
            "follow_errors": s.counters.follow_errors.load(Ordering::Relaxed),
        },
        "tracked_processes": tracked,
    });
    json(if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, &body)
}

async fn metrics(State(s): State<Arc<Shared>>) -> ApiResult {
    let text = tokio::task::spawn_blocking(move || crate::metrics::render(&s)).await.map_err(internal)??;
    Ok(bytes("text/plain; version=0.0.4; charset=utf-8", text.into_bytes()))
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

async fn blocking(f: impl FnOnce() -> ApiResult + Send + 'static) -> ApiResult {
    tokio::task::spawn_blocking(f).await.map_err(internal)?
}
