//! How the target processes ended, watched with eBPF around a run (a signal's kill is seen even for a
//! process that is not whyslow's child).

use crate::bpf;

/// Runs `f` while eBPF watches how processes `pids` end, and returns its result with those that a signal
/// ended meanwhile. A process that is not whyslow's child leaves no wait status to read, and each
/// recording's own watch sees only its run: a target killed between two recordings (the doctor's phases)
/// is seen by this one. Where eBPF is unavailable, `f` runs alone.
pub fn watching_exits<T>(pids: &[u32], f: impl FnOnce() -> T) -> (T, Vec<whyslow_model::Killed>) {
    if pids.is_empty() {
        return (f(), Vec::new());
    }
    let mut obj = std::mem::MaybeUninit::uninit();
    let watch =
        bpf::ExitWatch::load(&mut obj).ok().filter(|w| pids.iter().all(|&p| w.track(p, false).is_ok()));
    let out = f();
    let killed = watch.map_or_else(Vec::new, |w| {
        pids.iter().filter_map(|&p| whyslow_model::Killed::from_wait_status(p, w.status(p)?)).collect()
    });
    (out, killed)
}
