//! Contract tests of pushing to Pyroscope (Push API and legacy ingest) and OTLP (HTTP and gRPC), against
//! test servers of ours that record every request and answer as told. (A real Pyroscope or collector is
//! not installable here; their wire formats are checked by decoding what was sent.)

mod collector;
mod common;
use collector::{GrpcCall, GrpcServer};
use common::*;
use prost::Message;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use whyslow_model::pprof;
use whyslow_push::ExportProfilesServiceRequest;

#[derive(Debug, Clone)]
struct Request {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// An HTTP server answering request N with `status(N)`, keeping every request.
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<(Request, u16)>>>,
}

impl Server {
    fn start(status: impl Fn(usize) -> u16 + Send + 'static) -> Server {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                r.read_line(&mut line).unwrap_or_default();
                let path = line.split(' ').nth(1).unwrap_or("").to_string();
                let mut headers = Vec::new();
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = h.trim_end().split_once(": ") {
                        headers.push((k.to_string(), v.to_string()));
                    }
                }
                let len = headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0; len];
                let _ = r.read_exact(&mut body);
                let mut seen = s.lock().unwrap();
                let code = status(seen.len());
                seen.push((Request { path, headers, body }, code));
                drop(seen);
                let _ =
                    write!(conn, "HTTP/1.1 {code} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}");
            }
        });
        Server { url, seen }
    }

    fn requests(&self) -> Vec<(Request, u16)> {
        self.seen.lock().unwrap().clone()
    }
}

/// The samples of an OTLP request's profile of sample type `name`: (function names leaf first, value).
fn otlp_samples(e: &ExportProfilesServiceRequest, name: &str) -> Vec<(Vec<String>, i64)> {
    let d = e.dictionary.as_ref().unwrap();
    let s = |i: i32| d.string_table[i as usize].clone();
    let profiles = &e.resource_profiles[0].scope_profiles[0].profiles;
    let p = profiles.iter().find(|p| s(p.sample_type.unwrap().type_strindex) == name).expect(name);
    p.samples
        .iter()
        .map(|smp| {
            let names = d.stack_table[smp.stack_index as usize]
                .location_indices
                .iter()
                .map(|&l| {
                    s(d.function_table[d.location_table[l as usize].lines[0].function_index as usize]
                        .name_strindex)
                })
                .collect();
            (names, smp.values[0])
        })
        .collect()
}

/// An OTLP request's resource attributes as text.
fn resource(e: &ExportProfilesServiceRequest) -> Vec<(String, String)> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let r = e.resource_profiles[0].resource.as_ref().unwrap();
    r.attributes
        .iter()
        .map(|a| {
            let v = match a.value.as_ref().and_then(|v| v.value.clone()) {
                Some(Value::StringValue(s)) => s,
                Some(Value::IntValue(i)) => i.to_string(),
                other => format!("{other:?}"),
            };
            (a.key.clone(), v)
        })
        .collect()
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b).read_to_end(&mut out).unwrap();
    out
}

fn types(p: &pprof::Profile) -> Vec<(String, String)> {
    let s = |i: i64| p.string_table[i as usize].clone();
    p.sample_type.iter().map(|t| (s(t.r#type), s(t.unit))).collect()
}

fn recording(dir: &std::path::Path) -> (String, i64) {
    let data = record(dir, "split", &[], &[workload("cpu_split").to_str().unwrap(), "1"]);
    let total = report_json(&data, &[])["total_samples"].as_i64().unwrap();
    (data, total)
}

#[test]
fn push_api_series_carry_pyroscope_names_units_labels_and_auth() {
    let dir = tmp();
    let (data, total) = recording(dir.path());
    let auth = dir.path().join("auth");
    std::fs::write(&auth, "user:pass\n").unwrap();
    let srv = Server::start(|_| 200);
    ok(&[
        "push",
        &data,
        "--service-name",
        "checkout",
        "--push",
        &format!("pyroscope={}", srv.url),
        "--push-label",
        "env=test",
        "--push-tenant",
        "t1",
        "--push-basic-auth-file",
        auth.to_str().unwrap(),
    ]);
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0].0;
    assert_eq!(r.path, "/push.v1.PusherService/Push");
    assert_eq!(r.header("content-type"), Some("application/proto"));
    assert_eq!(r.header("connect-protocol-version"), Some("1"));
    assert_eq!(r.header("x-scope-orgid"), Some("t1"));
    assert_eq!(r.header("authorization"), Some("Basic dXNlcjpwYXNz"));
    let push = whyslow_push::PushRequest::decode(r.body.as_slice()).unwrap();
    assert_eq!(push.series.len(), 1, "a CPU recording is one series");
    let labels: Vec<(&str, &str)> =
        push.series[0].labels.iter().map(|l| (l.name.as_str(), l.value.as_str())).collect();
    for want in
        [("__name__", "process_cpu"), ("service_name", "checkout"), ("env", "test"), ("process", "cpu_split")]
    {
        assert!(labels.contains(&want), "{want:?} in {labels:?}");
    }
    assert!(
        labels.iter().any(|(k, _)| *k == "hostname") && !labels.iter().any(|(k, _)| *k == "pid"),
        "{labels:?}"
    );
    let sample = &push.series[0].samples[0];
    assert_eq!(sample.id.len(), 36);
    let p = pprof::Profile::decode(gunzip(&sample.raw_profile).as_slice()).unwrap();
    assert_eq!(types(&p), [("samples".into(), "count".into()), ("cpu".into(), "nanoseconds".into())]);
    let pt = p.period_type.clone().unwrap();
    assert_eq!(
        (p.string_table[pt.r#type as usize].as_str(), p.string_table[pt.unit as usize].as_str()),
        ("cpu", "nanoseconds")
    );
    assert_eq!(p.period, 1_000_000_000 / 999);
    assert_eq!(p.sample.iter().map(|s| s.value[0]).sum::<i64>(), total, "every sample pushed");
    // The pushed profile decodes to the shares whyslow reports (self time of the leaf functions).
    let report = report_json(&data, &[]);
    let leaf = |s: &pprof::Sample| -> String {
        let loc = p.location.iter().find(|l| l.id == s.location_id[0]).unwrap();
        let f = p.function.iter().find(|f| f.id == loc.line[0].function_id).unwrap();
        p.string_table[f.name as usize].clone()
    };
    let pushed =
        |name: &str| -> i64 { p.sample.iter().filter(|s| leaf(s) == name).map(|s| s.value[0]).sum() };
    // Shares are of the program's own samples: a sample inside a tracer's probe (a concurrent test's
    // eBPF program on a context switch of this target, say) is pushed as one `[whyslow probe]` frame
    // and left out of the report's denominator.
    let program = total - pushed(whyslow_model::PROBE_FRAME);
    for name in ["burn_a", "burn_b", "burn_c"] {
        let share = 100.0 * pushed(name) as f64 / program as f64;
        let said = self_pct(&report, name);
        let rows: Vec<&Value> =
            report["functions"].as_array().unwrap().iter().filter(|f| f["name"] == name).collect();
        assert!(
            (share - said).abs() < 0.01,
            "{name}: pushed {share:.3}% vs reported {said}% of {program}: {rows:?}"
        );
    }
    // A refusal is one clear line and a failure.
    let refusing = Server::start(|_| 400);
    let err = fails(&["push", &data, "--push", &format!("pyroscope={}", refusing.url)]);
    assert!(err.contains("HTTP 400") && err.trim().lines().count() == 1, "{err}");
}

#[test]
fn legacy_ingest_names_the_kind_and_otlp_carries_a_dictionary() {
    let dir = tmp();
    let (data, total) = recording(dir.path());
    let srv = Server::start(|_| 200);
    ok(&["push", &data, "--service-name", "checkout", "--push", &format!("pyroscope-ingest={}", srv.url)]);
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 1);
    let path = &reqs[0].0.path;
    assert!(path.starts_with("/ingest?name=checkout.cpu%7B"), "{path}");
    for part in ["&format=pprof", "&sampleRate=999", "&spyName=whyslow", "&from=", "&until="] {
        assert!(path.contains(part), "{part} in {path}");
    }
    let p = pprof::Profile::decode(gunzip(&reqs[0].0.body).as_slice()).unwrap();
    assert_eq!(p.sample.iter().map(|s| s.value[0]).sum::<i64>(), total);

    let srv = Server::start(|_| 200);
    ok(&["push", &data, "--service-name", "checkout", "--push", &format!("otlp={}", srv.url)]);
    let reqs = srv.requests();
    assert_eq!(reqs[0].0.path, "/v1development/profiles");
    assert_eq!(reqs[0].0.header("content-type"), Some("application/x-protobuf"));
    let e = ExportProfilesServiceRequest::decode(reqs[0].0.body.as_slice()).unwrap();
    let d = e.dictionary.as_ref().unwrap();
    assert_eq!(d.string_table[0], "");
    assert_eq!((d.stack_table[0].location_indices.len(), d.function_table[0].name_strindex), (0, 0));
    let rp = &e.resource_profiles[0];
    let attrs: Vec<&str> = rp.resource.as_ref().unwrap().attributes.iter().map(|a| a.key.as_str()).collect();
    assert!(attrs.contains(&"service.name") && attrs.contains(&"host.name"), "{attrs:?}");
    let profiles = &rp.scope_profiles[0].profiles;
    assert_eq!(profiles.len(), 2, "one profile per sample type (samples, cpu ns)");
    let counts = otlp_samples(&e, "samples");
    assert_eq!(counts.iter().map(|(_, v)| v).sum::<i64>(), total);
    // Stacks lead to real function names.
    let names: Vec<&str> = counts.iter().flat_map(|(f, _)| f).map(String::as_str).collect();
    assert!(names.contains(&"burn_a") && names.contains(&"main"), "{:?}", &names[..names.len().min(20)]);
}

/// The sum of sample type `index` over the samples of a pprof whose stack has function `name`.
fn pprof_under(p: &pprof::Profile, index: usize, name: &str) -> i64 {
    let has = |s: &pprof::Sample| {
        s.location_id.iter().any(|id| {
            let loc = p.location.iter().find(|l| l.id == *id).unwrap();
            loc.line.iter().any(|line| {
                let f = p.function.iter().find(|f| f.id == line.function_id).unwrap();
                p.string_table[f.name as usize] == name
            })
        })
    };
    p.sample.iter().filter(|s| has(s)).map(|s| s.value[index]).sum()
}

/// A `record --mem` recording pushed: Pyroscope gets one `memory` series whose pprof has Go's four types
/// (alloc_objects, alloc_space, inuse_objects, inuse_space, period space/bytes), marked `__delta__=false`
/// (its allocations are the run's, not counters since the start it should difference), with what the
/// program leaked under cache_put exactly (1000 objects, 63952 bytes) and churn's 100000 allocations
/// holding nothing; OTLP gets one profile per type with the same values.
#[test]
fn memory_profiles_push_with_the_types_backends_name() {
    let dir = tmp();
    let data =
        record(dir.path(), "mem", &["--mem"], &[workload("memwork").to_str().unwrap(), "leak", "1000"]);
    let srv = Server::start(|_| 200);
    ok(&["push", &data, "--service-name", "memwork", "--push", &format!("pyroscope={}", srv.url)]);
    let reqs = srv.requests();
    let push = whyslow_push::PushRequest::decode(reqs[0].0.body.as_slice()).unwrap();
    let label = |s: &whyslow_push::RawProfileSeries, k: &str| {
        s.labels.iter().find(|l| l.name == k).map(|l| l.value.clone())
    };
    let memory: Vec<_> =
        push.series.iter().filter(|s| label(s, "__name__").as_deref() == Some("memory")).collect();
    assert_eq!(memory.len(), 1, "{:?}", push.series.iter().map(|s| label(s, "__name__")).collect::<Vec<_>>());
    assert_eq!(label(memory[0], "__delta__").as_deref(), Some("false"));
    let p = pprof::Profile::decode(gunzip(&memory[0].samples[0].raw_profile).as_slice()).unwrap();
    let want: Vec<(String, String)> = [
        ("alloc_objects", "count"),
        ("alloc_space", "bytes"),
        ("inuse_objects", "count"),
        ("inuse_space", "bytes"),
    ]
    .iter()
    .map(|(t, u)| (t.to_string(), u.to_string()))
    .collect();
    assert_eq!(types(&p), want);
    let pt = p.period_type.clone().unwrap();
    assert_eq!(
        (p.string_table[pt.r#type as usize].as_str(), p.string_table[pt.unit as usize].as_str()),
        ("space", "bytes")
    );
    assert_eq!((pprof_under(&p, 2, "cache_put"), pprof_under(&p, 3, "cache_put")), (1000, 63952));
    assert_eq!((pprof_under(&p, 0, "churn"), pprof_under(&p, 3, "churn")), (100_000, 0));
    assert!(p.sample.iter().all(|s| s.value[3] >= 0), "in use per stack is what it held at the end");

    let srv = Server::start(|_| 200);
    ok(&["push", &data, "--service-name", "memwork", "--push", &format!("otlp={}", srv.url)]);
    let e = ExportProfilesServiceRequest::decode(srv.requests()[0].0.body.as_slice()).unwrap();
    let under = |t: &str, name: &str| -> i64 {
        otlp_samples(&e, t).iter().filter(|(f, _)| f.iter().any(|n| n == name)).map(|(_, v)| v).sum()
    };
    assert_eq!((under("inuse_objects", "cache_put"), under("inuse_space", "cache_put")), (1000, 63952));
    assert_eq!(under("alloc_objects", "churn"), 100_000);
    assert_eq!(under("inuse_space", "churn"), 0);
}

/// `--push otlp-grpc=`: ProfilesService/Export carries the very request the HTTP path posts (one
/// builder), whose CPU profile decodes to the workload's 60/30/10 shares, with the resource's attributes
/// and the auth and tenant as metadata; a status that will not change is one clear line and a failure.
#[test]
fn otlp_grpc_exports_the_http_request_with_shares_resource_and_metadata() {
    let dir = tmp();
    // 3 s alone on the cores: enough rounds for the workload's split to show within 3 points.
    let data = {
        let _x = exclusive();
        record(dir.path(), "split", &[], &[workload("cpu_split").to_str().unwrap(), "3"])
    };
    let total = report_json(&data, &[])["total_samples"].as_i64().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let grpc = GrpcServer::start(|_| Ok(0));
    let http = Server::start(|_| 200);
    let common = ["--service-name", "checkout", "--push-label", "env=test", "--push-tenant", "t1"];
    let bearer = ["--push-bearer-file", token.to_str().unwrap()];
    let to_grpc = format!("otlp-grpc={}", grpc.url);
    let out = run(&[&["push", &data, "--push", &to_grpc][..], &common, &bearer].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains(&format!("to otlp-grpc={}", grpc.url)), "{err}");
    ok(&[&["push", &data, "--push", &format!("otlp={}", http.url)][..], &common, &bearer].concat());
    let calls = grpc.calls();
    assert_eq!(calls.len(), 1);
    let (GrpcCall { metadata, request: e }, _) = &calls[0];
    let md = |k: &str| metadata.get(k).and_then(|v| v.to_str().ok());
    assert_eq!((md("authorization"), md("x-scope-orgid")), (Some("Bearer s3cret"), Some("t1")));
    assert!(md("grpc-timeout").is_some(), "the server is told the deadline: {metadata:?}");
    let posted = ExportProfilesServiceRequest::decode(http.requests()[0].0.body.as_slice()).unwrap();
    assert_eq!(e, &posted, "gRPC and HTTP carry the same request");

    let attrs = resource(e);
    let hostname = report_json(&data, &[])["meta"]["hostname"].as_str().map(str::to_string);
    for want in [("service.name", "checkout"), ("process.executable.name", "cpu_split"), ("env", "test")] {
        assert!(attrs.iter().any(|(k, v)| (k.as_str(), v.as_str()) == want), "{want:?} in {attrs:?}");
    }
    let host = attrs.iter().find(|(k, _)| k == "host.name").map(|(_, v)| v.clone());
    assert!(host.is_some() && (hostname.is_none() || host == hostname), "{attrs:?} vs {hostname:?}");
    assert!(!attrs.iter().any(|(k, _)| k == "process.pid"), "no pid unless asked: {attrs:?}");
    // One profile per sample type.
    let d = e.dictionary.as_ref().unwrap();
    let types: Vec<(&str, &str)> = e.resource_profiles[0].scope_profiles[0]
        .profiles
        .iter()
        .map(|p| p.sample_type.unwrap())
        .map(|t| {
            (
                d.string_table[t.type_strindex as usize].as_str(),
                d.string_table[t.unit_strindex as usize].as_str(),
            )
        })
        .collect();
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    // The shares: leaf self time as report computes it, and the workload's 60/30/10 within 3 points.
    let counts = otlp_samples(e, "samples");
    assert_eq!(counts.iter().map(|(_, v)| v).sum::<i64>(), total, "every sample exported");
    let report = report_json(&data, &[]);
    let exported = |name: &str| -> i64 { counts.iter().filter(|(f, _)| f[0] == name).map(|(_, v)| v).sum() };
    // Of the program's samples, as the report's shares (see the Pyroscope test).
    let program = total - exported(whyslow_model::PROBE_FRAME);
    let leaf = |name: &str| -> f64 { 100.0 * exported(name) as f64 / program as f64 };
    let pushed = ["burn_a", "burn_b", "burn_c"].map(leaf);
    for (name, share) in ["burn_a", "burn_b", "burn_c"].iter().zip(pushed) {
        assert!((share - self_pct(&report, name)).abs() < 0.01, "{name}: exported {share:.2}% vs reported");
    }
    let sum: f64 = pushed.iter().sum();
    for (got, want) in pushed.map(|x| 100.0 * x / sum).iter().zip([60.0, 30.0, 10.0]) {
        assert!((got - want).abs() <= 3.0, "exported shares {pushed:.1?} vs 60/30/10 (+-3 points)");
    }

    // A status that will not change fails the one-shot push with one line.
    let refusing = GrpcServer::start(|_| Err(tonic::Code::PermissionDenied));
    let err = fails(&["push", &data, "--push", &format!("otlp-grpc={}", refusing.url)]);
    assert!(err.contains("PermissionDenied") && err.trim().lines().count() == 1, "{err}");
}

/// `whyslow serve` pushing to `to`, with one target (`split`, 1 s windows) following the cpu_split that
/// [`Agent::drain`] runs.
struct Agent {
    child: std::process::Child,
    addr: String,
}

/// The argument of the agent's workload (5 s of CPU: at least three 1 s windows even where its threads
/// share both cores and the agent follows it a scan late; 3 s once gave two on CI), which its target matches.
const MARK: &str = "5.0417";

impl Agent {
    fn start(dir: &std::path::Path, to: &str) -> Agent {
        let mut child = whyslow()
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .args(["--push", to, "--push-label", "env=ci"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let addr = first.split("http://").nth(1).unwrap().split(' ').next().unwrap().to_string();
        std::thread::spawn(move || lines.for_each(|l| eprintln!("serve: {}", l.unwrap_or_default())));
        let agent = Agent { child, addr };
        let created = agent.get(
            "/api/v1/targets",
            Some(&format!(r#"{{"name":"split","match":{{"cmdline":"cpu_split {MARK}"}},"window_s":1}}"#)),
        );
        assert!(created.starts_with("HTTP/1.1 201"), "{created}");
        agent
    }

    fn get(&self, path: &str, body: Option<&str>) -> String {
        let mut s = std::net::TcpStream::connect(&self.addr).unwrap();
        let (method, b) = body.map_or(("GET", ""), |b| ("POST", b));
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// Runs cpu_split for 5 s of CPU (its argument marks it: only it is the target's, not another test's or a
    /// benchmark's cpu_split running beside, whose windows would share its starts), then waits until at least 3 windows are stored, `answered()` requests
    /// (not counting those the backend was told to fail for a while) cover them and the queue is empty;
    /// returns /metrics then.
    fn drain(&self, up: impl Fn() -> bool, answered: impl Fn() -> usize) -> String {
        let mut w = std::process::Command::new(workload("cpu_split"))
            .arg(MARK)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        w.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let text = self.get("/metrics", None);
            let queued = metric(&text, "whyslow_push_queue_windows{");
            let stored = metric(&text, "whyslow_windows_stored_total");
            if queued == 0.0 && stored >= 3.0 && up() && answered() as f64 >= stored {
                return text;
            }
            assert!(Instant::now() < deadline, "push queue did not drain: {text}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn stop(mut self) {
        // SAFETY: kill takes no pointers.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert!(self.child.wait().unwrap().success());
    }
}

/// A test that fails leaves no agent behind (it would hold the test's output open).
impl Drop for Agent {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(-1.0)
}

/// serve --push: a backend down for its first requests gets every window late, in order; a refused
/// window is dropped and counted, not retried forever.
#[test]
fn serve_pushes_every_window_in_order_through_an_outage() {
    let _x = exclusive();
    let dir = tmp();
    // The backend is down for its first 30 s (503), then refuses one window (400), then accepts.
    let up_at = Instant::now() + Duration::from_secs(30);
    let refused = Arc::new(Mutex::new(None));
    let srv = Server::start(move |n| {
        let mut r = refused.lock().unwrap();
        match *r {
            _ if Instant::now() < up_at => 503,
            None => {
                *r = Some(n);
                400
            }
            Some(_) => 200,
        }
    });
    let agent = Agent::start(dir.path(), &format!("pyroscope={}", srv.url));
    // Retries back off 1, 2, 4, 8, 16 s (+-50%) through the outage: wait for the queue to drain.
    let text =
        agent.drain(|| Instant::now() > up_at, || srv.requests().iter().filter(|(_, c)| *c != 503).count());
    let stored = metric(&text, "whyslow_windows_stored_total");
    let reqs = srv.requests();
    let ok: Vec<&Request> = reqs.iter().filter(|(_, c)| *c == 200).map(|(r, _)| r).collect();
    assert_eq!(ok.len() as f64, stored - 1.0, "every window but the refused one arrived");
    assert!(text.contains("result=\"refused\"} 1"), "{text}");
    assert!(text.contains("result=\"pushed\"} "), "{text}");
    assert!(metric(&text, "whyslow_push_failures_total{") >= 4.0, "{text}");
    // Each window arrived once (Pyroscope would also deduplicate by the sample ID).
    let mut ids: Vec<String> = ok
        .iter()
        .map(|r| {
            whyslow_push::PushRequest::decode(r.body.as_slice()).unwrap().series[0].samples[0].id.clone()
        })
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), ok.len());
    // In order, with their own timestamps (the first window went out seconds after it was recorded).
    let times: Vec<i64> = ok
        .iter()
        .map(|r| {
            let push = whyslow_push::PushRequest::decode(r.body.as_slice()).unwrap();
            assert!(push.series[0].labels.iter().any(|l| l.name == "env" && l.value == "ci"));
            assert!(push.series[0].labels.iter().any(|l| l.name == "service_name" && l.value == "split"));
            pprof::Profile::decode(gunzip(&push.series[0].samples[0].raw_profile).as_slice())
                .unwrap()
                .time_nanos
        })
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    agent.stop();
}

/// Issue 32 #6: 401, 403 and 404 are outages (rotated credentials, a proxy): the windows are kept and
/// retried, every one arrives, none is counted refused.
#[test]
fn serve_keeps_the_queue_through_401_403_404() {
    let _x = exclusive();
    let dir = tmp();
    let srv = Server::start(|n| match n {
        0 => 401,
        1 => 403,
        2 => 404,
        _ => 200,
    });
    let agent = Agent::start(dir.path(), &format!("pyroscope={}", srv.url));
    let text = agent.drain(|| true, || srv.requests().iter().filter(|(_, c)| *c == 200).count());
    let stored = metric(&text, "whyslow_windows_stored_total");
    let codes: Vec<u16> = srv.requests().iter().map(|(_, c)| *c).collect();
    assert_eq!(&codes[..3], [401, 403, 404]);
    assert_eq!(codes.iter().filter(|&&c| c == 200).count() as f64, stored, "every window arrived: {codes:?}");
    assert!(text.contains("result=\"refused\"} 0"), "{text}");
    assert_eq!(metric(&text, "whyslow_push_failures_total{"), 3.0, "{text}");
    agent.stop();
}

/// serve --push otlp-grpc=: UNAVAILABLE is retried with backoff and every window then arrives exactly
/// once, in order; INVALID_ARGUMENT drops that window (counted); a partial success is counted.
#[test]
fn serve_exports_every_window_over_grpc_through_unavailable() {
    let _x = exclusive();
    let dir = tmp();
    const DOWN: usize = 3;
    let grpc = GrpcServer::start(|n| match n {
        n if n < DOWN => Err(tonic::Code::Unavailable),
        n if n == DOWN => Err(tonic::Code::InvalidArgument),
        n if n == DOWN + 1 => Ok(1),
        _ => Ok(0),
    });
    let agent = Agent::start(dir.path(), &format!("otlp-grpc={}", grpc.url));
    let answered = || grpc.calls().iter().filter(|(_, a)| *a != Err(tonic::Code::Unavailable)).count();
    let text = agent.drain(|| true, answered);
    let stored = metric(&text, "whyslow_windows_stored_total");
    let calls = grpc.calls();
    let unavailable = calls.iter().filter(|(_, a)| *a == Err(tonic::Code::Unavailable)).count();
    assert_eq!(unavailable, DOWN);
    let ok: Vec<&ExportProfilesServiceRequest> =
        calls.iter().filter(|(_, a)| a.is_ok()).map(|(c, _)| &c.request).collect();
    assert_eq!(ok.len() as f64, stored - 1.0, "every window but the refused one arrived: {text}");
    assert_eq!(metric(&text, "whyslow_push_windows_total{backend=\"otlp-grpc"), stored - 1.0, "{text}");
    assert!(text.contains("result=\"refused\"} 1"), "{text}");
    assert_eq!(metric(&text, "whyslow_push_failures_total{"), DOWN as f64, "{text}");
    assert_eq!(metric(&text, "whyslow_push_rejected_profiles_total{"), 1.0, "{text}");
    // Once each and in order: a window is known by its start, which only grows.
    let starts: Vec<u64> = ok
        .iter()
        .map(|e| {
            assert!(resource(e).contains(&("service.name".into(), "split".into())), "{:?}", resource(e));
            assert!(resource(e).contains(&("env".into(), "ci".into())), "{:?}", resource(e));
            let profiles = &e.resource_profiles[0].scope_profiles[0].profiles;
            assert!(profiles.iter().all(|p| p.time_unix_nano == profiles[0].time_unix_nano));
            profiles[0].time_unix_nano
        })
        .collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
    // The window retried through the outage is the first one, sent again unchanged.
    assert_eq!(calls[0].0.request, calls[DOWN - 1].0.request);
    agent.stop();
}

/// Against a real Pyroscope (PYROSCOPE_URL) and a real OpenTelemetry Collector (OTLP_URL for HTTP,
/// OTLP_GRPC_URL for gRPC), when set: the pushed workload comes back from Pyroscope's query API with its
/// shares; the collector accepts the export. Skipped with a message otherwise.
#[test]
fn real_backends_when_configured() {
    let var = |k: &str| std::env::var(k).ok();
    let (pyro, otlp, otlp_grpc) = (var("PYROSCOPE_URL"), var("OTLP_URL"), var("OTLP_GRPC_URL"));
    if pyro.is_none() && otlp.is_none() && otlp_grpc.is_none() {
        eprintln!("skipped: set PYROSCOPE_URL, OTLP_URL and/or OTLP_GRPC_URL to test against real backends");
        return;
    }
    let dir = tmp();
    let (data, _) = recording(dir.path());
    let service = format!("whyslow-test-{}", std::process::id());
    if let Some(url) = pyro {
        ok(&["push", &data, "--service-name", &service, "--push", &format!("pyroscope={url}")]);
        let query = format!("process_cpu:cpu:nanoseconds:cpu:nanoseconds{{service_name=\"{service}\"}}");
        let enc: String = query.bytes().map(|b| format!("%{b:02X}")).collect();
        let render = format!("{url}/pyroscope/render?query={enc}&from=now-1h&until=now&format=json");
        let out = std::process::Command::new("curl").args(["-sf", &render]).output().unwrap();
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && body.contains("burn_a") && body.contains("burn_c"), "{body}");
    }
    if let Some(url) = otlp {
        ok(&["push", &data, "--service-name", &service, "--push", &format!("otlp={url}")]);
    }
    if let Some(url) = otlp_grpc {
        let out = run(&["push", &data, "--service-name", &service, "--push", &format!("otlp-grpc={url}")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !err.contains("rejected"), "the collector kept every profile: {err}");
    }
}
