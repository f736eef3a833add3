//! Files of a target as the target sees them: its executable and libraries through its root directory
//! (`/proc/PID/root`: a container's files, a chroot's), and the perf map its JIT writes. The one place that
//! builds paths into a target's mount namespace; it reads files and /proc only, never the target's memory.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use whyslow_convert::{Foreign, JitMap, JitUpdate};
use whyslow_model::raw::KeptFile;

/// The path `path` of process `pid` has here while the process runs (through its root directory).
pub fn through_root(pid: u32, path: &str) -> std::path::PathBuf {
    format!("/proc/{pid}/root{path}").into()
}

/// Opens `path` as process `pid` sees it, or (the process gone) as it is here.
pub fn open(pid: u32, path: &str) -> std::io::Result<File> {
    File::open(through_root(pid, path)).or_else(|_| File::open(path))
}

/// (device, inode) of what a path names, following links.
fn identity(path: &str) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether `pid` sees this machine's files under the same paths: the same mount namespace and the same
/// root directory.
fn sees_our_files(pid: u32) -> bool {
    let ns = identity(&format!("/proc/{pid}/ns/mnt"));
    let root = identity(&format!("/proc/{pid}/root"));
    ns.is_some() && ns == identity("/proc/self/ns/mnt") && root.is_some() && root == identity("/")
}

/// The file `path` of `pid` where that path names another file here, or none (see
/// [`whyslow_convert::Host::foreign`]).
pub fn foreign(pid: u32, path: &str) -> Option<Foreign> {
    if !path.starts_with('/') || sees_our_files(pid) {
        return None;
    }
    let file = File::open(through_root(pid, path)).ok()?;
    let m = file.metadata().ok()?;
    let id = (m.dev(), m.ino());
    if identity(path) == Some(id) {
        return None;
    }
    Some(Foreign { file: KeptFile(Arc::new(file)), id })
}

/// The pid of `pid` in its own pid namespace (what it names its perf map by), from `NSpid` in its status.
fn pid_inside(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// When `pid` started, in whole unix seconds (rounded down): boot time plus its start in clock ticks.
fn started_at(pid: u32) -> Option<i64> {
    let ticks = crate::procfs::Stat::read(pid)?.start_ticks as i64;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: i64 = boot.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    let hz = crate::procfs::ticks_per_second() as i64;
    Some(btime + ticks / hz)
}

/// The most of a perf map read at one time (a JIT writes a line per compiled function; a map past this is
/// read in steps as addresses in it are asked for).
const MAX_MAP_READ: u64 = 64 << 20;

/// What process `pid` published about its JIT code past byte `from`: its perf map, or else the jitdump
/// file at `dump` it mapped (how a JIT shows profilers where that file is).
pub fn jit(pid: u32, from: u64, dump: Option<&str>) -> Option<JitUpdate> {
    perf_map(pid, from).or_else(|| jitdump(pid, from, dump?))
}

/// The jitdump file `path` of `pid`, read whole when it grew past `from` bytes (its records are read
/// again; the newest entry for an address wins).
fn jitdump(pid: u32, from: u64, path: &str) -> Option<JitUpdate> {
    let mut file = open(pid, path).ok()?;
    let len = file.metadata().ok()?.len();
    if len <= from || len > MAX_MAP_READ {
        return None;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let (map, stats) = JitMap::parse_jitdump(&bytes).ok()?;
    Some(JitUpdate::symbols(path.to_string(), map, stats.skipped, bytes.len() as u64))
}

/// What process `pid` wrote to its perf map (`/tmp/perf-PID.map`, PID as the process knows itself) past
/// byte `from`, complete lines only. The map is read through the process's root while it runs, and from
/// this machine's /tmp once it is gone (where a process of this namespace left it).
pub(crate) fn perf_map(pid: u32, from: u64) -> Option<JitUpdate> {
    let inside = pid_inside(pid).unwrap_or(pid);
    let name = whyslow_symbols::jit::perf_map_name(inside);
    let (mut file, source) = match File::open(format!("/proc/{pid}/root/tmp/{name}")) {
        Ok(f) => (f, format!("/tmp/{name}")),
        Err(_) if inside == pid => (File::open(format!("/tmp/{name}")).ok()?, format!("/tmp/{name}")),
        Err(_) => return None,
    };
    let meta = file.metadata().ok()?;
    let len = meta.len();
    if len <= from || !meta.is_file() {
        return None;
    }
    // A map last written before the process started is a former process's under the same pid.
    if started_at(pid).is_some_and(|start| meta.mtime() < start) {
        return None;
    }
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut bytes = Vec::new();
    file.take((len - from).min(MAX_MAP_READ)).read_to_end(&mut bytes).ok()?;
    // A line being written is read next time.
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if complete == 0 {
        return None;
    }
    let (map, stats) = JitMap::parse_perf_map(&bytes[..complete]);
    Some(JitUpdate::symbols(source, map, stats.skipped, from + complete as u64))
}
