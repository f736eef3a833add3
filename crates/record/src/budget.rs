//! The probe budget: what each probe hit and counted syscall is priced at, and the share of the target's
//! CPU time the probes that cost per call may spend (see [`RecordOptions::probe_budget`](crate::RecordOptions::probe_budget)).

/// How the note that the probe budget ended a run begins (see [`RecordOptions::probe_budget`](crate::RecordOptions::probe_budget)).
pub use whyslow_model::BUDGET_NOTE;

/// Cost of one syscall to the exact counters (the kernel's syscall tracepoint path and two eBPF programs),
/// in ns, where it could not be measured at the start of the run: about 550 ns measured on the 2-core test VM (redis-server under redis-benchmark: 1.55 µs more
/// CPU per request at 2.8 syscalls per request).
pub const SYSCALL_COST_NS: u64 = 600;
/// Cost of one syscall of a process that is not counted, while the counters are attached, where it could
/// not be measured: every syscall of the machine takes the traced path then (0.19-0.25 us measured on the
/// 2-core test VM, 0.13 us of it with empty programs).
pub const SYSCALL_OTHER_COST_NS: u64 = 300;
/// Cost of one sampled user stack of an event (a 16 KB copy into the ring, with interrupts off), in ns:
/// about 3.2 µs measured the same way with every syscall's stack sampled.
pub const STACK_SAMPLE_COST_NS: u64 = 3_500;

/// Cost of one uprobe hit whose instruction the kernel emulates (push, jmp, call), in ns; measured about
/// 1 µs on the 2-core test VM, with the eBPF counter and the stack copy of a sampled hit on top.
pub const HIT_COST_EMULATED_NS: u64 = 1_500;
/// Cost of one uprobe hit whose instruction is single-stepped (about 15 µs measured).
pub const HIT_COST_STEPPED_NS: u64 = 15_000;
/// Probe cost a budgeted run may spend before the target has used any CPU (so a short run counts a
/// little).
pub const BUDGET_CREDIT_NS: u64 = 20_000_000;

/// The probes' hits so far and their estimated cost (each hit priced as measured at the start of the
/// run, see [`crate::RecordOptions::probe_budget`]), beside the CPU time the target used meanwhile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProbeLoad {
    pub hits: u64,
    pub cost_ns: u64,
    /// The target processes' CPU time since the start (the probes' cost is part of it).
    pub target_cpu_ns: u64,
    /// Whether the probe budget stopped the probes (their hits no longer grow).
    pub stopped: bool,
}

/// What the budget allows the probes to have cost after the target used `cpu` ns of CPU, under a budget
/// of `share` of it.
pub(crate) fn allowed(share: f64, cpu: u64) -> u64 {
    (share * cpu as f64) as u64 + BUDGET_CREDIT_NS
}

/// CPU time processes `pids` used since they had used `at_start` ns.
pub(crate) fn cpu_since(pids: &[u32], at_start: u64) -> u64 {
    pids.iter().map(|&p| crate::target::cpu_time_ns(p)).sum::<u64>().saturating_sub(at_start)
}
