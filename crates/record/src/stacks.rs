//! `whyslow stacks`: every thread of a running process as it is now, without stopping it. The eBPF
//! snapshot (bpf/stacks.bpf.c) takes each thread's registers, stacks and Python frames; the converter
//! unwinds and normalizes them like any sample (one per thread); /proc tells each thread's name, where
//! in the kernel it sleeps and what the files its syscall names are. It never stops, signals or
//! ptrace-attaches the target (a JVM is asked for its perf map through its attach socket, as `record`
//! does, after the snapshot).

use crate::bpf::{StacksProbe, Taken};
use crate::host::LiveHost;
use crate::RecordError;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};
use whyslow_convert::records::{Record, Timed};
use whyslow_convert::{Converter, Stream};
use whyslow_model::raw::RawRecording;
use whyslow_model::stacks::{RunState, Syscall, ThreadState};
use whyslow_model::syscalls::syscall_name;
use whyslow_model::{sample_types, unix_now_ns, Metadata, SampleType};

/// What `stacks` takes.
#[derive(Debug, Clone)]
pub struct StacksOptions {
    pub pid: u32,
    /// Bytes of each thread's user stack copied (at most 16 KB).
    pub stack_bytes: u32,
    /// How long a thread on a CPU is waited for to take itself before it is shown without a stack.
    pub wait: Duration,
}

impl Default for StacksOptions {
    fn default() -> Self {
        StacksOptions { pid: 0, stack_bytes: 16384, wait: Duration::from_millis(250) }
    }
}

/// A process's threads at one moment: their stacks as a recording of one sample per thread (sample
/// type [`sample_types::THREADS`]), and each thread's state, by thread id.
pub struct Snapshot {
    pub raw: RawRecording,
    pub threads: Vec<ThreadState>,
}

/// Takes every thread of process `opts.pid` now.
pub fn stacks(opts: &StacksOptions) -> Result<Snapshot, RecordError> {
    let pid = opts.pid;
    if !crate::target::alive(pid) {
        return Err(RecordError::NoSuchProcess(pid));
    }
    let start_unix_ns = unix_now_ns();
    let t0 = Instant::now();
    let jvms = crate::jvm::Jvms::new();
    let types = vec![SampleType { name: sample_types::THREADS.into(), unit: "count".into() }];
    let mut c = Converter::new(LiveHost::new(jvms.clone()), types, vec![Stream::Events { slot: 0 }]);
    c.add_process(pid);
    let mut notes = Vec::new();
    let mut python = None;
    for f in c.take_python_found().into_iter().filter(|f| f.pid == pid) {
        match f.layout {
            Some(layout) => python = Some((f.runtime, layout)),
            None => notes.push(whyslow_convert::unknown_layout_note(f.minor)),
        }
    }
    let mut obj = MaybeUninit::uninit();
    let probe = StacksProbe::load(&mut obj, pid, opts.stack_bytes, python)?;
    let taken = take_all(&probe, opts.wait)?;
    if !crate::target::alive(pid) {
        return Err(RecordError::Ended(pid));
    }
    // Asked after the snapshot: the JVM's attach listener does not run in it.
    if crate::jvm::is_jvm(pid) && !jvms.ask_now(pid) {
        notes.extend(jvms.take_notes());
    }
    let ids = HashMap::from([(0u64, 0usize)]);
    let mut threads = Vec::new();
    let now = crate::sys::monotonic_ns();
    for tid in crate::target::threads_of(pid) {
        let name = crate::target::comm_of(pid, tid).unwrap_or_default();
        let t = taken.get(&tid);
        let mut state = describe(pid, tid, name, t);
        match t {
            Some(t) => c.handle(Timed { time: now, record: Record::Sample(t.sample.clone()) }, &ids),
            None => {
                state.no_stack = match state.state {
                    RunState::Running => "it ran on a CPU and did not return to user space meanwhile".into(),
                    _ => "it started after the snapshot".into(),
                }
            }
        }
        threads.push(state);
    }
    if threads.is_empty() {
        return Err(RecordError::Ended(pid));
    }
    let (mut raw, counters) = c.finish();
    raw.meta = Metadata {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command: crate::procfs::cmdline(pid).map(|c| vec![c]).unwrap_or_default(),
        target_pids: vec![pid],
        event: sample_types::THREADS.into(),
        start_unix_ns,
        duration_ns: t0.elapsed().as_nanos() as u64,
        unwind: counters.unwind,
        hostname: crate::procfs::read_trim("/proc/sys/kernel/hostname"),
        kernel_release: crate::procfs::read_trim("/proc/sys/kernel/osrelease"),
        notes,
        ..Default::default()
    };
    Ok(Snapshot { raw, threads })
}

/// Runs the snapshot until every thread is taken or `wait` passes: a thread on a CPU takes itself as it
/// returns to user space; one that blocked in the kernel first is taken by the next pass, as blocked.
fn take_all(probe: &StacksProbe<'_>, wait: Duration) -> Result<HashMap<u32, Taken>, RecordError> {
    let t0 = Instant::now();
    let mut last_pass = t0;
    probe.pass()?;
    loop {
        let seen = probe.threads();
        let done = seen.iter().all(|(_, t)| t.is_some());
        if done || t0.elapsed() >= wait {
            return Ok(seen.into_iter().filter_map(|(tid, t)| Some((tid, t?))).collect());
        }
        if last_pass.elapsed() >= Duration::from_millis(20) {
            probe.pass()?;
            last_pass = Instant::now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Thread `tid`'s state: as taken (`t`), else from /proc.
fn describe(pid: u32, tid: u32, name: String, t: Option<&Taken>) -> ThreadState {
    let task = format!("/proc/{pid}/task/{tid}");
    let (state, for_ns) = match t {
        Some(t) if t.running => (RunState::Running, None),
        Some(t) => {
            let s = RunState::from_task_state(t.state);
            (s, Some(if s == RunState::Runnable { t.queued_ns.max(t.off_cpu_ns) } else { t.off_cpu_ns }))
        }
        None => (proc_state(&task), None),
    };
    let syscall = t.and_then(|t| t.syscall).map(|(nr, args)| Syscall {
        nr,
        name: syscall_name(nr).map_or_else(|| format!("syscall_{nr}"), str::to_string),
        args,
    });
    let wchan = match state {
        RunState::Running => String::new(),
        _ => crate::procfs::read_trim(&format!("{task}/wchan")).trim_matches('0').to_string(),
    };
    let waits_on = syscall.as_ref().map(|s| crate::waits::waits_on(pid, s)).unwrap_or_default();
    ThreadState { tid, name, state, for_ns, syscall, wchan, waits_on, no_stack: String::new() }
}

/// A thread's state from its /proc stat (a thread the snapshot did not take).
fn proc_state(task: &str) -> RunState {
    let stat = crate::procfs::read_trim(&format!("{task}/stat"));
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    match state {
        Some('R') => RunState::Running,
        Some('S') => RunState::Sleeping,
        Some('D') => RunState::Uninterruptible,
        Some('T' | 't') => RunState::Stopped,
        _ => RunState::Other,
    }
}
