//! `report --source FUNCTION`: a function's source lines with their samples (pprof -list), from the line
//! tables the recording keeps; the text from disk, else from a debuginfod server's source endpoint.

mod common;
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::Command;

/// The 1-based line of `hotlines.c` holding `marker`.
fn line_of(source: &Path, marker: &str) -> u64 {
    let text = std::fs::read_to_string(source).unwrap();
    text.lines().position(|l| l.contains(marker)).expect("marker in the source") as u64 + 1
}

/// (line, self, total) of every line of the one function in a `--source --format json` answer.
fn lines(v: &Value) -> Vec<(u64, i64, i64)> {
    let f = &v["functions"][0];
    f["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["line"].as_u64().unwrap(), l["self"].as_i64().unwrap(), l["total"].as_i64().unwrap()))
        .collect()
}

/// The hot line of `hot_loops` holds the most samples: 9 divisions for each of the cold line's, so 90%
/// of the two lines' samples (+-5 points: 1000 samples give a binomial sigma of 1 point; the loop's
/// own instructions land on the `for` lines and are left out of both).
/// `source` is the path the line table names, `text` where the file is now.
fn assert_hot_line(v: &Value, source: &Path, text: &Path) {
    let (hot, cold) = (line_of(text, "/* HOT */"), line_of(text, "/* COLD */"));
    let f = &v["functions"][0];
    assert_eq!(v["functions"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(f["name"], "hot_loops");
    assert_eq!(f["file"], source.to_str().unwrap());
    let ls = lines(v);
    let at = |n: u64| ls.iter().find(|l| l.0 == n).map_or(0, |l| l.1);
    let top = ls.iter().max_by_key(|l| l.1).unwrap();
    assert_eq!(top.0, hot, "the hot line holds the most samples: {ls:?}");
    let share = at(hot) as f64 / (at(hot) + at(cold)) as f64;
    assert!(
        (share - 0.9).abs() <= 0.05,
        "hot line share {share:.3} of hot+cold, expected 0.90 +-0.05: {ls:?}"
    );
    // Every sample of the function is on a line of its body: the lines add up to its self value exactly.
    let sum: i64 = ls.iter().map(|l| l.1).sum();
    assert_eq!(sum, f["self"].as_i64().unwrap());
    assert!(ls.iter().all(|l| (9..=18).contains(&l.0)), "lines outside hot_loops' body: {ls:?}");
    // A leaf function: its total is its self line by line, but for the samples taken in the kernel
    // (an interrupt or fault under it), under 5%.
    assert!(ls.iter().all(|l| l.1 <= l.2), "{ls:?}");
    let (own, total) = (f["self"].as_i64().unwrap(), f["total"].as_i64().unwrap());
    assert!(own <= total && (total - own) * 20 < total, "self {own} total {total}");
}

#[test]
fn the_hot_line_holds_the_most_samples_and_the_text_is_read_from_disk() {
    let dir = tmp();
    let bin = workload("hotlines");
    let source = root().join("tests/workloads/hotlines.c");
    let data = record(dir.path(), "hl", &["-F", "499"], &[bin.to_str().unwrap(), "2"]);
    let v: Value =
        serde_json::from_str(&ok(&["report", &data, "--source", "hot_loops", "--format", "json"])).unwrap();
    assert_hot_line(&v, &source, &source);
    assert_eq!(v["functions"][0]["source"], "disk");
    let hot = line_of(&source, "/* HOT */");
    let text_of = |n: u64| {
        v["functions"][0]["lines"].as_array().unwrap().iter().find(|l| l["line"] == n).unwrap()["text"]
            .clone()
    };
    assert_eq!(text_of(hot), "        a = a / 1.0000001 + 1e-9; /* HOT */");

    // Text: the hot line with its count, the lines around it with dots.
    let text = ok(&["report", &data, "--source", "hot_loops"]);
    let (_, own, total) = *lines(&v).iter().find(|l| l.0 == hot).unwrap();
    let row = format!("{own:>4} {total:>4}  {hot}:        a = a / 1.0000001 + 1e-9; /* HOT */");
    assert!(text.contains(&row), "{text}");
    assert!(text.starts_with(&format!("ROUTINE ======================== hot_loops in {}", source.display())));
    assert!(text.contains(&format!("   .    .  {}:    }}", hot + 1)), "{text}");

    // A pattern matching several functions prints each; one matching none is one line with close names.
    let both = ok(&["report", &data, "--source", "^(hot_loops|main)$"]);
    assert_eq!(both.matches("ROUTINE ====").count(), 2, "{both}");
    let e = fails(&["report", &data, "--source", "hot_lops"]);
    assert_eq!(e.trim_end(), "whyslow: error: no function matches 'hot_lops' (did you mean: hot_loops?)");
}

/// One GET answered: `path` gets `body`, anything else 404. Returns the base URL and the paths asked.
fn serve_once_per_request(
    path: String,
    body: Vec<u8>,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut first = String::new();
            let mut r = BufReader::new(s.try_clone().unwrap());
            r.read_line(&mut first).unwrap();
            // The rest of the header.
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let asked_path = first.split_whitespace().nth(1).unwrap_or("").to_string();
            seen.lock().unwrap().push(asked_path.clone());
            let reply = if asked_path == path {
                let mut h =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
                        .into_bytes();
                h.extend_from_slice(&body);
                h
            } else {
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
            };
            let _ = s.write_all(&reply);
            let _ = r.read_to_end(&mut Vec::new());
        }
    });
    (url, asked)
}

fn build_id(bin: &Path) -> String {
    let out = Command::new("readelf").arg("-n").arg(bin).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("build id").trim().to_string()
}

/// The program built in a directory whose source is then removed: without a server the lines come with
/// their counts and the reason; with one, the text comes from its `/buildid/ID/source/PATH` endpoint and
/// is cached where elfutils' client caches sources.
#[test]
fn a_source_not_on_disk_comes_from_debuginfod() {
    let dir = tmp();
    let build = dir.path().join("build");
    std::fs::create_dir(&build).unwrap();
    let workloads = root().join("tests/workloads");
    for f in ["hotlines.c", "common.h"] {
        std::fs::copy(workloads.join(f), build.join(f)).unwrap();
    }
    let source = build.join("hotlines.c");
    let bin = dir.path().join("hotlines");
    let st = Command::new("gcc").args(["-O2", "-g", "-o"]).arg(&bin).arg(&source).status().unwrap();
    assert!(st.success());
    let text = std::fs::read(&source).unwrap();
    let data = record(dir.path(), "hl", &["-F", "499"], &[bin.to_str().unwrap(), "2"]);
    let kept = dir.path().join("hotlines.c.kept");
    std::fs::rename(&source, &kept).unwrap();

    let report = |urls: Option<&str>| {
        let mut c = whyslow();
        c.args(["report", &data, "--source", "hot_loops", "--format", "json"]);
        c.env("DEBUGINFOD_CACHE_PATH", dir.path().join("cache"));
        match urls {
            Some(u) => c.env("DEBUGINFOD_URLS", u),
            None => c.env_remove("DEBUGINFOD_URLS"),
        };
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let v = report(None);
    assert_hot_line(&v, &source, &kept);
    let f = &v["functions"][0];
    assert_eq!(f["source"], Value::Null);
    let why = format!(
        "{} is not on this machine, and no debuginfod server is set (DEBUGINFOD_URLS)",
        source.display()
    );
    assert_eq!(f["source_error"], why);
    assert!(f["lines"].as_array().unwrap().iter().all(|l| l.get("text").is_none()));

    let id = build_id(&bin);
    let wanted = format!("/buildid/{id}/source{}", source.display());
    let (url, asked) = serve_once_per_request(wanted.clone(), text);
    let v = report(Some(&url));
    assert_hot_line(&v, &source, &kept);
    let f = &v["functions"][0];
    assert_eq!(f["source"], format!("debuginfod {url}"));
    let hot = line_of(&kept, "/* HOT */");
    let hot_text = f["lines"].as_array().unwrap().iter().find(|l| l["line"] == hot).unwrap()["text"].clone();
    assert_eq!(hot_text, "        a = a / 1.0000001 + 1e-9; /* HOT */");
    assert_eq!(*asked.lock().unwrap(), [wanted]);
    // Asked again: the cache answers.
    let cached = dir
        .path()
        .join("cache")
        .join(&id)
        .join(format!("source{}", source.display().to_string().replace('/', "##")));
    assert!(cached.is_file(), "{cached:?}");
    report(Some(&url));
    assert_eq!(asked.lock().unwrap().len(), 1);
}
