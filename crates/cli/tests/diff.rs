//! `whyslow diff` on recordings of two builds of one program, the second doing twice the work in work_b.

mod common;
use common::*;
use serde_json::Value;

fn row<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("{name}: {d}"))
}

/// work_a 2 units, work_b 1 (2 in the 2x build), work_c 1 per round: work_b's self time grows by a
/// quarter of the before total (15..40%), its share goes 25% -> 40% (+-7 points), and it is the top change.
#[test]
fn diff_attributes_the_doubling_to_work_b() {
    let dir = tmp();
    let (v1, v2) = (workload("diffwork"), workload("diffwork_2x"));
    let before = record(dir.path(), "before", &[], &[v1.to_str().unwrap(), "6000"]);
    let after = record(dir.path(), "after", &[], &[v2.to_str().unwrap(), "6000"]);
    let d: Value =
        serde_json::from_str(&ok(&["diff", &before, &after, "--format", "json", "--limit", "500"])).unwrap();
    assert_eq!(d["unit"], "seconds");
    assert_eq!(d["functions"][0]["name"], "work_b", "{}", d["functions"][0]);
    let wb = row(&d, "work_b");
    assert_eq!(wb["status"], "both");
    assert_eq!(wb["module"], "diffwork -> diffwork_2x", "joined across two differently named builds");
    let before_s = d["before"]["seconds"].as_f64().unwrap();
    let after_s = d["after"]["seconds"].as_f64().unwrap();
    let rel = wb["self_delta"].as_f64().unwrap() / before_s;
    // Two single runs (6000 rounds, ~1 s, ~1000 samples each) on a shared CPU: the speed of a unit
    // varies from run to run, so +25% within
    // 15..40%; the shares within one run are steadier: 25% -> 40% within 7 points.
    assert!((0.15..=0.40).contains(&rel), "work_b grew by {:.1}% of the before total", 100.0 * rel);
    let (pb, pa) = (wb["self_pct_before"].as_f64().unwrap(), wb["self_pct_after"].as_f64().unwrap());
    assert!((pb - 25.0).abs() <= 7.0 && (pa - 40.0).abs() <= 7.0, "work_b share {pb:.1}% -> {pa:.1}%");
    // The other workers did not change: each moves (sampling noise, a CPU shared with other tests) by
    // well under work_b's change.
    let wb_delta = wb["self_delta"].as_f64().unwrap();
    for name in ["work_a", "work_c"] {
        let delta = row(&d, name)["self_delta"].as_f64().unwrap();
        assert!(delta.abs() < 0.6 * wb_delta, "{name} moved {delta}, work_b {wb_delta}");
    }
    // Self deltas add up to the change of the total.
    let sum: f64 = d["functions"].as_array().unwrap().iter().map(|f| f["self_delta"].as_f64().unwrap()).sum();
    assert!((sum - (after_s - before_s)).abs() < 1e-3, "{sum} vs {}", after_s - before_s);

    let text = ok(&["diff", &before, &after, "--limit", "3"]);
    let first_row = text.lines().find(|l| l.contains(" work_")).unwrap();
    assert!(first_row.contains("work_b"), "{text}");
    // Self before, after and delta in time units to three significant digits (`1.01s`, `+998ms`).
    let cells: Vec<&str> = first_row.split_whitespace().take(3).collect();
    let time = |s: &str| {
        ["ns", "µs", "ms", "s"]
            .iter()
            .any(|u| s.ends_with(u) && s[..s.len() - u.len()].parse::<f64>().is_ok())
    };
    assert!(cells.iter().all(|c| time(c)) && cells[2].starts_with('+'), "{first_row}");
    assert!(text.contains("samples = ") && !text.contains("self seconds"), "{text}");
    assert!(text.contains("change: +"), "{text}");

    let svg = dir.path().join("diff.svg");
    ok(&["diff", &before, &after, "--flamegraph", svg.to_str().unwrap()]);
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.contains("<title>work_b (") && s.contains("red: grew"), "differential flame graph");
    let neg = dir.path().join("neg.svg");
    ok(&["diff", &before, &after, "--negate", "--flamegraph", neg.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&neg).unwrap().contains("widths: before"));
}

#[test]
fn diff_errors_are_one_line() {
    let dir = tmp();
    let bin = workload("diffwork");
    let data = record(dir.path(), "one", &[], &[bin.to_str().unwrap(), "300"]);
    let missing = dir.path().join("missing.data");
    let e = fails(&["diff", &data, missing.to_str().unwrap()]);
    assert!(e.contains("cannot read") && e.contains("missing.data"), "{e}");
    let e = fails(&["diff", &data, &data, "--type", "alloc-bytes"]);
    assert!(e.contains("no 'alloc-bytes' samples"), "{e}");
    let not_a_recording = dir.path().join("junk.data");
    std::fs::write(&not_a_recording, "hello").unwrap();
    let e = fails(&["diff", not_a_recording.to_str().unwrap(), &data]);
    assert!(e.contains("not a whyslow recording"), "{e}");
}
