//! Python frames: which processes run a CPython interpreter (found in the files they map), and a
//! sample's Python frames (sent by the kernel: code object and instruction of each) named and put in
//! place of the `_PyEval_EvalFrameDefault` frames that run them, so the C functions around them stay
//! where they are. Code objects are read through the [`Host`] (the process's memory) once each per
//! process. Never reads memory or files itself: the host does.

use crate::records::PyFrame;
use crate::{Converter, Host};
use std::collections::HashMap;
use std::ops::Range;
use whyslow_model::raw::RawFrame;
use whyslow_model::FrameKind;
use whyslow_python::{read_code, Code, Interpreter, Layout, Memory};

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
    /// Each code object read (None: it could not be), by address.
    codes: HashMap<u64, Option<Code>>,
    /// The label of each (code object, line) named.
    labels: HashMap<(u64, u32), u32>,
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
        let py = PyProc { layout, eval, codes: HashMap::new(), labels: HashMap::new() };
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
    /// innermost, and the Python frames left over are its callers.
    pub(crate) fn python_frames(
        &mut self,
        pid: u32,
        py: &[PyFrame],
        native: &[u64],
        cut: bool,
    ) -> PyPlacement {
        // (Most samples have no Python frames: nothing is allocated for them.)
        if py.is_empty() {
            return PyPlacement { runs: Vec::new(), rest: Vec::new() };
        }
        let mut placed = PyPlacement { runs: vec![None; native.len()], rest: Vec::new() };
        let groups = self.python_groups(pid, py);
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

    /// A sample's Python frames, named, in groups (innermost first) of those one eval call runs.
    fn python_groups(&mut self, pid: u32, frames: &[PyFrame]) -> Vec<Vec<RawFrame>> {
        let Some(mut py) = self.procs.get_mut(&pid).and_then(|p| p.python.take()) else { return Vec::new() };
        let mut groups = vec![Vec::new()];
        if let Some(layout) = py.layout {
            let mem = HostMemory { host: &self.host, pid };
            for f in frames {
                let code = py.codes.entry(f.code).or_insert_with(|| read_code(&mem, layout, f.code).ok());
                let label = match code {
                    Some(c) => {
                        let line = c.line(f.instr);
                        match py.labels.get(&(f.code, line)) {
                            Some(&l) => l,
                            None => {
                                let l = self.raw.label_at(&c.name, &c.file, FrameKind::User, &c.file, line);
                                py.labels.insert((f.code, line), l);
                                l
                            }
                        }
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
