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

/// A client that has not sent a request's headers within this long (from connecting, or from its last
/// answer on a kept-alive connection) is disconnected: slow or idle clients cannot hold connections.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A request body must arrive within this long.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once, in all and from one address. The rest are closed at once (and counted), so
/// the descriptors recording needs are never taken by clients.
pub const MAX_CONNECTIONS: usize = 256;
pub const MAX_CONNECTIONS_PER_CLIENT: usize = 32;
/// Descriptors kept back from connections for recording (perf events, eBPF maps, files, the store).
const RESERVED_FDS: u64 = 512;

/// Connections open now, in all and by client address.
#[derive(Default)]
struct Conns {
    total: usize,
    by_client: std::collections::HashMap<std::net::IpAddr, usize>,
}

/// One admitted connection: counted until dropped.
struct Admitted(Arc<Shared>, Arc<std::sync::Mutex<Conns>>, std::net::IpAddr);

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut c = self.1.lock().expect("conns lock");
        c.total -= 1;
        if let Some(n) = c.by_client.get_mut(&self.2) {
            *n -= 1;
            if *n == 0 {
                c.by_client.remove(&self.2);
            }
        }
        self.0.counters.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The connection cap: the configured one, lowered so that RESERVED_FDS descriptors stay free under the
/// descriptor limit (raised to its hard maximum first).
fn connection_cap() -> usize {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            let raised = libc::rlimit { rlim_cur: r.rlim_max.min(1 << 20), rlim_max: r.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                r = raised;
            }
        }
    }
    let open = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(64);
    let room = r.rlim_cur.saturating_sub(open + RESERVED_FDS) as usize;
    MAX_CONNECTIONS.min(room.max(8))
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
    let cap = connection_cap();
    let per_client = MAX_CONNECTIONS_PER_CLIENT.min(cap);
    let conns = Arc::new(std::sync::Mutex::new(Conns::default()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                if shared.stopping() { break } else { continue }
            }
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            // Out of descriptors (or another transient failure): wait instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let admitted = {
            let mut c = conns.lock().expect("conns lock");
            let mine = c.by_client.get(&peer.ip()).copied().unwrap_or(0);
            (c.total < cap && mine < per_client).then(|| {
                c.total += 1;
                *c.by_client.entry(peer.ip()).or_default() += 1;
                Admitted(shared.clone(), conns.clone(), peer.ip())
            })
        };
        let Some(admitted) = admitted else {
            shared.counters.connections_refused.fetch_add(1, Ordering::Relaxed);
            // Told why when the socket takes it at once; closed either way.
            let _ = stream.try_write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 37\r\n\r\n{\"error\": \"too many connections\"}\r\n\r\n",
            );
            drop(stream);
            continue;
        };
        shared.counters.connections_open.fetch_add(1, Ordering::Relaxed);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut stop = stop_rx.clone();
        let s = shared.clone();
        tokio::spawn(async move {
            let _admitted = admitted;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(conn);
            let ended = tokio::select! {
                r = conn.as_mut() => r,
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if ended.is_err_and(|e| e.is_timeout()) {
                s.counters.connections_timed_out.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let _ = stop_tx.send(true);
    // Answers in flight finish (a few seconds at most); idle connections close now.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while conns.lock().expect("conns lock").total > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

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
async fn guard(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
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
fn body(b: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    b.map_err(|r| ApiError(r.status(), r.body_text()))
}

/// Query parameters, every one of them known to the endpoint.
fn params(
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

/// The web UI: hand-written HTML, CSS and JavaScript embedded in the binary. No bundler or JavaScript
/// toolchain: three small files need no build step, so the binary builds offline from the repository alone
/// and what is served is exactly what is committed.
const UI_FILES: [(&str, &str, &str); 3] = [
    ("index.html", "text/html; charset=utf-8", include_str!("../ui/index.html")),
    ("app.css", "text/css; charset=utf-8", include_str!("../ui/app.css")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../ui/app.js")),
];

fn ui_file(name: &str) -> Result<Response, ApiError> {
    let (_, ct, body) = UI_FILES
        .iter()
        .find(|(n, _, _)| *n == name)
        .ok_or_else(|| ApiError::not_found(format!("no UI file '{name}'")))?;
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, *ct), (header::CACHE_CONTROL, "no-cache")], *body)
        .into_response())
}

async fn ui_index() -> ApiResult {
    ui_file("index.html")
}

async fn ui_asset(Path(file): Path<String>) -> ApiResult {
    ui_file(&file)
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

fn target_json(id: i64, spec: &TargetSpec) -> serde_json::Value {
    let mut v = serde_json::to_value(spec).expect("a spec serializes");
    v.as_object_mut().expect("a spec is an object").insert("id".into(), id.into());
    v
}

fn target_id(id: &str, s: &Shared) -> Result<i64, ApiError> {
    let id: i64 = id.parse().map_err(|_| ApiError::bad(format!("target id '{id}' is not a number")))?;
    if s.targets.read().expect("targets lock").contains_key(&id) {
        Ok(id)
    } else {
        Err(ApiError::not_found(format!("no target {id}")))
    }
}

/// The targets; with `windows=true` each also tells the windows stored of it:
/// `windows: {count, first_unix_ns, last_unix_ns}` (the UI picks its time range from them).
async fn list_targets(
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

async fn add_target(State(s): State<Arc<Shared>>, b: Result<Bytes, BytesRejection>) -> ApiResult {
    let spec = TargetSpec::from_json(&body(b)?)?;
    name_taken(&s, &spec, None)?;
    let id = s.store.lock().expect("store lock").add_target(&spec, now_ns())?;
    let v = target_json(id, &spec);
    s.targets.write().expect("targets lock").insert(id, spec);
    Ok(json(StatusCode::CREATED, &v))
}

async fn get_target(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> ApiResult {
    let id = target_id(&id, &s)?;
    let t = s.targets.read().expect("targets lock");
    Ok(json(StatusCode::OK, &target_json(id, &t[&id])))
}

/// A JSON merge patch (RFC 7396) of the definition; the result is checked like a new one.
async fn patch_target(
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

async fn delete_target(State(s): State<Arc<Shared>>, Path(id): Path<String>) -> ApiResult {
    let id = target_id(&id, &s)?;
    s.store.lock().expect("store lock").delete_target(id)?;
    s.targets.write().expect("targets lock").remove(&id);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn processes(
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

/// What a query names: targets, and optionally labels of the processes' cgroups (unit, container_id,
/// pod_uid) their windows must carry.
#[derive(Clone)]
struct Selection {
    targets: Vec<i64>,
    process_labels: Vec<(String, String)>,
}

/// The targets a query names: `target=ID[,ID]` or `selector=label=value[,label=value]`, where a label is
/// a target's label or one of a process's cgroup labels (`unit=nginx.service`, `container_id=`,
/// `pod_uid=`: the windows of those processes, in any target).
fn selected(s: &Shared, q: &BTreeMap<String, String>) -> Result<Selection, ApiError> {
    match (q.get("target"), q.get("selector")) {
        (Some(_), Some(_)) => Err(ApiError::bad("give target or selector, not both")),
        (Some(t), None) => Ok(Selection {
            targets: t.split(',').map(|id| target_id(id.trim(), s)).collect::<Result<_, _>>()?,
            process_labels: Vec::new(),
        }),
        (None, Some(sel)) => {
            let mut want = Vec::new();
            let mut process_labels = Vec::new();
            for pair in sel.split(',') {
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
            let ids: Vec<i64> = s
                .targets
                .read()
                .expect("targets lock")
                .iter()
                .filter(|(_, t)| want.iter().all(|(k, v)| t.labels.get(*k).is_some_and(|x| x == v)))
                .map(|(&id, _)| id)
                .collect();
            if ids.is_empty() {
                return Err(ApiError::not_found(format!("no target has the labels {sel}")));
            }
            Ok(Selection { targets: ids, process_labels })
        }
        (None, None) => Err(ApiError::bad("name the targets: target=ID or selector=label=value")),
    }
}

/// The [from, until) range of a query (`from` defaults to now-15m, `until` to now).
fn range(q: &BTreeMap<String, String>, from_key: &str, until_key: &str) -> Result<(u64, u64), ApiError> {
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

/// Largest sum of stored window bytes one query merges.
const MAX_QUERY_BYTES: u64 = 512 << 20;

/// The samples of `targets` in [from, until): the stored windows overlapping it, merged, without the
/// samples of time slices outside it.
fn load(s: &Shared, sel: &Selection, from: u64, until: u64) -> Result<Profile, ApiError> {
    let mut p = load_windows(s, sel, from, until)?;
    p.retain_time(from, until);
    Ok(p)
}

/// The threads a query names: `thread=TID[,TID]` and/or `pid=PID[,PID]` (None: any).
struct ThreadFilter {
    tids: Option<Vec<u32>>,
    pids: Option<Vec<u32>>,
}

impl ThreadFilter {
    fn of(q: &BTreeMap<String, String>) -> Result<Self, ApiError> {
        let ids = |k: &str| -> Result<Option<Vec<u32>>, ApiError> {
            let num =
                |x: &str| x.trim().parse().map_err(|_| ApiError::bad(format!("{k} '{x}' is not a number")));
            q.get(k).map(|v| v.split(',').map(num).collect()).transpose()
        };
        Ok(ThreadFilter { tids: ids("thread")?, pids: ids("pid")? })
    }

    /// Keeps the samples of the threads named.
    fn apply(&self, p: &mut Profile) {
        if self.tids.is_some() || self.pids.is_some() {
            let has = |l: &Option<Vec<u32>>, v: u32| l.as_ref().is_none_or(|l| l.contains(&v));
            p.retain_threads(|t| has(&self.tids, t.tid) && has(&self.pids, t.pid));
        }
    }
}

/// Every stored window of `targets` overlapping [from, until), merged into one profile.
fn load_windows(s: &Shared, sel: &Selection, from: u64, until: u64) -> Result<Profile, ApiError> {
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
    let ids: Vec<i64> = rows.iter().map(|w| w.id).collect();
    Ok(crate::merged(s, &ids)?)
}

/// The index of the sample type a query asks for (`type`, default the profile's: cpu, else the first).
fn value(p: &Profile, q: &BTreeMap<String, String>) -> Result<usize, ApiError> {
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

async fn blocking(f: impl FnOnce() -> ApiResult + Send + 'static) -> ApiResult {
    tokio::task::spawn_blocking(f).await.map_err(internal)?
}

async fn profile(
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
        let mut p = load(&s, &targets, from, until)?;
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

fn join(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

async fn doctor(
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
async fn findings(
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
async fn regressions(
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
async fn regression_check(
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

async fn diff(
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

/// stackprobe's form: the targets it defined (named `flamegraph-N`).
async fn get_flamegraph(State(s): State<Arc<Shared>>) -> Response {
    let t = s.targets.read().expect("targets lock");
    let list: Vec<serde_json::Value> = t
        .iter()
        .filter(|(_, spec)| spec.name.as_deref().is_some_and(|n| n.starts_with(STACKPROBE_PREFIX)))
        .map(|(&id, spec)| target_json(id, spec))
        .collect();
    json(StatusCode::OK, &serde_json::json!({ "targets": list }))
}

/// stackprobe's `PUT /flamegraph`: replaces the targets an earlier PUT defined.
async fn put_flamegraph(State(s): State<Arc<Shared>>, b: Result<Bytes, BytesRejection>) -> ApiResult {
    let specs = spec::from_stackprobe(&body(b)?)?;
    let mut store = s.store.lock().expect("store lock");
    let mut targets = s.targets.write().expect("targets lock");
    let old: Vec<i64> = targets
        .iter()
        .filter(|(_, t)| t.name.as_deref().is_some_and(|n| n.starts_with(STACKPROBE_PREFIX)))
        .map(|(&id, _)| id)
        .collect();
    for id in old {
        store.delete_target(id)?;
        targets.remove(&id);
    }
    let mut list = Vec::new();
    for spec in specs {
        let id = store.add_target(&spec, now_ns())?;
        list.push(target_json(id, &spec));
        targets.insert(id, spec);
    }
    Ok(json(StatusCode::OK, &serde_json::json!({ "targets": list })))
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

    #[test]
    fn merge_patch_follows_rfc_7396() {
        let mut v = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}});
        super::merge_patch(&mut v, &serde_json::json!({"a": null, "b": {"c": 5}, "e": [1]}));
        assert_eq!(v, serde_json::json!({"b": {"c": 5, "d": 3}, "e": [1]}));
    }
}
