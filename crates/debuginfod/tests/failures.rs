//! Servers that misbehave and ids that are not ids: each fails in bounded time with one line saying what
//! to do, and leaves nothing at a cache name.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{build_split, Reply, Responder};
use whyslow_debuginfod::{Client, FetchError, Options};

const ID: &str = "aa00000000000000000000000000000000000001";

fn client(urls: Vec<String>, cache: &Path, timeout: Duration) -> Client {
    Client::new(Options { urls, cache: cache.to_path_buf(), timeout: Some(timeout), ..Options::default() })
}

/// Every entry under the cache, as relative paths: what a failed fetch must not leave.
fn cache_entries(cache: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(cache) else { return out };
    for e in dir {
        let e = e.unwrap();
        out.push(e.file_name().into_string().unwrap());
        if e.path().is_dir() {
            for f in std::fs::read_dir(e.path()).unwrap() {
                out.push(format!("{}/{}", out.last().unwrap(), f.unwrap().file_name().to_string_lossy()));
            }
        }
    }
    out
}

fn assert_one_line(e: &FetchError) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "not one line: {s}");
    s
}

#[test]
fn a_server_that_accepts_and_never_answers_times_out() {
    let tmp = tempfile::tempdir().unwrap();
    let silent = Responder::start(Reply::Silent);
    let c = client(vec![silent.url.clone()], tmp.path(), Duration::from_secs(1));
    let start = Instant::now();
    let err = c.fetch_debuginfo(ID).unwrap_err();
    let took = start.elapsed();
    eprintln!("silent server: failed after {took:?}");
    assert!(matches!(err, FetchError::Timeout { .. }), "{err:?}");
    assert_eq!(
        assert_one_line(&err),
        format!(
            "debuginfod {} did not answer within 1 s (DEBUGINFOD_TIMEOUT); is the server up and reachable?",
            silent.url
        )
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert_eq!(silent.requests(), 1);
    // A timeout says nothing about the id: no miss is remembered.
    assert_eq!(cache_entries(tmp.path()), Vec::<String>::new());
}

#[test]
fn a_closed_port_fails_fast() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", common::free_port());
    let c = client(vec![url.clone()], tmp.path(), Duration::from_secs(5));
    let start = Instant::now();
    let err = c.fetch_debuginfo(ID).unwrap_err();
    eprintln!("closed port: failed after {:?}", start.elapsed());
    assert!(start.elapsed() < Duration::from_secs(5));
    let line = assert_one_line(&err);
    assert!(line.starts_with(&format!("debuginfod {url} could not be reached: ")), "{line}");
    assert!(line.contains("refused") && line.contains("DEBUGINFOD_URLS"), "{line}");
    assert_eq!(cache_entries(tmp.path()), Vec::<String>::new());
}

#[test]
fn a_file_with_another_build_id_is_refused_and_not_cached() {
    let tmp = tempfile::tempdir().unwrap();
    let other =
        build_split(tmp.path(), &tmp.path().join("d"), "other", "bb00000000000000000000000000000000000002");
    let liar = Responder::start(Reply::Body(std::fs::read(&other.debug).unwrap()));
    let cache = tmp.path().join("cache");
    let c = client(vec![liar.url.clone()], &cache, Duration::from_secs(5));
    let err = c.fetch_debuginfo(ID).unwrap_err();
    assert!(matches!(err, FetchError::WrongBuildId { .. }), "{err:?}");
    let line = assert_one_line(&err);
    assert!(line.contains(&liar.url) && line.contains(ID) && line.contains(&other.build_id), "{line}");
    assert_eq!(cache_entries(&cache), Vec::<String>::new(), "a refused file left something in the cache");

    // Not remembered as a miss either: the next attempt asks again.
    c.fetch_debuginfo(ID).unwrap_err();
    assert_eq!(liar.requests(), 2);
}

#[test]
fn a_file_that_is_not_elf_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let html = Responder::start(Reply::Body(b"<html>not found, really</html>".to_vec()));
    let c = client(vec![html.url.clone()], tmp.path(), Duration::from_secs(5));
    let err = c.fetch_debuginfo(ID).unwrap_err();
    assert!(matches!(err, FetchError::NotElf { .. }), "{err:?}");
    assert_one_line(&err);
    assert_eq!(cache_entries(tmp.path()), Vec::<String>::new());
}

#[test]
fn a_declared_size_over_the_cap_is_refused_before_reading() {
    let tmp = tempfile::tempdir().unwrap();
    let huge = Responder::start(Reply::Declares(5 << 30));
    let c = client(vec![huge.url.clone()], tmp.path(), Duration::from_secs(30));
    let start = Instant::now();
    let err = c.fetch_debuginfo(ID).unwrap_err();
    assert!(matches!(err, FetchError::TooLarge { limit, .. } if limit == 4 << 30), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(assert_one_line(&err).contains("DEBUGINFOD_MAXSIZE"));
}

#[test]
fn a_body_over_the_cap_is_cut_off() {
    let tmp = tempfile::tempdir().unwrap();
    let big = Responder::start(Reply::Body(vec![0x7f; 200_000]));
    let c = Client::new(Options {
        urls: vec![big.url.clone()],
        cache: tmp.path().to_path_buf(),
        timeout: Some(Duration::from_secs(5)),
        max_size: 100_000,
        ..Options::default()
    });
    let err = c.fetch_debuginfo(ID).unwrap_err();
    assert!(matches!(err, FetchError::TooLarge { limit: 100_000, .. }), "{err:?}");
    assert_eq!(cache_entries(tmp.path()), Vec::<String>::new());
}

#[test]
fn a_trickling_server_meets_the_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let slow = Responder::start(Reply::Trickle(Duration::from_millis(100)));
    let c = Client::new(Options {
        urls: vec![slow.url.clone()],
        cache: tmp.path().to_path_buf(),
        timeout: Some(Duration::from_secs(30)),
        deadline: Some(Duration::from_secs(1)),
        ..Options::default()
    });
    let start = Instant::now();
    let err = c.fetch_debuginfo(ID).unwrap_err();
    eprintln!("trickle with 1 s deadline: failed after {:?}", start.elapsed());
    assert!(matches!(err, FetchError::Deadline { .. }), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(20));
    assert!(assert_one_line(&err).contains("DEBUGINFOD_MAXTIME"));
}

#[test]
fn a_trickling_server_is_judged_stalled_like_elfutils_does() {
    let tmp = tempfile::tempdir().unwrap();
    let slow = Responder::start(Reply::Trickle(Duration::from_millis(100)));
    let c = client(vec![slow.url.clone()], tmp.path(), Duration::from_secs(1));
    let start = Instant::now();
    let err = c.fetch_debuginfo(ID).unwrap_err();
    eprintln!("trickle with 1 s timeout: failed after {:?}", start.elapsed());
    assert!(matches!(err, FetchError::Stalled { .. }), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_server_error_names_the_status() {
    let tmp = tempfile::tempdir().unwrap();
    let broken = Responder::start(Reply::Status(503));
    let c = client(vec![broken.url.clone()], tmp.path(), Duration::from_secs(5));
    let err = c.fetch_debuginfo(ID).unwrap_err();
    assert!(matches!(err, FetchError::Http { status: 503, .. }), "{err:?}");
    assert!(assert_one_line(&err).contains(&broken.url));
    // A failing server is not a miss.
    assert_eq!(cache_entries(tmp.path()), Vec::<String>::new());
}

#[test]
fn invalid_build_ids_are_rejected_without_a_request() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Responder::start(Reply::Status(404));
    let c = client(vec![server.url.clone()], tmp.path(), Duration::from_secs(5));
    let long = "ab".repeat(65);
    for bad in ["", "a", "abc", "../../etc/passwd", "ab/cd", "zz", "ab cd", "ab%2f", "éé", long.as_str()] {
        let err = c.fetch_debuginfo(bad).unwrap_err();
        assert!(matches!(err, FetchError::InvalidBuildId { .. }), "{bad:?}: {err:?}");
        assert_one_line(&err);
    }
    assert_eq!(server.requests(), 0);
    assert_eq!(cache_entries(tmp.path()), Vec::<String>::new());
    // The longest and shortest valid ids reach the server.
    c.fetch_debuginfo(&"ab".repeat(64)).unwrap_err();
    c.fetch_debuginfo("AB").unwrap_err();
    assert_eq!(
        *server.paths.lock().unwrap(),
        [format!("/buildid/{}/debuginfo", "ab".repeat(64)), "/buildid/ab/debuginfo".to_string()]
    );
}

#[test]
fn an_unwritable_cache_names_the_path_and_the_variable() {
    let tmp = tempfile::tempdir().unwrap();
    let split = build_split(tmp.path(), &tmp.path().join("d"), "p", ID);
    let server = Responder::start(Reply::Body(std::fs::read(&split.debug).unwrap()));
    // Tests run as root, which ignores permission bits: a path under a regular file cannot be created.
    let blocker = tmp.path().join("file");
    std::fs::write(&blocker, "").unwrap();
    let cache = blocker.join("cache");
    let c = client(vec![server.url.clone()], &cache, Duration::from_secs(5));
    let err = c.fetch_debuginfo(ID).unwrap_err();
    assert!(matches!(err, FetchError::Cache { .. }), "{err:?}");
    let line = assert_one_line(&err);
    assert!(line.contains(cache.to_str().unwrap()) && line.contains("DEBUGINFOD_CACHE_PATH"), "{line}");
}

#[test]
fn fetch_all_keeps_order_and_reports_each_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Responder::start(Reply::Status(404));
    let c = client(vec![server.url.clone()], tmp.path(), Duration::from_secs(5));
    let ids: Vec<String> =
        (0..7).map(|i| format!("{i:02x}{}", "cd".repeat(19))).chain(["bad".to_string()]).collect();
    let failed = std::sync::atomic::AtomicUsize::new(0);
    let results = c.fetch_all(&ids, 3, |e| {
        if let whyslow_debuginfod::Event::Failed { .. } = e {
            failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert_eq!(results.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(), ids);
    assert!(results[..7].iter().all(|(_, r)| matches!(r, Err(FetchError::NotFound { .. }))));
    assert!(matches!(results[7].1, Err(FetchError::InvalidBuildId { .. })));
    assert_eq!(failed.into_inner(), 8);
    assert_eq!(server.requests(), 7);
}
