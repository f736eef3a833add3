//! `whyslow record --load` and `compare --load` with our HTTP server (tests/workloads/httpserv.c) and wrk:
//! requests/s parsed, the server stopped cleanly, its request handler in the profile, and the errors of a
//! server that never becomes ready or dies.

mod common;
use common::*;
use serde_json::Value;

fn have_wrk() -> bool {
    let found = std::process::Command::new("wrk").arg("--version").output().is_ok();
    assert!(found, "wrk is needed (scripts/deps.sh installs it)");
    found
}

/// Processes whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

#[test]
fn record_under_wrk_load_parses_throughput_and_profiles_the_handler() {
    have_wrk();
    let _alone = exclusive();
    let dir = tmp();
    let data = dir.path().join("srv.data");
    let server = workload("httpserv");
    let srv = server.to_str().unwrap();
    let url = "http://127.0.0.1:18431/";
    let out = whyslow()
        .args(["record", "-o", data.to_str().unwrap(), "--limit", "5"])
        .args(["--load", &format!("wrk -t2 -c16 -d2s --latency {url}"), "--ready-port", "18431"])
        .args(["--", srv, "18431"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}\n{stdout}");
    // wrk's own output, then what whyslow read from it.
    assert!(
        stdout.contains(&format!("Running 2s test @ {url}")) && stdout.contains("Requests/sec:"),
        "{stdout}"
    );
    let load = stdout.lines().find(|l| l.starts_with("load: wrk: ")).unwrap_or_else(|| panic!("{stdout}"));
    let rps: f64 = load["load: wrk: ".len()..].split_whitespace().next().unwrap().parse().unwrap();
    let wrk_rps: f64 =
        stdout.lines().find_map(|l| l.strip_prefix("Requests/sec:")).unwrap().trim().parse().unwrap();
    assert!(rps > 100.0 && (rps - wrk_rps).abs() <= 0.5, "{rps} vs {wrk_rps}");
    assert!(load.contains("latency avg") && load.contains("p99"), "{load}");
    // Stopped by SIGTERM, exited cleanly, and nothing is left running.
    assert!(stderr.contains("httpserv: stopped after"), "{stderr}");
    assert!(stdout.contains("then stopped (SIGTERM), exit status 0"), "{stdout}");
    assert!(processes_running(&[srv, "18431"]).is_empty(), "the server is still running");
    // The handler burns most of the server's CPU time.
    let r: Value = report_json(data.to_str().unwrap(), &[]);
    let handler = total_pct(&r, "handle_request");
    assert!(handler > 20.0, "handle_request has {handler:.1}% of the samples");
    assert!(r["total_samples"].as_i64().unwrap() > 100);
}

#[test]
fn a_server_that_never_listens_is_an_error_and_is_stopped() {
    let dir = tmp();
    let data = dir.path().join("x.data");
    let e = fails(&[
        "record",
        "-o",
        data.to_str().unwrap(),
        "--load",
        "wrk -d1s http://127.0.0.1:18432/",
        "--ready-port",
        "18432",
        "--ready-timeout",
        "1",
        "--",
        "sleep",
        "31.5",
    ]);
    assert!(
        e.contains("did not accept connections on 127.0.0.1:18432 within 1.0 s (--ready-timeout)"),
        "{e}"
    );
    assert!(processes_running(&["sleep", "31.5"]).is_empty(), "the server is still running");
    assert!(!data.exists());
}

#[test]
fn a_server_that_exits_early_or_dies_under_load_is_an_error() {
    have_wrk();
    let _alone = exclusive();
    let dir = tmp();
    let data = dir.path().join("x.data");
    let e = fails(&[
        "record",
        "-o",
        data.to_str().unwrap(),
        "--load",
        "wrk -d1s http://127.0.0.1:18433/",
        "--ready-port",
        "18433",
        "--",
        "false",
    ]);
    assert!(e.contains("the server exited with status 1 before it was ready"), "{e}");
    // httpserv PORT N exits with status 3 after N requests.
    let srv = workload("httpserv");
    let e = fails(&[
        "record",
        "-o",
        data.to_str().unwrap(),
        "--load",
        "wrk -t1 -c4 -d5s http://127.0.0.1:18434/",
        "--ready-port",
        "18434",
        "--",
        srv.to_str().unwrap(),
        "18434",
        "300",
    ]);
    assert!(e.contains("the server exited with status 3 while the load ran"), "{e}");
    // Something else already listens on the port: readiness would mean nothing.
    let _taken = std::net::TcpListener::bind("127.0.0.1:18436").unwrap();
    let e = fails(&[
        "record",
        "-o",
        data.to_str().unwrap(),
        "--load",
        "wrk -d1s http://127.0.0.1:18436/",
        "--ready-port",
        "18436",
        "--",
        srv.to_str().unwrap(),
        "18436",
    ]);
    assert!(e.contains("port 18436 already accepts connections"), "{e}");
    let e = fails(&["record", "-o", data.to_str().unwrap(), "--load", "wrk http://x/", "--", "true"]);
    assert!(e.contains("--ready-port PORT or --ready-delay SECONDS"), "{e}");
    let e = fails(&[
        "record",
        "-o",
        data.to_str().unwrap(),
        "--load",
        "wrk http://x/",
        "--ready-delay",
        "0.1",
        "-p",
        "1",
    ]);
    assert!(e.contains("needs the server command"), "{e}");
}

/// The server with 1 unit of work per request against the same server doing 4: 6 runs per side under
/// wrk, requests/s parsed per run, a significant drop of throughput (expected about -60%; asserted below
/// -30%), and the handler's share of the server's CPU time grows.
#[test]
fn compare_under_load_finds_the_throughput_drop() {
    have_wrk();
    let _alone = exclusive();
    let dir = tmp();
    let bin = workload("httpserv");
    let (before, after) = (format!("{} 18435 0 1", bin.display()), format!("{} 18435 0 4", bin.display()));
    let out = ok(&[
        "compare",
        "-n",
        "6",
        "--before",
        &before,
        "--after",
        &after,
        "--load",
        "wrk -t1 -c8 -d1s http://127.0.0.1:18435/",
        "--ready-port",
        "18435",
        "--output-dir",
        dir.path().to_str().unwrap(),
        "--format",
        "json",
        "--limit",
        "50",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let rps = v["measures"].as_array().unwrap().iter().find(|m| m["name"] == "requests/s").unwrap();
    for side in ["before", "after"] {
        let vals = rps[side].as_array().unwrap();
        assert_eq!(vals.len(), 6);
        assert!(vals.iter().all(|x| x.as_f64().unwrap() > 100.0), "{rps}");
    }
    assert_eq!(v["verdict"]["measure"], "requests/s");
    assert_eq!(v["verdict"]["significant"], true, "{}", v["verdict"]);
    let change = rps["change"].as_f64().unwrap();
    assert!(change < -0.3, "requests/s changed by {:.1}%", 100.0 * change);
    let cpu = v["measures"].as_array().unwrap().iter().find(|m| m["name"] == "cpu time").unwrap();
    assert!(cpu["before"].as_array().unwrap().iter().all(|x| x.as_f64().unwrap() > 0.05), "{cpu}");
    let handler =
        v["diff"]["functions"].as_array().unwrap().iter().find(|f| f["name"] == "handle_request").unwrap();
    let (pb, pa) =
        (handler["self_pct_before"].as_f64().unwrap(), handler["self_pct_after"].as_f64().unwrap());
    assert!(pa > pb, "handle_request's share {pb:.1}% -> {pa:.1}%");
    assert!(dir.path().join("before-1.load.txt").exists());
    for cmd in [&before, &after] {
        let argv: Vec<&str> = cmd.split(' ').collect();
        assert!(processes_running(&argv).is_empty(), "a server is still running");
    }
}
