//! What several commands share on their command lines: the argument groups (target, report file,
//! load, slicing, output format, --limit) and their conversion into the libraries' option structs, with
//! the libraries' option errors said in the flags the user typed. Nothing here runs or prints a report.

use crate::shell::split_command;
use anyhow::{anyhow, bail, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;
use whyslow_investigate::loadtest::{LoadOptions, LoadTestError, Ready};
use whyslow_investigate::{InvestigateError, InvestigateOption};
use whyslow_model::Profile;
use whyslow_record::{RecordError, RecordOption, Target};

/// The rows every table shows unless `--limit` says otherwise (pprof's -top shows 10, perf report all:
/// a screenful).
pub const DEFAULT_LIMIT: usize = 25;

/// Says on stderr, once, that an old spelling still works but has a new one.
pub fn deprecated(old: &str, new: &str) {
    eprintln!("whyslow: warning: {old} is deprecated, use {new}");
}

/// Where a launching command's report goes.
#[derive(Args)]
pub struct ReportTo {
    /// Print the report (tables, JSON, traced calls) to FILE instead of standard output, which the
    /// launched command keeps for its own output (as strace -o does). Progress and errors stay on stderr.
    #[arg(long = "print-to", value_name = "FILE", display_order = 900)]
    pub report: Option<PathBuf>,
    /// Deprecated spelling of --print-to.
    #[arg(long = "report", value_name = "FILE", hide = true)]
    pub old_report: Option<PathBuf>,
}

impl ReportTo {
    pub fn upgrade(&mut self) {
        if let Some(p) = self.old_report.take() {
            deprecated("--report", "--print-to");
            self.report.get_or_insert(p);
        }
    }
}

/// Which processes to profile.
#[derive(Args)]
pub struct TargetArgs {
    /// Attach to running processes (comma-separated PIDs).
    #[arg(short = 'p', long = "pid", value_delimiter = ',', conflicts_with = "comm")]
    pub pids: Vec<u32>,
    /// Attach to every running process with this name.
    #[arg(long)]
    pub comm: Option<String>,
    /// Stop after this many seconds.
    #[arg(short = 'd', long = "duration")]
    pub duration: Option<f64>,
    /// Command to launch and profile (after `--`).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Profiling a server under load.
#[derive(Args)]
pub struct LoadArgs {
    /// Load command to run against the server once it is ready (split into words like a shell does,
    /// not run by one); the recording ends when it ends and the server is stopped (SIGTERM, then SIGKILL
    /// after 3 s). wrk and redis-benchmark output is parsed for requests/s and latency.
    #[arg(long, value_name = "CMD")]
    pub load: Option<String>,
    /// With --load: the server is ready when 127.0.0.1:PORT accepts connections.
    #[arg(long, value_name = "PORT", requires = "load", conflicts_with = "ready_delay")]
    pub ready_port: Option<u16>,
    /// With --load: the server is ready this many seconds after it started.
    #[arg(long, value_name = "SECONDS", requires = "load")]
    pub ready_delay: Option<f64>,
    /// With --ready-port: give up when the port does not accept connections within this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub ready_timeout: f64,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum OutputFormat {
    /// Tables for people, values in units (1.20s, 3.50MiB).
    Text,
    /// One JSON document for programs: exact integers, each named with its unit.
    Json,
}

/// Slicing a recording after the fact (perf report's --comm/--dso/--pid/--tid, pprof's -focus/-ignore).
#[derive(Args, Default)]
pub struct SliceArgs {
    /// Leave kernel frames out (a sample entirely in the kernel shows as one `[kernel]` frame).
    #[arg(long, help_heading = "Slicing")]
    pub no_kernel: bool,
    /// Only these processes (comma-separated pids).
    #[arg(long, value_delimiter = ',', value_name = "PID", help_heading = "Slicing")]
    pub pid: Vec<u32>,
    /// Only these threads (comma-separated tids).
    #[arg(long, value_delimiter = ',', value_name = "TID", help_heading = "Slicing")]
    pub tid: Vec<u32>,
    /// Only threads whose name matches this regular expression.
    #[arg(long, value_name = "RE", help_heading = "Slicing")]
    pub comm: Option<String>,
    /// Only samples whose innermost frame is in a module (file name) matching this regular expression.
    #[arg(long, value_name = "RE", help_heading = "Slicing")]
    pub module: Option<String>,
    /// Only samples with a function matching this regular expression on their stack.
    #[arg(long, value_name = "RE", help_heading = "Slicing")]
    pub focus: Option<String>,
    /// Leave out samples with a function matching this regular expression on their stack.
    #[arg(long, value_name = "RE", help_heading = "Slicing")]
    pub ignore: Option<String>,
}

/// A library's complaint about one of its options (`stack_bytes must be ...`), said with the flag the
/// user typed (`--stack-size must be ...`) wherever it sits in the error's message; None for other
/// errors.
pub fn in_flag_words(e: &anyhow::Error, message: &str) -> Option<String> {
    for cause in e.chain() {
        let (library, cli) = if let Some(RecordError::BadOption { option, problem }) = cause.downcast_ref() {
            let flag = match option {
                RecordOption::StackBytes => "--stack-size",
                RecordOption::Frequency => "-F",
                RecordOption::AllocPeriod => "--alloc-period",
                RecordOption::SyscallStacksPeriod => "--stacks-period",
                RecordOption::CallersPeriod => "--stacks-period",
                RecordOption::CallerStacks => "--stacks",
                RecordOption::MemSample => "--mem-sample",
            };
            (cause.to_string(), format!("{flag} {problem}"))
        } else if let Some(e @ LoadTestError::ServerNotReady { .. }) = cause.downcast_ref() {
            let library = e.to_string();
            let cli = library.replace("(the ready timeout)", "(--ready-timeout)");
            (library, cli)
        } else if let Some(InvestigateError::BadOption { option, problem }) = cause.downcast_ref() {
            let cli = match option {
                InvestigateOption::StacksPeriod | InvestigateOption::AllocPeriod => {
                    format!("--stacks-period {problem}")
                }
                InvestigateOption::Budget => {
                    "--budget is a percentage of the target's CPU time, above 0 and at most 100".to_string()
                }
                InvestigateOption::Runs => format!("-n {problem}"),
                InvestigateOption::Frequency => format!("-F {problem}"),
            };
            (cause.to_string(), cli)
        } else {
            continue;
        };
        return Some(message.replace(&library, &cli));
    }
    None
}

pub fn target(t: &TargetArgs) -> Result<Target> {
    Ok(match (&t.pids[..], &t.comm, &t.command[..]) {
        ([], None, []) => bail!("nothing to profile: give a command after `--`, -p PID or --comm NAME"),
        ([], None, cmd) => Target::Launch(cmd.to_vec()),
        (pids, None, []) => Target::Pids(pids.to_vec()),
        ([], Some(name), []) => Target::Comm(name.clone()),
        _ => bail!("give only one of: a command after `--`, -p PID, --comm NAME"),
    })
}

pub fn duration(t: &TargetArgs) -> Result<Option<Duration>> {
    t.duration.map(|d| seconds("-d (duration)", d, false)).transpose()
}

/// Seconds given on the command line: finite, positive (or zero where `zero` is allowed), and small
/// enough for a Duration (`-d 1e20` is an error, not a panic).
pub fn seconds(what: &str, s: f64, zero: bool) -> Result<Duration> {
    let ok = s.is_finite() && (s > 0.0 || (zero && s == 0.0));
    match Duration::try_from_secs_f64(s) {
        Ok(d) if ok => Ok(d),
        _ if !ok => {
            bail!("{what} must be a {}number of seconds, not {s}", if zero { "" } else { "positive " })
        }
        _ => bail!("{what}: {s} seconds is longer than whyslow can wait"),
    }
}

/// The part of a loaded profile the slicing options keep.
pub fn sliced(p: Profile, a: &SliceArgs) -> Result<Profile> {
    use whyslow_analyze::slice::{pattern, Slice};
    let re = |option, p: &Option<String>| p.as_deref().map(|p| pattern(option, p)).transpose();
    let slice = Slice {
        no_kernel: a.no_kernel,
        pids: a.pid.clone(),
        tids: a.tid.clone(),
        comm: re("--comm", &a.comm)?,
        module: re("--module", &a.module)?,
        focus: re("--focus", &a.focus)?,
        ignore: re("--ignore", &a.ignore)?,
    };
    Ok(if slice.is_everything() { p } else { slice.apply(&p) })
}

/// The load options from the command line (None without --load).
pub fn load_options(l: &LoadArgs) -> Result<Option<LoadOptions>> {
    let Some(cmd) = &l.load else { return Ok(None) };
    let command = split_command(cmd).map_err(|e| anyhow!("--load: {e}"))?;
    let seconds = |what: &str, s: f64| seconds(what, s, true);
    let ready = match (l.ready_port, l.ready_delay) {
        (Some(0), _) => bail!("--ready-port must be a port number (1-65535)"),
        (Some(p), _) => Ready::Port(p),
        (None, Some(d)) => Ready::Delay(seconds("--ready-delay", d)?),
        (None, None) => {
            bail!("--load needs --ready-port PORT or --ready-delay SECONDS to know when the server is ready")
        }
    };
    let ready_timeout = seconds("--ready-timeout", l.ready_timeout)?;
    Ok(Some(LoadOptions { command, ready, ready_timeout }))
}

/// A probe budget given on the command line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// Never stop the probes.
    None,
    /// Percent of the target's CPU time.
    Pct(f64),
}

pub fn parse_budget(s: &str) -> Result<Budget, String> {
    if s == "none" {
        return Ok(Budget::None);
    }
    match s.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(Budget::Pct(p)),
        _ => Err("a percentage of the target's CPU time, above 0 and at most 100, or `none`".into()),
    }
}

/// The probe budget of a running target when none is given, in percent of its CPU time (the doctor's).
const DEFAULT_BUDGET_PCT: f64 = 5.0;

/// The share of the target's CPU time the probes may cost: as `given`, else the doctor's for a running
/// target and none for a launched command (its counts stay exact).
pub fn probe_budget(given: Option<Budget>, launched: bool) -> Option<f64> {
    match given {
        Some(Budget::Pct(p)) => Some(p / 100.0),
        Some(Budget::None) => None,
        None if launched => None,
        None => Some(DEFAULT_BUDGET_PCT / 100.0),
    }
}
