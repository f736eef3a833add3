//! Finding and starting the processes to profile: a launched command held at a gate until the profiler is
//! ready, existing processes by PID, or every process with a given name; waiting for a launched command
//! and ending it. Reads /proc only.

use crate::RecordError;
use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};
pub use whyslow_convert::Mapping;

/// What to profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Launch this command (argv) and profile it and everything it starts.
    Launch(Vec<String>),
    /// Attach to these running processes.
    Pids(Vec<u32>),
    /// Attach to every running process whose name (comm) is this.
    Comm(String),
    /// Every process of the host, now and later: one clock per CPU samples whatever runs there, and its
    /// side band (mappings, names, forks, execs and exits of every process) describes the processes,
    /// each read and unwound from its first sample on. CPU samples only.
    All,
}

/// A forked child blocked before exec until [`Gated::release`].
pub struct Gated {
    pub pid: u32,
    go: Option<OwnedFd>,
    exec_error: OwnedFd,
    /// Readable once the child has exited (pidfd_open): a run waiting for data wakes at the exit at
    /// once, not at its next poll timeout. None where the kernel has no pidfds (before 5.3).
    exited: Option<OwnedFd>,
}

/// A pipe's (read end, write end), both close-on-exec.
pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), RecordError> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(RecordError::Io("pipe".into(), std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 succeeded: both fds are new and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Gated {
    /// Forks; the child waits on a pipe, then execs `argv` (searching PATH), with `env` set in its
    /// environment (over what whyslow's has).
    pub fn spawn(argv: &[String], env: &[(String, String)]) -> Result<Gated, RecordError> {
        if argv.is_empty() {
            return Err(RecordError::NoCommand);
        }
        let cargs: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_str()).map_err(|_| RecordError::BadArgument(a.clone())))
            .collect::<Result<_, _>>()?;
        let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        // The environment is built before fork (the child may not allocate); none: whyslow's own.
        let cenv: Vec<CString> = if env.is_empty() {
            Vec::new()
        } else {
            use std::os::unix::ffi::OsStrExt;
            let set: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
            let kept = std::env::vars_os().filter(|(k, _)| !set.iter().any(|s| k.as_bytes() == s.as_bytes()));
            let mut all: Vec<Vec<u8>> =
                kept.map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes()].concat()).collect();
            all.extend(env.iter().map(|(k, v)| format!("{k}={v}").into_bytes()));
            all.into_iter().filter_map(|e| CString::new(e).ok()).collect()
        };
        let mut envp: Vec<*const libc::c_char> = cenv.iter().map(|c| c.as_ptr()).collect();
        envp.push(std::ptr::null());
        let (go_r, go_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        // SAFETY: the child only makes async-signal-safe calls (read, execvp, write, _exit) before exec.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(RecordError::Io("fork".into(), std::io::Error::last_os_error()));
        }
        if pid == 0 {
            // Child: only async-signal-safe calls from here to exec.
            // SAFETY: async-signal-safe calls only, on fds and argv pointers prepared before fork.
            unsafe {
                let mut b = 0u8;
                libc::close(go_w.as_raw_fd());
                libc::close(err_r.as_raw_fd());
                if libc::read(go_r.as_raw_fd(), &mut b as *mut u8 as *mut _, 1) != 1 {
                    libc::_exit(127); // the profiler gave up before releasing us
                }
                if cenv.is_empty() {
                    libc::execvp(ptrs[0], ptrs.as_ptr());
                } else {
                    libc::execvpe(ptrs[0], ptrs.as_ptr(), envp.as_ptr());
                }
                let e = *libc::__errno_location();
                libc::write(err_w.as_raw_fd(), &e as *const i32 as *const _, 4);
                libc::_exit(127);
            }
        }
        drop(go_r);
        drop(err_w);
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd (or -1), owned by nobody else.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        // SAFETY: a non-negative result is a new fd that only this OwnedFd closes.
        let exited = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) });
        Ok(Gated { pid: pid as u32, go: Some(go_w), exec_error: err_r, exited })
    }

    /// An fd that polls readable once the child exited (see `exited`).
    pub(crate) fn exit_fd(&self) -> Option<i32> {
        self.exited.as_ref().map(|f| f.as_raw_fd())
    }

    /// Lets the child exec; fails when exec itself failed (command not found, not executable).
    pub fn release(&mut self, command: &str) -> Result<(), RecordError> {
        if let Some(go) = self.go.take() {
            let one = [1u8];
            // SAFETY: one byte from a live array to an open pipe.
            unsafe { libc::write(go.as_raw_fd(), one.as_ptr() as *const _, 1) };
        }
        let mut f =
            std::fs::File::from(self.exec_error.try_clone().map_err(|e| RecordError::Io("dup".into(), e))?);
        let mut buf = [0u8; 4];
        match f.read(&mut buf) {
            Ok(4) => {
                let err = std::io::Error::from_raw_os_error(i32::from_ne_bytes(buf));
                self.reap();
                Err(RecordError::Exec(command.to_string(), err))
            }
            _ => Ok(()),
        }
    }

    fn reap(&self) {
        let mut st = 0;
        // SAFETY: st is an int owned by this frame.
        unsafe { libc::waitpid(self.pid as i32, &mut st, 0) };
    }
}

/// A child that was never released (the profiler failed to set up) sees its gate close, exits, and is
/// reaped here.
impl Drop for Gated {
    fn drop(&mut self) {
        if self.go.take().is_some() {
            self.reap();
        }
    }
}

/// The process ids to follow, how to name them in the recording, and the gated child when launching.
pub(crate) type Resolved = (Vec<u32>, Vec<String>, Option<Gated>);

/// The target's processes; a command is launched (gated) with `env` in its environment.
pub(crate) fn resolve(target: &Target, env: &[(String, String)]) -> Result<Resolved, RecordError> {
    Ok(match target {
        Target::Launch(argv) => {
            let g = Gated::spawn(argv, env)?;
            (vec![g.pid], argv.clone(), Some(g))
        }
        Target::Pids(pids) => {
            if let Some(&p) = pids.iter().find(|&&p| !alive(p)) {
                return Err(RecordError::NoSuchProcess(p));
            }
            let list = pids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            (pids.clone(), vec!["-p".into(), list], None)
        }
        Target::Comm(name) => (pids_named(name)?, vec!["--comm".into(), name.clone()], None),
        Target::All => (Vec::new(), vec!["--all".into()], None),
    })
}

/// Thread ids of a process, from /proc/PID/task.
pub fn threads_of(pid: u32) -> Vec<u32> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    tids.sort_unstable();
    tids
}

pub fn comm_of(pid: u32, tid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
    Some(s.trim_end_matches('\n').to_string())
}

pub fn alive(pid: u32) -> bool {
    // A zombie still has /proc/PID; its stat state is Z.
    crate::procfs::Stat::read(pid).is_some_and(|s| !s.ended())
}

/// Tells whether processes still run, again and again over a run: by a pidfd kept open for each, which
/// polls readable once it ended (a zombie too). Reading /proc/PID/stat twice a second (opening it, the
/// kernel formatting its fields, closing it) was a twentieth of what recording a CPU-bound process cost.
/// Where the kernel has no pidfds (before 5.3), [`alive`].
#[derive(Default)]
pub struct Liveness {
    fds: std::collections::HashMap<u32, Option<OwnedFd>>,
}

impl Liveness {
    /// Whether process `pid` runs.
    pub fn alive(&mut self, pid: u32) -> bool {
        let fd = self.fds.entry(pid).or_insert_with(|| {
            // SAFETY: pidfd_open takes a pid and flags and returns a new fd (or -1), owned by nobody else.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            // SAFETY: a non-negative result is a new fd that only this OwnedFd closes.
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
        });
        let Some(fd) = fd else {
            // No such process when asked first (or no pidfds): asked each time, as before them.
            return alive(pid);
        };
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: p is one pollfd owned by this frame; a zero timeout returns at once.
        let ready = unsafe { libc::poll(&mut p, 1, 0) };
        ready == 0
    }

    /// Forgets the processes not in `pids` (closing their pidfds).
    pub fn keep(&mut self, pids: &[u32]) {
        self.fds.retain(|pid, _| pids.contains(pid));
    }
}

/// CPU time (user + system) process `pid` has used, in ns (0 once it is gone): its process CPU clock, the
/// scheduler's own sum over its threads. (Parsing /proc/PID/stat instead, every 20 ms for the probe
/// budget, cost the doctor 9 ms of CPU a second watching 10 PostgreSQL processes.)
pub fn cpu_time_ns(pid: u32) -> u64 {
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock and ts are owned by this frame; each call writes only its out-parameter.
    let read = unsafe {
        libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) == 0
            && libc::clock_gettime(clock, &mut ts) == 0
    };
    if read {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        0
    }
}

/// PIDs of processes whose comm equals `name` (compared on the kernel's 15-byte comm), except ourselves.
pub fn pids_by_comm(name: &str) -> Vec<u32> {
    let want: String = name.chars().take(15).collect();
    let me = std::process::id();
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|&p| p != me)
                .filter(|&p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim_end_matches('\n') == want)
                })
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

/// Names of running processes, for "did you mean" suggestions.
pub fn all_comms() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| {
                let name = e.ok()?.file_name();
                name.to_str()?.parse::<u32>().ok()?;
                std::fs::read_to_string(format!("/proc/{}/comm", name.to_str()?)).ok()
            })
            .map(|c| c.trim_end_matches('\n').to_string())
            .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.dedup();
    v
}

/// The executable file mappings of a live process, from /proc/PID/maps.
pub fn exec_maps(pid: u32) -> Vec<Mapping> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return Vec::new() };
    text.lines().filter_map(Mapping::from_maps_line).collect()
}

/// Every running process named `name`, or an error with the names that look like it.
pub fn pids_named(name: &str) -> Result<Vec<u32>, RecordError> {
    let pids = pids_by_comm(name);
    if pids.is_empty() {
        let all = all_comms();
        let suggestions = whyslow_model::close_matches(name, all.iter().map(String::as_str), 5);
        return Err(RecordError::NoSuchComm { name: name.to_string(), suggestions });
    }
    Ok(pids)
}

/// The file `cmd` runs: itself when it has a slash, else the first executable of that name on PATH.
pub fn program_path(cmd: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable =
        |p: &std::path::Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if cmd.contains('/') {
        let p = std::path::PathBuf::from(cmd);
        return runnable(&p).then_some(p);
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    path.split(':').map(|d| std::path::Path::new(d).join(cmd)).find(|p| runnable(p))
}

/// Whether process `pid` of `target` runs a Go program (a launched one: will run, once it execs).
pub(crate) fn runs_go(target: &Target, pid: u32) -> bool {
    let exe = match target {
        Target::Launch(argv) => argv.first().and_then(|c| program_path(c)),
        _ => Some(format!("/proc/{pid}/exe").into()),
    };
    let Some(file) = exe.and_then(|p| std::fs::File::open(p).ok()) else { return false };
    let Ok(bytes) = whyslow_unwind::FileBytes::map(&file) else { return false };
    object::File::parse(&*bytes).is_ok_and(|o| whyslow_unwind::is_go(&o))
}

/// Whether a launched command may run CPython (its Python frames need a ring): the program is a Python
/// interpreter or links libpython, or is a script that names python (a `#!` line, pyenv's shims).
pub(crate) fn may_run_python(target: &Target) -> bool {
    let Target::Launch(argv) = target else { return true };
    let Some(path) = argv.first().and_then(|c| program_path(c)) else { return false };
    let real = std::fs::canonicalize(&path).unwrap_or(path);
    if whyslow_python::looks_like_python(&real.to_string_lossy()) {
        return true;
    }
    let Ok(file) = std::fs::File::open(&real) else { return false };
    let Ok(bytes) = whyslow_unwind::FileBytes::map(&file) else { return false };
    let has = |b: &[u8], what: &[u8]| b.windows(what.len()).any(|w| w == what);
    match bytes.starts_with(b"\x7fELF") {
        // The name of the library it needs is in its dynamic string table.
        true => has(&bytes, b"libpython3"),
        false => has(&bytes[..bytes.len().min(4096)], b"python"),
    }
}

/// The wait status of launched child `pid` if it ended.
pub(crate) fn try_wait(pid: u32) -> Option<i32> {
    let mut st = 0;
    // SAFETY: waitpid only writes the status integer we own.
    let r = unsafe { libc::waitpid(pid as i32, &mut st, libc::WNOHANG) };
    (r == pid as i32).then_some(st)
}

/// Whether launched child `pid` ended, without reaping it: its /proc entry (fault counts, the main
/// thread's schedstat) stays readable until [`try_wait`] reaps it.
pub(crate) fn ended_unreaped(pid: u32) -> bool {
    // SAFETY: an all-zero siginfo_t is a valid value; waitid only writes into the one we own.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; WNOWAIT leaves the child waitable.
    let r =
        unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
    // SAFETY: si_pid is set by waitid when a child was found (0 otherwise, from the zeroed value).
    r == 0 && unsafe { info.si_pid() } == pid as i32
}

/// The exit code of a wait status: its status, or 128 + the signal that killed it.
pub fn exit_code_of(st: i32) -> i32 {
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        128 + libc::WTERMSIG(st)
    }
}

/// Waits for a launched command left running ([`crate::RecordOptions::leave_running`]) to end by itself
/// until `deadline`, or ends it ([`stop_launched`]) then or once a stop is requested (Ctrl-C, SIGTERM).
/// Returns its wait status when it ended by itself, else the exit code of [`stop_launched`] as `Err`.
pub fn wait_launched(pid: u32, deadline: Option<Instant>) -> Result<i32, i32> {
    loop {
        if let Some(status) = try_wait(pid) {
            return Ok(status);
        }
        if crate::signals::stop_requested() || deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(stop_launched(pid));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ends a launched command that outlived the recording (or was left running by
/// [`RecordOptions::leave_running`]): SIGTERM, then SIGKILL after a grace period. Returns its exit code.
pub fn stop_launched(pid: u32) -> i32 {
    // SAFETY: kill takes no pointers.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Some(status) = try_wait(pid) {
            return exit_code_of(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill takes no pointers.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let mut st = 0;
    // SAFETY: st is an int owned by this frame.
    unsafe { libc::waitpid(pid as i32, &mut st, 0) };
    exit_code_of(st)
}

/// Lowers the calling thread's CPU priority (and that of the threads it starts later) to nice `nice`,
/// unless it is lower already: watching a live service, whyslow's own work yields the CPU to it.
pub fn yield_cpu(nice: i32) {
    // SAFETY: getpriority and setpriority take no pointers; `who` 0 is the calling thread.
    unsafe {
        if libc::getpriority(libc::PRIO_PROCESS, 0) < nice {
            libc::setpriority(libc::PRIO_PROCESS, 0, nice);
        }
    }
}

/// A module's path without the `/proc/PID/root` it was reached through: the path the target maps it as.
/// Symbolic links resolved (as /proc/PID/maps names files), within the process's root directory.
pub(crate) fn as_the_target_sees_it(module: &std::path::Path) -> String {
    let real = std::fs::canonicalize(module).unwrap_or_else(|_| module.to_path_buf());
    let pid = module.to_str().and_then(through_root_of);
    let root = pid.and_then(|pid| std::fs::canonicalize(format!("/proc/{pid}/root")).ok());
    match root.as_deref().and_then(|r| real.strip_prefix(r).ok()) {
        Some(inside) => format!("/{}", inside.display()),
        None => real.display().to_string(),
    }
}

/// The process whose root directory a `/proc/PID/root/...` path (how target modules are named) goes through.
fn through_root_of(path: &str) -> Option<u32> {
    path.strip_prefix("/proc/")?.split_once("/root/")?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::{alive, exec_maps, threads_of, yield_cpu, Liveness, Mapping};

    #[test]
    fn parses_maps_lines() {
        let m =
            Mapping::from_maps_line("7f00-7f80 r-xp 00001000 08:01 1234      /usr/lib/libc.so.6").unwrap();
        assert_eq!(
            (m.start, m.end, m.pgoff, m.path.as_str()),
            (0x7f00, 0x7f80, 0x1000, "/usr/lib/libc.so.6")
        );
        assert!(Mapping::from_maps_line("7f00-7f80 rw-p 00000000 00:00 0 [heap]").is_none());
        assert_eq!(
            Mapping::from_maps_line("7f00-7f80 r-xp 00000000 00:00 0  [vdso]").unwrap().path,
            "[vdso]"
        );
    }

    #[test]
    fn yielding_lowers_the_priority_only() {
        // A thread of its own: the test harness's other threads keep their priority.
        // The suite may run under nice already: what it starts at is never raised.
        std::thread::spawn(|| {
            // SAFETY: getpriority takes no pointers.
            let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            let start = nice();
            yield_cpu(5);
            assert_eq!(nice(), start.max(5));
            yield_cpu(3);
            assert_eq!(nice(), start.max(5));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn finds_ourselves_alive() {
        assert!(alive(std::process::id()));
        assert!(!threads_of(std::process::id()).is_empty());
        assert!(!exec_maps(std::process::id()).is_empty());
    }

    /// A child runs until it is killed; then it has ended while it is a zombie (not reaped yet), as
    /// [`alive`] says too; a pid with no process has ended.
    #[test]
    fn liveness_sees_a_process_end_before_it_is_reaped() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let mut live = Liveness::default();
        assert!(live.alive(pid) && alive(pid));
        // SAFETY: kill sends a signal to our own child, not reaped yet (its pid is still its).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let t0 = std::time::Instant::now();
        while live.alive(pid) && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!live.alive(pid), "the zombie has ended");
        assert!(!alive(pid), "as /proc says");
        child.wait().unwrap();
        live.keep(&[]);
        assert!(!live.alive(pid), "a pid with no process");
    }
}
