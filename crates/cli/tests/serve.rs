//! End-to-end tests of `whyslow serve`: the real agent on a free port, real workloads started after the
//! targets, requests over plain HTTP/1.1.

mod common;
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running agent; killed (SIGKILL) when dropped, unless stopped first.
struct Agent {
    child: Child,
    addr: String,
    token: Option<String>,
    /// What the agent printed before the line saying where it listens.
    early: Vec<String>,
}

impl Agent {
    fn start(data: &Path, extra: &[&str]) -> Agent {
        let mut child = whyslow()
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start whyslow serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut early = Vec::new();
        let addr = loop {
            let line = lines.next().unwrap_or_else(|| panic!("serve ended: {early:?}")).unwrap();
            if let Some(a) = line.split("listening on http://").nth(1).and_then(|r| r.split(' ').next()) {
                break a.to_string();
            }
            early.push(line);
        };
        // Keep draining stderr so the agent never blocks on it.
        std::thread::spawn(move || lines.for_each(|l| eprintln!("serve: {}", l.unwrap_or_default())));
        Agent { child, addr, token: None, early }
    }

    /// (status, body) of one request; a body is sent as JSON.
    fn req(&self, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let ct = if body.is_empty() { "" } else { "Content-Type: application/json\r\n" };
        self.req_with(method, path, &format!("Host: {}\r\n{ct}", self.addr), body)
    }

    /// (status, body) of one request with the given header lines (each ending in CRLF; Host included).
    fn req_with(&self, method: &str, path: &str, headers: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let auth = self.token.as_ref().map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\n{headers}Connection: close\r\n{auth}Content-Length: {}\r\n\r\n",
            body.len()
        );
        raw(&self.addr, &[head.as_bytes(), body].concat())
    }

    fn get(&self, path: &str) -> (u16, Value) {
        let (code, body) = self.req("GET", path, b"");
        (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let (code, body) = self.req("POST", path, body.as_bytes());
        (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// SIGTERM, and the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: kill takes no pointers.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let st = self.child.wait().unwrap();
        std::mem::forget(self);
        st
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// Sends raw bytes, returns (status, body); status 0 when the connection gave no HTTP answer.
fn raw(addr: &str, bytes: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect to the agent");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let Some(end) = out.windows(4).position(|w| w == b"\r\n\r\n") else { return (0, out) };
    let head = String::from_utf8_lossy(&out[..end]).to_string();
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let mut body = out[end + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(nl) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..nl]).trim(), 16).unwrap_or(0);
        if n == 0 || b.len() < nl + 2 + n {
            break;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + n]);
        b = &b[(nl + 4 + n).min(b.len())..];
    }
    out
}

/// How many times longer than on an idle machine a wait may take before it fails the test: a deadline
/// only bounds how long a failure takes to show, and a busy machine (CI, a laptop building) is slower.
const PATIENCE: u64 = 4;

/// Polls `f` every 200 ms until it gives Some, up to `secs` (times [`PATIENCE`]).
fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let secs = secs * PATIENCE;
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {secs} s waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pids(a: &Agent) -> Vec<u64> {
    let (code, v) = a.get("/api/v1/processes");
    assert_eq!(code, 200, "{v}");
    v.as_array().unwrap().iter().map(|p| p["pid"].as_u64().unwrap()).collect()
}

/// The cpu profile of `target` over the last 5 minutes once it holds more than `at_least` samples and
/// its total has not changed for longer than a window (the last windows are stored after the processes end).
fn settled_cpu_profile(a: &Agent, target: &str, at_least: i64, what: &str) -> Value {
    let mut last = (0, Instant::now());
    wait_for(15, what, || {
        let (code, r) = a.get(&format!("/api/v1/profile?target={target}&from=now-5m&type=cpu"));
        let total = if code == 200 { r["total_samples"].as_i64()? } else { 0 };
        if total != last.0 {
            eprintln!("profile total: {total} samples");
            last = (total, Instant::now());
        }
        (total > at_least && last.1.elapsed() > Duration::from_millis(2500)).then_some(r)
    })
}

fn spawn_split(secs: &str) -> Child {
    std::process::Command::new(workload("cpu_split")).arg(secs).stdout(Stdio::null()).spawn().unwrap()
}

/// A comm target defined before its processes start: both instances are picked up within a scan, the
/// profile of the range shows the 60/30/10 split, and the exited ones drop out of /processes.
#[test]
fn a_comm_target_follows_processes_that_start_later() {
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    let (code, t) = a.post(
        "/api/v1/targets",
        r#"{"match":{"comm":"^cpu_split$"},"sources":["cpu"],"frequency":999,"window_s":1,"labels":{"app":"split"}}"#,
    );
    assert_eq!(code, 201, "{t}");
    let id = t["id"].as_i64().unwrap();
    // A second target matching the same processes by command line: they are still recorded once.
    let (code, t2) =
        a.post("/api/v1/targets", r#"{"match":{"cmdline":"bin/cpu_split"},"sources":["cpu"],"window_s":1}"#);
    assert_eq!(code, 201, "{t2}");
    let mut first = spawn_split("4");
    wait_for(3, "the first instance in /processes", || {
        pids(&a).contains(&u64::from(first.id())).then_some(())
    });
    let mut second = spawn_split("3");
    wait_for(3, "the second instance in /processes", || {
        pids(&a).contains(&u64::from(second.id())).then_some(())
    });
    assert!(first.wait().unwrap().success() && second.wait().unwrap().success());
    // Both gone: let go within a scan or two, and their state (mappings, unwinder) a second after they
    // ended, whether the exit record came before they were let go or not (it then never comes).
    wait_for(3, "exited processes to leave /processes", || pids(&a).is_empty().then_some(()));
    wait_for(4, "the sessions to drop the exited processes", || {
        (metric(&a, "whyslow_processes_held") == 0.0).then_some(())
    });
    // Their last windows are stored once the sessions cut them: wait until the total holds still for
    // longer than a window.
    // ~7000 samples with the CPU to themselves; fewer when other tests share the two cores.
    let report = settled_cpu_profile(&a, &id.to_string(), 1000, "the profile to hold both runs");
    assert_split(&report);
    // The other target's windows hold the same samples (one recording, stored for both).
    let (code, other) = a.get(&format!("/api/v1/profile?target={}&from=now-5m&type=cpu", t2["id"]));
    assert_eq!((code, &other["total_samples"]), (200, &report["total_samples"]));
    let (_, m) = a.req("GET", "/metrics", b"");
    let m = String::from_utf8(m).unwrap();
    assert!(
        m.lines().any(|l| l.starts_with("whyslow_samples_total{sources=\"cpu\"}")),
        "one cpu session: {m}"
    );
    assert!(!m.contains("sources=\"cpu,"), "{m}");
    // What the samples cost the recording session: some CPU time, and per sample of the last window
    // between 100 ns and 1 ms of it (about 5 us here; thread CPU time, so the machine's load does not
    // change it much).
    let cpu = metric(&a, "whyslow_recorder_cpu_seconds_total{sources=\"cpu\"}");
    let per_sample = metric(&a, "whyslow_recorder_cpu_per_sample_seconds{sources=\"cpu\"}");
    assert!(cpu > 0.0, "{m}");
    assert!((1e-7..1e-3).contains(&per_sample), "{per_sample} s per sample: {m}");
    // The same through the label selector, and as folded stacks and SVG.
    let (code, by_label) = a.get("/api/v1/profile?selector=app=split&from=now-5m&type=cpu");
    assert_eq!((code, by_label["total_samples"].clone()), (200, report["total_samples"].clone()));
    let (code, folded) = a.req("GET", &format!("/api/v1/profile?target={id}&from=now-5m&format=folded"), b"");
    assert_eq!(code, 200);
    assert!(String::from_utf8_lossy(&folded).lines().any(|l| l.contains("main;run_round;burn_a ")));
    let (code, svg) = a.req("GET", &format!("/api/v1/profile?target={id}&from=now-5m&format=svg"), b"");
    assert!(code == 200 && svg.starts_with(b"<?xml"), "{code}");
    let (code, doc) = a.get(&format!("/api/v1/doctor?target={id}&from=now-5m"));
    assert_eq!(code, 200, "{doc}");
    assert!(doc["hot_paths"][0]["frames"].as_array().unwrap().iter().any(|f| f == "burn_a"), "{doc}");
    assert!(a.stop().success());
}

/// Processes that were already running when their target was defined, parent and children alike (the
/// children inherit nothing: they were forked before the parent's events were opened), are all sampled.
#[test]
fn running_children_of_a_followed_parent_are_sampled_too() {
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    let split = workload("cpu_split");
    // A duration of its own marks the family: another suite's cpu_split on the machine is not matched.
    let script = format!("{0} 4.0131 & {0} 4.0131 & wait", split.display());
    let mut family =
        std::process::Command::new("sh").args(["-c", &script]).stdout(Stdio::null()).spawn().unwrap();
    // Both children run cpu_split before the target exists (a busy machine may take its time to fork).
    wait_for(3, "the shell's two cpu_split children", || {
        let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", family.id())).ok()?;
        let comm = |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        (kids.split_whitespace().filter(|&p| comm(p).trim() == "cpu_split").count() == 2).then_some(())
    });
    let (code, t) =
        a.post("/api/v1/targets", r#"{"match":{"cmdline":"cpu_split 4.0131"},"frequency":999,"window_s":1}"#);
    assert_eq!(code, 201, "{t}");
    let procs = wait_for(3, "the shell and both children", || {
        let (_, v) = a.get("/api/v1/processes");
        (v.as_array()?.len() == 3).then_some(v)
    });
    for p in procs.as_array().unwrap() {
        assert_eq!(p["followed"], "directly", "existing processes inherit nothing: {procs}");
    }
    assert!(family.wait().unwrap().success());
    let r = settled_cpu_profile(&a, "1", 1000, "both children's samples");
    let mut pids: Vec<u64> = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "cpu_split" && t["samples"].as_i64().unwrap_or(0) > 200)
        .map(|t| t["pid"].as_u64().unwrap())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 2, "both children sampled: {}", r["threads"]);
    assert_split(&r);
}

/// A child forked from a followed parent inherits the parent's events; when another target also matches
/// the child (so it is recorded under another key, by its own session), its samples are stored once: at
/// 999 Hz a single-threaded process has at most ~999 samples per second of its life, not twice that.
#[test]
fn a_child_matched_under_another_key_is_recorded_once() {
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    let (code, parent) = a.post(
        "/api/v1/targets",
        r#"{"match":{"cmdline":"wsdouble"},"sources":["cpu"],"frequency":999,"window_s":1}"#,
    );
    assert_eq!(code, 201, "{parent}");
    let (code, child) = a.post(
        "/api/v1/targets",
        r#"{"match":{"comm":"^cpu_split$","cmdline":"cpu_split 2 wsdouble"},"sources":["cpu","offcpu"],"frequency":999,"window_s":1}"#,
    );
    assert_eq!(code, 201, "{child}");
    // The shell is followed before it starts the child (its cmdline has the marker; so has the child's).
    let script = format!("sleep 1.5; {} 2 wsdouble", workload("cpu_split").display());
    let t0 = Instant::now();
    let mut family = std::process::Command::new("sh")
        .args(["-c", &script, "wsdouble"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(family.wait().unwrap().success());
    // The child lived at most this long (the family's life less the shell's sleep).
    let child_life = t0.elapsed().as_secs_f64() - 1.5;
    let r = settled_cpu_profile(&a, &child["id"].to_string(), 300, "the child's samples");
    let total = r["total_samples"].as_f64().unwrap();
    // Tolerance: 10% over the clock's rate (timer slack); recorded twice it would be ~2x.
    let most = 999.0 * child_life * 1.1;
    assert!(total <= most, "{total} samples in {child_life:.2} s of the child's life: counted twice?");
    assert_split(&r);
    // The parent's target holds the same child samples (one recording stored for both targets).
    let (code, p) = a.get(&format!("/api/v1/profile?target={}&from=now-5m&type=cpu", parent["id"]));
    assert_eq!(code, 200, "{p}");
    assert!(p["total_samples"].as_f64().unwrap() <= most + 100.0, "{}", p["total_samples"]);
    assert!(a.stop().success());
}

/// stackprobe's form starts the same recording and writes periodic SVG and folded files.
#[test]
fn the_stackprobe_form_writes_periodic_files() {
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    let mut w = spawn_split("4");
    let body = r#"json={"cmd":{"probe":["oncpu"]},"snoopers":{"proc_name":[{"comm":"cpu_split"}]},"params":{"svg_period":1,"perf_sample_period":5,"output_dir":"sp"}}"#;
    let (code, v) = a.req("PUT", "/flamegraph", body.as_bytes());
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&v));
    wait_for(3, "the workload in /processes", || pids(&a).contains(&u64::from(w.id())).then_some(()));
    let out = dir.path().join("output/sp");
    let svg = wait_for(12, "a periodic SVG", || {
        std::fs::read_dir(&out)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "svg"))
    });
    let folded = std::fs::read_to_string(svg.with_extension("folded")).unwrap();
    assert!(folded.lines().any(|l| l.contains("burn_a")), "{folded}");
    assert!(std::fs::read(&svg).unwrap().starts_with(b"<?xml"));
    // GET shows what the form defined; a second PUT replaces it rather than adding to it.
    let (_, g) = a.get("/flamegraph");
    assert_eq!(g["targets"].as_array().unwrap().len(), 1, "{g}");
    let (code, _) = a.req("PUT", "/flamegraph", body.as_bytes());
    assert_eq!(code, 200);
    let (_, all) = a.get("/api/v1/targets");
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    // An output directory outside the root is refused and changes nothing.
    let escape = body.replace("\"sp\"", "\"../../etc\"");
    let (code, e) = a.req("PUT", "/flamegraph", escape.as_bytes());
    assert_eq!(code, 422, "{}", String::from_utf8_lossy(&e));
    assert!(String::from_utf8_lossy(&e).contains("inside the output root"));
    assert_eq!(a.get("/api/v1/targets").1, all);
    w.wait().unwrap();
}

/// Targets and windows survive a restart; a SIGKILL mid-window leaves a readable store; retention
/// removes old windows.
#[test]
fn the_store_survives_restarts_and_sigkill_and_retention_empties_it() {
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    let (code, _) =
        a.post("/api/v1/targets", r#"{"name":"split","match":{"comm":"^cpu_split$"},"window_s":1}"#);
    assert_eq!(code, 201);
    let mut w = spawn_split("8");
    let windows = |a: &Agent| -> i64 {
        let (code, body) = a.req("GET", "/metrics", b"");
        assert_eq!(code, 200);
        let text = String::from_utf8(body).unwrap();
        let line = text.lines().find(|l| l.starts_with("whyslow_store_windows ")).expect("store gauge");
        line.split(' ').nth(1).unwrap().parse().unwrap()
    };
    wait_for(10, "two stored windows", || (windows(&a) >= 2).then_some(()));
    drop(a); // SIGKILL, mid-window
    let a = Agent::start(dir.path(), &[]);
    let (_, targets) = a.get("/api/v1/targets");
    assert_eq!(targets[0]["name"], "split", "{targets}");
    let (code, r) = a.get("/api/v1/profile?target=1&from=now-5m");
    assert_eq!(code, 200, "{r}");
    assert!(r["total_samples"].as_i64().unwrap() > 0);
    // The process is still running: the restarted agent follows it again.
    wait_for(3, "the workload followed after the restart", || {
        pids(&a).contains(&u64::from(w.id())).then_some(())
    });
    w.wait().unwrap();
    assert!(a.stop().success(), "SIGTERM ends the agent cleanly");
    // Retention of 2 s: every window goes once it is that old.
    let a = Agent::start(dir.path(), &["--retention", "2s"]);
    wait_for(10, "retention to remove every window", || (windows(&a) == 0).then_some(()));
    let (code, e) = a.get("/api/v1/profile?target=1&from=now-5m");
    assert_eq!(code, 404, "{e}");
}

/// Bad requests get the right 4xx with a JSON error and change nothing; /metrics parses with promtool;
/// a token protects the API; random and mutated requests never give a 5xx.
#[test]
fn bad_input_is_refused_with_json_errors_and_metrics_parse() {
    let _x = exclusive();
    let dir = tmp();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "0123456789abcdef0123\n").unwrap();
    std::fs::set_permissions(&token_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut a = Agent::start(&dir.path().join("d"), &["--token-file", token_file.to_str().unwrap()]);
    assert_eq!(a.get("/api/v1/targets").0, 401, "no token");
    a.token = Some("0123456789abcdef0124".into());
    assert_eq!(a.get("/api/v1/targets").0, 401, "wrong token");
    a.token = Some("0123456789abcdef0123".into());
    let (code, _) = a.post("/api/v1/targets", r#"{"match":{"comm":"^x$"}}"#);
    assert_eq!(code, 201);
    let before = a.get("/api/v1/targets").1;
    let huge = format!(r#"{{"match":{{"comm":"{}"}}}}"#, "a".repeat(2 << 20));
    let cases: &[(&str, &str, &str, u16)] = &[
        ("POST", "/api/v1/targets", "{bad", 400),
        ("POST", "/api/v1/targets", r#"{"match":{"comm":"x"},"unknown":1}"#, 400),
        ("POST", "/api/v1/targets", r#"{"match":{"comm":"("}}"#, 422),
        ("POST", "/api/v1/targets", r#"{"match":{}}"#, 422),
        ("POST", "/api/v1/targets", r#"{"match":{"comm":"x"},"output":{"dir":"/etc"}}"#, 422),
        ("POST", "/api/v1/targets", &huge, 413),
        ("PATCH", "/api/v1/targets/1", r#"{"frequency":0}"#, 422),
        ("PATCH", "/api/v1/targets/1", r#"[1]"#, 400),
        ("PATCH", "/api/v1/targets/7", r#"{}"#, 404),
        ("DELETE", "/api/v1/targets/x", "", 400),
        ("GET", "/api/v1/profile?target=1&from=yesterday", "", 400),
        ("GET", "/api/v1/profile?target=1&from=now&until=now-1h", "", 400),
        ("GET", "/api/v1/profile?target=1&format=gif", "", 400),
        ("GET", "/api/v1/profile?target=1&nope=1", "", 400),
        ("GET", "/api/v1/profile?target=1&thread=main", "", 400),
        ("GET", "/api/v1/profile?target=1&pid=1,-2", "", 400),
        ("GET", "/api/v1/profile?target=1", "", 404),
        ("GET", "/api/v1/profile", "", 400),
        ("GET", "/api/v1/diff?target=1", "", 400),
        ("GET", "/api/v1/nothing", "", 404),
        ("DELETE", "/healthz", "", 405),
    ];
    for (method, path, body, want) in cases {
        let (code, b) = a.req(method, path, body.as_bytes());
        let text = String::from_utf8_lossy(&b);
        assert_eq!(code, *want, "{method} {path}: {text}");
        let v: Value =
            serde_json::from_slice(&b).unwrap_or_else(|_| panic!("{method} {path}: not JSON: {text}"));
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    }
    assert_eq!(a.get("/api/v1/targets").1, before, "nothing changed");
    // A PATCH that is valid changes only what it names.
    let (code, t) = {
        let (c, b) = a.req("PATCH", "/api/v1/targets/1", br#"{"frequency":49,"labels":{"env":"test"}}"#);
        (c, serde_json::from_slice::<Value>(&b).unwrap())
    };
    assert_eq!(
        (code, t["frequency"].as_i64(), t["match"]["comm"].as_str()),
        (200, Some(49), Some("^x$")),
        "{t}"
    );
    // Random and mutated requests: never a 5xx, never a dropped connection, the agent stays up.
    let seeds: Vec<&[u8]> = vec![
        // Nothing a mutation makes of these matches a process: no such name, a pid above pid_max.
        b"POST /api/v1/targets HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 31\r\n\r\n{\"match\":{\"comm\":\"^zz_never$\"}}",
        b"GET /api/v1/profile?target=1&from=now-1h&type=cpu&format=svg HTTP/1.1\r\n\r\n",
        b"PATCH /api/v1/targets/1 HTTP/1.1\r\nContent-Length: 17\r\n\r\n{\"window_s\": 5 }",
        b"PUT /flamegraph HTTP/1.1\r\nContent-Length: 49\r\n\r\njson={\"snoopers\":{\"proc_id\":[4194305]},\"state\":1}",
        b"GET /api/v1/diff?target=1&before_from=now-2m&before_until=now-1m&after_from=now-1m&after_until=now HTTP/1.1\r\n\r\n",
    ];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    const POOL: &[u8] = b"%{}[]\":,=&?/\\0\x00\xff9-";
    let auth = b"Authorization: Bearer 0123456789abcdef0123\r\nConnection: close\r\n";
    // WHYSLOW_API_FUZZ_SECS=180 runs for minutes instead of 1500 requests.
    let deadline = std::env::var("WHYSLOW_API_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(|s| Instant::now() + Duration::from_secs(s));
    let mut answered = 0;
    let mut i = 0;
    while deadline.map_or(i < 1500, |d| Instant::now() < d) {
        i += 1;
        let seed = seeds[i % seeds.len()];
        let mut req = seed.to_vec();
        // Mutate after the request line's method (random bytes, flips, cuts, repeats).
        for _ in 0..1 + next() % 4 {
            let at = 4 + (next() as usize) % (req.len() - 4);
            match next() % 4 {
                0 => req[at] ^= 1 << (next() % 8),
                1 => req[at] = POOL[(next() % POOL.len() as u64) as usize],
                2 => req.truncate(at.max(12)),
                _ => {
                    let chunk = req[at..(at + 8).min(req.len())].to_vec();
                    req.splice(at..at, chunk);
                }
            }
        }
        // Whatever the mutation did, the request is complete: its headers end, its Content-Length is its
        // body's (otherwise the server rightly waits for the rest), and it carries the token.
        let (head, body) = match req.windows(4).position(|w| w == b"\r\n\r\n") {
            Some(p) => (req[..p].to_vec(), req[p + 4..].to_vec()),
            None => (req.clone(), Vec::new()),
        };
        let head: Vec<&[u8]> = head
            .split(|&b| b == b'\n')
            .filter(|l| !l.to_ascii_lowercase().starts_with(b"content-length"))
            .collect();
        let head = head.join(&b'\n');
        let length = format!("\r\nContent-Length: {}\r\n", body.len());
        let full =
            [head.trim_ascii_end(), b"\r\n", auth, length.trim_start().as_bytes(), b"\r\n", &body].concat();
        let (code, body) = raw(&a.addr, &full);
        assert!(
            code < 500,
            "request {i} gave {code}: {:?} -> {}",
            String::from_utf8_lossy(&full),
            String::from_utf8_lossy(&body)
        );
        answered += usize::from(code > 0);
    }
    assert!(answered * 3 > i * 2, "most mutated requests get an answer: {answered} of {i}");
    eprintln!("api fuzz: {i} requests, {answered} answered, none with a 5xx");
    let (code, _) = a.get("/healthz");
    assert_eq!(code, 200);
    // /metrics is valid Prometheus text.
    let (code, metrics) = a.req("GET", "/metrics", b"");
    assert_eq!(code, 200);
    let text = String::from_utf8(metrics).unwrap();
    assert!(text.contains("whyslow_http_requests_total{code=\"401\"}"), "{text}");
    let mut check = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt: prometheus) is installed by scripts/deps.sh");
    check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn serving_beyond_loopback_needs_a_token() {
    let dir = tmp();
    let out =
        whyslow().args(["serve", "--listen", "0.0.0.0:0", "--data-dir"]).arg(dir.path()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--token-file"), "{err}");
    let out = whyslow().args(["serve", "--retention", "soon"]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--retention"));
}

/// Open descriptors of a process.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

fn metric(a: &Agent, name: &str) -> f64 {
    let (code, body) = a.req("GET", "/metrics", b"");
    assert_eq!(code, 200);
    let text = String::from_utf8(body).unwrap();
    let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}"));
    line.split(' ').nth(1).unwrap().parse().unwrap()
}

/// Issue 32 #1 (slowloris): connections that never finish their headers are capped per client (the rest
/// closed at once, counted) and closed after the header timeout; the agent's descriptors stay bounded and
/// it answers again once they are gone.
#[test]
fn slow_clients_are_capped_and_disconnected() {
    // Its load (hundreds of connections or requests) would skew the tests that count samples.
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    assert_eq!(a.get("/healthz").0, 200);
    let before = fds(a.child.id());
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut s = TcpStream::connect(&a.addr).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").unwrap();
        slow.push(s);
    }
    // The agent holds at most its per-client cap (32) of them, whatever the test does meanwhile.
    std::thread::sleep(Duration::from_millis(500));
    let held = fds(a.child.id());
    assert!(held <= before + 32 + 4, "{before} descriptors before, {held} with 300 slow clients");
    // Every connection ends: those over the cap at once, the others at the header timeout (10 s). The
    // bound here only catches a connection that is never closed.
    let t0 = Instant::now();
    let mut refused = 0;
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        refused += usize::from(buf.starts_with(b"HTTP/1.1 503"));
        assert!(t0.elapsed() < Duration::from_secs(60), "a slow connection is still open after 60 s");
    }
    eprintln!("all 300 slow connections closed after {:?}; {refused} told 503", t0.elapsed());
    assert_eq!(a.get("/healthz").0, 200);
    let refused_total = metric(&a, "whyslow_http_connections_refused_total");
    let timed_out = metric(&a, "whyslow_http_header_timeouts_total");
    assert!((266.0..=300.0).contains(&refused_total), "refused {refused_total}");
    assert!(timed_out >= 300.0 - refused_total, "timed out {timed_out}, refused {refused_total}");
    assert!(fds(a.child.id()) <= before + 2, "descriptors back to {before}: {}", fds(a.child.id()));
}

/// Issue 32 #4: a second agent on the same data directory exits non-zero, naming the lock and the first.
#[test]
fn a_second_agent_on_one_data_dir_is_refused() {
    // Its load (hundreds of connections or requests) would skew the tests that count samples.
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    let out =
        whyslow().args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(dir.path()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("locked") && err.contains(&format!("pid {}", a.child.id())), "{err}");
    // Once the first is gone, the directory is free.
    assert!(a.stop().success());
    let b = Agent::start(dir.path(), &[]);
    assert_eq!(b.get("/healthz").0, 200);
}

/// Issue 32 #3: a store that fails its integrity check is moved aside and a new one started, saying so;
/// /healthz reports the store.
#[test]
fn a_corrupt_store_is_moved_aside_not_half_loaded() {
    // Its load (hundreds of connections or requests) would skew the tests that count samples.
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    for i in 0..300 {
        let body =
            format!(r#"{{"name":"t{i}","match":{{"comm":"^{}$"}},"state":"stopped"}}"#, "x".repeat(200));
        assert_eq!(a.post("/api/v1/targets", &body).0, 201);
    }
    assert!(a.stop().success());
    let db = dir.path().join("whyslow.db");
    let mut bytes = std::fs::read(&db).unwrap();
    assert!(bytes.len() > 8 * 4096, "{} bytes", bytes.len());
    for b in &mut bytes[4 * 4096..6 * 4096] {
        *b = 0x5a;
    }
    std::fs::write(&db, &bytes).unwrap();
    let a = Agent::start(dir.path(), &[]);
    let said = a.early.join("\n");
    assert!(said.contains("corrupt") && said.contains("moved it to"), "{said}");
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("whyslow.db.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "the damaged file is kept aside");
    let (code, h) = a.get("/healthz");
    assert_eq!((code, &h["store"]["ok"]), (200, &Value::Bool(true)), "{h}");
    assert_eq!(a.get("/api/v1/targets").1, serde_json::json!([]));
    assert_eq!(a.post("/api/v1/targets", r#"{"match":{"comm":"^x$"}}"#).0, 201);
    assert_eq!(a.get("/api/v1/targets").1.as_array().unwrap().len(), 1);
}

/// Issue 32 #5: a web page cannot drive the API: writes need a JSON content type, foreign origins are
/// refused, and a Host that is not an address of the agent (DNS rebinding) is refused.
#[test]
fn cross_site_and_rebinding_requests_are_refused() {
    // Its load (hundreds of connections or requests) would skew the tests that count samples.
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &["--allow-host", "profiler.internal"]);
    let port = a.addr.rsplit(':').next().unwrap().to_string();
    let body = br#"{"match":{"comm":"^x$"}}"#;
    let host = format!("Host: {}\r\n", a.addr);
    let cases: Vec<(String, &str, &str, u16)> = vec![
        // A form or text/plain POST (no preflight in a browser).
        (format!("{host}Content-Type: text/plain\r\n"), "POST", "/api/v1/targets", 415),
        (
            format!("{host}Content-Type: application/x-www-form-urlencoded\r\n"),
            "POST",
            "/api/v1/targets",
            415,
        ),
        (host.clone(), "POST", "/api/v1/targets", 415),
        // A foreign page, whatever the content type.
        (
            format!("{host}Content-Type: application/json\r\nOrigin: http://evil.example\r\n"),
            "POST",
            "/api/v1/targets",
            403,
        ),
        (
            format!("{host}Content-Type: text/plain\r\nOrigin: http://evil.example\r\n"),
            "POST",
            "/api/v1/targets",
            403,
        ),
        (format!("{host}Origin: null\r\n"), "DELETE", "/api/v1/targets/1", 403),
        // DNS rebinding: the page's name, now resolving to 127.0.0.1.
        (format!("Host: evil.example:{port}\r\n"), "GET", "/api/v1/targets", 403),
        (
            format!("Host: evil.example:{port}\r\nContent-Type: application/json\r\n"),
            "POST",
            "/api/v1/targets",
            403,
        ),
    ];
    for (headers, method, path, want) in &cases {
        let send: &[u8] = if *method == "POST" { body } else { b"" };
        let (code, b) = a.req_with(method, path, headers, send);
        let text = String::from_utf8_lossy(&b);
        assert_eq!(code, *want, "{method} {path} with {headers:?}: {text}");
        assert!(serde_json::from_slice::<Value>(&b).is_ok_and(|v| v["error"].is_string()), "{text}");
    }
    assert_eq!(a.get("/api/v1/targets").1, serde_json::json!([]), "nothing was created");
    // The agent's own page (same origin), addresses, localhost and allowed names are served.
    let own = format!("{host}Content-Type: application/json\r\nOrigin: http://{}\r\n", a.addr);
    assert_eq!(a.req_with("POST", "/api/v1/targets", &own, body).0, 201);
    for h in [format!("localhost:{port}"), format!("[::1]:{port}"), format!("profiler.internal:{port}")] {
        assert_eq!(a.req_with("GET", "/api/v1/targets", &format!("Host: {h}\r\n"), b"").0, 200, "{h}");
    }
}

/// Issue 32 #7: a token file others can read is refused; target names are unique; a huge Content-Length
/// is refused at once, not waited for; the window a process is recorded with is shown.
#[test]
fn small_hardening_items() {
    // It starts cpu_split, which other tests' targets match.
    let _x = exclusive();
    let dir = tmp();
    let token = dir.path().join("token");
    std::fs::write(&token, "0123456789abcdef0123\n").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = whyslow()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("d"))
        .arg("--token-file")
        .arg(&token)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.trim().lines().count() == 1, "{err}");
    assert!(err.contains("chmod 600") && err.contains("644"), "{err}");

    let a = Agent::start(&dir.path().join("d"), &[]);
    let (code, _) =
        a.post("/api/v1/targets", r#"{"name":"web","match":{"comm":"^cpu_split$"},"window_s":5}"#);
    assert_eq!(code, 201);
    let (code, e) = a.post("/api/v1/targets", r#"{"name":"web","match":{"comm":"^other$"}}"#);
    assert_eq!(code, 409, "{e}");
    let (code, two) =
        a.post("/api/v1/targets", r#"{"name":"web2","match":{"cmdline":"cpu_split"},"window_s":1}"#);
    assert_eq!(code, 201);
    let (code, e) = {
        let (c, b) = a.req("PATCH", &format!("/api/v1/targets/{}", two["id"]), br#"{"name":"web"}"#);
        (c, String::from_utf8_lossy(&b).to_string())
    };
    assert_eq!(code, 409, "{e}");
    // 100 MB announced, 1 byte sent: refused before the body, not after a wait for the rest.
    let mut s = TcpStream::connect(&a.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "POST /api/v1/targets HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{{",
        a.addr
    )
    .unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).expect("an answer before the body");
    assert_eq!(&head, b"HTTP/1.1 413");
    // A process matched by both targets is recorded once, with the shorter window: shown, not silent.
    let mut w = spawn_split("3");
    let p = wait_for(5, "the workload in /processes", || {
        let (_, v) = a.get("/api/v1/processes");
        v.as_array()?.iter().find(|p| p["pid"] == w.id()).cloned()
    });
    assert_eq!(p["window_s"], 1, "{p}");
    assert_eq!(p["targets"].as_array().unwrap().len(), 2, "{p}");
    w.wait().unwrap();
}

/// A cgroup v2 directory made for a test, removed when dropped (after its processes ended).
struct Cgroup(std::path::PathBuf);

impl Cgroup {
    /// `/sys/fs/cgroup[/unified]/REL`, or None where cgroup v2 cannot be written here.
    fn make(rel: &str) -> Option<Cgroup> {
        let root = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(Path::new)
            .find(|r| r.join("cgroup.procs").exists() && r.join("cgroup.controllers").exists())?;
        let dir = root.join(rel.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).ok()?;
        Some(Cgroup(dir))
    }

    /// Starts `cpu_split SECS` inside the cgroup (the shell moves itself in, then execs: the agent sees the
    /// exec and reads the new cgroup).
    fn spawn_split(&self, secs: &str) -> Child {
        let script = format!(
            "echo $$ > {}/cgroup.procs && exec {} {secs}",
            self.0.display(),
            workload("cpu_split").display()
        );
        std::process::Command::new("sh").args(["-c", &script]).stdout(Stdio::null()).spawn().unwrap()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A followed process that moves to another cgroup and execs is read again: /processes lists it by its
/// new name and unit, and the windows recorded after that carry its new cgroup (a unit selector finds
/// them). The target follows it by pid, so it matches before and after.
#[test]
fn a_followed_process_is_read_again_after_it_moves_and_execs() {
    let _x = exclusive();
    let unit = format!("wsmove-{}.service", std::process::id());
    let Some(svc) = Cgroup::make(&format!("system.slice/{unit}")) else {
        eprintln!("no writable cgroup v2 here: skipped");
        return;
    };
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    // A shell that waits for a line, then moves itself into the unit and becomes cpu_split.
    let script = format!(
        "read go; echo $$ > {}/cgroup.procs && exec {} 2",
        svc.0.display(),
        workload("cpu_split").display()
    );
    let mut child = std::process::Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = u64::from(child.id());
    let body = format!(r#"{{"match":{{"pids":[{pid}]}},"sources":["cpu"],"frequency":99,"window_s":1}}"#);
    let (code, t) = a.post("/api/v1/targets", &body);
    assert_eq!(code, 201, "{t}");
    let a = &a;
    let listed = |comm: &'static str| {
        move || {
            let (_, v) = a.get("/api/v1/processes");
            v.as_array()?.iter().find(|p| p["pid"] == pid && p["comm"] == comm).cloned()
        }
    };
    let before = wait_for(10, "the shell followed", listed("sh"));
    assert_eq!(before["labels"].get("unit"), None, "{before}");
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let after = wait_for(10, "the process listed again as cpu_split", listed("cpu_split"));
    assert_eq!(after["labels"]["unit"], unit.as_str(), "{after}");
    assert!(after["cmdline"].as_str().unwrap().contains("cpu_split"), "{after}");
    assert!(child.wait().unwrap().success());
    let r = wait_for(30, "the unit's windows", || {
        let (code, r) = a.get(&format!("/api/v1/profile?selector=unit={unit}&type=cpu&from=now-5m"));
        (code == 200 && r["total_samples"].as_i64()? >= 30).then_some(r)
    });
    let pids: Vec<u64> =
        r["threads"].as_array().unwrap().iter().map(|t| t["pid"].as_u64().unwrap()).collect();
    assert!(pids.iter().all(|&p| p == pid), "{pids:?}");
}

/// Beyond issue 32: `serve --all` defines a target of every process at 19 Hz, kept by name.
#[test]
fn serve_all_defines_a_target_of_every_process() {
    // Its agent samples every process, the other tests' workloads too.
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &["--all"]);
    let (_, t) = a.get("/api/v1/targets");
    assert_eq!(t.as_array().unwrap().len(), 1, "{t}");
    assert_eq!(t[0]["name"], "all-processes", "{t}");
    assert_eq!(
        (t[0]["match"]["all"].clone(), t[0]["frequency"].clone()),
        (Value::Bool(true), 19.into()),
        "{t}"
    );
    assert!(a.stop().success());
    // Restarted with --all again, the target is the same one (not a second).
    let a = Agent::start(dir.path(), &["--all"]);
    assert_eq!(a.get("/api/v1/targets").1, t);
    // An API target of every process gets 19 Hz too unless it names a frequency.
    let (code, v) = a.post("/api/v1/targets", r#"{"match":{"all":true,"comm":"^zz_none$"}}"#);
    assert_eq!((code, &v["frequency"]), (201, &Value::from(19)), "{v}");
}

/// Issue 47 (whole host): a target of every process names a CPython process's Python functions, found
/// as it is first sampled, with no flag: split.py (mix runs two of every three fib calls) for 6 s of CPU
/// at 97 Hz (~580 samples; one binomial deviation of a 2/3 share is 2 points), fib under >= 90% of the
/// process's samples (those of the first drain, before its interpreter is found, have none) and mix
/// under 2/3 of fib's, within 8 points.
#[test]
fn serve_all_names_python_functions() {
    let Some(exe) = [13, 12, 11, 10, 9, 8].into_iter().find_map(pyenv_python) else {
        eprintln!("no CPython 3.8-3.13 under ~/.pyenv/versions: skipping");
        return;
    };
    // Its agent samples every process; another test's Python would count too.
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(&dir.path().join("data"), &[]);
    let (code, t) = a.post("/api/v1/targets", r#"{"match":{"all":true},"frequency":97,"window_s":2}"#);
    assert_eq!(code, 201, "{t}");
    let script = root().join("tests/workloads/python/split.py");
    let mut split = std::process::Command::new(&exe).arg(&script).arg("6").spawn().unwrap();
    let pid = split.id();
    assert!(split.wait().unwrap().success());
    let r = settled_cpu_profile(&a, &format!("{}&pid={pid}", t["id"]), 450, "split.py's samples");
    let total = r["total_samples"].as_f64().unwrap();
    let of = |name: &str| function(&r, |n| n == name).map_or(0.0, |f| f["total"].as_f64().unwrap());
    let (fib, mix) = (100.0 * of("fib") / total, 100.0 * of("mix") / of("fib").max(1.0));
    eprintln!("{}: {total} samples, fib under {fib:.1}%, mix under {mix:.1}% of fib's", exe.display());
    assert!(fib >= 90.0, "fib under {fib:.1}% of {total} samples");
    assert!((mix - 200.0 / 3.0).abs() <= 8.0, "mix under {mix:.1}% of fib's samples, expected 66.7");
}

/// Issue 32 (whole host): a target of every process (what `serve --all` defines, here at 97 Hz rather
/// than its 19 so that the sampling error of the sum is small) samples every CPU, not every process, so
/// processes that live a fraction of a second are profiled: 20 processes of a name of their own, each
/// burning 0.3 s of CPU and started 0.15 s apart while the agent runs, are each in the stored profile
/// under that name, with samples in proportion to the CPU time each used (97 Hz x its CPU time, measured
/// by wait4).
#[test]
fn serve_all_profiles_short_lived_processes() {
    // Its agent samples every process; the burners would be other tests' cpu_split.
    let _x = exclusive();
    let dir = tmp();
    let name = format!("wsall{}", std::process::id() % 1_000_000);
    let exe = dir.path().join(&name);
    std::fs::copy(workload("cpu_split"), &exe).unwrap();
    let a = Agent::start(&dir.path().join("data"), &[]);
    let (code, t) = a.post("/api/v1/targets", r#"{"match":{"all":true},"frequency":97,"window_s":2}"#);
    assert_eq!(code, 201, "{t}");
    // Sampling has begun once a process is listed at its first sample: one of the test's own, as an idle
    // machine may run nothing else (the agent's own samples are dropped).
    let mut first =
        std::process::Command::new(workload("cpu_split")).arg("2").stdout(Stdio::null()).spawn().unwrap();
    wait_for(10, "the whole-host sampling to start", || {
        let (_, v) = a.get("/api/v1/processes");
        (!v.as_array()?.is_empty()).then_some(())
    });
    first.kill().unwrap();
    first.wait().unwrap();
    let mut burners = Vec::new();
    for _ in 0..20 {
        burners.push(std::process::Command::new(&exe).arg("0.3").stdout(Stdio::null()).spawn().unwrap());
        std::thread::sleep(Duration::from_millis(150));
    }
    // CPU time of each (user + system), from its exit status.
    let cpu: Vec<(u64, f64)> = burners
        .into_iter()
        .map(|c| {
            let pid = c.id();
            std::mem::forget(c);
            // SAFETY: rusage is plain data, for which all zeroes is a valid value.
            let (mut status, mut ru) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
            // SAFETY: status and ru are this frame's; wait4 fills them.
            let r = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut ru) };
            assert_eq!(r, pid as i32);
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            (u64::from(pid), secs(ru.ru_utime) + secs(ru.ru_stime))
        })
        .collect();
    let (_, t) = a.get("/api/v1/targets");
    let id = t[0]["id"].as_i64().unwrap();
    let threads_of = |r: &Value, pid: u64| -> Vec<Value> {
        r["threads"]
            .as_array()
            .map_or(Vec::new(), |t| t.iter().filter(|t| t["pid"] == pid).cloned().collect())
    };
    // Every burner's samples are stored once the windows it ran in are cut: every burner is in the
    // profile and its samples have not changed for two windows (the last burners' last windows are cut
    // after the first samples of all of them are in).
    let mut last = (-1.0, Instant::now());
    let r = wait_for(60, "every short-lived process's samples in the stored profile", || {
        let (code, r) = a.get(&format!("/api/v1/profile?target={id}&type=cpu&from=now-5m"));
        if code != 200 || !cpu.iter().all(|&(pid, _)| !threads_of(&r, pid).is_empty()) {
            return None;
        }
        let sum: f64 = cpu
            .iter()
            .flat_map(|&(pid, _)| threads_of(&r, pid))
            .map(|t| t["samples"].as_f64().unwrap_or(0.0))
            .sum();
        if sum != last.0 {
            last = (sum, Instant::now());
        }
        (last.1.elapsed() > Duration::from_secs(4)).then_some(r)
    });
    const HZ: f64 = 97.0;
    let mut total = (0.0, 0.0);
    let mut each = Vec::new();
    for &(pid, secs) in &cpu {
        // (A sample between the fork and the exec would be the test's, under its name.)
        let threads: Vec<Value> =
            threads_of(&r, pid).into_iter().filter(|t| t["name"] == name.as_str()).collect();
        assert!(!threads.is_empty(), "pid {pid} is not named {name}: {:?}", threads_of(&r, pid));
        let samples: f64 = threads.iter().map(|t| t["samples"].as_f64().unwrap()).sum();
        each.push((pid, samples, HZ * secs));
        total.0 += samples;
        total.1 += HZ * secs;
    }
    eprintln!(
        "20 processes: {} samples, {:.1} expected; each (pid, samples, expected): {each:.1?}",
        total.0, total.1
    );
    // Each CPU's clock ticks every 1/97 s and catches whatever runs there: a process that runs `secs`
    // of CPU in pieces between other programs (a busy machine) is caught 97 x secs times on average,
    // give or take about 5 for 0.3 s. Over all 20 (about 580 expected, a deviation of about 24), within
    // 25% (6 deviations: a suite run beside stress-ng saw 80 of 114.5 at 19 Hz, 3 deviations then).
    for &(pid, samples, expected) in &each {
        assert!(samples <= 3.0 * expected + 3.0, "pid {pid}: {samples} samples, {expected:.1} expected");
    }
    assert!((total.0 / total.1 - 1.0).abs() <= 0.25, "{} samples of {:.1} expected", total.0, total.1);
}

/// Beyond issue 32: processes are labelled by their cgroup: the systemd unit and the container id are
/// listed, and select the windows of those processes only. The target matches every process of
/// /system.slice (all, narrowed by cgroup): the test's own processes (its large debug binaries, whose
/// symbolization would only slow the test) are left out.
#[test]
fn processes_are_labelled_and_selected_by_their_cgroup() {
    // It starts cpu_split, which other tests' targets match.
    let _x = exclusive();
    let me = std::process::id();
    let unit = format!("wstest-{me}.service");
    let id = format!("{me:064x}");
    let (Some(svc), Some(ctr)) = (
        Cgroup::make(&format!("system.slice/{unit}")),
        Cgroup::make(&format!("system.slice/docker-{id}.scope")),
    ) else {
        eprintln!("no writable cgroup v2 here: skipped");
        return;
    };
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    let (code, t) = a.post(
        "/api/v1/targets",
        r#"{"name":"system","match":{"all":true,"cgroup":"/system.slice"},"frequency":99,"window_s":1}"#,
    );
    assert_eq!(code, 201, "{t}");
    let mut in_unit = svc.spawn_split("3");
    let mut in_container = ctr.spawn_split("3");
    let (pu, pc) = (u64::from(in_unit.id()), u64::from(in_container.id()));
    let listed = wait_for(10, "both processes listed with their cgroup labels", || {
        let (_, v) = a.get("/api/v1/processes");
        let v = v.as_array()?.clone();
        let find = |pid: u64| v.iter().find(|p| p["pid"] == pid && p["comm"] == "cpu_split").cloned();
        let (u, c) = (find(pu)?, find(pc)?);
        (u["labels"]["unit"] == unit.as_str() && c["labels"]["container_id"] == id.as_str()).then_some((u, c))
    });
    assert_eq!(listed.1["labels"].get("unit"), None, "a container's scope is not a unit: {}", listed.1);
    assert!(in_unit.wait().unwrap().success() && in_container.wait().unwrap().success());
    for (selector, pid, other) in [(format!("unit={unit}"), pu, pc), (format!("container_id={id}"), pc, pu)] {
        let r = wait_for(30, &format!("samples of {selector}"), || {
            let (code, r) = a.get(&format!("/api/v1/profile?selector={selector}&type=cpu&from=now-5m"));
            (code == 200 && r["total_samples"].as_i64()? >= 30).then_some(r)
        });
        let pids: Vec<u64> =
            r["threads"].as_array().unwrap().iter().map(|t| t["pid"].as_u64().unwrap()).collect();
        assert!(pids.iter().all(|&p| p == pid) && !pids.contains(&other), "{selector}: {pids:?}");
        // At most 99 samples per CPU second of a 3 s single-threaded run, with 20% slack.
        assert!(
            r["total_samples"].as_f64().unwrap() <= 99.0 * 3.0 * 1.2,
            "{selector}: {}",
            r["total_samples"]
        );
    }
    // A target by id and a selector combine: that target's windows of the unit's processes; a target
    // label the target lacks selects nothing.
    let tid = t["id"].as_i64().unwrap();
    let (code, r) = a.get(&format!("/api/v1/profile?target={tid}&selector=unit={unit}&type=cpu&from=now-5m"));
    assert_eq!(code, 200, "{r}");
    let pids: Vec<u64> =
        r["threads"].as_array().unwrap().iter().map(|t| t["pid"].as_u64().unwrap()).collect();
    assert!(!pids.is_empty() && pids.iter().all(|&p| p == pu), "target {tid} and unit={unit}: {pids:?}");
    let (code, e) = a.get(&format!("/api/v1/profile?target={tid}&selector=app=nothing&from=now-5m"));
    assert_eq!(code, 404, "{e}");
    // Target labels and process labels combine; a unit nobody runs in has no windows.
    let (code, e) = a.get(&format!("/api/v1/profile?selector=unit={unit},container_id={id}&from=now-5m"));
    assert_eq!(code, 404, "{e}");
    let (code, e) = a.get("/api/v1/profile?selector=unit=nothing-here.service&from=now-5m");
    assert_eq!(code, 404, "{e}");
}

/// A tmpfs of `size` mounted at `dir`, unmounted when dropped; None where mounting is not allowed.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .ok()?
            .success();
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Issue 32 #2 and #7 on a real full disk: windows that cannot be written are counted as lost windows,
/// /healthz says the store fails, the API answers 507 (never 500), and once there is room again the agent
/// stores windows by itself and /healthz is ok.
// Ignored: on main it timed out three runs of three waiting for the first lost window (SQLite kept
// writing into space it already held, the log reused after a checkpoint); whether a write needs new
// blocks after the fill is not the test's to control yet. Run with --ignored.
#[ignore = "a full tmpfs does not reliably fail the next write (see the comment)"]
#[test]
fn a_full_disk_is_reported_and_recovers_by_itself() {
    let _x = exclusive();
    let dir = tmp();
    let Some(fs) = Tmpfs::mount(&dir.path().join("small"), "2m") else {
        eprintln!("cannot mount a tmpfs here: skipped");
        return;
    };
    let a = Agent::start(&fs.0.join("d"), &["--max-disk", "64MiB"]);
    let (code, t) =
        a.post("/api/v1/targets", r#"{"match":{"comm":"^cpu_split$"},"frequency":999,"window_s":1}"#);
    assert_eq!(code, 201, "{t}");
    let mut w = spawn_split("20");
    wait_for(15, "a stored window", || (metric(&a, "whyslow_windows_stored_total") >= 1.0).then_some(()));
    // Fill the disk.
    let filler = fs.0.join("filler");
    {
        // Never more than the tmpfs holds, should the mount not be where it is expected.
        // SAFETY: statfs is plain data, for which all zeroes is a valid value.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        let path = std::ffi::CString::new(fs.0.to_str().unwrap()).unwrap();
        // SAFETY: statfs writes the struct given; the path is a NUL-terminated string.
        assert_eq!(unsafe { libc::statfs(path.as_ptr(), &mut st) }, 0);
        assert_eq!(st.f_type, libc::TMPFS_MAGIC, "{} is not the tmpfs", fs.0.display());
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0x5au8; 64 << 10];
        for _ in 0..64 {
            if f.write_all(&block).is_err() {
                break;
            }
        }
        let _ = f.sync_all();
    }
    wait_for(30, "lost windows counted", || (metric(&a, "whyslow_store_errors_total") >= 1.0).then_some(()));
    let (code, h) = a.get("/healthz");
    assert_eq!((code, &h["store"]["ok"]), (503, &Value::Bool(false)), "{h}");
    let (code, e) = a.post("/api/v1/targets", r#"{"match":{"comm":"^never$"}}"#);
    assert!(code == 201 || code == 507, "POST on a full disk: {code} {e}");
    // Room again: the next windows are stored without help.
    std::fs::remove_file(&filler).unwrap();
    let stored = metric(&a, "whyslow_windows_stored_total");
    wait_for(30, "windows stored again", || {
        (metric(&a, "whyslow_windows_stored_total") > stored && a.get("/healthz").0 == 200).then_some(())
    });
    let (code, e) = a.req("DELETE", "/api/v1/targets/1", b"");
    assert_eq!(code, 204, "{}", String::from_utf8_lossy(&e));
    let _ = w.kill();
    let _ = w.wait();
    assert!(a.stop().success());
}

/// A webhook receiver of ours: answers 503 to its first `fail_first` requests, then 200, keeping the
/// bodies it accepted.
struct Receiver {
    addr: String,
    accepted: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    attempts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Receiver {
    fn start(fail_first: usize) -> Receiver {
        use std::sync::atomic::Ordering;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let accepted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (acc, att) = (accepted.clone(), attempts.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { continue };
                let mut r = BufReader::new(c.try_clone().unwrap());
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                if r.read_exact(&mut body).is_err() {
                    continue;
                }
                let status = if att.fetch_add(1, Ordering::SeqCst) < fail_first {
                    "503 Service Unavailable"
                } else {
                    acc.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                    "200 OK"
                };
                let _ = write!(c, "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            }
        });
        Receiver { addr, accepted, attempts }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn events(&self) -> Vec<Value> {
        self.accepted.lock().unwrap().clone()
    }
}

/// The GNU build id of a file, from readelf.
fn build_id(path: &Path) -> String {
    let out = std::process::Command::new("readelf").arg("-n").arg(path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let id = text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("a build id");
    id.trim().to_string()
}

fn add_target(a: &Agent, body: &str) -> i64 {
    let (code, v) = a.post("/api/v1/targets", body);
    assert_eq!(code, 201, "{v}");
    v["id"].as_i64().unwrap()
}

/// Windows stored of target `id`.
fn window_count(a: &Agent, id: i64) -> u64 {
    let (code, v) = a.get("/api/v1/targets?windows=true");
    assert_eq!(code, 200, "{v}");
    let t = v.as_array().unwrap().iter().find(|t| t["id"] == id).unwrap().clone();
    t["windows"]["count"].as_u64().unwrap_or(0)
}

fn regressions(a: &Agent, id: i64) -> Vec<Value> {
    let (code, v) = a.get(&format!("/api/v1/regressions?target={id}"));
    assert_eq!(code, 200, "{v}");
    v["regressions"].as_array().unwrap().clone()
}

/// Waits until no new window of `ids` came for longer than one and the doctor has diagnosed every
/// stored window.
fn doctor_caught_up(a: &Agent, ids: &[i64]) {
    let mut last = (0, Instant::now());
    wait_for(20, "the doctor to diagnose every window", || {
        let stored: u64 = ids.iter().map(|&id| window_count(a, id)).sum();
        if stored != last.0 {
            last = (stored, Instant::now());
        }
        let queued = metric(a, "whyslow_doctor_queue_windows");
        (queued == 0.0 && last.1.elapsed() > Duration::from_millis(2500)).then_some(())
    });
}

fn signal(c: &Child, sig: i32) -> u64 {
    // SAFETY: kill takes no pointers.
    unsafe { libc::kill(c.id() as i32, sig) };
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// Issue 36: the always-on doctor. One workload's hot function changes mid-run (SIGUSR1): exactly one
/// regression names the new function, within two windows of the change, with a diff of the two
/// ranges; the same workload without the change, its load cut to 40% mid-run (SIGUSR2), raises none
/// over 20 windows. Findings are stored per window and served over time (an -O0 build's), with their
/// metric; a webhook receiver that fails its first request gets each event once.
#[test]
fn the_always_on_doctor_reports_a_changed_hot_function_once() {
    let _x = exclusive();
    let dir = tmp();
    let hook = Receiver::start(1);
    let a = Agent::start(dir.path(), &["--webhook", &hook.url()]);
    let source = r#""sources":["cpu"],"frequency":999,"window_s":1"#;
    let change = add_target(
        &a,
        &format!(r#"{{"name":"change","match":{{"cmdline":"hotswitch 26 change"}},{source}}}"#),
    );
    let steady = add_target(
        &a,
        &format!(r#"{{"name":"steady","match":{{"cmdline":"hotswitch 26 steady"}},{source}}}"#),
    );
    let opt =
        add_target(&a, &format!(r#"{{"name":"opt","match":{{"cmdline":"doctor_optwork_O0"}},{source}}}"#));
    let spawn = |name: &str, args: &[&str]| {
        std::process::Command::new(workload(name)).args(args).stdout(Stdio::null()).spawn().unwrap()
    };
    let mut o = spawn("doctor_optwork_O0", &[]);
    let mut c = spawn("hotswitch", &["26", "change"]);
    let mut s = spawn("hotswitch", &["26", "steady"]);
    // A baseline of 11 windows, then the change (and the load cut).
    wait_for(20, "11 windows of the changing workload", || (window_count(&a, change) >= 11).then_some(()));
    let changed_ns = signal(&c, libc::SIGUSR1);
    signal(&s, libc::SIGUSR2);
    let found = wait_for(15, "a regression", || regressions(&a, change).first().cloned());
    assert!(o.wait().unwrap().success() && c.wait().unwrap().success() && s.wait().unwrap().success());
    doctor_caught_up(&a, &[change, steady, opt]);
    // Exactly one, naming the new hot function, within two windows of the change.
    let all = regressions(&a, change);
    assert_eq!(all.len(), 1, "{all:#?}");
    let r = &all[0];
    assert_eq!(r, &{
        let mut f = found.clone();
        f["id"] = r["id"].clone();
        f
    });
    assert_eq!((r["function"].as_str(), r["measure"].as_str()), (Some("hot_new"), Some("self")), "{r:#}");
    let after_until = r["after"]["until_ns"].as_u64().unwrap();
    assert!(
        after_until <= changed_ns + 3_200_000_000,
        "found {} ms after the change",
        (after_until - changed_ns) / 1_000_000
    );
    assert!(r["after"]["from_ns"].as_u64().unwrap() <= changed_ns + 1_100_000_000, "{r:#}");
    let shift = &r["changes"][0];
    assert_eq!(shift["subject"], "hot_new");
    // 7 of every 10 units of work: 70% of the samples after, none before (within 15 points).
    assert_eq!(shift["before_pct"].as_f64(), Some(0.0));
    assert!((55.0..=85.0).contains(&shift["after_pct"].as_f64().unwrap()), "{shift}");
    assert!(r["changes"].as_array().unwrap().iter().all(|c| c["subject"] != "hot_old"), "{r:#}");
    let id = build_id(&workload("hotswitch"));
    assert_eq!(
        (r["before"]["build"].as_str(), r["after"]["build"].as_str()),
        (Some(id.as_str()), Some(id.as_str()))
    );
    assert_eq!(r["deploy"], false);
    let (code, diff) = a.get(r["diff"].as_str().unwrap());
    assert_eq!(code, 200, "{diff}");
    // The steady workload: over 20 windows (its load cut in the middle), none.
    let n = window_count(&a, steady);
    assert!(n >= 20, "{n} windows of the steady workload");
    assert_eq!(regressions(&a, steady), Vec::<Value>::new());
    // Chosen ranges, on demand: before and after the change differ in hot_new; the steady workload's
    // heavy and light halves do not.
    let secs = |ns: u64| format!("{:.3}", ns as f64 / 1e9);
    let start = r["before"]["from_ns"].as_u64().unwrap();
    let check = |id: i64, split: u64| {
        let (code, v) = a.get(&format!(
            "/api/v1/regressions/check?target={id}&before_from={}&before_until={}&after_from={}&after_until=now",
            secs(start),
            secs(split),
            secs(split + 1_000_000_000)
        ));
        assert_eq!(code, 200, "{v}");
        v
    };
    let on_demand = check(change, changed_ns);
    assert_eq!(on_demand["regression"]["function"], "hot_new", "{on_demand:#}");
    assert!(on_demand["after_windows"].as_u64().unwrap() >= 10, "{on_demand:#}");
    let halves = check(steady, changed_ns);
    assert!(halves["regression"].is_null() && halves["after_windows"].as_u64().unwrap() >= 8, "{halves:#}");
    assert_eq!(a.get(&format!("/api/v1/regressions/check?target={change}&before_from=now-1m")).0, 400);
    assert_eq!(metric(&a, &format!("whyslow_regressions_total{{target=\"{change}\"}}")), 1.0);
    assert_eq!(metric(&a, &format!("whyslow_regressions_total{{target=\"{steady}\"}}")), 0.0);
    // The -O0 build's finding, window by window: one episode, its evidence, its metric.
    // (The doctor diagnoses windows behind the store: under load its first may still be queued.)
    let unopt = wait_for(20, "the -O0 build's finding", || {
        let (code, f) = a.get(&format!("/api/v1/findings?target={opt}&from=now-5m"));
        assert_eq!(code, 200, "{f}");
        f["findings"].as_array().unwrap().iter().find(|x| x["rule"] == "unoptimized-build").cloned()
    });
    let unopt = &unopt;
    assert_eq!(unopt["episodes"].as_array().unwrap().len(), 1, "{unopt:#}");
    assert_eq!(unopt["windows"].as_u64(), Some(unopt["points"].as_array().unwrap().len() as u64));
    assert!(unopt["points"][0]["impact_pct"].as_f64().unwrap() > 50.0, "{unopt:#}");
    assert!(!unopt["evidence"].as_array().unwrap().is_empty());
    let ratio =
        metric(&a, &format!("whyslow_finding_impact_ratio{{target=\"{opt}\",rule=\"unoptimized-build\"}}"));
    assert!(ratio > 0.5, "{ratio}");
    assert_eq!(a.get("/api/v1/findings?target=1&bogus=1").0, 400);
    // The webhook: each event once, the one refused attempt retried.
    wait_for(15, "the webhook to get the events", || {
        let got = hook.events();
        (got.iter().any(|e| e["event"] == "regression")
            && got.iter().any(|e| e["rule"] == "unoptimized-build"))
        .then_some(())
    });
    let got = hook.events();
    for (i, e) in got.iter().enumerate() {
        assert!(!got[..i].contains(e), "delivered twice: {e}");
    }
    let regs: Vec<&Value> = got.iter().filter(|e| e["event"] == "regression").collect();
    assert_eq!(regs.len(), 1, "{got:#?}");
    assert_eq!(regs[0]["function"], "hot_new");
    assert!(hook.attempts.load(std::sync::atomic::Ordering::SeqCst) > got.len());
    assert_eq!(metric(&a, &format!("whyslow_webhook_queue_events{{hook=\"{}\"}}", hook.url())), 0.0);
}

/// Issue 36: a new build (a deploy) is compared with the previous build's windows, and the regression
/// names both build ids; the new build then starts a baseline of its own.
#[test]
fn a_deploy_is_compared_with_the_previous_build() {
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    let svc = add_target(
        &a,
        r#"{"name":"svc","match":{"comm":"^hotswitch"},"sources":["cpu"],"frequency":999,"window_s":1}"#,
    );
    let mut v1 = std::process::Command::new(workload("hotswitch")).arg("30").spawn().unwrap();
    wait_for(20, "10 windows of the first build", || (window_count(&a, svc) >= 10).then_some(()));
    v1.kill().unwrap();
    v1.wait().unwrap();
    let mut v2 = std::process::Command::new(workload("hotswitch_v2")).arg("6").spawn().unwrap();
    let r = wait_for(15, "a regression", || regressions(&a, svc).first().cloned());
    assert!(v2.wait().unwrap().success());
    doctor_caught_up(&a, &[svc]);
    assert_eq!(regressions(&a, svc).len(), 1);
    assert_eq!((r["function"].as_str(), r["deploy"].as_bool()), (Some("hot_new"), Some(true)), "{r:#}");
    let (old, new) = (build_id(&workload("hotswitch")), build_id(&workload("hotswitch_v2")));
    assert_eq!(
        (r["before"]["build"].as_str(), r["after"]["build"].as_str()),
        (Some(old.as_str()), Some(new.as_str()))
    );
    assert_eq!(r["after"]["windows"], 2);
}

#[test]
fn webhooks_need_the_doctor_and_a_url() {
    let err = fails(&["serve", "--no-doctor", "--webhook", "http://127.0.0.1:9/x"]);
    assert!(err.contains("--no-doctor"), "{err}");
    let err = fails(&["serve", "--webhook", "ftp://x"]);
    assert!(err.contains("not an http"), "{err}");
}

/// The agent lets go of an ended program's files: run from a tmpfs, followed and profiled, the program
/// ends, and the tmpfs unmounts once the agent's rounds without the file have passed: 6 (the unwinder's
/// parsed files and the symbolizer's alike), each a window or, with nothing followed left to cut
/// windows of, 10 s: about a minute (63 s measured), under the 120 s bound. (Before, up to 32 ended
/// programs' files stayed mapped: a stopped container's or a removed disk's file system stayed busy for
/// as long as the agent ran.)
#[test]
fn an_ended_programs_file_system_unmounts_while_the_agent_runs() {
    let _x = exclusive();
    let dir = tmp();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount").args(["-t", "tmpfs", "nodev"]).arg(&mnt).status().unwrap();
    assert!(mounted.success(), "mount tmpfs");
    struct Mounted<'a>(&'a Path);
    impl Drop for Mounted<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(self.0).output();
        }
    }
    let _mounted = Mounted(&mnt);
    let bin = mnt.join("wsumount");
    std::fs::copy(workload("cpu_split"), &bin).unwrap();
    let a = Agent::start(&dir.path().join("data"), &[]);
    let id = add_target(
        &a,
        r#"{"name":"ended","match":{"comm":"^wsumount$"},"sources":["cpu"],"frequency":99,"window_s":1}"#,
    );
    let mut w = Command::new(&bin).args(["--wall", "3"]).stdout(Stdio::null()).spawn().unwrap();
    wait_for(10, "the program followed", || pids(&a).contains(&u64::from(w.id())).then_some(()));
    assert!(w.wait().unwrap().success());
    wait_for(10, "a window of it", || (window_count(&a, id) >= 1).then_some(()));
    let umounted = wait_for(30, "the tmpfs unmounted", || {
        let out = Command::new("umount").arg(&mnt).output().unwrap();
        if out.status.success() {
            return Some(true);
        }
        std::thread::sleep(Duration::from_millis(500));
        None
    });
    assert!(umounted);
}

/// Issue 36: a restarted agent replays its stored windows into its detectors (reporting nothing again):
/// a change right after the restart is found against the baseline recorded before it.
#[test]
fn baselines_survive_a_restart_of_the_agent() {
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    let id = add_target(
        &a,
        r#"{"name":"hot","match":{"cmdline":"hotswitch 40 restart"},"sources":["cpu"],"frequency":999,"window_s":1}"#,
    );
    let mut w = std::process::Command::new(workload("hotswitch"))
        .args(["40", "restart"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(20, "11 windows", || (window_count(&a, id) >= 11).then_some(()));
    assert!(a.stop().success());
    let a = Agent::start(dir.path(), &[]);
    wait_for(5, "the workload followed again", || pids(&a).contains(&u64::from(w.id())).then_some(()));
    let changed_ns = signal(&w, libc::SIGUSR1);
    let r = wait_for(15, "a regression", || regressions(&a, id).first().cloned());
    assert_eq!(r["function"], "hot_new", "{r:#}");
    assert!(r["before"]["windows"].as_u64().unwrap() >= 8, "{r:#}");
    assert!(r["before"]["until_ns"].as_u64().unwrap() < changed_ns, "{r:#}");
    let after_until = r["after"]["until_ns"].as_u64().unwrap();
    // Within four of its 1 s windows: the one the change falls in, and under load up to three more.
    assert!(
        after_until <= changed_ns + 4_200_000_000,
        "{} ms after the change",
        (after_until - changed_ns) / 1_000_000
    );
    w.kill().unwrap();
    w.wait().unwrap();
    doctor_caught_up(&a, &[id]);
    assert_eq!(regressions(&a, id).len(), 1);
}

/// `whyslow view FILE`: its address, and the process (killed when the test ends).
struct View(Child, String);

impl View {
    fn start(file: &str) -> View {
        let mut child =
            whyslow().args(["view", file]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .expect("view's address")
            .to_string();
        View(child, addr)
    }

    fn get(&self, path: &str) -> (u16, Value) {
        let head = format!("GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.1);
        let (code, body) = raw(&self.1, head.as_bytes());
        (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }
}

impl Drop for View {
    fn drop(&mut self) {
        terminate(&mut self.0);
    }
}

/// report's slicing options as query parameters of the profile endpoint: each filtered profile holds
/// exactly the samples the unfiltered one says it should; a bad pattern is a 400 with one line.
#[test]
fn the_profile_endpoint_slices_like_report() {
    let dir = tmp();
    let data = record(dir.path(), "split", &["-F", "499"], &[workload("cpu_split").to_str().unwrap(), "1"]);
    let view = View::start(&data);
    let profile = |extra: &str| {
        let (code, v) = view.get(&format!("/api/v1/profile?target=1&from=0&until=now{extra}"));
        assert_eq!(code, 200, "{extra}: {v}");
        v
    };
    let total = |v: &Value| v["total_samples"].as_i64().unwrap();
    let fn_total =
        |v: &Value, name: &str| function(v, |n| n == name).map_or(0, |f| f["total"].as_i64().unwrap());
    let all = profile("");
    let (t, a) = (total(&all), fn_total(&all, "burn_a"));
    assert!(a > 0 && a < t, "burn_a {a} of {t}");
    // The CLI's answer for the same slice is the API's.
    let cli = report_json(&data, &["--focus", "^burn_a$"]);
    let focused = profile("&focus=%5Eburn_a%24");
    assert_eq!(total(&focused), a);
    assert_eq!(total(&cli), a);
    assert_eq!(fn_total(&focused, "burn_a"), a);
    assert_eq!(fn_total(&focused, "burn_b"), 0);
    let ignored = profile("&ignore=%5Eburn_a%24");
    assert_eq!(total(&ignored), t - a);
    assert_eq!(fn_total(&ignored, "burn_a"), 0);
    assert_eq!(fn_total(&ignored, "burn_b"), fn_total(&all, "burn_b"));
    let user = profile("&no_kernel=1");
    assert_eq!(total(&user), t);
    let kernel_frames = user["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["module"] == "[kernel.kallsyms]" && f["name"] != "[kernel]")
        .count();
    assert_eq!(kernel_frames, 0, "{user}");
    assert_eq!(total(&profile("&comm=cpu_spl")), t);
    assert_eq!(total(&profile("&comm=%5Enothing%24")), 0);
    // Folded output under the same slice sums to the same total.
    let head = format!("GET /api/v1/profile?target=1&from=0&until=now&focus=burn_a&format=folded HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", view.1);
    let (code, body) = raw(&view.1, head.as_bytes());
    assert_eq!(code, 200);
    let folded: i64 = String::from_utf8(body)
        .unwrap()
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<i64>().unwrap())
        .sum();
    assert_eq!(folded, a);

    let (code, v) = view.get("/api/v1/profile?target=1&from=0&until=now&focus=burn_%5B");
    assert_eq!(code, 400);
    let e = v["error"].as_str().unwrap();
    assert!(e.starts_with("focus: 'burn_[' is not a regular expression: "), "{e}");
    assert_eq!(e.lines().count(), 1);
    let (code, v) = view.get("/api/v1/profile?target=1&from=0&until=now&no_kernel=yes");
    assert_eq!(
        (code, v["error"].as_str().unwrap()),
        (400, "no_kernel 'yes' is not one of 1, true, 0, false")
    );
}

/// `memwork serve SECS RATE` started and waiting for its go line: the child and its pid.
fn spawn_memwork(secs: &str, rate: &str) -> (Child, u64) {
    let mut c = std::process::Command::new(workload("memwork"))
        .args(["serve", secs, rate])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let pid = line.trim().parse().unwrap();
    (c, pid)
}

/// The always-on doctor's findings of target `id` by `rule` (its entry of /api/v1/findings), if any.
/// The MiB/s of a memory-growth finding's first evidence line: "... (1.22MiB/s on average)".
fn evidence_rate(line: &str) -> f64 {
    let head = &line[..line.find("/s on average").unwrap_or_else(|| panic!("no average rate: {line}"))];
    let num = &head[head.rfind('(').unwrap() + 1..];
    let (digits, unit) = num.split_at(num.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(num.len()));
    let scale = match unit {
        "B" => 1.0 / 1048576.0,
        "KiB" => 1.0 / 1024.0,
        "MiB" => 1.0,
        "GiB" => 1024.0,
        _ => panic!("unit {unit:?} in {line}"),
    };
    digits.parse::<f64>().unwrap() * scale
}

fn finding(a: &Agent, id: i64, rule: &str) -> Option<Value> {
    let (code, v) = a.get(&format!("/api/v1/findings?target={id}&from=now-1h"));
    assert_eq!(code, 200, "{v}");
    v["findings"].as_array()?.iter().find(|f| f["rule"] == rule).cloned()
}

/// Issue 46 #5: a `mem` target keeps each window's memory in use by stack. A process that leaks 2 MiB/s
/// through cache_put is reported (finding and regression, naming cache_put) within a few windows; one
/// whose 4 MiB cache is replaced every second is not, over 20 windows. Both are followed by one session
/// (the second through `follow`). In-use over time lists cache_put's level at each window's end, and
/// the level of the leak's last window is what it printed it kept, within sampling's error.
#[test]
fn the_agent_flags_a_leak_and_not_a_bounded_cache() {
    let _x = exclusive();
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    let (mut leak, leak_pid) = spawn_memwork("26", "2097152");
    let (mut bounded, bounded_pid) = spawn_memwork("26", "0");
    let target = |pid: u64| format!(r#"{{"match":{{"pids":[{pid}]}},"sources":["mem"],"window_s":1}}"#);
    let (l, b) = (add_target(&a, &target(leak_pid)), add_target(&a, &target(bounded_pid)));
    // Both followed by the session, their probes attached: then the work starts.
    wait_for(10, "the session to follow both", || {
        (metric(&a, "whyslow_processes_held") >= 2.0).then_some(())
    });
    for c in [&mut leak, &mut bounded] {
        c.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    let found = wait_for(20, "the leak's memory-growth finding", || finding(&a, l, "memory-growth"));
    // The rule fits at least five windows, and the growth must pass four times the sampling's scatter of
    // the level (at 2 MiB/s from the fifth window; later where load stretches the leak's ticks).
    let windows = found["episodes"][0]["windows"].as_u64().unwrap();
    let first = found["points"][0]["end_ns"].as_u64().unwrap();
    let (_, inuse) = a.get(&format!("/api/v1/inuse?target={l}&from=now-1h"));
    let before: Vec<&Value> =
        inuse["windows"].as_array().unwrap().iter().filter(|w| w["end_ns"].as_u64() <= Some(first)).collect();
    // Ten windows at 2 MiB/s; as many more as the leak ran slower (its ticks stretched by a busy
    // machine: 1.22 MiB/s beside stress-ng took 11), from the rate the evidence measured.
    let rate = evidence_rate(found["evidence"][0].as_str().unwrap());
    let most = (10.0 * 2.0 / rate.min(2.0)).ceil() as usize;
    assert!(
        (5..=most).contains(&before.len()),
        "found after {} windows (at most {most}): {found}",
        before.len()
    );
    assert!(windows >= 1);
    let evidence = found["evidence"].as_array().unwrap();
    let site = evidence[1].as_str().unwrap();
    assert!(site.contains(" under cache_put (") && site.contains("cache_put > malloc)"), "{found}");
    let r = regressions(&a, l);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(
        (r[0]["measure"].as_str(), r[0]["function"].as_str()),
        (Some("memory-growth"), Some("cache_put"))
    );
    // The flame graph of what grew between the first and the last window of the series.
    let (code, body) = a.req("GET", &format!("{}&format=svg", r[0]["diff"].as_str().unwrap()), b"");
    assert_eq!(code, 200);
    assert!(String::from_utf8_lossy(&body).contains("cache_put"));
    // The bounded cache: 20 windows and more, never a finding.
    wait_for(40, "20 windows of the bounded cache", || (window_count(&a, b) >= 20).then_some(()));
    let out = {
        let mut s = String::new();
        leak.stdout.take().unwrap().read_to_string(&mut s).unwrap();
        s
    };
    assert!(leak.wait().unwrap().success() && bounded.wait().unwrap().success());
    doctor_caught_up(&a, &[l, b]);
    assert_eq!(finding(&a, b, "memory-growth"), None);
    assert_eq!(regressions(&a, b), Vec::<Value>::new());
    // What the leak kept (the last line: "held N objects B bytes in S s") against its last window's level.
    let held: i64 = out.split_whitespace().nth(3).unwrap().parse().unwrap();
    let (_, inuse) = a.get(&format!("/api/v1/inuse?target={l}&from=now-1h"));
    let stacks = inuse["stacks"].as_array().unwrap();
    let top = &stacks[0];
    assert!(top["stack"].as_str().unwrap().ends_with("main;cache_put;malloc"), "{inuse}");
    let values = top["values"].as_array().unwrap();
    assert_eq!(values.len(), inuse["windows"].as_array().unwrap().len());
    let last = values.last().unwrap().as_i64().unwrap();
    // Sampled one every 512 KiB: about 14% standard error on ~50 MiB of 104 KiB blocks; ±40% is 3 σ.
    assert!((last as f64 / held as f64 - 1.0).abs() < 0.4, "last level {last}, kept {held}");
    let g = top["growth"]["bytes_per_s"].as_f64().unwrap();
    assert!(g > 1e6, "cache_put grows {g} B/s");
}

/// A memory-limited cgroup for the OOM test: cgroup v2's memory.max where its memory controller is
/// enabled, else the v1 memory controller's limit (hybrid hosts); None where neither can be written.
fn memory_cgroup(name: &str, bytes: u64) -> Option<Cgroup> {
    let v2 = Path::new("/sys/fs/cgroup/unified");
    let v2 = if v2.join("cgroup.controllers").exists() { v2 } else { Path::new("/sys/fs/cgroup") };
    let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "memory") {
        let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+memory");
        let dir = v2.join(name);
        std::fs::create_dir_all(&dir).ok()?;
        std::fs::write(dir.join("memory.max"), bytes.to_string()).ok()?;
        let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        return Some(Cgroup(dir));
    }
    let v1 = Path::new("/sys/fs/cgroup/memory").join(name);
    std::fs::create_dir_all(&v1).ok()?;
    std::fs::write(v1.join("memory.limit_in_bytes"), bytes.to_string()).ok()?;
    Some(Cgroup(v1))
}

/// Issue 46 #5: a followed process the kernel's OOM killer ends (its cgroup limited to 64 MiB, leaking
/// 16 MiB/s) keeps its last in-use profile, with the oom-killed finding; the kept profile's top stack
/// is the leaking one.
#[test]
fn an_oom_killed_process_keeps_its_last_in_use_profile() {
    let _x = exclusive();
    let Some(cg) = memory_cgroup(&format!("wsoom-{}", std::process::id()), 64 << 20) else {
        eprintln!("no writable memory cgroup here: skipped");
        return;
    };
    let dir = tmp();
    let a = Agent::start(dir.path(), &[]);
    let (mut c, pid) = spawn_memwork("60", "16777216");
    std::fs::write(cg.0.join("cgroup.procs"), pid.to_string()).unwrap();
    let id = add_target(&a, &format!(r#"{{"match":{{"pids":[{pid}]}},"sources":["mem"],"window_s":1}}"#));
    wait_for(10, "the session to follow it", || (metric(&a, "whyslow_processes_held") >= 1.0).then_some(()));
    c.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let st = c.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    let f = wait_for(20, "the oom-killed finding", || finding(&a, id, "oom-killed"));
    let evidence: Vec<&str> = f["evidence"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert!(evidence[0].starts_with(&format!("pid {pid} was killed by the OOM killer holding ")), "{f}");
    assert!(evidence[1].contains(" under cache_put (") && evidence[1].contains("cache_put > malloc)"), "{f}");
    // The kept profile: what it held at its end, cache_put's stack on top, tens of MiB of the 64 MiB.
    let (code, body) =
        a.req("GET", &format!("/api/v1/profile?target={id}&type=inuse-bytes&format=folded&from=now-5m"), b"");
    assert_eq!(code, 200);
    let text = String::from_utf8(body).unwrap();
    let mut lines: Vec<(i64, &str)> =
        text.lines().filter_map(|l| l.rsplit_once(' ').map(|(s, v)| (v.parse().unwrap_or(0), s))).collect();
    lines.sort();
    let (bytes, stack) = lines.last().copied().unwrap();
    assert!(stack.ends_with("main;cache_put;malloc"), "{text}");
    assert!((24 << 20..=96 << 20).contains(&bytes), "{bytes} bytes under cache_put: {text}");
}
