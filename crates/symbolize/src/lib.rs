//! (module, file offset) -> function frames: names demangled (C++, Rust without hash), Go as is, inlined
//! callees as frames of their own, kernel addresses from /proc/kallsyms (or perf's copy of the recorded
//! kernel's table). Turns a [`RawRecording`] into a [`Profile`] through the model's builder. Modules are
//! symbolized on a few threads in parallel; [`Prefetch`] starts reading their symbols (and the kernel's)
//! while an imported file's samples are still being read.
//!
//! An address nothing covers stays visible as `module+0xOFFSET` (the offset of the function around it
//! where the file's `.eh_frame` bounds one, else its own); it is never dropped.

mod bpf_programs;
mod kallsyms;
mod kernel;

pub use whyslow_symbols::demangle;

mod sources;

pub use sources::set_progress;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use kallsyms::Kallsyms;
use sources::{Plan, Plans};
use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use whyslow_debuginfod::Client;
use whyslow_model::raw::{FastMap, RawFrame, RawRecording};
use whyslow_model::{
    basename, is_probe_address, is_probe_frame, FrameKind, Profile, ProfileBuilder, NONE, PROBE_FRAME,
    PROBE_MODULE,
};

/// Name of the pseudo-module kernel frames belong to.
pub const KERNEL_MODULE: &str = "[kernel.kallsyms]";

/// One function of the frames an address expands to (outermost first).
struct Func {
    name: String,
    /// The source file, as its line table names it (joined to its directory).
    file: String,
    /// The line of the address inside this function (for an inlined callee's caller: of the call); 0 when
    /// unknown.
    line: u32,
    kind: FrameKind,
}

/// The frames of one symbol blazesym found (outermost first).
fn blazesym_frames(sym: &blazesym::symbolize::Sym) -> Vec<Func> {
    // blazesym gives each function the location inside it: the outer symbol the call to its first
    // inlined callee, the innermost callee the address's own line.
    let file = |ci: Option<&blazesym::symbolize::CodeInfo>| {
        ci.map(|c| c.to_path().to_string_lossy().into_owned()).unwrap_or_default()
    };
    let line = |ci: Option<&blazesym::symbolize::CodeInfo>| ci.and_then(|c| c.line).unwrap_or(0);
    let outer = sym.code_info.as_deref();
    let mut v =
        vec![Func { name: demangle(&sym.name), file: file(outer), line: line(outer), kind: FrameKind::User }];
    v.extend(sym.inlined.iter().map(|i| Func {
        name: demangle(&i.name),
        file: file(i.code_info.as_ref()),
        line: line(i.code_info.as_ref()),
        kind: FrameKind::Inlined,
    }));
    v
}

/// What one pool thread keeps between jobs: blazesym's caches, the plan and tables of each file.
struct Worker {
    symbolizer: Symbolizer,
    plans: Plans,
    debuginfod: Option<Arc<Client>>,
    /// The files whose symbols, debug information and plan this thread holds, with the round (a
    /// [`Resident`] symbolization) each was last used in: what [`Worker::trim`] lets go.
    held: HashMap<String, u64>,
    round: u64,
}

/// How many rounds (a [`Resident`] symbolizes one window per round) a file no window needed stays held:
/// a minute of an agent's 10 s windows. Held files stay mapped, so a file system holding one (a stopped
/// container's, a removed disk's) could not be unmounted for as long; the unwinder's parsed files
/// follow the same rule (convert's `KEEP_CUTS`).
const KEEP_ROUNDS: u64 = 6;
/// The most files one pool thread holds (the least recently used go first).
const MAX_HELD: usize = 48;

impl Worker {
    fn new(debuginfod: Option<Arc<Client>>) -> Worker {
        Worker {
            symbolizer: new_symbolizer(),
            plans: Plans::default(),
            debuginfod,
            held: HashMap::new(),
            round: 0,
        }
    }

    /// Ends a round: drops what blazesym and the plans hold of the files not used in the last
    /// [`KEEP_ROUNDS`] rounds, and of the least recently used beyond [`MAX_HELD`] (a whole host's or a
    /// churning set of binaries would otherwise stay read, mapped and parsed for good).
    fn trim(&mut self) {
        self.round += 1;
        let round = self.round;
        let mut gone: Vec<String> =
            self.held.iter().filter(|(_, &r)| round - r > KEEP_ROUNDS).map(|(p, _)| p.clone()).collect();
        if self.held.len() - gone.len() > MAX_HELD {
            let mut kept: Vec<(u64, &String)> =
                self.held.iter().filter(|(_, &r)| round - r <= KEEP_ROUNDS).map(|(p, &r)| (r, p)).collect();
            kept.sort_unstable();
            let n = kept.len() - MAX_HELD;
            gone.extend(kept.into_iter().take(n).map(|(_, p)| p.clone()));
        }
        for path in gone {
            self.held.remove(&path);
            self.plans.forget(&path);
            let _ = self.symbolizer.evict(&blazesym::symbolize::evict::Evict::Elf(
                blazesym::symbolize::evict::Elf::new(path.as_str()),
            ));
        }
    }

    /// Symbolizes all offsets of the file at `path` (named `shown`) in one batch, by the source its plan
    /// chose.
    fn symbolize(&mut self, path: &str, shown: &str, offsets: &[u64]) -> Result<(Funcs, Arc<Plan>), String> {
        self.held.insert(path.to_string(), self.round);
        let plan = self.plans.get(path, shown, self.debuginfod.as_deref())?;
        if let sources::Source::Fetched(debug) = &plan.source {
            self.held.insert(debug.clone(), self.round);
        }
        // Each symbolized offset with its distance from the symbol's start.
        let by_blazesym = |file: &str, input: Input<&[u64]>| -> Result<Vec<Option<Placed>>, String> {
            let src = Source::Elf(Elf::new(file));
            let syms = self.symbolizer.symbolize(&src, input).map_err(|e| e.to_string())?;
            Ok(syms
                .iter()
                .map(|s| match s {
                    Symbolized::Sym(sym) => Some((blazesym_frames(sym), sym.offset)),
                    Symbolized::Unknown(_) => None,
                })
                .collect())
        };
        let elf = |offsets: &[u64]| match &plan.source {
            sources::Source::Fetched(debug) => {
                // Offsets outside the executable segments stay unknown (address 0 names nothing).
                let addrs: Vec<u64> = offsets.iter().map(|&o| plan.address(o).unwrap_or(0)).collect();
                by_blazesym(debug, Input::VirtOffset(&addrs))
            }
            _ => by_blazesym(path, Input::FileOffset(offsets)),
        };
        let mut found: Vec<Option<Vec<Func>>> = match &plan.source {
            sources::Source::Elf | sources::Source::Fetched(_) => {
                elf(offsets)?.into_iter().map(|f| f.map(|(funcs, _)| funcs)).collect()
            }
            sources::Source::Go(table) => offsets
                .iter()
                .map(|&o| {
                    let frames = table.frames(plan.address(o)?)?;
                    Some(
                        frames
                            .into_iter()
                            .map(|f| Func {
                                name: f.name.into_owned(),
                                file: f.file.map(|f| f.into_owned()).unwrap_or_default(),
                                line: f.line,
                                kind: if f.inlined { FrameKind::Inlined } else { FrameKind::User },
                            })
                            .collect::<Vec<_>>(),
                    )
                    .filter(|v| !v.is_empty())
                })
                .collect(),
        };
        // A caller's frame is its return address stepped back into the call. A signal handler returns
        // into the restorer the kernel pushed, which no call precedes: stepped back, it lands in the
        // padding before that function; it is named by the function starting right after.
        let missed: Vec<usize> = (0..found.len()).filter(|&i| found[i].is_none()).collect();
        if !missed.is_empty() && !matches!(plan.source, sources::Source::Go(_)) {
            let next: Vec<u64> = missed.iter().map(|&i| offsets[i] + 1).collect();
            for (&i, f) in missed.iter().zip(elf(&next)?) {
                if let Some((funcs, 0)) = f {
                    found[i] = Some(funcs);
                }
            }
        }
        // What no symbol covers is named by the start of its function, where the file bounds it.
        let funcs = found
            .into_iter()
            .zip(offsets)
            .map(|(f, &o)| f.unwrap_or_else(|| vec![unknown(shown, plan.function_start(o).unwrap_or(o))]));
        Ok((funcs.collect(), plan))
    }
}

/// An offset's frames (inlined ones first) and its distance from the start of its symbol.
type Placed = (Vec<Func>, usize);

fn unknown(path: &str, offset: u64) -> Func {
    Func {
        name: format!("{}+{offset:#x}", basename(path)),
        file: String::new(),
        line: 0,
        kind: FrameKind::Unknown,
    }
}

fn new_symbolizer() -> Symbolizer {
    Symbolizer::builder()
        .enable_code_info(true)
        .enable_inlined_fns(true)
        // Its demangler also "demangles" plain C names (`a` -> `signed char`); we demangle ourselves.
        .enable_demangling(false)
        .build()
}

type Funcs = Vec<Vec<Func>>;

enum Job {
    /// Read the file's symbols and debug information now (blazesym keeps them for the next job).
    Warm(String),
    /// End a round: let go of the files no recent round used ([`Worker::trim`]), then say so.
    Trim(mpsc::Sender<usize>),
    /// Symbolize these offsets of `file` (the module `shown`) and send the frames back, tagged with
    /// `module`; with `producers`, also the compilers that built that file.
    Symbolize {
        module: u32,
        file: String,
        shown: String,
        offsets: Vec<u64>,
        producers: Option<String>,
        reply: mpsc::Sender<Reply>,
    },
}

/// What a pool thread found for one module.
struct Reply {
    module: u32,
    funcs: Result<(Funcs, Arc<Plan>), String>,
    producers: Vec<String>,
}

impl Job {
    fn run(self, worker: &mut Worker) {
        match self {
            Job::Warm(path) => {
                let _ = worker.symbolize(&path, &path, &[0]);
            }
            Job::Trim(done) => {
                worker.trim();
                let _ = done.send(worker.held.len());
            }
            Job::Symbolize { module, file, shown, offsets, producers, reply } => {
                let funcs = worker.symbolize(&file, &shown, &offsets);
                let producers = producers
                    .map(|p| whyslow_symbols::producers(Path::new(&p)).unwrap_or_default())
                    .unwrap_or_default();
                let _ = reply.send(Reply { module, funcs, producers });
            }
        }
    }
}

/// Threads that symbolize, each with its own blazesym symbolizer (one cannot be shared between threads);
/// a file is always symbolized by the same thread, the one that may have read it ahead. Debug files are
/// fetched from debuginfod on these threads too: as many at once as there are threads.
struct Pool {
    workers: Vec<(mpsc::Sender<Job>, std::thread::JoinHandle<()>)>,
    /// Which thread a file goes to, and the round it was last sent in.
    owner: HashMap<String, (usize, u64)>,
    round: u64,
    debuginfod: Option<Arc<Client>>,
}

impl Default for Pool {
    /// Debug files from the servers DEBUGINFOD_URLS names (none when it is unset: no network).
    fn default() -> Pool {
        Pool::new(Client::from_env().map(Arc::new))
    }
}

impl Pool {
    fn new(debuginfod: Option<Arc<Client>>) -> Pool {
        Pool { workers: Vec::new(), owner: HashMap::new(), round: 0, debuginfod }
    }

    /// Ends a round on every thread ([`Worker::trim`]) and forgets which thread had the files none
    /// holds any more; the files held, over all threads.
    fn trim(&mut self) -> usize {
        self.round += 1;
        let round = self.round;
        self.owner.retain(|_, (_, r)| round - *r <= KEEP_ROUNDS);
        let (tx, rx) = mpsc::channel();
        let asked = self.workers.iter().filter(|(w, _)| w.send(Job::Trim(tx.clone())).is_ok()).count();
        drop(tx);
        rx.iter().take(asked).sum()
    }

    /// Hands `job` about `path` to its thread; gives it back where no thread could be started.
    fn send(&mut self, path: &str, job: Job) -> Result<(), Job> {
        let round = self.round;
        let n = match self.owner.get_mut(path) {
            Some((n, r)) => {
                *r = round;
                *n
            }
            None => {
                let most = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 8);
                let n = if self.workers.len() < most { self.spawn() } else { Some(self.owner.len() % most) };
                let Some(n) = n.or_else(|| (!self.workers.is_empty()).then_some(0)) else { return Err(job) };
                self.owner.insert(path.to_string(), (n, round));
                n
            }
        };
        self.workers[n].0.send(job).map_err(|e| e.0)
    }

    fn spawn(&mut self) -> Option<usize> {
        let (tx, rx) = mpsc::channel::<Job>();
        let debuginfod = self.debuginfod.clone();
        let thread = std::thread::Builder::new().name("symbolize".into()).spawn(move || {
            let mut worker = Worker::new(debuginfod);
            for job in rx {
                job.run(&mut worker);
            }
        });
        self.workers.push((tx, thread.ok()?));
        Some(self.workers.len() - 1)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for (tx, thread) in self.workers.drain(..) {
            drop(tx);
            let _ = thread.join();
        }
    }
}

/// Symbolization started ahead, while the samples are still being read: the kernel's symbol table and
/// the symbols and debug information of the files to symbolize load on other threads meanwhile.
#[derive(Default)]
pub struct Prefetch {
    kernel: Option<(String, std::thread::JoinHandle<(Kallsyms, bool)>)>,
    pool: Pool,
}

impl Prefetch {
    /// Starts reading the symbols of `files` and, given its build id (hex), of the kernel the recording
    /// was made on.
    pub fn start(files: &[String], kernel_build_id: Option<&str>) -> Prefetch {
        let mut pool = Pool::default();
        // Regular files only: the names come from the file being imported (a corrupt one could name a
        // device or a pipe).
        for f in files.iter().filter(|f| std::fs::metadata(f).is_ok_and(|m| m.is_file())) {
            let _ = pool.send(f, Job::Warm(f.clone()));
        }
        let kernel = kernel_build_id.and_then(|id| {
            let owned = id.to_string();
            let load = std::thread::Builder::new()
                .name("kallsyms".into())
                .spawn(move || kernel::kernel_table(&owned));
            Some((id.to_string(), load.ok()?))
        });
        Prefetch { kernel, pool }
    }
}

/// The file holding an object's bytes that has no file of its own (the vDSO): one in-memory file per
/// distinct image, open while this process runs, named by its /proc/self/fd path. The symbolizers cache
/// what they read by path, so a service that wrote a new file per window grew by a cached vDSO every
/// window.
fn image_file(bytes: &[u8]) -> Option<String> {
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd};
    static FILES: std::sync::Mutex<Vec<(Vec<u8>, std::fs::File)>> = std::sync::Mutex::new(Vec::new());
    let mut files = FILES.lock().unwrap_or_else(|e| e.into_inner());
    let found = files.iter().find(|(b, _)| b == bytes).map(|(_, f)| f.as_raw_fd());
    let fd = match found {
        Some(fd) => fd,
        None => {
            // SAFETY: the name is a NUL-terminated literal; memfd_create returns a new fd or -1.
            let fd = unsafe { libc::memfd_create(c"whyslow-image".as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return None;
            }
            // SAFETY: fd was just created and nothing else owns it.
            let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
            f.write_all(bytes).ok()?;
            files.push((bytes.to_vec(), f));
            fd
        }
    };
    Some(format!("/proc/self/fd/{fd}"))
}

/// Symbolizes every frame of a raw recording and builds the profile.
pub fn symbolize(raw: RawRecording) -> Profile {
    symbolize_with(raw, Prefetch::default())
}

/// [`symbolize`] with what [`Prefetch::start`] has read already.
pub fn symbolize_with(raw: RawRecording, prefetch: Prefetch) -> Profile {
    let Prefetch { kernel: ahead, mut pool } = prefetch;
    build(raw, &mut pool, &mut kernel::Once { ahead })
}

/// A symbolizer that stays, for a service that symbolizes a window every few seconds: its threads keep
/// the files they read (blazesym's caches: no re-reading and re-inflating debug information every
/// window), and the kernel's tables are kept while the code loaded into the kernel stays the same (see
/// the `kernel` module).
#[derive(Default)]
pub struct Resident {
    pool: Pool,
    kernel: kernel::Kept,
}

impl Resident {
    /// A resident symbolizer that keeps the debug files it fetches from debuginfod (DEBUGINFOD_URLS)
    /// under `cache` (a service's data directory) rather than the user's cache.
    pub fn caching_debug_files_in(cache: &Path) -> Resident {
        let client = whyslow_debuginfod::Options::from_env()
            .map(|o| Client::new(whyslow_debuginfod::Options { cache: cache.to_path_buf(), ..o }));
        Resident { pool: Pool::new(client.map(Arc::new)), kernel: kernel::Kept::default() }
    }

    pub fn symbolize(&mut self, raw: RawRecording) -> Profile {
        let p = build(raw, &mut self.pool, &mut self.kernel);
        self.pool.trim();
        p
    }

    /// Ends a round without a window (a service's quiet period): files no window needed for
    /// [`KEEP_ROUNDS`] rounds are let go all the same.
    pub fn idle_round(&mut self) {
        self.pool.trim();
    }
}

/// Symbolizes on `pool`'s threads; `kernel` gives the kernel table for the recorded kernel, when there
/// are kernel addresses.
fn build(raw: RawRecording, pool: &mut Pool, kernel: &mut dyn kernel::KernelTables) -> Profile {
    let mut notes = Vec::new();

    // Collect distinct addresses per module, then resolve each module in one batch.
    let mut by_module: HashMap<u32, Vec<u64>> = HashMap::new();
    let mut kernel_addrs = Vec::new();
    for (stack, _, _) in raw.samples.keys() {
        for f in stack {
            match *f {
                RawFrame::User { module, offset } => by_module.entry(module).or_default().push(offset),
                RawFrame::Kernel(a) => kernel_addrs.push(a),
                RawFrame::Unmapped(_) | RawFrame::Label(_) => {}
            }
        }
    }
    let mut resolved: FastMap<RawFrame, Vec<Func>> = FastMap::default();
    // Each module on a pool thread (in parallel, and on the thread that may have read it ahead).
    let (reply, replies) = mpsc::channel();
    let mut asked: HashMap<u32, Vec<u64>> = HashMap::new();
    let mut local: Option<Worker> = None;
    for (module, mut offsets) in by_module {
        offsets.sort_unstable();
        offsets.dedup();
        let m = &raw.modules[module as usize];
        let path = m.path.as_str();
        // An object with no file of its own (the vDSO) is symbolized from the bytes the recorder kept; a
        // file the recorder kept open (a container's) through its descriptor.
        let file = m.image.as_deref().and_then(image_file).or_else(|| m.kept.as_ref().map(|k| k.path()));
        // perf names anonymous executable memory (JIT code) `//anon`: no file to read, nothing to note.
        let on_disk = path.starts_with('/') && !path.starts_with("//");
        let Some(file) = file.or(on_disk.then(|| path.to_string())) else {
            for &o in &offsets {
                resolved.insert(RawFrame::User { module, offset: o }, vec![unknown(path, o)]);
            }
            continue;
        };
        let producers = on_disk.then(|| file.clone());
        let (job_file, job_offsets, reply) = (file.clone(), offsets.clone(), reply.clone());
        let shown = path.to_string();
        let job = Job::Symbolize { module, file: job_file, shown, offsets: job_offsets, producers, reply };
        if let Err(job) = pool.send(&file, job) {
            job.run(local.get_or_insert_with(|| Worker::new(None)));
        }
        asked.insert(module, offsets);
    }
    drop(reply);
    if !kernel_addrs.is_empty() {
        let mut ksyms = kernel::KernelSymbols::new(kernel, raw.kernel.as_ref());
        if ksyms.is_empty() {
            notes.push("kernel symbols unavailable (/proc/kallsyms shows no addresses)".into());
        }
        kernel_addrs.sort_unstable();
        kernel_addrs.dedup();
        for a in kernel_addrs {
            let (name, kind) = match ksyms.lookup(a) {
                Some(name) => (name.to_string(), FrameKind::Kernel),
                None => (format!("{KERNEL_MODULE}+{a:#x}"), FrameKind::Unknown),
            };
            resolved.insert(RawFrame::Kernel(a), vec![Func { name, file: String::new(), line: 0, kind }]);
        }
    }
    let mut producers: HashMap<u32, Vec<String>> = HashMap::new();
    let mut described: HashMap<u32, String> = HashMap::new();
    let mut unnamed = Vec::new();
    for Reply { module, funcs, producers: built_by } in replies {
        let Some(offsets) = asked.remove(&module) else { continue };
        producers.insert(module, built_by);
        let path = &raw.modules[module as usize].path;
        let funcs = match funcs {
            Ok((funcs, plan)) => {
                // The fix is worth a line where frames did stay unnamed.
                let stayed = funcs.iter().any(|f| f.iter().all(|f| f.kind == FrameKind::Unknown));
                if stayed && plan.unnamed {
                    unnamed.push(basename(path).to_string());
                }
                notes.extend(plan.problems.iter().cloned());
                described.insert(module, plan.described.clone());
                funcs
            }
            Err(e) => {
                notes.push(format!("cannot symbolize {path}: {e}"));
                offsets.iter().map(|&o| vec![unknown(path, o)]).collect()
            }
        };
        for (o, f) in offsets.iter().zip(funcs) {
            resolved.insert(RawFrame::User { module, offset: *o }, f);
        }
    }
    // A module whose thread failed.
    for (module, offsets) in asked {
        let path = &raw.modules[module as usize].path;
        notes.push(format!("cannot symbolize {path}: the symbolizer failed"));
        for o in offsets {
            resolved.insert(RawFrame::User { module, offset: o }, vec![unknown(path, o)]);
        }
    }

    if !unnamed.is_empty() {
        unnamed.sort();
        unnamed.dedup();
        notes.push(sources::unnamed_note(&unnamed));
    }
    let mut meta = raw.meta;
    meta.notes.extend(notes);
    let mut b = ProfileBuilder::new(meta, raw.sample_types);
    let module_ids: Vec<u32> = raw.modules.iter().map(|m| b.module(&m.path, &m.build_id)).collect();
    let kernel_module = b.module(KERNEL_MODULE, "");
    // Each raw frame's function frames, and whether it is inside one of our probes.
    let mut frame_cache: FastMap<RawFrame, (Vec<(u32, u32)>, bool)> = FastMap::default();
    let mut probe_frame = None;
    // Deterministic output order: sort the aggregated samples.
    let mut samples: Vec<_> = raw.samples.into_iter().collect();
    samples.sort_by(|a, b| {
        (a.0 .1.pid, a.0 .1.tid, &a.0 .0, a.0 .2).cmp(&(b.0 .1.pid, b.0 .1.tid, &b.0 .0, b.0 .2))
    });
    let mut root_first = Vec::new();
    for ((stack, thread, time), values) in samples {
        root_first.clear();
        for raw_frame in stack.iter().rev() {
            let (ids, probe) = frame_cache.entry(*raw_frame).or_insert_with(|| {
                let (module, path) = match *raw_frame {
                    RawFrame::User { module, .. } => {
                        (module_ids[module as usize], raw.modules[module as usize].path.as_str())
                    }
                    RawFrame::Kernel(_) => (kernel_module, KERNEL_MODULE),
                    RawFrame::Unmapped(a) => {
                        let name = format!("[unknown]+{a:#x}");
                        return (
                            vec![(b.frame(&name, NONE, "", FrameKind::Unknown), 0)],
                            is_probe_address(a),
                        );
                    }
                    RawFrame::Label(i) => {
                        let l = &raw.labels[i as usize];
                        let m = b.module(&l.module, "");
                        return (
                            vec![(b.frame(&l.name, m, &l.file, l.kind), l.line)],
                            is_probe_frame(&l.name, &l.module),
                        );
                    }
                };
                let funcs = resolved.get(raw_frame).expect("user and kernel frames resolved");
                let probe = funcs.iter().any(|f| is_probe_frame(&f.name, path));
                let ids = funcs.iter().map(|f| (b.frame(&f.name, module, &f.file, f.kind), f.line)).collect();
                (ids, probe)
            });
            // A sample inside our probes: everything from the outermost probe frame down is one frame.
            if *probe {
                root_first.push((
                    *probe_frame.get_or_insert_with(|| {
                        let m = b.module(PROBE_MODULE, "");
                        b.frame(PROBE_FRAME, m, "", FrameKind::User)
                    }),
                    0,
                ));
                break;
            }
            root_first.extend_from_slice(ids);
        }
        let leaf = b.stack_at_lines(&root_first);
        let name = raw.thread_names.get(&(thread.pid, thread.tid)).map(String::as_str).unwrap_or("");
        let t = b.thread(thread.pid, thread.tid, name);
        b.add_sample_at(leaf, t, time, &values);
    }
    let mut p = b.finish();
    for (raw_id, built_by) in producers {
        p.modules[module_ids[raw_id as usize] as usize].producers = built_by;
    }
    for (raw_id, symbols) in described {
        p.modules[module_ids[raw_id as usize] as usize].symbols = symbols;
    }
    p.syscalls = raw.syscalls;
    p.calls = raw.calls;
    p
}

#[cfg(test)]
mod tests {
    use super::{Job, Pool, KEEP_ROUNDS, MAX_HELD};
    use std::path::Path;
    use std::sync::mpsc;

    fn ask(pool: &mut Pool, files: &[String]) {
        let (tx, rx) = mpsc::channel();
        for (i, f) in files.iter().enumerate() {
            let (file, shown, reply) = (f.clone(), f.clone(), tx.clone());
            let job = Job::Symbolize {
                module: i as u32,
                file,
                shown,
                offsets: vec![0x1000],
                producers: None,
                reply,
            };
            assert!(pool.send(f, job).is_ok(), "no pool thread");
        }
        drop(tx);
        assert_eq!(rx.iter().count(), files.len());
    }

    /// A resident symbolizer used to keep every file it ever read (a churning or whole-host agent grew by
    /// each binary and library seen): now a thread holds at most MAX_HELD files, and lets go of those no
    /// round asked for in KEEP_ROUNDS rounds, its plans and the pool's routing with them.
    #[test]
    fn files_no_round_needs_are_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let elf = ["/usr/bin/true", "/bin/true"].into_iter().find(|p| Path::new(p).exists()).expect("true");
        let files: Vec<String> = (0..100)
            .map(|i| {
                let f = dir.path().join(format!("prog{i}"));
                std::fs::copy(elf, &f).unwrap();
                f.display().to_string()
            })
            .collect();
        let mut pool = Pool::new(None);
        ask(&mut pool, &files);
        // Each thread keeps the MAX_HELD files it was given last.
        let mut per_thread = vec![0usize; pool.workers.len()];
        for (n, _) in pool.owner.values() {
            per_thread[*n] += 1;
        }
        let want: usize = per_thread.iter().map(|&n| n.min(MAX_HELD)).sum();
        assert_eq!(pool.trim(), want, "files per thread {per_thread:?}");
        // One file asked for every round stays; the others go after KEEP_ROUNDS rounds without use.
        let keep = vec![files[7].clone()];
        for round in 1..KEEP_ROUNDS {
            ask(&mut pool, &keep);
            let held = pool.trim();
            assert!(held > 1, "round {round}: {held} held");
        }
        ask(&mut pool, &keep);
        assert_eq!(pool.trim(), 1);
        assert_eq!(pool.owner.len(), 1);
    }
}
