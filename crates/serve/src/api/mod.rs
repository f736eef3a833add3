//! The HTTP API. Every error is JSON `{"error": "..."}` with a 4xx status for bad input; only a failure of
//! the agent itself (its store) is a 5xx. Queries and bodies are parsed strictly: unknown parameters and
//! fields are errors, never ignored.

use crate::shared::Shared;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::middleware;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use whyslow_model::unix_now_ns as now_ns;

mod conns;
mod guard;
mod memory;
mod profiles;
mod query;
mod reply;
mod stackprobe;
mod targets;
mod ui;

use guard::guard;
use profiles::{diff, doctor, findings, profile, regression_check, regressions};
use reply::{bytes, internal, json, ApiError, ApiResult};
use stackprobe::{get_flamegraph, put_flamegraph};
use targets::{add_target, delete_target, get_target, list_targets, patch_target, processes};
use ui::{ui_asset, ui_index};

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
        .route("/api/v1/inuse", get(memory::inuse))
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
