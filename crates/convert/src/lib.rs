//! The converter: a state machine fed perf records (mmap, comm, fork, exit, sample, switch, lost) that
//! keeps each process's mappings and unwinder, unwinds every sample's user stack and normalizes each
//! address to (module, file offset) while the mapping is known, and emits [`RawRecording`]s.
//!
//! Live recording and perf.data import feed the same converter, so everything downstream cannot tell
//! them apart. It makes no syscalls: file bytes and facts about processes that existed before the
//! records began come through a [`Host`]. Its state stays bounded over a long run: a process that exits
//! is forgotten once its records are handled, and [`Converter::cut`] hands over the samples of a window.

pub mod heap;
pub mod records;

use records::{Record, SampleRef, Timed, UserRegs};
use std::collections::HashMap;
use std::sync::Arc;
use whyslow_model::raw::{FastMap, KeptFile, RawFrame, RawModule, RawRecording, RawThread};
use whyslow_model::syscalls::syscall_name;
use whyslow_model::{sample_types as st, FrameKind, SampleType, UnwindStats};
pub use whyslow_symbols::jit::{self, JitMap};
pub use whyslow_unwind::FileBytes;
use whyslow_unwind::{Goroutine, ObjectImage, Outcome, ProcessUnwinder, Regs};

/// What the converter cannot know from records alone.
pub trait Host {
    /// The bytes of the file at `path` as process `pid` sees it (`[vdso]`: the vDSO image), or None.
    fn file(&self, pid: u32, path: &str) -> Option<FileBytes>;
    /// A process the records have not described (it existed before they began): its executable file
    /// mappings and thread names. None where nothing is known (an imported file's host).
    fn process(&self, pid: u32) -> Option<ProcessInfo>;
    /// The name of a thread no record named.
    fn thread_name(&self, pid: u32, tid: u32) -> Option<String>;
    /// The file at `path` as process `pid` sees it where that is not the file at `path` here (another
    /// mount namespace: a container's). None where the path means the same file here, or where nothing
    /// is known (an imported file's host).
    fn foreign(&self, _pid: u32, _path: &str) -> Option<Foreign> {
        None
    }
    /// What process `pid` published about its JIT-compiled code (a perf map, or the jitdump file at
    /// `dump` it mapped) past the first `from` bytes it had published when last asked. None when it
    /// published nothing new.
    fn jit(&self, _pid: u32, _from: u64, _dump: Option<&str>) -> Option<JitUpdate> {
        None
    }
    /// The identity of the file at `path` as process `pid` sees it: (device, inode, modification time
    /// in ns), the same for every path and process that names it. None where unknown (the path then
    /// names the file).
    fn identity(&self, _pid: u32, _path: &str) -> Option<(u64, u64, i64)> {
        None
    }
}

/// A target's file that its path does not name here (see [`Host::foreign`]).
#[derive(Debug, Clone)]
pub struct Foreign {
    /// The file, kept open: readable after the process (and its namespace) is gone.
    pub file: KeptFile,
    /// Its (device, inode): one path in two namespaces is two files.
    pub id: (u64, u64),
}

/// New symbols of a process's JIT code (see [`Host::jit`]).
#[derive(Debug, Clone, Default)]
pub struct JitUpdate {
    /// The file they come from, as the module of their frames (`/tmp/perf-PID.map`).
    pub source: String,
    /// The symbols in the bytes read.
    pub map: JitMap,
    /// Lines of those bytes that were no symbol (garbage), left out.
    pub skipped: u64,
    /// How many bytes of the file are read now (the next ask's `from`).
    pub read: u64,
}

/// How often (event time) a process is asked again for JIT symbols while an address of it is unknown:
/// soon when it publishes them (a function compiled since); less often when it has published nothing
/// yet (most anonymous code is no JIT's that writes a map, but a JIT's map may appear only after its
/// first samples: node's is written after its first compile, and samples before the map is read stay
/// unnamed).
const JIT_ASK_NS: u64 = 10_000_000;
const NO_JIT_ASK_NS: u64 = 100_000_000;

/// How allocation functions nest, so each allocation is counted once, at the outermost allocator the
/// program called: glibc's aligned allocators call malloc (for small alignments as a tail jump, so the
/// malloc has the program's return address), realloc of a null pointer too.
#[derive(Debug, Clone, Default)]
pub struct Nesting {
    /// Code of allocation functions that call another probed allocator: (module path, file offsets). A
    /// probed allocation called from there is not counted again.
    pub within: Vec<(String, std::ops::Range<u64>)>,
}

/// An executable file mapping of a process: [start, end) maps `path` from file offset `pgoff`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub path: String,
}

/// A process as a host sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Executable mappings.
    pub maps: Vec<Mapping>,
    /// (tid, name) of each thread.
    pub threads: Vec<(u32, String)>,
}

/// What samples of one event mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// On-CPU: a sample count at `slot` and the period (ns or cycles) at `slot + 1`.
    Cpu { slot: usize },
    /// A syscall entry: its calls (the sample's period) at `slot`; the stack ends in the syscall (from
    /// the tracepoint's `id`).
    Syscalls { slot: usize },
    /// Entry of a probed function: its calls (the sample's period) at `slot`; the stack ends in the
    /// function's label.
    Call { slot: usize, probe: usize },
    /// A switch-out of a target thread: its blocked time (until it is switched in again, at least
    /// `min_block_ns`) goes to `slot`; `state_offset` is where sched_switch's prev_state is.
    OffCpu { slot: usize, state_offset: usize, min_block_ns: u64 },
    /// Entry of an allocation function (every Nth call, N the sample's period): count at `slot`, bytes
    /// at `slot + 1` read from the size argument; the stack ends in the allocator's label.
    Alloc { slot: usize, probe: usize, size: SizeArg },
    /// Any other event (an imported tracepoint or probe): one event at `slot`.
    Events { slot: usize },
}

/// Where an allocation function receives the requested size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeArg {
    /// The Nth integer argument of the SysV ABI (0: rdi, 1: rsi, 2: rdx).
    Arg(u8),
    /// calloc: count (rdi) times size (rsi).
    Product,
    /// Go's register ABI: the first argument is in rax (runtime.mallocgc).
    GoFirst,
}

impl SizeArg {
    pub fn bytes(self, r: &UserRegs) -> u64 {
        match self {
            SizeArg::Arg(0) => r.di,
            SizeArg::Arg(1) => r.si,
            SizeArg::Arg(_) => r.dx,
            SizeArg::Product => r.di.saturating_mul(r.si),
            SizeArg::GoFirst => r.ax,
        }
    }
}

/// Calls and requested bytes of one allocation function from one call site (return address), counted
/// in the kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SiteCount {
    pub pid: u32,
    pub probe: u32,
    pub ret: u64,
    pub calls: u64,
    pub bytes: u64,
}

/// Calls and requested bytes of one allocation function from one call site and one stack id (a hash of
/// the frame-pointer chain), counted in the kernel; its stack is named by the samples that carry its key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackCount {
    pub pid: u32,
    pub probe: u32,
    pub ret: u64,
    pub stack: u64,
    pub calls: u64,
    pub bytes: u64,
}

/// (pid, probe, return address, stack id) of a keyed allocation count.
type StackKey = (u32, u32, u64, u64);
/// A stack id of [`StackKey`] for a site's exact two-frame count, and for its calls no stack key held.
const SITE_TOTAL: u64 = u64::MAX;
const SITE_UNKEYED: u64 = u64::MAX - 1;
/// Distinct stacks kept per stack key (more: the rest go to the first).
const STACKS_PER_KEY: usize = 64;

/// `n` split in proportion to `weights` (largest remainders), summing to `n` exactly.
fn split(n: u64, weights: &[u64]) -> Vec<u64> {
    let total: u128 = weights.iter().map(|&w| w as u128).sum();
    if total == 0 {
        let mut out = vec![0; weights.len()];
        if let Some(first) = out.first_mut() {
            *first = n;
        }
        return out;
    }
    let mut out: Vec<u64> = weights.iter().map(|&w| (n as u128 * w as u128 / total) as u64).collect();
    let mut rest = n - out.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse((n as u128 * weights[i] as u128) % total));
    for &i in order.iter().cycle().take(weights.len() * 2) {
        if rest == 0 {
            break;
        }
        out[i] += 1;
        rest -= 1;
    }
    out
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Offset of `long id` in the raw_syscalls:sys_enter record (after the 8 bytes of common fields; stable
/// since the tracepoint exists).
const SYS_ENTER_ID_OFFSET: usize = 8;

/// How long the state of an exited process is kept for records that follow its exit.
const EXITED_GRACE_NS: u64 = 1_000_000_000;

/// Counters of what the converter saw and could not use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub samples: u64,
    /// Records the kernel reported lost.
    pub lost: u64,
    /// Records the source could not decode.
    pub malformed: u64,
    /// Lines of JIT perf maps that named no symbol.
    pub jit_skipped: u64,
    pub unwind: UnwindStats,
    /// Files read and parsed for their unwind tables (each once while a process maps it, however
    /// many processes and paths name it).
    pub images_loaded: u64,
}

/// A mapping of a process as the converter keeps it: its file as a module id.
#[derive(Debug, Clone, Copy)]
struct Mapped {
    start: u64,
    end: u64,
    pgoff: u64,
    module: u32,
}

/// A process: its executable mappings and an unwinder over them, and the symbols of its JIT code.
#[derive(Default)]
struct Proc {
    maps: Vec<Mapped>,
    unwinder: ProcessUnwinder,
    jit: Jit,
    /// Lazily (see [`Converter::lazily`]): the mappings its records described, not read or parsed until
    /// its first sample; None once they were (or when not lazy).
    pending: Option<Vec<Mapping>>,
    /// Whether a sample of it was seen (since its last exec).
    sampled: bool,
}

/// What a process published about its JIT code, as far as read.
#[derive(Default)]
struct Jit {
    map: JitMap,
    /// The module its frames are labelled with (the file's name).
    source: String,
    read: u64,
    /// When it was last asked (event time), and whether ever.
    asked: Option<u64>,
    /// The jitdump file it mapped, if any.
    dump: Option<String>,
    /// The label of each symbol that named a frame, by its start address.
    labels: HashMap<u64, u32>,
}

impl Proc {
    /// A child: the parent's mappings; JIT code is the child's own to publish (its own file).
    fn fork(&self) -> Proc {
        Proc {
            maps: self.maps.clone(),
            unwinder: self.unwinder.fork(),
            jit: Jit::default(),
            pending: self.pending.clone(),
            sampled: false,
        }
    }

    /// A process whose mappings are kept unread until its first sample.
    fn lazy() -> Proc {
        Proc { pending: Some(Vec::new()), ..Proc::default() }
    }

    fn normalize(&self, addr: u64) -> RawFrame {
        match self.maps.iter().find(|m| m.start <= addr && addr < m.end) {
            // A corrupt perf.data can name any page offset: wrap as the kernel's arithmetic would.
            Some(m) => RawFrame::User { module: m.module, offset: (addr - m.start).wrapping_add(m.pgoff) },
            None => RawFrame::Unmapped(addr),
        }
    }
}

/// The parsed files (unwind tables), shared by every process that maps them: by build id (by identity,
/// else path, for a file without one), with the file identities and paths already looked up. Files
/// that no process maps any more are kept up to [`UNUSED_IMAGES`], the most recently used first, and
/// dropped beyond that when a window is cut.
#[derive(Default)]
struct Images {
    /// Cache key -> the image (None: unreadable or not an object file) and when it was last asked for.
    by_key: HashMap<String, (Option<Arc<ObjectImage>>, u64)>,
    /// A file's identity (or path) -> its cache key.
    known: HashMap<String, String>,
    tick: u64,
}

/// Parsed files no process maps any more that are kept (a program started again soon, a library of
/// the next short-lived process).
const UNUSED_IMAGES: usize = 32;

impl Images {
    /// Drops what no process uses beyond the [`UNUSED_IMAGES`] most recently asked for.
    fn evict(&mut self) {
        let mut unused: Vec<(u64, String)> = self
            .by_key
            .iter()
            .filter(|(_, (img, _))| img.as_ref().is_none_or(|i| Arc::strong_count(i) == 1))
            .map(|(k, (_, t))| (*t, k.clone()))
            .collect();
        if unused.len() <= UNUSED_IMAGES {
            return;
        }
        unused.sort_unstable_by_key(|u| std::cmp::Reverse(u.0));
        for (_, k) in unused.drain(UNUSED_IMAGES..) {
            self.by_key.remove(&k);
        }
        let by_key = &self.by_key;
        self.known.retain(|_, k| by_key.contains_key(k));
    }

    fn len(&self) -> usize {
        self.by_key.len()
    }
}

/// The GNU build id in an object file's notes (hex), read without parsing the rest; None when it has
/// none or is no object file.
fn note_build_id(bytes: &[u8]) -> Option<String> {
    whyslow_unwind::build_id(bytes)
}

/// A thread that blocked and has not run since.
struct Blocked {
    since: u64,
    stack: Vec<RawFrame>,
    thread: RawThread,
}

/// The converter. See the module documentation.
pub struct Converter<H: Host> {
    host: H,
    procs: FastMap<u32, Proc>,
    images: Images,
    module_ids: HashMap<String, u32>,
    raw: RawRecording,
    /// What each event (by index) contributes to a sample's values.
    streams: Vec<Stream>,
    /// (name, module) of each probed function and of each allocation function, for stack labels.
    probe_names: Vec<(String, String)>,
    alloc_names: Vec<(String, String)>,
    offcpu: Option<Stream>,
    nesting: Nesting,
    blocked: FastMap<u32, Blocked>,
    /// Keep the state of exited processes (their mappings are needed after the run).
    retain_exited: bool,
    /// Processes that exited, with when: forgotten [`EXITED_GRACE_NS`] later, since records of their
    /// threads can follow the exit (an off-CPU block that ended when the process was torn down).
    exited: Vec<(u32, u64)>,
    counters: Counters,
    frames: Vec<u64>,
    /// Event-clock time of time slice 0 of the current window (the first event's when not set).
    origin: Option<u64>,
    /// Allocation stacks sampled by key (see [`StackCount`]): each distinct stack and thread with the hits
    /// its samples stood for, over which the key's exact counts are split.
    alloc_stacks: HashMap<StackKey, Vec<(Vec<RawFrame>, RawThread, u64)>>,
    /// Calls and bytes of each key (and site) already added to the samples, so that a window gets what
    /// was counted since the last.
    alloc_added: HashMap<StackKey, (u64, u64)>,
    /// See [`Converter::lazily`].
    lazy: bool,
    /// Processes sampled for the first time (since their last exec) and not yet taken.
    first_sampled: Vec<u32>,
}

impl<H: Host> Converter<H> {
    /// A converter whose samples have `sample_types`; event `k` of the source means `streams[k]`.
    pub fn new(host: H, sample_types: Vec<SampleType>, streams: Vec<Stream>) -> Self {
        let offcpu = streams.iter().copied().find(|s| matches!(s, Stream::OffCpu { .. }));
        Converter {
            host,
            procs: FastMap::default(),
            images: Images::default(),
            module_ids: HashMap::new(),
            raw: RawRecording { sample_types, ..Default::default() },
            streams,
            probe_names: Vec::new(),
            alloc_names: Vec::new(),
            offcpu,
            nesting: Nesting::default(),
            blocked: FastMap::default(),
            retain_exited: false,
            exited: Vec::new(),
            counters: Counters::default(),
            frames: Vec::new(),
            origin: None,
            alloc_stacks: HashMap::new(),
            alloc_added: HashMap::new(),
            lazy: false,
            first_sampled: Vec::new(),
        }
    }

    /// For records of a whole host (every process's mappings, forks and execs, most never sampled): a
    /// process's mappings are kept as the records give them and read and parsed only at its first
    /// sample; a process the records began after is read from the host at its first sample, as is a
    /// child of one never sampled; the mappings of a process never described and not sampled are not
    /// kept.
    pub fn lazily(mut self) -> Self {
        self.lazy = true;
        self
    }

    /// The processes sampled for the first time (or first since they exec'd) since the last call.
    pub fn take_first_sampled(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.first_sampled)
    }

    /// Names of the probed functions (`Stream::Call`) and allocation functions (`Stream::Alloc`): the
    /// labels their stacks end in.
    pub fn with_labels(mut self, probes: Vec<(String, String)>, allocs: Vec<(String, String)>) -> Self {
        self.probe_names = probes;
        self.alloc_names = allocs;
        self
    }

    /// How the allocation functions nest: their calls of each other are counted once.
    pub fn with_nesting(mut self, nesting: Nesting) -> Self {
        self.nesting = nesting;
        self
    }

    /// Whether `caller` (the frame that called a probed allocator) lies in an allocation function that
    /// allocates through it.
    fn nested(&self, caller: Option<&RawFrame>) -> bool {
        let Some(&RawFrame::User { module, offset }) = caller else { return false };
        let Some(m) = self.raw.modules.get(module as usize) else { return false };
        self.nesting.within.iter().any(|(path, r)| *path == m.path && r.contains(&offset))
    }

    /// Keep the mappings of processes that exit, for [`Converter::add_alloc_sites`] after the run.
    pub fn retaining_exited(mut self) -> Self {
        self.retain_exited = true;
        self
    }

    /// Times samples from `time_ns` (event clock) on: the start of the run or of the next window, which
    /// the metadata's `start_unix_ns` tells in unix time.
    pub fn set_origin(&mut self, time_ns: u64) {
        self.origin = Some(time_ns);
    }

    /// The time slice ([`whyslow_model::Sample::time`]) of an event at `time` (event clock).
    fn slice(&mut self, time: u64) -> u32 {
        let origin = *self.origin.get_or_insert(time);
        (time.saturating_sub(origin) / whyslow_model::TIME_BUCKET_NS).min(u64::from(u32::MAX)) as u32
    }

    pub fn host(&self) -> &H {
        &self.host
    }

    pub fn streams(&self) -> &[Stream] {
        &self.streams
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Processes whose state is held (for bounded-memory checks).
    pub fn live_processes(&self) -> usize {
        self.procs.len()
    }

    /// Parsed files held (for bounded-memory checks).
    pub fn images_held(&self) -> usize {
        self.images.len()
    }

    /// The processes it keeps state of: added, or seen forking from one that was.
    pub fn process_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.procs.keys().copied()
    }

    /// Forgets process `pid` as if it exited at `now` (event clock): a process let go while it runs sends
    /// no exit record through a side band that stopped following it, and its state (mappings, unwinder,
    /// its cache) would stay for the rest of the run.
    pub fn forget(&mut self, pid: u32, now: u64) {
        if !self.retain_exited && self.procs.contains_key(&pid) && !self.exited.iter().any(|&(p, _)| p == pid)
        {
            self.exited.push((pid, now));
        }
    }

    /// Drops the state of processes that exited more than [`EXITED_GRACE_NS`] before `now` (event clock).
    /// Records arriving do it; a recording whose processes all ended gets no more, and does it per window.
    pub fn forget_exited(&mut self, now: u64) {
        let procs = &mut self.procs;
        self.exited.retain(|&(pid, at)| {
            let keep = now < at.saturating_add(EXITED_GRACE_NS);
            if !keep {
                procs.remove(&pid);
            }
            keep
        });
    }

    /// A record the source could not decode.
    pub fn count_malformed(&mut self) {
        self.counters.malformed += 1;
    }

    /// Reads and parses the unwind tables of a file ahead of its first samples.
    pub fn preload(&mut self, pid: u32, path: &str) {
        if self.host.foreign(pid, path).is_none() {
            self.image(pid, path, path);
        }
    }

    /// The unwind tables of `path` as `pid` sees it, parsed once per file: `key` tells files apart
    /// (the path, with the identity of a foreign file).
    ///
    /// A file is known by its identity where the host tells it (else by `key`), and parsed once per
    /// build id: a library that many processes map, under any path or in any container, is read and
    /// parsed once while any of them maps it (see [`Images`]).
    fn image(&mut self, pid: u32, path: &str, key: &str) -> Option<Arc<ObjectImage>> {
        let seen = match self.host.identity(pid, path) {
            Some((dev, ino, mtime)) => format!("file:{dev}:{ino}:{mtime}"),
            None => format!("path:{key}"),
        };
        self.images.tick += 1;
        let tick = self.images.tick;
        if let Some(e) = self.images.known.get(&seen).and_then(|k| self.images.by_key.get_mut(k)) {
            e.1 = tick;
            return e.0.clone();
        }
        let bytes = self.host.file(pid, path);
        let build_id = bytes.as_ref().and_then(|b| note_build_id(b));
        let cache_key = build_id.map_or_else(|| seen.clone(), |b| format!("build-id:{b}"));
        let img = match self.images.by_key.get_mut(&cache_key) {
            Some(e) => {
                e.1 = tick;
                e.0.clone()
            }
            None => {
                self.counters.images_loaded += 1;
                let img = bytes.and_then(|b| ObjectImage::parse(path, &b).ok()).map(Arc::new);
                self.images.by_key.insert(cache_key.clone(), (img.clone(), tick));
                img
            }
        };
        self.images.known.insert(seen, cache_key);
        img
    }

    /// The module of a file, one per path and build id: the same path in two containers may be two
    /// builds.
    fn module_id(&mut self, pid: u32, path: &str, build_id: &str, kept: Option<KeptFile>) -> u32 {
        let key = format!("{path}\0{build_id}");
        if let Some(&id) = self.module_ids.get(&key) {
            return id;
        }
        let id = self.raw.modules.len() as u32;
        // The vDSO has no file to read when symbolizing: keep its bytes.
        let image = if path == "[vdso]" { self.host.file(pid, path).map(|b| b.to_vec()) } else { None };
        let m = RawModule { path: path.to_string(), build_id: build_id.to_string(), image, kept };
        self.raw.modules.push(m);
        self.module_ids.insert(key, id);
        id
    }

    fn add_mapping(&mut self, pid: u32, start: u64, end: u64, pgoff: u64, path: &str) {
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        // A JIT maps its jitdump file to show profilers where it is.
        if jit::jitdump_pid(path).is_some() {
            self.procs.entry(pid).or_default().jit.dump = Some(path.to_string());
            return;
        }
        // perf names anonymous executable memory (JIT code) "//anon": no file to read.
        if path.starts_with("//") || !(path.starts_with('/') || path == "[vdso]") {
            return;
        }
        let foreign = if path == "[vdso]" { None } else { self.host.foreign(pid, path) };
        let key = match &foreign {
            Some(f) => format!("{path}\0{}:{}", f.id.0, f.id.1),
            None => path.to_string(),
        };
        let image = self.image(pid, path, &key);
        let build_id = image.as_ref().map(|i| i.build_id.clone()).unwrap_or_default();
        let module = self.module_id(pid, path, &build_id, foreign.map(|f| f.file));
        let proc = self.procs.entry(pid).or_default();
        proc.maps.retain(|m| m.end <= start || end <= m.start);
        proc.maps.push(Mapped { start, end, pgoff, module });
        if let Some(image) = image {
            proc.unwinder.add_mapping(start, end, pgoff, image);
        }
    }

    /// Learns a process that existed before the records began from the host.
    pub fn add_process(&mut self, pid: u32) {
        self.procs.entry(pid).or_default();
        let Some(info) = self.host.process(pid) else { return };
        for m in &info.maps {
            self.add_mapping(pid, m.start, m.end, m.pgoff, &m.path);
        }
        for (tid, name) in info.threads {
            self.raw.thread_names.insert((pid, tid), name);
        }
    }

    /// Handles records from several rings: in time order, so a mapping is known before the samples
    /// that use it. `ids` maps a sample's event id to its stream index.
    pub fn handle_batch(&mut self, mut batch: Vec<Timed>, ids: &HashMap<u64, usize>) {
        batch.sort_by_key(|t| t.time);
        for t in batch {
            self.handle(t, ids);
        }
    }

    pub fn handle(&mut self, t: Timed, ids: &HashMap<u64, usize>) {
        // Exits arrive in time order: only when the oldest is due is there anything to forget.
        if self.exited.first().is_some_and(|&(_, at)| t.time >= at.saturating_add(EXITED_GRACE_NS)) {
            self.forget_exited(t.time);
        }
        match t.record {
            Record::Sample(s) => self.handle_sample(s.borrowed(), t.time, ids),
            Record::OffCpu { sample, ns } => {
                if let Some(stream) = self.offcpu {
                    self.sample(sample.borrowed(), stream, t.time, Some(ns))
                }
            }
            Record::Switch { tid, out: false } => self.switched_in(tid, t.time),
            Record::Switch { .. } | Record::Other => {}
            Record::Mmap { exec: false, .. } => {}
            Record::Mmap { pid, start, len, pgoff, path, .. } => {
                if !self.lazy {
                    self.add_mapping(pid, start, start.saturating_add(len), pgoff, &path);
                } else if let Some(p) = self.procs.get_mut(&pid) {
                    match &mut p.pending {
                        Some(pending) => {
                            pending.push(Mapping { start, end: start.saturating_add(len), pgoff, path })
                        }
                        None => self.add_mapping(pid, start, start.saturating_add(len), pgoff, &path),
                    }
                }
                // (Lazily, a process not described yet is read whole at its first sample.)
            }
            Record::Comm { pid, tid, name, exec } => {
                if exec {
                    // A new program image: the old address space is gone.
                    let fresh = if self.lazy { Proc::lazy() } else { Proc::default() };
                    self.procs.insert(pid, fresh);
                }
                self.raw.thread_names.insert((pid, tid), name);
            }
            Record::Fork { pid, ppid, tid, ptid } => {
                let reused = self.exited.iter().position(|&(p, _)| p == pid);
                if let Some(i) = reused {
                    // A new process under the pid of one that exited moments ago.
                    self.exited.swap_remove(i);
                    self.procs.remove(&pid);
                }
                if pid != ppid && !self.procs.contains_key(&pid) {
                    match self.procs.get(&ppid).map(Proc::fork) {
                        Some(child) => {
                            self.procs.insert(pid, child);
                        }
                        // Lazily, the child of a process not described is read at its first sample.
                        None if self.lazy => {}
                        None => {
                            self.procs.insert(pid, Proc::default());
                        }
                    }
                    self.raw.forks.push((pid, ppid));
                }
                if let Some(name) = self.raw.thread_names.get(&(ppid, ptid)).cloned() {
                    self.raw.thread_names.entry((pid, tid)).or_insert(name);
                }
            }
            Record::Exit { pid, tid } => {
                // A thread that ends while blocked was blocked until then.
                if let Some(b) = self.blocked.remove(&tid) {
                    self.add_blocked(b, t.time);
                }
                if pid == tid && !self.retain_exited {
                    self.exited.push((pid, t.time));
                }
            }
            Record::Lost(n) => self.counters.lost += n,
        }
    }

    /// A sample whose bytes stay the source's (handled like [`Record::Sample`] in [`Converter::handle`]).
    pub fn handle_sample(&mut self, s: SampleRef<'_>, time: u64, ids: &HashMap<u64, usize>) {
        if let Some(&stream) = ids.get(&s.id).and_then(|&k| self.streams.get(k)) {
            self.sample(s, stream, time, None)
        }
    }

    /// The frame of a user address of `pid`: in a file's mapping, or a symbol of its JIT code (asked for
    /// anew, at most every [`JIT_ASK_NS`], while an address is in neither), or unmapped.
    fn jit_frame(&mut self, pid: u32, addr: u64, time: u64) -> RawFrame {
        let Some(proc) = self.procs.get_mut(&pid) else { return RawFrame::Unmapped(addr) };
        let f = proc.normalize(addr);
        if !matches!(f, RawFrame::Unmapped(_)) {
            return f;
        }
        let jit = &mut proc.jit;
        let every = if jit.source.is_empty() { NO_JIT_ASK_NS } else { JIT_ASK_NS };
        if jit.map.lookup(addr).is_none() && jit.asked.is_none_or(|at| time >= at.saturating_add(every)) {
            jit.asked = Some(time);
            if let Some(u) = self.host.jit(pid, jit.read, jit.dump.as_deref()) {
                self.counters.jit_skipped += u.skipped;
                jit.map.merge(u.map);
                jit.source = u.source;
                jit.read = u.read;
            }
        }
        let Some(sym) = jit.map.lookup(addr) else { return f };
        // A JIT reuses memory: a start seen before may be another function's now.
        let known = jit.labels.get(&sym.start).filter(|&&l| self.raw.labels[l as usize].name == sym.name);
        let label = match known {
            Some(&l) => l,
            None => {
                let l = self.raw.label(&sym.name, &jit.source, FrameKind::User);
                jit.labels.insert(sym.start, l);
                l
            }
        };
        RawFrame::Label(label)
    }

    /// Exact per-call-site allocation counts as two-frame samples: the allocator, and the code that called
    /// it (normalized with the mappings the run tracked, so exited processes resolve too).
    pub fn add_alloc_sites(&mut self, sites: &[SiteCount]) {
        self.add_alloc_counts(sites, &[]);
    }

    /// Exact allocation counts, read from the kernel (totals so far; what earlier calls added is not added
    /// again): per call site as two-frame samples (`alloc-site-*`), and per stack key over the stacks its
    /// samples unwound to (`alloc-count`, `alloc-bytes`), split by the hits each sample stood for. Counts
    /// whose key no sample named (or that no key held) keep the allocator and its caller under
    /// [`whyslow_model::LOST_STACK_FRAME`]: a lost stack, never a lost count.
    pub fn add_alloc_counts(&mut self, sites: &[SiteCount], stacks: &[StackCount]) {
        let n = self.raw.sample_types.len();
        let pos = |name: &str| self.raw.sample_types.iter().position(|t| t.name == name);
        let site_slots = pos(st::ALLOC_SITE_COUNT).zip(pos(st::ALLOC_SITE_BYTES));
        let stack_slots = pos(st::ALLOC_COUNT).zip(pos(st::ALLOC_BYTES));
        let mut keyed: HashMap<(u32, u32, u64), (u64, u64)> = HashMap::new();
        for k in stacks {
            let e = keyed.entry((k.pid, k.probe, k.ret)).or_default();
            e.0 += k.calls;
            e.1 += k.bytes;
        }
        // (stack, thread, [calls, bytes], the two value slots they go to)
        type Add = (Vec<RawFrame>, RawThread, [i64; 2], (usize, usize));
        let mut adds: Vec<Add> = Vec::new();
        for s in sites {
            let Some((name, module)) = self.alloc_names.get(s.probe as usize).cloned() else { continue };
            let label = RawFrame::Label(self.raw.label(&name, &module, FrameKind::User));
            // A return address points after the call; step back into it.
            let caller = match self.procs.get(&s.pid) {
                Some(p) => p.normalize(s.ret.saturating_sub(1)),
                None => RawFrame::Unmapped(s.ret),
            };
            if self.nested(Some(&caller)) {
                continue;
            }
            let thread = RawThread { pid: s.pid, tid: s.pid };
            if let Some(slots) = site_slots {
                let d = self.added((s.pid, s.probe, s.ret, SITE_TOTAL), s.calls, s.bytes);
                adds.push((vec![label, caller], thread.clone(), d, slots));
            }
            let Some(slots) = stack_slots.filter(|_| !stacks.is_empty()) else { continue };
            let (kc, kb) = keyed.get(&(s.pid, s.probe, s.ret)).copied().unwrap_or_default();
            let d = self.added(
                (s.pid, s.probe, s.ret, SITE_UNKEYED),
                s.calls.saturating_sub(kc),
                s.bytes.saturating_sub(kb),
            );
            let lost = RawFrame::Label(self.raw.label(
                whyslow_model::LOST_STACK_FRAME,
                "[alloc]",
                FrameKind::Unknown,
            ));
            adds.push((vec![label, caller, lost], thread, d, slots));
        }
        if let Some(slots) = stack_slots {
            for k in stacks {
                let key = (k.pid, k.probe, k.ret, k.stack);
                let d = self.added(key, k.calls, k.bytes);
                if d == [0, 0] {
                    continue;
                }
                match self.alloc_stacks.get(&key) {
                    Some(kept) => {
                        let weights: Vec<u64> = kept.iter().map(|(_, _, w)| *w).collect();
                        let calls = split(d[0] as u64, &weights);
                        let bytes = split(d[1] as u64, &weights);
                        for (i, (frames, thread, _)) in kept.iter().enumerate() {
                            adds.push((
                                frames.clone(),
                                thread.clone(),
                                [calls[i] as i64, bytes[i] as i64],
                                slots,
                            ));
                        }
                    }
                    None => {
                        let Some((name, module)) = self.alloc_names.get(k.probe as usize).cloned() else {
                            continue;
                        };
                        let caller = match self.procs.get(&k.pid) {
                            Some(p) => p.normalize(k.ret.saturating_sub(1)),
                            None => RawFrame::Unmapped(k.ret),
                        };
                        if self.nested(Some(&caller)) {
                            continue;
                        }
                        let label = RawFrame::Label(self.raw.label(&name, &module, FrameKind::User));
                        let lost =
                            self.raw.label(whyslow_model::LOST_STACK_FRAME, "[alloc]", FrameKind::Unknown);
                        let thread = RawThread { pid: k.pid, tid: k.pid };
                        adds.push((vec![label, caller, RawFrame::Label(lost)], thread, d, slots));
                    }
                }
            }
        }
        for (stack, thread, [calls, bytes], (cs, bs)) in adds {
            if calls == 0 && bytes == 0 {
                continue;
            }
            let mut values = vec![0i64; n];
            values[cs] = calls;
            values[bs] = bytes;
            // Counted over the whole run and read at its end: no time of their own (slice 0).
            self.raw.add(stack, thread, 0, &values);
        }
    }

    /// What of `calls` and `bytes` (totals so far of `key`) was not added yet; marks it added.
    fn added(&mut self, key: StackKey, calls: u64, bytes: u64) -> [i64; 2] {
        let done = self.alloc_added.entry(key).or_default();
        let d = [calls.saturating_sub(done.0), bytes.saturating_sub(done.1)];
        *done = (done.0.max(calls), done.1.max(bytes));
        [d[0].min(i64::MAX as u64) as i64, d[1].min(i64::MAX as u64) as i64]
    }

    /// A thread runs again: the time since it blocked is off-CPU time of the stack it blocked in.
    fn switched_in(&mut self, tid: u32, time: u64) {
        if let Some(b) = self.blocked.remove(&tid) {
            self.add_blocked(b, time);
        }
    }

    fn add_blocked(&mut self, b: Blocked, until: u64) {
        let ns = until.saturating_sub(b.since);
        if let (Some(Stream::OffCpu { slot, min_block_ns, .. }), true) = (self.offcpu, ns > 0) {
            if ns >= min_block_ns {
                let mut values = vec![0i64; self.raw.sample_types.len()];
                values[slot] = ns as i64;
                let time = self.slice(until);
                self.raw.add(b.stack, b.thread, time, &values);
            }
        }
    }

    /// Values the threads still blocked at `end` with their time so far.
    pub fn finish_blocked(&mut self, end: u64) {
        let blocked: Vec<Blocked> = self.blocked.drain().map(|(_, b)| b).collect();
        for b in blocked {
            self.add_blocked(b, end);
        }
    }

    /// `offcpu_ns`: the blocked time of an off-CPU sample whose block already ended (else it is valued
    /// when the thread runs again).
    fn sample(&mut self, s: SampleRef<'_>, stream: Stream, time: u64, offcpu_ns: Option<u64>) {
        self.counters.samples += 1;
        // A sample of a thread means it runs: a block whose switch-in no record showed (a perf.data file
        // of sched_switch alone holds only the switch-outs of the threads it follows) ends here.
        if let Some(b) = self.blocked.remove(&s.tid) {
            self.add_blocked(b, time);
        }
        match self.procs.get_mut(&s.pid) {
            None => self.add_process(s.pid),
            Some(p) => {
                if let Some(pending) = p.pending.take() {
                    for m in pending {
                        self.add_mapping(s.pid, m.start, m.end, m.pgoff, &m.path);
                    }
                }
            }
        }
        let p = self.procs.get_mut(&s.pid).expect("inserted above");
        if !p.sampled && self.lazy {
            p.sampled = true;
            self.first_sampled.push(s.pid);
        }
        if !self.raw.thread_names.contains_key(&(s.pid, s.tid)) {
            let name = self.host.thread_name(s.pid, s.tid).unwrap_or_default();
            self.raw.thread_names.insert((s.pid, s.tid), name);
        }
        let mut values = vec![0i64; self.raw.sample_types.len()];
        // A probe in a function: its first frame is the function itself, replaced by the label.
        let mut skip_leaf = false;
        let mut stack: Vec<RawFrame> = match stream {
            Stream::Cpu { slot } => {
                values[slot] = 1;
                values[slot + 1] = s.period as i64;
                s.kernel.iter().map(|&a| RawFrame::Kernel(a)).collect()
            }
            // An event sampled every Nth hit stands for N hits.
            Stream::Syscalls { slot } => {
                values[slot] = s.period as i64;
                let nr = s.raw.get(SYS_ENTER_ID_OFFSET..SYS_ENTER_ID_OFFSET + 8);
                let nr = nr.map_or(u64::MAX, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes"))) as u32;
                let name = syscall_name(nr).map_or_else(|| format!("syscall_{nr}"), str::to_string);
                vec![RawFrame::Label(self.raw.label(&name, "[syscall]", FrameKind::Kernel))]
            }
            Stream::Call { slot, probe } => {
                values[slot] = s.period as i64;
                skip_leaf = true;
                let (name, module) = self.probe_names.get(probe).cloned().unwrap_or_default();
                vec![RawFrame::Label(self.raw.label(&name, &module, FrameKind::User))]
            }
            Stream::OffCpu { state_offset, .. } => {
                let state = s.raw.get(state_offset..state_offset.saturating_add(8)); // the offset is from the file
                let state = state.map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")));
                let mut stack: Vec<RawFrame> = Vec::new();
                // TASK_RUNNING (0): preempted, so waiting for a CPU rather than blocked; marked as such so
                // the wall view still adds up and the two can be told apart.
                if state & 0xff == 0 {
                    stack.push(RawFrame::Label(self.raw.label(
                        whyslow_model::PREEMPTED_FRAME,
                        "[sched]",
                        FrameKind::Kernel,
                    )));
                }
                stack.extend(s.kernel.iter().map(|&a| RawFrame::Kernel(a)));
                stack
            }
            Stream::Events { slot } => {
                values[slot] = 1;
                s.kernel.iter().map(|&a| RawFrame::Kernel(a)).collect()
            }
            Stream::Alloc { slot, probe, size } => {
                let bytes = s.regs.as_ref().map_or(0, |r| size.bytes(r));
                values[slot] = s.period as i64;
                values[slot + 1] = bytes.saturating_mul(s.period).min(i64::MAX as u64) as i64;
                skip_leaf = true;
                let (name, module) = self.alloc_names.get(probe).cloned().unwrap_or_default();
                vec![RawFrame::Label(self.raw.label(&name, &module, FrameKind::User))]
            }
        };
        if let Some(UserRegs { bp, sp, ip, .. }) = s.regs {
            let proc = self.procs.get_mut(&s.pid).expect("inserted above");
            let (own, goroutine) = match s.goroutine {
                Some(g) if g.offset <= s.stack.len() => {
                    let (own, rest) = s.stack.split_at(g.offset);
                    (
                        own,
                        Some(Goroutine {
                            at: g.at,
                            stack: rest,
                            parked: g.parked.map(|(ip, bp)| Regs { ip, sp: g.at, bp }),
                        }),
                    )
                }
                _ => (s.stack, None),
            };
            let outcome = proc.unwinder.unwind(Regs { ip, sp, bp }, own, goroutine, &mut self.frames);
            let cut = outcome == Outcome::Partial;
            match outcome {
                Outcome::Complete => self.counters.unwind.complete += 1,
                Outcome::Partial => self.counters.unwind.partial += 1,
            }
            if self.frames.is_empty() {
                self.frames.push(ip);
            }
            // Past the leaf, an address in no executable mapping is not a return address but data the
            // unwinder read beyond the stack's real end (Go's runtime.clone and mcall roots): the stack
            // ends there.
            let known = !proc.maps.is_empty();
            let frames = std::mem::take(&mut self.frames);
            for (i, &a) in frames.iter().enumerate().skip(skip_leaf as usize) {
                let f = self.jit_frame(s.pid, a, time);
                if i > 0 && known && matches!(f, RawFrame::Unmapped(_)) {
                    break;
                }
                stack.push(f);
            }
            self.frames = frames;
            if cut {
                let label = self.raw.label(whyslow_model::CUT_FRAME, "[unwind]", FrameKind::Unknown);
                stack.push(RawFrame::Label(label));
            }
        } else if !s.user.is_empty() {
            for &a in s.user.iter().skip(skip_leaf as usize) {
                let f = self.jit_frame(s.pid, a, time);
                stack.push(f);
            }
        }
        if matches!(stream, Stream::Alloc { .. }) && self.nested(stack.get(1)) {
            return;
        }
        let thread = RawThread { pid: s.pid, tid: s.tid };
        if let (Stream::Alloc { probe, .. }, Some(ret), Some(id)) =
            (stream, u64_at(s.raw, 0), u64_at(s.raw, 8))
        {
            // A sample of a stack key: it names the stack of the key's exact counts (added with them).
            let kept = self.alloc_stacks.entry((s.pid, probe as u32, ret, id)).or_default();
            match kept.iter().position(|(f, t, _)| *f == stack && *t == thread) {
                Some(i) => kept[i].2 += s.period,
                None if kept.len() < STACKS_PER_KEY => kept.push((stack, thread, s.period)),
                None => kept[0].2 += s.period,
            }
            return;
        }
        if let (Stream::OffCpu { slot, .. }, Some(ns)) = (stream, offcpu_ns) {
            values[slot] = ns.min(i64::MAX as u64) as i64;
            let time = self.slice(time);
            self.raw.add(stack, thread, time, &values);
        } else if matches!(stream, Stream::OffCpu { .. }) {
            // Valued when the thread runs again.
            self.blocked.insert(s.tid, Blocked { since: time, stack, thread });
        } else {
            let time = self.slice(time);
            self.raw.add(stack, thread, time, &values);
        }
    }

    /// The samples so far, as one window: modules, labels and thread names carry over, so the next
    /// window's frames mean the same; the converter's process state is kept.
    pub fn cut(&mut self) -> RawRecording {
        let window = RawRecording {
            sample_types: self.raw.sample_types.clone(),
            modules: self.raw.modules.clone(),
            thread_names: self.raw.thread_names.clone(),
            samples: std::mem::take(&mut self.raw.samples),
            labels: self.raw.labels.clone(),
            forks: std::mem::take(&mut self.raw.forks),
            ..Default::default()
        };
        // Threads of processes that are gone are not named again.
        let live: std::collections::HashSet<u32> = self.procs.keys().copied().collect();
        self.raw.thread_names.retain(|(pid, _), _| live.contains(pid));
        self.images.evict();
        window
    }

    /// Everything recorded; the counters say what was lost or malformed.
    pub fn finish(self) -> (RawRecording, Counters) {
        (self.raw, self.counters)
    }

    /// The recording being built (counter tables and metadata are the source's to fill).
    pub fn raw_mut(&mut self) -> &mut RawRecording {
        &mut self.raw
    }
}

#[cfg(test)]
mod tests;
