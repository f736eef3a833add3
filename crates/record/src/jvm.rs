//! Java virtual machines (HotSpot) asked for the names of their JIT-compiled code, through the JVM's own
//! dynamic attach mechanism (what `jcmd PID Compiler.perfmap` does): the JVM writes its code cache as a
//! perf map, `/tmp/perf-PID.map` in its mount namespace, which the converter reads like any JIT's map.
//!
//! The attach protocol (HotSpot, Linux): the client creates `.attach_pidNSPID` in the JVM's working
//! directory (or its /tmp) and sends SIGQUIT; the JVM sees the file and starts its attach listener, a
//! UNIX socket `/tmp/.java_pidNSPID` (NSPID: its pid in its own pid namespace). A request is
//! `1\0jcmd\0COMMAND\0\0\0`; the reply is the result code as a decimal line, then the command's output.
//! The JVM accepts a peer of its own effective uid and gid, or root (as the JVM's user namespace sees
//! it).
//!
//! It must never stop or harm the JVM: SIGQUIT is sent only to a process that catches it (a JVM run
//! with -Xrs, or one still starting, would dump core), at most once per process, and never to one whose
//! command line or options environment disables the attach mechanism (there SIGQUIT would only print a
//! thread dump). A JVM that does not answer gets one note, never an error of the run.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use whyslow_convert::JitUpdate;

/// How long a JVM may take to start its attach listener after SIGQUIT (jcmd waits up to 10 s; a
/// loaded JVM answers in well under a second here).
const LISTENER_WAIT: Duration = Duration::from_secs(5);

/// How long one command may take (writing the perf map of a large code cache).
const REPLY_WAIT: Duration = Duration::from_secs(10);

/// How soon a JVM is asked again for its perf map while samples fall in code it has not named (code it
/// compiled since): until then its stacks are cut at that code. At least this long after the last ask,
/// and [`REFRESH_COST`] times as long as that ask took, so a JVM with a large code cache (whose map
/// takes long to write, a walk under a lock) spends at most 1/20 of one thread on it.
const REFRESH: Duration = Duration::from_millis(200);
const REFRESH_COST: u32 = 20;

/// The diagnostic command that writes the JVM's code cache as a perf map.
const PERFMAP_COMMAND: &str = "Compiler.perfmap";

/// Why a JVM did not write its perf map.
#[derive(Debug, thiserror::Error)]
pub enum JvmError {
    #[error("the JVM disables its attach mechanism ({0})")]
    AttachDisabled(String),
    #[error("the JVM does not handle SIGQUIT (started with -Xrs, or still starting): not signalled")]
    NoSignalHandler,
    #[error("the JVM did not start its attach listener within {0:?} of SIGQUIT")]
    NoListener(Duration),
    #[error("cannot {0}: {1}")]
    Io(&'static str, std::io::Error),
    #[error("the JVM's attach listener answered {0:?}, not a result code")]
    BadReply(String),
    #[error("the JVM refused {PERFMAP_COMMAND} (code {code}): {message}")]
    Failed { code: i32, message: String },
    #[error("the process is gone")]
    Gone,
}

/// Whether process `pid` runs a HotSpot JVM: it maps `libjvm.so`.
pub fn is_jvm(pid: u32) -> bool {
    crate::target::exec_maps(pid).iter().any(|m| m.path.ends_with("/libjvm.so"))
}

/// What /proc/PID/status says about a process that attaching needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Status {
    /// Its pid as it sees itself (in its own pid namespace).
    ns_pid: u32,
    /// Effective uid and gid, as this machine sees them.
    euid: u32,
    egid: u32,
    /// Whether it catches SIGQUIT.
    catches_quit: bool,
}

impl Status {
    fn parse(text: &str) -> Option<Status> {
        let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(str::split_whitespace);
        let ns_pid = field("NSpid:")?.last()?.parse().ok()?;
        let euid = field("Uid:")?.nth(1)?.parse().ok()?;
        let egid = field("Gid:")?.nth(1)?.parse().ok()?;
        let caught = u64::from_str_radix(field("SigCgt:")?.next()?, 16).ok()?;
        let catches_quit = caught & (1 << (libc::SIGQUIT - 1)) != 0;
        Some(Status { ns_pid, euid, egid, catches_quit })
    }

    fn read(pid: u32) -> Option<Status> {
        Status::parse(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
    }
}

/// The option that disables attaching, where the command line or the environment the JVM reads options
/// from (JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS, _JAVA_OPTIONS) sets it.
fn attach_disabled(cmdline: &[u8], environ: &[u8]) -> Option<String> {
    const FLAG: &str = "-XX:+DisableAttachMechanism";
    let opts = ["JAVA_TOOL_OPTIONS=", "JDK_JAVA_OPTIONS=", "_JAVA_OPTIONS="];
    let args = cmdline.split(|&b| b == 0).map(String::from_utf8_lossy);
    if args.into_iter().any(|a| a == FLAG) {
        return Some(format!("{FLAG} on its command line"));
    }
    for var in environ.split(|&b| b == 0).map(String::from_utf8_lossy) {
        if let Some(name) = opts.iter().find(|o| var.starts_with(*o)) {
            if var[name.len()..].split_whitespace().any(|a| a == FLAG) {
                return Some(format!("{FLAG} in {}", name.trim_end_matches('=')));
            }
        }
    }
    None
}

/// `1\0jcmd\0COMMAND\0\0\0`: protocol version 1, the operation, and its three arguments.
fn request(command: &str) -> Vec<u8> {
    let mut r = Vec::new();
    for part in ["1", "jcmd", command, "", ""] {
        r.extend_from_slice(part.as_bytes());
        r.push(0);
    }
    r
}

/// The result code and output of a reply.
fn parse_reply(reply: &[u8]) -> Result<(i32, String), JvmError> {
    let text = String::from_utf8_lossy(reply);
    let (code, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let code = code.trim().parse().map_err(|_| JvmError::BadReply(code.chars().take(80).collect()))?;
    Ok((code, rest.trim().to_string()))
}

/// Asks the JVM `pid` to write its perf map (`/tmp/perf-NSPID.map` as it sees /tmp), starting its attach
/// listener first when it has none. Blocks until the JVM answered (up to [`LISTENER_WAIT`] +
/// [`REPLY_WAIT`]).
pub fn write_perf_map(pid: u32) -> Result<(), JvmError> {
    let st = Status::read(pid).ok_or(JvmError::Gone)?;
    let socket = PathBuf::from(format!("/proc/{pid}/root/tmp/.java_pid{}", st.ns_pid));
    if !is_socket(&socket) {
        start_listener(pid, &st, &socket)?;
    }
    let mut conn = connect(pid, &st, &socket)?;
    conn.set_read_timeout(Some(REPLY_WAIT)).map_err(|e| JvmError::Io("time the attach reply", e))?;
    conn.write_all(&request(PERFMAP_COMMAND)).map_err(|e| JvmError::Io("send the attach request", e))?;
    let mut reply = Vec::new();
    conn.read_to_end(&mut reply).map_err(|e| JvmError::Io("read the attach reply", e))?;
    match parse_reply(&reply)? {
        (0, _) => Ok(()),
        (code, message) => {
            Err(JvmError::Failed { code, message: message.lines().next().unwrap_or("").into() })
        }
    }
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// Has the JVM start its attach listener: the trigger file where it looks (its working directory, else
/// its /tmp), owned by its user, then SIGQUIT; waits for the socket, and removes the trigger file.
fn start_listener(pid: u32, st: &Status, socket: &Path) -> Result<(), JvmError> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    if let Some(how) = attach_disabled(&cmdline, &environ) {
        return Err(JvmError::AttachDisabled(how));
    }
    if !st.catches_quit {
        return Err(JvmError::NoSignalHandler);
    }
    let name = format!(".attach_pid{}", st.ns_pid);
    let trigger = [format!("/proc/{pid}/cwd/{name}"), format!("/proc/{pid}/root/tmp/{name}")]
        .into_iter()
        .find(|p| std::fs::File::create(p).is_ok())
        .ok_or_else(|| JvmError::Io("create the attach trigger file", std::io::Error::last_os_error()))?;
    // The JVM ignores a trigger file of another user (in a user namespace, root's is nobody's).
    let _ = std::os::unix::fs::chown(&trigger, Some(st.euid), Some(st.egid));
    let waited = signal_and_wait(pid, socket);
    let _ = std::fs::remove_file(&trigger);
    waited
}

fn signal_and_wait(pid: u32, socket: &Path) -> Result<(), JvmError> {
    // SAFETY: kill takes plain integers; the JVM catches SIGQUIT (checked by the caller).
    if unsafe { libc::kill(pid as libc::pid_t, libc::SIGQUIT) } != 0 {
        return Err(JvmError::Io("signal the JVM", std::io::Error::last_os_error()));
    }
    let t0 = Instant::now();
    let mut pause = Duration::from_millis(5);
    while t0.elapsed() < LISTENER_WAIT {
        if is_socket(socket) {
            return Ok(());
        }
        if !crate::target::alive(pid) {
            return Err(JvmError::Gone);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
    Err(JvmError::NoListener(LISTENER_WAIT))
}

/// Identity (device, inode) of a namespace link.
fn ns_id(path: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Connects to the JVM's attach socket as a peer it accepts: as ourselves where it sees us as root or
/// as its own user; else (we are root, it runs in a user namespace where our root maps to nobody) from a
/// thread that takes the JVM's effective uid and gid for the connect alone. The kernel records the peer's
/// credentials at connect; the raw syscalls change the calling thread's credentials only (glibc's
/// wrappers would change every thread's), and the thread ends right after.
fn connect(pid: u32, st: &Status, socket: &Path) -> Result<UnixStream, JvmError> {
    let same_userns = ns_id("/proc/self/ns/user") == ns_id(&format!("/proc/{pid}/ns/user"));
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if same_userns || !root {
        return UnixStream::connect(socket).map_err(|e| JvmError::Io("connect to the attach socket", e));
    }
    let (uid, gid, path) = (st.euid, st.egid, socket.to_path_buf());
    let worker = std::thread::spawn(move || -> std::io::Result<UnixStream> {
        // SAFETY: raw setresgid/setresuid on this thread only; -1 keeps the real and saved ids, so
        // nothing but this thread's effective ids change, and the thread ends after the connect.
        let switched = unsafe {
            libc::syscall(libc::SYS_setresgid, -1i64, i64::from(gid), -1i64) == 0
                && libc::syscall(libc::SYS_setresuid, -1i64, i64::from(uid), -1i64) == 0
        };
        if !switched {
            return Err(std::io::Error::last_os_error());
        }
        UnixStream::connect(&path)
    });
    match worker.join() {
        Ok(r) => r.map_err(|e| JvmError::Io("connect to the attach socket as the JVM's user", e)),
        Err(_) => Err(JvmError::Io("connect to the attach socket", std::io::ErrorKind::Other.into())),
    }
}

/// What is known of one process about its JVM.
#[derive(Debug, Default)]
struct Jvm {
    /// When its perf map was last asked for, and how long that took.
    asked: Option<Instant>,
    took: Duration,
    /// A request is running.
    busy: bool,
    /// Requests answered, and how many of them the converter has read the map of.
    written: u64,
    read: u64,
    /// It refused or did not answer: not asked again, its perf map read as any JIT's.
    refused: bool,
    /// Where its code cache's structures are (read once), or why that is not known.
    layout: Option<Result<crate::hotspot::Layout, String>>,
    /// Its code blobs when it last wrote its map, for the unwinder.
    code: Option<Vec<whyslow_unwind::JitCode>>,
}

/// The JVMs of a run, each asked for its perf map in the background (the converter never waits for a
/// JVM), and what they answered. Shared by the converter's host and the run.
#[derive(Debug, Default)]
pub struct Jvms {
    procs: Mutex<HashMap<u32, Option<Jvm>>>,
    /// One line per JVM that did not answer, for the recording's notes.
    notes: Mutex<Vec<String>>,
}

/// What [`Jvms::jit`] has for the converter.
pub enum JvmMap {
    /// Not a JVM we ask (or one that refused): read what it published as any JIT's.
    NotAsked,
    /// A JVM we ask: nothing new since the map last read.
    Unchanged,
    /// The perf map it wrote since, read whole (the JVM rewrites it: the newest entry names an address).
    Written(JitUpdate),
}

impl Jvms {
    pub fn new() -> Arc<Jvms> {
        Arc::new(Jvms::default())
    }

    /// For the converter asking for JIT symbols of `pid`: the map written since it last read one, and
    /// a new request when the last is old enough (an address is unknown: code compiled since; see
    /// [`REFRESH`]).
    pub fn jit(self: &Arc<Self>, pid: u32) -> JvmMap {
        let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(jvm) = procs.entry(pid).or_insert_with(|| is_jvm(pid).then(Jvm::default)) else {
            return JvmMap::NotAsked;
        };
        if jvm.refused {
            return JvmMap::NotAsked;
        }
        if jvm.written > jvm.read {
            jvm.read = jvm.written;
            return match crate::files::perf_map(pid, 0) {
                Some(u) => {
                    let methods = jvm.layout.as_ref().and_then(|l| l.as_ref().ok()?.methods);
                    JvmMap::Written(JitUpdate { code: jvm.code.take(), methods, ..u })
                }
                None => JvmMap::Unchanged,
            };
        }
        if !jvm.busy && jvm.asked.is_none_or(|t| t.elapsed() >= REFRESH.max(jvm.took * REFRESH_COST)) {
            jvm.busy = true;
            jvm.asked = Some(Instant::now());
            let me = Arc::clone(self);
            std::thread::spawn(move || me.ask(pid));
        }
        JvmMap::Unchanged
    }

    /// Asks `pid` for its perf map now, if it is a JVM not known to refuse, and waits for the answer:
    /// at the start of a run (so the first samples are named) and at its end (code compiled during the
    /// run). Returns whether it wrote one.
    pub fn ask_now(&self, pid: u32) -> bool {
        {
            let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
            match procs.entry(pid).or_insert_with(|| is_jvm(pid).then(Jvm::default)) {
                Some(jvm) if !jvm.refused && !jvm.busy => {
                    jvm.busy = true;
                    jvm.asked = Some(Instant::now());
                }
                _ => return false,
            }
        }
        self.ask(pid)
    }

    /// Asks every JVM seen so far that is still running and answered before (see [`Jvms::ask_now`]).
    pub fn ask_all_now(&self) {
        let pids: Vec<u32> = {
            let procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
            procs.iter().filter(|(_, j)| j.as_ref().is_some_and(|j| !j.refused)).map(|(&p, _)| p).collect()
        };
        for pid in pids.into_iter().filter(|&p| crate::target::alive(p)) {
            self.ask_now(pid);
        }
    }

    fn ask(&self, pid: u32) -> bool {
        let started = Instant::now();
        let result = write_perf_map(pid);
        let took = started.elapsed();
        let layout = {
            let procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
            procs.get(&pid).and_then(|j| j.as_ref()?.layout.clone())
        };
        // The code blobs as they are once the map is written (so every named method has its frame).
        let layout = layout.unwrap_or_else(|| crate::hotspot::Layout::read(pid).map_err(|e| e.to_string()));
        let code = layout.as_ref().ok().map(|l| l.code(pid).map_err(|e| e.to_string()));
        let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(Some(jvm)) = procs.get_mut(&pid) else { return false };
        jvm.busy = false;
        // The first ask's time is mostly the JVM starting its attach listener: not what a map costs.
        if jvm.written > 0 {
            jvm.took = took;
        }
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        if let (Err(e), None) = (&layout, &jvm.layout) {
            notes.push(format!("JVM {pid}: compiled Java frames are unwound by frame pointers only: {e}"));
        }
        match code {
            Some(Ok(code)) => jvm.code = Some(code),
            Some(Err(e)) if jvm.layout.is_none() => {
                notes.push(format!("JVM {pid}: compiled Java frames are unwound by frame pointers only: {e}"))
            }
            _ => {}
        }
        drop(notes);
        jvm.layout = Some(layout);
        match result {
            Ok(()) => {
                jvm.written += 1;
                true
            }
            Err(JvmError::Gone) => {
                jvm.refused = true;
                false
            }
            Err(e) => {
                jvm.refused = true;
                self.notes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!("JVM {pid}: its JIT-compiled methods are not named: {e}"));
                false
            }
        }
    }

    /// Forgets process `pid` (it exited or is no longer followed): its pid may come back as another
    /// process.
    pub fn forget(&self, pid: u32) {
        self.procs.lock().unwrap_or_else(|e| e.into_inner()).remove(&pid);
    }

    /// Forgets the processes that ended (known through any sample, followed or not): their pids may come
    /// back as other processes, and a whole host's run would keep them all.
    pub fn forget_ended(&self) {
        self.procs.lock().unwrap_or_else(|e| e.into_inner()).retain(|&pid, _| crate::target::alive(pid));
    }

    /// The notes of JVMs that did not answer, taken once.
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::{attach_disabled, parse_reply, request, Status};

    #[test]
    fn the_request_is_the_protocol_version_the_operation_and_three_arguments() {
        assert_eq!(request("Compiler.perfmap"), b"1\0jcmd\0Compiler.perfmap\0\0\0".to_vec());
    }

    #[test]
    fn replies_give_their_code_and_output() {
        assert_eq!(parse_reply(b"0\n").unwrap(), (0, String::new()));
        assert_eq!(
            parse_reply(b"1\nUnknown diagnostic command\n").unwrap(),
            (1, "Unknown diagnostic command".into())
        );
        assert!(parse_reply(b"").is_err());
        assert!(parse_reply(b"garbage\n").is_err());
    }

    #[test]
    fn status_gives_the_namespace_pid_effective_ids_and_sigquit() {
        let text = "Name:\tjava\nUid:\t1000\t1001\t1000\t1000\nGid:\t50\t51\t50\t50\nNSpid:\t4242\t7\n\
                    SigCgt:\t2000000181005ccf\n";
        let st = Status::parse(text).unwrap();
        assert_eq!((st.ns_pid, st.euid, st.egid, st.catches_quit), (7, 1001, 51, true));
        let st = Status::parse(&text.replace("2000000181005ccf", "0000000181005cc8")).unwrap();
        assert!(!st.catches_quit);
    }

    #[test]
    fn a_disabled_attach_mechanism_is_seen_on_the_command_line_and_in_option_variables() {
        let cmd = b"java\0-XX:+DisableAttachMechanism\0Main\0";
        assert!(attach_disabled(cmd, b"").unwrap().contains("command line"));
        let env = b"HOME=/root\0JAVA_TOOL_OPTIONS=-Xmx1g -XX:+DisableAttachMechanism\0";
        assert!(attach_disabled(b"java\0Main\0", env).unwrap().contains("JAVA_TOOL_OPTIONS"));
        assert_eq!(
            attach_disabled(b"java\0-XX:-DisableAttachMechanism\0Main\0", b"X=-XX:+DisableAttachMechanism\0"),
            None
        );
    }
}
