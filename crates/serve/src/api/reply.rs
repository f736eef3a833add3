//! What every handler answers with: JSON and bytes, and [`ApiError`], the JSON error of a refused or
//! failed request (4xx for bad input, 5xx only for the agent's own failures). Imports no handler.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use whyslow_render::RenderError;

use crate::spec;
use crate::store::StoreError;

/// An answer that is not a success.
pub struct ApiError(pub(super) StatusCode, pub(super) String);

impl ApiError {
    pub(super) fn bad(m: impl Into<String>) -> Self {
        ApiError(StatusCode::BAD_REQUEST, m.into())
    }
    pub(super) fn unprocessable(m: impl Into<String>) -> Self {
        ApiError(StatusCode::UNPROCESSABLE_ENTITY, m.into())
    }
    pub(super) fn not_found(m: impl Into<String>) -> Self {
        ApiError(StatusCode::NOT_FOUND, m.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json(self.0, &serde_json::json!({ "error": self.1 }))
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let code = match e {
            StoreError::Full { .. } => StatusCode::INSUFFICIENT_STORAGE,
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

pub(super) type ApiResult = Result<Response, ApiError>;

pub(super) fn json(status: StatusCode, v: &serde_json::Value) -> Response {
    let mut body = serde_json::to_vec_pretty(v).expect("a JSON value serializes");
    body.push(b'\n');
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(super) fn bytes(content_type: &'static str, body: Vec<u8>) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

pub(super) fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

pub(super) async fn blocking(f: impl FnOnce() -> ApiResult + Send + 'static) -> ApiResult {
    tokio::task::spawn_blocking(f).await.map_err(internal)?
}
