//! Allocation counts: where an allocator reads its size, how allocators nest, and the kernel's exact
//! per-site and per-stack counts turned into samples over the stacks the sampled calls unwound to.

use crate::records::UserRegs;
use crate::{Converter, Host};
use std::collections::HashMap;
use whyslow_model::raw::{RawFrame, RawThread};
use whyslow_model::{sample_types as st, FrameKind};

/// How allocation functions nest, so each allocation is counted once, at the outermost allocator the
/// program called: glibc's aligned allocators call malloc (for small alignments as a tail jump, so the
/// malloc has the program's return address), realloc of a null pointer too.
#[derive(Debug, Clone, Default)]
pub struct Nesting {
    /// Code of allocation functions that call another probed allocator: (module path, file offsets). A
    /// probed allocation called from there is not counted again.
    pub within: Vec<(String, std::ops::Range<u64>)>,
}

/// Where an allocation function receives the requested size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeArg {
    /// The Nth integer argument of the SysV ABI (0: rdi, 1: rsi, 2: rdx).
    Arg(u8),
    /// calloc: count (rdi) times size (rsi).
    Product,
    /// Go's register ABI: the first argument is in rax (runtime.mallocgc).
    GoFirst,
}

impl SizeArg {
    pub fn bytes(self, r: &UserRegs) -> u64 {
        match self {
            SizeArg::Arg(0) => r.di,
            SizeArg::Arg(1) => r.si,
            SizeArg::Arg(_) => r.dx,
            SizeArg::Product => r.di.saturating_mul(r.si),
            SizeArg::GoFirst => r.ax,
        }
    }
}

/// Calls and requested bytes of one allocation function from one call site (return address), counted
/// in the kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SiteCount {
    pub pid: u32,
    pub probe: u32,
    pub ret: u64,
    pub calls: u64,
    pub bytes: u64,
}

/// Calls and requested bytes of one allocation function from one call site and one stack id (a hash of
/// the frame-pointer chain), counted in the kernel; its stack is named by the samples that carry its key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackCount {
    pub pid: u32,
    pub probe: u32,
    pub ret: u64,
    pub stack: u64,
    pub calls: u64,
    pub bytes: u64,
}

/// (pid, probe, return address, stack id) of a keyed allocation count.
pub(crate) type StackKey = (u32, u32, u64, u64);

/// A stack id of [`StackKey`] for a site's exact two-frame count, and for its calls no stack key held.
pub(crate) const SITE_TOTAL: u64 = u64::MAX;

pub(crate) const SITE_UNKEYED: u64 = u64::MAX - 1;

/// Distinct stacks kept per stack key (more: the rest go to the first).
pub(crate) const STACKS_PER_KEY: usize = 64;

/// `n` split in proportion to `weights` (largest remainders), summing to `n` exactly.
pub(crate) fn split(n: u64, weights: &[u64]) -> Vec<u64> {
    let total: u128 = weights.iter().map(|&w| w as u128).sum();
    if total == 0 {
        let mut out = vec![0; weights.len()];
        if let Some(first) = out.first_mut() {
            *first = n;
        }
        return out;
    }
    let mut out: Vec<u64> = weights.iter().map(|&w| (n as u128 * w as u128 / total) as u64).collect();
    let mut rest = n - out.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse((n as u128 * weights[i] as u128) % total));
    for &i in order.iter().cycle().take(weights.len() * 2) {
        if rest == 0 {
            break;
        }
        out[i] += 1;
        rest -= 1;
    }
    out
}

impl<H: Host> Converter<H> {
    /// Whether `caller` (the frame that called a probed allocator) lies in an allocation function that
    /// allocates through it.
    pub(crate) fn nested(&self, caller: Option<&RawFrame>) -> bool {
        let Some(&RawFrame::User { module, offset }) = caller else { return false };
        let Some(m) = self.raw.modules.get(module as usize) else { return false };
        self.nesting.within.iter().any(|(path, r)| *path == m.path && r.contains(&offset))
    }

    /// Exact per-call-site allocation counts as two-frame samples: the allocator, and the code that called
    /// it (normalized with the mappings the run tracked, so exited processes resolve too).
    pub fn add_alloc_sites(&mut self, sites: &[SiteCount]) {
        self.add_alloc_counts(sites, &[]);
    }

    /// Exact allocation counts, read from the kernel (totals so far; what earlier calls added is not added
    /// again): per call site as two-frame samples (`alloc-site-*`), and per stack key over the stacks its
    /// samples unwound to (`alloc-count`, `alloc-bytes`), split by the hits each sample stood for. Counts
    /// whose key no sample named (or that no key held) keep the allocator and its caller under
    /// [`whyslow_model::LOST_STACK_FRAME`]: a lost stack, never a lost count.
    pub fn add_alloc_counts(&mut self, sites: &[SiteCount], stacks: &[StackCount]) {
        let n = self.raw.sample_types.len();
        let pos = |name: &str| self.raw.sample_types.iter().position(|t| t.name == name);
        let site_slots = pos(st::ALLOC_SITE_COUNT).zip(pos(st::ALLOC_SITE_BYTES));
        let stack_slots = pos(st::ALLOC_COUNT).zip(pos(st::ALLOC_BYTES));
        let mut keyed: HashMap<(u32, u32, u64), (u64, u64)> = HashMap::new();
        for k in stacks {
            let e = keyed.entry((k.pid, k.probe, k.ret)).or_default();
            e.0 += k.calls;
            e.1 += k.bytes;
        }
        // (stack, thread, [calls, bytes], the two value slots they go to)
        type Add = (Vec<RawFrame>, RawThread, [i64; 2], (usize, usize));
        let mut adds: Vec<Add> = Vec::new();
        for s in sites {
            let Some((name, module)) = self.alloc_names.get(s.probe as usize).cloned() else { continue };
            let label = RawFrame::Label(self.raw.label(&name, &module, FrameKind::User));
            // A return address points after the call; step back into it.
            let caller = match self.procs.get(&s.pid) {
                Some(p) => p.normalize(s.ret.saturating_sub(1)),
                None => RawFrame::Unmapped(s.ret),
            };
            if self.nested(Some(&caller)) {
                continue;
            }
            let thread = RawThread { pid: s.pid, tid: s.pid };
            if let Some(slots) = site_slots {
                let d = self.added((s.pid, s.probe, s.ret, SITE_TOTAL), s.calls, s.bytes);
                adds.push((vec![label, caller], thread.clone(), d, slots));
            }
            let Some(slots) = stack_slots.filter(|_| !stacks.is_empty()) else { continue };
            let (kc, kb) = keyed.get(&(s.pid, s.probe, s.ret)).copied().unwrap_or_default();
            let d = self.added(
                (s.pid, s.probe, s.ret, SITE_UNKEYED),
                s.calls.saturating_sub(kc),
                s.bytes.saturating_sub(kb),
            );
            let lost = RawFrame::Label(self.raw.label(
                whyslow_model::LOST_STACK_FRAME,
                "[alloc]",
                FrameKind::Unknown,
            ));
            adds.push((vec![label, caller, lost], thread, d, slots));
        }
        if let Some(slots) = stack_slots {
            for k in stacks {
                let key = (k.pid, k.probe, k.ret, k.stack);
                let d = self.added(key, k.calls, k.bytes);
                if d == [0, 0] {
                    continue;
                }
                match self.alloc_stacks.get(&key) {
                    Some(kept) => {
                        let weights: Vec<u64> = kept.iter().map(|(_, _, w)| *w).collect();
                        let calls = split(d[0] as u64, &weights);
                        let bytes = split(d[1] as u64, &weights);
                        for (i, (frames, thread, _)) in kept.iter().enumerate() {
                            adds.push((
                                frames.clone(),
                                thread.clone(),
                                [calls[i] as i64, bytes[i] as i64],
                                slots,
                            ));
                        }
                    }
                    None => {
                        let Some((name, module)) = self.alloc_names.get(k.probe as usize).cloned() else {
                            continue;
                        };
                        let caller = match self.procs.get(&k.pid) {
                            Some(p) => p.normalize(k.ret.saturating_sub(1)),
                            None => RawFrame::Unmapped(k.ret),
                        };
                        if self.nested(Some(&caller)) {
                            continue;
                        }
                        let label = RawFrame::Label(self.raw.label(&name, &module, FrameKind::User));
                        let lost =
                            self.raw.label(whyslow_model::LOST_STACK_FRAME, "[alloc]", FrameKind::Unknown);
                        let thread = RawThread { pid: k.pid, tid: k.pid };
                        adds.push((vec![label, caller, RawFrame::Label(lost)], thread, d, slots));
                    }
                }
            }
        }
        for (stack, thread, [calls, bytes], (cs, bs)) in adds {
            if calls == 0 && bytes == 0 {
                continue;
            }
            let mut values = vec![0i64; n];
            values[cs] = calls;
            values[bs] = bytes;
            // Counted over the whole run and read at its end: no time of their own (slice 0).
            self.raw.add(&stack, &thread, 0, &values);
        }
    }

    /// What of `calls` and `bytes` (totals so far of `key`) was not added yet; marks it added.
    pub(crate) fn added(&mut self, key: StackKey, calls: u64, bytes: u64) -> [i64; 2] {
        let done = self.alloc_added.entry(key).or_default();
        let d = [calls.saturating_sub(done.0), bytes.saturating_sub(done.1)];
        *done = (done.0.max(calls), done.1.max(bytes));
        [d[0].min(i64::MAX as u64) as i64, d[1].min(i64::MAX as u64) as i64]
    }
}
