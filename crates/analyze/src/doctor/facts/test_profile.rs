//! Small synthetic profiles for the rules' unit tests.

use whyslow_model::{FrameKind, Metadata, Profile, ProfileBuilder, SampleType};

/// A frame and its line: `name` in `/app` (user code), `lib:name` in libc, `k:name` in the kernel,
/// `py:name:file.py:line` a Python function (its module is its file), `so:module:name` a function of
/// another module (a path).
fn frame_at(b: &mut ProfileBuilder, spec: &str) -> (u32, u32) {
    if let Some(py) = spec.strip_prefix("py:") {
        let mut parts = py.splitn(3, ':');
        let (name, file) = (parts.next().unwrap(), parts.next().unwrap());
        let line = parts.next().map_or(0, |l| l.parse().unwrap());
        let m = b.module(file, "");
        (b.frame(name, m, file, FrameKind::User), line)
    } else if let Some((module, name)) = spec.strip_prefix("so:").and_then(|s| s.split_once(':')) {
        let m = b.module(module, "");
        (b.frame(name, m, "", FrameKind::User), 0)
    } else {
        (frame(b, spec), 0)
    }
}

/// A frame: `name` in `/app` (user code), `lib:name` in libc, `k:name` in the kernel.
fn frame(b: &mut ProfileBuilder, spec: &str) -> u32 {
    if let Some(k) = spec.strip_prefix("k:") {
        let m = b.module("[kernel]", "");
        b.frame(k, m, "", FrameKind::Kernel)
    } else if let Some(l) = spec.strip_prefix("lib:") {
        let m = b.module("/usr/lib/x86_64-linux-gnu/libc.so.6", "");
        b.frame(l, m, "", FrameKind::User)
    } else {
        let m = b.module("/app", "");
        b.frame(spec, m, "app.c", FrameKind::User)
    }
}

/// Stacks (outermost first, `;`-separated frame specs) with CPU and off-CPU nanoseconds; 10 s run.
pub fn profile(stacks: &[(&str, i64, i64)]) -> Profile {
    with_syscalls(stacks, &[])
}

/// Also sampled syscall stacks: the last spec is the syscall name (module `[syscall]`), with a count.
pub fn with_syscalls(stacks: &[(&str, i64, i64)], syscall_stacks: &[(&str, i64)]) -> Profile {
    let types =
        ["cpu-ns", "offcpu", "syscalls"].map(|n| SampleType { name: n.into(), unit: "nanoseconds".into() });
    let mut b =
        ProfileBuilder::new(Metadata { duration_ns: 10_000_000_000, ..Default::default() }, types.to_vec());
    let t = b.thread(1, 1, "app");
    for (stack, cpu, off) in stacks {
        let frames: Vec<(u32, u32)> = stack.split(';').map(|s| frame_at(&mut b, s)).collect();
        let s = b.stack_at_lines(&frames);
        b.add_sample(s, t, &[*cpu, *off, 0]);
    }
    for (stack, n) in syscall_stacks {
        let (path, name) = stack.rsplit_once(';').unwrap();
        let mut frames: Vec<u32> = path.split(';').map(|s| frame(&mut b, s)).collect();
        let m = b.module("[syscall]", "");
        frames.push(b.frame(name, m, "", FrameKind::Kernel));
        let s = b.stack(&frames);
        b.add_sample(s, t, &[0, 0, *n]);
    }
    b.finish()
}

/// Stacks as [`profile`]'s, each on the thread with the tid given (one process).
pub fn on_threads(stacks: &[(u32, &str, i64, i64)]) -> Profile {
    let types = ["cpu-ns", "offcpu"].map(|n| SampleType { name: n.into(), unit: "nanoseconds".into() });
    let mut b =
        ProfileBuilder::new(Metadata { duration_ns: 10_000_000_000, ..Default::default() }, types.to_vec());
    for (tid, stack, cpu, off) in stacks {
        let t = b.thread(1, *tid, "app");
        let frames: Vec<u32> = stack.split(';').map(|s| frame(&mut b, s)).collect();
        let s = b.stack(&frames);
        b.add_sample(s, t, &[*cpu, *off]);
    }
    b.finish()
}
