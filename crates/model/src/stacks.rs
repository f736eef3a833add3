//! The threads of a process at one moment (`whyslow stacks`): each thread's state, the syscall it is in
//! and what that waits on, beside its stack in a [`crate::Profile`] of one sample per thread.

use serde::{Deserialize, Serialize};

/// What a thread was doing when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// On a CPU.
    Running,
    /// Ready to run, waiting for a CPU (preempted).
    Runnable,
    /// Blocked, and a signal wakes it (`S`).
    Sleeping,
    /// Blocked uninterruptibly (`D`: disk I/O, some locks).
    Uninterruptible,
    /// Stopped by a signal (`T`) or a tracer (`t`).
    Stopped,
    /// Any other kernel state (dead, idle kernel thread, ...).
    Other,
}

impl RunState {
    /// The state of a thread off a CPU, from the kernel's task state bits.
    pub fn from_task_state(state: u32) -> RunState {
        match state & 0x7f {
            0 => RunState::Runnable,
            1 => RunState::Sleeping,
            2 => RunState::Uninterruptible,
            4 | 8 => RunState::Stopped,
            _ => RunState::Other,
        }
    }

    /// In the user's words (`ps`'s, spelled out).
    pub fn word(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Runnable => "runnable",
            RunState::Sleeping => "sleeping",
            RunState::Uninterruptible => "uninterruptible",
            RunState::Stopped => "stopped",
            RunState::Other => "other",
        }
    }
}

/// The syscall a thread is in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Syscall {
    pub nr: u32,
    /// Its name (`syscall_N` where this build does not know it).
    pub name: String,
    pub args: [u64; 6],
}

/// One thread of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadState {
    pub tid: u32,
    pub name: String,
    pub state: RunState,
    /// How long it has been off the CPU (blocked, or waiting for one), where the kernel tells; None
    /// for a running thread.
    pub for_ns: Option<u64>,
    /// The syscall it is blocked in, with its arguments (None outside one).
    pub syscall: Option<Syscall>,
    /// The kernel function it sleeps in (`/proc/PID/task/TID/wchan`), empty where none.
    pub wchan: String,
    /// What the syscall waits on, in words (`fd 3: pipe:[1234]`, `futex 0x7f3a...`), empty where nothing
    /// more is known than the syscall.
    pub waits_on: String,
    /// Why it has no stack, empty when it has one.
    pub no_stack: String,
}
