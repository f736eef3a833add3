//! Profiles to the backends teams already run: Grafana Pyroscope (its Push API over Connect, or the
//! legacy `/ingest` for older servers) and OpenTelemetry (OTLP profiles over HTTP/protobuf or gRPC).
//!
//! A profile becomes one series per kind of data (CPU, memory, off-CPU, wall, syscalls), each with the
//! sample and period types its backend reads units from. Sending is blocking (ureq; gRPC on a private
//! runtime) and classifies every failure as worth retrying (network, 5xx, 408, 429; gRPC UNAVAILABLE and
//! the like) or not (other 4xx, gRPC INVALID_ARGUMENT and the like: the request itself is wrong).

mod grpc;
mod otlp;
mod pyroscope;

use whyslow_model::{sample_types, Profile};

pub use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
pub use otlp::export_request;
pub use pyroscope::{ingest_url, push_request, PushRequest, RawProfileSeries};

/// Where profiles go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// Pyroscope's Push API: `POST {url}/push.v1.PusherService/Push`.
    Pyroscope(String),
    /// Pyroscope's legacy ingest: `POST {url}/ingest?name=...&format=pprof`.
    PyroscopeIngest(String),
    /// OTLP profiles over HTTP/protobuf: `POST {url}/v1development/profiles`.
    Otlp(String),
    /// OTLP profiles over gRPC: `ProfilesService/Export` at `{url}` (a collector's port 4317).
    OtlpGrpc(String),
}

impl Backend {
    /// `pyroscope=URL`, `pyroscope-ingest=URL`, `otlp=URL` or `otlp-grpc=URL`.
    pub fn parse(s: &str) -> Result<Backend, String> {
        let (kind, url) = s.split_once('=').ok_or_else(|| {
            format!("'{s}' is not KIND=URL (pyroscope=, pyroscope-ingest=, otlp=, otlp-grpc=)")
        })?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("'{url}' is not an http(s):// URL"));
        }
        let url = url.trim_end_matches('/').to_string();
        match kind {
            "pyroscope" => Ok(Backend::Pyroscope(url)),
            "pyroscope-ingest" => Ok(Backend::PyroscopeIngest(url)),
            "otlp" => Ok(Backend::Otlp(url)),
            "otlp-grpc" => Ok(Backend::OtlpGrpc(url)),
            other => Err(format!("unknown backend '{other}' (pyroscope, pyroscope-ingest, otlp, otlp-grpc)")),
        }
    }

    /// A short name for metrics and logs.
    pub fn name(&self) -> String {
        match self {
            Backend::Pyroscope(u) => format!("pyroscope={u}"),
            Backend::PyroscopeIngest(u) => format!("pyroscope-ingest={u}"),
            Backend::Otlp(u) => format!("otlp={u}"),
            Backend::OtlpGrpc(u) => format!("otlp-grpc={u}"),
        }
    }
}

/// Credentials and tenant sent with every request.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    /// `X-Scope-OrgID` (Pyroscope and Mimir-style multi-tenancy).
    pub tenant: Option<String>,
    /// `user:password` for HTTP basic authentication.
    pub basic: Option<String>,
    pub bearer: Option<String>,
}

impl Auth {
    /// The headers (gRPC: metadata) every request carries, names in lowercase.
    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = Vec::new();
        if let Some(t) = &self.tenant {
            h.push(("x-scope-orgid", t.clone()));
        }
        if let Some(b) = &self.basic {
            h.push(("authorization", format!("Basic {}", base64(b.as_bytes()))));
        } else if let Some(t) = &self.bearer {
            h.push(("authorization", format!("Bearer {t}")));
        }
        h
    }
}

/// What the series are labeled with.
#[derive(Debug, Clone, Default)]
pub struct Labels {
    /// `service_name` (OTLP: `service.name`): the target's name, else the process name.
    pub service: String,
    /// The process name (comm), `process` label.
    pub process: String,
    pub hostname: String,
    /// A pid label per process (off by default: one series per process is a cardinality cost).
    pub pid: Option<u32>,
    /// Target labels and `--push-label`s.
    pub extra: Vec<(String, String)>,
}

/// The service a series is named by where nothing names one and the process name is unknown too
/// (OpenTelemetry's `service.name` default).
pub const UNKNOWN_SERVICE: &str = "unknown_service";

/// The `service` label: the name given (a target's, a `--service-name`), else the process name, else
/// [`UNKNOWN_SERVICE`]. The one fallback of `whyslow push` and the agent's pusher.
pub fn service_name(named: Option<String>, process: &str) -> String {
    named.filter(|n| !n.is_empty()).unwrap_or_else(|| {
        if process.is_empty() {
            UNKNOWN_SERVICE.to_string()
        } else {
            process.to_string()
        }
    })
}

/// One kind of data of a profile, as a backend names it.
pub struct Kind {
    /// Pyroscope's `__name__` and legacy ingest suffix.
    pub name: &'static str,
    /// (our sample type, its name there, unit there).
    pub types: &'static [(&'static str, &'static str, &'static str)],
    /// The period type (type, unit).
    pub period: (&'static str, &'static str),
}

/// The kinds pushed, in order; a profile pushes those it has samples of.
pub const KINDS: &[Kind] = &[
    Kind {
        name: "process_cpu",
        types: &[(sample_types::CPU, "samples", "count"), (sample_types::CPU_NS, "cpu", "nanoseconds")],
        period: ("cpu", "nanoseconds"),
    },
    Kind {
        name: "memory",
        types: &[
            (sample_types::ALLOC_COUNT, "alloc_objects", "count"),
            (sample_types::ALLOC_BYTES, "alloc_space", "bytes"),
            (sample_types::INUSE_COUNT, "inuse_objects", "count"),
            (sample_types::INUSE_BYTES, "inuse_space", "bytes"),
        ],
        period: ("space", "bytes"),
    },
    Kind {
        name: "offcpu",
        types: &[(sample_types::OFFCPU, "offcpu", "nanoseconds")],
        period: ("offcpu", "nanoseconds"),
    },
    Kind {
        name: "wall",
        types: &[(sample_types::WALL, "wall", "nanoseconds")],
        period: ("wall", "nanoseconds"),
    },
    Kind {
        name: "syscalls",
        types: &[(sample_types::SYSCALLS, "syscalls", "count")],
        period: ("syscalls", "count"),
    },
];

/// Whether a profile with only some of a kind's types pushes it: memory in use without allocations (a
/// killed process's last snapshot) or allocations without in use (`--alloc`) are memory still; CPU needs
/// its nanoseconds (a cycles profile has no time to push as process_cpu).
fn partial_ok(kind: &Kind) -> bool {
    kind.name == "memory"
}

/// The part of `p` a kind stands for: only its sample types, renamed, one sample per stack and thread
/// (the time slices summed: memory in use is kept as its change per slice, so the sum is what the
/// stack held at the end) and only those with a value; None when the profile has none of them or no
/// sample of them.
pub fn select(p: &Profile, kind: &Kind) -> Option<Profile> {
    let picked: Vec<(usize, &str, &str)> = kind
        .types
        .iter()
        .filter_map(|(ours, name, unit)| Some((p.sample_type(ours)?, *name, *unit)))
        .collect();
    if picked.is_empty() || (picked.len() != kind.types.len() && !partial_ok(kind)) {
        return None;
    }
    let mut out = Profile {
        sample_types: picked
            .iter()
            .map(|(_, n, u)| whyslow_model::SampleType { name: n.to_string(), unit: u.to_string() })
            .collect(),
        samples: Vec::new(),
        ..p.clone()
    };
    let mut at: std::collections::HashMap<(u32, u32), usize> = std::collections::HashMap::new();
    for s in &p.samples {
        let values = picked.iter().map(|(i, _, _)| s.values.get(*i).copied().unwrap_or(0));
        match at.get(&(s.stack, s.thread)) {
            Some(&k) => {
                for (a, v) in out.samples[k].values.iter_mut().zip(values) {
                    *a = a.saturating_add(v);
                }
            }
            None => {
                at.insert((s.stack, s.thread), out.samples.len());
                out.samples.push(whyslow_model::Sample { values: values.collect(), time: 0, ..s.clone() });
            }
        }
    }
    out.samples.retain(|s| s.values.iter().any(|&v| v != 0));
    (!out.samples.is_empty()).then_some(out)
}

/// A kind's profile as gzipped pprof with the kind's period type.
pub fn pprof(p: &Profile, kind: &Kind) -> Vec<u8> {
    let period = match kind.name {
        "process_cpu" if p.meta.frequency_hz > 0 => 1_000_000_000 / p.meta.frequency_hz as i64,
        _ => 0,
    };
    let mut out = Vec::new();
    whyslow_render::export::pprof_with(&mut out, p, Some((kind.period.0, kind.period.1, period)))
        .expect("writing to a Vec cannot fail");
    out
}

#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// Worth trying again later: the backend is unreachable, overloaded or failing.
    #[error("{0}")]
    Retry(String),
    /// The backend refused the request itself: sending it again would fail again.
    #[error("{0}")]
    Refused(String),
}

/// What one send delivered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sent {
    /// Request bytes (bodies; gRPC: the encoded messages).
    pub bytes: u64,
    /// OTLP partial success: profiles the backend accepted the request without keeping.
    pub rejected_profiles: u64,
    /// OTLP partial success: the backend's reason or warning (empty: none).
    pub message: String,
}

/// The time one request may take, connecting included.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Sends profiles to one backend, keeping its connections between sends.
pub struct Sender {
    backend: Backend,
    headers: Vec<(&'static str, String)>,
    agent: ureq::Agent,
    /// Made at the first gRPC send.
    grpc: Option<grpc::Client>,
}

impl Sender {
    pub fn new(backend: &Backend, auth: &Auth) -> Sender {
        Sender {
            backend: backend.clone(),
            headers: auth.headers(),
            agent: ureq::AgentBuilder::new().timeout(TIMEOUT).build(),
            grpc: None,
        }
    }

    /// Sends one profile (every kind it has).
    pub fn send(&mut self, labels: &Labels, p: &Profile) -> Result<Sent, PushError> {
        let mut sent = Sent::default();
        match &self.backend {
            Backend::Pyroscope(url) => {
                let body = prost::Message::encode_to_vec(&push_request(p, labels));
                if body.len() <= 2 {
                    return Ok(sent);
                }
                let req = self
                    .agent
                    .post(&format!("{url}/push.v1.PusherService/Push"))
                    .set("Content-Type", "application/proto")
                    .set("Connect-Protocol-Version", "1");
                sent.bytes += body.len() as u64;
                call(self.with_auth(req), &body)?;
            }
            Backend::PyroscopeIngest(url) => {
                for kind in KINDS {
                    let Some(part) = select(p, kind) else { continue };
                    let body = pprof(&part, kind);
                    let req = self
                        .agent
                        .post(&ingest_url(url, &part, kind, labels))
                        .set("Content-Type", "application/octet-stream");
                    sent.bytes += body.len() as u64;
                    call(self.with_auth(req), &body)?;
                }
            }
            Backend::Otlp(url) => {
                let body = prost::Message::encode_to_vec(&export_request(p, labels));
                let req = self
                    .agent
                    .post(&format!("{url}/v1development/profiles"))
                    .set("Content-Type", "application/x-protobuf");
                sent.bytes += body.len() as u64;
                let resp = call(self.with_auth(req), &body)?;
                // A partial success comes back as an ExportProfilesServiceResponse (an empty body: none).
                if resp.content_type() == "application/x-protobuf" {
                    let mut b = Vec::new();
                    if std::io::Read::read_to_end(&mut resp.into_reader(), &mut b).is_ok() {
                        if let Ok(r) = <ExportProfilesServiceResponse as prost::Message>::decode(b.as_slice())
                        {
                            otlp::partial_success(&r, &mut sent);
                        }
                    }
                }
            }
            Backend::OtlpGrpc(url) => {
                if self.grpc.is_none() {
                    self.grpc = Some(grpc::Client::new(url, &self.headers, TIMEOUT)?);
                }
                let client = self.grpc.as_mut().expect("made above");
                let req = export_request(p, labels);
                sent.bytes += prost::Message::encoded_len(&req) as u64;
                otlp::partial_success(&client.export(req)?, &mut sent);
            }
        }
        Ok(sent)
    }

    fn with_auth(&self, mut req: ureq::Request) -> ureq::Request {
        for (k, v) in &self.headers {
            req = req.set(k, v);
        }
        req
    }
}

/// Only what the backend says is malformed is refused (dropped, never sent again): 400, 413, 422. Every
/// other status is an outage to wait out with the queue kept: 401/403 (credentials rotated), 404 (a
/// proxy or a path not deployed yet), 408/429, 5xx.
pub fn classify_http(code: u16, m: String) -> PushError {
    match code {
        400 | 413 | 422 => PushError::Refused(m),
        _ => PushError::Retry(m),
    }
}

/// POSTs a JSON body to `url` (a webhook), with the errors classified as for backends.
pub fn post_json(url: &str, body: &[u8]) -> Result<(), PushError> {
    let agent = ureq::AgentBuilder::new().timeout(TIMEOUT).build();
    call(agent.post(url).set("Content-Type", "application/json"), body).map(|_| ())
}

fn call(req: ureq::Request, body: &[u8]) -> Result<ureq::Response, PushError> {
    let url = req.url().to_string();
    match req.send_bytes(body) {
        Ok(resp) => Ok(resp),
        Err(ureq::Error::Status(code, resp)) => {
            let text: String = resp.into_string().unwrap_or_default().chars().take(300).collect();
            let m = format!("{url}: HTTP {code}: {}", text.trim());
            Err(classify_http(code, m))
        }
        Err(e) => Err(PushError::Retry(format!("{url}: {e}"))),
    }
}

fn base64(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// 16 random bytes as a UUID (version 4).
fn uuid() -> String {
    let mut b = [0u8; 16];
    let filled =
        std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b));
    if filled.is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b = (t ^ u128::from(std::process::id()) << 64).to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

#[cfg(test)]
mod tests {
    use super::{base64, classify_http, service_name, uuid, Backend, PushError};

    #[test]
    fn a_series_is_named_by_its_service_else_its_process_else_unknown_service() {
        assert_eq!(service_name(Some("checkout".into()), "app"), "checkout");
        assert_eq!(service_name(None, "app"), "app");
        assert_eq!(service_name(Some(String::new()), "app"), "app");
        assert_eq!(service_name(None, ""), "unknown_service");
    }

    /// Issue 32 #6: 401/403/404 are outages (kept and retried); only 400/413/422 drop the window.
    #[test]
    fn only_malformed_requests_are_refused() {
        let refused = |code| matches!(classify_http(code, String::new()), PushError::Refused(_));
        for code in [400, 413, 422] {
            assert!(refused(code), "{code}");
        }
        for code in [401, 403, 404, 405, 408, 409, 429, 500, 502, 503] {
            assert!(!refused(code), "{code}");
        }
    }

    #[test]
    fn backends_parse_and_base64_matches_rfc_4648() {
        assert_eq!(
            Backend::parse("pyroscope=http://h:4040/").unwrap(),
            Backend::Pyroscope("http://h:4040".into())
        );
        assert!(Backend::parse("pyroscope=h:4040").unwrap_err().contains("http"));
        assert!(Backend::parse("jaeger=http://h").unwrap_err().contains("unknown backend"));
        assert_eq!(
            Backend::parse("otlp-grpc=https://c:4317").unwrap(),
            Backend::OtlpGrpc("https://c:4317".into())
        );
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
        assert_eq!(base64(b"ab"), "YWI=");
        let u = uuid();
        assert_eq!((u.len(), &u[14..15]), (36, "4"));
    }
}
