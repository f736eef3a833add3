//! `whyslow doctor -p` on real servers from the distribution, each with a common misconfiguration that
//! costs throughput and with that setting fixed: the bad one's first finding names the software's own
//! setting, the fixed one raises no such finding.

mod common;

use common::whyslow;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// An nginx master with one worker, from its own prefix, configuration and port; stopped on drop.
struct Nginx {
    dir: tempfile::TempDir,
    port: u16,
}

impl Nginx {
    /// Starts nginx with `access_log` given these parameters after the file (`combined`, or `combined
    /// buffer=64k flush=1s`).
    fn start(log: &str) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let p = dir.path().display();
        std::fs::create_dir(dir.path().join("logs")).unwrap();
        let conf = format!(
            "worker_processes 1;\npid {p}/nginx.pid;\nerror_log {p}/logs/error.log;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n  access_log {p}/logs/access.log {log};\n\
               server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"hello\\n\"; }} }}\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let out = Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .output()
            .unwrap();
        assert!(out.status.success(), "nginx: {}", String::from_utf8_lossy(&out.stderr));
        Nginx { dir, port }
    }

    fn master(&self) -> u32 {
        let pid = self.dir.path().join("nginx.pid");
        for _ in 0..100 {
            if let Some(pid) = std::fs::read_to_string(&pid).ok().and_then(|s| s.trim().parse().ok()) {
                return pid;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nginx wrote no pid file");
    }

    /// The one worker: the master's child.
    fn worker(&self) -> u32 {
        let master = self.master();
        for _ in 0..100 {
            let children =
                std::fs::read_to_string(format!("/proc/{master}/task/{master}/children")).unwrap_or_default();
            if let Some(pid) = children.split_whitespace().next().and_then(|s| s.parse().ok()) {
                return pid;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nginx started no worker");
    }

    fn log_lines(&self) -> u64 {
        count_lines(&self.dir.path().join("logs/access.log"))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.master().to_string()).status();
    }
}

fn count_lines(path: &Path) -> u64 {
    std::fs::read(path).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count() as u64)
}

fn have(tool: &str, arg: &str) -> bool {
    Command::new(tool).arg(arg).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// Drives nginx with wrk (4 connections, no pipelining) while `whyslow doctor -p WORKER -d 5` runs;
/// returns its JSON report, and the access log lines nginx wrote while the doctor ran with the seconds
/// it ran.
fn doctor_under_wrk(nginx: &Nginx) -> (Value, u64, f64) {
    let worker = nginx.worker();
    let mut load = Command::new("wrk")
        .args(["-t1", "-c4", "-d60s"])
        .arg(format!("http://127.0.0.1:{}/", nginx.port))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let data = nginx.dir.path().join("d.data");
    let (before, start) = (nginx.log_lines(), std::time::Instant::now());
    let out = whyslow()
        .args(["doctor", "--format", "json", "-d", "5", "-p", &worker.to_string(), "-o"])
        .arg(&data)
        .output()
        .unwrap();
    let (lines, seconds) = (nginx.log_lines() - before, start.elapsed().as_secs_f64());
    load.kill().unwrap();
    load.wait().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_slice(&out.stdout).unwrap(), lines, seconds)
}

/// The first number of `line` after `prefix`.
fn number_after(line: &str, prefix: &str) -> Option<f64> {
    let rest = &line[line.find(prefix)? + prefix.len()..];
    let end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// nginx with one worker and Debian's default unbuffered `access_log` under wrk: each request's log line
/// is one write(2) to the log file under ngx_http_log_handler, beside the writev of its reply. The first
/// finding is those writes, told apart from the replies (one per request: as many as the writevs within
/// 5%, the program writes exactly one of each per request) made from ngx_http_free_request, naming
/// access_log's buffer= and `access_log off;`; no more of them than the lines the log file gained while
/// the doctor ran, and at a rate of the same order (the counters run in windows during which the probes
/// slow the worker, and the file also gained lines during the doctor's start and its second phase). With
/// `buffer=64k flush=1s` no file-write finding is raised.
#[test]
fn nginx_unbuffered_access_log() {
    if !have("nginx", "-v") || !have("wrk", "-v") {
        eprintln!("nginx or wrk missing (scripts/deps.sh installs them): skipping");
        return;
    }
    let _measuring = common::exclusive();
    let nginx = Nginx::start("combined");
    let (report, lines, seconds) = doctor_under_wrk(&nginx);
    let findings = report["findings"].as_array().unwrap();
    let first = findings.first().unwrap_or_else(|| panic!("no finding: {report:#}"));
    let text = |k: &str| first[k].as_str().unwrap().to_string();
    assert_eq!(first["id"], "small-writes", "{report:#}");
    assert!(text("title").contains("to a file per request"), "{first:#}");
    assert!(text("fix").starts_with("nginx: buffer the access log"), "{first:#}");
    assert!(text("fix").contains("access_log") && text("fix").contains("buffer=64k"), "{first:#}");
    assert!(text("fix").contains("access_log off;"), "{first:#}");
    let evidence: Vec<&str> =
        first["evidence"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let writes = number_after(evidence[0], "").unwrap();
    assert!(evidence[0].contains(" write syscalls to a regular file"), "{evidence:?}");
    let replies = number_after(evidence[1], "about one per request: ")
        .unwrap_or_else(|| panic!("not per request: {evidence:?}"));
    assert!((writes - replies).abs() <= 0.05 * replies, "{writes} log writes for {replies} replies");
    // Debian's nginx is stripped but for its dynamic symbols: the nearest named caller of the write.
    assert!(evidence.iter().any(|e| e.starts_with("issued from: ngx_http_free_request")), "{evidence:?}");
    // Each counted write wrote one line while the doctor ran: no more writes than lines. The rate over
    // the counted windows is of the same order as the file's over the whole run, which also holds the
    // doctor's start and symbolizing (on a busy machine they take CPU from nginx: 3x slower seen).
    assert!(writes <= lines as f64, "{writes} log writes counted, {lines} lines the file gained");
    let rate = number_after(evidence[0], "regular file (").unwrap();
    let file_rate = lines as f64 / seconds;
    assert!(
        rate > file_rate / 3.0 && rate < file_rate * 5.0,
        "{rate}/s log writes counted, {file_rate:.0}/s lines the file gained ({lines} in {seconds:.1} s)"
    );
    println!("unbuffered: {rate}/s writes counted, {file_rate:.0}/s log lines; {:?}", evidence);
    drop(nginx);

    let fixed = Nginx::start("combined buffer=64k flush=1s");
    let (report, _, _) = doctor_under_wrk(&fixed);
    let file_findings: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["title"].as_str().unwrap().contains("file") || f["fix"].as_str().unwrap().contains("access_log")
        })
        .collect();
    assert!(file_findings.is_empty(), "{file_findings:#?}");
}
