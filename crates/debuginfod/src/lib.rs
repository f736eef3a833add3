//! A debuginfod client: fetches the separate debug file of an ELF build id from the servers in
//! `DEBUGINFOD_URLS`, so a stripped binary whose debug file only a debuginfod server has still gets named.
//! It behaves like elfutils' client (`debuginfod-find`, libdebuginfod) and shares its cache.
//!
//! - Configuration ([`Options::from_env`]): `DEBUGINFOD_URLS` lists base URLs separated by spaces, tried in
//!   order; unset or empty means no client at all, so whyslow is offline unless a user opted in. The cache
//!   is `DEBUGINFOD_CACHE_PATH`, else `$HOME/.debuginfod_client_cache` if it exists (elfutils' old place),
//!   else `$XDG_CACHE_HOME/debuginfod_client`, else `$HOME/.cache/debuginfod_client`. `DEBUGINFOD_TIMEOUT`
//!   (seconds, default 90, 0 or less for none) bounds connecting, each read, and, as elfutils judges a
//!   stalled server, each period in which less than 100 KiB arrives. `DEBUGINFOD_MAXTIME` is a deadline for
//!   one whole fetch, `DEBUGINFOD_MAXSIZE` caps the download (whyslow keeps a 4 GiB cap when it is 0).
//!   Only `http://` and `https://` URLs are used (elfutils' `ima:` policy words and `file://` are skipped).
//! - Fetching ([`Client::fetch_debuginfo`]): a cached file is returned without network. Otherwise
//!   `GET {url}/buildid/{id}/debuginfo` on each URL in order: 200 takes the file, 404 tries the next. The
//!   body streams into a temporary file in the cache, its GNU build id is checked against the one asked
//!   for (a wrong or non-ELF file is an error and is not cached), then it is renamed into
//!   `<cache>/<id>/debuginfo`. When every server said 404 the miss is remembered as an empty file there,
//!   as elfutils does, and not asked again for `cache_miss_s` seconds (a control file in the cache, 600
//!   when absent), so a recording with 50 unknown modules does not ask 50 times each run. Timeouts and
//!   refused connections are not remembered: they say nothing about the build id.
//! - [`Client::fetch_all`] runs fetches on a bounded number of threads and reports [`Event`]s so a terminal
//!   can say what is being fetched.
//!
//! Must never touch the network when no URL is configured or the cache already answers, never build a
//! URL or path from an id that is not plain hex, never put an unverified file at a cache name, and never
//! hang past the timeout on a server that accepts and stays silent. It does not clean the cache (elfutils'
//! client does that for the shared one) and does not fetch executables.
//! - Sources ([`Client::fetch_source`]): `GET {url}/buildid/{id}/source/ABSOLUTE/PATH`, cached as elfutils
//!   caches them (`<cache>/<id>/source##abs##path`), misses remembered the same way. A source file has no
//!   build id to check; it is only bounded in size and time like a debug file.

mod cache;
mod download;
mod error;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use error::FetchError;

/// elfutils' default `DEBUGINFOD_TIMEOUT`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);
/// Cap on one download when none is configured: a hostile server cannot fill the disk.
pub const DEFAULT_MAX_SIZE: u64 = 4 << 30;

/// How a [`Client`] finds servers and where it keeps files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Base URLs, tried in order (`http://host:8002`, trailing `/` optional).
    pub urls: Vec<String>,
    /// Cache directory, shared with elfutils' client when it is the same path.
    pub cache: PathBuf,
    /// Bound on connecting, on each read, and on each period that must bring 100 KiB. `None`: no bound.
    pub timeout: Option<Duration>,
    /// Bound on one whole [`Client::fetch_debuginfo`] over all URLs. `None`: no bound. Checked between
    /// reads, so it can be overrun by at most one `timeout`.
    pub deadline: Option<Duration>,
    /// Largest file accepted, in bytes.
    pub max_size: u64,
}

impl Default for Options {
    /// No URLs, elfutils' default cache for this user, elfutils' 90 s timeout, no deadline, 4 GiB cap.
    fn default() -> Options {
        Options {
            urls: Vec::new(),
            cache: default_cache_dir(&|name| std::env::var(name).ok()),
            timeout: Some(DEFAULT_TIMEOUT),
            deadline: None,
            max_size: DEFAULT_MAX_SIZE,
        }
    }
}

impl Options {
    /// Options from the process environment as elfutils reads it; `None` when `DEBUGINFOD_URLS` has no URL.
    pub fn from_env() -> Option<Options> {
        Options::from_vars(|name| std::env::var(name).ok())
    }

    /// [`Options::from_env`] with the variables looked up by `var` (tests and services pass their own).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<Options> {
        let urls: Vec<String> = var("DEBUGINFOD_URLS")?
            .split_whitespace()
            // elfutils 0.190+ also takes `ima:` policy words in this list; they are not servers.
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
            .map(str::to_string)
            .collect();
        if urls.is_empty() {
            return None;
        }
        let number = |name: &str| var(name).and_then(|v| v.trim().parse::<i64>().ok());
        let secs = |n: i64| (n > 0).then(|| Duration::from_secs(n as u64));
        Some(Options {
            urls,
            cache: default_cache_dir(&var),
            timeout: number("DEBUGINFOD_TIMEOUT").map_or(Some(DEFAULT_TIMEOUT), secs),
            deadline: number("DEBUGINFOD_MAXTIME").and_then(secs),
            max_size: number("DEBUGINFOD_MAXSIZE").filter(|&n| n > 0).map_or(DEFAULT_MAX_SIZE, |n| n as u64),
        })
    }
}

/// elfutils' choice of cache directory; an empty variable counts as unset, a missing `$HOME` as `/`.
fn default_cache_dir(var: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(path) = set("DEBUGINFOD_CACHE_PATH") {
        return PathBuf::from(path);
    }
    let home = PathBuf::from(set("HOME").unwrap_or_else(|| "/".to_string()));
    let legacy = home.join(".debuginfod_client_cache");
    if legacy.is_dir() {
        return legacy;
    }
    match set("XDG_CACHE_HOME") {
        Some(xdg) => Path::new(&xdg).join("debuginfod_client"),
        None => home.join(".cache").join("debuginfod_client"),
    }
}

/// What is asked for a build id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Artifact {
    Debuginfo,
    /// A source file by the absolute path its line table names.
    Source(String),
}

/// What [`Client::fetch_all`] is doing, for a progress line.
#[derive(Debug)]
pub enum Event<'a> {
    /// Asking `url` for `id` (once per URL tried).
    Started { id: &'a str, url: &'a str },
    /// `id` is at `path`, `bytes` long; `cached` when no request was made.
    Done { id: &'a str, path: &'a Path, bytes: u64, cached: bool },
    /// `id` could not be had.
    Failed { id: &'a str, error: &'a FetchError },
}

/// A debuginfod client: servers, cache and limits. Cheap to share between threads.
#[derive(Debug)]
pub struct Client {
    options: Options,
    agent: ureq::Agent,
}

impl Client {
    /// A client configured from the environment; `None` (no client, no network) when `DEBUGINFOD_URLS` is
    /// unset or empty.
    pub fn from_env() -> Option<Client> {
        Options::from_env().map(Client::new)
    }

    /// A client with explicit servers, cache and limits (a service caching under its data dir, tests).
    pub fn new(options: Options) -> Client {
        let mut builder =
            ureq::AgentBuilder::new().user_agent(concat!("whyslow-debuginfod/", env!("CARGO_PKG_VERSION")));
        if let Some(t) = options.timeout {
            builder = builder.timeout_connect(t).timeout_read(t).timeout_write(t);
        }
        Client { options, agent: builder.build() }
    }

    /// The options this client runs with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The path of the separate debug file for `build_id_hex` (any case), fetched if not cached.
    pub fn fetch_debuginfo(&self, build_id_hex: &str) -> Result<PathBuf, FetchError> {
        self.fetch_reporting(build_id_hex, &|_| {})
    }

    /// The path of a cached copy of the source file `path` (absolute, as the line table of the file with
    /// this build id names it), fetched if not cached.
    pub fn fetch_source(&self, build_id_hex: &str, path: &str) -> Result<PathBuf, FetchError> {
        if !path.starts_with('/') || path.split('/').any(|c| c == "..") {
            return Err(FetchError::BadSourcePath { path: path.chars().take(200).collect() });
        }
        self.fetch(build_id_hex, &Artifact::Source(path.to_string()), &|_| {})
    }

    /// Fetches every id on up to `parallel` threads (at least one), reporting progress; results come back
    /// in the order of `ids`.
    pub fn fetch_all(
        &self,
        ids: &[String],
        parallel: usize,
        progress: impl Fn(&Event) + Sync,
    ) -> Vec<(String, Result<PathBuf, FetchError>)> {
        let next = AtomicUsize::new(0);
        let mut results: Vec<(usize, Result<PathBuf, FetchError>)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..parallel.clamp(1, ids.len().max(1)))
                .map(|_| {
                    scope.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(id) = ids.get(i) else { break done };
                            done.push((i, self.fetch_reporting(id, &progress)));
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                // A panic here is the progress callback's; pass it on rather than lose results silently.
                .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        results.sort_by_key(|(i, _)| *i);
        ids.iter().cloned().zip(results.into_iter().map(|(_, r)| r)).collect()
    }

    fn fetch_reporting(&self, id: &str, progress: &dyn Fn(&Event)) -> Result<PathBuf, FetchError> {
        let result = self.fetch(id, &Artifact::Debuginfo, progress);
        if let Err(error) = &result {
            progress(&Event::Failed { id, error });
        }
        result
    }

    fn fetch(
        &self,
        raw_id: &str,
        artifact: &Artifact,
        progress: &dyn Fn(&Event),
    ) -> Result<PathBuf, FetchError> {
        let id = validate_build_id(raw_id)?;
        let id = id.as_str();
        let cache = &self.options.cache;
        let name = cache::entry_name(artifact);
        match cache::lookup(cache, id, &name) {
            cache::Lookup::Hit(path) => {
                let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
                progress(&Event::Done { id, path: &path, bytes, cached: true });
                return Ok(path);
            }
            cache::Lookup::Miss { path, age_s, cache_miss_s } => {
                return Err(FetchError::CachedMiss { id: id.to_string(), path, age_s, cache_miss_s });
            }
            cache::Lookup::Unknown => {}
        }
        let deadline = self.options.deadline.map(|d| (Instant::now() + d, d));
        let mut first_error = None;
        for url in &self.options.urls {
            let base = url.trim_end_matches('/');
            progress(&Event::Started { id, url: base });
            match download::fetch_from(&self.agent, &self.options, base, id, artifact, deadline) {
                Ok(download::Answer::Found { path, bytes }) => {
                    progress(&Event::Done { id, path: &path, bytes, cached: false });
                    return Ok(path);
                }
                Ok(download::Answer::NotThere) => {}
                // Past the deadline no other server gets a turn either.
                Err(e @ FetchError::Deadline { .. }) => return Err(e),
                // Another server may still have it; the first failure is the one to report.
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        // Only a unanimous 404 is knowledge about the id worth remembering.
        cache::remember_miss(cache, id, &name);
        let tried = self.options.urls.clone();
        Err(match artifact {
            Artifact::Debuginfo => FetchError::NotFound { id: id.to_string(), tried },
            Artifact::Source(path) => {
                FetchError::SourceNotFound { id: id.to_string(), path: path.clone(), tried }
            }
        })
    }
}

/// The id in lowercase (elfutils' cache names), or why it is not a build id.
pub fn validate_build_id(id: &str) -> Result<String, FetchError> {
    let why = if id.is_empty() {
        Some("it is empty")
    } else if !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Some("it has a character that is not a hex digit")
    } else if !id.len().is_multiple_of(2) {
        Some("it has an odd number of hex digits")
    } else if !(2..=128).contains(&id.len()) {
        Some("it is longer than 128 hex digits")
    } else {
        None
    };
    match why {
        Some(why) => Err(FetchError::InvalidBuildId { id: id.chars().take(200).collect(), why }),
        None => Ok(id.to_ascii_lowercase()),
    }
}
