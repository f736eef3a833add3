//! The processes of the machine as the matchers see them, read through record's procfs view.
//!
//! Reading every process's files on every scan costs about 1% of a core with 80 processes at four scans a
//! second, so [`Procs`] keeps the views and listens to the kernel's process events (the netlink proc
//! connector: fork, exec, comm change, exit) to re-read only the processes that changed. A full rescan
//! still runs every [`FULL_SCAN`], and at once when events were lost (the socket buffer overflowed) or
//! when the connector is unavailable (then every scan is full).

use crate::spec::ProcessView;
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};
use whyslow_record::procfs::{self, Stat};

/// How often the views are rebuilt from /proc even when events say nothing changed.
const FULL_SCAN: Duration = Duration::from_secs(30);

/// The processes of the machine, kept up to date.
pub struct Procs {
    views: BTreeMap<u32, ProcessView>,
    events: Option<OwnedFd>,
    last_full: Instant,
    pub full_scans: u64,
}

impl Procs {
    pub fn new() -> Procs {
        // Listen first, then scan: nothing that happens in between is missed.
        let events = listen();
        let mut p = Procs { views: BTreeMap::new(), events, last_full: Instant::now(), full_scans: 0 };
        p.full();
        p
    }

    fn full(&mut self) {
        self.views = scan().into_iter().map(|v| (v.pid, v)).collect();
        self.last_full = Instant::now();
        self.full_scans += 1;
    }

    /// The processes now.
    pub fn refresh(&mut self) -> &BTreeMap<u32, ProcessView> {
        let changed = match &self.events {
            Some(fd) => drain(fd),
            None => None,
        };
        match changed {
            Some(Changes { reread, exited }) if self.last_full.elapsed() < FULL_SCAN => {
                for pid in exited {
                    self.views.remove(&pid);
                }
                for pid in reread {
                    match read(pid) {
                        Some(v) if pid != std::process::id() => {
                            self.views.insert(pid, v);
                        }
                        _ => {
                            self.views.remove(&pid);
                        }
                    }
                }
            }
            _ => self.full(),
        }
        &self.views
    }
}

/// Processes to read again and processes that ended, from the events since the last drain.
struct Changes {
    reread: BTreeSet<u32>,
    exited: BTreeSet<u32>,
}

const NETLINK_CONNECTOR: i32 = 11;
const CN_IDX_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_EVENT_FORK: u32 = 0x1;
const PROC_EVENT_EXEC: u32 = 0x2;
const PROC_EVENT_COMM: u32 = 0x200;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;
/// nlmsghdr (16 bytes) + cn_msg (20): where struct proc_event begins; its union follows what, cpu and
/// timestamp (16 bytes).
const EVENT_AT: usize = 36;
const DATA_AT: usize = EVENT_AT + 16;

/// A non-blocking netlink socket subscribed to process events, or None where the kernel refuses.
fn listen() -> Option<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned right away.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            NETLINK_CONNECTOR,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is a new descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain data; zeroed is a valid value.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    addr.nl_groups = CN_IDX_PROC;
    // SAFETY: addr is a valid sockaddr_nl of the given size.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &addr as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if r != 0 {
        return None;
    }
    let mut msg = Vec::with_capacity(40);
    msg.extend_from_slice(&40u32.to_ne_bytes()); // nlmsg_len
    msg.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
    msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
    msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel assigns
    msg.extend_from_slice(&CN_IDX_PROC.to_ne_bytes()); // cb_id.idx
    msg.extend_from_slice(&1u32.to_ne_bytes()); // cb_id.val (CN_VAL_PROC)
    msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // ack
    msg.extend_from_slice(&4u16.to_ne_bytes()); // len
    msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
    msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
    // SAFETY: msg is a live buffer of msg.len() bytes.
    let sent = unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr() as *const libc::c_void, msg.len(), 0) };
    (sent == msg.len() as isize).then_some(fd)
}

/// Reads every pending event; None when some were lost (the caller rescans everything).
fn drain(fd: &OwnedFd) -> Option<Changes> {
    let mut c = Changes { reread: BTreeSet::new(), exited: BTreeSet::new() };
    let mut buf = [0u8; 8192];
    loop {
        // SAFETY: buf is a live buffer of buf.len() bytes.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Some(c),
                Some(libc::EINTR) => continue,
                // ENOBUFS: the kernel dropped events.
                _ => None,
            };
        }
        let mut msg = &buf[..n as usize];
        while msg.len() >= DATA_AT + 8 {
            let len = (u32::from_ne_bytes(msg[..4].try_into().expect("4 bytes")) as usize)
                .clamp(DATA_AT + 8, msg.len());
            let u32_at = |at: usize| u32::from_ne_bytes(msg[at..at + 4].try_into().expect("4 bytes"));
            let what = u32_at(EVENT_AT);
            match what {
                // Forks of processes (not threads): the child, as it is now.
                PROC_EVENT_FORK if len >= DATA_AT + 16 && u32_at(DATA_AT + 8) == u32_at(DATA_AT + 12) => {
                    c.reread.insert(u32_at(DATA_AT + 12));
                }
                PROC_EVENT_EXEC | PROC_EVENT_COMM => {
                    c.reread.insert(u32_at(DATA_AT + 4));
                }
                PROC_EVENT_EXIT if u32_at(DATA_AT) == u32_at(DATA_AT + 4) => {
                    let pid = u32_at(DATA_AT);
                    c.reread.remove(&pid);
                    c.exited.insert(pid);
                }
                _ => {}
            }
            msg = &msg[len.next_multiple_of(4).min(msg.len())..];
        }
    }
}

/// Every process now (kernel threads and whyslow itself left out).
pub fn scan() -> Vec<ProcessView> {
    let me = std::process::id();
    procfs::pids().into_iter().filter(|&pid| pid != me).filter_map(read).collect()
}

/// One process, or None when it is gone or a kernel thread (no command line).
pub fn read(pid: u32) -> Option<ProcessView> {
    let stat = Stat::read(pid).filter(|s| !s.ended())?;
    let cmdline = procfs::cmdline(pid)?;
    Some(view(stat, cmdline))
}

/// The matchers' view of a process read as `stat`, with its command line.
fn view(stat: Stat, cmdline: String) -> ProcessView {
    let Stat { pid, ppid, comm, start_ticks, .. } = stat;
    ProcessView { pid, ppid, comm, cmdline, cgroup: cgroup_of(pid), start_ticks }
}

/// Process `pid`'s cgroup v2 path ("" when it has none or is gone).
fn cgroup_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("0::").map(str::to_string)))
        .unwrap_or_default()
}

/// A process the whole-host sampling just sampled, as far as it can still be read: None for a kernel
/// thread or a process whose /proc entry is gone. One that ended but is not reaped yet (a zombie) keeps
/// its name, parent and cgroup (not its command line).
pub fn read_sampled(pid: u32) -> Option<ProcessView> {
    let stat = Stat::read(pid).filter(|s| !s.kernel_thread())?;
    Some(view(stat, procfs::cmdline(pid).unwrap_or_default()))
}

/// The agent's own CPU seconds and resident bytes, from /proc/self.
pub fn own_usage() -> (f64, u64) {
    // SAFETY: sysconf takes no pointers.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let ticks = Stat::own().map_or(0, |s| s.utime_ticks + s.stime_ticks);
    let rss_pages: u64 = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split(' ').nth(1)?.parse().ok())
        .unwrap_or(0);
    (ticks as f64 / procfs::ticks_per_second() as f64, rss_pages * page.max(1) as u64)
}

#[cfg(test)]
mod tests {
    /// A child started after the watcher is seen through events (not a full scan), and its exit too.
    #[test]
    fn events_show_new_and_ended_processes_without_rescanning() {
        let mut p = super::Procs::new();
        if p.events.is_none() {
            eprintln!("no proc connector here: every scan is full");
            return;
        }
        let before = p.full_scans;
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let v = p.refresh().get(&pid).cloned().expect("the child is listed");
        assert_eq!((v.comm.as_str(), v.cmdline.as_str()), ("sleep", "sleep 30"));
        child.kill().unwrap();
        child.wait().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!p.refresh().contains_key(&pid), "the ended child is gone");
        assert_eq!(p.full_scans, before, "no full scan was needed");
    }

    /// A sampled process is read with its name and start time; a kernel thread is nobody's.
    #[test]
    fn a_sampled_process_is_read_and_a_kernel_thread_is_not() {
        let me = super::read_sampled(std::process::id()).expect("this process");
        assert_eq!(me, super::read(std::process::id()).expect("read as a scan does"));
        assert_eq!(super::read_sampled(2), None, "kthreadd is a kernel thread");
        assert_eq!(super::read_sampled(u32::MAX), None, "no such process");
    }

    #[test]
    fn reads_our_parent_and_skips_ourselves() {
        let me = std::process::id();
        let parent = std::os::unix::process::parent_id();
        let all = super::scan();
        assert!(all.iter().all(|p| p.pid != me));
        let p = all.iter().find(|p| p.pid == parent).expect("the parent is listed");
        assert!(!p.comm.is_empty() && !p.cmdline.is_empty() && p.start_ticks > 0);
        assert!(all.iter().all(|p| p.pid != 2), "kthreadd is a kernel thread");
    }
}
