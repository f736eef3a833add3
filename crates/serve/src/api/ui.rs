//! The web UI's files, embedded in the binary.

use super::reply::{ApiError, ApiResult};
use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// The web UI: hand-written HTML, CSS and JavaScript modules embedded in the binary. No bundler or
/// JavaScript toolchain: the browser loads the modules as they are, so the binary builds offline from the
/// repository alone and what is served is exactly what is committed.
const UI_FILES: [(&str, &str, &str); 9] = {
    const HTML: &str = "text/html; charset=utf-8";
    const JS: &str = "text/javascript; charset=utf-8";
    [
        ("index.html", HTML, include_str!("../../ui/index.html")),
        ("app.css", "text/css; charset=utf-8", include_str!("../../ui/app.css")),
        ("app.js", JS, include_str!("../../ui/app.js")),
        ("api.js", JS, include_str!("../../ui/api.js")),
        ("state.js", JS, include_str!("../../ui/state.js")),
        ("format.js", JS, include_str!("../../ui/format.js")),
        ("flame.js", JS, include_str!("../../ui/flame.js")),
        ("timeline.js", JS, include_str!("../../ui/timeline.js")),
        ("views.js", JS, include_str!("../../ui/views.js")),
    ]
};

fn ui_file(name: &str) -> Result<Response, ApiError> {
    let (_, ct, body) = UI_FILES
        .iter()
        .find(|(n, _, _)| *n == name)
        .ok_or_else(|| ApiError::not_found(format!("no UI file '{name}'")))?;
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, *ct), (header::CACHE_CONTROL, "no-cache")], *body)
        .into_response())
}

pub(super) async fn ui_index() -> ApiResult {
    ui_file("index.html")
}

pub(super) async fn ui_asset(Path(file): Path<String>) -> ApiResult {
    ui_file(&file)
}
