//! `whyslow top` on workloads with known CPU shares: one table per interval when stdout is not a
//! terminal, the hot function first with its share, processes chosen by pid, by name and all of them,
//! the alternate screen restored on a terminal, and bad input.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A workload started in the background, printing nothing we wait for; killed when dropped.
struct Running(Child);

impl Running {
    fn start(bin: &str, args: &[&str]) -> Running {
        let child = Command::new(workload(bin)).args(args).stdout(Stdio::null()).spawn().unwrap();
        // Let it reach its loop (the loader's frames are not what the tables are about).
        std::thread::sleep(std::time::Duration::from_millis(200));
        Running(child)
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tables of plain output: each header line and its rows as (self%, function).
fn tables(out: &str) -> Vec<(String, Vec<(f64, String)>)> {
    let mut t: Vec<(String, Vec<(f64, String)>)> = Vec::new();
    for line in out.lines() {
        if line.starts_with("whyslow top ") {
            t.push((line.to_string(), Vec::new()));
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if let (Some(last), [pct, _, _, _, name, ..]) = (t.last_mut(), &f[..]) {
            if let Some(Ok(p)) = pct.strip_suffix('%').map(str::parse) {
                last.1.push((p, name.to_string()));
            }
        }
    }
    t
}

fn share(rows: &[(f64, String)], name: &str) -> f64 {
    rows.iter().filter(|r| r.1 == name).map(|r| r.0).sum()
}

/// cpu_split burns 60/30/10 in burn_a/b/c: with `-d 3` three tables (one per second), each led by
/// burn_a, whose share of the three averages 60% within 6 points over the tables (a second at 999 Hz
/// is some hundreds of samples on a busy machine; the three are averaged).
#[test]
fn plain_output_is_one_table_per_interval_with_the_hot_function_first() {
    let w = Running::start("cpu_split", &["--wall", "30"]);
    let out = whyslow().args(["top", "-p", &w.pid(), "-d", "3"]).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let t = tables(&stdout);
    assert_eq!(t.len(), 3, "one table per interval:\n{stdout}");
    let mut a_share = 0.0;
    for (header, rows) in &t {
        // time, interval, samples
        assert!(
            header.contains(" UTC +") && header.contains(": interval ") && header.contains(" samples"),
            "{header}"
        );
        assert_eq!(rows.first().map(|r| r.1.as_str()), Some("burn_a"), "{header}\n{stdout}");
        let sum = share(rows, "burn_a") + share(rows, "burn_b") + share(rows, "burn_c");
        a_share += 100.0 * share(rows, "burn_a") / sum / t.len() as f64;
    }
    assert!((a_share - 60.0).abs() <= 6.0, "burn_a's share {a_share:.1}% vs 60%:\n{stdout}");
    assert!(stderr.contains(&format!("top of pid {}", w.pid())), "{stderr}");
}

/// `--comm RE` watches the processes whose name matches (and not the others), `-p` the one given; a
/// watched process that exits ends the run by itself with status 0 and says so.
#[test]
fn comm_and_pid_choose_the_processes() {
    let split = Running::start("cpu_split", &["--wall", "30"]);
    let spin = Running::start("spin", &["30"]);
    let funcs = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["top", "-d", "2", "--limit", "100"];
        all.extend_from_slice(args);
        let out = ok(&all);
        let t = tables(&out);
        assert_eq!(t.len(), 2, "{out}");
        t.iter().flat_map(|(_, rows)| rows.iter().map(|r| r.1.clone())).collect()
    };
    let by_name = funcs(&["--comm", "^cpu_spl"]);
    assert!(by_name.iter().any(|f| f == "burn_a"), "{by_name:?}");
    assert!(!by_name.iter().any(|f| f == "spin_forever"), "{by_name:?}");
    let by_pid = funcs(&["-p", &spin.pid()]);
    assert!(by_pid.iter().any(|f| f == "spin_forever"), "{by_pid:?}");
    assert!(!by_pid.iter().any(|f| f.starts_with("burn_")), "{by_pid:?}");
    // Every process: both are there.
    let all = funcs(&["-a"]);
    assert!(all.iter().any(|f| f == "spin_forever") && all.iter().any(|f| f == "burn_a"), "{all:?}");
    drop(split);
    // Without -d, a process that ends ends the run: 2 s of wall time, then at most 3 tables.
    let short = Running::start("spin", &["1.5"]);
    let out = whyslow().args(["top", "-p", &short.pid()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("exited"), "{stderr}");
    let n = tables(&String::from_utf8_lossy(&out.stdout)).len();
    assert!((1..=3).contains(&n), "{n} tables");
}

/// On a terminal (a pty from script(1)): the alternate screen is entered and left again at the end of
/// -d, the cursor shown again, and the table drawn with the keys under it.
#[test]
fn a_terminal_gets_the_alternate_screen_back() {
    let w = Running::start("cpu_split", &["--wall", "30"]);
    let cmd = format!("{} top -p {} -d 2.5", env!("CARGO_BIN_EXE_whyslow"), w.pid());
    let out = Command::new("script").args(["-qec", &cmd, "/dev/null"]).stdin(Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let (enter, leave) = (text.find("\x1b[?1049h").unwrap(), text.rfind("\x1b[?1049l").unwrap());
    // The cursor is shown again after it was hidden.
    let (hide, show) = (text.find("\x1b[?25l").unwrap(), text.rfind("\x1b[?25h").unwrap());
    assert!(enter < leave && hide < show, "{text:?}");
    let drawn = &text[enter..leave];
    assert!(
        drawn.contains("whyslow top ") && drawn.contains("burn_a") && drawn.contains("q quit"),
        "{drawn:?}"
    );
}

#[test]
fn bad_input_is_one_line() {
    let e = fails(&["top", "-p", "999999999", "-d", "1"]);
    assert!(e.contains("no such process: 999999999"), "{e}");
    let e = fails(&["top", "--comm", "[", "-d", "1"]);
    assert!(e.contains("--comm") && e.contains("not a regular expression"), "{e}");
    let e = fails(&["top", "--comm", "^no_such_process_name_x$", "-d", "1"]);
    assert!(e.contains("no running process"), "{e}");
    let e = fails(&["top"]);
    assert!(e.contains("-p PID"), "{e}");
    let e = fails(&["top", "-p", "1", "-i", "0"]);
    assert!(e.contains("interval"), "{e}");
    // Output read by a program that stops reading early is no error.
    let w = Running::start("spin", &["30"]);
    let mut c = whyslow()
        .args(["top", "-p", &w.pid(), "-i", "0.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(c.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("whyslow top "), "{first}");
    // The pipe is closed now (the reader was dropped): the next table ends whyslow with status 0.
    assert!(c.wait().unwrap().success());
}

/// `--offcpu` weighs by blocked time: a process that only sleeps in `nap` (200 naps of 50 ms) shows
/// under its off-CPU header with nap holding nearly all of each table's time (total%). A table a second
/// for what is left of 5 s once the probes are in (on a busy machine that takes a second or two, and the
/// first table may be short, even empty).
#[test]
fn offcpu_tables_show_where_the_process_blocks() {
    let w = Running::start("naps", &["200", "50"]);
    let out = ok(&["top", "-p", &w.pid(), "--offcpu", "-d", "5", "--limit", "100"]);
    let headers: Vec<&str> = out.lines().filter(|l| l.starts_with("whyslow top ")).collect();
    assert!(headers.len() >= 3, "{out}");
    assert!(headers.iter().all(|h| h.ends_with("off-cpu by self")), "{out}");
    // The rows of `nap`: its total share (third column) in each table.
    let nap: Vec<f64> = out
        .lines()
        .filter(|l| l.split_whitespace().nth(4) == Some("nap"))
        .map(|l| l.split_whitespace().nth(2).unwrap().trim_end_matches('%').parse().unwrap())
        .collect();
    assert!(nap.len() >= 2, "{out}");
    assert!(nap.iter().all(|&p| p >= 90.0), "{nap:?}\n{out}");
}

/// `--format json`: one JSON object per interval on its own line (NDJSON), the table's columns with
/// exact values: the shares are the values over the total, every function listed with `--limit` high
/// enough (their self values add up to the total), burn_a first at 60% of the three burners within 6
/// points averaged over the intervals, as the table says.
#[test]
fn json_is_one_line_per_interval_with_the_tables_columns() {
    let w = Running::start("cpu_split", &["--wall", "30"]);
    let out = whyslow()
        .args(["top", "-p", &w.pid(), "-d", "3", "--format", "json", "--limit", "10000"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert_eq!(lines.len(), 3, "one object per interval:\n{stdout}");
    let mut a_share = 0.0;
    let mut last_time = 0;
    for j in &lines {
        assert_eq!((&j["weigh"], &j["order"], &j["kernel"]), (&"cpu".into(), &"self".into(), &true.into()));
        let time = j["time_unix_ns"].as_u64().unwrap();
        assert!(time > last_time, "{j}");
        last_time = time;
        let total = j["total"].as_i64().unwrap();
        let funcs = j["functions"].as_array().unwrap();
        assert_eq!(j["more_functions"], 0);
        assert_eq!(funcs.iter().map(|f| f["self"].as_i64().unwrap()).sum::<i64>(), total, "{j}");
        for f in funcs {
            let (own, all) = (f["self"].as_i64().unwrap(), f["total"].as_i64().unwrap());
            assert!(own <= all && all <= total, "{f}");
            // Up to the last bit a JSON float keeps.
            let close =
                |k: &str, v: i64| (f[k].as_f64().unwrap() - 100.0 * v as f64 / total as f64).abs() < 1e-9;
            assert!(close("self_pct", own) && close("total_pct", all), "{f}");
        }
        assert_eq!(funcs[0]["name"], "burn_a", "{j}");
        let own = |n: &str| funcs.iter().find(|f| f["name"] == n).map_or(0, |f| f["self"].as_i64().unwrap());
        let sum = own("burn_a") + own("burn_b") + own("burn_c");
        a_share += 100.0 * own("burn_a") as f64 / sum as f64 / lines.len() as f64;
    }
    assert!((a_share - 60.0).abs() <= 6.0, "burn_a's share {a_share:.1}% vs 60%:\n{stdout}");
    assert!(stderr.contains(&format!("top of pid {}, a JSON line every 1.00s", w.pid())), "{stderr}");
}
