//! The ways one fetch can fail, each said in one line that names the server or path and what to do.
//!
//! Must never hold a half-written file or a handle: an error is only words and the facts behind them.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Why [`crate::Client::fetch_debuginfo`] gave no file.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The id is not a build id; nothing was asked and no path was built from it.
    #[error("'{id}' is not a build id: {why} (a GNU build id is 2 to 128 hex digits, an even count)")]
    InvalidBuildId { id: String, why: &'static str },

    /// Every server answered 404. The miss is remembered in the cache for `cache_miss_s`.
    #[error("no debuginfod server has build id {id} (tried: {}); the binary's debug info was never published there", tried.join(", "))]
    NotFound { id: String, tried: Vec<String> },

    /// Every server answered 404 for a source file. The miss is remembered like a debug file's.
    #[error("no debuginfod server has the source {path} of build id {id} (tried: {})", tried.join(", "))]
    SourceNotFound { id: String, path: String, tried: Vec<String> },

    /// A source path that is not absolute or climbs with `..`: nothing was asked.
    #[error("'{path}' is not an absolute source path a debuginfod server can be asked for")]
    BadSourcePath { path: String },

    /// A server said 404 recently and the cache still remembers it, so nothing was asked.
    #[error(
        "no debuginfod server had build id {id} {age_s} s ago (a miss remembered for cache_miss_s = {cache_miss_s} s); delete {} to ask again",
        path.display()
    )]
    CachedMiss { id: String, path: PathBuf, age_s: u64, cache_miss_s: u64 },

    /// Connecting, or one read, took longer than the timeout.
    #[error("debuginfod {url} did not answer within {} s (DEBUGINFOD_TIMEOUT); is the server up and reachable?", secs(*.timeout))]
    Timeout { url: String, timeout: Duration },

    /// The server answered but sent under 100 KiB in a whole timeout period, as elfutils' client judges a
    /// stalled transfer.
    #[error("debuginfod {url} sent less than 100 KiB in {} s (DEBUGINFOD_TIMEOUT); the server or the link is stalled", secs(*.timeout))]
    Stalled { url: String, timeout: Duration },

    /// The whole fetch took longer than the per-fetch deadline.
    #[error("debuginfod {url} did not finish build id {id} within {} s (DEBUGINFOD_MAXTIME); raise it for large debug files", secs(*.deadline))]
    Deadline { url: String, id: String, deadline: Duration },

    /// No connection (refused, DNS, TLS, bad URL) or the connection broke mid-transfer.
    #[error(
        "debuginfod {url} could not be reached: {reason} (check DEBUGINFOD_URLS and that the server runs)"
    )]
    Unreachable { url: String, reason: String },

    /// An HTTP status other than 200 or 404.
    #[error("debuginfod {url} answered HTTP {status} for build id {id}; the server is failing, try again later or drop it from DEBUGINFOD_URLS")]
    Http { url: String, id: String, status: u16 },

    /// The file that arrived carries another build id: the server's index is wrong. Not cached.
    #[error("debuginfod {url} sent a file with build id {found}, not {expected}; it was not cached (the server's index is wrong: tell its operator)")]
    WrongBuildId { url: String, expected: String, found: String },

    /// The file that arrived is not an ELF file with a GNU build id. Not cached.
    #[error("debuginfod {url} sent something for build id {id} that is not an ELF file with a GNU build id ({reason}); it was not cached")]
    NotElf { url: String, id: String, reason: String },

    /// The file is bigger than the download cap; the transfer was stopped. Not cached.
    #[error("debuginfod {url} sends more than {limit} bytes for build id {id}; stopped (raise the cap with DEBUGINFOD_MAXSIZE)")]
    TooLarge { url: String, id: String, limit: u64 },

    /// The cache directory cannot be created or written.
    #[error(
        "debuginfod cache {} is not writable: {source} (set DEBUGINFOD_CACHE_PATH to a writable directory)",
        path.display()
    )]
    Cache { path: PathBuf, source: io::Error },
}

/// "2" for whole seconds, "0.5" otherwise: tests use sub-second timeouts, people use seconds.
fn secs(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}
