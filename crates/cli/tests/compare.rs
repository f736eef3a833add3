//! `whyslow compare` on real runs: two builds of one program (+25% CPU, all in work_b), and a command
//! compared with itself. CPU time (user + system of the run), not wall time, is what these tests assert.

mod common;
use common::*;
use serde_json::Value;

fn compare_json(before: &str, after: &str, runs: &str, dir: &std::path::Path) -> Value {
    let out = ok(&[
        "compare",
        "-n",
        runs,
        "--before",
        before,
        "--after",
        after,
        "--output-dir",
        dir.to_str().unwrap(),
        "--format",
        "json",
        "--limit",
        "500",
    ]);
    serde_json::from_str(&out).unwrap()
}

fn measure<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["measures"].as_array().unwrap().iter().find(|m| m["name"] == name).unwrap()
}

/// 5 runs per side of a ~0.25 s program: +25% CPU time expected; measured within 15..35%, significant
/// (exact Mann-Whitney p = 2/252 when the runs separate), and the function table attributes the change
/// to work_b, in seconds that add up to the change of the medians.
#[test]
fn compare_finds_the_doubled_function_and_the_size_of_the_change() {
    let _alone = exclusive();
    let dir = tmp();
    let (v1, v2) = (workload("diffwork"), workload("diffwork_2x"));
    let before = format!("{} 1500", v1.display());
    let after = format!("{} 1500", v2.display());
    let v = compare_json(&before, &after, "5", dir.path());
    let cpu = measure(&v, "cpu time");
    let change = cpu["change"].as_f64().unwrap();
    assert!((0.15..=0.35).contains(&change), "cpu time change {:.1}% (expected +25%)", 100.0 * change);
    assert_eq!(cpu["significant"], true, "{cpu}");
    assert_eq!(cpu["test"], "mann-whitney-u");
    assert!(cpu["p"].as_f64().unwrap() < 0.05);
    let ci: Vec<f64> = cpu["ci95"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert!(ci[0] > 0.05 && ci[0] <= change && change <= ci[1], "{ci:?}");
    assert_eq!(cpu["before"].as_array().unwrap().len(), 5);
    assert_eq!(v["verdict"]["measure"], "cpu time");
    assert_eq!(v["verdict"]["significant"], true);

    let d = &v["diff"];
    assert_eq!(d["functions"][0]["name"], "work_b", "{}", d["functions"][0]);
    let delta_medians =
        cpu["after_summary"]["median"].as_f64().unwrap() - cpu["before_summary"]["median"].as_f64().unwrap();
    let sum: f64 = d["functions"].as_array().unwrap().iter().map(|f| f["self_delta"].as_f64().unwrap()).sum();
    assert!((sum - delta_medians).abs() < 2e-3, "deltas add up to {sum}, medians moved {delta_medians}");
    let wb = d["functions"][0]["self_delta"].as_f64().unwrap();
    assert!(wb > 0.6 * delta_medians && wb < 1.4 * delta_medians, "work_b {wb} of {delta_medians}");

    for f in ["before.data", "after.data", "before-1.data", "after-5.data", "diff.svg"] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
    // The merged recordings work with diff.
    let merged = ok(&[
        "diff",
        dir.path().join("before.data").to_str().unwrap(),
        dir.path().join("after.data").to_str().unwrap(),
        "--limit",
        "1",
    ]);
    assert!(merged.contains("work_b"), "{merged}");
}

/// One command against itself: the runs are exchangeable, so the exact test at 5 + 5 runs calls them
/// different in 2 * 4/252 = 3.2% of comparisons; a second comparison only runs when the first was such
/// a false positive (both false: ~0.1%). A comparison that always finds a difference fails here.
#[test]
fn compare_of_identical_commands_finds_no_significant_difference() {
    let _alone = exclusive();
    let bin = workload("diffwork");
    let cmd = format!("{} 1000", bin.display());
    let mut verdicts = Vec::new();
    for _ in 0..2 {
        let dir = tmp();
        let out = ok(&[
            "compare",
            "-n",
            "5",
            "--before",
            &cmd,
            "--after",
            &cmd,
            "--output-dir",
            dir.path().to_str().unwrap(),
        ]);
        let verdict = out.lines().find(|l| l.starts_with("verdict: ")).unwrap().to_string();
        assert!(verdict.contains("Mann-Whitney U") && verdict.contains("95% CI"), "{out}");
        if verdict.contains("no significant difference") {
            return;
        }
        verdicts.push(verdict);
    }
    panic!("two comparisons of a command with itself both found a difference: {verdicts:?}");
}

#[test]
fn compare_errors_are_one_line() {
    let dir = tmp();
    let d = dir.path().to_str().unwrap();
    let bin = workload("diffwork");
    let cmd = format!("{} 10", bin.display());
    let e = fails(&["compare", "-n", "1", "--before", &cmd, "--after", &cmd, "--output-dir", d]);
    assert!(e.contains("at least 2"), "{e}");
    let e = fails(&["compare", "--before", "a | b", "--after", &cmd, "--output-dir", d]);
    assert!(e.contains("--before") && e.contains("sh -c"), "{e}");
    let e = fails(&["compare", "-n", "4", "--before", "/bin/false", "--after", &cmd, "--output-dir", d]);
    assert!(e.contains("exited with status 1"), "{e}");
    let e =
        fails(&["compare", "-n", "4", "--before", "/no/such/program", "--after", &cmd, "--output-dir", d]);
    assert!(e.contains("/no/such/program"), "{e}");
}
