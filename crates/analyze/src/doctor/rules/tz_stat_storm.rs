//! tz-stat-storm (seed 001): with TZ unset, glibc's localtime()/strftime()/mktime() re-check
//! /etc/localtime with a stat on every call (`tzset_internal` -> `__tzfile_read`).

use super::{finding, list, named, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::{TZ_CPU_PCT, TZ_STAT_RATE};
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "tz-stat-storm",
    title: "localtime/strftime stat /etc/localtime on every call (TZ is not set)",
    why: "without a TZ environment variable glibc's tzset re-checks /etc/localtime with a stat syscall on \
          every localtime/strftime/mktime call, in case the system time zone changed",
    fix: "set TZ once at startup (e.g. TZ=:/etc/localtime in the service environment, or \
          setenv(\"TZ\", \":/etc/localtime\", 1) before the first localtime); or call localtime_r after one tzset()",
    shrinks: "__tzfile_read and the newfstatat syscalls",
};

const STAT: [&str; 4] = ["newfstatat", "stat", "statx", "lstat"];

fn tz_reader(f: &Func) -> bool {
    named(f.plain(), &["tzfile_read"], &[])
}

fn tz_entry(f: &Func) -> bool {
    named(
        f.plain(),
        &[
            "tzset_internal",
            "tz_convert",
            "tzset",
            "localtime",
            "localtime_r",
            "mktime",
            "strftime",
            "strftime_l",
            "tzfile_read",
        ],
        &[],
    )
}

pub fn check(f: &Facts) -> Verdict {
    if !f.has_cpu() {
        return Verdict::NeedsData("CPU samples");
    }
    let cpu = f.cpu(&tz_reader);
    if cpu.pct < TZ_CPU_PCT {
        return Verdict::Clear;
    }
    let mut evidence =
        vec![format!("{:.1}% of CPU time is in glibc's time-zone file check (__tzfile_read)", cpu.pct)];
    let mut confidence = Confidence::Medium;
    if f.has_syscalls() {
        let stat = f.syscall(&STAT);
        let rate = stat.calls as f64 / f.syscall_seconds().max(1e-9);
        if rate < TZ_STAT_RATE {
            return Verdict::Clear;
        }
        evidence.push(format!(
            "{} stat-family syscalls ({rate:.0}/s{}), {:.1} us each",
            stat.calls,
            f.syscall_window(),
            stat.total_ns as f64 / stat.calls.max(1) as f64 / 1e3
        ));
        if f.has_syscall_stacks() {
            let (m, all) = f.syscall_stacks(&STAT, &tz_entry);
            if all > 0 {
                evidence.push(format!(
                    "{:.0}% of the sampled stat stacks come from the time-zone code: {}",
                    m.pct,
                    list(&m.entries, all)
                ));
                if m.pct >= 50.0 {
                    confidence = Confidence::High;
                }
            }
        }
    }
    let callers = f.cpu(&tz_entry);
    if !callers.sites.is_empty() {
        evidence.push(format!("called from: {}", list(&callers.sites, f.cpu_total)));
    }
    Verdict::Found(finding(f, &TEXT, &cpu, "cpu", confidence, evidence))
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::{profile, with_syscalls};
    use crate::doctor::rules::tests::fired;

    #[test]
    fn fires_on_tzfile_reads_with_stat_storm() {
        let stacks = [
            ("main;log_request;lib:localtime;lib:__tz_convert;lib:tzset_internal;lib:__tzfile_read", 30, 0),
            ("main;work", 70, 0),
        ];
        assert_eq!(fired(super::check, &profile(&stacks)), Some(30.0));
        let mut p = with_syscalls(&stacks, &[("main;log_request;lib:__tzfile_read;newfstatat", 9)]);
        p.syscalls.push(whyslow_model::SyscallStat {
            name: "newfstatat".into(),
            calls: 50_000,
            ..Default::default()
        });
        assert_eq!(fired(super::check, &p), Some(30.0));
        // Few stats per second: not a storm.
        p.syscalls[0].calls = 500;
        assert_eq!(fired(super::check, &p), None);
    }

    #[test]
    fn quiet_when_tz_is_set() {
        let p = profile(&[("main;log_request;lib:localtime;lib:__tz_convert", 3, 0), ("main;work", 97, 0)]);
        assert_eq!(fired(super::check, &p), None);
    }
}
