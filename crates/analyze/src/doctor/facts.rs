//! The views of a profile the rules share: each sample's stack as function ids with its CPU, off-CPU,
//! syscall-stack and allocation values; shares of time under functions matching a predicate, with the
//! functions and the call sites involved; the exact syscall and call counters.
//!
//! CPU samples taken inside whyslow's own probes (a uprobe trap, an eBPF program on a syscall) are the
//! measurement, not the program: they are left out of every CPU share and counted apart.

use std::collections::HashMap;
use whyslow_model::{is_probe_frame, sample_types, FrameKind, Profile, SyscallStat, PREEMPTED_FRAME};

mod python;
#[cfg(test)]
pub mod test_profile;
mod waits;
mod wall;

pub use waits::{is_gil_take, Wait};
pub use wall::{IdleThread, ThreadSplit, WallSplit};

/// One function of the profile as a rule sees it.
pub struct Func<'a> {
    pub name: &'a str,
    /// Module path ("" when none).
    pub module: &'a str,
    pub kernel: bool,
}

/// A frame named by its module and offset (`nginx+0x76e8b`): no symbol covers its address.
fn is_address(name: &str) -> bool {
    name.rsplit_once("+0x")
        .is_some_and(|(_, hex)| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A CPython interpreter's own code (`libpython3.X.so`, a `python3.X` binary, wherever installed): the
/// runtime, as Go's is; the Python functions it runs (named by their .py file) are the program's.
pub(crate) fn is_python_interpreter(module: &str) -> bool {
    let file = module.rsplit('/').next().unwrap_or(module);
    file.starts_with("libpython")
        || file
            .strip_prefix("python")
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.' || c == 't'))
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
            && !is_python_interpreter(self.module)
            && !LIBRARY_PREFIXES
                .iter()
                .any(|p| self.name.starts_with(p) || self.qualified_name().starts_with(p))
    }

    /// The function's qualified name without the return type a demangled template instance starts with
    /// (`void std::vector<int>::push_back(..)` is `std::vector`).
    fn qualified_name(&self) -> &str {
        let head = &self.name[..self.name.find(['<', '(']).unwrap_or(self.name.len())];
        head.rsplit(' ').next().unwrap_or(head)
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

impl Match {
    /// This time and `other`'s (shares of the same total) together.
    pub fn plus(&self, other: &Match) -> Match {
        let merge = |a: &[(String, i64)], b: &[(String, i64)]| {
            let mut by: HashMap<&str, i64> = HashMap::new();
            for (name, x) in a.iter().chain(b) {
                *by.entry(name).or_default() += x;
            }
            largest_first(by.into_iter().map(|(n, x)| (n.to_string(), x)).collect())
        };
        Match {
            value: self.value + other.value,
            pct: self.pct + other.pct,
            entries: merge(&self.entries, &other.entries),
            sites: merge(&self.sites, &other.sites),
        }
    }
}

/// Named values, largest first (ties by name).
fn largest_first(mut v: Vec<(String, i64)>) -> Vec<(String, i64)> {
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

struct View {
    /// Function ids, outermost first.
    funcs: Vec<usize>,
    /// The sample's stack (its leaf node), for the source lines of its frames.
    stack: u32,
    /// Index into the profile's threads.
    thread: u32,
    cpu: i64,
    off: i64,
    /// What the off-CPU time was (Blocked when there is none).
    wait: Wait,
    syscalls: i64,
    instrumentation: bool,
}

pub struct Facts<'a> {
    pub p: &'a Profile,
    names: Vec<&'a str>,
    modules: Vec<&'a str>,
    kernel: Vec<bool>,
    /// Each function's [`Func::is_user_code`], decided once (the rules ask it of every frame).
    user: Vec<bool>,
    views: Vec<View>,
    /// CPU value of the samples outside our probes; time in ns when the profile has `cpu-ns`.
    pub cpu_total: i64,
    instrumentation_cpu: i64,
    /// Running, blocked and runnable time of all threads (ns), idle time left out; 0 without off-CPU data.
    pub wall_total: i64,
    has_cpu: bool,
    has_offcpu: bool,
    has_syscall_stacks: bool,
    /// The file the profile is saved in (named in the verification commands).
    pub recording: String,
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
        let func = |id: usize| Func { name: names[id], module: modules[id], kernel: kernel[id] };
        for s in &p.samples {
            let (c, o, y) = (get(s, cpu), get(s, off), get(s, sys));
            if c == 0 && o == 0 && y == 0 {
                continue;
            }
            let frames = p.stack_frames(s.stack);
            // On or off CPU: a thread descheduled inside a probe's trap waits for the probe too.
            let instrumentation = (c != 0 || o != 0)
                && frames.iter().any(|&f| is_probe_frame(p.frame_name(f), p.frame_module(f)));
            let funcs: Vec<usize> = frames.iter().map(|&f| of_frame[f as usize]).collect();
            let wait = if o == 0 { Wait::Blocked } else { waits::wait_of(&funcs, func) };
            views.push(View {
                funcs,
                stack: s.stack,
                thread: s.thread,
                cpu: c,
                off: o,
                wait,
                syscalls: y,
                instrumentation,
            });
        }
        let cpu_total = views.iter().filter(|v| !v.instrumentation).map(|v| v.cpu).sum();
        let instrumentation_cpu = views.iter().filter(|v| v.instrumentation).map(|v| v.cpu).sum();
        let wall_total = match (p.sample_type(sample_types::CPU_NS), off) {
            (Some(_), Some(_)) => {
                let working = views.iter().filter(|v| v.wait != Wait::Idle && !v.instrumentation);
                cpu_total + working.map(|v| v.off).sum::<i64>()
            }
            _ => 0,
        };
        let user = (0..names.len()).map(|id| func(id).is_user_code()).collect();
        Facts {
            p,
            names,
            modules,
            kernel,
            user,
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

    /// A frame of the profile (by frame id) as a rule sees it.
    pub fn frame_func(&self, f: u32) -> Func<'_> {
        let p = self.p;
        Func {
            name: p.frame_name(f),
            module: p.frame_module(f),
            kernel: p.frames[f as usize].kind == FrameKind::Kernel,
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

    /// Seconds the syscall counters ran.
    pub fn syscall_seconds(&self) -> f64 {
        self.p.meta.syscalls_seconds()
    }

    /// How many threads made any of syscalls `names`.
    pub fn syscall_threads(&self, names: &[&str]) -> usize {
        let tids = self.p.syscalls.iter().filter(|s| names.contains(&s.name.as_str()) && s.calls > 0);
        tids.map(|s| s.tid).collect::<std::collections::HashSet<u32>>().len()
    }

    /// The wall time, in ns, of the threads that made syscalls `names` over the window the counters ran:
    /// what the time inside those syscalls is a share of.
    pub fn syscall_wall_ns(&self, names: &[&str]) -> f64 {
        self.syscall_seconds() * 1e9 * self.syscall_threads(names).max(1) as f64
    }

    /// [`Facts::syscall_wall_ns`] less the share those threads waited for work: the working time the
    /// syscalls' own time is a share of, so that a server idle half the time for want of load (a
    /// client-bound benchmark) shows the cost per request it pays, not half of it.
    pub fn syscall_working_ns(&self, names: &[&str]) -> f64 {
        let tids = self.p.syscalls.iter().filter(|s| names.contains(&s.name.as_str()) && s.calls > 0);
        let tids = tids.map(|s| s.tid).collect();
        self.syscall_wall_ns(names) * self.working_fraction(&tids).max(1e-3)
    }

    /// How a syscall rate's window reads after the rate: "" when the counters ran the whole profile.
    pub fn syscall_window(&self) -> String {
        let m = &self.p.meta;
        match (m.syscalls_duration_ns, m.syscall_slices.len()) {
            (0, _) => String::new(),
            (_, 0 | 1) => {
                format!(" in the first {:.2} s, while the syscall counters ran", self.syscall_seconds())
            }
            (_, n) => format!(
                " over {:.2} s counted in {n} windows spread over the run{}",
                self.syscall_seconds(),
                m.syscall_rate_error().map_or(String::new(), |e| format!(", ±{:.0}%", (e * 100.0).max(1.0)))
            ),
        }
    }

    /// A CPU share of `pct` percent less its sampling error (95%, from the number of CPU samples): what
    /// a threshold is compared with, so that a share just above it by chance (a few hundred samples of a
    /// live process at 99 Hz) raises nothing. An exact profile (no sample count) keeps its share.
    pub fn cpu_pct_surely(&self, pct: f64) -> f64 {
        self.p.cpu_samples().map_or(pct, |n| pct - crate::stats::share_error(pct, n))
    }

    /// Seconds the call counters ran.
    pub fn call_seconds(&self) -> f64 {
        self.p.meta.calls_seconds()
    }

    fn matching(&self, value: impl Fn(&View) -> i64, total: i64, pred: &dyn Fn(&Func) -> bool) -> Match {
        self.matching_except(value, total, pred, &|_| false)
    }

    /// As `matching`, leaving out the stacks through a function `except` matches.
    fn matching_except(
        &self,
        value: impl Fn(&View) -> i64,
        total: i64,
        pred: &dyn Fn(&Func) -> bool,
        except: &dyn Fn(&Func) -> bool,
    ) -> Match {
        let mut m = Match::default();
        let (mut entries, mut sites): (HashMap<usize, i64>, HashMap<usize, i64>) = Default::default();
        let (mut is, mut skip) = (self.memo(pred), self.memo(except));
        for v in &self.views {
            let x = value(v);
            if x == 0 || v.funcs.iter().any(|&f| skip(f)) {
                continue;
            }
            let Some(i) = v.funcs.iter().position(|&f| is(f)) else { continue };
            m.value += x;
            *entries.entry(v.funcs[i]).or_default() += x;
            if let Some(site) = self.site(&v.funcs[..i]) {
                *sites.entry(site).or_default() += x;
            }
        }
        m.pct = pct(m.value, total);
        m.entries = self.ranked(entries);
        m.sites = self.ranked(sites);
        m
    }

    /// The innermost user-code frame of `callers` (outermost first) that has a name, else the innermost
    /// user-code frame: in a stripped binary the frames without a symbol (`nginx+0x76e8b`) sit between
    /// named ones, and the nearest name says more than an address.
    fn site(&self, callers: &[usize]) -> Option<usize> {
        let mut user = callers.iter().rev().copied().filter(|&f| self.user[f]);
        let innermost = user.clone().next();
        user.find(|&f| !is_address(self.names[f])).or(innermost)
    }

    /// `pred` of a function id, asked once per function: a predicate compares names, and a profile has
    /// far fewer functions than frames in its stacks (10 s of nginx under wrk: 480 and 14171).
    fn memo<'s>(&'s self, pred: &'s dyn Fn(&Func) -> bool) -> impl FnMut(usize) -> bool + 's {
        let mut known: Vec<Option<bool>> = vec![None; self.names.len()];
        move |f| *known[f].get_or_insert_with(|| pred(&self.func(f)))
    }

    fn ranked(&self, by_func: HashMap<usize, i64>) -> Vec<(String, i64)> {
        largest_first(by_func.into_iter().map(|(f, x)| (self.names[f].to_string(), x)).collect())
    }

    /// On-CPU time under the functions `pred` matches (outside our probes), as a share of all CPU time.
    pub fn cpu(&self, pred: &dyn Fn(&Func) -> bool) -> Match {
        self.matching(|v| if v.instrumentation { 0 } else { v.cpu }, self.cpu_total, pred)
    }

    /// CPU time of the threads whose name `pred` matches, by name (largest first), and in all.
    pub fn cpu_of_threads(&self, pred: &dyn Fn(&str) -> bool) -> (Vec<(String, i64)>, i64) {
        let mut by: HashMap<&str, i64> = HashMap::new();
        for v in self.views.iter().filter(|v| !v.instrumentation && v.cpu != 0) {
            let name = self.p.threads.get(v.thread as usize).map_or("", |t| t.name.as_str());
            if pred(name) {
                *by.entry(name).or_default() += v.cpu;
            }
        }
        let total = by.values().sum();
        let mut rows: Vec<(String, i64)> = by.into_iter().map(|(n, v)| (n.to_string(), v)).collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        (rows, total)
    }

    /// On-CPU time of the stacks through a function `outer` matches with a function `inner` matches
    /// below it (the kernel's file code under a `write` syscall), as a share of all CPU time; entries
    /// are the outermost `inner` matches.
    pub fn cpu_below(&self, outer: &dyn Fn(&Func) -> bool, inner: &dyn Fn(&Func) -> bool) -> Match {
        let mut m = Match::default();
        let mut entries: HashMap<usize, i64> = HashMap::new();
        let (mut is_outer, mut is_inner) = (self.memo(outer), self.memo(inner));
        for v in self.views.iter().filter(|v| !v.instrumentation && v.cpu != 0) {
            let Some(o) = v.funcs.iter().position(|&f| is_outer(f)) else { continue };
            let Some(i) = v.funcs[o..].iter().position(|&f| is_inner(f)) else { continue };
            m.value += v.cpu;
            *entries.entry(v.funcs[o + i]).or_default() += v.cpu;
        }
        m.pct = pct(m.value, self.cpu_total);
        m.entries = self.ranked(entries);
        m
    }

    /// Blocked time (not idle, not waiting for a CPU) under the functions `pred` matches, as a share of
    /// the threads' working time.
    pub fn blocked(&self, pred: &dyn Fn(&Func) -> bool) -> Match {
        let value = |v: &View| if v.wait == Wait::Blocked && !v.instrumentation { v.off } else { 0 };
        self.matching(value, self.wall_total, pred)
    }

    /// As [`Facts::blocked`], leaving out the stacks through a function `except` matches (time another
    /// rule owns).
    pub fn blocked_except(&self, pred: &dyn Fn(&Func) -> bool, except: &dyn Fn(&Func) -> bool) -> Match {
        let value = |v: &View| if v.wait == Wait::Blocked && !v.instrumentation { v.off } else { 0 };
        self.matching_except(value, self.wall_total, pred, except)
    }

    /// As [`Facts::blocked_except`], without the blocked time of background workers (see
    /// [`Facts::background_thread_ids`]): waits that hold up the program's work.
    pub fn blocked_in_foreground_except(
        &self,
        pred: &dyn Fn(&Func) -> bool,
        except: &dyn Fn(&Func) -> bool,
    ) -> Match {
        self.in_foreground_except(|v| if v.wait == Wait::Blocked { v.off } else { 0 }, pred, except)
    }

    /// On-CPU time under the functions `pred` matches, outside background workers and the stacks
    /// through `except`, as a share of the threads' working time: the CPU a call that waits spends
    /// itself (a sync's own work in the kernel), to add to [`Facts::blocked_in_foreground_except`].
    pub fn running_in_foreground_except(
        &self,
        pred: &dyn Fn(&Func) -> bool,
        except: &dyn Fn(&Func) -> bool,
    ) -> Match {
        self.in_foreground_except(|v| v.cpu, pred, except)
    }

    /// `value` of the stacks outside our probes and background workers (see
    /// [`Facts::background_thread_ids`]) under the functions `pred` matches, leaving out the stacks
    /// through `except`, as a share of the threads' working time.
    fn in_foreground_except(
        &self,
        value: impl Fn(&View) -> i64,
        pred: &dyn Fn(&Func) -> bool,
        except: &dyn Fn(&Func) -> bool,
    ) -> Match {
        let background = self.background_thread_ids();
        let value = |v: &View| match v.instrumentation || background.contains(&v.thread) {
            true => 0,
            false => value(v),
        };
        self.matching_except(value, self.wall_total, pred, except)
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

    /// The functions user code made the syscalls `names` from (the innermost user-code frame of each
    /// sampled stack, by `site`), largest first; and the number of all sampled stacks of those syscalls.
    pub fn syscall_sites(&self, names: &[&str]) -> (Vec<(String, i64)>, i64) {
        let (m, all) = self.syscall_stacks(names, &|x: &Func| x.module == "[syscall]");
        (m.sites, all)
    }

    /// For the sampled stacks of the syscalls `names`: the library function user code called to make
    /// them (the frame right below the innermost user-code frame, when it is neither user code nor the
    /// kernel), with that user-code frame and the stacks through both, largest first; and the number of
    /// all sampled stacks of those syscalls. A syscall made from user code itself has no library call.
    pub fn syscall_library_calls(&self, names: &[&str]) -> (Vec<(String, String, i64)>, i64) {
        let mut by: HashMap<(usize, usize), i64> = HashMap::new();
        let mut all = 0;
        for v in &self.views {
            let Some((&leaf, above)) = v.funcs.split_last() else { continue };
            if v.syscalls == 0 || self.modules[leaf] != "[syscall]" || !names.contains(&self.names[leaf]) {
                continue;
            }
            all += v.syscalls;
            let Some(site) = above.iter().rposition(|&f| self.user[f]) else { continue };
            if let Some(&call) = above.get(site + 1).filter(|&&f| !self.kernel[f]) {
                *by.entry((call, above[site])).or_default() += v.syscalls;
            }
        }
        let mut out: Vec<(String, String, i64)> = by
            .into_iter()
            .map(|((call, site), x)| (self.names[call].to_string(), self.names[site].to_string(), x))
            .collect();
        out.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
        (out, all)
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

    /// For the sampled stacks of value `value` (allocations: the allocator's label is the leaf): the
    /// caller right above the leaf when it is not user code (`runtime.newobject`, `operator new`), with
    /// the first user-code frame above it and the value through each, largest first.
    pub fn user_callers_of_leaf_callers(&self, value: usize) -> HashMap<String, Vec<(String, i64)>> {
        let p = self.p;
        let func = |f: u32| self.frame_func(f);
        let mut by: HashMap<&str, HashMap<String, i64>> = HashMap::new();
        for s in p.samples.iter().filter(|s| s.values.get(value).is_some_and(|&v| v > 0)) {
            let frames = p.stack_frames(s.stack);
            let Some((&site, above)) = frames.split_last().and_then(|(_, rest)| rest.split_last()) else {
                continue;
            };
            if func(site).is_user_code() {
                continue;
            }
            if let Some(&caller) = above.iter().rev().find(|&&f| func(f).is_user_code()) {
                *by.entry(p.frame_name(site))
                    .or_default()
                    .entry(p.frame_name(caller).to_string())
                    .or_default() += s.values[value];
            }
        }
        by.into_iter()
            .map(|(site, callers)| {
                let mut v: Vec<(String, i64)> = callers.into_iter().collect();
                v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                (site.to_string(), v)
            })
            .collect()
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
        let mut ids: Vec<usize> =
            (0..self.names.len()).filter(|&f| self.user[f] && pct(total[f], self.cpu_total) >= 1.0).collect();
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
        let mut by: HashMap<(Vec<usize>, Option<Wait>), i64> = HashMap::new();
        let idle = self.idle_thread_ids();
        // Idle threads are summarized apart, whatever little they ran.
        for v in self.views.iter().filter(|v| !idle.contains(&v.thread)) {
            // Time waiting for work is not a hot path; waiting for a CPU is shown apart from blocked.
            let (x, state) = match (v.instrumentation, v.cpu, v.off, v.wait) {
                (true, _, _, _) => continue,
                (false, c, _, _) if c != 0 => (c, None),
                (false, _, o, wait) if o != 0 && wait != Wait::Idle => (o, Some(wait)),
                _ => continue,
            };
            let end = v.funcs.iter().rposition(|&f| self.user[f]).map_or(v.funcs.len(), |i| i + 1);
            // One library frame after the last user frame says what the user code was doing; startup
            // frames above the first user frame (`_start`, `__libc_start_main`, `runtime.main`) say nothing.
            let end = (end + 1).min(v.funcs.len());
            let start = v.funcs.iter().position(|&f| self.user[f]).unwrap_or(0).min(end);
            let path: Vec<usize> = v.funcs[start..end]
                .iter()
                .copied()
                .filter(|&f| !self.kernel[f] || self.names[f] == PREEMPTED_FRAME)
                .collect();
            *by.entry((path, state)).or_default() += x;
        }
        let mut v: Vec<_> = by.into_iter().collect();
        let share = |((_, state), x): &((Vec<usize>, Option<Wait>), i64)| {
            pct(*x, if state.is_some() || self.wall_total > 0 { self.wall_total } else { self.cpu_total })
        };
        let key = |state: &Option<Wait>| state.map_or(0, |w| w as u8 + 1);
        v.sort_by(|a, b| {
            share(b).total_cmp(&share(a)).then(a.0 .0.cmp(&b.0 .0)).then(key(&a.0 .1).cmp(&key(&b.0 .1)))
        });
        v.iter()
            .take(n)
            .map(|e| super::HotPath {
                frames: e.0 .0.iter().map(|&f| self.names[f].to_string()).collect(),
                pct: share(e),
                of: match e.0 .1 {
                    Some(Wait::Runnable) => "wall (waiting for a CPU)",
                    Some(_) => "wall (blocked)",
                    None if self.wall_total > 0 => "wall (running)",
                    None => "cpu",
                },
            })
            .collect()
    }
}

pub use whyslow_model::percent as pct;

#[cfg(test)]
mod tests {

    /// A standard library template instantiated in the program is not user code, with or without the
    /// return type its demangled name starts with.
    #[test]
    fn templates_with_a_return_type_are_library_code() {
        let f = |name| super::Func { name, module: "/app", kernel: false }.is_user_code();
        assert!(!f("void std::__cxx11::basic_string<char>::_M_construct<char*>(char*, char*)"));
        assert!(!f("std::vector<int>::push_back(int const&)"));
        assert!(f("handle_bad(std::vector<int, std::allocator<int> > const&)"));
        assert!(f("int parse<std::string>(char const*)"));
    }

    /// A CPython interpreter's C code is the runtime, wherever it is installed; the Python functions it
    /// runs (module: their file) and a program that merely embeds "python" in its name are not.
    #[test]
    fn the_python_interpreter_is_runtime_code() {
        let f = |name, module| super::Func { name, module, kernel: false }.is_user_code();
        assert!(!f("take_gil", "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0"));
        assert!(!f("_PyEval_EvalFrameDefault", "/opt/py/bin/python3.13t"));
        assert!(!f("main", "/opt/py/bin/python"));
        assert!(f("spin", "/srv/app/gil.py"));
        assert!(f("main", "/srv/app/pythonista"));
    }
}
