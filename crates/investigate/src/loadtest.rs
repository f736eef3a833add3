//! Load tests: profiling a server under load, and measured runs for before/after comparisons.
//!
//! [`record_under_load`] launches the server under the recorder, waits until it is ready (a TCP port
//! accepts connections, or a delay passed), runs the load command to its end, then ends the recording;
//! the recorder stops the server (SIGTERM, SIGKILL after a grace period). The load tool runs outside the
//! recording: only the server's samples are kept. [`measured_run`] adds the CPU time (user + system) of
//! the launched command's process tree, from the kernel's accounting of reaped children. What the load
//! tool printed is handed back as text (whyslow_analyze::loadtest reads it). It drives the recorder and
//! never records or symbolizes by itself; its failures are [`LoadTestError`], a recording's wrapped.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use whyslow_model::raw::RawRecording;
use whyslow_record::{record, signals, Observer, RecordError, RecordOptions, Target};

/// Why a load test failed: the recording's own errors, or the server's and the load command's.
#[derive(Debug, thiserror::Error)]
pub enum LoadTestError {
    /// The recording failed (its message as the recorder says it).
    #[error("{0}")]
    Record(#[from] RecordError),
    #[error("invalid option: a run under load launches its server: the target must be a command")]
    NotLaunched,
    #[error("no command given")]
    NoLoadCommand,
    #[error("cannot run {0}: {1}")]
    Exec(String, std::io::Error),
    #[error("invalid option: the load controller panicked")]
    ControllerPanicked,
    #[error(
        "the server did not accept connections on 127.0.0.1:{port} within {seconds:.1} s (the ready timeout)"
    )]
    ServerNotReady { port: u16, seconds: f64 },
    #[error("the server exited with status {code} {when}")]
    ServerExited { code: i32, when: &'static str },
    #[error("port {0} already accepts connections before the server started: stop what listens there or pick another port")]
    PortInUse(u16),
    #[error("interrupted (Ctrl-C or SIGTERM) before the run finished")]
    Interrupted,
}

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
    Failed(LoadTestError),
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
            return Control::Failed(LoadTestError::Exec(load.command[0].clone(), e));
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
) -> Result<LoadRun, LoadTestError> {
    if !matches!(opts.target, Target::Launch(_)) {
        return Err(LoadTestError::NotLaunched);
    }
    if load.command.is_empty() {
        return Err(LoadTestError::NoLoadCommand);
    }
    if let Ready::Port(port) = load.ready {
        if port_open(port) {
            return Err(LoadTestError::PortInUse(port));
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
    match control.map_err(|_| LoadTestError::ControllerPanicked)? {
        Control::Done { load: out, ready_after } => Ok(LoadRun { raw, load: out, ready_after }),
        Control::Failed(e) => Err(e),
        Control::NotReady(after) => Err(LoadTestError::ServerNotReady {
            port: match load.ready {
                Ready::Port(p) => p,
                Ready::Delay(_) => 0,
            },
            seconds: after.as_secs_f64(),
        }),
        Control::EndedBeforeReady | Control::EndedDuringLoad if signals::stop_requested() => {
            Err(LoadTestError::Interrupted)
        }
        Control::EndedBeforeReady => {
            Err(LoadTestError::ServerExited { code: server_code, when: "before it was ready" })
        }
        Control::EndedDuringLoad => {
            Err(LoadTestError::ServerExited { code: server_code, when: "while the load ran" })
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
) -> Result<Measured, LoadTestError> {
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
        return Err(LoadTestError::Interrupted);
    }
    let wall = Duration::from_nanos(raw.meta.duration_ns);
    Ok(Measured { raw, wall, cpu, load: load_out })
}
