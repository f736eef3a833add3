//! What every request passes before its handler: the Host and Origin checks (no DNS rebinding, no
//! cross-site writes), the content type and size, the bearer token, the body's deadline.

use super::reply::ApiError;
use crate::shared::Shared;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;

/// The host part of a `Host` header or an origin's authority (brackets of an IPv6 address removed).
fn host_name(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    authority.rsplit_once(':').map_or(authority, |(h, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            h
        } else {
            authority
        }
    })
}

/// A request body must arrive within this long.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a request may name this host: an IP address (a page's own origin, never a rebound name),
/// `localhost`, or a name given with --allow-host. Any other name may be a DNS-rebinding page.
fn host_allowed(s: &Shared, host: &str) -> bool {
    let name = host_name(host);
    name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || s.opts.allow_hosts.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// Why a request is refused before it reaches its handler (403/415/413/408), or None.
fn screen(s: &Shared, req: &Request) -> Option<ApiError> {
    let h = req.headers();
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
    if let Some(host) = host {
        if !host_allowed(s, host) {
            return Some(ApiError(
                StatusCode::FORBIDDEN,
                format!("Host '{host}' is not this agent (name it with --allow-host to use it)"),
            ));
        }
    }
    // A browser names the page that sent a request: only the agent's own pages (its UI) may.
    if let Some(origin) = h.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        if authority.is_none_or(|a| Some(a) != host) {
            return Some(ApiError(
                StatusCode::FORBIDDEN,
                format!("requests from other origins ('{origin}') are refused"),
            ));
        }
    }
    let method = req.method();
    let writes = *method == axum::http::Method::POST || *method == axum::http::Method::PATCH;
    if writes && req.uri().path().starts_with("/api/") {
        let ct = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if !(mime == "application/json" || mime == "application/merge-patch+json") {
            return Some(ApiError(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "writes take Content-Type: application/json, not '{ct}' (curl: -H 'Content-Type: application/json')"
                ),
            ));
        }
    }
    let length = h.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if length.is_some_and(|n| n > s.opts.max_body as u64) {
        return Some(ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {} bytes", s.opts.max_body),
        ));
    }
    None
}

/// Every request: the Host, Origin, content type and size screened, the bearer token when one is
/// configured (not for /healthz and the UI's files), the body read within [`BODY_TIMEOUT`], and the
/// status counted.
pub(super) async fn guard(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    // The UI's static files hold no data (the page asks for the token and sends it with its API calls).
    let path = req.uri().path();
    let open = path == "/healthz" || path == "/" || path.starts_with("/ui/");
    let res = if let Some(refused) = screen(&s, &req) {
        refused.into_response()
    } else {
        match &s.opts.token {
            Some(token) if !open && !authorized(req.headers(), token) => ApiError(
                StatusCode::UNAUTHORIZED,
                "missing or wrong bearer token (Authorization: Bearer ...)".into(),
            )
            .into_response(),
            _ => {
                let (parts, body) = req.into_parts();
                let read =
                    tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, s.opts.max_body)).await;
                match read {
                    Ok(Ok(bytes)) => {
                        next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await
                    }
                    Ok(Err(_)) => ApiError(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("the body is larger than {} bytes or was cut", s.opts.max_body),
                    )
                    .into_response(),
                    Err(_) => ApiError(
                        StatusCode::REQUEST_TIMEOUT,
                        format!("the body did not arrive within {} s", BODY_TIMEOUT.as_secs()),
                    )
                    .into_response(),
                }
            }
        }
    };
    s.counters.request(res.status().as_u16());
    res
}

fn authorized(h: &HeaderMap, token: &str) -> bool {
    let given =
        h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()))
}

/// Compares without an early exit, so the time taken does not tell how much of the token matched (only
/// whether the length did).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The body, or the JSON error for a body too large (413) or unreadable (400).
pub(super) fn body(b: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    b.map_err(|r| ApiError(r.status(), r.body_text()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_compare_whole() {
        use super::constant_time_eq as eq;
        assert!(eq(b"secret", b"secret"));
        assert!(!eq(b"secre", b"secret") && !eq(b"secret!", b"secret") && !eq(b"", b"secret"));
        assert!(!eq(b"secreT", b"secret") && eq(b"", b""));
    }
}
