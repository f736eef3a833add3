//! Normalized but not yet symbolized samples: what a live source hands to the symbolizer.
//!
//! Addresses are already normalized to (module, file offset) while the process was alive, so the
//! symbolizer needs only the files, not the process.

use crate::{CallStat, Metadata, SampleType, SyscallStat};
/// The maps of the per-sample path: hashed with foldhash (a stack is hashed once per sample; SipHash
/// took a tenth of an import's time).
pub type FastMap<K, V> = foldhash::HashMap<K, V>;

/// [`RawRecording::samples`]: a map a sample's stack is looked up in by slice ([`StackKey`]), so that
/// only a stack seen for the first time is copied.
pub type SampleMap =
    hashbrown::HashMap<(Vec<RawFrame>, RawThread, u32), Vec<i64>, foldhash::fast::RandomState>;

/// A [`SampleMap`] key borrowed: it hashes as the owned key does (a slice as a Vec, then the fields).
#[derive(Hash)]
struct StackKey<'a>(&'a [RawFrame], &'a RawThread, u32);

impl hashbrown::Equivalent<(Vec<RawFrame>, RawThread, u32)> for StackKey<'_> {
    fn equivalent(&self, key: &(Vec<RawFrame>, RawThread, u32)) -> bool {
        self.0 == key.0.as_slice() && *self.1 == key.1 && self.2 == key.2
    }
}

/// One frame of a raw stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RawFrame {
    /// A user address inside a file-backed mapping: index into [`RawRecording::modules`] and the file offset.
    User { module: u32, offset: u64 },
    /// A user address in no known file mapping (JIT code, anonymous memory).
    Unmapped(u64),
    /// A kernel address, symbolized from /proc/kallsyms.
    Kernel(u64),
    /// A frame the source names itself (the syscall or probed function a stack ends in): index into
    /// [`RawRecording::labels`].
    Label(u32),
}

/// A frame named by the source rather than by symbolization.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawLabel {
    pub name: String,
    pub module: String,
    pub kind: crate::FrameKind,
    /// The source file and line the source knows it at (a Python frame's), else "" and 0.
    pub file: String,
    pub line: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawModule {
    pub path: String,
    pub build_id: String,
    /// The object's bytes when it has no file to read later (the `[vdso]`).
    pub image: Option<Vec<u8>>,
    /// The target's file, kept open, where `path` names another file (or none) here: a file of another
    /// mount namespace (a container's) stays readable after the process is gone.
    pub kept: Option<KeptFile>,
}

/// A file of a target opened while the target ran (see [`RawModule::kept`]).
#[derive(Debug, Clone)]
pub struct KeptFile(pub std::sync::Arc<std::fs::File>);

impl KeptFile {
    /// A path this process can open the file by while the file is kept.
    pub fn path(&self) -> String {
        use std::os::fd::AsRawFd;
        format!("/proc/self/fd/{}", self.0.as_raw_fd())
    }
}

/// Two handles are equal when they are the same handle (what matters is which file was opened, and a
/// handle is opened once per file).
impl PartialEq for KeptFile {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for KeptFile {}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawThread {
    pub pid: u32,
    pub tid: u32,
}

/// Aggregated raw samples keyed by (stack, thread, time slice); stacks are stored leaf first, as unwound.
#[derive(Debug, Default)]
pub struct RawRecording {
    pub meta: Metadata,
    pub sample_types: Vec<SampleType>,
    pub modules: Vec<RawModule>,
    /// Thread names by (pid, tid).
    pub thread_names: FastMap<(u32, u32), String>,
    /// Values by (stack, thread, time slice: see [`crate::Sample::time`]).
    pub samples: SampleMap,
    pub labels: Vec<RawLabel>,
    /// New processes seen forking, as (child, parent): who started the processes the samples are of.
    pub forks: Vec<(u32, u32)>,
    /// Counter tables pass through symbolization unchanged.
    pub syscalls: Vec<SyscallStat>,
    pub calls: Vec<CallStat>,
    /// Per sample type, the sum of the absolute values [`RawRecording::add`] took: it stays within i64,
    /// so no sum a consumer takes over these samples can overflow.
    pub totals: Vec<i64>,
    /// Samples `add` left out because their values would have overflowed those sums (only a corrupt
    /// file has them: a perf.data period of 2^63).
    pub overflowed: u64,
    /// The kernel the [`RawFrame::Kernel`] addresses are of, where the source knows it (a perf.data file
    /// may come from another boot or machine); None: the running kernel.
    pub kernel: Option<RawKernel>,
}

/// A recorded kernel: its build id and where one of its symbols lay (addresses move between boots).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawKernel {
    /// Hex, as perf stores it (empty when not recorded).
    pub build_id: String,
    /// A symbol (perf's `_text`) and its address in the recording.
    pub reloc: Option<(String, u64)>,
}

impl RawRecording {
    /// The index of a label, added when new.
    pub fn label(&mut self, name: &str, module: &str, kind: crate::FrameKind) -> u32 {
        self.label_at(name, module, kind, "", 0)
    }

    /// The index of a label at a source line (a frame the source names with its file and line).
    pub fn label_at(
        &mut self,
        name: &str,
        module: &str,
        kind: crate::FrameKind,
        file: &str,
        line: u32,
    ) -> u32 {
        let same = |x: &RawLabel| {
            x.name == name && x.module == module && x.kind == kind && x.file == file && x.line == line
        };
        match self.labels.iter().position(same) {
            Some(i) => i as u32,
            None => {
                let (name, module, file) = (name.to_string(), module.to_string(), file.to_string());
                self.labels.push(RawLabel { name, module, kind, file, line });
                (self.labels.len() - 1) as u32
            }
        }
    }

    /// Adds the values of one stack, unless they would take a sum of absolute values past i64 (then the
    /// sample is left out and counted in `overflowed`). The stack is copied only when it is new.
    pub fn add(&mut self, stack_leaf_first: &[RawFrame], thread: &RawThread, time: u32, values: &[i64]) {
        let n = self.sample_types.len();
        if self.totals.len() < n {
            self.totals.resize(n, 0);
        }
        let fits = |t: &i64, v: &i64| v.checked_abs().and_then(|a| t.checked_add(a)).is_some();
        if !self.totals.iter().zip(values).all(|(t, v)| fits(t, v)) {
            self.overflowed += 1;
            return;
        }
        for (t, v) in self.totals.iter_mut().zip(values) {
            *t += v.abs();
        }
        let key = StackKey(stack_leaf_first, thread, time);
        let acc = match self.samples.get_mut(&key) {
            Some(acc) => acc,
            None => {
                let key = (stack_leaf_first.to_vec(), thread.clone(), time);
                self.samples.entry(key).or_insert_with(|| vec![0; n])
            }
        };
        for (a, v) in acc.iter_mut().zip(values) {
            *a += v;
        }
    }
}
