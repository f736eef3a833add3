//! Values as people read them in text output: times in ns/µs/ms/s and sizes in B/KiB/MiB/GiB with three
//! significant digits (as pprof and perf print them), counts as they are. JSON keeps exact integers.

pub use whyslow_model::units::{bytes, duration};

/// How a sample type's values are shown, from its unit (pprof's unit names and ours).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Nanoseconds,
    Bytes,
    Count,
}

impl Scale {
    pub fn of(unit: &str) -> Scale {
        match unit {
            "nanoseconds" | "ns" => Scale::Nanoseconds,
            "bytes" => Scale::Bytes,
            _ => Scale::Count,
        }
    }

    /// `value` in this scale's units, for a table cell.
    pub fn show(self, value: i64) -> String {
        match self {
            Scale::Nanoseconds => duration(value),
            Scale::Bytes => bytes(value),
            Scale::Count => value.to_string(),
        }
    }
}

/// The total of a profile's sample type `value`, for a one-line summary: `1234 samples`, `770ms offcpu`
/// for a time, `2.00KiB alloc-bytes` for a size, `2048 count alloc-count` for another unit.
pub fn amount(p: &whyslow_model::Profile, value: usize) -> String {
    let total = p.total(value);
    match p.sample_types.get(value) {
        Some(t) if t.unit == "samples" => format!("{total} samples"),
        Some(t) => match Scale::of(&t.unit) {
            Scale::Count => format!("{total} {} {}", t.unit, t.name),
            scale => format!("{} {}", scale.show(total), t.name),
        },
        None => format!("{total} samples"),
    }
}

/// A change of time: `+1.20s`, `-500ms`, `0ns`.
pub fn signed_duration(ns: i64) -> String {
    if ns > 0 {
        format!("+{}", duration(ns))
    } else {
        duration(ns)
    }
}

/// Seconds (as the analyses give them) as [`duration`] shows nanoseconds.
pub fn seconds(s: f64) -> String {
    duration((s * 1e9).round() as i64)
}

/// An exact total in its unit, for text: `1.97s`, `3.00MiB`, `1234 samples`.
pub fn total(value: i64, unit: &str) -> String {
    match Scale::of(unit) {
        Scale::Count if unit.is_empty() => value.to_string(),
        Scale::Count => format!("{value} {unit}"),
        scale => scale.show(value),
    }
}

#[cfg(test)]
mod tests {
    use super::{amount, bytes, duration, Scale};

    #[test]
    fn a_recordings_amount_is_said_in_its_unit() {
        use whyslow_model::{Metadata, ProfileBuilder, SampleType};
        let profile = |unit: &str, name: &str, values: &[i64]| {
            let mut b = ProfileBuilder::new(
                Metadata::default(),
                vec![SampleType { name: name.into(), unit: unit.into() }],
            );
            let m = b.module("/bin/app", "");
            let f = b.frame("main", m, "", whyslow_model::FrameKind::User);
            let t = b.thread(1, 1, "app");
            let s = b.stack(&[f]);
            for v in values {
                b.add_sample(s, t, &[*v]);
            }
            b.finish()
        };
        assert_eq!(amount(&profile("samples", "cpu", &[1000, 234]), 0), "1234 samples");
        assert_eq!(amount(&profile("nanoseconds", "offcpu", &[770_000_000, 4_000_000]), 0), "774ms offcpu");
        assert_eq!(amount(&profile("bytes", "alloc-bytes", &[2048]), 0), "2.00KiB alloc-bytes");
        assert_eq!(amount(&profile("count", "alloc-count", &[2048]), 0), "2048 count alloc-count");
    }

    #[test]
    fn times_and_sizes_read_as_pprof_prints_them() {
        let cases = [
            (0, "0ns"),
            (850, "850ns"),
            (12_345, "12.3µs"),
            (999_600, "1.00ms"),
            (500_000_000, "500ms"),
            (1_200_078_449, "1.20s"),
            (1_972_367_050, "1.97s"),
            (61_000_000_000, "61.0s"),
            (3_600_000_000_000, "3600s"),
            (-2_500_000, "-2.50ms"),
        ];
        for (ns, shown) in cases {
            assert_eq!(duration(ns), shown, "{ns} ns");
        }
        for (n, shown) in [(512, "512B"), (1536, "1.50KiB"), (292_000, "285KiB"), (12_900_000, "12.3MiB")] {
            assert_eq!(bytes(n), shown, "{n} bytes");
        }
        assert_eq!(bytes(3 << 40), "3072GiB");
        assert_eq!(Scale::of("samples").show(1234), "1234");
    }
}
