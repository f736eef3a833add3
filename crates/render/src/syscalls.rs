//! Syscall output: the `strace -c`-shaped summary (plus p99 and max), its JSON form, and one `--trace`
//! line per call with decoded arguments.

use std::io::Write;
use whyslow_analyze::SyscallRow;
use whyslow_model::syscalls::{errno_name, syscall_name, TraceEvent};
use whyslow_model::Profile;

const RULE: &str =
    "------ ----------- ----------- --------- --------- ----------- ----------- ----------------";

/// One refresh of a live table: a header saying how far into the run and at what rate, then the table of
/// `interval` (the counters of the last `secs` seconds, merged over threads).
pub fn interval_table(
    w: &mut impl Write,
    elapsed_s: f64,
    secs: f64,
    interval: Vec<whyslow_model::SyscallStat>,
    limit: usize,
) -> std::io::Result<()> {
    let p = Profile { syscalls: interval, ..Default::default() };
    let calls: u64 = p.syscalls.iter().map(|s| s.calls).sum();
    writeln!(
        w,
        "whyslow syscalls: {elapsed_s:.1} s into the run, last {secs:.1} s: {:.0} calls/s",
        calls as f64 / secs.max(1e-9)
    )?;
    table(w, &p, &whyslow_analyze::syscall_summary(&p, false), limit)?;
    writeln!(w)
}

/// What the syscall table of a recording counts: every syscall of the run, or those of the windows
/// the counters ran in under a probe budget.
pub fn title(m: &whyslow_model::Metadata) -> String {
    let counted = crate::units::seconds(m.syscalls_seconds());
    match (m.syscalls_duration_ns, m.syscall_slices.len()) {
        (0, _) => "syscalls (exact counts)".to_string(),
        (_, 0 | 1) => format!("syscalls (exact counts over the first {counted}, until the probe budget)"),
        (_, n) => {
            format!("syscalls (exact counts over {counted} counted in {n} windows spread over the run)")
        }
    }
}

/// The summary table, one block per thread when the rows are per thread, each showing its `limit`
/// syscalls of most time (the total line counts them all). `lost_events` > 0 is shown.
pub fn table(w: &mut impl Write, p: &Profile, rows: &[SyscallRow], limit: usize) -> std::io::Result<()> {
    if rows.is_empty() {
        writeln!(w, "no syscalls")?;
    }
    let mut start = 0;
    while start < rows.len() {
        let thread = rows[start].thread;
        let end = start + rows[start..].iter().take_while(|r| r.thread == thread).count();
        if let Some((pid, tid)) = thread {
            let name =
                p.threads.iter().find(|t| (t.pid, t.tid) == (pid, tid)).map_or("", |t| t.name.as_str());
            writeln!(w, "{}thread {tid}{} (pid {pid})", if start > 0 { "\n" } else { "" }, quoted(name))?;
        }
        block(w, &rows[start..end], limit)?;
        start = end;
    }
    if p.meta.lost_events > 0 {
        writeln!(
            w,
            "lost events: {} (counted calls or traced calls the kernel had no room for)",
            p.meta.lost_events
        )?;
    }
    Ok(())
}

fn quoted(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!(" '{name}'")
    }
}

fn block(w: &mut impl Write, rows: &[SyscallRow], limit: usize) -> std::io::Result<()> {
    let total_ns: u64 = rows.iter().map(|r| r.stat.total_ns).sum();
    // strace -c's columns as strace prints them; p99 and max (ours) in units, as 2.04µs or 12.3ms.
    writeln!(w, "% time     seconds  usecs/call     calls    errors         p99         max syscall")?;
    writeln!(w, "{RULE}")?;
    let line =
        |w: &mut dyn Write, ns: u64, calls: u64, errors: u64, p99: Option<u64>, max: u64, name: &str| {
            let share = if total_ns == 0 { 0.0 } else { 100.0 * ns as f64 / total_ns as f64 };
            let errors = if errors > 0 { errors.to_string() } else { String::new() };
            let p99 = p99.map_or(String::new(), |v| crate::units::duration(v as i64));
            writeln!(
                w,
                "{share:6.2} {:11.6} {:11} {calls:9} {errors:>9} {p99:>11} {:>11} {name}",
                ns as f64 / 1e9,
                ns / 1000 / calls.max(1),
                crate::units::duration(max as i64)
            )
        };
    for r in rows.iter().take(limit) {
        let s = &r.stat;
        line(w, s.total_ns, s.calls, s.errors, Some(s.quantile_ns(0.99)), s.max_ns, &s.name)?;
    }
    if rows.len() > limit {
        writeln!(w, "  ... {} more syscalls (--limit)", rows.len() - limit)?;
    }
    writeln!(w, "{RULE}")?;
    let calls = rows.iter().map(|r| r.stat.calls).sum();
    let errors = rows.iter().map(|r| r.stat.errors).sum();
    let max = rows.iter().map(|r| r.stat.max_ns).max().unwrap_or(0);
    line(w, total_ns, calls, errors, None, max, "total")?;
    let errnos: Vec<String> = rows
        .iter()
        .filter(|r| !r.stat.errnos.is_empty())
        .map(|r| {
            let e: Vec<String> = r.stat.errnos.iter().map(|(n, c)| format!("{n} {c}")).collect();
            format!("{} {}", r.stat.name, e.join(", "))
        })
        .collect();
    if !errnos.is_empty() {
        writeln!(w, "errors: {}", errnos.join("; "))?;
    }
    Ok(())
}

/// For the `top` syscalls of the summary (by time), the stacks that issued them (sample type `value`, the
/// stack of every `period`th call), most calls first, up to `per` each.
pub fn issuing_stacks(
    w: &mut impl Write,
    p: &Profile,
    value: usize,
    rows: &[SyscallRow],
    top: usize,
    per: usize,
    period: u64,
) -> std::io::Result<()> {
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.stat.name.as_str()) {
            names.push(&r.stat.name);
        }
    }
    names.truncate(top);
    crate::text::stacks_ending_in(w, p, value, &names, per, period)
}

/// `{"duration_s", "syscalls": [{"name", "calls", "errors", "total_ns", "max_ns", "p99_ns", "errnos"}],
/// "lost_events"}`; rows per thread also carry "pid" and "tid".
pub fn json(w: &mut impl Write, p: &Profile, rows: &[SyscallRow]) -> std::io::Result<()> {
    let doc = serde_json::json!({
        "duration_s": p.meta.duration_ns as f64 / 1e9,
        "duration_ns": p.meta.duration_ns,
        "syscalls": rows_json(rows),
        "lost_events": p.meta.lost_events,
        "killed": p.meta.killed,
    });
    serde_json::to_writer_pretty(&mut *w, &doc)?;
    writeln!(w)
}

/// The rows as JSON objects (also embedded in the JSON report of a recording).
pub(crate) fn rows_json(rows: &[SyscallRow]) -> Vec<serde_json::Value> {
    rows
        .iter()
        .map(|r| {
            let s = &r.stat;
            let errnos: serde_json::Map<String, serde_json::Value> =
                s.errnos.iter().map(|(n, c)| (n.clone(), (*c).into())).collect();
            let mut v = serde_json::json!({
                "name": s.name, "calls": s.calls, "errors": s.errors, "total_ns": s.total_ns,
                "max_ns": s.max_ns, "p50_ns": s.quantile_ns(0.5), "p99_ns": s.quantile_ns(0.99), "errnos": errnos,
            });
            if let Some((pid, tid)) = r.thread {
                v["pid"] = pid.into();
                v["tid"] = tid.into();
            }
            v
        })
        .collect()
}

/// How to show one argument.
#[derive(Clone, Copy)]
enum Arg {
    Fd,
    DirFd,
    Path,
    OpenFlags,
    /// `AT_*` flags of the *at() calls (`unlinkat`'s 0x200 is AT_REMOVEDIR).
    AtFlags,
    Mode,
    AccessMode,
    Dec,
    Hex,
}

fn signature(name: &str) -> Option<&'static [Arg]> {
    use Arg::*;
    Some(match name {
        "read" | "write" => &[Fd, Hex, Dec],
        "pread64" | "pwrite64" => &[Fd, Hex, Dec, Dec],
        "readv" | "writev" => &[Fd, Hex, Dec],
        "open" => &[Path, OpenFlags, Mode],
        "openat" => &[DirFd, Path, OpenFlags, Mode],
        "creat" | "mkdir" | "chmod" => &[Path, Mode],
        "close" | "fsync" | "fdatasync" | "dup" | "syncfs" => &[Fd],
        "fstat" => &[Fd, Hex],
        "stat" | "lstat" | "statfs" => &[Path, Hex],
        "newfstatat" => &[DirFd, Path, Hex, AtFlags],
        "statx" => &[DirFd, Path, AtFlags, Hex, Hex],
        "access" => &[Path, AccessMode],
        "faccessat" => &[DirFd, Path, AccessMode],
        "faccessat2" => &[DirFd, Path, AccessMode, Hex],
        "unlink" | "rmdir" | "chdir" | "chroot" => &[Path],
        "unlinkat" => &[DirFd, Path, AtFlags],
        "rename" | "link" | "symlink" => &[Path, Path],
        "renameat" | "linkat" => &[DirFd, Path, DirFd, Path],
        "renameat2" => &[DirFd, Path, DirFd, Path, Hex],
        "mkdirat" | "fchmodat" => &[DirFd, Path, Mode],
        "readlink" => &[Path, Hex, Dec],
        "readlinkat" => &[DirFd, Path, Hex, Dec],
        "truncate" => &[Path, Dec],
        "ftruncate" => &[Fd, Dec],
        "lseek" => &[Fd, Dec, Dec],
        "dup2" => &[Fd, Fd],
        "dup3" => &[Fd, Fd, Hex],
        "sendto" | "recvfrom" => &[Fd, Hex, Dec, Hex, Hex, Hex],
        "sendmsg" | "recvmsg" => &[Fd, Hex, Hex],
        "connect" | "bind" | "accept" => &[Fd, Hex, Dec],
        "accept4" => &[Fd, Hex, Hex, Hex],
        "execve" => &[Path, Hex, Hex],
        "fcntl" => &[Fd, Dec, Hex],
        "ioctl" => &[Fd, Hex, Hex],
        "nanosleep" => &[Hex, Hex],
        "futex" => &[Hex, Dec, Dec, Hex, Hex, Dec],
        "epoll_wait" | "epoll_pwait" => &[Fd, Hex, Dec, Dec],
        "mmap" => &[Hex, Dec, Hex, Hex, Fd, Hex],
        "munmap" => &[Hex, Dec],
        "brk" => &[Hex],
        "getpid" | "gettid" | "getuid" | "getppid" | "sched_yield" => &[],
        _ => return None,
    })
}

/// The names of the flags set in `v` (each bit of a name set in full), and what is left unnamed.
fn named_bits(v: u64, bits: &[(i32, &str)]) -> (Vec<String>, u64) {
    let mut rest = v;
    let mut parts = Vec::new();
    for &(bit, name) in bits {
        let bit = bit as u64;
        if bit != 0 && rest & bit == bit {
            parts.push(name.to_string());
            rest &= !bit;
        }
    }
    (parts, rest)
}

fn at_flags(v: u64) -> String {
    let bits = [
        (libc::AT_SYMLINK_NOFOLLOW, "AT_SYMLINK_NOFOLLOW"),
        (libc::AT_REMOVEDIR, "AT_REMOVEDIR"),
        (libc::AT_SYMLINK_FOLLOW, "AT_SYMLINK_FOLLOW"),
        (libc::AT_NO_AUTOMOUNT, "AT_NO_AUTOMOUNT"),
        (libc::AT_EMPTY_PATH, "AT_EMPTY_PATH"),
        (libc::AT_STATX_FORCE_SYNC, "AT_STATX_FORCE_SYNC"),
        (libc::AT_STATX_DONT_SYNC, "AT_STATX_DONT_SYNC"),
    ];
    let (mut parts, rest) = named_bits(v, &bits);
    if rest != 0 || parts.is_empty() {
        parts.push(if rest == 0 { "0".into() } else { format!("{rest:#x}") });
    }
    parts.join("|")
}

fn open_flags(v: u64) -> String {
    let acc = match v & 3 {
        0 => "O_RDONLY",
        1 => "O_WRONLY",
        2 => "O_RDWR",
        _ => "O_ACCMODE",
    };
    let bits = [
        (libc::O_CREAT, "O_CREAT"),
        (libc::O_EXCL, "O_EXCL"),
        (libc::O_NOCTTY, "O_NOCTTY"),
        (libc::O_TRUNC, "O_TRUNC"),
        (libc::O_APPEND, "O_APPEND"),
        (libc::O_NONBLOCK, "O_NONBLOCK"),
        (libc::O_DSYNC, "O_DSYNC"),
        (libc::O_DIRECT, "O_DIRECT"),
        (libc::O_DIRECTORY, "O_DIRECTORY"),
        (libc::O_NOFOLLOW, "O_NOFOLLOW"),
        (libc::O_NOATIME, "O_NOATIME"),
        (libc::O_CLOEXEC, "O_CLOEXEC"),
        (libc::O_PATH, "O_PATH"),
        (libc::O_TMPFILE & !libc::O_DIRECTORY, "O_TMPFILE"),
        (libc::O_SYNC & !libc::O_DSYNC, "O_SYNC"),
    ];
    let (named, mut rest) = named_bits(v & !3, &bits);
    let mut parts = vec![acc.to_string()];
    parts.extend(named);
    rest &= !(libc::O_LARGEFILE as u64);
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    parts.join("|")
}

fn access_mode(v: u64) -> String {
    if v == 0 {
        return "F_OK".into();
    }
    let names = [(4, "R_OK"), (2, "W_OK"), (1, "X_OK")];
    names.iter().filter(|(b, _)| v & b != 0).map(|(_, n)| *n).collect::<Vec<_>>().join("|")
}

fn fd(v: u64) -> String {
    (v as i32).to_string()
}

/// Double-quoted like strace, with control characters escaped.
fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// One strace-like line: `0.000123 [pid] name(args) = ret <duration>`; `t0_ns` is the run's start time on
/// the same clock.
pub fn trace_line(e: &TraceEvent, t0_ns: u64) -> String {
    let name = syscall_name(e.nr).map_or_else(|| format!("syscall_{}", e.nr), str::to_string);
    let mut strings = e.strings.iter();
    let args: Vec<String> = match signature(&name) {
        Some(sig) => sig
            .iter()
            // The mode of open/openat means something only when a file may be created (as strace shows it).
            .take(match name.as_str() {
                "open" | "openat"
                    if e.args[sig.len() - 2] & (libc::O_CREAT | libc::O_TMPFILE) as u64 == 0 =>
                {
                    sig.len() - 1
                }
                _ => sig.len(),
            })
            .zip(e.args)
            .map(|(kind, v)| match kind {
                Arg::Fd => fd(v),
                Arg::DirFd if v as i32 == libc::AT_FDCWD => "AT_FDCWD".into(),
                Arg::DirFd => fd(v),
                Arg::Path => strings.next().map_or_else(|| format!("{v:#x}"), |s| quote(s)),
                Arg::OpenFlags => open_flags(v),
                Arg::AtFlags => at_flags(v),
                Arg::Mode => format!("0{v:o}"),
                Arg::AccessMode => access_mode(v),
                Arg::Dec => (v as i64).to_string(),
                Arg::Hex => format!("{v:#x}"),
            })
            .collect(),
        None => e.args.iter().map(|v| format!("{v:#x}")).collect(),
    };
    let ret = if (-4095..0).contains(&e.ret) {
        format!("-1 {}", errno_name((-e.ret) as u32))
    } else if matches!(name.as_str(), "mmap" | "brk" | "mremap") {
        format!("{:#x}", e.ret)
    } else {
        e.ret.to_string()
    };
    let at = e.time_ns.saturating_sub(e.dur_ns).saturating_sub(t0_ns) as f64 / 1e9;
    format!("{at:10.6} [{}] {name}({}) = {ret} <{:.6}>", e.tid, args.join(", "), e.dur_ns as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::{json, signature, table, trace_line, Arg};
    use whyslow_model::syscalls::TraceEvent;
    use whyslow_model::Profile;
    use whyslow_model::{SyscallStat, Thread};

    /// Which arguments are paths is the model's fact (the kernel side reads those strings): every
    /// signature here puts `Path` exactly there.
    #[test]
    fn signatures_put_paths_where_the_model_reads_strings() {
        let mut checked = 0;
        for name in whyslow_model::syscalls::syscall_names() {
            let Some(sig) = signature(name) else { continue };
            let paths: Vec<usize> = (0..sig.len()).filter(|&i| matches!(sig[i], Arg::Path)).collect();
            assert_eq!(paths, whyslow_model::syscalls::string_args(name), "{name}");
            checked += 1;
        }
        assert!(checked > 40, "{checked} signatures checked");
    }

    fn event(nr: u32, ret: i64, args: [u64; 6], strings: &[&str]) -> TraceEvent {
        TraceEvent {
            time_ns: 2_000_005_000,
            pid: 7,
            tid: 8,
            nr,
            ret,
            dur_ns: 5_000,
            args,
            strings: strings.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn trace_lines_decode_paths_flags_and_errors() {
        let at = libc::AT_FDCWD as u32 as u64 | 0xffff_ffff_0000_0000;
        let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
        let e = event(257, -2, [at, 0x1000, flags, 0, 0, 0], &["/nope/x"]);
        assert_eq!(
            trace_line(&e, 1_000_000_000),
            "  1.000000 [8] openat(AT_FDCWD, \"/nope/x\", O_RDONLY|O_CLOEXEC) = -1 ENOENT <0.000005>"
        );
        let e = event(262, 0, [at, 0x1000, 0x7ffc, 0, 0, 0], &["/etc/localtime"]);
        assert_eq!(
            trace_line(&e, 2_000_000_000),
            "  0.000000 [8] newfstatat(AT_FDCWD, \"/etc/localtime\", 0x7ffc, 0) = 0 <0.000005>"
        );
        let e = event(262, 0, [3, 0x1000, 0x7ffc, 0x1100, 0, 0], &[""]);
        assert!(
            trace_line(&e, 0).contains(", 0x7ffc, AT_SYMLINK_NOFOLLOW|AT_EMPTY_PATH) = 0"),
            "{}",
            trace_line(&e, 0)
        );
        let e = event(1, 12, [3, 0x5000, 12, 0, 0, 0], &[]);
        assert!(trace_line(&e, 0).ends_with("[8] write(3, 0x5000, 12) = 12 <0.000005>"));
        assert!(trace_line(&event(9999, 0, [1; 6], &[]), 0).contains("syscall_9999(0x1, 0x1"));
        let creat = (libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC) as u64;
        let e = event(2, 3, [0x1000, creat, 0o644, 0, 0, 0], &["out.txt"]);
        assert!(
            trace_line(&e, 0).ends_with("open(\"out.txt\", O_WRONLY|O_CREAT|O_TRUNC, 0644) = 3 <0.000005>")
        );
    }

    #[test]
    fn table_is_shaped_like_strace_c_with_errno_split() {
        let mut p = Profile::default();
        p.threads.push(Thread { pid: 1, tid: 1, name: "job".into() });
        let s = |name: &str, calls, total_ns, errors| SyscallStat {
            pid: 1,
            tid: 1,
            name: name.into(),
            calls,
            errors,
            errnos: if errors > 0 { vec![("ENOENT".into(), errors)] } else { vec![] },
            total_ns,
            max_ns: 9_000,
            hist: {
                let mut h = vec![0; 40];
                h[10] = calls;
                h
            },
            bytes: 0,
        };
        p.syscalls = vec![s("newfstatat", 200_000, 300_000_000, 0), s("openat", 1000, 3_000_000, 1000)];
        p.meta.lost_events = 3;
        let mut out = Vec::new();
        table(&mut out, &p, &whyslow_analyze::syscall_summary(&p, false), 25).unwrap();
        let text = String::from_utf8(out).unwrap();
        let want = "\
% time     seconds  usecs/call     calls    errors         p99         max syscall
------ ----------- ----------- --------- --------- ----------- ----------- ----------------
 99.01    0.300000           1    200000                2.04µs      9.00µs newfstatat
  0.99    0.003000           3      1000      1000      2.04µs      9.00µs openat
------ ----------- ----------- --------- --------- ----------- ----------- ----------------
100.00    0.303000           1    201000      1000                  9.00µs total
errors: openat ENOENT 1000
lost events: 3 (counted calls or traced calls the kernel had no room for)
";
        assert_eq!(text, want);
        let mut out = Vec::new();
        json(&mut out, &p, &whyslow_analyze::syscall_summary(&p, false)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["syscalls"][1]["errnos"]["ENOENT"], 1000);
        assert_eq!(v["syscalls"][0]["calls"], 200000);
        assert_eq!(v["lost_events"], 3);
        assert_eq!(v["syscalls"][0]["p99_ns"], 2037, "1024 + 1024 * 0.99 inside bucket 10");
        // Times exact, in integer nanoseconds named by the key, beside the seconds for people.
        assert_eq!(
            (v["syscalls"][0]["total_ns"].as_u64(), v["syscalls"][0]["max_ns"].as_u64()),
            (Some(300_000_000), Some(9_000))
        );
        assert_eq!(v["duration_ns"], p.meta.duration_ns);
    }
}
