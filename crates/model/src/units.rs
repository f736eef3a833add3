//! Values as people read them: times in ns/µs/ms/s and sizes in B/KiB/MiB/GiB with three significant
//! digits; one place, so that a report, the doctor's words and a summary line say a value alike.

/// Three significant digits of `x` (>= 1 in magnitude), without a trailing fraction where none is needed.
fn three(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Nanoseconds as `850ns`, `12.3µs`, `500ms`, `1.20s`; past 1000 s in whole seconds.
pub fn duration(ns: i64) -> String {
    let a = ns.unsigned_abs() as f64;
    let x = ns as f64;
    // Rounding can carry a value into the next unit (999.6 µs -> "1000µs"): judge by the rounded value.
    let fits = |v: f64| three(v).trim_start_matches('-').len() <= 4 && v.abs() < 999.5;
    if a < 1e3 {
        format!("{ns}ns")
    } else if fits(x / 1e3) {
        format!("{}µs", three(x / 1e3))
    } else if fits(x / 1e6) {
        format!("{}ms", three(x / 1e6))
    } else if a < 999.5e9 {
        format!("{}s", three(x / 1e9))
    } else {
        format!("{:.0}s", x / 1e9)
    }
}

/// Bytes as `512B`, `1.50KiB`, `12.3MiB`, `2.00GiB`.
pub fn bytes(n: i64) -> String {
    let a = n.unsigned_abs() as f64;
    let x = n as f64;
    let units = [("KiB", 1024f64), ("MiB", 1024f64 * 1024.0), ("GiB", 1024f64 * 1024.0 * 1024.0)];
    if a < 1024.0 {
        return format!("{n}B");
    }
    for (i, (name, size)) in units.iter().enumerate() {
        let v = x / size;
        if v.abs() < 999.5 || i == units.len() - 1 {
            return format!("{}{name}", three(v));
        }
    }
    unreachable!("the last unit takes every value")
}
