//! `whyslow stacks`: every thread of a process at one moment, as `eu-stack`, `jstack` and `py-spy dump`
//! show them. Text groups the threads whose state and stack are the same (a pool of idle workers is one
//! block with its thread count), innermost frame first; JSON lists every thread with its own frames.

use crate::units::duration;
use crate::RenderError;
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;
use whyslow_model::stacks::{RunState, Syscall, ThreadState};
use whyslow_model::{FrameKind, Profile, CUT_FRAME, NONE};

/// One frame as shown: innermost first in a thread's list.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ShownFrame {
    pub function: String,
    /// The module's path (empty for a Python function or a label).
    pub module: String,
    /// Source file and line where known (0: the line is not).
    pub file: String,
    pub line: u32,
    /// `user`, `inlined`, `kernel`, `unknown`.
    pub kind: &'static str,
}

/// A thread with its frames, as JSON carries it.
#[derive(Debug, Serialize)]
struct ShownThread<'a> {
    #[serde(flatten)]
    state: &'a ThreadState,
    /// The innermost user-space function (native, JIT or Python), where the stack has one.
    innermost: Option<&'a str>,
    /// Whether the stack reaches its thread's first frame (it was not cut).
    complete: bool,
    frames: &'a [ShownFrame],
}

/// Each thread's frames, innermost first, from the profile's one sample per thread (kernel frames
/// left out when `kernel` is false).
pub fn frames_by_thread(p: &Profile, kernel: bool) -> HashMap<u32, Vec<ShownFrame>> {
    let mut out = HashMap::new();
    for s in &p.samples {
        let Some(t) = p.threads.get(s.thread as usize) else { continue };
        let frames = match s.stack {
            NONE => Vec::new(),
            leaf => p
                .stack_lines(leaf)
                .into_iter()
                .rev()
                .filter(|&(f, _)| kernel || p.frames[f as usize].kind != FrameKind::Kernel)
                .map(|(f, line)| {
                    let fr = &p.frames[f as usize];
                    ShownFrame {
                        function: p.frame_name(f).to_string(),
                        module: p.frame_module(f).to_string(),
                        file: p.str(fr.file).to_string(),
                        line,
                        kind: match fr.kind {
                            FrameKind::User => "user",
                            FrameKind::Inlined => "inlined",
                            FrameKind::Kernel => "kernel",
                            FrameKind::Unknown => "unknown",
                        },
                    }
                })
                .collect(),
        };
        out.insert(t.tid, frames);
    }
    out
}

/// The innermost frame of user space in `frames` (innermost first).
fn innermost(frames: &[ShownFrame]) -> Option<&str> {
    frames.iter().find(|f| f.kind != "kernel" && f.function != CUT_FRAME).map(|f| f.function.as_str())
}

/// The state of a thread in words: `sleeping for 2.01s in read(fd 3: pipe:[123]) [pipe_read]`.
pub fn state_line(t: &ThreadState) -> String {
    let mut s = t.state.word().to_string();
    if let Some(ns) = t.for_ns.filter(|_| t.state != RunState::Running) {
        s.push_str(&format!(" for {}", duration(ns as i64)));
    }
    if let Some(Syscall { name, .. }) = &t.syscall {
        match t.waits_on.as_str() {
            "" => s.push_str(&format!(" in {name}()")),
            w => s.push_str(&format!(" in {name}({w})")),
        }
    }
    if !t.wchan.is_empty() {
        s.push_str(&format!(" [{}]", t.wchan));
    }
    s
}

/// Text: a header, then each group of threads with the same state and stack, the largest first (then by
/// their first thread id).
pub fn text(
    w: &mut impl Write,
    p: &Profile,
    threads: &[ThreadState],
    kernel: bool,
) -> Result<(), RenderError> {
    let frames = frames_by_thread(p, kernel);
    let none = Vec::new();
    // Grouped by (state word, syscall, wchan, frames): durations and arguments may differ within one.
    let mut groups: Vec<(Vec<&ThreadState>, &Vec<ShownFrame>)> = Vec::new();
    for t in threads {
        let f = frames.get(&t.tid).unwrap_or(&none);
        let same = |g: &&ThreadState| {
            g.state == t.state
                && g.syscall.as_ref().map(|s| s.nr) == t.syscall.as_ref().map(|s| s.nr)
                && g.wchan == t.wchan
                && g.no_stack == t.no_stack
        };
        match groups.iter_mut().find(|(g, gf)| *gf == f && same(&g[0])) {
            Some((g, _)) => g.push(t),
            None => groups.push((vec![t], f)),
        }
    }
    groups.sort_by_key(|(g, _)| (std::cmp::Reverse(g.len()), g[0].tid));
    let command = p.meta.command.join(" ");
    let pid = p.meta.target_pids.first().copied().unwrap_or(0);
    writeln!(
        w,
        "Process {pid}: {command}  ({} thread{}, taken in {})",
        threads.len(),
        if threads.len() == 1 { "" } else { "s" },
        duration(p.meta.duration_ns as i64)
    )?;
    for n in &p.meta.notes {
        writeln!(w, "note: {n}")?;
    }
    for (g, f) in groups {
        writeln!(w)?;
        if g.len() == 1 {
            let t = g[0];
            writeln!(w, "Thread {} \"{}\" {}", t.tid, t.name, state_line(t))?;
        } else {
            let names: Vec<String> = g.iter().map(|t| format!("{} \"{}\"", t.tid, t.name)).collect();
            writeln!(w, "{} threads: {}", g.len(), names.join(", "))?;
            writeln!(w, "  {}", state_line(g[0]))?;
        }
        if !g[0].no_stack.is_empty() {
            writeln!(w, "    (no stack: {})", g[0].no_stack)?;
        }
        for fr in f {
            write!(w, "    {}", crate::short_name(&fr.function))?;
            match (fr.file.as_str(), fr.line) {
                ("", _) => {}
                (file, 0) => write!(w, " ({file})")?,
                (file, line) => write!(w, " ({file}:{line})")?,
            }
            if !fr.module.is_empty() && fr.kind != "kernel" {
                let base = fr.module.rsplit('/').next().unwrap_or(&fr.module);
                write!(w, "  [{base}]")?;
            }
            writeln!(w)?;
        }
    }
    Ok(())
}

/// JSON: the process, and every thread (by id) with its state and frames, innermost first.
pub fn json(
    w: &mut impl Write,
    p: &Profile,
    threads: &[ThreadState],
    kernel: bool,
) -> Result<(), RenderError> {
    let frames = frames_by_thread(p, kernel);
    let none = Vec::new();
    let shown: Vec<ShownThread<'_>> = threads
        .iter()
        .map(|t| {
            let f = frames.get(&t.tid).unwrap_or(&none);
            ShownThread {
                state: t,
                innermost: innermost(f),
                complete: !f.is_empty() && !f.iter().any(|x| x.function == CUT_FRAME),
                frames: f,
            }
        })
        .collect();
    let doc = serde_json::json!({
        "pid": p.meta.target_pids.first(),
        "command": p.meta.command.join(" "),
        "duration_ns": p.meta.duration_ns,
        "notes": p.meta.notes,
        "threads": shown,
    });
    serde_json::to_writer_pretty(&mut *w, &doc).map_err(std::io::Error::from)?;
    writeln!(w)?;
    Ok(())
}
