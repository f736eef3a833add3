//! Against the real elfutils server and client: what `debuginfod -F` serves arrives byte for byte, lands
//! where `debuginfod-find` looks, and is served from the cache without a server afterwards.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{build_split, Debuginfod, Reply, Responder};
use whyslow_debuginfod::{Client, Event, Options};

fn options(urls: Vec<String>, cache: &Path) -> Options {
    Options { urls, cache: cache.to_path_buf(), timeout: Some(Duration::from_secs(10)), ..Options::default() }
}

/// elfutils' client with only the given cache and URLs, nothing from this machine's profile.
fn debuginfod_find(cache: &Path, urls: &str, id: &str) -> std::process::Output {
    common::require("debuginfod-find");
    Command::new("debuginfod-find")
        .args(["debuginfo", id])
        .env("DEBUGINFOD_CACHE_PATH", cache)
        .env("DEBUGINFOD_URLS", urls)
        .env("DEBUGINFOD_TIMEOUT", "5")
        .output()
        .expect("cannot run debuginfod-find: apt-get install debuginfod")
}

#[test]
fn fetches_from_elfutils_debuginfod_and_shares_the_cache_with_debuginfod_find() {
    let tmp = tempfile::tempdir().unwrap();
    let served = tmp.path().join("served");
    let split = build_split(tmp.path(), &served, "hello", "5eed00000000000000000000000000000000cafe");
    let mut server = Debuginfod::start(&served, &tmp.path().join("db.sqlite"), &split.build_id);
    let cache = tmp.path().join("cache");
    let client = Client::new(options(vec![server.url.clone()], &cache));

    let events = std::sync::Mutex::new(Vec::new());
    let results = client.fetch_all(std::slice::from_ref(&split.build_id), 2, |e| {
        events.lock().unwrap().push(match e {
            Event::Started { url, .. } => format!("started {url}"),
            Event::Done { bytes, cached, .. } => format!("done {bytes} cached={cached}"),
            Event::Failed { error, .. } => format!("failed {error}"),
        })
    });
    let path = results[0].1.as_ref().expect("fetch from debuginfod").clone();
    let debug_bytes = std::fs::read(&split.debug).unwrap();
    assert_eq!(path, cache.join(&split.build_id).join("debuginfo"));
    assert_eq!(std::fs::read(&path).unwrap(), debug_bytes, "fetched file differs from the debug file");
    let size = debug_bytes.len();
    assert_eq!(
        *events.lock().unwrap(),
        [format!("started {}", server.url), format!("done {size} cached=false")]
    );
    let elf = std::fs::read(&path).unwrap();
    let parsed = object::File::parse(&*elf).unwrap();
    let id: String =
        object::Object::build_id(&parsed).unwrap().unwrap().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(id, split.build_id);
    // Nothing but the entry is left behind (no temporary files).
    let mut names: Vec<_> =
        std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, [split.build_id.as_str()]);

    // With the server gone, the cache answers alone.
    server.stop();
    assert_eq!(client.fetch_debuginfo(&split.build_id.to_uppercase()).unwrap(), path);

    // elfutils' client finds our file in the shared cache without a server: it needs some URL set to
    // look at all, so give it a port nothing listens on.
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let out = debuginfod_find(&cache, &dead, &split.build_id);
    assert!(out.status.success(), "debuginfod-find failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), path.to_str().unwrap());
}

#[test]
fn reads_what_debuginfod_find_cached_and_tries_urls_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let served = tmp.path().join("served");
    let split = build_split(tmp.path(), &served, "prog", "0123456789abcdef0123456789abcdef01234567");
    let server = Debuginfod::start(&served, &tmp.path().join("db.sqlite"), &split.build_id);
    let debug_bytes = std::fs::read(&split.debug).unwrap();

    // 404 first, then the real server: the second URL serves it.
    let missing = Responder::start(Reply::Status(404));
    let cache = tmp.path().join("ours");
    let client = Client::new(options(vec![format!("{}/", missing.url), server.url.clone()], &cache));
    let path = client.fetch_debuginfo(&split.build_id).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), debug_bytes);
    assert_eq!(*missing.paths.lock().unwrap(), [format!("/buildid/{}/debuginfo", split.build_id)]);

    // The real server first: the second URL is never asked.
    let never = Responder::start(Reply::Status(500));
    let client = Client::new(options(vec![server.url.clone(), never.url.clone()], &tmp.path().join("c2")));
    client.fetch_debuginfo(&split.build_id).unwrap();
    assert_eq!(never.requests(), 0);

    // A file elfutils' client downloaded is served to us from its cache without a request.
    let theirs = tmp.path().join("theirs");
    let out = debuginfod_find(&theirs, &server.url, &split.build_id);
    assert!(out.status.success(), "debuginfod-find failed: {}", String::from_utf8_lossy(&out.stderr));
    let watched = Responder::start(Reply::Status(404));
    let client = Client::new(options(vec![watched.url.clone()], &theirs));
    let path = client.fetch_debuginfo(&split.build_id).unwrap();
    assert_eq!(std::fs::read(path).unwrap(), debug_bytes);
    assert_eq!(watched.requests(), 0);
}

#[test]
fn a_miss_is_remembered_in_the_way_debuginfod_find_honours() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let server = Responder::start(Reply::Status(404));
    let client = Client::new(options(vec![server.url.clone()], &cache));
    let id = "00112233445566778899aabbccddeeff00112233";

    let err = client.fetch_debuginfo(id).unwrap_err().to_string();
    assert!(err.contains("no debuginfod server has build id") && err.contains(&server.url), "{err}");
    assert_eq!(server.requests(), 1);
    let entry = cache.join(id).join("debuginfo");
    assert_eq!(std::fs::metadata(&entry).unwrap().len(), 0, "a miss is an empty file, as elfutils writes");

    // Asked again within cache_miss_s: neither we nor elfutils' client ask the server.
    let err = client.fetch_debuginfo(id).unwrap_err().to_string();
    assert!(err.contains("cache_miss_s = 600") && err.contains(entry.to_str().unwrap()), "{err}");
    let out = debuginfod_find(&cache, &server.url, id);
    assert!(!out.status.success());
    assert_eq!(server.requests(), 1, "the remembered miss was asked again");

    // Older than cache_miss_s: asked again, and remembered afresh.
    std::fs::write(cache.join("cache_miss_s"), "60\n").unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(61);
    std::fs::File::options().write(true).open(&entry).unwrap().set_modified(old).unwrap();
    client.fetch_debuginfo(id).unwrap_err();
    assert_eq!(server.requests(), 2);
    let age = std::fs::metadata(&entry).unwrap().modified().unwrap().elapsed().unwrap();
    assert!(age < Duration::from_secs(30), "the renewed miss is not fresh: {age:?}");
}

/// elfutils' server serves the sources its line tables name: what arrives is the file, cached where
/// `debuginfod-find source` looks; a path it does not serve is a one-line miss, and a relative path is
/// refused without a request.
#[test]
fn sources_come_from_the_source_endpoint_and_share_the_cache() {
    let tmp = tempfile::Builder::new().prefix("whyslow-source").tempdir().unwrap();
    let served = tmp.path().join("served");
    let split = build_split(tmp.path(), &served, "hello", "5eed0000000000000000000000000000000050c0");
    let server = Debuginfod::start(&served, &tmp.path().join("db.sqlite"), &split.build_id);
    let cache = tmp.path().join("cache");
    let client = Client::new(options(vec![server.url.clone()], &cache));
    let src = tmp.path().join("hello.c");
    let path = client.fetch_source(&split.build_id, src.to_str().unwrap()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(&src).unwrap());
    let name = format!("source{}", src.to_str().unwrap().replace('/', "##"));
    assert_eq!(path, cache.join(&split.build_id).join(name));

    let out = Command::new("debuginfod-find")
        .args(["source", &split.build_id, src.to_str().unwrap()])
        .env("DEBUGINFOD_CACHE_PATH", &cache)
        .env("DEBUGINFOD_URLS", format!("http://127.0.0.1:{}", common::free_port()))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), path.to_str().unwrap());

    let e = client.fetch_source(&split.build_id, "/nonexistent/x.c").unwrap_err().to_string();
    assert!(e.starts_with("no debuginfod server has the source /nonexistent/x.c of build id"), "{e}");
    let e = client.fetch_source(&split.build_id, "x.c").unwrap_err().to_string();
    assert_eq!(e, "'x.c' is not an absolute source path a debuginfod server can be asked for");
}
