//! Configuration read the way elfutils' client reads its environment.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use whyslow_debuginfod::{validate_build_id, Options, DEFAULT_MAX_SIZE, DEFAULT_TIMEOUT};

fn from(vars: &[(&str, &str)]) -> Option<Options> {
    let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Options::from_vars(|name| vars.get(name).cloned())
}

#[test]
fn no_urls_means_no_client() {
    assert_eq!(from(&[]), None);
    assert_eq!(from(&[("DEBUGINFOD_URLS", "")]), None);
    assert_eq!(from(&[("DEBUGINFOD_URLS", "   ")]), None);
}

#[test]
fn urls_in_order_and_elfutils_defaults() {
    let o = from(&[
        ("DEBUGINFOD_URLS", " https://debuginfod.example  http://127.0.0.1:8002/ ima:ignore "),
        ("HOME", "/nonexistent-home"),
    ])
    .unwrap();
    assert_eq!(o.urls, ["https://debuginfod.example", "http://127.0.0.1:8002/"]);
    assert_eq!(o.cache, PathBuf::from("/nonexistent-home/.cache/debuginfod_client"));
    assert_eq!(o.timeout, Some(DEFAULT_TIMEOUT));
    assert_eq!(o.timeout, Some(Duration::from_secs(90)));
    assert_eq!(o.deadline, None);
    assert_eq!(o.max_size, DEFAULT_MAX_SIZE);
}

#[test]
fn cache_path_precedence() {
    let urls = ("DEBUGINFOD_URLS", "http://h");
    let cache = |vars: &[(&str, &str)]| from(&[&[urls], vars].concat()).unwrap().cache;
    assert_eq!(
        cache(&[("DEBUGINFOD_CACHE_PATH", "/c"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]),
        PathBuf::from("/c")
    );
    assert_eq!(
        cache(&[("DEBUGINFOD_CACHE_PATH", ""), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]),
        PathBuf::from("/x/debuginfod_client")
    );
    assert_eq!(
        cache(&[("XDG_CACHE_HOME", ""), ("HOME", "/h")]),
        PathBuf::from("/h/.cache/debuginfod_client")
    );
    assert_eq!(cache(&[]), PathBuf::from("/.cache/debuginfod_client"));
    // elfutils' old cache wins over XDG when it exists.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".debuginfod_client_cache")).unwrap();
    let h = home.path().to_str().unwrap();
    assert_eq!(cache(&[("XDG_CACHE_HOME", "/x"), ("HOME", h)]), home.path().join(".debuginfod_client_cache"));
}

#[test]
fn timeout_deadline_and_size_from_the_environment() {
    let o = from(&[
        ("DEBUGINFOD_URLS", "http://h"),
        ("DEBUGINFOD_TIMEOUT", "7"),
        ("DEBUGINFOD_MAXTIME", "120"),
        ("DEBUGINFOD_MAXSIZE", "1000"),
    ])
    .unwrap();
    assert_eq!(
        (o.timeout, o.deadline, o.max_size),
        (Some(Duration::from_secs(7)), Some(Duration::from_secs(120)), 1000)
    );
    // elfutils: zero or negative means no timeout; 0 means no size limit (we keep our cap).
    let o = from(&[
        ("DEBUGINFOD_URLS", "http://h"),
        ("DEBUGINFOD_TIMEOUT", "0"),
        ("DEBUGINFOD_MAXTIME", "0"),
        ("DEBUGINFOD_MAXSIZE", "0"),
    ])
    .unwrap();
    assert_eq!((o.timeout, o.deadline, o.max_size), (None, None, DEFAULT_MAX_SIZE));
    let o = from(&[("DEBUGINFOD_URLS", "http://h"), ("DEBUGINFOD_TIMEOUT", "-1")]).unwrap();
    assert_eq!(o.timeout, None);
    // Garbage is not "no timeout": the default stands.
    let o = from(&[("DEBUGINFOD_URLS", "http://h"), ("DEBUGINFOD_TIMEOUT", "soon")]).unwrap();
    assert_eq!(o.timeout, Some(DEFAULT_TIMEOUT));
}

#[test]
fn build_ids_are_lowercased() {
    assert_eq!(validate_build_id("DEADbeef").unwrap(), "deadbeef");
    assert!(validate_build_id("dead/beef").is_err());
}
