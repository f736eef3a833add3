//! The lines `record --load` prints after the load tool's own output: what the tool reported, and how
//! the server was run.

use std::io::Write;
use std::time::Duration;
use whyslow_analyze::loadtest::LoadStats;

/// `load: wrk: 24418 requests/s, latency avg 0.655 ms, ...` (when the tool's output was understood) and
/// `server: ready after ..., load ran ..., then stopped (SIGTERM)`.
pub fn summary(
    w: &mut impl Write,
    stats: Option<&LoadStats>,
    ready_after: Duration,
    load_ran: Duration,
    server_exit: Option<i32>,
) -> std::io::Result<()> {
    if let Some(s) = stats {
        let ms = |v: Option<f64>, name: &str| v.map_or(String::new(), |v| format!(", {name} {v:.3} ms"));
        writeln!(
            w,
            "load: {}: {:.0} requests/s{}{}{}{}",
            s.tool,
            s.requests_per_sec,
            ms(s.latency_avg_ms, "latency avg"),
            ms(s.latency_p50_ms, "p50"),
            ms(s.latency_p99_ms, "p99"),
            if s.errors > 0 { format!(", {} errors", s.errors) } else { String::new() }
        )?;
    }
    writeln!(
        w,
        "server: ready after {:.2} s, load ran {:.2} s, then stopped (SIGTERM){}\n",
        ready_after.as_secs_f64(),
        load_ran.as_secs_f64(),
        server_exit.map_or(String::new(), |c| format!(", exit status {c}"))
    )
}

#[cfg(test)]
mod tests {
    use super::summary;
    use std::time::Duration;
    use whyslow_analyze::loadtest::LoadStats;

    #[test]
    fn summary_lines() {
        let s = LoadStats {
            tool: "wrk",
            requests_per_sec: 24418.12,
            latency_avg_ms: Some(0.65521),
            latency_p50_ms: None,
            latency_p99_ms: Some(1.71),
            errors: 7,
        };
        let mut out = Vec::new();
        summary(&mut out, Some(&s), Duration::from_millis(250), Duration::from_secs(2), Some(0)).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "load: wrk: 24418 requests/s, latency avg 0.655 ms, p99 1.710 ms, 7 errors\n\
             server: ready after 0.25 s, load ran 2.00 s, then stopped (SIGTERM), exit status 0\n\n"
        );
    }
}
