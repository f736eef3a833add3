//! tiny-reads: a program reading its input a few bytes per read()/recv() syscall, where one read into
//! a buffer would bring thousands. The bytes per call come from the exact syscall counters (their
//! results summed), what the reads come from (a file, a pipe, a socket) from the kernel frames under them
//! in the CPU samples; the advice follows the source. Needs no symbols of the program: the syscall
//! counters and the kernel's frames say it all.

use super::endpoint::{dominant, Direction, Endpoint};
use super::{finding, list, named, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::{TINY_READS_PCT, TINY_READS_RATE, TINY_READ_BYTES};
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "tiny-reads",
    title: "input read a few bytes per read syscall",
    why: "each read syscall costs a kernel entry and exit and a pass through the file or socket layer \
          (about a microsecond) whatever its size; reading a few bytes per call pays that for every few bytes \
          of input",
    fix: "read through a buffer: a FILE* (getc/fgets/fread; setvbuf for a larger buffer), BufReader in Rust, \
          bufio.Reader in Go, or read() 64 KB at a time and parse from memory (or mmap the file)",
    shrinks: "the read syscalls (their count in `whyslow syscalls`)",
};

const SOCKET_FIX: &str = "recv into a large buffer (16-64 KB) and parse the messages out of it, keeping a \
    partial one for the next recv (BufReader / bufio.Reader around the socket), instead of one recv per \
    field, header or byte";

const READS: [&str; 6] = ["read", "readv", "recvfrom", "recvmsg", "pread64", "preadv"];

fn in_read(f: &Func) -> bool {
    if f.kernel {
        named(
            f.name,
            &["ksys_read", "ksys_pread64", "do_readv"],
            &["__x64_sys_read", "__x64_sys_pread", "__x64_sys_recv", "__x64_sys_readv", "__x64_sys_preadv"],
        )
    } else {
        !f.is_user_code()
            && named(f.plain(), &["read", "pread64", "pread", "readv", "recv", "recvfrom", "recvmsg"], &[])
    }
}

/// The function of a buffered reader that refills its buffer with one read.
fn is_buffer_fill(f: &Func) -> bool {
    !f.kernel
        && (named(f.plain(), &["underflow", "uflow"], &[])
            || (f.name.contains("_IO_") && (f.name.ends_with("underflow") || f.name.ends_with("uflow")))
            || f.name.contains("BufReader") && f.name.contains("fill_buf")
            || f.name == "bufio.(*Reader).fill"
            || f.name == "bufio.(*Scanner).Scan")
}

pub fn check(f: &Facts) -> Verdict {
    if !f.has_syscalls() {
        return Verdict::NeedsData("syscall counters");
    }
    let r = f.syscall(&READS);
    let rate = r.calls as f64 / f.syscall_seconds().max(1e-9);
    let avg = r.bytes as f64 / r.calls.max(1) as f64;
    if rate < TINY_READS_RATE || avg > TINY_READ_BYTES {
        return Verdict::Clear;
    }
    let src = dominant(f, Direction::Read, |_, _| false);
    // A server reading one small request per read is paced by its clients, not by its buffer: as many
    // reads as writes on a socket is request/reply, which small-writes judges.
    let writes = f.syscall(&["write", "writev", "sendto", "sendmsg"]).calls;
    if src.is_some_and(|s| s.0 == Endpoint::Socket) && writes * 2 >= r.calls {
        return Verdict::Clear;
    }
    // A buffered reader (stdio, BufReader, bufio) that gets a few bytes per read got all there was: the
    // file is small (getaddrinfo reading /etc/hosts) or the pipe had little in it. A buffer is no fix;
    // a small file read again and again is repeated-lookups'.
    let (buffered, all) = f.syscall_stacks(&READS, &is_buffer_fill);
    if all > 0 && buffered.value * 2 > all {
        return Verdict::Clear;
    }
    let path = f.cpu(&in_read);
    if f.cpu_pct_surely(path.pct) < TINY_READS_PCT {
        return Verdict::Clear;
    }
    let wall_ns = f.syscall_wall_ns(&READS);
    let threads = match f.syscall_threads(&READS) {
        1 => "the reading thread's".to_string(),
        n => format!("the {n} reading threads'"),
    };
    let mut evidence = vec![
        format!(
            "{} read-family syscalls ({rate:.0}/s{}), {avg:.1} bytes per call on average",
            r.calls,
            f.syscall_window()
        ),
        format!(
            "{:.1}% of CPU time is in the read path (kernel included); {:.1}% of {threads} time is inside \
             them ({:.1} us per call)",
            path.pct,
            100.0 * r.total_ns as f64 / wall_ns,
            r.total_ns as f64 / r.calls.max(1) as f64 / 1e3
        ),
    ];
    if let Some((s, share)) = src {
        evidence.push(format!(
            "they read from {} ({share:.0}% of their sampled CPU time)",
            s.name(Direction::Read)
        ));
    }
    // The user function right above the C library's read names the reader (next_char, not main); a
    // program making the syscall itself (Go) has no such frame: its outermost user frame then.
    let (lib, all) = f.syscall_stacks(&READS, &|x: &Func| !x.kernel && in_read(x));
    let (user, _) = f.syscall_stacks(&READS, &|x: &Func| x.is_user_code());
    if all > 0 && !lib.sites.is_empty() {
        evidence.push(format!("issued from: {}", list(&lib.sites, all)));
    } else if all > 0 && !user.entries.is_empty() {
        evidence.push(format!("issued from: {}", list(&user.entries, all)));
    } else if !path.sites.is_empty() {
        evidence.push(format!("called from: {}", list(&path.sites, f.cpu_total)));
    }
    let mut found = finding(f, &TEXT, &path, "cpu", Confidence::High, evidence);
    match src {
        Some((Endpoint::Socket, _)) => {
            found.title = "a socket read a few bytes per recv".into();
            found.fix = SOCKET_FIX.into();
        }
        Some((Endpoint::Pipe, _)) => found.title = "a pipe read a few bytes per read syscall".into(),
        Some((Endpoint::File, _)) => found.title = "a file read a few bytes per read syscall".into(),
        _ => {}
    }
    Verdict::Found(found)
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;
    use crate::doctor::{Facts, Verdict};
    use whyslow_model::SyscallStat;

    fn with_reads(
        stacks: &[(&str, i64, i64)],
        reads: u64,
        bytes: u64,
        writes: u64,
    ) -> whyslow_model::Profile {
        let mut p = profile(stacks);
        let stat = |name: &str, calls: u64, bytes: u64| SyscallStat {
            tid: 1,
            name: name.into(),
            calls,
            bytes,
            total_ns: calls * 1000,
            ..Default::default()
        };
        p.syscalls.push(stat("read", reads, bytes));
        if writes > 0 {
            p.syscalls.push(stat("write", writes, writes * 100));
        }
        p
    }

    const FILE: [(&str, i64, i64); 3] = [
        ("main;load;next_char;lib:read;k:__x64_sys_read;k:ksys_read;k:filemap_read", 50, 0),
        ("main;load;next_char;lib:read", 20, 0),
        ("main;load", 30, 0),
    ];

    #[test]
    fn fires_on_tiny_reads_only() {
        assert_eq!(fired(super::check, &with_reads(&FILE, 2_000_000, 2_000_000, 0)), Some(70.0));
        assert_eq!(
            fired(super::check, &with_reads(&FILE, 2_000_000, 2_000_000 * 4096, 0)),
            None,
            "4 KB reads"
        );
        assert_eq!(fired(super::check, &with_reads(&FILE, 5_000, 5_000, 0)), None, "500 per second");
    }

    /// The evidence holds the impact and the bytes per call; a file gets the buffering advice, a socket
    /// the recv-into-a-buffer one, and a socket with a reply per read (request/reply) nothing.
    #[test]
    fn evidence_and_advice_follow_the_source() {
        let Verdict::Found(x) = super::check(&Facts::new(&with_reads(&FILE, 2_000_000, 2_000_000, 0))) else {
            panic!("not found")
        };
        assert!(x.evidence[0].contains("1.0 bytes per call") && x.evidence[0].contains("200000/s"));
        assert!(x.evidence[1].starts_with("70.0% of CPU time"), "{:?}", x.evidence);
        assert!(x.evidence[2].contains("a file (100%"), "{:?}", x.evidence);
        assert!(x.evidence[3].starts_with("called from: next_char"), "{:?}", x.evidence);
        assert!(x.fix.contains("FILE*") && x.fix.contains("BufReader"));
        let sock = [
            ("main;parse;lib:recv;k:__x64_sys_recvfrom;k:__sys_recvfrom;k:tcp_recvmsg", 60, 0),
            ("main;parse", 40, 0),
        ];
        let Verdict::Found(x) = super::check(&Facts::new(&with_reads(&sock, 1_000_000, 3_000_000, 0))) else {
            panic!("not found")
        };
        assert!(x.title.contains("socket") && x.fix.contains("recv into a large buffer"), "{x:?}");
        assert_eq!(fired(super::check, &with_reads(&sock, 1_000_000, 3_000_000, 1_000_000)), None);
    }

    /// A stdio stream whose buffer fills with a few bytes read all the file had (getaddrinfo's
    /// /etc/hosts): not a missing buffer.
    #[test]
    fn quiet_when_a_buffered_reader_gets_all_there_is() {
        let mut p = crate::doctor::facts::test_profile::with_syscalls(
            &FILE,
            &[(
                "main;resolve;lib:getaddrinfo;lib:fgets;lib:_IO_new_file_underflow;lib:__read_nocancel;read",
                9,
            )],
        );
        p.syscalls = with_reads(&FILE, 2_000_000, 2_000_000 * 20, 0).syscalls;
        assert_eq!(fired(super::check, &p), None);
    }
}
