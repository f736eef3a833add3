//! JIT code: a process's perf map or jitdump symbols, asked of the [`Host`] while an address lies in
//! no file mapping, and the frame labels they name; a JVM's interpreted frames named by their method.
//! Never reads files or memory itself: the host does.

use crate::java::{method_name, MethodLayout};
use crate::{Converter, Host};
use std::collections::HashMap;
use whyslow_model::raw::RawFrame;
use whyslow_model::FrameKind;
use whyslow_symbols::jit::JitMap;
use whyslow_unwind::JitCode;

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
    /// The runtime's code ranges with their frame layout, where it describes them (a JVM's code cache):
    /// they replace those given before.
    pub code: Option<Vec<JitCode>>,
    /// Where the runtime keeps its methods' names, where it runs interpreted frames (a JVM's).
    pub methods: Option<MethodLayout>,
}

impl JitUpdate {
    /// Symbols parsed from `source` (`skipped` of its lines were none), `read` bytes of it read so far;
    /// no code ranges or method layout.
    pub fn symbols(source: String, map: JitMap, skipped: usize, read: u64) -> JitUpdate {
        JitUpdate { source, map, skipped: skipped as u64, read, ..JitUpdate::default() }
    }
}

/// How often (event time) a process is asked again for JIT symbols while an address of it is unknown:
/// soon when it publishes them (a function compiled since); less often when it has published nothing
/// yet (most anonymous code is no JIT's that writes a map, but a JIT's map may appear only after its
/// first samples: node's is written after its first compile, and samples before the map is read stay
/// unnamed).
pub(crate) const JIT_ASK_NS: u64 = 10_000_000;

pub(crate) const NO_JIT_ASK_NS: u64 = 100_000_000;

/// What a process published about its JIT code, as far as read.
#[derive(Default)]
pub(crate) struct Jit {
    map: JitMap,
    /// The module its frames are labelled with (the file's name).
    source: String,
    read: u64,
    /// When it was last asked (event time), and whether ever.
    asked: Option<u64>,
    /// The jitdump file it mapped, if any.
    pub(crate) dump: Option<String>,
    /// The label of each symbol that named a frame, by its start address.
    labels: HashMap<u64, u32>,
    /// Where its methods' names are (a JVM's), and the label of each method an interpreted frame ran
    /// (None: the word was no method), by its address.
    methods: Option<MethodLayout>,
    method_labels: HashMap<u64, Option<u32>>,
}

impl<H: Host> Converter<H> {
    /// The frame of a user address of `pid`: in a file's mapping, or a symbol of its JIT code (asked for
    /// anew, at most every [`JIT_ASK_NS`], while an address is in neither), or unmapped.
    pub(crate) fn jit_frame(&mut self, pid: u32, addr: u64, time: u64) -> RawFrame {
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
                self.counters.jit_skipped += proc.take_jit(u);
            }
        }
        let jit = &mut proc.jit;
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
}

impl<H: Host> Converter<H> {
    /// The frame of an interpreted Java method of `pid` whose frame held `method` (see
    /// [`whyslow_unwind::ProcessUnwinder::interpreted`]): its name, read once per method from the JVM's
    /// memory, labelled as the JVM's compiled methods are; None where the word is no method.
    pub(crate) fn interpreted_frame(&mut self, pid: u32, method: u64) -> Option<RawFrame> {
        let jit = &mut self.procs.get_mut(&pid)?.jit;
        let layout = jit.methods?;
        let label = match jit.method_labels.get(&method) {
            Some(&known) => known,
            None => {
                let host = &self.host;
                let name = method_name(&layout, |a, b| host.read_memory(pid, a, b), method);
                let label = name.map(|n| self.raw.label(&n, &jit.source, FrameKind::User));
                jit.method_labels.insert(method, label);
                label
            }
        };
        label.map(RawFrame::Label)
    }
}

impl Jit {
    /// Takes in the symbols of what the process published about its JIT code; returns its code ranges
    /// with their frame layout (for the unwinder), if given.
    pub(crate) fn take(&mut self, u: JitUpdate) -> Option<Vec<JitCode>> {
        self.map.merge(u.map);
        self.source = u.source;
        self.read = u.read;
        if u.methods.is_some() {
            self.methods = u.methods;
        }
        u.code
    }
}

impl<H: Host> Converter<H> {
    /// Names the JIT frames of the samples not yet cut that were unnamed when they were taken: each
    /// process with JIT code is asked once more for its symbols (a JVM writes its map anew when asked:
    /// methods compiled since it last did), and a leaf still unmapped takes the name its address has
    /// now. Only leaves: past an unnamed frame the stack was already cut where it was taken.
    pub fn name_late_jit_code(&mut self) {
        let pids: Vec<u32> =
            self.procs.iter().filter(|(_, p)| p.jit.asked.is_some()).map(|(&pid, _)| pid).collect();
        for &pid in &pids {
            let Some(proc) = self.procs.get_mut(&pid) else { continue };
            if let Some(u) = self.host.jit(pid, proc.jit.read, proc.jit.dump.as_deref()) {
                self.counters.jit_skipped += proc.take_jit(u);
            }
        }
        let unnamed: Vec<_> = self
            .raw
            .samples
            .keys()
            .filter(|(stack, t, _)| {
                pids.contains(&t.pid)
                    && matches!(stack.first(), Some(RawFrame::Unmapped(a))
                        if self.procs[&t.pid].jit.map.lookup(*a).is_some())
            })
            .cloned()
            .collect();
        for key in unnamed {
            let Some(values) = self.raw.samples.remove(&key) else { continue };
            let (mut stack, thread, time) = key;
            let RawFrame::Unmapped(addr) = stack[0] else { continue };
            // The time of the frame is now: the map is the newest and the address is in it.
            stack[0] = self.jit_frame(thread.pid, addr, u64::MAX);
            let acc = self.raw.samples.entry((stack, thread, time)).or_insert_with(|| vec![0; values.len()]);
            for (a, v) in acc.iter_mut().zip(values) {
                *a += v;
            }
        }
    }
}
