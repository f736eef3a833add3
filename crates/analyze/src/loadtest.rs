//! What load tools report (`wrk`, `redis-benchmark`) in a load test: throughput, latency and errors parsed from their
//! output, for `record --load` and `compare --load`.

/// Throughput and latency a load tool reported.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadStats {
    /// `wrk` or `redis-benchmark`.
    pub tool: &'static str,
    pub requests_per_sec: f64,
    /// Mean latency, when reported.
    pub latency_avg_ms: Option<f64>,
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    /// Requests that failed (wrk: socket errors and non-2xx/3xx responses).
    pub errors: u64,
}

/// `1.23ms`, `456.78us`, `2.00s`, `1.5m` in milliseconds.
fn wrk_time_ms(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let k = match unit {
        "us" => 1e-3,
        "ms" => 1.0,
        "s" => 1e3,
        "m" => 60e3,
        "h" => 3600e3,
        _ => return None,
    };
    Some(v * k)
}

fn parse_wrk(out: &str) -> Option<LoadStats> {
    let rps = out.lines().find_map(|l| l.trim().strip_prefix("Requests/sec:"))?.trim().parse().ok()?;
    let mut s = LoadStats {
        tool: "wrk",
        requests_per_sec: rps,
        latency_avg_ms: None,
        latency_p50_ms: None,
        latency_p99_ms: None,
        errors: 0,
    };
    for line in out.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Latency", avg, ..] => s.latency_avg_ms = s.latency_avg_ms.or(wrk_time_ms(avg)),
            ["50%", t] => s.latency_p50_ms = wrk_time_ms(t),
            ["99%", t] => s.latency_p99_ms = wrk_time_ms(t),
            ["Non-2xx", "or", "3xx", "responses:", n] => s.errors += n.parse::<u64>().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => {
                s.errors +=
                    rest.iter().filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok()).sum::<u64>()
            }
            _ => {}
        }
    }
    Some(s)
}

/// redis-benchmark: the `throughput summary` of each test (or `-q` lines `TEST: N requests per second`);
/// several tests give their mean.
fn parse_redis(out: &str) -> Option<LoadStats> {
    let mut rates = Vec::new();
    let (mut avg, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new());
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = line.strip_prefix("throughput summary:") {
            rates.extend(rest.split_whitespace().next().and_then(|n| n.parse::<f64>().ok()));
        } else if !line.starts_with("throughput") && line.contains(" requests per second") {
            // `-q`: `SET: 81234.23 requests per second, p50=0.319 msec`
            let after_colon = line.split_once(": ").map_or(*line, |x| x.1);
            rates.extend(after_colon.split_whitespace().next().and_then(|n| n.parse::<f64>().ok()));
            if let Some(p) = line.split("p50=").nth(1) {
                p50.extend(p.split_whitespace().next().and_then(|n| n.parse::<f64>().ok()));
            }
        } else if line.starts_with("latency summary (msec):") {
            // Header `avg min p50 p95 p99 max`, then the values.
            let (Some(head), Some(vals)) = (lines.get(i + 1), lines.get(i + 2)) else { continue };
            let cols: Vec<&str> = head.split_whitespace().collect();
            let nums: Vec<f64> = vals.split_whitespace().filter_map(|v| v.parse().ok()).collect();
            for (c, v) in cols.iter().zip(nums) {
                match *c {
                    "avg" => avg.push(v),
                    "p50" => p50.push(v),
                    "p99" => p99.push(v),
                    _ => {}
                }
            }
        }
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    Some(LoadStats {
        tool: "redis-benchmark",
        requests_per_sec: mean(&rates)?,
        latency_avg_ms: mean(&avg),
        latency_p50_ms: mean(&p50),
        latency_p99_ms: mean(&p99),
        errors: 0,
    })
}

/// Requests per second and latency from the output of wrk or redis-benchmark, when it is one of them.
pub fn parse_load_output(stdout: &str) -> Option<LoadStats> {
    parse_wrk(stdout).or_else(|| parse_redis(stdout))
}

#[cfg(test)]
mod tests {
    use super::parse_load_output;

    const WRK: &str = "Running 2s test @ http://127.0.0.1:18080/
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   655.21us  301.10us   8.94ms   91.02%
    Req/Sec    12.27k     1.02k   14.10k    72.50%
  Latency Distribution
     50%  602.00us
     75%  701.00us
     90%  850.00us
     99%    1.71ms
  48850 requests in 2.00s, 3.77MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:  24418.12
Transfer/sec:      1.89MB
";

    #[test]
    fn parses_wrk() {
        let s = parse_load_output(WRK).unwrap();
        assert_eq!((s.tool, s.requests_per_sec, s.errors), ("wrk", 24418.12, 7));
        assert!((s.latency_avg_ms.unwrap() - 0.65521).abs() < 1e-9);
        assert!((s.latency_p50_ms.unwrap() - 0.602).abs() < 1e-9);
        assert!((s.latency_p99_ms.unwrap() - 1.71).abs() < 1e-9);
        assert!(parse_load_output("hello\n").is_none());
    }

    #[test]
    fn parses_redis_benchmark() {
        let full = "====== SET ======
  100000 requests completed in 1.25 seconds
  50 parallel clients

Summary:
  throughput summary: 80000.00 requests per second
  latency summary (msec):
          avg       min       p50       p95       p99       max
        0.350     0.100     0.319     0.543     0.711     2.111
====== GET ======
Summary:
  throughput summary: 100000.00 requests per second
  latency summary (msec):
          avg       min       p50       p95       p99       max
        0.250     0.100     0.219     0.443     0.611     1.111
";
        let s = parse_load_output(full).unwrap();
        assert_eq!((s.tool, s.requests_per_sec), ("redis-benchmark", 90000.0));
        assert!((s.latency_avg_ms.unwrap() - 0.3).abs() < 1e-9);
        assert!((s.latency_p99_ms.unwrap() - 0.661).abs() < 1e-9);
        let quiet = "SET: 81234.23 requests per second, p50=0.319 msec\nGET: 91234.23 requests per second, p50=0.219 msec\n";
        let s = parse_load_output(quiet).unwrap();
        assert!((s.requests_per_sec - 86234.23).abs() < 1e-6);
        assert!((s.latency_p50_ms.unwrap() - 0.269).abs() < 1e-9);
    }
}
