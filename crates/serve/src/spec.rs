//! What a target is: which processes (by comm regex, command-line substring, pids, cgroup), which sources,
//! how often, and where periodic files go. Parsed strictly (unknown fields are errors) from the API's JSON,
//! the config file's TOML, or stackprobe's `PUT /flamegraph` form (api/stackprobe.rs).

use regex::Regex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Why a definition was refused; the API answers 422 (400 for JSON that does not parse).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{0}")]
    Syntax(String),
    #[error("{0}")]
    Invalid(String),
}

/// A source of samples a target records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// On-CPU time (cpu, cpu-ns).
    Cpu,
    /// Blocked and preempted time (offcpu; with cpu also wall).
    Offcpu,
    /// Sampled allocations (alloc-count, alloc-bytes).
    Alloc,
    /// Sampled syscall entries by stack (syscalls).
    Syscalls,
    /// Memory in use by stack, stackprobe's `mem` (inuse-bytes, inuse-count: what each window's end
    /// holds of what was allocated since the source started; alloc-* of the window beside): the
    /// allocator's functions probed, allocations sampled by bytes, within the probe budget.
    Mem,
}

pub const ALL_SOURCES: [SourceKind; 5] =
    [SourceKind::Cpu, SourceKind::Offcpu, SourceKind::Alloc, SourceKind::Syscalls, SourceKind::Mem];

/// Which processes a target takes. Every given criterion must hold; at least one is given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// Regular expression on the process name (comm, at most 15 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// Substring of the command line (arguments joined by spaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<u32>,
    /// cgroup v2 path prefix (`/system.slice/nginx.service`, a container's cgroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// Every process of the host (kernel threads and the agent aside); other criteria still narrow it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
}

/// Periodic flame graph and folded files of a target, as stackprobe writes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Output {
    /// Directory under the output root (relative; no `..`).
    pub dir: String,
    /// Seconds between files.
    #[serde(default = "default_period")]
    pub period_s: u64,
    /// One pair of files per process instead of one per target.
    #[serde(default)]
    pub multi_instance: bool,
}

fn default_period() -> u64 {
    60
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    #[default]
    Running,
    Stopped,
}

/// A target as the user defines it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(rename = "match")]
    pub matcher: Match,
    #[serde(default = "default_sources")]
    pub sources: Vec<SourceKind>,
    /// Sampling frequency of on-CPU time, Hz.
    #[serde(default = "default_frequency")]
    pub frequency: u64,
    /// Length of a stored window, seconds.
    #[serde(default = "default_window")]
    pub window_s: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Output>,
    #[serde(default)]
    pub state: State,
}

fn default_sources() -> Vec<SourceKind> {
    vec![SourceKind::Cpu]
}
fn default_frequency() -> u64 {
    99
}

/// The frequency of a target that matches every process when it names none: what Parca's agent and the
/// OpenTelemetry profiler sample a whole host at (a prime, so it does not beat with periodic work).
pub const ALL_FREQUENCY: u64 = 19;

/// A definition as parsed (JSON or TOML, as a JSON value): a target of every process without a
/// frequency gets [`ALL_FREQUENCY`] instead of the usual default.
fn with_defaults(mut v: serde_json::Value) -> serde_json::Value {
    let all = v.pointer("/match/all") == Some(&serde_json::Value::Bool(true));
    if let Some(o) = v.as_object_mut().filter(|o| all && !o.contains_key("frequency")) {
        o.insert("frequency".into(), ALL_FREQUENCY.into());
    }
    v
}
fn default_window() -> u64 {
    10
}

/// Longest regular expression accepted, and the size its compiled form may take.
const MAX_REGEX: usize = 1024;
const REGEX_SIZE_LIMIT: usize = 1 << 20;

impl TargetSpec {
    /// Parses and checks a definition from JSON.
    pub fn from_json(body: &[u8]) -> Result<Self, SpecError> {
        let v: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| SpecError::Syntax(e.to_string()))?;
        let spec = Self::from_value(v)?;
        spec.check()?;
        Ok(spec)
    }

    /// A definition from a parsed value (not checked).
    pub fn from_value(v: serde_json::Value) -> Result<Self, SpecError> {
        serde_json::from_value(with_defaults(v)).map_err(|e| SpecError::Syntax(e.to_string()))
    }

    /// Everything serde cannot check: a criterion present, the regex, ranges, label names, the output dir.
    pub fn check(&self) -> Result<(), SpecError> {
        let bad = |m: String| Err(SpecError::Invalid(m));
        let m = &self.matcher;
        if m.comm.is_none() && m.cmdline.is_none() && m.pids.is_empty() && m.cgroup.is_none() && !m.all {
            return bad("match needs at least one of comm, cmdline, pids, cgroup, all".into());
        }
        // Every process is sampled by one clock per CPU (see recorder.rs): nothing else is recorded so.
        if m.all && self.sources.iter().any(|s| *s != SourceKind::Cpu) {
            return bad(
                "a target of every process (match.all) samples on-CPU time only: sources must be [\"cpu\"]"
                    .into(),
            );
        }
        if let Some(re) = &m.comm {
            compile(re)?;
        }
        if m.cmdline.as_deref() == Some("") {
            return bad("match.cmdline must not be empty".into());
        }
        if let Some(cg) = &m.cgroup {
            if !cg.starts_with('/') {
                return bad(format!("match.cgroup must be an absolute cgroup path, not '{cg}'"));
            }
        }
        if self.sources.is_empty() {
            return bad("sources must name at least one of cpu, offcpu, alloc, syscalls, mem".into());
        }
        if !(1..=1000).contains(&self.frequency) {
            return bad(format!("frequency must be 1 to 1000 Hz, not {}", self.frequency));
        }
        if !(1..=3600).contains(&self.window_s) {
            return bad(format!("window_s must be 1 to 3600 seconds, not {}", self.window_s));
        }
        for (k, v) in &self.labels {
            let ok = k
                .chars()
                .enumerate()
                .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
            if k.is_empty() || !ok || k.starts_with("__") || k.len() > 64 {
                return bad(format!(
                    "label name '{k}' must match [a-zA-Z_][a-zA-Z0-9_]* (at most 64, no __ prefix)"
                ));
            }
            if v.len() > 256 {
                return bad(format!("label '{k}' is longer than 256 bytes"));
            }
        }
        if let Some(name) = &self.name {
            if name.is_empty()
                || name.len() > 64
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return bad(format!("name '{name}' must be 1 to 64 of [A-Za-z0-9._-]"));
            }
        }
        if let Some(o) = &self.output {
            relative_dir(&o.dir)?;
            if !(1..=86400).contains(&o.period_s) {
                return bad(format!("output.period_s must be 1 to 86400 seconds, not {}", o.period_s));
            }
        }
        Ok(())
    }

    /// The compiled matcher of a checked spec.
    pub fn matcher(&self) -> Matcher {
        Matcher {
            comm: self.matcher.comm.as_deref().and_then(|r| compile(r).ok()),
            cmdline: self.matcher.cmdline.clone(),
            pids: self.matcher.pids.clone(),
            cgroup: self.matcher.cgroup.clone(),
        }
    }

    /// The name files and series are named by: the given one, else `target-ID`.
    pub fn display_name(&self, id: i64) -> String {
        self.name.clone().unwrap_or_else(|| format!("target-{id}"))
    }
}

fn compile(re: &str) -> Result<Regex, SpecError> {
    if re.len() > MAX_REGEX {
        return Err(SpecError::Invalid(format!("match.comm is longer than {MAX_REGEX} bytes")));
    }
    regex::RegexBuilder::new(re).size_limit(REGEX_SIZE_LIMIT).build().map_err(|e| {
        SpecError::Invalid(format!(
            "match.comm is not a valid regular expression: {}",
            one_line(&e.to_string())
        ))
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A relative directory that stays under its root: no absolute path, no `..`, no empty name.
pub fn relative_dir(dir: &str) -> Result<PathBuf, SpecError> {
    let p = Path::new(dir);
    let escapes = p.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if dir.is_empty() || escapes || dir.contains('\0') {
        return Err(SpecError::Invalid(format!(
            "output directory '{dir}' must be a relative path inside the output root (no '..', not absolute)"
        )));
    }
    Ok(p.to_path_buf())
}

/// What a process looks like to the matchers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProcessView {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub cmdline: String,
    pub cgroup: String,
    /// Start time in clock ticks since boot: with the pid, names one process across pid reuse.
    pub start_ticks: u64,
}

/// A compiled [`Match`].
#[derive(Debug, Clone)]
pub struct Matcher {
    comm: Option<Regex>,
    cmdline: Option<String>,
    pids: Vec<u32>,
    cgroup: Option<String>,
}

impl Matcher {
    pub fn matches(&self, p: &ProcessView) -> bool {
        self.comm.as_ref().is_none_or(|r| r.is_match(&p.comm))
            && self.cmdline.as_ref().is_none_or(|s| p.cmdline.contains(s.as_str()))
            && (self.pids.is_empty() || self.pids.contains(&p.pid))
            && self.cgroup.as_ref().is_none_or(|c| {
                p.cgroup == *c || (p.cgroup.starts_with(c.as_str()) && p.cgroup[c.len()..].starts_with('/'))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::{ProcessView, SourceKind, SpecError, TargetSpec};

    fn view(pid: u32, comm: &str, cmdline: &str, cgroup: &str) -> ProcessView {
        ProcessView {
            pid,
            comm: comm.into(),
            cmdline: cmdline.into(),
            cgroup: cgroup.into(),
            ..Default::default()
        }
    }

    #[test]
    fn every_given_criterion_must_hold() {
        let s = TargetSpec::from_json(br#"{"match":{"comm":"^nginx","cmdline":"worker"}}"#).unwrap();
        assert_eq!((s.sources.clone(), s.frequency, s.window_s), (vec![SourceKind::Cpu], 99, 10));
        let m = s.matcher();
        assert!(m.matches(&view(1, "nginx", "nginx: worker process", "/")));
        assert!(!m.matches(&view(1, "nginx", "nginx: master process", "/")));
        assert!(!m.matches(&view(1, "xnginx", "worker", "/")));
        let cg =
            TargetSpec::from_json(br#"{"match":{"cgroup":"/system.slice/a.service"}}"#).unwrap().matcher();
        assert!(cg.matches(&view(1, "a", "", "/system.slice/a.service")));
        assert!(cg.matches(&view(1, "a", "", "/system.slice/a.service/sub")));
        assert!(!cg.matches(&view(1, "a", "", "/system.slice/a.service2")));
    }

    #[test]
    fn bad_definitions_say_what_is_wrong() {
        let err = |b: &[u8]| TargetSpec::from_json(b).unwrap_err().to_string();
        assert!(err(br#"{"match":{}}"#).contains("at least one"));
        assert!(err(br#"{"match":{"all":true},"sources":["cpu","offcpu"]}"#).contains("on-CPU time only"));
        assert!(err(br#"{"match":{"comm":"("}}"#).contains("not a valid regular expression"));
        assert!(err(br#"{"match":{"comm":"a"},"bogus":1}"#).contains("unknown field `bogus`"));
        assert!(err(br#"{"match":{"comm":"a"},"sources":["gpu"]}"#).contains("unknown variant `gpu`"));
        assert!(err(br#"{"match":{"comm":"a"},"frequency":0}"#).contains("frequency"));
        assert!(err(br#"{"match":{"comm":"a"},"labels":{"9x":"1"}}"#).contains("label name"));
        assert!(
            err(br#"{"match":{"comm":"a"},"output":{"dir":"../etc"}}"#).contains("inside the output root")
        );
        assert!(err(br#"{"match":{"comm":"a"},"output":{"dir":"/tmp"}}"#).contains("inside the output root"));
        assert!(matches!(TargetSpec::from_json(b"{"), Err(SpecError::Syntax(_))));
    }
}
