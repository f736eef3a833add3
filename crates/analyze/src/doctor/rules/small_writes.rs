//! small-writes: many small write()/send() syscalls where a buffer would batch them into few. What the
//! writes go to (a file, a pipe, a socket) is read from the kernel frames under them in the CPU samples,
//! and the advice follows: a file or pipe wants a user-space buffer; a socket answering requests one
//! reply at a time wants replies batched per event-loop turn or pipelined clients, or nothing at all when
//! the writes are a small share.
//!
//! A server often does both with different syscalls (nginx answers with `writev` and logs each request
//! with `write`): the syscalls whose sampled kernel code is a regular file's are judged first and apart
//! (case `file`), so that an unbuffered log on the request path is not hidden in, nor excused by, the
//! replies.

use super::endpoint::{dominant, of_syscall, sink_of_syscall, Direction, Endpoint};
use super::{finding, list, named, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::{
    SMALL_FILE_WRITES_PER_REQUEST_MAX, SMALL_FILE_WRITES_PER_REQUEST_PCT, SMALL_REPLIES_PCT,
    SMALL_WRITES_PCT, SMALL_WRITES_RATE, SMALL_WRITE_BYTES,
};
use crate::doctor::{Confidence, Finding, Verdict};

const TEXT: Text = Text {
    id: "small-writes",
    title: "many small write syscalls",
    why: "each syscall costs a kernel entry and exit (about a microsecond) whatever its size; writing a few \
          bytes per call multiplies that cost by the number of records",
    fix: "buffer output in user space and write in large blocks (a FILE* with a big setvbuf buffer, a \
          std::string/Vec accumulator flushed at 64 KB, or writev of many records)",
    shrinks: "the write syscalls (their count in `whyslow syscalls`)",
};

/// Socket writes answering requests one by one: a user-space buffer does not apply.
const SOCKET_FIX: &str = "replies go out one write per request: batch the replies ready in one event-loop \
    turn into one writev/sendmsg per client (or MSG_MORE / TCP_CORK), and let clients pipeline requests so \
    that replies batch by themselves; when the writes are a small share of the time there is nothing to fix";

const REPLIES_WHY: &str = "each reply costs a kernel entry and exit and a pass through the socket layer \
    (about a microsecond) whatever its size; the protocol's work of sending it is paid per reply in any case";

const SOCKET_STREAM_FIX: &str = "gather the records of one message or one event-loop turn and send them \
    with one writev/sendmsg (or MSG_MORE / TCP_CORK while composing), instead of one send per record";

/// Small writes to a regular file, at about one per request when the program answers requests.
const FILE_TITLE: &str = "many small writes to a file";
const FILE_PER_REQUEST_TITLE: &str = "one small write to a file per request (an unbuffered log)";
const FILE_SEVERAL_PER_REQUEST_TITLE: &str = "a few small writes to a file per request (an unbuffered log)";
const FILE_PER_REQUEST_WHY: &str =
    "each request pays a write syscall for each of its lines (a kernel entry and exit, \
    the file system's locking and page-cache copy, about a microsecond or more) on the thread that \
    answers requests; a buffer turns thousands of those into one write per 64 KB";

const WRITES: [&str; 6] = ["write", "pwrite64", "writev", "sendto", "sendmsg", "pwritev"];
const READS: [&str; 6] = ["read", "readv", "recvfrom", "recvmsg", "pread64", "preadv"];

/// The protocol's own sending (under the socket layer): the work of moving the bytes, which fewer
/// syscalls would not remove when each carries one reply.
fn in_protocol(f: &Func) -> bool {
    f.kernel
        && named(
            f.name,
            &[],
            &["tcp_sendmsg", "unix_stream_sendmsg", "unix_dgram_sendmsg", "udp_sendmsg", "udpv6_sendmsg"],
        )
}

fn is_send(f: &Func) -> bool {
    f.kernel && named(f.name, &["__x64_sys_sendto", "__x64_sys_sendmsg"], &[])
}

pub fn check(f: &Facts) -> Verdict {
    if !f.has_syscalls() {
        return Verdict::NeedsData("syscall counters");
    }
    let (to_file, rest): (Vec<&str>, Vec<&str>) = WRITES
        .iter()
        .filter(|n| f.syscall(&[n]).calls > 0)
        .partition(|n| sink_of_syscall(f, Direction::Write, n).is_some_and(|s| s.0 == Endpoint::File));
    if let Some(found) = file_writes(f, &to_file, &rest) {
        return Verdict::Found(found);
    }
    writes(f, &rest)
}

/// The write syscalls `names`, whose sampled kernel code is a regular file's: a finding when they are
/// many, small and a share of CPU worth a buffer; one to a few per request (the other writes' replies,
/// else the reads: a line per request, or two when a server logs both the request and its duration)
/// says they are on the request path.
fn file_writes(f: &Facts, names: &[&str], others: &[&str]) -> Option<Finding> {
    if names.is_empty() {
        return None;
    }
    let w = f.syscall(names);
    let rate = w.calls as f64 / f.syscall_seconds().max(1e-9);
    let avg = w.bytes as f64 / w.calls.max(1) as f64;
    if rate < SMALL_WRITES_RATE || avg > SMALL_WRITE_BYTES {
        return None;
    }
    let mut impact = f.cpu(&|x: &Func| names.iter().any(|n| of_syscall(x, n)));
    // The time inside them, exact from the counters (less what our probe added to each): a regular
    // file has no reader to wait for, so it is the writes' own cost (the copy, the file system's locks,
    // throttling by writeback) plus preemptions. A server's worker busy a third of the time yields too
    // few CPU samples in a few seconds for a share of a few percent to be sure from them alone. A share
    // of its working time: the time it waited for requests is not time the writes could give back.
    let wall_ns = f.syscall_working_ns(names);
    let inside = w.total_ns.saturating_sub(w.calls * f.p.meta.syscall_cost_ns);
    let inside_pct = 100.0 * inside as f64 / wall_ns;
    let replies = f.syscall(others).calls;
    let reads = f.syscall(&READS).calls;
    let requests = if replies > 0 { replies } else { reads };
    let per_request = requests > 0
        && w.calls * 2 >= requests
        && w.calls as f64 <= requests as f64 * SMALL_FILE_WRITES_PER_REQUEST_MAX;
    let least = if per_request { SMALL_FILE_WRITES_PER_REQUEST_PCT } else { SMALL_WRITES_PCT };
    if f.cpu_pct_surely(impact.pct) < least && inside_pct < least {
        return None;
    }
    let mut evidence = vec![format!(
        "{} {} syscalls to a regular file ({rate:.0}/s{}), {avg:.0} bytes per call on average",
        w.calls,
        names.join("/"),
        f.syscall_window()
    )];
    let per = w.calls as f64 / requests.max(1) as f64;
    let several = per >= 1.5;
    if per_request {
        let how_many =
            if several { format!("about {per:.0} per request") } else { "about one per request".into() };
        evidence.push(if replies > 0 {
            format!("{how_many}: {} replies were written by {}", replies, others.join("/"))
        } else {
            format!("{how_many}: {reads} reads of requests")
        });
    }
    evidence.push(format!(
        "{:.1}% of CPU time is in these writes (kernel included); {inside_pct:.1}% of the writing \
         threads' working time is inside them ({:.1} us per call)",
        impact.pct,
        inside as f64 / w.calls.max(1) as f64 / 1e3
    ));
    let of = if inside_pct > impact.pct {
        impact.pct = inside_pct;
        "wall"
    } else {
        "cpu"
    };
    let (sites, all) = f.syscall_sites(names);
    if all > 0 && !sites.is_empty() {
        evidence.push(format!("issued from: {}", list(&sites, all)));
    } else if !impact.sites.is_empty() {
        evidence.push(format!("called from: {}", list(&impact.sites, f.cpu_total)));
    }
    let mut found = finding(f, &TEXT, &impact, of, Confidence::High, evidence);
    found.case = "file";
    found.title = match (per_request, several) {
        (true, false) => FILE_PER_REQUEST_TITLE,
        (true, true) => FILE_SEVERAL_PER_REQUEST_TITLE,
        _ => FILE_TITLE,
    }
    .into();
    if per_request {
        found.why = FILE_PER_REQUEST_WHY.into();
    }
    Some(found)
}

/// The write syscalls `names` (all but those to a regular file) judged together.
fn writes(f: &Facts, names: &[&str]) -> Verdict {
    let w = f.syscall(names);
    let rate = w.calls as f64 / f.syscall_seconds().max(1e-9);
    let avg = w.bytes as f64 / w.calls.max(1) as f64;
    if rate < SMALL_WRITES_RATE || avg > SMALL_WRITE_BYTES {
        return Verdict::Clear;
    }
    // Impact: the CPU time in the write path (what a syscall per record costs). The time inside the
    // syscalls is evidence only: it also holds waits (a full pipe, a preemption by the woken reader).
    let path = f.cpu(&|x: &Func| names.iter().any(|n| of_syscall(x, n)));
    let wall_ns = f.syscall_wall_ns(names);
    let syscall_pct = 100.0 * w.total_ns as f64 / wall_ns;
    let sink = dominant(f, Direction::Write, |e, x| e == Endpoint::Socket && is_send(x));
    let reads = f.syscall(&READS).calls;
    let replies =
        sink.is_some_and(|s| s.0 == Endpoint::Socket) && reads * 2 >= w.calls && reads <= w.calls * 2;
    // One reply per request: the protocol's sending is the replies' own work; what fewer writes could
    // save is the rest of the path (entry, exit, socket layer).
    let protocol = if replies { f.cpu(&in_protocol) } else { Default::default() };
    let mut impact = path.clone();
    impact.value -= protocol.value;
    impact.pct = crate::doctor::facts::pct(impact.value, f.cpu_total);
    if f.cpu_pct_surely(impact.pct) < if replies { SMALL_REPLIES_PCT } else { SMALL_WRITES_PCT } {
        return Verdict::Clear;
    }
    let threads = match f.syscall_threads(names) {
        1 => "the writing thread's".to_string(),
        n => format!("the {n} writing threads'"),
    };
    let mut evidence = vec![
        format!(
            "{} write-family syscalls ({rate:.0}/s{}), {avg:.0} bytes per call on average",
            w.calls,
            f.syscall_window()
        ),
        format!(
            "{:.1}% of CPU time is in the write path (kernel included); {syscall_pct:.1}% of {threads} time is \
             inside them ({:.1} us per call)",
            path.pct,
            w.total_ns as f64 / w.calls.max(1) as f64 / 1e3
        ),
    ];
    if let Some((s, share)) = sink {
        let mut line =
            format!("they write to {} ({share:.0}% of their sampled CPU time)", s.name(Direction::Write));
        if replies {
            line += &format!("; {reads} reads for {} writes: one reply per request", w.calls);
        }
        evidence.push(line);
    }
    if replies {
        evidence.push(format!(
            "{:.1}% of CPU time is the protocol sending the replies and {:.1}% of CPU time the per-call rest \
             of the path (entry, exit, socket layer): fewer writes can save only the latter",
            protocol.pct, impact.pct
        ));
    }
    let (sites, all) = f.syscall_sites(names);
    if all > 0 && !sites.is_empty() {
        evidence.push(format!("issued from: {}", list(&sites, all)));
    } else if !impact.sites.is_empty() {
        evidence.push(format!("called from: {}", list(&impact.sites, f.cpu_total)));
    }
    let mut found = finding(f, &TEXT, &impact, "cpu", Confidence::High, evidence);
    match sink {
        Some((Endpoint::Socket, _)) if replies => {
            found.title = "one small write per reply".into();
            found.why = REPLIES_WHY.into();
            found.fix = SOCKET_FIX.into();
        }
        Some((Endpoint::Socket, _)) => {
            found.title = "many small writes to sockets".into();
            found.fix = SOCKET_STREAM_FIX.into();
        }
        Some((Endpoint::Pipe, _)) => found.title = "many small writes to a pipe".into(),
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

    fn with_writes(
        stacks: &[(&str, i64, i64)],
        calls: u64,
        bytes: u64,
        reads: u64,
    ) -> whyslow_model::Profile {
        let mut p = profile(stacks);
        let stat = |name: &str, calls: u64| SyscallStat {
            tid: 1,
            name: name.into(),
            calls,
            bytes,
            total_ns: calls * 1000,
            ..Default::default()
        };
        p.syscalls.push(stat("write", calls));
        if reads > 0 {
            p.syscalls.push(stat("read", reads));
        }
        p
    }

    const FILE: [(&str, i64, i64); 2] =
        [("main;emit;lib:write;k:__x64_sys_write;k:ext4_file_write_iter", 40, 0), ("main;work", 60, 0)];

    #[test]
    fn fires_on_many_small_writes_only() {
        assert_eq!(fired(super::check, &with_writes(&FILE, 200_000, 200_000 * 64, 0)), Some(40.0));
        assert_eq!(
            fired(super::check, &with_writes(&FILE, 200_000, 200_000 * 8192, 0)),
            None,
            "large writes"
        );
        assert_eq!(fired(super::check, &with_writes(&FILE, 5_000, 5_000 * 64, 0)), None, "500 per second");
    }

    /// A server answering with `writev` and logging each request with `write` (nginx's unbuffered
    /// access_log): the file writes are judged apart from the replies and named, one per request; once
    /// buffered (few file writes) they raise nothing.
    #[test]
    fn a_log_write_per_request_is_told_apart_from_the_replies() {
        let stacks = [
            ("main;ngx_http_log_handler;lib:__GI___libc_write;k:ksys_write;k:vfs_write;k:ext4_buffered_write_iter", 20, 0),
            ("main;ngx_writev;lib:__GI___writev;k:do_writev;k:sock_write_iter;k:tcp_sendmsg", 40, 0),
            ("main;ngx_http_process_request", 40, 0),
        ];
        let run = |log_writes: u64| {
            let mut p = profile(&stacks);
            let stat = |name: &str, calls: u64, bytes: u64| SyscallStat {
                tid: 1,
                name: name.into(),
                calls,
                bytes,
                total_ns: calls * 1000,
                ..Default::default()
            };
            p.syscalls.push(stat("write", log_writes, log_writes * 90));
            p.syscalls.push(stat("writev", 30_000, 30_000 * 150));
            p.syscalls.push(stat("recvfrom", 60_000, 30_000 * 80));
            super::check(&Facts::new(&p))
        };
        let Verdict::Found(x) = run(29_990) else { panic!("not found") };
        assert_eq!((x.case, x.impact_pct), ("file", 20.0));
        assert!(x.title.contains("per request"), "{}", x.title);
        assert!(x.evidence[0].starts_with("29990 write syscalls to a regular file"), "{:?}", x.evidence);
        assert_eq!(x.evidence[1], "about one per request: 30000 replies were written by writev");
        // Two lines per request (a statement and its duration), one more than twice counted in windows.
        let Verdict::Found(x) = run(60_001) else { panic!("not found") };
        assert_eq!(x.title, "a few small writes to a file per request (an unbuffered log)");
        assert_eq!(x.evidence[1], "about 2 per request: 30000 replies were written by writev");
        // Four a request is not a log line per request: the general case's threshold (5%) holds.
        assert!(matches!(run(120_000), Verdict::Found(x) if !x.title.contains("per request")));
        // Buffered: a write a second is no finding of this case.
        assert!(!matches!(run(10), Verdict::Found(x) if x.case == "file"));
    }

    /// The impact is one of the numbers of the evidence, and socket replies get the batching advice: the
    /// protocol's sending is not counted in it (one reply per request pays it in any case).
    #[test]
    fn impact_is_in_the_evidence_and_socket_replies_get_their_advice() {
        let stacks = [
            ("main;reply;lib:write;k:__x64_sys_write;k:sock_write_iter", 14, 0),
            ("main;reply;lib:write;k:__x64_sys_write;k:sock_write_iter;k:unix_stream_sendmsg", 12, 0),
            ("main;handle", 74, 0),
        ];
        let p = with_writes(&stacks, 100_000, 100_000 * 5, 100_000);
        let Verdict::Found(x) = super::check(&Facts::new(&p)) else { panic!("not found") };
        assert_eq!((x.impact_pct, x.impact_of), (14.0, "cpu"));
        assert!(x.evidence[1].contains("26.0% of CPU time"), "{:?}", x.evidence);
        assert!(x.evidence[2].contains("a socket (100%") && x.evidence[2].contains("one reply per request"));
        assert!(
            x.evidence[3].starts_with("12.0% of CPU time is the protocol") && x.evidence[3].contains("14.0%")
        );
        assert!(
            x.fix.contains("writev") && x.fix.contains("pipeline") && !x.fix.contains("setvbuf"),
            "{}",
            x.fix
        );
        // A stream of records to one socket (no reads): the whole path counts.
        let Verdict::Found(x) = super::check(&Facts::new(&with_writes(&stacks, 100_000, 100_000 * 5, 0)))
        else {
            panic!("not found")
        };
        assert_eq!(x.impact_pct, 26.0);
        // The redis case: most of the path is the protocol; the few percent left are not a finding.
        let small = [(stacks[0].0, 5, 0), (stacks[1].0, 46, 0), ("main;handle", 49, 0)];
        assert_eq!(fired(super::check, &with_writes(&small, 100_000, 100_000 * 5, 100_000)), None);
    }
}
