//! Contract tests of pushing to Pyroscope (Push API and legacy ingest) and OTLP, against a test server of
//! ours that records every request and answers as told. (A real Pyroscope or collector is not
//! installable here; their wire formats are checked by decoding what was sent.)

mod common;
use common::*;
use prost::Message;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use whyslow_model::pprof;

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
    for name in ["burn_a", "burn_b", "burn_c"] {
        let n: i64 = p.sample.iter().filter(|s| leaf(s) == name).map(|s| s.value[0]).sum();
        let share = 100.0 * n as f64 / total as f64;
        assert!((share - self_pct(&report, name)).abs() < 0.01, "{name}: pushed {share:.2}% vs reported");
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
    let e = whyslow_push::ExportProfilesServiceRequest::decode(reqs[0].0.body.as_slice()).unwrap();
    let d = e.dictionary.unwrap();
    assert_eq!(d.string_table[0], "");
    assert_eq!((d.stack_table[0].location_indices.len(), d.function_table[0].name_strindex), (0, 0));
    let rp = &e.resource_profiles[0];
    let attrs: Vec<&str> = rp.resource.as_ref().unwrap().attributes.iter().map(|a| a.key.as_str()).collect();
    assert!(attrs.contains(&"service.name") && attrs.contains(&"host.name"), "{attrs:?}");
    let profiles = &rp.scope_profiles[0].profiles;
    assert_eq!(profiles.len(), 2, "one profile per sample type (samples, cpu ns)");
    let counts = profiles
        .iter()
        .find(|p| d.string_table[p.sample_type.unwrap().type_strindex as usize] == "samples")
        .expect("the sample counts");
    assert_eq!(counts.samples.iter().map(|s| s.values[0]).sum::<i64>(), total);
    // Stacks lead to real function names.
    let names: Vec<&str> = counts
        .samples
        .iter()
        .flat_map(|s| &d.stack_table[s.stack_index as usize].location_indices)
        .map(|&l| &d.location_table[l as usize].lines[0])
        .map(|line| {
            d.string_table[d.function_table[line.function_index as usize].name_strindex as usize].as_str()
        })
        .collect();
    assert!(names.contains(&"burn_a") && names.contains(&"main"), "{:?}", &names[..names.len().min(20)]);
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
    let mut agent = whyslow()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--push", &format!("pyroscope={}", srv.url), "--push-label", "env=ci"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(agent.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first.split("http://").nth(1).unwrap().split(' ').next().unwrap().to_string();
    std::thread::spawn(move || lines.for_each(|l| eprintln!("serve: {}", l.unwrap_or_default())));
    let get = |path: &str, body: Option<&str>| -> String {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        let (method, b) = body.map_or(("GET", ""), |b| ("POST", b));
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let created =
        get("/api/v1/targets", Some(r#"{"name":"split","match":{"comm":"^cpu_split$"},"window_s":1}"#));
    assert!(created.starts_with("HTTP/1.1 201"), "{created}");
    let mut w = std::process::Command::new(workload("cpu_split"))
        .arg("3")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    w.wait().unwrap();
    let metric = |text: &str, name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(-1.0)
    };
    // Retries back off 1, 2, 4, 8, 16 s (+-50%) through the outage: wait for the queue to drain.
    let deadline = Instant::now() + Duration::from_secs(120);
    let text = loop {
        let text = get("/metrics", None);
        let queued = metric(&text, "whyslow_push_queue_windows{");
        let stored = metric(&text, "whyslow_windows_stored_total");
        let answered = srv.requests().iter().filter(|(_, c)| *c != 503).count() as f64;
        if queued == 0.0 && stored >= 3.0 && Instant::now() > up_at && answered >= stored {
            break text;
        }
        assert!(Instant::now() < deadline, "push queue did not drain: {text}");
        std::thread::sleep(Duration::from_millis(500));
    };
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
    // SAFETY: kill takes no pointers.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    assert!(agent.wait().unwrap().success());
}

/// Against a real Pyroscope (PYROSCOPE_URL) and a real OpenTelemetry Collector (OTLP_URL), when set: the
/// pushed workload comes back from Pyroscope's query API with its shares; the collector accepts the
/// export. Skipped with a message otherwise.
#[test]
fn real_backends_when_configured() {
    let (pyro, otlp) = (std::env::var("PYROSCOPE_URL").ok(), std::env::var("OTLP_URL").ok());
    if pyro.is_none() && otlp.is_none() {
        eprintln!("skipped: set PYROSCOPE_URL and/or OTLP_URL to test against real backends");
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
}
