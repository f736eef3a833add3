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
