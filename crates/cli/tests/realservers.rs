//! `whyslow doctor -p` on real servers from the distribution, each with a common misconfiguration that
//! costs throughput and with that setting fixed: the bad one's first finding names the software's own
//! setting, the fixed one raises no such finding.

mod common;

use common::{whyslow, working_pct};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A server a test started, stopped on drop: `stop` (a command asking it to shut down, run to the end)
/// if given, and a server running in the foreground is sent SIGTERM, waited for up to 10 s, then killed.
struct Server {
    child: Option<Child>,
    stop: Option<Command>,
}

impl Server {
    /// Runs `cmd` in the foreground (its output dropped) and polls `ready` until it answers.
    fn foreground(what: &str, cmd: &mut Command, ready: impl Fn() -> bool) -> Server {
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let server = Server { child: Some(child), stop: None };
        wait_for(what, ready);
        server
    }

    /// Runs `start` to the end (a launcher that leaves the server running, as pg_ctl does): `stop`
    /// stops it.
    fn daemon(what: &str, start: &mut Command, stop: Command) -> Server {
        let out = start.output().unwrap();
        assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
        Server { child: None, stop: Some(stop) }
    }

    /// Runs `stop` before the foreground server is signalled.
    fn stopped_by(mut self, stop: Command) -> Server {
        self.stop = Some(stop);
        self
    }

    /// The foreground server's pid.
    fn pid(&self) -> u32 {
        self.child.as_ref().expect("a server in the foreground").id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = &mut self.stop {
            let _ = stop.stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(child.id().to_string()).stderr(Stdio::null()).status();
            for _ in 0..100 {
                if child.try_wait().is_ok_and(|s| s.is_some()) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `ready` up to 30 s, 100 ms apart.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    for _ in 0..300 {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what} did not start");
}

/// The port of a free TCP socket on the loopback (free when asked; the servers bind it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Whether something accepts connections on this loopback port.
fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// The children of process `pid`.
fn children(pid: u32) -> Vec<u32> {
    let list = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    list.split_whitespace().filter_map(|s| s.parse().ok()).collect()
}

fn count_lines(path: &Path) -> u64 {
    std::fs::read(path).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count() as u64)
}

fn have(tool: &str, arg: &str) -> bool {
    Command::new(tool).arg(arg).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// The CPUs this test (and the servers it starts) may use.
fn cpus() -> usize {
    std::thread::available_parallelism().unwrap().get()
}

/// A load generator, stopped on drop.
struct Load(Child);

impl Load {
    /// Starts `cmd` (its output dropped) and gives it a second to get going.
    fn start(cmd: &mut Command) -> Load {
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_secs(1));
        Load(child)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `whyslow doctor --format json -d 5 -p PIDS`, its recording in `dir`: the JSON report.
fn doctor(pids: &str, dir: &Path) -> Value {
    let out = whyslow()
        .args(["doctor", "--format", "json", "-d", "5", "-p", pids, "-o"])
        .arg(dir.join("d.data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The report's first finding, its fix and its evidence lines.
fn first_finding(report: &Value) -> (&Value, &str, Vec<&str>) {
    let first =
        report["findings"].as_array().unwrap().first().unwrap_or_else(|| panic!("no finding: {report:#}"));
    let evidence = first["evidence"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    (first, first["fix"].as_str().unwrap(), evidence)
}

/// The findings of rule `id` or whose fix names one of `settings`.
fn findings_about<'a>(report: &'a Value, id: &str, settings: &[&str]) -> Vec<&'a Value> {
    let about = |f: &&Value| f["id"] == id || settings.iter().any(|s| f["fix"].as_str().unwrap().contains(s));
    report["findings"].as_array().unwrap().iter().filter(about).collect()
}

/// The number after `prefix` in the first evidence line that has it.
fn evidence_number(evidence: &[&str], prefix: &str) -> f64 {
    evidence
        .iter()
        .find_map(|e| number_after(e, prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in {evidence:?}"))
}

/// The first number of `line` after `prefix`.
fn number_after(line: &str, prefix: &str) -> Option<f64> {
    let rest = &line[line.find(prefix)? + prefix.len()..];
    let end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Asserts that too-few-workers found `workers` busy workers (the threads named `worker`, waiting for
/// work at most 20% of their time, as the rule asks: how much less depends on how much CPU the load
/// generator got on a busy machine, 4-12% beside `stress-ng --cpu 2`) on all the CPUs,
/// with the impact those CPUs give, and that the fix starts with `setting`; prints what it measured.
fn assert_too_few_workers(report: &Value, workers: usize, worker: &str, setting: &str) {
    let (first, fix, evidence) = first_finding(report);
    assert_eq!(first["id"], "too-few-workers", "{report:#}");
    assert!(fix.starts_with(setting), "{fix}");
    let cpus = cpus();
    let unused = 100.0 * (cpus - workers) as f64 / cpus as f64;
    assert!((first["impact_pct"].as_f64().unwrap() - unused).abs() < 0.06, "{first:#}");
    let line = evidence[0];
    assert!(line.starts_with(&format!("{workers} event-loop worker")), "{evidence:?}");
    assert_eq!(line.matches(&format!("{worker} ")).count(), workers.min(3), "{evidence:?}");
    let idle = number_after(line, "waiting for work ").unwrap();
    assert!(idle <= 20.0, "{evidence:?}");
    assert!(evidence[1].starts_with(&format!("{cpus}.0 CPUs the target may use")), "{evidence:?}");
    println!("{workers} worker(s): {evidence:?}");
}

/// wrk asking for nginx's `hello` with 4 connections (no pipelining) for longer than the doctor runs.
const WRK_HELLO: [&str; 3] = ["-t1", "-c4", "-d60s"];

/// An nginx master in the foreground (`daemon off`) with its workers, from its own prefix, configuration
/// and port; stopped on drop (SIGTERM: the master stops its workers).
struct Nginx {
    server: Server,
    dir: tempfile::TempDir,
    port: u16,
}

impl Nginx {
    /// Starts nginx with these worker_processes and this inside its `http` block, before the server
    /// (which serves `dir/html` and `return`s `hello` at `/`), its `listen` with these parameters.
    fn start(worker_processes: &str, http: &str, listen: &str) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let p = dir.path().display();
        std::fs::create_dir(dir.path().join("logs")).unwrap();
        std::fs::create_dir(dir.path().join("html")).unwrap();
        let conf = format!(
            "daemon off;\nworker_processes {worker_processes};\npid {p}/nginx.pid;\n\
             error_log {p}/logs/error.log;\nevents {{ worker_connections 256; }}\n\
             http {{\n  {http}\n  server {{ listen 127.0.0.1:{port} {listen}; root {p}/html;\n    \
             location = / {{ return 200 \"hello\\n\"; }} }}\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let mut cmd = Command::new("nginx");
        cmd.arg("-p").arg(dir.path()).arg("-c").arg(dir.path().join("nginx.conf"));
        let server = Server::foreground("nginx", &mut cmd, || listening(port));
        Nginx { server, dir, port }
    }

    /// The master and its workers, comma-separated, once it has `n` workers.
    fn pids(&self, n: usize) -> String {
        let master = self.server.pid();
        wait_for("nginx's workers", || children(master).len() == n);
        let all: Vec<String> = [master].into_iter().chain(children(master)).map(|p| p.to_string()).collect();
        all.join(",")
    }

    fn log_lines(&self) -> u64 {
        count_lines(&self.dir.path().join("logs/access.log"))
    }

    /// Drives it with wrk (`args`, at `path`) while `whyslow doctor -p MASTER,WORKERS -d 5` runs on its `n`
    /// workers; returns the JSON report, and the access log lines written while the doctor ran with the
    /// seconds it ran.
    fn doctor_under_wrk(&self, n: usize, args: &[&str], path: &str) -> (Value, u64, f64) {
        let pids = self.pids(n);
        let _load =
            Load::start(Command::new("wrk").args(args).arg(format!("http://127.0.0.1:{}{path}", self.port)));
        let (before, start) = (self.log_lines(), std::time::Instant::now());
        let report = doctor(&pids, self.dir.path());
        (report, self.log_lines() - before, start.elapsed().as_secs_f64())
    }
}

/// nginx (a worker per CPU, reuseport) with Debian's default unbuffered `access_log` under wrk: each
/// request's log line is one write(2) to the log file under ngx_http_log_handler, beside the writev of its
/// reply. The first
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
    let nginx = Nginx::start("auto", "access_log logs/access.log combined;", "reuseport");
    let (report, lines, seconds) = nginx.doctor_under_wrk(cpus(), &WRK_HELLO, "/");
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

    let fixed = Nginx::start("auto", "access_log logs/access.log combined buffer=64k flush=1s;", "reuseport");
    let (report, _, _) = fixed.doctor_under_wrk(cpus(), &WRK_HELLO, "/");
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

/// A page of 130 KB of words from a small vocabulary (compressible about 8 to 1), for gzip to work on.
fn page() -> String {
    const WORDS: [&str; 10] =
        ["alpha", "beta", "gamma", "delta", "nginx", "worker", "process", "request", "cache", "server"];
    let mut x: u32 = 1;
    let mut words = Vec::new();
    for _ in 0..20_000 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        words.push(WORDS[(x >> 16) as usize % WORDS.len()]);
    }
    words.join(" ")
}

/// gzip on every response (of any type and size), at level 6.
const GZIP: &str = "access_log off; gzip on; gzip_comp_level 6; gzip_types *; gzip_min_length 0;";

/// wrk fetching the page gzip-compressed, 16 connections (spread over the workers) for longer than the
/// doctor runs: compressing costs nginx far more per request than wrk spends, so the workers, not the
/// client, are what the requests wait for, on a busy machine too.
const WRK_GZIP: [&str; 5] = ["-t1", "-c16", "-d60s", "-H", "Accept-Encoding: gzip"];

/// nginx with `worker_processes 1` on a machine with more CPUs, gzip-compressing a page under wrk: the
/// one worker always has requests waiting (measured beside `stress-ng --cpu 2`: it waited for work 0.0%
/// of its time, running 47-63% and waiting for a CPU the rest). The first finding is too-few-workers,
/// naming `worker_processes auto;`, the worker found by its pid, waiting for work at most 20% of its
/// time, the CPUs counted exactly. With `worker_processes auto` (a worker per CPU) and `listen ...
/// reuseport` there is none (without reuseport one worker may take every connection: seen with wrk's 16,
/// the other worker never ran, and one busy worker is what the doctor then sees).
#[test]
fn nginx_one_worker_for_more_cpus() {
    if !have("nginx", "-v") || !have("wrk", "-v") || cpus() < 2 {
        eprintln!("nginx or wrk missing (scripts/deps.sh installs them), or one CPU: skipping");
        return;
    }
    let _measuring = common::exclusive();
    let nginx = Nginx::start("1", GZIP, "");
    std::fs::write(nginx.dir.path().join("html/page.html"), page()).unwrap();
    let (report, _, _) = nginx.doctor_under_wrk(1, &WRK_GZIP, "/page.html");
    assert_too_few_workers(&report, 1, "nginx", "nginx: `worker_processes auto;`");
    let worker = children(nginx.server.pid())[0];
    let evidence = first_finding(&report).2;
    assert!(evidence[0].contains(&format!("(nginx {worker})")), "{evidence:?}");
    drop(nginx);

    let fixed = Nginx::start("auto", GZIP, "reuseport");
    std::fs::write(fixed.dir.path().join("html/page.html"), page()).unwrap();
    let (report, _, _) = fixed.doctor_under_wrk(cpus(), &WRK_GZIP, "/page.html");
    let workers = findings_about(&report, "too-few-workers", &["worker_processes"]);
    assert!(workers.is_empty(), "{workers:#?}");
}

/// A memcached in the foreground on its own loopback port with `-t threads` and a 64 MB cache; stopped
/// on drop.
struct Memcached {
    server: Server,
    port: u16,
}

impl Memcached {
    fn start(threads: usize) -> Memcached {
        let port = free_port();
        let mut cmd = Command::new("memcached");
        cmd.args(["-u", "root", "-l", "127.0.0.1", "-m", "64", "-p", &port.to_string()])
            .args(["-t", &threads.to_string()]);
        let server = Server::foreground("memcached", &mut cmd, || listening(port));
        Memcached { server, port }
    }

    /// `whyslow doctor -p` on it under memcaslap (4 threads, 128 connections; 90% gets, 10% sets of its
    /// default keys): the report.
    fn doctor_under_memcaslap(&self) -> Value {
        let _load =
            Load::start(Command::new("memcaslap").arg(format!("--servers=127.0.0.1:{}", self.port)).args([
                "--threads=4",
                "--concurrency=128",
                "--time=60s",
            ]));
        let dir = tempfile::tempdir().unwrap();
        doctor(&self.server.pid().to_string(), dir.path())
    }
}

/// memcached with `-t 1` (one worker thread) under memcaslap on a machine with more CPUs: mc-worker
/// always has requests waiting (measured beside `stress-ng --cpu 2`: it waited for work 4% of its time),
/// while the main thread only accepts (never a worker). The first finding is too-few-workers naming `-t
/// N`, memcached recognised by the names of its threads (its binary is stripped), mc-worker waiting for
/// work at most 20% of its time, the CPUs counted exactly. With `-t` the CPUs there is none.
#[test]
fn memcached_one_thread_for_more_cpus() {
    if !have("memcached", "-V") || !have("memcaslap", "--version") || cpus() < 2 {
        eprintln!("memcached or memcaslap missing (apt-get install memcached libmemcached-tools), or one CPU: skipping");
        return;
    }
    let _measuring = common::exclusive();
    let memcached = Memcached::start(1);
    let report = memcached.doctor_under_memcaslap();
    assert_too_few_workers(&report, 1, "mc-worker", "memcached: -t N, N the CPUs it may use");
    let evidence = first_finding(&report).2;
    let recognised = evidence.last().unwrap();
    assert!(recognised.starts_with("recognised as memcached by its threads "), "{evidence:?}");
    assert!(recognised.contains("mc-worker"), "{evidence:?}");
    drop(memcached);

    let fixed = Memcached::start(cpus());
    let report = fixed.doctor_under_memcaslap();
    let workers = findings_about(&report, "too-few-workers", &["-t N"]);
    assert!(workers.is_empty(), "{workers:#?}");
}

/// A redis-server in the foreground from its own directory and port with `appendonly yes` and the
/// `appendfsync` given; stopped on drop.
struct Redis {
    server: Server,
    dir: tempfile::TempDir,
    port: u16,
}

impl Redis {
    fn start(appendfsync: &str) -> Redis {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--daemonize", "no"])
            .args(["--appendonly", "yes", "--appendfsync", appendfsync, "--dir"])
            .arg(dir.path());
        let ping = || Command::new("redis-cli").args(["-p", &port.to_string(), "ping"]).output();
        let server = Server::foreground("redis-server", &mut cmd, || {
            ping().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
        });
        Redis { server, dir, port }
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli").args(["-p", &self.port.to_string()]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The commands it has processed.
    fn commands(&self) -> u64 {
        let info = self.cli(&["info", "stats"]);
        let line = info.lines().find(|l| l.starts_with("total_commands_processed:")).unwrap();
        line.trim_end().rsplit(':').next().unwrap().parse().unwrap()
    }

    /// `whyslow doctor -p` on it under redis-benchmark SETs (4 clients, no pipelining): the report, and
    /// the SETs it processed per second while the doctor ran.
    fn doctor_under_sets(&self) -> (Value, f64) {
        let _load = Load::start(Command::new("redis-benchmark").args([
            "-p",
            &self.port.to_string(),
            "-c",
            "4",
            "-n",
            "2000000000",
            "-t",
            "set",
            "-q",
        ]));
        let (before, start) = (self.commands(), std::time::Instant::now());
        let report = doctor(&self.server.pid().to_string(), self.dir.path());
        (report, (self.commands() - before) as f64 / start.elapsed().as_secs_f64())
    }
}

/// Redis with `appendfsync always` under SETs without pipelining: after each event-loop turn that
/// wrote, the main thread fdatasyncs the AOF (flushAppendOnlyFile) and waits for the disk. The first
/// finding is blocking-io, over half the wall time that is not spent waiting for a CPU (each sync
/// blocks 0.1-0.3 ms here and runs the file system's journal commit, each SET some microseconds of
/// CPU; beside other busy processes a third of the wall time can go to waiting for a CPU), called
/// from flushAppendOnlyFile, with Redis's advice naming `appendfsync
/// everysec`. Its syncs: at most one per SET and at least one per 4 (4 clients, each with one SET in
/// flight, so a turn has at most 4 SETs to sync), within a factor of 2 above and 4 below: the SETs are
/// counted over the doctor's whole run, its start and end unprobed (measured: 1753 SETs/s over the run
/// for 272 syncs/s counted, 6.4 SETs per sync), the syncs while the probes slow the server.
/// With `appendfsync everysec` (a background thread syncs once a second) no disk finding is raised.
#[test]
fn redis_appendfsync_always() {
    if !have("redis-server", "--version") || !have("redis-benchmark", "--version") {
        eprintln!("redis-server or redis-benchmark missing (scripts/deps.sh installs them): skipping");
        return;
    }
    let _measuring = common::exclusive();
    let redis = Redis::start("always");
    let (report, sets) = redis.doctor_under_sets();
    let (first, fix, evidence) = first_finding(&report);
    assert_eq!(first["id"], "blocking-io", "{report:#}");
    // Over half of the time redis itself decides: waits for a CPU are other processes' on a busy machine.
    let own = first["impact_pct"].as_f64().unwrap() / (100.0 - working_pct(&report, "runnable_ns"));
    assert!(own > 0.5, "{:.1}% of the working time not waiting for a CPU: {first:#}", own * 100.0);
    assert!(
        fix.starts_with("Redis: appendfsync always fsyncs the AOF") && fix.contains("appendfsync everysec")
    );
    assert!(evidence.iter().any(|e| e.starts_with("called from: flushAppendOnlyFile")), "{evidence:?}");
    let syncs = evidence_number(&evidence, "sync syscalls (");
    assert!(syncs > sets / 16.0 && syncs < sets * 2.0, "{syncs}/s syncs for {sets:.0} SETs/s: {evidence:?}");
    println!("always: {sets:.0} SETs/s, {syncs}/s syncs, {:.1}% of own time; {evidence:?}", own * 100.0);
    drop(redis);

    let fixed = Redis::start("everysec");
    let (report, sets) = fixed.doctor_under_sets();
    let disk = findings_about(&report, "blocking-io", &["appendfsync"]);
    assert!(disk.is_empty(), "{disk:#?}");
    println!("everysec: {sets:.0} SETs/s");
}

/// A private MariaDB server: its own data directory (mariadb-install-db) and socket, no TCP; stopped on
/// drop.
struct Mariadb {
    server: Option<Server>,
    dir: tempfile::TempDir,
}

/// The settings both the installation and the server get: a small redo log and buffer pool.
const MARIADB_SIZES: [&str; 2] = ["--innodb-log-file-size=16M", "--innodb-buffer-pool-size=64M"];

impl Mariadb {
    fn install() -> Mariadb {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mariadb-install-db")
            .args([
                "--no-defaults",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .args(MARIADB_SIZES)
            .output()
            .unwrap();
        assert!(out.status.success(), "mariadb-install-db: {}", String::from_utf8_lossy(&out.stderr));
        Mariadb { server: None, dir }
    }

    fn socket(&self) -> String {
        format!("--socket={}", self.dir.path().join("sock").display())
    }

    /// Starts the server with this innodb_flush_log_at_trx_commit (stopping it first if it runs).
    fn start(&mut self, flush_log_at_trx_commit: u8) {
        self.server = None;
        let d = self.dir.path();
        let mut cmd = Command::new("mariadbd");
        cmd.args(["--no-defaults", "--user=root", "--skip-networking", &self.socket()])
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--log-error={}", d.join("error.log").display()))
            .arg(format!("--innodb-flush-log-at-trx-commit={flush_log_at_trx_commit}"))
            .args(MARIADB_SIZES);
        let admin = |what: &str| {
            let mut c = Command::new("mariadb-admin");
            c.args(["-uroot", &self.socket(), what]);
            c
        };
        let ping = || admin("ping").stdout(Stdio::null()).stderr(Stdio::null()).status();
        let server = Server::foreground("mariadbd", &mut cmd, || ping().is_ok_and(|s| s.success()));
        self.server = Some(server.stopped_by(admin("shutdown")));
    }

    fn sql(&self, query: &str) -> String {
        let out =
            Command::new("mariadb").args(["-uroot", &self.socket(), "-N", "-e", query]).output().unwrap();
        assert!(out.status.success(), "{query}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn rows(&self) -> u64 {
        self.sql("select count(*) from w.t").parse().unwrap()
    }

    /// `whyslow doctor -p` on it while mariadb-slap's 4 clients insert one row per statement
    /// (autocommit: a commit each): the report, and the commits per second while the doctor ran.
    fn doctor_under_inserts(&self) -> (Value, f64) {
        let _load = Load::start(Command::new("mariadb-slap").args([
            "-uroot",
            &self.socket(),
            "--create-schema=w",
            "--no-drop",
            "--concurrency=4",
            "--iterations=1",
            "--number-of-queries=2000000000",
            "--query=insert into w.t (v) values ('hello')",
        ]));
        let (before, start) = (self.rows(), std::time::Instant::now());
        let pid = self.server.as_ref().unwrap().pid().to_string();
        let report = doctor(&pid, self.dir.path());
        (report, (self.rows() - before) as f64 / start.elapsed().as_secs_f64())
    }
}

/// MariaDB with `innodb_flush_log_at_trx_commit = 1` under single-row autocommit inserts: each commit
/// waits for the redo log's fdatasync (grouped across the clients). The first finding is blocking-io,
/// called from ha_commit_trans, with the MySQL/MariaDB advice naming innodb_flush_log_at_trx_commit
/// = 2 first. Its syncs: at most about one per commit and at least one per 4 (4 clients, group
/// commit), within a factor of 2 either way (windows, as for Redis; InnoDB's background flushes add a
/// few). Restarted with 2 (which also turns on innodb_log_file_buffering: the redo log's writes go to
/// the page cache), no disk finding is raised.
#[test]
fn mariadb_flush_log_at_every_commit() {
    if !have("mariadbd", "--version") || !have("mariadb-slap", "--version") {
        eprintln!("mariadbd or mariadb-slap missing (scripts/deps.sh installs them): skipping");
        return;
    }
    let _measuring = common::exclusive();
    let mut db = Mariadb::install();
    db.start(1);
    db.sql("create database w; create table w.t (id int auto_increment primary key, v varchar(32))");
    let (report, commits) = db.doctor_under_inserts();
    let (first, fix, evidence) = first_finding(&report);
    assert_eq!(first["id"], "blocking-io", "{report:#}");
    assert!(fix.starts_with("MySQL/MariaDB: innodb_flush_log_at_trx_commit = 2"), "{fix}");
    assert!(fix.contains("innodb_log_file_buffering = ON"), "{fix}");
    assert!(evidence.iter().any(|e| e.starts_with("called from: ha_commit_trans")), "{evidence:?}");
    let syncs = evidence_number(&evidence, "sync syscalls (");
    assert!(
        syncs > commits / 8.0 && syncs < commits * 2.0,
        "{syncs}/s syncs for {commits:.0} commits/s: {evidence:?}"
    );
    println!("flush at commit 1: {commits:.0} commits/s, {syncs}/s syncs; {evidence:?}");

    db.start(2);
    assert_eq!(db.sql("select @@innodb_flush_log_at_trx_commit, @@innodb_log_file_buffering"), "2\t1");
    let (report, commits) = db.doctor_under_inserts();
    let disk = findings_about(&report, "blocking-io", &["innodb_flush_log_at_trx_commit"]);
    assert!(disk.is_empty(), "{disk:#?}");
    println!("flush at commit 2: {commits:.0} commits/s");
}

/// A private PostgreSQL cluster (the newest installed), its socket in its own directory, no TCP, its
/// server log (stderr, as Debian's pg_ctlcluster does) to a file; stopped on drop.
struct Postgres {
    /// Stops it on drop (it runs as pg_ctl left it).
    _server: Option<Server>,
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
}

impl Postgres {
    /// The newest /usr/lib/postgresql/*/bin with initdb.
    fn bin() -> Option<std::path::PathBuf> {
        let mut bins: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .collect();
        bins.sort();
        Some(Path::new("/usr/lib/postgresql").join(bins.last()?.to_string()).join("bin"))
            .filter(|b| b.join("initdb").exists())
    }

    /// [`Postgres::bin`] when pgbench and the postgres user are there too; else None, said on stderr.
    fn installed() -> Option<std::path::PathBuf> {
        let bin = Postgres::bin().filter(|_| have("pgbench", "--version") && have("id", "postgres"));
        if bin.is_none() {
            eprintln!(
                "PostgreSQL, pgbench or the postgres user missing (apt-get install postgresql): skipping"
            );
        }
        bin
    }

    /// `tool args` as the postgres user (the server refuses root).
    fn postgres_user(&self, tool: &str, args: &[&str]) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(self.bin.join(tool)).args(args);
        c
    }

    /// Runs `tool args` as the postgres user.
    fn as_postgres(&self, tool: &str, args: &[&str]) {
        let out = self.postgres_user(tool, args).output().unwrap();
        assert!(out.status.success(), "{tool}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// initdb, these settings appended to postgresql.conf, the server started and pgbench's tables made.
    fn start(bin: std::path::PathBuf, settings: &str) -> Postgres {
        let dir = tempfile::tempdir().unwrap();
        assert!(Command::new("chown").arg("postgres").arg(dir.path()).status().unwrap().success());
        let mut pg = Postgres { _server: None, dir, bin };
        pg.as_postgres("initdb", &["-D", &pg.path("data"), "-A", "trust"]);
        pg.configure(&format!(
            "unix_socket_directories = '{}'\nlisten_addresses = ''\nlogging_collector = off\n{settings}",
            pg.path("")
        ));
        let (data, log) = (pg.path("data"), pg.path("server.log"));
        let mut start = pg.postgres_user("pg_ctl", &["-D", &data, "-l", &log, "-w", "start"]);
        let stop = pg.postgres_user("pg_ctl", &["-D", &data, "-m", "immediate", "stop"]);
        pg._server = Some(Server::daemon("pg_ctl start", &mut start, stop));
        pg.pgbench(&["-i", "-s", "1"]).output().unwrap();
        pg
    }

    /// Appends settings to postgresql.conf (later lines win) and has the server reload it.
    fn configure(&self, settings: &str) {
        use std::io::Write;
        let conf = self.dir.path().join("data/postgresql.conf");
        let mut f = std::fs::OpenOptions::new().append(true).open(conf).unwrap();
        writeln!(f, "{settings}").unwrap();
        if self.dir.path().join("data/postmaster.pid").exists() {
            self.as_postgres("pg_ctl", &["-D", &self.path("data"), "reload"]);
        }
    }

    /// pgbench (a client: it may run as root) on this cluster as the postgres user.
    fn pgbench(&self, args: &[&str]) -> Command {
        let mut c = Command::new("pgbench");
        c.args(["-h", &self.path(""), "-U", "postgres"]).args(args).arg("postgres");
        c
    }

    fn log_lines(&self) -> u64 {
        count_lines(&self.dir.path().join("server.log"))
    }

    /// Restarts the server (settings such as shared_buffers take effect only then).
    fn restart(&self) {
        let (data, log) = (self.path("data"), self.path("server.log"));
        self.as_postgres("pg_ctl", &["-D", &data, "-l", &log, "-w", "restart"]);
    }

    /// One query's result by psql (unaligned, tuples only).
    fn sql(&self, query: &str) -> String {
        let out = Command::new("psql")
            .args(["-h", &self.path(""), "-U", "postgres", "-Atc", query, "postgres"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{query}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The database's blocks found in shared_buffers and read into them so far.
    fn blocks(&self) -> (f64, f64) {
        let row = self.sql("SELECT blks_hit, blks_read FROM pg_stat_database WHERE datname = 'postgres'");
        let (hit, read) = row.split_once('|').unwrap();
        (hit.parse().unwrap(), read.parse().unwrap())
    }

    /// The backends serving clients (children of the postmaster whose title says `[local]`), once there
    /// are `n`.
    fn backends(&self, n: usize) -> String {
        let pid = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid")).unwrap();
        let pm = pid.lines().next().unwrap().to_string();
        let found = || -> Vec<String> {
            let children =
                std::fs::read_to_string(format!("/proc/{pm}/task/{pm}/children")).unwrap_or_default();
            let local = |c: &&str| {
                std::fs::read(format!("/proc/{c}/cmdline"))
                    .is_ok_and(|t| String::from_utf8_lossy(&t).contains("[local]"))
            };
            children.split_whitespace().filter(local).map(str::to_string).collect()
        };
        wait_for("pgbench's backends", || found().len() == n);
        found().join(",")
    }

    /// `whyslow doctor -p` on the backends of `pgbench -S -c 2` (single-row SELECTs, simple protocol): the
    /// report, and the server log lines written per second while the doctor ran.
    fn doctor_under_selects(&self) -> (Value, f64) {
        self.doctor_under(&["-S"])
    }

    /// `whyslow doctor -p` on the backends of pgbench with `script` (its options) and 2 clients: the
    /// report, and the server log lines written per second while the doctor ran.
    fn doctor_under(&self, script: &[&str]) -> (Value, f64) {
        let _load = Load::start(self.pgbench(script).args(["-c", "2", "-T", "60"]));
        let backends = self.backends(2);
        let (before, start) = (self.log_lines(), std::time::Instant::now());
        let report = doctor(&backends, self.dir.path());
        (report, (self.log_lines() - before) as f64 / start.elapsed().as_secs_f64())
    }
}

/// PostgreSQL with shared_buffers at 16MB on a 20x pgbench database (~300 MB, in the OS page cache),
/// under clients summing the balances of 300 consecutive accounts from random places (5 to 6 blocks
/// each): most blocks are read into shared_buffers (the hit ratio while the doctor runs is below 70%),
/// and the first finding is cache-misses over the 10% threshold, its fix PostgreSQL's shared_buffers.
/// With 1GB and the tables prewarmed (a hit ratio above 99%) it is not raised.
#[test]
fn postgres_shared_buffers_below_the_working_set() {
    let Some(bin) = Postgres::installed() else { return };
    let _measuring = common::exclusive();
    let pg = Postgres::start(bin, "shared_buffers = 16MB");
    assert!(pg.pgbench(&["-i", "-q", "-s", "20"]).output().unwrap().status.success());
    let hit_ratio = |before: (f64, f64), after: (f64, f64)| {
        let (hit, read) = (after.0 - before.0, after.1 - before.1);
        100.0 * hit / (hit + read).max(1.0)
    };
    let script = pg.dir.path().join("range.sql");
    let range = "SELECT sum(abalance) FROM pgbench_accounts WHERE aid BETWEEN :a AND :a + 299;";
    std::fs::write(&script, format!("\\set a random(1, 1999700)\n{range}\n")).unwrap();
    let script = ["-f", script.to_str().unwrap()];
    let before = pg.blocks();
    let (report, _) = pg.doctor_under(&script);
    let ratio = hit_ratio(before, pg.blocks());
    assert!(ratio < 70.0, "shared_buffers hit {ratio:.1}% of the blocks: the case is not a small cache");
    let (first, fix, evidence) = first_finding(&report);
    assert_eq!(first["id"], "cache-misses", "{report:#}");
    let impact = first["impact_pct"].as_f64().unwrap();
    assert!((10.0..80.0).contains(&impact), "{impact}");
    assert!(fix.starts_with("PostgreSQL: shared_buffers (128MB by default) is below"), "{fix}");
    // smgrread tail-calls mdread: the read shows as mdread.
    assert!(evidence[0].contains("mdread"), "{evidence:?}");
    println!("shared_buffers 16MB: hit ratio {ratio:.1}%, cache-misses {impact}% of CPU; {evidence:?}");

    pg.configure("shared_buffers = 1GB");
    pg.restart();
    pg.sql("CREATE EXTENSION pg_prewarm");
    pg.sql("SELECT pg_prewarm('pgbench_accounts'), pg_prewarm('pgbench_accounts_pkey')");
    let before = pg.blocks();
    let (report, _) = pg.doctor_under(&script);
    let ratio = hit_ratio(before, pg.blocks());
    assert!(ratio > 99.0, "shared_buffers 1GB hit {ratio:.1}% of the blocks");
    let misses = findings_about(&report, "cache-misses", &["shared_buffers"]);
    assert!(misses.is_empty(), "{misses:#?}");
    println!("shared_buffers 1GB: hit ratio {ratio:.1}%");
}

/// PostgreSQL logging every statement and its duration (`log_statement = 'all'`,
/// `log_min_duration_statement = 0`) to its log file under pgbench -S: each backend writes two lines,
/// each with one write(2) to the file (from EmitErrorReport), per SELECT it answers with one send. The
/// first finding is those writes, a few per request (2 per reply within 5%: the server writes exactly
/// two per statement), with PostgreSQL's advice naming both settings; their rate matches the lines the
/// log gained while the doctor ran within a factor of 2 (as for nginx). With both off no file-write or
/// logging finding is raised.
#[test]
fn postgres_logs_every_statement() {
    let Some(bin) = Postgres::installed() else { return };
    let _measuring = common::exclusive();
    let pg = Postgres::start(bin, "log_statement = 'all'\nlog_min_duration_statement = 0");
    let (report, lines) = pg.doctor_under_selects();
    let (first, fix, evidence) = first_finding(&report);
    assert_eq!(first["id"], "small-writes", "{report:#}");
    assert!(first["title"].as_str().unwrap().contains("to a file per request"), "{first:#}");
    assert!(fix.starts_with("PostgreSQL: the server log gets a line per statement"), "{fix}");
    assert!(fix.contains("log_statement = 'ddl'") && fix.contains("log_min_duration_statement"), "{fix}");
    assert!(evidence[0].contains(" write syscalls to a regular file"), "{evidence:?}");
    let writes = number_after(evidence[0], "").unwrap();
    let replies = evidence_number(&evidence, "about 2 per request: ");
    assert!((writes - 2.0 * replies).abs() <= 0.1 * replies, "{writes} log writes for {replies} replies");
    let rate = evidence_number(&evidence, "regular file (");
    assert!(rate > lines / 2.0 && rate < lines * 2.0, "{rate}/s log writes counted, {lines:.0}/s lines");
    println!("logging every statement: {rate}/s writes counted, {lines:.0}/s log lines; {evidence:?}");

    pg.configure("log_statement = 'none'\nlog_min_duration_statement = -1");
    let (report, _) = pg.doctor_under_selects();
    let logging: Vec<&Value> = findings_about(&report, "hot-logging", &["log_statement"])
        .into_iter()
        .chain(
            report["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["title"].as_str().unwrap().contains("file")),
        )
        .collect();
    assert!(logging.is_empty(), "{logging:#?}");
}
