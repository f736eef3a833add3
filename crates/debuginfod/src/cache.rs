//! The on-disk cache, laid out as elfutils' client lays it out so `debuginfod-find`, gdb and whyslow share
//! one: `<cache>/<buildid>/debuginfo` holds the file (mode 0400, directory 0700), `<cache>/<buildid>/
//! source##dir##file.c` a source file; an empty file there is a remembered miss, honoured for as many
//! seconds as the control file `<cache>/cache_miss_s` says (600 when absent).
//!
//! Must never put a file at its final name that was not verified, nor truncate a file another client
//! put there: real files arrive only by rename, misses only by exclusive create.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tempfile::NamedTempFile;

use crate::FetchError;

/// elfutils' default for `cache_miss_s`.
const DEFAULT_CACHE_MISS_S: u64 = 600;

/// What the cache knows about one build id.
pub(crate) enum Lookup {
    /// The debug file, ready to use.
    Hit(PathBuf),
    /// A miss remembered `age_s` seconds ago, still within `cache_miss_s`.
    Miss { path: PathBuf, age_s: u64, cache_miss_s: u64 },
    /// Nothing (or a miss that has expired, now removed): ask the servers.
    Unknown,
}

/// The file name of an artifact in its build id's directory: `debuginfo`, or for a source file elfutils'
/// `source` followed by its path with every `/` written `##` (`source##usr##src##app.c`).
pub(crate) fn entry_name(artifact: &crate::Artifact) -> String {
    match artifact {
        crate::Artifact::Debuginfo => "debuginfo".to_string(),
        crate::Artifact::Source(path) => format!("source{}", path.replace('/', "##")),
    }
}

pub(crate) fn lookup(cache: &Path, id: &str, name: &str) -> Lookup {
    let path = cache.join(id).join(name);
    let Ok(meta) = fs::metadata(&path) else { return Lookup::Unknown };
    if !meta.is_file() {
        // Not ours nor elfutils': leave it, and let the download's rename report the conflict.
        return Lookup::Unknown;
    }
    if meta.len() > 0 {
        return Lookup::Hit(path);
    }
    let cache_miss_s = cache_miss_s(cache);
    // A clock step backwards makes the entry look new; it then expires late, which is harmless.
    let age_s = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .map_or(0, |d| d.as_secs());
    if age_s < cache_miss_s {
        return Lookup::Miss { path, age_s, cache_miss_s };
    }
    // Expired: drop it so the miss written after this query (if any) gets a fresh time.
    let _ = fs::remove_file(&path);
    Lookup::Unknown
}

/// `<cache>/cache_miss_s` as elfutils reads it: one decimal number; absent or unreadable means 600.
fn cache_miss_s(cache: &Path) -> u64 {
    fs::read_to_string(cache.join("cache_miss_s"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .map_or(DEFAULT_CACHE_MISS_S, |n| n.max(0) as u64)
}

/// Remembers that no server has `id`. Failing to is ignored: the miss is still the answer, and forgetting
/// it costs only one more request next time.
pub(crate) fn remember_miss(cache: &Path, id: &str, name: &str) {
    let dir = cache.join(id);
    if DirBuilder::new().recursive(true).mode(0o700).create(&dir).is_err() {
        return;
    }
    // Exclusive create: a real file that another client just put there must survive.
    let _ = OpenOptions::new().write(true).create_new(true).open(dir.join(name));
}

/// A temporary file in the cache root (same file system as the entry, so the final rename is atomic),
/// named so elfutils' cleaner, which only matches build-id paths, leaves it alone while we write.
pub(crate) fn temp_file(cache: &Path, id: &str) -> Result<NamedTempFile, FetchError> {
    let cache_err = |source| FetchError::Cache { path: cache.to_path_buf(), source };
    fs::create_dir_all(cache).map_err(cache_err)?;
    tempfile::Builder::new()
        .prefix(".whyslow-")
        .suffix(&format!(".{id}.part"))
        .tempfile_in(cache)
        .map_err(cache_err)
}

/// Moves a verified download to `<cache>/<id>/<name>`, read-only as elfutils leaves its files.
pub(crate) fn install(cache: &Path, id: &str, name: &str, tmp: NamedTempFile) -> Result<PathBuf, FetchError> {
    let dir = cache.join(id);
    let cache_err = |source: io::Error| FetchError::Cache { path: dir.clone(), source };
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o400)).map_err(cache_err)?;
    DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(cache_err)?;
    let path = dir.join(name);
    // rename(2) replaces a remembered miss or a copy another client just finished, never half a file.
    tmp.persist(&path).map_err(|e| cache_err(e.error))?;
    Ok(path)
}
