//! Every export format and the flame graph from a real recording, checked by the tools that read them.

mod common;
use common::*;

#[test]
fn exports_of_a_real_recording_agree_with_the_report() {
    let dir = tmp();
    let d = dir.path();
    let bin = workload("cpu_split");
    let data = record(d, "x", &[], &[bin.to_str().unwrap(), "1"]);
    let r = report_json(&data, &[]);
    let total = r["total_samples"].as_i64().unwrap();
    let burn_a = function(&r, |n| n == "burn_a").unwrap()["self"].as_i64().unwrap();
    let path = |n: &str| d.join(n).to_string_lossy().into_owned();

    ok(&["export", &data, "--format", "folded", "-o", &path("x.folded")]);
    let folded = std::fs::read_to_string(path("x.folded")).unwrap();
    let sum: i64 = folded.lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap()).sum();
    assert_eq!(sum, total);
    let leaf_a: i64 = folded
        .lines()
        .filter(|l| l.rsplit_once(' ').unwrap().0.ends_with(";burn_a"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
        .sum();
    assert_eq!(leaf_a, burn_a);

    // The report and its flame graph from one read: the same SVG as `flamegraph` writes, the same report.
    let both = ok(&["report", &data, "--flamegraph", &path("both.svg")]);
    ok(&["flamegraph", &data, "-o", &path("alone.svg")]);
    assert_eq!(both, ok(&["report", &data]));
    assert!(std::fs::read(path("both.svg")).unwrap() == std::fs::read(path("alone.svg")).unwrap());

    ok(&["export", &data, "--format", "speedscope", "-o", &path("x.speedscope.json")]);
    let ss: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path("x.speedscope.json")).unwrap()).unwrap();
    let weights: i64 = ss["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["weights"].as_array().unwrap().iter().map(|w| w.as_i64().unwrap()))
        .sum();
    assert_eq!(weights, total);

    ok(&["export", &data, "--format", "callgrind", "-o", &path("callgrind.out")]);
    let cg = std::fs::read_to_string(path("callgrind.out")).unwrap();
    assert!(cg.starts_with("# callgrind format"));
    assert!(cg.contains(&format!("totals: {total}")));
    assert!(cg.contains("fn=") && cg.contains("cfn=") && cg.contains("calls="));

    ok(&["flamegraph", &data, "-o", &path("x.svg")]);
    let svg = std::fs::read_to_string(path("x.svg")).unwrap();
    assert!(svg.contains("burn_a") && svg.contains("function search("));

    ok(&["export", &data, "--format", "pprof", "-o", &path("x.pb.gz")]);
    let go = std::path::Path::new("/usr/local/go/bin/go");
    let go = if go.exists() { go.to_str().unwrap() } else { "go" };
    let out = std::process::Command::new(go)
        .args(["tool", "pprof", "-top", "-sample_index=cpu", &path("x.pb.gz")])
        .env("HOME", d)
        .output()
        .expect("go tool pprof (Go is required for the tests)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let flat = text
        .lines()
        .find(|l| l.trim_end().ends_with(" burn_a"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("burn_a missing in pprof -top:\n{text}"));
    assert_eq!(flat, format!("{burn_a}samples"));
}
