//! What a blocked syscall waits on, in words, from its arguments and /proc: the file, pipe or socket
//! behind a descriptor (and the peer of a TCP socket), a futex's address and operation, the descriptors
//! an epoll instance or a poll watches, a sleep's length. Reads only /proc files and the target's
//! memory file; never changes the target.

use std::os::unix::fs::FileExt;
use whyslow_model::stacks::Syscall;

/// Most descriptors named for one poll or epoll.
const MAX_FDS: usize = 8;

/// What syscall `s` of process `pid` waits on, empty where its arguments say nothing more.
pub(crate) fn waits_on(pid: u32, s: &Syscall) -> String {
    let a = &s.args;
    match s.name.as_str() {
        "read" | "write" | "readv" | "writev" | "pread64" | "pwrite64" | "preadv" | "pwritev" | "preadv2"
        | "pwritev2" | "recvfrom" | "recvmsg" | "recvmmsg" | "sendto" | "sendmsg" | "sendmmsg" | "accept"
        | "accept4" | "connect" | "fsync" | "fdatasync" | "flock" | "fcntl" | "ioctl" | "splice"
        | "sendfile" | "shutdown" => fd(pid, a[0] as i32),
        "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => {
            let watched = epoll_fds(pid, a[0] as i32);
            let mut w = fd(pid, a[0] as i32);
            if !watched.is_empty() {
                w.push_str(&format!(" watching {}", fd_list(pid, &watched)));
            }
            w
        }
        "poll" | "ppoll" => {
            let fds = poll_fds(pid, a[0], a[1] as usize);
            format!("{} fd{}: {}", a[1], if a[1] == 1 { "" } else { "s" }, fd_list(pid, &fds))
        }
        "select" | "pselect6" => format!("fds below {}", a[0]),
        "futex" => futex(a[0], a[1]),
        "futex_waitv" => format!("{} futexes", a[1]),
        "nanosleep" => sleep(pid, a[0]),
        "clock_nanosleep" => sleep(pid, a[2]),
        "wait4" | "waitid" => match a[if s.name == "wait4" { 0 } else { 1 }] as i32 {
            p if p > 0 => format!("child {p}"),
            _ => "any child".into(),
        },
        _ => String::new(),
    }
}

/// `fd N: what it is` (the link's target; a TCP socket with its addresses and state).
fn fd(pid: u32, n: i32) -> String {
    match std::fs::read_link(format!("/proc/{pid}/fd/{n}")) {
        Ok(p) => {
            let target = p.to_string_lossy().into_owned();
            match socket_inode(&target).and_then(|i| tcp_socket(pid, i)) {
                Some(tcp) => format!("fd {n}: {target} {tcp}"),
                None => format!("fd {n}: {target}"),
            }
        }
        Err(_) => format!("fd {n}"),
    }
}

/// Several descriptors, each with what it is, at most [`MAX_FDS`].
fn fd_list(pid: u32, fds: &[i32]) -> String {
    let mut parts: Vec<String> = fds.iter().take(MAX_FDS).map(|&n| fd(pid, n)).collect();
    if fds.len() > MAX_FDS {
        parts.push(format!("{} more", fds.len() - MAX_FDS));
    }
    parts.join(", ")
}

/// The inode of a `socket:[N]` link target.
fn socket_inode(target: &str) -> Option<u64> {
    target.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// A TCP socket of the process's network namespace by inode: `tcp 127.0.0.1:8080 -> 10.0.0.2:51234
/// ESTABLISHED`, or `tcp 0.0.0.0:8080 LISTEN`.
fn tcp_socket(pid: u32, inode: u64) -> Option<String> {
    for (file, v6) in [("tcp", false), ("tcp6", true)] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")).ok()?;
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[9].parse::<u64>().ok() != Some(inode) {
                continue;
            }
            let state = match f[3] {
                "01" => "ESTABLISHED",
                "02" => "SYN_SENT",
                "06" => "TIME_WAIT",
                "08" => "CLOSE_WAIT",
                "0A" => "LISTEN",
                _ => "",
            };
            let local = address(f[1], v6)?;
            return Some(match state {
                "LISTEN" => format!("(tcp {local} LISTEN)"),
                _ => format!("(tcp {local} -> {} {state})", address(f[2], v6)?).replace(" )", ")"),
            });
        }
    }
    None
}

/// An address of /proc/net/tcp (`0100007F:1F90`: the address's words in host order, the port in hex).
fn address(hex: &str, v6: bool) -> Option<String> {
    let (addr, port) = hex.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(&addr[8 * i..8 * i + 8], 16).map(u32::from_be))
        .collect::<Result<_, _>>()
        .ok()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
    Some(if v6 {
        let b: [u8; 16] = bytes.try_into().ok()?;
        format!("[{}]:{port}", std::net::Ipv6Addr::from(b))
    } else {
        let b: [u8; 4] = bytes.try_into().ok()?;
        format!("{}:{port}", std::net::Ipv4Addr::from(b))
    })
}

/// The descriptors epoll instance `epfd` watches (its fdinfo's `tfd:` lines).
fn epoll_fds(pid: u32, epfd: i32) -> Vec<i32> {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{epfd}")).unwrap_or_default();
    info.lines().filter_map(|l| l.strip_prefix("tfd:")?.split_whitespace().next()?.parse().ok()).collect()
}

/// The descriptors of a poll's `struct pollfd` array (8 bytes each, the fd first), read from the
/// target's memory.
fn poll_fds(pid: u32, at: u64, n: usize) -> Vec<i32> {
    let mut buf = vec![0u8; 8 * n.min(64)];
    if !read(pid, at, &mut buf) {
        return Vec::new();
    }
    buf.chunks(8).map(|c| i32::from_ne_bytes(c[..4].try_into().expect("4 bytes"))).collect()
}

/// A futex's address and what it waits for.
fn futex(addr: u64, op: u64) -> String {
    let what = match op & 0x7f {
        0 => "wait",
        9 => "wait (bitset)",
        6 | 13 => "lock (priority inheritance)",
        11 => "wait (requeue to a priority-inheritance lock)",
        _ => "",
    };
    match what {
        "" => format!("futex {addr:#x}"),
        w => format!("futex {addr:#x} {w}"),
    }
}

/// The length of a sleep from its `struct timespec` in the target's memory.
fn sleep(pid: u32, at: u64) -> String {
    let mut buf = [0u8; 16];
    if !read(pid, at, &mut buf) {
        return String::new();
    }
    let sec = i64::from_ne_bytes(buf[..8].try_into().expect("8 bytes"));
    let nsec = i64::from_ne_bytes(buf[8..].try_into().expect("8 bytes"));
    format!("for {:.3} s", sec as f64 + nsec as f64 / 1e9)
}

/// Fills `buf` from address `at` of process `pid` (its memory file: no stop, no attach).
fn read(pid: u32, at: u64, buf: &mut [u8]) -> bool {
    std::fs::File::open(format!("/proc/{pid}/mem")).is_ok_and(|f| f.read_exact_at(buf, at).is_ok())
}

#[cfg(test)]
mod tests {
    use super::{address, futex, socket_inode};

    #[test]
    fn proc_net_addresses_read_in_host_order() {
        assert_eq!(address("0100007F:1F90", false).as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(address("00000000000000000000000001000000:0050", true).as_deref(), Some("[::1]:80"));
        assert_eq!(socket_inode("socket:[12345]"), Some(12345));
        assert_eq!(socket_inode("pipe:[12345]"), None);
    }

    #[test]
    fn futex_operations_are_named_with_the_private_flag_masked() {
        assert_eq!(futex(0x1000, 128), "futex 0x1000 wait");
        assert_eq!(futex(0x1000, 9 | 128 | 256), "futex 0x1000 wait (bitset)");
        assert_eq!(futex(0x1000, 1), "futex 0x1000");
    }
}
