//! Statistics for before/after comparisons on few runs: medians and spreads, the Mann-Whitney U test
//! (exact distribution when there are no ties, normal approximation with tie correction otherwise), and a
//! bootstrap confidence interval of the relative change of the medians with a fixed seed.
//!
//! Pure functions of the numbers they are given: deterministic (same input, same output), no I/O, and
//! they never panic on empty or non-finite input (they return `None` instead).

use serde::Serialize;

/// Two-sided significance level of the verdict.
pub const ALPHA: f64 = 0.05;
/// Bootstrap resamples behind a confidence interval.
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;
/// Seed of the bootstrap's random numbers, so a comparison reads the same every time it is rendered.
pub const BOOTSTRAP_SEED: u64 = 0x5eed_0fc0_ffee;

/// Median and spread of one side's runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// First and third quartiles (linear interpolation between order statistics).
    pub q1: f64,
    pub q3: f64,
}

/// Quantile `q` (0..=1) of sorted values, interpolated linearly between order statistics.
fn quantile_sorted(v: &[f64], q: f64) -> f64 {
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

fn sorted(values: &[f64]) -> Option<Vec<f64>> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    Some(v)
}

/// The 95% sampling error, in points, of a share of `pct` percent estimated from `n` samples (normal
/// approximation; 50% gives the worst case for any share).
pub fn share_error(pct: f64, n: i64) -> f64 {
    let p = (pct / 100.0).clamp(0.0, 1.0);
    100.0 * 1.96 * (p * (1.0 - p) / n.max(1) as f64).sqrt()
}

pub fn median(values: &[f64]) -> Option<f64> {
    sorted(values).map(|v| quantile_sorted(&v, 0.5))
}

pub fn summary(values: &[f64]) -> Option<Summary> {
    let v = sorted(values)?;
    Some(Summary {
        n: v.len(),
        median: quantile_sorted(&v, 0.5),
        min: v[0],
        max: v[v.len() - 1],
        q1: quantile_sorted(&v, 0.25),
        q3: quantile_sorted(&v, 0.75),
    })
}

/// How a Mann-Whitney p value was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UMethod {
    /// The exact permutation distribution of U (no ties between the samples).
    Exact,
    /// The normal approximation with tie and continuity correction (ties present, or large samples).
    Normal,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MannWhitney {
    /// U of the first sample: pairs (x, y) with x > y, ties counting one half.
    pub u: f64,
    /// Two-sided p value.
    pub p: f64,
    pub method: UMethod,
}

/// Above this many (n1 * n2) the exact distribution is replaced by the normal approximation.
const EXACT_LIMIT: usize = 10_000;

/// Two-sided Mann-Whitney U test (Wilcoxon rank-sum) of `x` against `y`.
pub fn mann_whitney(x: &[f64], y: &[f64]) -> Option<MannWhitney> {
    let (x, y) = (sorted(x)?, sorted(y)?);
    let (n1, n2) = (x.len(), y.len());
    let mut u = 0.0;
    let mut ties = false;
    for a in &x {
        for b in &y {
            if a > b {
                u += 1.0;
            } else if a == b {
                u += 0.5;
                ties = true;
            }
        }
    }
    if !ties && n1 * n2 <= EXACT_LIMIT {
        // counts[k] = number of arrangements of the pooled order with U = k, built up by the recurrence
        // f(n1, n2, u) = f(n1 - 1, n2, u - n2) + f(n1, n2 - 1, u), one row of n2 at a time.
        let dist = u_distribution(n1, n2);
        let total: f64 = dist.iter().sum();
        let k = u as usize;
        let le: f64 = dist[..=k].iter().sum();
        let ge: f64 = dist[k..].iter().sum();
        let p = (2.0 * le.min(ge) / total).min(1.0);
        return Some(MannWhitney { u, p, method: UMethod::Exact });
    }
    // Normal approximation: mean n1 n2 / 2, variance corrected for ties.
    let mut pooled: Vec<f64> = x.iter().chain(&y).copied().collect();
    pooled.sort_by(f64::total_cmp);
    let n = (n1 + n2) as f64;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < pooled.len() {
        let j = pooled[i..].iter().take_while(|&&v| v == pooled[i]).count();
        tie_term += (j * j * j - j) as f64;
        i += j;
    }
    let (n1f, n2f) = (n1 as f64, n2 as f64);
    let mean = n1f * n2f / 2.0;
    let var = n1f * n2f / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)));
    if var <= 0.0 {
        // Every value is the same: no evidence of a difference.
        return Some(MannWhitney { u, p: 1.0, method: UMethod::Normal });
    }
    let z = ((u - mean).abs() - 0.5).max(0.0) / var.sqrt();
    let p = (2.0 * normal_sf(z)).min(1.0);
    Some(MannWhitney { u, p, method: UMethod::Normal })
}

/// Number of orderings giving each U = 0..=n1*n2 for samples of n1 and n2 distinct values.
fn u_distribution(n1: usize, n2: usize) -> Vec<f64> {
    // prev[m][u]: counts for (i - 1, m); built row by row over i = 0..=n1.
    let max = n1 * n2;
    let mut rows: Vec<Vec<f64>> = (0..=n2).map(|_| vec![0.0; max + 1]).collect();
    // i = 0: one ordering, U = 0, for every m.
    for r in rows.iter_mut() {
        r[0] = 1.0;
    }
    for _i in 1..=n1 {
        let mut next: Vec<Vec<f64>> = (0..=n2).map(|_| vec![0.0; max + 1]).collect();
        // f(i, 0, u) = [u == 0].
        next[0][0] = 1.0;
        for m in 1..=n2 {
            for u in 0..=max {
                // The largest value is from x (it beats all m of y) or from y.
                let from_x = if u >= m { rows[m][u - m] } else { 0.0 };
                next[m][u] = from_x + next[m - 1][u];
            }
        }
        rows = next;
    }
    rows.swap_remove(n2)
}

/// Upper tail of the standard normal distribution, P(Z > z).
fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// Complementary error function (Numerical Recipes' Chebyshev fit, relative error < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// SplitMix64: small, fast, and good enough to draw bootstrap indices reproducibly.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64 * n as f64) as usize
    }
}

fn resample_median(v: &[f64], rng: &mut SplitMix, buf: &mut Vec<f64>) -> f64 {
    buf.clear();
    buf.extend((0..v.len()).map(|_| v[rng.below(v.len())]));
    buf.sort_by(f64::total_cmp);
    quantile_sorted(buf, 0.5)
}

/// Percentile bootstrap interval of `median(after) / median(before) - 1` at `level` (e.g. 0.95): each
/// side is resampled with replacement on its own, `resamples` times, from a fixed seed.
pub fn bootstrap_change_ci(
    before: &[f64],
    after: &[f64],
    level: f64,
    resamples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
    bootstrap_ci(before, after, level, resamples, seed, |mb, ma| (mb != 0.0).then(|| ma / mb - 1.0))
}

/// Percentile bootstrap interval of `median(after) - median(before)` at `level`: as
/// [`bootstrap_change_ci`], for measures whose before median may be 0 (a share of a function that was
/// not there), where only the shift in points exists.
pub fn bootstrap_shift_ci(
    before: &[f64],
    after: &[f64],
    level: f64,
    resamples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
    bootstrap_ci(before, after, level, resamples, seed, |mb, ma| Some(ma - mb))
}

/// The percentile interval at `level` of `stat(median(before), median(after))` over `resamples`
/// resamplings of each side (the resamples where it is undefined or not finite left out).
fn bootstrap_ci(
    before: &[f64],
    after: &[f64],
    level: f64,
    resamples: usize,
    seed: u64,
    stat: impl Fn(f64, f64) -> Option<f64>,
) -> Option<(f64, f64)> {
    let (b, a) = (sorted(before)?, sorted(after)?);
    if resamples == 0 || !(0.0..1.0).contains(&level) {
        return None;
    }
    let mut rng = SplitMix(seed);
    let mut buf = Vec::new();
    let mut values: Vec<f64> = (0..resamples)
        .filter_map(|_| {
            let mb = resample_median(&b, &mut rng, &mut buf);
            let ma = resample_median(&a, &mut rng, &mut buf);
            stat(mb, ma)
        })
        .filter(|v| v.is_finite())
        .collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let tail = (1.0 - level) / 2.0;
    Some((quantile_sorted(&values, tail), quantile_sorted(&values, 1.0 - tail)))
}

/// A before/after comparison of one measure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub before: Summary,
    pub after: Summary,
    /// median(after) / median(before) - 1.
    pub change: f64,
    /// 95% bootstrap interval of `change`.
    pub ci: (f64, f64),
    pub test: MannWhitney,
    /// p < [`ALPHA`] and the interval excludes 0.
    pub significant: bool,
}

/// Compares two sets of runs; `None` when a side is empty, a value is not finite, or the before median
/// is 0 (no relative change exists).
pub fn compare(before: &[f64], after: &[f64]) -> Option<Comparison> {
    let (sb, sa) = (summary(before)?, summary(after)?);
    if sb.median == 0.0 {
        return None;
    }
    let change = sa.median / sb.median - 1.0;
    let ci = bootstrap_change_ci(before, after, 0.95, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED)?;
    let test = mann_whitney(after, before)?;
    let significant = test.p < ALPHA && (ci.0 > 0.0 || ci.1 < 0.0);
    Some(Comparison { before: sb, after: sa, change, ci, test, significant })
}

/// One measure of a comparison (CPU time, wall time, requests/s) with every run's value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measure {
    /// `cpu time`, `wall time`, `requests/s`, ...
    pub name: String,
    /// `s`, `req/s`, `ms`.
    pub unit: String,
    /// True for throughput: a positive change is an improvement.
    pub higher_is_better: bool,
    pub before: Vec<f64>,
    pub after: Vec<f64>,
    /// None when a side has no usable value.
    pub comparison: Option<Comparison>,
}

impl Measure {
    pub fn new(name: &str, unit: &str, higher_is_better: bool, before: Vec<f64>, after: Vec<f64>) -> Measure {
        let comparison = compare(&before, &after);
        Measure {
            name: name.to_string(),
            unit: unit.to_string(),
            higher_is_better,
            before,
            after,
            comparison,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        bootstrap_change_ci, bootstrap_shift_ci, compare, mann_whitney, median, normal_sf, share_error,
        summary, u_distribution, SplitMix, UMethod,
    };

    /// 400 samples: a 50% share within ±4.9 points, a 10% share within ±2.94; none is 0.
    #[test]
    fn share_errors() {
        assert!(close(share_error(50.0, 400), 4.9, 1e-9));
        assert!(close(share_error(10.0, 400), 2.94, 1e-9));
        assert!(close(share_error(0.0, 400), 0.0, 1e-12));
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn summary_has_median_and_quartiles() {
        let s = summary(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max, s.q1, s.q3), (5, 3.0, 1.0, 5.0, 2.0, 4.0));
        assert_eq!(median(&[1.0, 2.0, 3.0, 10.0]), Some(2.5));
        assert!(summary(&[]).is_none() && summary(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn exact_mann_whitney_matches_known_p_values() {
        // Complete separation of 5 and 5: 2 of the C(10,5) = 252 orderings are this extreme.
        let t = mann_whitney(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        assert_eq!((t.u, t.method), (0.0, UMethod::Exact));
        assert!(close(t.p, 2.0 / 252.0, 1e-12), "{}", t.p);
        // Alternating 5 and 5: U = 10, P(U <= 10) = 87/252, two-sided 0.690476 (tables, scipy).
        let t = mann_whitney(&[1.0, 3.0, 5.0, 7.0, 9.0], &[2.0, 4.0, 6.0, 8.0, 10.0]).unwrap();
        assert_eq!(t.u, 10.0);
        assert!(close(t.p, 0.690_476_190_476, 1e-9), "{}", t.p);
        // 3 against 4, complete separation: 2 / C(7,3) = 2/35.
        let t = mann_whitney(&[7.0, 8.0, 9.0], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(t.u, 12.0);
        assert!(close(t.p, 2.0 / 35.0, 1e-12), "{}", t.p);
        // Unequal sizes, U = 4 of 24: 0.114286 (full enumeration of the C(10,4) orderings).
        let t = mann_whitney(&[1.1, 2.2, 3.3, 4.4], &[5.5, 6.6, 0.5, 7.7, 8.8, 9.9]).unwrap();
        assert_eq!(t.u, 4.0);
        assert!(close(t.p, 0.114_285_714_285_7, 1e-9), "{}", t.p);
        // 6 against 7, U = 6: 0.034965 (full enumeration of the C(13,6) orderings).
        let t =
            mann_whitney(&[10.0, 12.0, 14.0, 11.0, 13.0, 15.0], &[16.0, 9.0, 17.0, 18.0, 19.0, 20.0, 21.0])
                .unwrap();
        assert_eq!(t.u, 6.0);
        assert!(close(t.p, 0.034_965_034_965, 1e-9), "{}", t.p);
    }

    #[test]
    fn the_exact_distribution_sums_to_the_binomial_coefficient() {
        let d = u_distribution(6, 7);
        assert_eq!(d.len(), 43);
        assert_eq!(d.iter().sum::<f64>(), 1716.0); // C(13, 6)
        assert_eq!(d, d.iter().rev().copied().collect::<Vec<_>>(), "symmetric");
    }

    #[test]
    fn ties_use_the_normal_approximation() {
        let t = mann_whitney(&[1.0, 2.0, 2.0, 3.0], &[2.0, 3.0, 4.0, 5.0]).unwrap();
        assert_eq!(t.method, UMethod::Normal);
        assert!(t.p > 0.1 && t.p < 1.0, "{}", t.p);
        let t = mann_whitney(&[1.0, 1.0], &[1.0, 1.0, 1.0]).unwrap();
        assert_eq!(t.p, 1.0);
        // Large samples: the approximation agrees with the exact value (complete separation of 120 and
        // 120 is far beyond 1e-10).
        let x: Vec<f64> = (0..120).map(f64::from).collect();
        let y: Vec<f64> = (200..320).map(f64::from).collect();
        let t = mann_whitney(&x, &y).unwrap();
        assert_eq!(t.method, UMethod::Normal);
        assert!(t.p < 1e-10);
        assert!(close(normal_sf(1.959_964), 0.025, 1e-6));
    }

    /// Log-normal-ish run times: `median * exp(sigma * z)` with z from a Box-Muller of SplitMix.
    fn runs(rng: &mut SplitMix, n: usize, median: f64, sigma: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let u1 = (rng.next() >> 11) as f64 / (1u64 << 53) as f64 + 1e-12;
                let u2 = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                median * (sigma * z).exp()
            })
            .collect()
    }

    #[test]
    fn bootstrap_interval_covers_the_true_ratio() {
        let mut rng = SplitMix(42);
        let trials = 200;
        let mut covered = 0;
        let mut significant = 0;
        for _ in 0..trials {
            let b = runs(&mut rng, 10, 1.0, 0.03);
            let a = runs(&mut rng, 10, 1.25, 0.03);
            let c = compare(&b, &a).unwrap();
            covered += (c.ci.0 <= 0.25 && 0.25 <= c.ci.1) as usize;
            significant += c.significant as usize;
            assert!(c.ci.0 <= c.change && c.change <= c.ci.1);
        }
        // A percentile bootstrap of medians on 10 runs undercovers a little; far below 85% means broken.
        assert!(covered as f64 / trials as f64 >= 0.85, "covered {covered} of {trials}");
        assert_eq!(significant, trials, "a 25% change with 3% noise is always found");
    }

    #[test]
    fn identical_distributions_are_rarely_called_different() {
        let mut rng = SplitMix(7);
        let trials = 2000;
        let mut positives = 0;
        for _ in 0..trials {
            let b = runs(&mut rng, 5, 1.0, 0.05);
            let a = runs(&mut rng, 5, 1.0, 0.05);
            positives += compare(&b, &a).unwrap().significant as usize;
        }
        // The exact test at n = 5 + 5 rejects with probability 2 * 4/252 = 3.2% under the null.
        let rate = positives as f64 / trials as f64;
        assert!(rate <= 0.05, "false-positive rate {rate}");
        assert!(rate > 0.005, "the test should reach its level, got {rate}");
    }

    #[test]
    fn small_changes_in_noisy_runs_are_not_significant() {
        let c = compare(&[1.0, 1.3, 0.9, 1.2, 1.1], &[1.05, 1.25, 0.95, 1.15, 1.2]).unwrap();
        assert!(!c.significant && c.ci.0 < 0.0 && c.ci.1 > 0.0, "{c:?}");
    }

    #[test]
    fn shift_intervals_work_from_zero() {
        // A share that was 0 in every before window and ~30 points after: the whole interval is above 0.
        let (lo, hi) = bootstrap_shift_ci(&[0.0; 10], &[28.0, 31.0], 0.95, 1000, 1).unwrap();
        assert!((28.0..=31.0).contains(&lo) && (28.0..=31.0).contains(&hi), "{lo} {hi}");
        // Overlapping sides: the interval holds 0.
        let (lo, hi) = bootstrap_shift_ci(&[1.0, 3.0, 2.0, 4.0], &[2.5, 3.5], 0.95, 1000, 1).unwrap();
        assert!(lo < 0.0 && hi > 0.0, "{lo} {hi}");
        assert!(bootstrap_shift_ci(&[], &[1.0], 0.95, 1000, 1).is_none());
    }

    #[test]
    fn bootstrap_is_reproducible_and_rejects_bad_input() {
        let (b, a) = ([1.0, 1.1, 0.9, 1.05], [1.2, 1.3, 1.25, 1.22]);
        assert_eq!(bootstrap_change_ci(&b, &a, 0.95, 1000, 1), bootstrap_change_ci(&b, &a, 0.95, 1000, 1));
        assert!(compare(&[], &a).is_none());
        assert!(compare(&[0.0, 0.0], &a).is_none());
        assert!(mann_whitney(&[f64::INFINITY], &a).is_none());
    }
}
