//! The views of a profile the rules share: each sample's stack as function ids with its CPU, off-CPU,
//! syscall-stack and allocation values; shares of time under functions matching a predicate, with the
//! functions and the call sites involved; the exact syscall and call counters.
//!
//! CPU samples taken inside whyslow's own probes (a uprobe trap, an eBPF program on a syscall) are the
//! measurement, not the program: they are left out of every CPU share and counted apart.

use std::collections::HashMap;
use whyslow_model::{sample_types, FrameKind, Profile, SyscallStat, PREEMPTED_FRAME};

/// One function of the profile as a rule sees it.
pub struct Func<'a> {
    pub name: &'a str,
    /// Module path ("" when none).
    pub module: &'a str,
    pub kernel: bool,
}

impl Func<'_> {
    /// Code the user wrote (or built into their program), not a system library, the kernel, the C++
    /// standard library templates or the Go runtime: where a fix would go.
    pub fn is_user_code(&self) -> bool {
        const SYSTEM_DIRS: [&str; 4] = ["/lib/", "/lib64/", "/usr/lib", "/usr/local/lib"];
        const LIBRARY_PREFIXES: [&str; 7] =
            ["std::", "__gnu_cxx::", "runtime.", "[", "_start", "__libc_start", "__GI_"];
        !self.kernel
            && !self.module.starts_with('[')
            && !SYSTEM_DIRS.iter().any(|d| self.module.starts_with(d))
            && !LIBRARY_PREFIXES.iter().any(|p| self.name.starts_with(p))
    }

    /// The name without glibc's internal prefixes (`__libc_malloc`, `__GI___fsync`, `__fdatasync`).
    pub fn plain(&self) -> &str {
        let mut n = self.name;
        for prefix in ["__GI_", "__libc_", "__"] {
            n = n.strip_prefix(prefix).unwrap_or(n);
        }
        n
    }
}

/// The time (or count) under functions a predicate matched, where it was spent and who called it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Match {
    pub value: i64,
    /// `value` as a percentage of the CPU (or wall) total.
    pub pct: f64,
    /// The outermost matching function of each stack, with its value, largest first.
    pub entries: Vec<(String, i64)>,
    /// The nearest user-code caller above the outermost match (see [`Func::is_user_code`]).
    pub sites: Vec<(String, i64)>,
}

struct View {
    /// Function ids, outermost first.
    funcs: Vec<usize>,
    cpu: i64,
    off: i64,
    syscalls: i64,
    instrumentation: bool,
}

pub struct Facts<'a> {
    pub p: &'a Profile,
    names: Vec<&'a str>,
    modules: Vec<&'a str>,
    kernel: Vec<bool>,
    views: Vec<View>,
    /// CPU value of the samples outside our probes; time in ns when the profile has `cpu-ns`.
    pub cpu_total: i64,
    instrumentation_cpu: i64,
    /// Running + blocked time of all threads (ns), 0 without off-CPU data.
    pub wall_total: i64,
    has_cpu: bool,
    has_offcpu: bool,
    has_syscall_stacks: bool,
    /// The file the profile is saved in (named in the verification commands).
    pub recording: String,
}

/// Kernel functions (and user pseudo-modules) that only run because a probe of ours fired.
fn is_probe_frame(name: &str, module: &str) -> bool {
    const PROBE: [&str; 14] = [
        "uprobe_",
        "handle_swbp",
        "handle_singlestep",
        "exc_int3",
        "asm_exc_int3",
        "exc_debug",
        "asm_exc_debug",
        "bpf_prog_",
        "__bpf_prog",
        "bpf_trace_run",
        "syscall_trace_enter",
        "syscall_exit_work",
        "perf_syscall_",
        "trace_call_bpf",
    ];
    module == "[uprobes]" || PROBE.iter().any(|p| name.starts_with(p))
}

impl<'a> Facts<'a> {
    pub fn new(p: &'a Profile) -> Facts<'a> {
        let mut ids: HashMap<(&str, &str), usize> = HashMap::new();
        let (mut names, mut modules, mut kernel) = (Vec::new(), Vec::new(), Vec::new());
        let of_frame: Vec<usize> = (0..p.frames.len() as u32)
            .map(|f| {
                let key = (p.frame_name(f), p.frame_module(f));
                let id = *ids.entry(key).or_insert_with(|| {
                    names.push(key.0);
                    modules.push(key.1);
                    kernel.push(false);
                    names.len() - 1
                });
                kernel[id] |= p.frames[f as usize].kind == FrameKind::Kernel;
                id
            })
            .collect();
        let cpu = p.sample_type(sample_types::CPU_NS).or_else(|| p.sample_type(sample_types::CPU));
        let off = p.sample_type(sample_types::OFFCPU);
        let sys = p.sample_type(sample_types::SYSCALLS);
        let get = |s: &whyslow_model::Sample, i: Option<usize>| {
            i.and_then(|i| s.values.get(i)).copied().unwrap_or(0)
        };
        let mut views = Vec::new();
        for s in &p.samples {
            let (c, o, y) = (get(s, cpu), get(s, off), get(s, sys));
            if c == 0 && o == 0 && y == 0 {
                continue;
            }
            let frames = p.stack_frames(s.stack);
            let instrumentation =
                c != 0 && frames.iter().any(|&f| is_probe_frame(p.frame_name(f), p.frame_module(f)));
            views.push(View {
                funcs: frames.iter().map(|&f| of_frame[f as usize]).collect(),
                cpu: c,
                off: o,
                syscalls: y,
                instrumentation,
            });
        }
        let cpu_total = views.iter().filter(|v| !v.instrumentation).map(|v| v.cpu).sum();
        let instrumentation_cpu = views.iter().filter(|v| v.instrumentation).map(|v| v.cpu).sum();
        let wall_total = match (p.sample_type(sample_types::CPU_NS), off) {
            (Some(_), Some(_)) => cpu_total + views.iter().map(|v| v.off).sum::<i64>(),
            _ => 0,
        };
        Facts {
            p,
            names,
            modules,
            kernel,
            has_cpu: cpu_total > 0,
            has_offcpu: off.is_some() && wall_total > 0,
            has_syscall_stacks: sys.is_some(),
            views,
            cpu_total,
            instrumentation_cpu,
            wall_total,
            recording: "whyslow.data".into(),
        }
    }

    fn func(&self, id: usize) -> Func<'_> {
        Func { name: self.names[id], module: self.modules[id], kernel: self.kernel[id] }
    }

    pub fn has_cpu(&self) -> bool {
        self.has_cpu
    }

    pub fn has_offcpu(&self) -> bool {
        self.has_offcpu
    }

    /// Syscalls were counted (a run that made none counted them too: its source list says so).
    pub fn has_syscalls(&self) -> bool {
        !self.p.syscalls.is_empty() || self.p.meta.event.contains("syscall counters")
    }

    pub fn has_syscall_stacks(&self) -> bool {
        self.has_syscall_stacks
    }

    pub fn has_calls(&self) -> bool {
        !self.p.calls.is_empty()
    }

    pub fn instrumentation_pct(&self) -> f64 {
        pct(self.instrumentation_cpu, self.cpu_total + self.instrumentation_cpu)
    }

    /// Seconds the profile covers.
    pub fn seconds(&self) -> f64 {
        self.p.meta.duration_ns as f64 / 1e9
    }

    /// Seconds the call counters ran.
    pub fn call_seconds(&self) -> f64 {
        match self.p.meta.calls_duration_ns {
            0 => self.seconds(),
            ns => ns as f64 / 1e9,
        }
    }

    fn matching(&self, value: impl Fn(&View) -> i64, total: i64, pred: &dyn Fn(&Func) -> bool) -> Match {
        let mut m = Match::default();
        let (mut entries, mut sites): (HashMap<usize, i64>, HashMap<usize, i64>) = Default::default();
        for v in &self.views {
            let x = value(v);
            if x == 0 {
                continue;
            }
            let Some(i) = v.funcs.iter().position(|&f| pred(&self.func(f))) else { continue };
            m.value += x;
            *entries.entry(v.funcs[i]).or_default() += x;
            if let Some(&site) = v.funcs[..i].iter().rev().find(|&&f| self.func(f).is_user_code()) {
                *sites.entry(site).or_default() += x;
            }
        }
        m.pct = pct(m.value, total);
        m.entries = self.ranked(entries);
        m.sites = self.ranked(sites);
        m
    }

    fn ranked(&self, by_func: HashMap<usize, i64>) -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> =
            by_func.into_iter().map(|(f, x)| (self.names[f].to_string(), x)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// On-CPU time under the functions `pred` matches (outside our probes), as a share of all CPU time.
    pub fn cpu(&self, pred: &dyn Fn(&Func) -> bool) -> Match {
        self.matching(|v| if v.instrumentation { 0 } else { v.cpu }, self.cpu_total, pred)
    }

    /// Blocked time under the functions `pred` matches, as a share of all threads' wall time.
    pub fn blocked(&self, pred: &dyn Fn(&Func) -> bool) -> Match {
        self.matching(|v| v.off, self.wall_total, pred)
    }

    /// Sampled stacks of the syscalls `names` (leaf: the syscall's name in module `[syscall]`) that pass through a function `pred`
    /// matches: (matching, all sampled stacks of those syscalls).
    pub fn syscall_stacks(&self, names: &[&str], pred: &dyn Fn(&Func) -> bool) -> (Match, i64) {
        let is_call = |v: &View| {
            v.funcs.last().is_some_and(|&f| self.modules[f] == "[syscall]" && names.contains(&self.names[f]))
        };
        let all: i64 = self.views.iter().filter(|v| is_call(v)).map(|v| v.syscalls).sum();
        (self.matching(|v| if is_call(v) { v.syscalls } else { 0 }, all, pred), all)
    }

    /// Exact counters of these syscalls merged over threads.
    pub fn syscall(&self, names: &[&str]) -> SyscallStat {
        let mut total = SyscallStat::default();
        for s in self.p.syscalls.iter().filter(|s| names.contains(&s.name.as_str())) {
            total.merge(s);
        }
        total
    }

    /// Exact call count of a function over all processes, when it was counted.
    pub fn calls_of(&self, name: &str) -> Option<u64> {
        let mut it = self.p.calls.iter().filter(|c| c.name == name).peekable();
        it.peek()?;
        Some(it.map(|c| c.calls).sum())
    }

    /// Self CPU time per module (outside our probes), largest first.
    pub fn module_self_cpu(&self) -> Vec<(String, i64)> {
        let mut by: HashMap<&str, i64> = HashMap::new();
        for v in self.views.iter().filter(|v| !v.instrumentation && v.cpu != 0) {
            if let Some(&leaf) = v.funcs.last() {
                *by.entry(self.modules[leaf]).or_default() += v.cpu;
            }
        }
        let mut out: Vec<(String, i64)> = by.into_iter().map(|(m, x)| (m.to_string(), x)).collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }

    /// Self and total CPU of every function (outside our probes), by id.
    fn self_and_total(&self) -> (Vec<i64>, Vec<i64>) {
        let n = self.names.len();
        let (mut self_, mut total, mut seen) = (vec![0i64; n], vec![0i64; n], vec![usize::MAX; n]);
        for (i, v) in self.views.iter().enumerate().filter(|(_, v)| !v.instrumentation && v.cpu != 0) {
            if let Some(&leaf) = v.funcs.last() {
                self_[leaf] += v.cpu;
            }
            for &f in &v.funcs {
                if seen[f] != i {
                    seen[f] = i;
                    total[f] += v.cpu;
                }
            }
        }
        (self_, total)
    }

    /// Callees of `caller` (functions directly below it in CPU stacks), by CPU time, largest first.
    pub fn callees(&self, caller: &str) -> Vec<(String, i64)> {
        let mut by: HashMap<usize, i64> = HashMap::new();
        for v in self.views.iter().filter(|v| !v.instrumentation && v.cpu != 0) {
            if let Some(i) = v.funcs.iter().position(|&f| self.names[f] == caller) {
                if let Some(&callee) = v.funcs.get(i + 1) {
                    *by.entry(callee).or_default() += v.cpu;
                }
            }
        }
        self.ranked(by)
    }

    /// CPU time spent in the function itself, not in what it calls (outside our probes).
    pub fn cpu_self(&self, name: &str) -> i64 {
        self.views
            .iter()
            .filter(|v| !v.instrumentation && v.funcs.last().is_some_and(|&f| self.names[f] == name))
            .map(|v| v.cpu)
            .sum()
    }

    /// The hottest user functions by self CPU (up to `n`, at least 1% each) and up to `callees` of each
    /// one's heaviest callees in user code.
    pub fn call_candidates(&self, n: usize, callees: usize) -> Vec<String> {
        let (self_, total) = self.self_and_total();
        let mut ids: Vec<usize> = (0..self.names.len())
            .filter(|&f| self.func(f).is_user_code() && pct(total[f], self.cpu_total) >= 1.0)
            .collect();
        ids.sort_by(|&a, &b| self_[b].cmp(&self_[a]).then(total[b].cmp(&total[a])).then(a.cmp(&b)));
        let mut out: Vec<String> = Vec::new();
        for &f in ids.iter().take(n) {
            for name in std::iter::once(self.names[f].to_string()).chain(
                self.callees(self.names[f])
                    .into_iter()
                    .filter(|(c, _)| ids.iter().any(|&i| self.names[i] == c))
                    .take(callees)
                    .map(|(c, _)| c),
            ) {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        }
        out
    }

    /// The heaviest call paths in user code (kernel and library frames below the last user frame cut
    /// off), on-CPU ones and, with off-CPU data, blocked ones; largest first.
    pub fn hot_paths(&self, n: usize) -> Vec<super::HotPath> {
        let mut by: HashMap<(Vec<usize>, bool), i64> = HashMap::new();
        for v in &self.views {
            let (x, blocked) = match (v.instrumentation, v.cpu, v.off) {
                (false, c, _) if c != 0 => (c, false),
                (_, _, o) if o != 0 => (o, true),
                _ => continue,
            };
            let end =
                v.funcs.iter().rposition(|&f| self.func(f).is_user_code()).map_or(v.funcs.len(), |i| i + 1);
            // One library frame after the last user frame says what the user code was doing; startup
            // frames above the first user frame (`_start`, `__libc_start_main`, `runtime.main`) say nothing.
            let end = (end + 1).min(v.funcs.len());
            let start = v.funcs.iter().position(|&f| self.func(f).is_user_code()).unwrap_or(0).min(end);
            let path: Vec<usize> = v.funcs[start..end]
                .iter()
                .copied()
                .filter(|&f| !self.kernel[f] || self.names[f] == PREEMPTED_FRAME)
                .collect();
            *by.entry((path, blocked)).or_default() += x;
        }
        let mut v: Vec<_> = by.into_iter().collect();
        let share = |((_, blocked), x): &((Vec<usize>, bool), i64)| {
            pct(*x, if *blocked || self.wall_total > 0 { self.wall_total } else { self.cpu_total })
        };
        v.sort_by(|a, b| share(b).total_cmp(&share(a)).then(a.0.cmp(&b.0)));
        v.iter()
            .take(n)
            .map(|e| super::HotPath {
                frames: e.0 .0.iter().map(|&f| self.names[f].to_string()).collect(),
                pct: share(e),
                of: if e.0 .1 {
                    "wall (blocked)"
                } else if self.wall_total > 0 {
                    "wall (running)"
                } else {
                    "cpu"
                },
            })
            .collect()
    }
}

pub fn pct(x: i64, total: i64) -> f64 {
    if total <= 0 {
        0.0
    } else {
        100.0 * x as f64 / total as f64
    }
}

#[cfg(test)]
pub mod test_profile {
    //! Small synthetic profiles for the rules' unit tests.
    use whyslow_model::{FrameKind, Metadata, Profile, ProfileBuilder, SampleType};

    /// A frame: `name` in `/app` (user code), `lib:name` in libc, `k:name` in the kernel.
    fn frame(b: &mut ProfileBuilder, spec: &str) -> u32 {
        if let Some(k) = spec.strip_prefix("k:") {
            let m = b.module("[kernel]", "");
            b.frame(k, m, "", FrameKind::Kernel)
        } else if let Some(l) = spec.strip_prefix("lib:") {
            let m = b.module("/usr/lib/x86_64-linux-gnu/libc.so.6", "");
            b.frame(l, m, "", FrameKind::User)
        } else {
            let m = b.module("/app", "");
            b.frame(spec, m, "app.c", FrameKind::User)
        }
    }

    /// Stacks (outermost first, `;`-separated frame specs) with CPU and off-CPU nanoseconds; 10 s run.
    pub fn profile(stacks: &[(&str, i64, i64)]) -> Profile {
        with_syscalls(stacks, &[])
    }

    /// Also sampled syscall stacks: the last spec is the syscall name (module `[syscall]`), with a count.
    pub fn with_syscalls(stacks: &[(&str, i64, i64)], syscall_stacks: &[(&str, i64)]) -> Profile {
        let types = ["cpu-ns", "offcpu", "syscalls"]
            .map(|n| SampleType { name: n.into(), unit: "nanoseconds".into() });
        let mut b = ProfileBuilder::new(
            Metadata { duration_ns: 10_000_000_000, ..Default::default() },
            types.to_vec(),
        );
        let t = b.thread(1, 1, "app");
        for (stack, cpu, off) in stacks {
            let frames: Vec<u32> = stack.split(';').map(|s| frame(&mut b, s)).collect();
            let s = b.stack(&frames);
            b.add_sample(s, t, &[*cpu, *off, 0]);
        }
        for (stack, n) in syscall_stacks {
            let (path, name) = stack.rsplit_once(';').unwrap();
            let mut frames: Vec<u32> = path.split(';').map(|s| frame(&mut b, s)).collect();
            let m = b.module("[syscall]", "");
            frames.push(b.frame(name, m, "", FrameKind::Kernel));
            let s = b.stack(&frames);
            b.add_sample(s, t, &[0, 0, *n]);
        }
        b.finish()
    }
}
