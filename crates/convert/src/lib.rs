//! The converter: a state machine fed perf records (mmap, comm, fork, exit, sample, switch, lost) that
//! keeps each process's mappings and unwinder, unwinds every sample's user stack and normalizes each
//! address to (module, file offset) while the mapping is known, and emits [`RawRecording`]s.
//!
//! Live recording and perf.data import feed the same converter, so everything downstream cannot tell
//! them apart. It makes no syscalls: file bytes and facts about processes that existed before the
//! records began come through a [`Host`]. Its state stays bounded over a long run: a process that exits
//! is forgotten once its records are handled, and [`Converter::cut`] hands over the samples of a window.
//!
//! This file holds the entry points (the [`Host`], what events mean, the converter and its window cut);
//! each concern has its module: `handle` (records in), `process` (processes and threads), `images`
//! (parsed files, modules, mappings), `jitcode` (JIT symbols), `python` (Python frames), `alloc`
//! (allocation counts) and `heap` (memory in use).

mod alloc;
mod handle;
pub mod heap;
mod images;
mod java;
mod jitcode;
mod process;
mod python;
pub mod records;
pub mod runtime_heap;

use alloc::StackKey;
pub use alloc::{Nesting, SiteCount, SizeArg, StackCount};
use images::Images;
pub use java::MethodLayout;
pub use jitcode::JitUpdate;
use process::{Blocked, Proc};
pub use process::{Mapping, ProcessInfo};
pub use python::{unknown_layout_note, PythonFound};
use std::collections::HashMap;
use whyslow_model::raw::{FastMap, KeptFile, RawFrame, RawRecording, RawThread};
use whyslow_model::{SampleType, UnwindStats};
pub use whyslow_symbols::jit::{self, JitMap};
pub use whyslow_unwind::FileBytes;

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
    /// Fills `buf` from address `addr` of live process `pid` (its Python code objects); false where it
    /// cannot (the process is gone, an imported file's host).
    fn read_memory(&self, _pid: u32, _addr: u64, _buf: &mut [u8]) -> bool {
        false
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

/// What samples of one event mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// On-CPU: a sample count at `slot` and the period (ns or cycles) at `slot + 1`.
    Cpu { slot: usize },
    /// A syscall entry: its calls (the sample's period) at `slot`; the stack ends in the syscall (its
    /// number, a native-endian u64, is the sample's raw data).
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
    /// Processes that exited, with when: forgotten [`process::EXITED_GRACE_NS`] later, since records of their
    /// threads can follow the exit (an off-CPU block that ended when the process was torn down).
    exited: Vec<(u32, u64)>,
    counters: Counters,
    /// Scratch of the per-sample path, kept between samples so that a sample allocates nothing: the
    /// return addresses unwound, the stack built of them, and its values.
    frames: Vec<u64>,
    stack: Vec<RawFrame>,
    values: Vec<i64>,
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
    /// The CPython interpreter in each file looked at, by path (None: not one).
    interpreters: HashMap<String, Option<whyslow_python::Interpreter>>,
    /// Processes found to run CPython and not yet taken.
    python_found: Vec<PythonFound>,
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
            stack: Vec::new(),
            values: Vec::new(),
            origin: None,
            alloc_stacks: HashMap::new(),
            alloc_added: HashMap::new(),
            lazy: false,
            first_sampled: Vec::new(),
            interpreters: HashMap::new(),
            python_found: Vec::new(),
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

    /// A record the source could not decode.
    pub fn count_malformed(&mut self) {
        self.counters.malformed += 1;
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
