//! What a program's reads come from or its writes go to (a socket, a pipe, a terminal, a file), told by
//! the kernel functions under the syscalls in the CPU samples: shared by tiny-reads and small-writes.

use super::named;
use crate::doctor::facts::{Facts, Func};

/// Which way the bytes move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Read,
    Write,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Socket,
    Pipe,
    Terminal,
    File,
}

impl Endpoint {
    const ALL: [Endpoint; 4] = [Endpoint::Socket, Endpoint::Pipe, Endpoint::Terminal, Endpoint::File];

    pub fn name(self, d: Direction) -> &'static str {
        match (self, d) {
            (Endpoint::Socket, _) => "a socket",
            (Endpoint::Pipe, _) => "a pipe",
            (Endpoint::Terminal, _) => "a terminal",
            (Endpoint::File, Direction::Read) => "a file",
            (Endpoint::File, Direction::Write) => "a file or device",
        }
    }

    fn matches(self, d: Direction, f: &Func) -> bool {
        use Direction::{Read, Write};
        f.kernel
            && match (self, d) {
                (Endpoint::Socket, Read) => named(
                    f.name,
                    &["sock_read_iter", "sock_recvmsg", "__sys_recvfrom", "____sys_recvmsg", "__sys_recvmsg"],
                    &[
                        "tcp_recvmsg",
                        "unix_stream_recvmsg",
                        "unix_dgram_recvmsg",
                        "udp_recvmsg",
                        "inet_recvmsg",
                    ],
                ),
                (Endpoint::Socket, Write) => named(
                    f.name,
                    &["sock_write_iter", "sock_sendmsg", "__sys_sendto", "____sys_sendmsg", "__sock_sendmsg"],
                    &[
                        "tcp_sendmsg",
                        "unix_stream_sendmsg",
                        "unix_dgram_sendmsg",
                        "udp_sendmsg",
                        "inet_sendmsg",
                    ],
                ),
                (Endpoint::Pipe, Read) => named(f.name, &["pipe_read"], &[]),
                (Endpoint::Pipe, Write) => named(f.name, &["pipe_write"], &[]),
                (Endpoint::Terminal, Read) => named(f.name, &["tty_read", "n_tty_read"], &[]),
                (Endpoint::Terminal, Write) => {
                    named(f.name, &["tty_write", "file_tty_write", "n_tty_write"], &[])
                }
                (Endpoint::File, Read) => {
                    named(f.name, &["filemap_read", "generic_file_read_iter", "read_zero"], &[])
                        || f.name.ends_with("_file_read_iter")
                }
                (Endpoint::File, Write) => {
                    named(f.name, &["generic_perform_write", "write_null", "iter_file_splice_write"], &[])
                        || f.name.ends_with("_file_write_iter")
                        || f.name.ends_with("_buffered_write_iter")
                }
            }
    }
}

/// The endpoint most of the sampled CPU time of the reads or writes went to (over half of the time that
/// shows one), and that share. `also` adds functions that count for an endpoint besides its own.
pub fn dominant(f: &Facts, d: Direction, also: impl Fn(Endpoint, &Func) -> bool) -> Option<(Endpoint, f64)> {
    let by: Vec<(Endpoint, i64)> =
        Endpoint::ALL.iter().map(|&e| (e, f.cpu(&|x: &Func| e.matches(d, x) || also(e, x)).value)).collect();
    let seen: i64 = by.iter().map(|x| x.1).sum();
    let (e, v) = by.into_iter().max_by_key(|x| x.1)?;
    (v * 2 > seen).then(|| (e, 100.0 * v as f64 / seen as f64))
}

/// A frame of the syscall `name` itself: its kernel entry (`__x64_sys_writev`, `ksys_write`,
/// `do_writev`, `__sys_sendto`) or the C library's wrapper of that name (`__GI___libc_write`).
pub fn of_syscall(f: &Func, name: &str) -> bool {
    if f.kernel {
        return ["__x64_sys_", "ksys_", "do_", "__sys_"].iter().any(|p| f.name.strip_prefix(p) == Some(name));
    }
    let aliases: &[&str] = match name {
        "pwrite64" => &["pwrite"],
        "sendto" => &["send"],
        _ => &[],
    };
    !f.is_user_code() && (f.plain() == name || aliases.contains(&f.plain()))
}

/// What the syscall `name` writes to or reads from, told by the kernel code under it in the CPU
/// samples (over half of the time that shows one), and that share: a program's `write` may go to a log
/// file while its `writev` answers sockets.
pub fn sink_of_syscall(f: &Facts, d: Direction, name: &str) -> Option<(Endpoint, f64)> {
    let by: Vec<(Endpoint, i64)> = Endpoint::ALL
        .iter()
        .map(|&e| (e, f.cpu_below(&|x: &Func| of_syscall(x, name), &|x: &Func| e.matches(d, x)).value))
        .collect();
    let seen: i64 = by.iter().map(|x| x.1).sum();
    let (e, v) = by.into_iter().max_by_key(|x| x.1)?;
    (v * 2 > seen).then(|| (e, 100.0 * v as f64 / seen as f64))
}
