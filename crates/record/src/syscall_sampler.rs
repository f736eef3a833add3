//! The syscall counters sampled in slices once the probe budget stopped their first (exact) window, so
//! rates are known over the whole run at the budget's cost. It only attaches and detaches the counters;
//! the session decides when it runs.

use crate::bpf::{Seen, SyscallProbe};
use crate::sources::SyscallPrices;
use std::time::{Duration, Instant};

/// How long each slice of the sampled syscall counters lasts.
const SLICE: Duration = Duration::from_millis(50);
/// The share of the budget's allowance the slices plan to spend: the rest absorbs rates that change, and
/// leaves the target's share to the sampling that goes on beside them (a live doctor is held to the
/// budget as a whole).
const SLICE_SHARE: f64 = 0.5;

/// The syscall counters once the probe budget stopped their first (exact) window: attached again for a
/// [`SLICE`] at a fixed period while CPU and off-CPU sampling go on, so rates are known over the whole
/// run (from slices spread over it, with their sampling error) at the budget's cost. The period is set
/// from the first window's cost per second of the target's CPU; a slice is skipped when the budget is
/// spent.
pub(crate) struct SyscallSampler {
    /// Each window as (ns, syscalls counted): the first, then each slice.
    pub(crate) slices: Vec<(u64, u64)>,
    /// The syscalls the first window saw: the targets' (the first slice's count) and other processes'.
    first: Seen,
    /// Syscalls of other processes seen in the slices since.
    others: u64,
    /// When the current slice began and what had been seen then.
    on: Option<(Instant, Seen)>,
    next: Instant,
    period: Duration,
    /// What the first window cost (its syscalls, the stacks sampled with them and other processes').
    first_cost: u64,
    /// What a syscall costs in a slice (ns): a target's (at least what one cost in the first window, its
    /// stack sampled with every Nth included) and another process's.
    prices: SyscallPrices,
    share: f64,
    skipped: u32,
}

impl SyscallSampler {
    /// After a first window of `window` that saw `first` syscalls at a cost of `first_cost` ns (each at
    /// `prices`, and the counted ones' stacks), the target having used `cpu` ns of CPU, under a budget of
    /// `share` of that CPU.
    pub(crate) fn new(
        window: Duration,
        first: Seen,
        first_cost: u64,
        prices: SyscallPrices,
        share: f64,
        cpu: u64,
    ) -> Self {
        let window_ns = window.as_nanos().max(1) as f64;
        // A slice's counted syscalls cost what the first window's did each, the stacks taken with every Nth
        // one included (on redis 0.58 us against a bare 0.38 us: priced bare, the slices spent the whole
        // budget).
        let targets_cost = first_cost.saturating_sub(first.others.saturating_mul(prices.other));
        let prices = SyscallPrices {
            counted: prices.counted.max(targets_cost.checked_div(first.counted).unwrap_or(0)),
            ..prices
        };
        // Cost and the budget's allowance, each per ns of wall time in the first window.
        let cost_rate = prices.cost(first) as f64 / window_ns;
        let allowance = SLICE_SHARE * share * cpu as f64 / window_ns;
        let duty = if cost_rate > 0.0 { (allowance / cost_rate).clamp(0.01, 0.5) } else { 0.5 };
        let period = SLICE.div_f64(duty).min(Duration::from_secs(5));
        SyscallSampler {
            slices: vec![(window.as_nanos().max(1) as u64, first.counted)],
            first,
            others: 0,
            on: None,
            next: Instant::now() + period - SLICE,
            period,
            first_cost,
            prices,
            share,
            skipped: 0,
        }
    }

    /// What every syscall seen so far cost.
    fn spent(&self) -> u64 {
        let counted: u64 = self.slices[1..].iter().map(|s| s.1).sum();
        self.first_cost.saturating_add(self.prices.cost(Seen { counted, others: self.others }))
    }

    /// What the budget allows after `cpu` ns of the target's CPU.
    fn allowed(&self, cpu: u64) -> u64 {
        crate::budget::allowed(self.share, cpu)
    }

    /// Ends a slice that is due, or begins one that is due and that the budget allows after the target's
    /// CPU time so far (`target_cpu`, read only then).
    pub(crate) fn step(&mut self, p: &mut SyscallProbe<'_>, target_cpu: impl FnOnce() -> u64) {
        match self.on {
            Some((t0, _)) if t0.elapsed() >= SLICE => self.end_slice(p),
            Some(_) => {}
            None if Instant::now() >= self.next => {
                self.next += self.period;
                let expected =
                    self.prices.cost(self.first) as f64 * SLICE.as_nanos() as f64 / self.slices[0].0 as f64;
                // Read before attaching: every syscall seen from here on is in this slice's count.
                let seen = p.seen();
                let allowed = self.allowed(target_cpu());
                if self.spent() as f64 + expected > allowed as f64 || p.resume().is_err() {
                    self.skipped += 1;
                    return;
                }
                self.on = Some((Instant::now(), seen));
            }
            None => {}
        }
    }

    /// Ends the current slice, if one is on, and keeps its window and count.
    pub(crate) fn end_slice(&mut self, p: &mut SyscallProbe<'_>) {
        if let Some((t0, seen0)) = self.on.take() {
            let ns = t0.elapsed().as_nanos() as u64;
            p.detach();
            let seen = p.seen();
            self.slices.push((ns, seen.counted.saturating_sub(seen0.counted)));
            self.others += seen.others.saturating_sub(seen0.others);
        }
    }

    /// The note that says how the syscall counters sampled the run after their first window.
    pub(crate) fn describe(&self) -> String {
        let n = self.slices.len() - 1;
        let on: u64 = self.slices[1..].iter().map(|s| s.0).sum();
        let skipped = match self.skipped {
            0 => String::new(),
            k => format!(", {k} skipped for the budget"),
        };
        format!(
            "{}after their first window of {:.2} s, {n} slice{} of {} ms every {} ms \
             ({:.2} s in all{skipped}) sampled the rest of the run",
            whyslow_model::SYSCALL_SLICES_NOTE,
            self.slices[0].0 as f64 / 1e9,
            if n == 1 { "" } else { "s" },
            SLICE.as_millis(),
            self.period.as_millis(),
            on as f64 / 1e9
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{SyscallSampler, SLICE};
    use crate::bpf::Seen;
    use crate::sources::SyscallPrices;
    use std::time::Duration;

    const PRICES: SyscallPrices = SyscallPrices { counted: 300, other: 200 };

    fn counted(counted: u64) -> Seen {
        Seen { counted, others: 0 }
    }

    /// A first window of 1 s that counted 1,000,000 syscalls at 300 ns, 310 ns each with their stacks
    /// (0.31 ms of cost per ms), while the target used 1 s of CPU, under a 5% budget: the slices may spend
    /// half of 0.05 ms per ms, so they run 1/12.4 of the time: 50 ms every 620 ms. Their cost adds to the
    /// first window's, at 310 ns each.
    #[test]
    fn slices_are_planned_from_the_first_window() {
        let window = Duration::from_secs(1);
        let mut s = SyscallSampler::new(window, counted(1_000_000), 310_000_000, PRICES, 0.05, 1_000_000_000);
        assert_eq!(s.period, Duration::from_millis(620));
        assert_eq!(s.spent(), 310_000_000);
        s.slices.push((SLICE.as_nanos() as u64, 40_000));
        assert_eq!(s.spent(), 310_000_000 + 40_000 * 310);
        assert_eq!(s.allowed(2_000_000_000), 100_000_000 + crate::BUDGET_CREDIT_NS);
        assert_eq!(
            s.describe(),
            "syscall counters: after their first window of 1.00 s, 1 slice of 50 ms every 620 ms (0.05 s in \
             all) sampled the rest of the run"
        );
        // A target whose counters cost little next to its CPU is sampled half the time at most; one that
        // made no syscall too.
        let cheap = SyscallSampler::new(window, counted(1_000), 300_000, PRICES, 0.05, 1_000_000_000);
        assert_eq!(cheap.period, SLICE * 2);
        let none = SyscallSampler::new(window, counted(0), 0, PRICES, 0.05, 1_000_000_000);
        assert_eq!(none.period, SLICE * 2);
    }

    /// The same first window beside a client making as many syscalls, each slowed by 200 ns while the
    /// counters are attached: 0.51 ms of cost per ms, so the slices run 1/20.4 of the time (50 ms every
    /// 1020 ms); the targets' syscalls are still priced at 310 ns, and each slice adds the others' cost.
    #[test]
    fn other_processes_syscalls_are_priced_in() {
        let first = Seen { counted: 1_000_000, others: 1_000_000 };
        let mut s =
            SyscallSampler::new(Duration::from_secs(1), first, 510_000_000, PRICES, 0.05, 1_000_000_000);
        assert_eq!(s.prices, SyscallPrices { counted: 310, other: 200 });
        assert_eq!(s.period, Duration::from_millis(1020));
        s.slices.push((SLICE.as_nanos() as u64, 40_000));
        s.others += 50_000;
        assert_eq!(s.spent(), 510_000_000 + 40_000 * 310 + 50_000 * 200);
    }
}
