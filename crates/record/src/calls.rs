//! Which functions `whyslow calls` probes: glob patterns over the function symbols of the target's
//! executable and shared libraries, resolved to (file, offset) of the function itself (never its PLT
//! stub, so BIND_NOW and IBT binaries count the same), with IFUNCs resolved to the implementation the
//! loader picks on this machine.

use crate::target::{self, Target};
use crate::RecordError;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use whyslow_model::close_matches;
pub use whyslow_symbols::glob_escape;
use whyslow_symbols::placement::{Code, Placement};
pub use whyslow_symbols::placement::{Execution, Needs, Site, StackNeed};
use whyslow_symbols::{file_id, functions, name_forms, resolved_in_self, same_file, Function};

/// One pattern and the output group it belongs to.
#[derive(Debug, Clone)]
pub struct PatternSpec {
    pub group: String,
    pub pattern: String,
    /// A pattern the user typed: matching nothing is an error. Default-set patterns may match nothing.
    pub required: bool,
}

/// One function to count: a distinct code address (aliases at the same address are one probe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub module: PathBuf,
    /// File offset of the instruction the probe sits on: the entry, or a later one reached exactly once
    /// per call (see [`whyslow_symbols::placement`]).
    pub offset: u64,
    /// File offset of the function's first instruction.
    pub entry: u64,
    /// The probed instruction and how the kernel runs it.
    pub site: Site,
    /// The name shown (the first matched name), and the other names of the same code.
    pub name: String,
    pub aliases: Vec<String>,
    pub group: String,
    /// For an IFUNC: the implementation the probe sits on (e.g. `__memmove_avx_unaligned_erms`).
    pub implementation: Option<String>,
}

/// A matched function that is not probed because no probe site keeps its results intact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub module: PathBuf,
    pub name: String,
    pub implementation: Option<String>,
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let imp = self.implementation.as_ref().map_or(String::new(), |i| format!(" -> {i}"));
        write!(f, "{}{imp}: {}; not counted", self.name, self.reason)
    }
}

/// One line per probe for a listing: the function, where the probe sits and how the kernel runs it
/// (`malloc  [/lib/libc.so.6+0xa0b20]  (allocation)  probe at entry: push rbp (emulated)`).
impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let imp = self.implementation.as_ref().map_or(String::new(), |i| format!(" -> {i}"));
        let at = match self.site.moved {
            0 => "entry".to_string(),
            n => format!("entry+{n:#x}"),
        };
        let mut how = match self.site.execution {
            Execution::Emulated => "emulated".to_string(),
            Execution::SingleStepped => "single-stepped".to_string(),
        };
        if let [first, rest @ ..] = &self.site.compensate[..] {
            let more = if rest.is_empty() { String::new() } else { format!(" and {} more", rest.len()) };
            how += &format!("; minus the jump into it at {first:#x}{more}");
        }
        write!(
            f,
            "{}{imp}  [{}+{:#x}]  ({})  probe at {at}: {} ({how})",
            self.name,
            self.module.display(),
            self.offset,
            self.group,
            self.site.instruction
        )
    }
}

/// More probes than this are only set when the caller asks for them explicitly: every call of every
/// probed function traps into the kernel.
pub const MAX_PROBES_UNASKED: usize = 500;

/// Caller stacks ([`crate::CallOptions::callers_period`]) open one perf event per function and CPU for
/// each target thread: at most this many functions.
pub const MAX_CALLER_PROBES: usize = 64;

/// What probing a set of functions would cost a target calling them often, by how the kernel runs each
/// probed instruction; the cost of a hit measured here ([`measure_hit_cost`]), else assumed
/// ([`hit_cost_ns`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeCost {
    pub functions: usize,
    /// Probes on an instruction the kernel emulates, and on one it single-steps.
    pub emulated: usize,
    pub stepped: usize,
    /// What a hit costs on each kind, in ns.
    pub emulated_ns: f64,
    pub stepped_ns: f64,
    /// Whether those were measured on this machine (else assumed).
    pub measured: bool,
    /// The mean cost of a hit over the probes, in ns.
    pub mean_ns: f64,
}

impl ProbeCost {
    /// The cost of `probes`, measuring a hit here when eBPF allows (~20 ms).
    pub fn of(probes: &[Probe]) -> ProbeCost {
        ProbeCost::with(probes, measure_hit_cost())
    }

    /// The cost of `probes` with hits costing `measured` (None: the assumed costs).
    pub fn with(probes: &[Probe], measured: Option<HitCost>) -> ProbeCost {
        let cost = |e: Execution| measured.map_or(hit_cost_ns(e) as f64, |h| h.ns(e, None));
        let stepped = probes.iter().filter(|p| p.site.execution == Execution::SingleStepped).count();
        let total: f64 = probes.iter().map(|p| cost(p.site.execution)).sum();
        ProbeCost {
            functions: probes.len(),
            emulated: probes.len() - stepped,
            stepped,
            emulated_ns: cost(Execution::Emulated),
            stepped_ns: cost(Execution::SingleStepped),
            measured: measured.is_some(),
            mean_ns: total / probes.len().max(1) as f64,
        }
    }

    /// The share of a CPU (1.0: one CPU) the probes take from a target making `calls_per_s` probed calls
    /// a second.
    pub fn cpu_share(&self, calls_per_s: f64) -> f64 {
        self.mean_ns * calls_per_s / 1e9
    }
}

/// `these patterns match 600 functions (...): a target making 100k such calls per second would spend ~5%
/// of a CPU in the probes`.
impl std::fmt::Display for ProbeCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "these patterns match {} functions ({} probed on an emulated instruction at ~{:.2} us per call, {} \
             on a single-stepped one at ~{:.2} us, {} here): a target making 100k such calls per second would \
             spend ~{:.0}% of a CPU in the probes",
            self.functions,
            self.emulated,
            self.emulated_ns / 1e3,
            self.stepped,
            self.stepped_ns / 1e3,
            if self.measured { "measured" } else { "assumed" },
            self.cpu_share(100_000.0) * 100.0
        )
    }
}

/// The outcome of resolving patterns.
#[derive(Debug, Clone, Default)]
pub struct Resolution {
    pub probes: Vec<Probe>,
    /// Functions matched but not probed (each also in `notes`).
    pub skipped: Vec<Skipped>,
    /// (pattern, functions it matched), in the order given.
    pub matched: Vec<(String, usize)>,
    /// Things the user should know (IFUNCs that could not be resolved, unreadable modules).
    pub notes: Vec<String>,
}

/// What one probe hit costs the thread that takes it, measured on this kernel and CPU at the start of a
/// run (whyslow probes two functions of its own with the run's program and times calls of them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HitCost {
    /// A hit on an instruction the kernel emulates (push, nop, jmp/jcc/call), in ns.
    pub emulated_ns: f64,
    /// A hit on an instruction the kernel single-steps out of line, in ns.
    pub stepped_ns: f64,
    /// The counting program's own share of those (it returns at once for whyslow's own process).
    pub floor_program_ns: f64,
}

impl HitCost {
    /// One hit on an instruction run this way, the counting program taking `program_ns` per run (as in
    /// the run so far; None: as in the measurement).
    pub fn ns(&self, execution: Execution, program_ns: Option<f64>) -> f64 {
        let trap = match execution {
            Execution::Emulated => self.emulated_ns,
            Execution::SingleStepped => self.stepped_ns,
        };
        trap - self.floor_program_ns + program_ns.unwrap_or(self.floor_program_ns)
    }

    /// One line for a report: what a hit cost in this run.
    pub fn describe(&self, program_ns: Option<f64>) -> String {
        format!(
            "a probe hit costs {:.2} us on an emulated instruction, {:.2} us on a single-stepped one \
             (measured on this machine at the start of the run; the counting program {:.2} us of it)",
            self.ns(Execution::Emulated, program_ns) / 1e3,
            self.ns(Execution::SingleStepped, program_ns) / 1e3,
            program_ns.unwrap_or(self.floor_program_ns) / 1e3
        )
    }
}

/// Measures what a probe hit costs here before any run (see [`HitCost`]): loads the counting program for
/// the measurement alone (~20 ms). None where eBPF or uprobes are not available.
pub fn measure_hit_cost() -> Option<HitCost> {
    let mut obj = std::mem::MaybeUninit::uninit();
    let mut p = crate::bpf::CallProbe::load(&mut obj, false, false, None, None).ok()?;
    p.measure_hits()
}

/// What one probed call is assumed to cost where it could not be measured (see [`HitCost`]), by how the
/// kernel runs the probed instruction (bench/calls_overhead.sh on this project's CI machine: ~0.5 us
/// emulated, ~10.5 us single-stepped).
pub const fn hit_cost_ns(execution: Execution) -> u64 {
    match execution {
        Execution::Emulated => 500,
        Execution::SingleStepped => 10_500,
    }
}

/// The usual suspects of a slow native program, by group.
pub fn default_patterns() -> Vec<PatternSpec> {
    let groups: [(&str, &[&str]); 6] = [
        (
            "allocation",
            &[
                "malloc",
                "calloc",
                "realloc",
                "free",
                "posix_memalign",
                "aligned_alloc",
                "memalign",
                "operator new*",
                "operator delete*",
                "runtime.mallocgc",
            ],
        ),
        (
            "memory and strings",
            &[
                "memcpy", "memmove", "memset", "memcmp", "strlen", "strcmp", "strncmp", "strchr", "strrchr",
                "strpbrk", "strstr", "strcpy", "strncpy", "strdup",
            ],
        ),
        (
            "formatting and time",
            &[
                "printf",
                "fprintf",
                "sprintf",
                "snprintf",
                "vfprintf",
                "vsnprintf",
                "vsprintf",
                "fwrite",
                "fputs",
                "fflush",
                "strftime",
                "localtime",
                "localtime_r",
                "gmtime_r",
                "mktime",
                "tzset",
            ],
        ),
        (
            "locking",
            &[
                "pthread_mutex_lock",
                "pthread_mutex_unlock",
                "pthread_mutex_trylock",
                "pthread_rwlock_*lock",
                "pthread_cond_wait",
                "pthread_cond_timedwait",
                "pthread_cond_signal",
                "pthread_cond_broadcast",
                "pthread_spin_lock",
            ],
        ),
        ("exceptions", &["__cxa_throw", "__cxa_allocate_exception", "_Unwind_RaiseException"]),
        ("containers", &["std::_Rb_tree_increment*", "std::_Rb_tree_insert_and_rebalance*"]),
    ];
    groups
        .iter()
        .flat_map(|(g, pats)| {
            pats.iter().map(|p| PatternSpec { group: g.to_string(), pattern: p.to_string(), required: false })
        })
        .collect()
}

/// The executable and shared libraries the target runs: from /proc for running processes, from the
/// dynamic loader's `--list` for a command about to be launched.
pub fn target_modules(t: &Target) -> Result<Vec<PathBuf>, RecordError> {
    let mut out: Vec<PathBuf> = Vec::new();
    // Each file once (see `add_module`), by its id: one stat per mapping, where comparing with every
    // module so far took 0.14 s of the doctor's CPU on 10 PostgreSQL processes (their paths through
    // /proc/PID/root differ).
    let mut files = std::collections::HashSet::new();
    let mut push = |p: PathBuf| {
        let new = match file_id(&p) {
            Some(id) => files.insert(id),
            None => !out.contains(&p),
        };
        if new {
            out.push(p);
        }
    };
    match t {
        Target::Launch(argv) => {
            let cmd = argv.first().ok_or(RecordError::NoCommand)?;
            let exe = target::program_path(cmd).ok_or_else(|| {
                RecordError::Exec(cmd.clone(), std::io::Error::from(std::io::ErrorKind::NotFound))
            })?;
            for lib in loader_list(&exe) {
                push(lib);
            }
            push(exe);
        }
        Target::Pids(pids) => {
            for &pid in pids {
                if !target::alive(pid) {
                    return Err(RecordError::NoSuchProcess(pid));
                }
                for m in target::exec_maps(pid).into_iter().filter(|m| m.path.starts_with('/')) {
                    push(crate::files::through_root(pid, &m.path));
                }
            }
        }
        Target::Comm(name) => return target_modules(&Target::Pids(target::pids_named(name)?)),
        // Every process's files: none in particular.
        Target::All => {}
    }
    Ok(out)
}

/// Adds `module` to `modules` unless it is already there (under any path): a file resolved twice would
/// count each call twice.
pub fn add_module(modules: &mut Vec<PathBuf>, module: PathBuf) {
    if !modules.iter().any(|q| q == &module || same_file(q, &module)) {
        modules.push(module);
    }
}

/// Shared libraries of `exe` as its dynamic loader resolves them (nothing for a static executable).
fn loader_list(exe: &Path) -> Vec<PathBuf> {
    let Some(interp) = interpreter(exe) else { return Vec::new() };
    let out = std::process::Command::new(&interp).arg("--list").arg(exe).output();
    let mut libs = vec![PathBuf::from(&interp)];
    if let Ok(out) = out {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
            let path = line.split("=>").last().unwrap_or("").split(" (").next().unwrap_or("").trim();
            if path.starts_with('/') {
                libs.push(PathBuf::from(path));
            }
        }
    }
    libs
}

fn interpreter(exe: &Path) -> Option<String> {
    use object::read::elf::{ElfFile64, ProgramHeader};
    let data = std::fs::read(exe).ok()?;
    let elf = ElfFile64::<object::Endianness>::parse(&*data).ok()?;
    let e = elf.endian();
    elf.elf_program_headers().iter().find(|ph| ph.p_type(e) == object::elf::PT_INTERP).and_then(|ph| {
        let bytes = ph.data(e, &*data).ok()?;
        Some(String::from_utf8_lossy(bytes.split(|&b| b == 0).next()?).into_owned())
    })
}

/// Resolves every pattern over every module and places each function's probe where it cannot change
/// what the function computes (`needs` says what the probe of a pattern's functions reads). A required
/// pattern that matches nothing is an error that names the closest function names; a function that
/// cannot be probed safely is named in `skipped` with the reason.
pub fn resolve(
    modules: &[PathBuf],
    patterns: &[PatternSpec],
    needs: impl Fn(&PatternSpec) -> Needs,
) -> Result<Resolution, RecordError> {
    if patterns.iter().any(|p| p.pattern.trim().is_empty()) {
        return Err(RecordError::EmptyPattern);
    }
    let globs = patterns
        .iter()
        .map(|p| whyslow_symbols::Glob::new(&p.pattern))
        .collect::<Result<Vec<_>, _>>()
        .map_err(RecordError::BadGlob)?;
    // Benchmarks set WHYSLOW_PROBE_AT_ENTRY to measure what moving probes saves.
    let at_entry = std::env::var_os("WHYSLOW_PROBE_AT_ENTRY").is_some();
    let mut res = Resolution::default();
    let mut tables: Vec<(&PathBuf, Vec<Function>)> = Vec::new();
    for m in modules {
        match functions(m) {
            Ok(f) => tables.push((m, f)),
            Err(e) => res.notes.push(format!("not probed: {e}")),
        }
    }
    // Each function's name forms, worked out once for every pattern (libc alone has thousands).
    let forms: Vec<Vec<[&str; 4]>> =
        tables.iter().map(|(_, fs)| fs.iter().map(name_forms).collect()).collect();
    // Each module's code, read when a function of it is first placed.
    let mut codes: Vec<Option<Code>> = tables.iter().map(|_| None).collect();
    // (module index, entry offset) -> probe index (None: skipped), so aliases and overlapping patterns
    // share one probe, and a function is placed (or skipped) once.
    let mut at: HashMap<(usize, u64), Option<usize>> = HashMap::new();
    for (spec, g) in patterns.iter().zip(&globs) {
        let mut n = 0;
        for (mi, (module, funcs)) in tables.iter().enumerate() {
            let code = &mut codes[mi];
            // One entry per code address: the first matching name wins, the rest are aliases.
            let mut hits: BTreeMap<u64, Vec<&Function>> = BTreeMap::new();
            for (f, _) in funcs.iter().zip(&forms[mi]).filter(|(_, fm)| fm.iter().any(|form| g.matches(form)))
            {
                hits.entry(f.offset).or_default().push(f);
            }
            for (_, fs) in hits {
                let f = fs[0];
                let (body, implementation) = if f.ifunc {
                    match resolve_ifunc(module, f, funcs) {
                        Some(imp) => (imp, Some(imp.name.clone())),
                        None => {
                            res.notes.push(format!(
                                "{} in {} is an IFUNC whose implementation is unknown here: not counted",
                                f.name,
                                module.display()
                            ));
                            continue;
                        }
                    }
                } else {
                    (f, None)
                };
                n += 1;
                let key = (mi, body.offset);
                match at.get(&key) {
                    Some(&Some(i)) => {
                        let p = &mut res.probes[i];
                        for a in fs.iter().map(|f| &f.name) {
                            if *a != p.name && !p.aliases.contains(a) {
                                p.aliases.push(a.clone());
                            }
                        }
                        continue;
                    }
                    Some(None) => continue,
                    None => {}
                }
                let code = match code {
                    Some(c) => c,
                    None => {
                        let starts: Vec<u64> = funcs.iter().map(|f| f.address).collect();
                        match Code::read(module, &starts) {
                            Ok(c) => code.insert(c),
                            Err(e) => {
                                res.notes.push(format!("not probed: {e}"));
                                break;
                            }
                        }
                    }
                };
                match code.place(body.address, body.size, Needs { at_entry, ..needs(spec) }) {
                    Placement::Site(site) => {
                        at.insert(key, Some(res.probes.len()));
                        res.probes.push(Probe {
                            module: (*module).clone(),
                            offset: body.offset + site.moved,
                            entry: body.offset,
                            site,
                            name: f.name.clone(),
                            aliases: fs[1..]
                                .iter()
                                .map(|f| f.name.clone())
                                .filter(|a| a != &f.name)
                                .collect(),
                            group: spec.group.clone(),
                            implementation,
                        });
                    }
                    Placement::Unsafe(reason) => {
                        at.insert(key, None);
                        let s = Skipped {
                            module: (*module).clone(),
                            name: f.name.clone(),
                            implementation,
                            reason,
                        };
                        res.notes.push(s.to_string());
                        res.skipped.push(s);
                    }
                }
            }
        }
        if n == 0 && spec.required {
            let names = tables.iter().flat_map(|(_, fs)| fs.iter().map(|f| f.name.as_str()));
            return Err(RecordError::NoSuchFunction {
                pattern: spec.pattern.clone(),
                suggestions: close_matches(&spec.pattern, names, 5),
            });
        }
        res.matched.push((spec.pattern.clone(), n));
    }
    Ok(res)
}

/// The implementation the loader sends calls of IFUNC `f` of `module` to, on this machine.
fn resolve_ifunc<'a>(module: &Path, f: &Function, funcs: &'a [Function]) -> Option<&'a Function> {
    let (path, offset) = resolved_in_self(&f.mangled)?;
    if !same_file(Path::new(&path), module) {
        return None;
    }
    funcs.iter().filter(|g| g.offset == offset && !g.ifunc).min_by_key(|g| {
        // Prefer the implementation's own name over public aliases that share its address.
        (!g.name.starts_with("__"), g.name.len())
    })
}

#[cfg(test)]
pub(crate) mod cost_tests {
    use super::{Execution, HitCost, Probe, ProbeCost, Site};

    /// A probe of libc's `name` (the layout and cost tests' fixture).
    pub(crate) fn probe(name: &str, execution: Execution, moved: u64, compensate: Vec<u64>) -> Probe {
        Probe {
            module: "/lib/libc.so.6".into(),
            offset: 0xa0b20 + moved,
            entry: 0xa0b20,
            site: Site {
                address: 0xa0b20 + moved,
                moved,
                execution,
                instruction: "push rbp".into(),
                stack_delta: 0,
                compensate,
            },
            name: name.into(),
            aliases: Vec::new(),
            group: "allocation".into(),
            implementation: None,
        }
    }

    /// Three emulated probes at the assumed 500 ns and one stepped at 10.5 us: 3 us a call on average,
    /// 30% of a CPU at 100k calls/s.
    #[test]
    fn the_cost_of_many_probes_is_their_mean_hit_cost() {
        let probes = [
            probe("a", Execution::Emulated, 0, vec![]),
            probe("b", Execution::Emulated, 0, vec![]),
            probe("c", Execution::Emulated, 0, vec![]),
            probe("d", Execution::SingleStepped, 0, vec![]),
        ];
        let c = ProbeCost::with(&probes, None);
        assert_eq!((c.functions, c.emulated, c.stepped, c.measured), (4, 3, 1, false));
        assert_eq!(c.mean_ns, 3000.0);
        assert!((c.cpu_share(100_000.0) - 0.3).abs() < 1e-12);
        assert_eq!(
            c.to_string(),
            "these patterns match 4 functions (3 probed on an emulated instruction at ~0.50 us per call, 1 on \
             a single-stepped one at ~10.50 us, assumed here): a target making 100k such calls per second \
             would spend ~30% of a CPU in the probes"
        );
        let measured = HitCost { emulated_ns: 1000.0, stepped_ns: 5000.0, floor_program_ns: 100.0 };
        let c = ProbeCost::with(&probes[..2], Some(measured));
        assert_eq!((c.mean_ns, c.measured), (1000.0, true));
    }

    #[test]
    fn a_probe_is_listed_with_its_site_and_how_the_kernel_runs_it() {
        let p = probe("malloc", Execution::Emulated, 0, vec![]);
        assert_eq!(
            p.to_string(),
            "malloc  [/lib/libc.so.6+0xa0b20]  (allocation)  probe at entry: push rbp (emulated)"
        );
        let mut p = probe("memcpy", Execution::SingleStepped, 4, vec![0x10, 0x20]);
        p.implementation = Some("__memmove_avx_unaligned_erms".into());
        assert_eq!(
            p.to_string(),
            "memcpy -> __memmove_avx_unaligned_erms  [/lib/libc.so.6+0xa0b24]  (allocation)  probe at \
             entry+0x4: push rbp (single-stepped; minus the jump into it at 0x10 and 1 more)"
        );
    }
}
