//! Profiling a server under load, and measured runs for before/after comparisons.
//!
//! [`record_under_load`] launches the server under the recorder, waits until it is ready (a TCP port
//! accepts connections, or a delay passed), runs the load command to its end, then ends the recording;
//! the recorder stops the server (SIGTERM, SIGKILL after a grace period). The load tool runs outside the
//! recording: only the server's samples are kept. [`measured_run`] adds the CPU time (user + system) of
//! the launched command's process tree, from the kernel's accounting of reaped children.
//!
//! Commands given as one string are split like a shell splits words (quotes and backslashes) but never
//! interpreted: no pipes, redirections, variables or globs; `sh -c '...'` is there for those.

use crate::{record, signals, Observer, RecordError, RecordOptions, Target};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use whyslow_model::raw::RawRecording;

/// When the server counts as ready for the load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ready {
    /// A TCP connection to 127.0.0.1:PORT succeeds.
    Port(u16),
    /// This long after the start.
    Delay(Duration),
}

#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The load generator (argv), e.g. `wrk -t2 -c32 -d10s http://127.0.0.1:8080/`.
    pub command: Vec<String>,
    pub ready: Ready,
    /// Give up when the port does not accept connections within this time.
    pub ready_timeout: Duration,
}

/// User + system CPU time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTime {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTime {
    pub fn total(&self) -> Duration {
        self.user + self.system
    }

    fn of(r: &libc::rusage) -> CpuTime {
        let d = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        CpuTime { user: d(r.ru_utime), system: d(r.ru_stime) }
    }

    fn saturating_sub(self, o: CpuTime) -> CpuTime {
        CpuTime { user: self.user.saturating_sub(o.user), system: self.system.saturating_sub(o.system) }
    }

    /// Everything reaped children (and the children they reaped) used so far.
    fn children() -> CpuTime {
        // SAFETY: rusage is plain integers; all zeros is a valid value.
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: r is a rusage owned by this frame.
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut r) };
        CpuTime::of(&r)
    }
}

/// What the load command did.
#[derive(Debug, Clone)]
pub struct LoadOutput {
    pub command: Vec<String>,
    /// Exit status (128 + signal when killed).
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    pub cpu: CpuTime,
}

/// A recording of a server under load.
#[derive(Debug)]
pub struct LoadRun {
    pub raw: RawRecording,
    pub load: LoadOutput,
    /// From the server's start until it was ready.
    pub ready_after: Duration,
}

/// Splits a command line into words like a POSIX shell: blanks separate words, single quotes keep
/// everything, double quotes keep everything but `\"`, `\\`, `\$` and `` \` ``, a backslash outside
/// quotes keeps the next character. Shell syntax that would need a shell is an error.
pub fn split_command(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(format!("unterminated ' in: {line}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(format!("unterminated \" in: {line}")),
                        },
                        Some(c @ ('$' | '`')) => {
                            return Err(format!(
                                "'{c}' needs a shell: wrap the command in sh -c '...': {line}"
                            ))
                        }
                        Some(c) => word.push(c),
                        None => return Err(format!("unterminated \" in: {line}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err(format!("trailing backslash in: {line}")),
                }
            }
            '|' | '&' | ';' | '<' | '>' | '(' | ')' | '$' | '`' => {
                return Err(format!("'{c}' needs a shell: wrap the command in sh -c '...': {line}"))
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err("empty command".into());
    }
    Ok(words)
}

fn port_open(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// How the controlling thread's part ended.
enum Control {
    Done {
        load: LoadOutput,
        ready_after: Duration,
    },
    /// The recording ended (the server exited, or a stop signal) while waiting for readiness.
    EndedBeforeReady,
    /// The recording ended while the load ran; the load command was killed.
    EndedDuringLoad,
    NotReady(Duration),
    Failed(RecordError),
}

/// Sleeps up to `d` in short steps; false when `ended` was set meanwhile.
fn sleep_unless(d: Duration, ended: &AtomicBool) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if ended.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10).min(until.saturating_duration_since(Instant::now())));
    }
    !ended.load(Ordering::SeqCst)
}

fn wait4(pid: i32, flags: i32) -> Option<(i32, CpuTime)> {
    let mut st = 0;
    // SAFETY: rusage is plain integers; all zeros is a valid value.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: st and r are owned by this frame.
    let got = unsafe { libc::wait4(pid, &mut st, flags, &mut r) };
    (got == pid).then(|| {
        let code = if libc::WIFEXITED(st) { libc::WEXITSTATUS(st) } else { 128 + libc::WTERMSIG(st) };
        (code, CpuTime::of(&r))
    })
}

fn read_all(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Waits for readiness, runs the load to its end, then asks the recording to stop.
fn control(load: &LoadOptions, stop: &AtomicBool, ended: &AtomicBool) -> Control {
    let t0 = Instant::now();
    match load.ready {
        Ready::Delay(d) => {
            if !sleep_unless(d, ended) {
                return Control::EndedBeforeReady;
            }
        }
        Ready::Port(port) => loop {
            if ended.load(Ordering::SeqCst) {
                return Control::EndedBeforeReady;
            }
            if port_open(port) {
                break;
            }
            if t0.elapsed() >= load.ready_timeout {
                stop.store(true, Ordering::SeqCst);
                return Control::NotReady(load.ready_timeout);
            }
            if !sleep_unless(Duration::from_millis(20), ended) {
                return Control::EndedBeforeReady;
            }
        },
    }
    let ready_after = t0.elapsed();
    let started = Instant::now();
    let child = std::process::Command::new(&load.command[0])
        .args(&load.command[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            stop.store(true, Ordering::SeqCst);
            return Control::Failed(RecordError::Exec(load.command[0].clone(), e));
        }
    };
    let out = read_all(child.stdout.take().expect("piped"));
    let err = read_all(child.stderr.take().expect("piped"));
    let pid = child.id() as i32;
    // Reaped here with wait4 (not Child::wait) for its own CPU time.
    let (status, cpu) = loop {
        if let Some(r) = wait4(pid, libc::WNOHANG) {
            break r;
        }
        if ended.load(Ordering::SeqCst) {
            // SAFETY: kill takes no pointers.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = wait4(pid, 0);
            let _ = (out.join(), err.join());
            return Control::EndedDuringLoad;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let (stdout, stderr) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    Control::Done {
        load: LoadOutput { command: load.command.clone(), status, stdout, stderr, elapsed, cpu },
        ready_after,
    }
}

/// Records the launched server (`opts.target` must be [`Target::Launch`]) while `load` runs against it.
pub fn record_under_load(
    opts: &RecordOptions,
    load: &LoadOptions,
    observer: &mut impl Observer,
) -> Result<LoadRun, RecordError> {
    if !matches!(opts.target, Target::Launch(_)) {
        return Err(RecordError::Invalid("--load needs the server command after `--`".into()));
    }
    if load.command.is_empty() {
        return Err(RecordError::NoCommand);
    }
    if let Ready::Port(port) = load.ready {
        if port_open(port) {
            return Err(RecordError::PortInUse(port));
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ended = AtomicBool::new(false);
    let opts = RecordOptions { stop: Some(stop.clone()), ..opts.clone() };
    let (recorded, control) = std::thread::scope(|s| {
        let ctl = s.spawn(|| control(load, &stop, &ended));
        let recorded = record(&opts, observer);
        ended.store(true, Ordering::SeqCst);
        (recorded, ctl.join())
    });
    let raw = recorded?;
    let server_code = raw.meta.exit_code.unwrap_or(0);
    match control.map_err(|_| RecordError::Invalid("the load controller panicked".into()))? {
        Control::Done { load: out, ready_after } => Ok(LoadRun { raw, load: out, ready_after }),
        Control::Failed(e) => Err(e),
        Control::NotReady(after) => Err(RecordError::ServerNotReady {
            port: match load.ready {
                Ready::Port(p) => p,
                Ready::Delay(_) => 0,
            },
            seconds: after.as_secs_f64(),
        }),
        Control::EndedBeforeReady | Control::EndedDuringLoad if signals::stop_requested() => {
            Err(RecordError::Interrupted)
        }
        Control::EndedBeforeReady => {
            Err(RecordError::ServerExited { code: server_code, when: "before it was ready" })
        }
        Control::EndedDuringLoad => {
            Err(RecordError::ServerExited { code: server_code, when: "while the load ran" })
        }
    }
}

/// One run of a comparison.
#[derive(Debug)]
pub struct Measured {
    pub raw: RawRecording,
    /// From the start of the command until it exited (or, under load, until it was stopped).
    pub wall: Duration,
    /// CPU time of the command and the children it reaped (under load: of the server only).
    pub cpu: CpuTime,
    pub load: Option<LoadOutput>,
}

/// Records one run of `opts.target` (with `load`: under load) and measures its wall and CPU time.
/// Nothing else may reap children of this process meanwhile (their time would count).
pub fn measured_run(
    opts: &RecordOptions,
    load: Option<&LoadOptions>,
    observer: &mut impl Observer,
) -> Result<Measured, RecordError> {
    let before = CpuTime::children();
    let (raw, load_out) = match load {
        Some(l) => {
            let run = record_under_load(opts, l, observer)?;
            (run.raw, Some(run.load))
        }
        None => (record(opts, observer)?, None),
    };
    let mut cpu = CpuTime::children().saturating_sub(before);
    if let Some(l) = &load_out {
        cpu = cpu.saturating_sub(l.cpu);
    }
    if signals::stop_requested() {
        return Err(RecordError::Interrupted);
    }
    let wall = Duration::from_nanos(raw.meta.duration_ns);
    Ok(Measured { raw, wall, cpu, load: load_out })
}

/// Throughput and latency a load tool reported.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadStats {
    /// `wrk` or `redis-benchmark`.
    pub tool: &'static str,
    pub requests_per_sec: f64,
    /// Mean latency, when reported.
    pub latency_avg_ms: Option<f64>,
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    /// Requests that failed (wrk: socket errors and non-2xx/3xx responses).
    pub errors: u64,
}

/// `1.23ms`, `456.78us`, `2.00s`, `1.5m` in milliseconds.
fn wrk_time_ms(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let k = match unit {
        "us" => 1e-3,
        "ms" => 1.0,
        "s" => 1e3,
        "m" => 60e3,
        "h" => 3600e3,
        _ => return None,
    };
    Some(v * k)
}

fn parse_wrk(out: &str) -> Option<LoadStats> {
    let rps = out.lines().find_map(|l| l.trim().strip_prefix("Requests/sec:"))?.trim().parse().ok()?;
    let mut s = LoadStats {
        tool: "wrk",
        requests_per_sec: rps,
        latency_avg_ms: None,
        latency_p50_ms: None,
        latency_p99_ms: None,
        errors: 0,
    };
    for line in out.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Latency", avg, ..] => s.latency_avg_ms = s.latency_avg_ms.or(wrk_time_ms(avg)),
            ["50%", t] => s.latency_p50_ms = wrk_time_ms(t),
            ["99%", t] => s.latency_p99_ms = wrk_time_ms(t),
            ["Non-2xx", "or", "3xx", "responses:", n] => s.errors += n.parse::<u64>().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => {
                s.errors +=
                    rest.iter().filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok()).sum::<u64>()
            }
            _ => {}
        }
    }
    Some(s)
}

/// redis-benchmark: the `throughput summary` of each test (or `-q` lines `TEST: N requests per second`);
/// several tests give their mean.
fn parse_redis(out: &str) -> Option<LoadStats> {
    let mut rates = Vec::new();
    let (mut avg, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new());
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = line.strip_prefix("throughput summary:") {
            rates.extend(rest.split_whitespace().next().and_then(|n| n.parse::<f64>().ok()));
        } else if !line.starts_with("throughput") && line.contains(" requests per second") {
            // `-q`: `SET: 81234.23 requests per second, p50=0.319 msec`
            let after_colon = line.split_once(": ").map_or(*line, |x| x.1);
            rates.extend(after_colon.split_whitespace().next().and_then(|n| n.parse::<f64>().ok()));
            if let Some(p) = line.split("p50=").nth(1) {
                p50.extend(p.split_whitespace().next().and_then(|n| n.parse::<f64>().ok()));
            }
        } else if line.starts_with("latency summary (msec):") {
            // Header `avg min p50 p95 p99 max`, then the values.
            let (Some(head), Some(vals)) = (lines.get(i + 1), lines.get(i + 2)) else { continue };
            let cols: Vec<&str> = head.split_whitespace().collect();
            let nums: Vec<f64> = vals.split_whitespace().filter_map(|v| v.parse().ok()).collect();
            for (c, v) in cols.iter().zip(nums) {
                match *c {
                    "avg" => avg.push(v),
                    "p50" => p50.push(v),
                    "p99" => p99.push(v),
                    _ => {}
                }
            }
        }
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    Some(LoadStats {
        tool: "redis-benchmark",
        requests_per_sec: mean(&rates)?,
        latency_avg_ms: mean(&avg),
        latency_p50_ms: mean(&p50),
        latency_p99_ms: mean(&p99),
        errors: 0,
    })
}

/// Requests per second and latency from the output of wrk or redis-benchmark, when it is one of them.
pub fn parse_load_output(stdout: &str) -> Option<LoadStats> {
    parse_wrk(stdout).or_else(|| parse_redis(stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_a_shell() {
        let w = |s: &str| split_command(s).unwrap();
        assert_eq!(
            w("wrk -t2  -c32 http://127.0.0.1:8080/"),
            ["wrk", "-t2", "-c32", "http://127.0.0.1:8080/"]
        );
        assert_eq!(w(r#"prog 'a b' "c \"d\" \n" e\ f ''"#), ["prog", "a b", "c \"d\" \\n", "e f", ""]);
        assert_eq!(w("sh -c 'a | b > c'"), ["sh", "-c", "a | b > c"]);
        for bad in ["a | b", "a > out", "echo $HOME", "a; b", "'open", "\"open", "x\\", "", "   "] {
            assert!(split_command(bad).is_err(), "{bad:?}");
        }
        assert!(split_command("a | b").unwrap_err().contains("sh -c"));
    }

    const WRK: &str = "Running 2s test @ http://127.0.0.1:18080/
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   655.21us  301.10us   8.94ms   91.02%
    Req/Sec    12.27k     1.02k   14.10k    72.50%
  Latency Distribution
     50%  602.00us
     75%  701.00us
     90%  850.00us
     99%    1.71ms
  48850 requests in 2.00s, 3.77MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:  24418.12
Transfer/sec:      1.89MB
";

    #[test]
    fn parses_wrk() {
        let s = parse_load_output(WRK).unwrap();
        assert_eq!((s.tool, s.requests_per_sec, s.errors), ("wrk", 24418.12, 7));
        assert!((s.latency_avg_ms.unwrap() - 0.65521).abs() < 1e-9);
        assert!((s.latency_p50_ms.unwrap() - 0.602).abs() < 1e-9);
        assert!((s.latency_p99_ms.unwrap() - 1.71).abs() < 1e-9);
        assert!(parse_load_output("hello\n").is_none());
    }

    #[test]
    fn parses_redis_benchmark() {
        let full = "====== SET ======
  100000 requests completed in 1.25 seconds
  50 parallel clients

Summary:
  throughput summary: 80000.00 requests per second
  latency summary (msec):
          avg       min       p50       p95       p99       max
        0.350     0.100     0.319     0.543     0.711     2.111
====== GET ======
Summary:
  throughput summary: 100000.00 requests per second
  latency summary (msec):
          avg       min       p50       p95       p99       max
        0.250     0.100     0.219     0.443     0.611     1.111
";
        let s = parse_load_output(full).unwrap();
        assert_eq!((s.tool, s.requests_per_sec), ("redis-benchmark", 90000.0));
        assert!((s.latency_avg_ms.unwrap() - 0.3).abs() < 1e-9);
        assert!((s.latency_p99_ms.unwrap() - 0.661).abs() < 1e-9);
        let quiet = "SET: 81234.23 requests per second, p50=0.319 msec\nGET: 91234.23 requests per second, p50=0.219 msec\n";
        let s = parse_load_output(quiet).unwrap();
        assert!((s.requests_per_sec - 86234.23).abs() < 1e-6);
        assert!((s.latency_p50_ms.unwrap() - 0.269).abs() < 1e-9);
    }
}
