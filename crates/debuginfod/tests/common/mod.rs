//! Test fixtures: real ELF files split the way distributions split them, the real elfutils server, and a
//! tiny HTTP responder of our own for the answers no honest server gives (silence, wrong files, 404s).
//!
//! Must never reach past 127.0.0.1, and must stop every server it starts, even when a test fails.

#![allow(dead_code)] // each test binary uses a different part

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The program whose debug info the tests fetch.
const PROGRAM: &str = r#"
#include <stdio.h>
static int work(int n) { int s = 0; for (int i = 0; i < n; i++) s += i * i; return s; }
int main(void) { printf("%d\n", work(10)); return 0; }
"#;

pub fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Panics (never skips) when a tool is missing: CI installs them, so a missing one is a broken setup.
pub fn require(tool: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    assert!(found, "{tool} is not installed: apt-get install debuginfod elfutils gcc binutils");
}

/// A stripped binary and its separate debug file, as `objcopy --only-keep-debug` makes them.
pub struct Split {
    pub stripped: PathBuf,
    pub debug: PathBuf,
    pub build_id: String,
}

/// Builds the program with `gcc -g` and the given build id (hex), then splits it: `debug_dir/<name>.debug`
/// and `dir/<name>` stripped with a debuglink.
pub fn build_split(dir: &Path, debug_dir: &Path, name: &str, build_id: &str) -> Split {
    require("gcc");
    require("objcopy");
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, PROGRAM).unwrap();
    let bin = dir.join(name);
    run(Command::new("gcc")
        .args(["-g", "-O1", &format!("-Wl,--build-id=0x{build_id}"), "-o"])
        .arg(&bin)
        .arg(&src));
    std::fs::create_dir_all(debug_dir).unwrap();
    let debug = debug_dir.join(format!("{name}.debug"));
    run(Command::new("objcopy").arg("--only-keep-debug").arg(&bin).arg(&debug));
    run(Command::new("objcopy")
        .arg("--strip-all")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg(&bin));
    Split { stripped: bin, debug, build_id: build_id.to_string() }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// elfutils' debuginfod serving one directory; killed on drop, so a failing test leaves no server behind.
pub struct Debuginfod {
    child: Child,
    pub url: String,
}

impl Debuginfod {
    /// Starts `debuginfod -F dir` and waits (bounded) until it serves `build_id`.
    pub fn start(dir: &Path, db: &Path, build_id: &str) -> Debuginfod {
        require("debuginfod");
        let port = free_port();
        let child = Command::new("debuginfod")
            .args(["-F", "-p", &port.to_string(), "-c", "1", "-g", "0", "-d"])
            .arg(db)
            .arg(dir)
            // Its own client would federate to whatever this machine's profile points at.
            .env_remove("DEBUGINFOD_URLS")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start debuginfod: apt-get install debuginfod");
        let server = Debuginfod { child, url: format!("http://127.0.0.1:{port}") };
        let probe = format!("/buildid/{build_id}/debuginfo");
        let start = Instant::now();
        while http_status(port, &probe) != Some(200) {
            assert!(start.elapsed() < Duration::from_secs(60), "debuginfod did not index {dir:?} in 60 s");
            thread::sleep(Duration::from_millis(100));
        }
        server
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Debuginfod {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The status of a plain GET, or None when nothing answers (yet).
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// What the responder does with a request.
#[derive(Clone)]
pub enum Reply {
    /// Answer with this status and an empty body.
    Status(u16),
    /// 200 with this body.
    Body(Vec<u8>),
    /// 200 with a Content-Length header of this value and no body.
    Declares(u64),
    /// Read the request, then say nothing until the test ends.
    Silent,
    /// 200 with a large Content-Length, then one byte every interval.
    Trickle(Duration),
}

/// A one-behaviour HTTP/1.1 server on 127.0.0.1 that records the paths asked.
pub struct Responder {
    pub url: String,
    pub paths: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    port: u16,
    thread: Option<thread::JoinHandle<()>>,
}

impl Responder {
    pub fn start(reply: Reply) -> Responder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let paths = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (paths2, stop2) = (paths.clone(), stop.clone());
        let thread = thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (paths, stop, reply) = (paths2.clone(), stop2.clone(), reply.clone());
                held.push(thread::spawn(move || serve(stream, &reply, &paths, &stop)));
            }
            for h in held {
                let _ = h.join();
            }
        });
        Responder { url: format!("http://127.0.0.1:{port}"), paths, stop, port, thread: Some(thread) }
    }

    pub fn requests(&self) -> usize {
        self.paths.lock().unwrap().len()
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(stream: TcpStream, reply: &Reply, paths: &Mutex<Vec<String>>, stop: &AtomicBool) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            break;
        }
    }
    if let Some(path) = request_line.split_whitespace().nth(1) {
        paths.lock().unwrap().push(path.to_string());
    }
    let mut out = stream;
    let head = |status: u16, len: u64| {
        format!("HTTP/1.1 {status} X\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n")
    };
    let wait_for_stop = || {
        while !stop.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(20));
        }
    };
    match reply {
        Reply::Status(s) => {
            let _ = out.write_all(head(*s, 0).as_bytes());
        }
        Reply::Body(b) => {
            let _ = out.write_all(head(200, b.len() as u64).as_bytes());
            let _ = out.write_all(b);
        }
        Reply::Declares(n) => {
            let _ = out.write_all(head(200, *n).as_bytes());
            wait_for_stop();
        }
        Reply::Silent => wait_for_stop(),
        Reply::Trickle(every) => {
            let _ = out.write_all(head(200, 1 << 20).as_bytes());
            while !stop.load(Ordering::SeqCst) && out.write_all(b"x").is_ok() {
                thread::sleep(*every);
            }
        }
    }
}
