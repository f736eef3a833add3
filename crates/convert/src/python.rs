//! Python frames: which processes run a CPython interpreter (found in the files they map), and a
//! sample's Python frames (sent by the kernel: code object and instruction of each) named and put in
//! place of the `_PyEval_EvalFrameDefault` frames that run them, so the C functions around them stay
//! where they are. Code objects are read through the [`Host`] (the process's memory) and kept by
//! address, but a code object is freed and another takes its address (code made by `exec`, `compile`,
//! an import): a kept one is checked again ([`Code::still_at`], two reads) when a sample names it
//! [`CHECK_NS`] after its last check, or when the name the kernel saw in the frame is not its own
//! ([`Code::named_as`]: the sample's code object was freed before it was read, and a frame that no
//! code object read matches is unreadable, never named as another); one that could not be read is
//! tried again later and later,
//! up to every [`MAX_RETRY_NS`]; the clock is the samples' (event time), so that a converter running
//! late reads no more per sample than one on time. Never reads memory or files itself: the host does.

use crate::records::PyFrame;
use crate::{Converter, Host};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ops::Range;
use whyslow_model::raw::RawFrame;
use whyslow_model::FrameKind;
use whyslow_python::{read_code, Code, Interpreter, Layout, Memory};

/// How long (event time) a code object read is trusted before a sample naming it checks it again.
pub(crate) const CHECK_NS: u64 = 10_000_000;
/// After a code object could not be read: how long until it is tried again, doubled at each failure
/// in a row up to [`MAX_RETRY_NS`].
pub(crate) const RETRY_NS: u64 = 2_000_000;
pub(crate) const MAX_RETRY_NS: u64 = 50_000_000;
/// Code objects no sample named for this long (event time) are forgotten (code made and dropped in a
/// loop would fill the map).
pub(crate) const FORGET_NS: u64 = 60_000_000_000;

/// A process found to run CPython: what user space puts in the kernel's map for it (see
/// [`Converter::take_python_found`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PythonFound {
    pub pid: u32,
    pub minor: u8,
    /// The address of its `_PyRuntime`.
    pub runtime: u64,
    /// None: a version whose layout is not known (its frames are not read).
    pub layout: Option<&'static Layout>,
}

/// The note of a process whose CPython version has no layout.
pub fn unknown_layout_note(minor: u8) -> String {
    format!("CPython 3.{minor}: layout unknown, Python frames not shown")
}

/// A process's interpreter, as the converter keeps it.
#[derive(Clone)]
pub(crate) struct PyProc {
    layout: Option<&'static Layout>,
    /// `_PyEval_EvalFrameDefault` in the process's address space.
    eval: Vec<Range<u64>>,
    /// Each code object read or tried, by address.
    codes: HashMap<u64, CodeEntry>,
    /// When (event time) the codes no sample named for [`FORGET_NS`] were last forgotten.
    swept: u64,
}

/// A code object as read at its address, with the label of each of its lines named.
#[derive(Clone)]
struct CodeEntry {
    /// None: it could not be read.
    code: Option<Code>,
    labels: HashMap<u32, u32>,
    /// When (event time) it was last read or checked.
    checked: u64,
    /// Reads that failed in a row.
    failures: u32,
    /// When a sample last named it.
    used: u64,
}

impl CodeEntry {
    fn read(mem: &dyn Memory, layout: &Layout, addr: u64, now: u64, failures: u32) -> CodeEntry {
        let code = read_code(mem, layout, addr).ok();
        let failures = if code.is_some() { 0 } else { failures + 1 };
        CodeEntry { code, labels: HashMap::new(), checked: now, failures, used: now }
    }

    /// Whether it is due to be read again (a failure) or checked (a code object read) at `now`.
    fn due(&self, now: u64) -> bool {
        let wait = match self.code {
            Some(_) => CHECK_NS,
            None => RETRY_NS.saturating_mul(1 << self.failures.saturating_sub(1).min(20)).min(MAX_RETRY_NS),
        };
        now.saturating_sub(self.checked) >= wait
    }
}

impl PyProc {
    fn runs_eval(&self, addr: u64) -> bool {
        self.eval.iter().any(|r| r.contains(&addr))
    }
}

/// Process `pid`'s memory, read through the host.
struct HostMemory<'a, H: Host> {
    host: &'a H,
    pid: u32,
}

impl<H: Host> Memory for HostMemory<'_, H> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.host.read_memory(self.pid, addr, buf)
    }
}

/// Where a sample's Python frames go (see [`Converter::python_frames`]).
pub(crate) struct PyPlacement {
    /// By native frame: the Python frames that take its place (innermost first).
    pub(crate) runs: Vec<Option<Vec<RawFrame>>>,
    /// Python frames no native frame stood for: callers of the outermost native frame.
    pub(crate) rest: Vec<RawFrame>,
}

/// Label of a Python frame whose code object could not be read.
const UNREADABLE: &str = "[unreadable Python code]";

impl<H: Host> Converter<H> {
    /// The processes found to run CPython since the last call.
    pub fn take_python_found(&mut self) -> Vec<PythonFound> {
        std::mem::take(&mut self.python_found)
    }

    /// A file process `pid` maps with load bias `bias`: when it is a CPython interpreter the process
    /// runs it (looked for once per process and exec, read once per file).
    pub(crate) fn find_python(&mut self, pid: u32, path: &str, bias: Option<u64>) {
        if !whyslow_python::looks_like_python(path) || self.procs.get(&pid).is_none_or(|p| p.python.is_some())
        {
            return;
        }
        let Some(bias) = bias else { return };
        let interp = match self.interpreters.get(path) {
            Some(i) => i.clone(),
            None => {
                let i = self.host.file(pid, path).and_then(|b| Interpreter::find(path, &b));
                self.interpreters.insert(path.to_string(), i.clone());
                i
            }
        };
        let Some(i) = interp else { return };
        let layout = whyslow_python::layout(i.minor);
        let eval = i.eval.iter().map(|r| r.start.wrapping_add(bias)..r.end.wrapping_add(bias)).collect();
        let py = PyProc { layout, eval, codes: HashMap::new(), swept: 0 };
        if let Some(p) = self.procs.get_mut(&pid) {
            p.python = Some(Box::new(py));
        }
        let runtime = i.runtime.wrapping_add(bias);
        self.python_found.push(PythonFound { pid, minor: i.minor, runtime, layout });
    }

    /// Where a sample's Python frames go among its native frames (`native`, innermost first; `cut`: the
    /// unwind did not reach the thread's first frame).
    ///
    /// The kernel read the frame chain as it was: in the instructions where an eval call has begun but
    /// not yet pushed its frame, or has popped it but not yet returned, there is one eval frame more than
    /// Python frames to give it (and one fewer the other way round). A stack unwound whole is matched from
    /// its outermost eval frame, which runs the thread's first Python frame: an innermost eval frame
    /// with no Python frame of its own stays as it is, an innermost Python frame with no eval frame joins
    /// the innermost eval frame's. A cut stack has lost its outermost frames: it is matched from the
    /// innermost, and the Python frames left over are its callers. `time`: the sample's (event clock).
    pub(crate) fn python_frames(
        &mut self,
        pid: u32,
        time: u64,
        py: &[PyFrame],
        native: &[u64],
        cut: bool,
    ) -> PyPlacement {
        // (Most samples have no Python frames: nothing is allocated for them.)
        if py.is_empty() {
            return PyPlacement { runs: Vec::new(), rest: Vec::new() };
        }
        let mut placed = PyPlacement { runs: vec![None; native.len()], rest: Vec::new() };
        let groups = self.python_groups(pid, py, time);
        let Some(proc) = self.procs.get(&pid).and_then(|p| p.python.as_ref()) else { return placed };
        let evals: Vec<usize> = (0..native.len()).filter(|&i| proc.runs_eval(native[i])).collect();
        let (k, g) = (evals.len(), groups.len());
        let mut groups = groups.into_iter().map(Some).collect::<Vec<_>>();
        for (j, &at) in evals.iter().enumerate() {
            // The groups eval frame j (0: innermost) runs.
            let take = match cut {
                true => j..(j + 1).min(g),
                false => {
                    let first = j as isize + g as isize - k as isize;
                    match (j, first) {
                        (_, f) if f < 0 => 0..0,
                        (0, f) => 0..f as usize + 1,
                        (_, f) => f as usize..f as usize + 1,
                    }
                }
            };
            let frames: Vec<RawFrame> = take.filter_map(|x| groups[x].take()).flatten().collect();
            if !frames.is_empty() {
                placed.runs[at] = Some(frames);
            }
        }
        placed.rest = groups.into_iter().flatten().flatten().collect();
        placed
    }

    /// A sample's Python frames, named, in groups (innermost first) of those one eval call runs; `now`:
    /// the sample's time (event clock).
    fn python_groups(&mut self, pid: u32, frames: &[PyFrame], now: u64) -> Vec<Vec<RawFrame>> {
        let Some(mut py) = self.procs.get_mut(&pid).and_then(|p| p.python.take()) else { return Vec::new() };
        let mut groups = vec![Vec::new()];
        if let Some(layout) = py.layout {
            let mem = HostMemory { host: &self.host, pid };
            if now.saturating_sub(py.swept) >= FORGET_NS {
                py.codes.retain(|_, e| now.saturating_sub(e.used) < FORGET_NS);
                py.swept = now;
            }
            for f in frames {
                let entry = match py.codes.entry(f.code) {
                    Entry::Vacant(v) => v.insert(CodeEntry::read(&mem, layout, f.code, now, 0)),
                    Entry::Occupied(o) => {
                        let e = o.into_mut();
                        if e.due(now) {
                            match &e.code {
                                // Another code object at its address: read again, its lines named
                                // again. One that cannot be read now (the process is gone: the last
                                // samples of its blocked threads come at its exit) stays as read.
                                Some(c) => match c.still_at(&mem, layout, f.code) {
                                    Some(false) => *e = CodeEntry::read(&mem, layout, f.code, now, 0),
                                    Some(true) | None => e.checked = now,
                                },
                                None => *e = CodeEntry::read(&mem, layout, f.code, now, e.failures),
                            }
                        }
                        e
                    }
                };
                // The code object read is another than the sample's (which was freed, and this one took
                // its address) where it has another name: read again when the memory changed since,
                // and left unreadable when it still does not match, never named as another's.
                if let Some(c) = &entry.code {
                    if !c.named_as(f.name, f.hash) && c.still_at(&mem, layout, f.code) == Some(false) {
                        *entry = CodeEntry::read(&mem, layout, f.code, now, 0);
                    }
                }
                entry.used = now;
                let label = match entry.code.as_ref().filter(|c| c.named_as(f.name, f.hash)) {
                    Some(c) => {
                        let line = c.line(f.instr);
                        *entry.labels.entry(line).or_insert_with(|| {
                            self.raw.label_at(&c.name, &c.file, FrameKind::User, &c.file, line)
                        })
                    }
                    None => self.raw.label(UNREADABLE, "[python]", FrameKind::Unknown),
                };
                groups.last_mut().expect("one group at least").push(RawFrame::Label(label));
                if f.entry {
                    groups.push(Vec::new());
                }
            }
        }
        if groups.last().is_some_and(Vec::is_empty) {
            groups.pop();
        }
        if let Some(p) = self.procs.get_mut(&pid) {
            p.python = Some(py);
        }
        groups
    }
}
