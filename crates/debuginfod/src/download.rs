//! One request to one debuginfod server: status, a bounded and timed transfer into a temporary file,
//! and the check that the file carries the build id asked for.
//!
//! Must never leave the temporary file behind on failure (it is deleted on drop) nor install a file whose
//! build id was not checked.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::{cache, Artifact, FetchError, Options};

/// The URL path after `/buildid/ID/`: `debuginfo`, or `source` and the absolute path, each byte outside
/// the unreserved set and `/` percent-encoded (as elfutils' client escapes it).
fn artifact_url(artifact: &Artifact) -> String {
    match artifact {
        Artifact::Debuginfo => "debuginfo".to_string(),
        Artifact::Source(path) => {
            let mut out = String::from("source");
            for b in path.bytes() {
                if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b'~') {
                    out.push(b as char);
                } else {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            out
        }
    }
}

/// elfutils calls a transfer stalled when less than this arrives in one timeout period.
const STALL_BYTES: u64 = 100 * 1024;

/// What one server said.
pub(crate) enum Answer {
    Found { path: PathBuf, bytes: u64 },
    NotThere,
}

/// Asks one server for `id`; a 200 body is verified and installed in the cache. `deadline` is the
/// fetch's end and its length (for the message).
pub(crate) fn fetch_from(
    agent: &ureq::Agent,
    options: &Options,
    url: &str,
    id: &str,
    artifact: &Artifact,
    deadline: Option<(Instant, Duration)>,
) -> Result<Answer, FetchError> {
    let timeout = options.timeout;
    let past_deadline = || FetchError::Deadline {
        url: url.to_string(),
        id: id.to_string(),
        deadline: deadline.map_or(Duration::ZERO, |(_, d)| d),
    };
    // A timeout with none configured is the kernel's own (connect retries): not ours to name.
    let timed_out = |reason: String| match (deadline, timeout) {
        (Some((end, _)), _) if Instant::now() >= end => past_deadline(),
        (_, Some(timeout)) => FetchError::Timeout { url: url.into(), timeout },
        (_, None) => FetchError::Unreachable { url: url.into(), reason },
    };
    let mut request = agent.get(&format!("{url}/buildid/{id}/{}", artifact_url(artifact)));
    if let Some((end, _)) = deadline {
        let left = end.checked_duration_since(Instant::now()).ok_or_else(past_deadline)?;
        // ureq's own deadline replaces the per-read timeout, so use it only when it is the tighter bound.
        if timeout.is_none_or(|t| left <= t) {
            request = request.timeout(left);
        }
    }
    let response = match request.call() {
        Ok(r) if r.status() == 200 => r,
        Ok(r) => return Err(FetchError::Http { url: url.into(), id: id.into(), status: r.status() }),
        Err(ureq::Error::Status(404, _)) => return Ok(Answer::NotThere),
        Err(ureq::Error::Status(status, _)) => {
            return Err(FetchError::Http { url: url.into(), id: id.into(), status })
        }
        Err(ureq::Error::Transport(t)) => {
            return Err(match io_kind(&t) {
                Some(io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => timed_out(innermost(&t)),
                _ => FetchError::Unreachable { url: url.into(), reason: innermost(&t) },
            });
        }
    };
    let too_large = || FetchError::TooLarge { url: url.into(), id: id.into(), limit: options.max_size };
    let declared = response.header("Content-Length").and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > options.max_size) {
        return Err(too_large());
    }

    let mut tmp = cache::temp_file(&options.cache, id)?;
    let mut body = response.into_reader();
    let mut buf = vec![0u8; 64 * 1024];
    let mut bytes = 0u64;
    let mut window = (Instant::now(), 0u64);
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => {
                return Err(timed_out(e.to_string()))
            }
            Err(e) => return Err(FetchError::Unreachable { url: url.into(), reason: e.to_string() }),
        };
        bytes += n as u64;
        if bytes > options.max_size {
            return Err(too_large());
        }
        tmp.write_all(&buf[..n])
            .map_err(|source| FetchError::Cache { path: options.cache.clone(), source })?;
        if deadline.is_some_and(|(end, _)| Instant::now() >= end) {
            return Err(past_deadline());
        }
        window.1 += n as u64;
        if let Some(t) = timeout {
            if window.0.elapsed() >= t {
                if window.1 < STALL_BYTES {
                    return Err(FetchError::Stalled { url: url.into(), timeout: t });
                }
                window = (Instant::now(), 0);
            }
        }
    }
    tmp.flush().map_err(|source| FetchError::Cache { path: options.cache.clone(), source })?;

    // A source file is text with nothing to check it by; a debug file carries the build id asked for.
    if *artifact == Artifact::Debuginfo {
        match gnu_build_id(tmp.as_file_mut()) {
            Ok(found) if found == id => {}
            Ok(found) => {
                return Err(FetchError::WrongBuildId { url: url.into(), expected: id.into(), found })
            }
            Err(reason) => return Err(FetchError::NotElf { url: url.into(), id: id.into(), reason }),
        }
    }
    let path = cache::install(&options.cache, id, &cache::entry_name(artifact), tmp)?;
    Ok(Answer::Found { path, bytes })
}

/// The GNU build id of an ELF file, in lowercase hex, read lazily (only headers and notes).
fn gnu_build_id(file: &mut std::fs::File) -> Result<String, String> {
    use object::{Object, ReadCache};
    use std::io::Seek;
    file.rewind().map_err(|e| e.to_string())?;
    let data = ReadCache::new(file);
    let elf = object::File::parse(&data).map_err(|e| e.to_string())?;
    if !matches!(elf, object::File::Elf32(_) | object::File::Elf64(_)) {
        return Err("not ELF".to_string());
    }
    let id = elf.build_id().map_err(|e| e.to_string())?.ok_or("no build id note")?;
    Ok(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// The `io::ErrorKind` under a ureq transport error, if one caused it.
fn io_kind(t: &ureq::Transport) -> Option<io::ErrorKind> {
    let mut source = std::error::Error::source(t);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        source = e.source();
    }
    None
}

/// ureq's message and the deepest cause's words ("Connect error: Connection refused (os error 111)"),
/// without ureq's own prefix, which repeats the URL.
fn innermost(t: &ureq::Transport) -> String {
    let Some(mut last) = std::error::Error::source(t) else { return t.to_string() };
    while let Some(next) = last.source() {
        last = next;
    }
    match t.message() {
        Some(m) => format!("{m}: {last}"),
        None => last.to_string(),
    }
}
