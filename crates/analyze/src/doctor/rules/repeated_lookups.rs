//! repeated-lookups: files opened and stat'ed again and again by a library call made on every request
//! (getaddrinfo re-reading nsswitch.conf, /etc/hosts and gai.conf; getpwnam re-reading /etc/passwd; a
//! config file opened per call). The syscall counters give the rate; the sampled syscall stacks name the
//! library call user code made (the frame below the innermost user frame) and who made it; the advice
//! follows the call. glibc's time-zone check (localtime/strftime) is tz-stat-storm's, left out here.
//! Needs no symbols of the program: the library's names come from its own (dynamic) symbols.

use super::{finding, named, Text};
use crate::doctor::facts::{pct, Facts, Func};
use crate::doctor::thresholds::{LOOKUPS_CPU_PCT, LOOKUPS_RATE, LOOKUPS_STACKS_PCT};
use crate::doctor::{Confidence, Verdict};

/// The syscalls that look a path up.
const LOOKUPS: [&str; 12] = [
    "openat",
    "open",
    "openat2",
    "newfstatat",
    "stat",
    "lstat",
    "statx",
    "access",
    "faccessat",
    "faccessat2",
    "readlink",
    "readlinkat",
];

const GENERIC: Text = Text {
    id: "repeated-lookups",
    title: "the same files opened and stat'ed again and again",
    why: "each open or stat walks the path in the kernel and each open is followed by reads and a close: a \
          file read again on every call costs microseconds each time for content that did not change",
    fix: "read the file once and keep its content (reload it on a signal, or when its mtime changed, \
          checked at most once a second); call the library function once and keep its result",
    shrinks: "the open/stat syscalls (their count in `whyslow syscalls`)",
};

/// A library call whose file checks have a known cause and fix.
struct Known {
    calls: &'static [&'static str],
    title: &'static str,
    why: &'static str,
    fix: &'static str,
}

const KNOWN: [Known; 3] = [
    Known {
        calls: &[
            "getaddrinfo",
            "gethostbyname",
            "gethostbyname2",
            "gethostbyname_r",
            "gethostbyname2_r",
            "gethostbyaddr",
            "gethostbyaddr_r",
            "getnameinfo",
        ],
        title: "name resolution on every request: the resolver re-reads its files on each call",
        why: "glibc's resolver re-checks /etc/nsswitch.conf, /etc/resolv.conf, /etc/hosts and /etc/gai.conf \
              (stat, open, read, close) on every getaddrinfo call, and with dns in nsswitch.conf it asks the \
              DNS server each time too",
        fix: "resolve once (at startup, or per connection pool) and reuse the addresses, re-resolving on a \
              timer or after a connection error (respecting the DNS TTL); keep connections open so requests need \
              no lookup; a caching resolver (nscd, systemd-resolved) saves DNS round trips but not the file \
              checks",
    },
    Known {
        calls: &[
            "getpwnam",
            "getpwnam_r",
            "getpwuid",
            "getpwuid_r",
            "getgrnam",
            "getgrnam_r",
            "getgrgid",
            "getgrgid_r",
            "getgrouplist",
            "initgroups",
            "getspnam",
        ],
        title: "user and group lookups on every call re-read /etc/passwd and /etc/group",
        why: "each getpwnam/getpwuid/getgrnam call goes through nsswitch and reads the files (or asks LDAP/\
              sssd) again; nothing is cached inside the process",
        fix: "look the user or group up once and keep the uid/gid/name; on a host with many lookups run nscd \
              or sssd's cache",
    },
    Known {
        calls: &["setlocale", "newlocale", "iconv_open", "catopen", "bindtextdomain", "dcgettext", "gettext"],
        title: "locale or converter set up again and again",
        why: "setlocale/newlocale/iconv_open look for locale and gconv files (stat, open) each time they run",
        fix: "create the locale or converter once and reuse it (uselocale with a locale_t made at startup, one \
              iconv_t per thread)",
    },
];

/// The kernel's side of a path lookup syscall.
fn is_lookup_syscall(f: &Func) -> bool {
    f.kernel
        && named(
            f.name,
            &["do_sys_openat2", "do_sys_open", "vfs_statx", "vfs_fstatat", "do_faccessat", "do_readlinkat"],
            &[
                "__x64_sys_open",
                "__x64_sys_newfstatat",
                "__x64_sys_statx",
                "__x64_sys_newstat",
                "__x64_sys_newlstat",
                "__x64_sys_access",
                "__x64_sys_faccessat",
                "__x64_sys_readlink",
                "__do_sys_newfstatat",
                "__do_sys_statx",
            ],
        )
}

/// glibc's time-zone entry points: tz-stat-storm's.
fn is_tz(name: &str) -> bool {
    let f = Func { name, module: "", kernel: false };
    named(
        f.plain(),
        &["localtime", "localtime_r", "mktime", "strftime", "strftime_l", "tzset", "ctime", "ctime_r"],
        &[],
    )
}

fn known(call: &str) -> Option<&'static Known> {
    let plain = Func { name: call, module: "", kernel: false }.plain().to_string();
    KNOWN.iter().find(|k| k.calls.contains(&plain.as_str()))
}

pub fn check(f: &Facts) -> Verdict {
    if !f.has_syscalls() {
        return Verdict::NeedsData("syscall counters");
    }
    if !f.has_syscall_stacks() {
        return Verdict::NeedsData("sampled syscall stacks (to name the library call)");
    }
    let total = f.syscall(&LOOKUPS);
    let rate = total.calls as f64 / f.syscall_seconds().max(1e-9);
    if rate < LOOKUPS_RATE {
        return Verdict::Clear;
    }
    let (calls, all) = f.syscall_library_calls(&LOOKUPS);
    // The library call behind most of the lookups, with every user site calling it.
    let mut by_call: Vec<(String, i64)> = Vec::new();
    for (call, _, x) in calls.iter().filter(|c| !is_tz(&c.0)) {
        match by_call.iter_mut().find(|c| &c.0 == call) {
            Some(c) => c.1 += x,
            None => by_call.push((call.clone(), *x)),
        }
    }
    by_call.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let Some((call, stacks)) = by_call.first().cloned() else { return Verdict::Clear };
    let stacks_pct = pct(stacks, all);
    if stacks_pct < LOOKUPS_STACKS_PCT {
        return Verdict::Clear;
    }
    // Impact: for a call known to re-read files on every call (the resolver), all of its CPU time: its
    // result could be kept. For another call (sqlite3_exec opening its journal per transaction) only the
    // lookups' own time in the kernel: the call does other work, which stays.
    let k = known(&call);
    let cpu = match k {
        Some(_) => f.cpu(&|x: &Func| !x.kernel && !x.is_user_code() && x.name == call),
        None => f.cpu(&is_lookup_syscall),
    };
    if f.cpu_pct_surely(cpu.pct) < LOOKUPS_CPU_PCT {
        return Verdict::Clear;
    }
    let mut per_syscall: Vec<(&str, u64)> =
        LOOKUPS.iter().map(|&n| (n, f.syscall(&[n]).calls)).filter(|x| x.1 > 0).collect();
    per_syscall.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let split: Vec<String> = per_syscall.iter().take(4).map(|(n, c)| format!("{c} {n}")).collect();
    let sites: Vec<String> = calls
        .iter()
        .filter(|c| c.0 == call)
        .take(3)
        .map(|c| format!("{} ({:.1}%)", c.1, pct(c.2, all)))
        .collect();
    let plain = Func { name: &call, module: "", kernel: false }.plain().to_string();
    let evidence = vec![
        format!(
            "{} open/stat-family syscalls ({rate:.0}/s{}): {}",
            total.calls,
            f.syscall_window(),
            split.join(", ")
        ),
        format!(
            "{stacks_pct:.1}% of their sampled stacks are inside {plain}, called from: {}",
            sites.join(", ")
        ),
        match k {
            Some(_) => format!(
                "{:.1}% of CPU time is spent in {plain} (its file checks and parsing included)",
                cpu.pct
            ),
            None => format!("{:.1}% of CPU time is in the kernel's open/stat path", cpu.pct),
        },
    ];
    let confidence = if k.is_some() { Confidence::High } else { Confidence::Medium };
    let mut found = finding(f, &GENERIC, &cpu, "cpu", confidence, evidence);
    match k {
        Some(k) => {
            found.title = k.title.into();
            found.why = k.why.into();
            found.fix = k.fix.into();
        }
        None => found.title = format!("{} ({plain} on every call)", GENERIC.title),
    }
    Verdict::Found(found)
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::with_syscalls;
    use crate::doctor::rules::tests::fired;
    use crate::doctor::{Facts, Verdict};
    use whyslow_model::{Profile, SyscallStat};

    fn with_lookups(cpu: &[(&str, i64, i64)], stacks: &[(&str, i64)], opens: u64) -> Profile {
        let mut p = with_syscalls(cpu, stacks);
        for (name, calls) in [("openat", opens), ("newfstatat", 3 * opens)] {
            p.syscalls.push(SyscallStat { tid: 1, name: name.into(), calls, ..Default::default() });
        }
        p
    }

    const CPU: [(&str, i64, i64); 2] =
        [("main;handle;lib:getaddrinfo;lib:_nss_files_gethostbyname4_r", 40, 0), ("main;handle;send", 60, 0)];
    const STACKS: [(&str, i64); 3] = [
        ("main;handle;lib:getaddrinfo;lib:__nss_database_get;lib:__file_change_detection_for_path;newfstatat", 60),
        ("main;handle;lib:getaddrinfo;lib:fopen;lib:__open64;openat", 30),
        ("main;lib:__libc_start_main;lib:_dl_open;openat", 10),
    ];

    #[test]
    fn names_getaddrinfo_and_its_caller() {
        let p = with_lookups(&CPU, &STACKS, 40_000);
        let Verdict::Found(x) = super::check(&Facts::new(&p)) else { panic!("not found") };
        assert_eq!((x.impact_pct, x.impact_of), (40.0, "cpu"));
        assert_eq!(
            x.evidence,
            [
                "160000 open/stat-family syscalls (16000/s): 120000 newfstatat, 40000 openat",
                "90.0% of their sampled stacks are inside getaddrinfo, called from: handle (90.0%)",
                "40.0% of CPU time is spent in getaddrinfo (its file checks and parsing included)",
            ]
        );
        assert!(x.title.starts_with("name resolution") && x.fix.contains("resolve once"), "{x:?}");
        // A few lookups a second: nothing to fix.
        assert_eq!(fired(super::check, &with_lookups(&CPU, &STACKS, 1_000)), None);
    }

    /// glibc's time-zone check is tz-stat-storm's; an unknown library call gets the generic advice.
    #[test]
    fn leaves_the_time_zone_to_tz_stat_storm() {
        let tz = [("main;log;lib:localtime;lib:__tz_convert;lib:__tzfile_read;newfstatat", 90)];
        let cpu = [("main;log;lib:localtime;lib:__tzfile_read", 40, 0), ("main;work", 60, 0)];
        assert_eq!(fired(super::check, &with_lookups(&cpu, &tz, 40_000)), None);
        let cfg = [("main;handle;load_config;lib:fopen;lib:__open64;openat", 90)];
        let cpu = [
            ("main;handle;load_config;lib:fopen;lib:__open64;k:do_sys_openat2;k:path_openat", 20, 0),
            ("main;handle;load_config;lib:fopen", 10, 0),
            ("main;work", 70, 0),
        ];
        let Verdict::Found(x) = super::check(&Facts::new(&with_lookups(&cpu, &cfg, 40_000))) else {
            panic!("not found")
        };
        assert!(x.title.contains("(fopen on every call)") && x.evidence[1].contains("load_config"), "{x:?}");
        assert_eq!(x.impact_pct, 20.0);
        assert_eq!(x.evidence[2], "20.0% of CPU time is in the kernel's open/stat path");
        // sqlite3_exec opening its journal per transaction: its own work is not the lookups'.
        let journal = [("main;shell_exec;lib:sqlite3_exec;lib:unixOpen;lib:__open64;openat", 90)];
        let cpu = [
            ("main;shell_exec;lib:sqlite3_exec;lib:unixOpen;lib:__open64;k:do_sys_openat2", 2, 0),
            ("main;shell_exec;lib:sqlite3_exec;lib:sqlite3VdbeExec", 98, 0),
        ];
        assert_eq!(fired(super::check, &with_lookups(&cpu, &journal, 40_000)), None);
    }
}
