//! Memory in use over a run, from the `inuse-bytes` changes per time slice: the series (in all, or of
//! the stacks a filter keeps) and how fast it grows, as a least-squares slope with its 95% interval.

use whyslow_model::{sample_types as st, Profile, Sample, TIME_BUCKET_NS};

/// How fast in-use memory grew over a series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Growth {
    /// Bytes per second (least squares over the slices), and the half-width of its 95% interval.
    pub per_sec: f64,
    pub within: f64,
    /// In use at the end of the first and of the last slice.
    pub first: i64,
    pub last: i64,
    pub seconds: f64,
}

impl Growth {
    /// The interval lies above zero: it grew, beyond what the slices' scatter explains.
    pub fn surely_grows(&self) -> bool {
        self.per_sec - self.within > 0.0
    }
}

/// In use at the end of each time slice of the run (index = slice), of the samples `keep` keeps; empty
/// when the profile has no in-use memory.
pub fn in_use_series(p: &Profile, keep: impl Fn(&Sample) -> bool) -> Vec<i64> {
    let Some(i) = p.sample_type(st::INUSE_BYTES) else { return Vec::new() };
    let run = p.meta.duration_ns.div_ceil(TIME_BUCKET_NS) as usize;
    let seen = p.samples.iter().map(|s| s.time as usize + 1).max().unwrap_or(0);
    let mut series = vec![0i64; run.max(seen)];
    for s in p.samples.iter().filter(|s| keep(s)) {
        series[s.time as usize] += s.values[i];
    }
    let mut held = 0i64;
    for v in &mut series {
        held += *v;
        *v = held;
    }
    series
}

/// The slope of `series` (bytes at the end of consecutive [`TIME_BUCKET_NS`] slices); None below three
/// slices.
pub fn growth(series: &[i64]) -> Option<Growth> {
    let dt = TIME_BUCKET_NS as f64 / 1e9;
    let xs: Vec<f64> = (0..series.len()).map(|k| k as f64 * dt).collect();
    growth_at(&xs, series)
}

/// The slope of `series` taken at `secs` (seconds, increasing; an agent's windows' ends), with its 95%
/// interval; `seconds` is the points' number times their mean spacing (for evenly spaced slices, the run).
/// None below three points.
pub fn growth_at(secs: &[f64], series: &[i64]) -> Option<Growth> {
    let n = series.len().min(secs.len());
    if n < 3 {
        return None;
    }
    let xs = &secs[..n];
    let ys: Vec<f64> = series[..n].iter().map(|&v| v as f64).collect();
    let mx = xs.iter().sum::<f64>() / n as f64;
    let my = ys.iter().sum::<f64>() / n as f64;
    let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = sxy / sxx;
    let sse: f64 = xs.iter().zip(&ys).map(|(x, y)| (y - my - slope * (x - mx)).powi(2)).sum();
    let se = (sse / (n - 2) as f64 / sxx).sqrt();
    let step = (xs[n - 1] - xs[0]) / (n - 1) as f64;
    Some(Growth {
        per_sec: slope,
        within: t95(n - 2) * se,
        first: series[0],
        last: series[n - 1],
        seconds: n as f64 * step,
    })
}

/// Student's t at 97.5% for `df` degrees of freedom (the 95% two-sided interval).
fn t95(df: usize) -> f64 {
    const T: [f64; 10] = [12.71, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228];
    match df {
        0 => f64::INFINITY,
        1..=10 => T[df - 1],
        11..=20 => 2.086,
        21..=40 => 2.021,
        41..=120 => 1.98,
        _ => 1.96,
    }
}

#[cfg(test)]
mod tests {
    use super::{growth, in_use_series};
    use whyslow_model::{sample_types as st, FrameKind, Metadata, ProfileBuilder, SampleType};

    /// 1000 bytes a slice for 20 slices under one stack, a bounded 500 under another: the series sums the
    /// changes; the steady one grows 10000 B/s exactly (no scatter, no interval), the other not at all.
    #[test]
    fn a_steady_leak_has_its_exact_slope() {
        let meta = Metadata { duration_ns: 2_000_000_000, ..Default::default() };
        let types = vec![SampleType { name: st::INUSE_BYTES.into(), unit: "bytes".into() }];
        let mut b = ProfileBuilder::new(meta, types);
        let m = b.module("/srv/app", "");
        let t = b.thread(1, 1, "app");
        let leak = {
            let f = [b.frame("main", m, "", FrameKind::User), b.frame("cache_put", m, "", FrameKind::User)];
            b.stack(&f)
        };
        let bounded = {
            let f = [b.frame("main", m, "", FrameKind::User), b.frame("lru_put", m, "", FrameKind::User)];
            b.stack(&f)
        };
        for k in 0..20 {
            b.add_sample_at(leak, t, k, &[1000]);
        }
        b.add_sample_at(bounded, t, 0, &[500]);
        b.add_sample_at(bounded, t, 3, &[-200]);
        b.add_sample_at(bounded, t, 4, &[200]);
        let p = b.finish();
        let all = in_use_series(&p, |_| true);
        assert_eq!(all.len(), 20);
        assert_eq!((all[0], all[3], all[4], all[19]), (1500, 4300, 5500, 20500));
        let g = growth(&in_use_series(&p, |s| s.stack == leak)).unwrap();
        assert!((g.per_sec - 10_000.0).abs() < 1e-6 && g.within < 1e-6, "{g:?}");
        assert!(g.surely_grows());
        let flat = growth(&in_use_series(&p, |s| s.stack == bounded)).unwrap();
        assert!(!flat.surely_grows(), "{flat:?}");
    }
}
