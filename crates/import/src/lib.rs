//! Profiles whyslow did not record, read into the same [`Profile`] every consumer takes: pprof
//! (`profile.proto`, gzipped or not, from a file or an `http(s)://` URL such as Go's `/debug/pprof/*`),
//! folded stacks (`a;b;c 123`) and `perf script` text output; perf.data files go through the converter
//! and the symbolizer like live recordings (whyslow_perfdata); whyslow's own recordings pass through to
//! [`whyslow_model::file`].
//!
//! The format is told from the content, never from the name: the recording magic, then gzip, then a
//! pprof decode, then a `perf script` sample header, then folded stacks. Every input is read with a size
//! cap (a stream is never read without bound), and bad input of any kind is a typed, one-line error, never
//! a panic (the importers are fuzzed in `tests/fuzz.rs`). Nothing here prints.

mod folded;
mod goheap;
mod http;
mod perf_script;
mod pprof;

use std::io::Read;
use std::path::Path;
use whyslow_model::file::FileError;
use whyslow_model::Profile;

pub use folded::parse as parse_folded;
pub use goheap::{fetch_go_heap, go_heap_url, parse_go_heap};
pub use perf_script::parse as parse_perf_script;
pub use pprof::decode as decode_pprof;

/// Files and HTTP bodies larger than this are refused (also the limit of a decompressed gzip stream).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// How to read a source.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Largest file, HTTP body or decompressed stream read, in bytes.
    pub max_bytes: u64,
    /// Name of the one sample type of folded stacks (default `samples`, a count).
    pub folded_type: Option<String>,
    /// Added to the profiling time a URL asks for (`?seconds=N`) to time out a request; also the
    /// timeout of requests without `seconds`.
    pub http_margin: std::time::Duration,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            max_bytes: DEFAULT_MAX_BYTES,
            folded_type: None,
            http_margin: std::time::Duration::from_secs(20),
        }
    }
}

/// What a source turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Recording,
    PerfData,
    Pprof,
    PerfScript,
    Folded,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {origin}: {source}")]
    Read { origin: String, source: std::io::Error },
    #[error("{origin} is larger than {max} bytes (the most whyslow reads)")]
    TooLarge { origin: String, max: u64 },
    #[error(transparent)]
    Recording(#[from] FileError),
    #[error(transparent)]
    PerfData(#[from] whyslow_perfdata::PerfDataError),
    #[error(
        "{origin} is not a whyslow recording, perf.data, pprof profile, folded stacks or perf script output{detail}"
    )]
    Unknown { origin: String, detail: String },
    #[error("{origin} has corrupt gzip data: {what}")]
    Gzip { origin: String, what: String },
    #[error("{origin} is not a valid pprof profile: {what}")]
    Pprof { origin: String, what: String },
    #[error("{origin} line {line}: {what}")]
    Folded { origin: String, line: usize, what: String },
    #[error("{origin} line {line}: {what}")]
    PerfScript { origin: String, line: usize, what: String },
    #[error("cannot fetch {url}: {what}")]
    Unreachable { url: String, what: String },
    #[error(
        "{origin} is not a Go heap profile (its sample types: {types}; a heap profile has inuse_space, \
         inuse_objects, alloc_space, alloc_objects)"
    )]
    NotHeap { origin: String, types: String },
    #[error(
        "{url} is not the address of a Go program's heap profile: give http://HOST:PORT/debug/pprof \
         (whyslow reads /debug/pprof/heap there)"
    )]
    NotHeapUrl { url: String },
    #[error("{url} answered HTTP {status}: {line}")]
    HttpStatus { url: String, status: u16, line: String },
}

/// Whether `source` names a URL (fetched) rather than a file.
pub fn is_url(source: &str) -> bool {
    source.starts_with("http://") || source.starts_with("https://")
}

/// Reads a file (`-`: standard input) or fetches a URL and decodes whatever profile it holds.
pub fn load(source: &str, opts: &ImportOptions) -> Result<Profile, ImportError> {
    let path = Path::new(source);
    if !is_url(source) && is_regular_file(path) && starts_with(path, whyslow_perfdata::MAGIC) {
        // perf.data is read as a stream (a dwarf recording is often larger than the size cap).
        let mut ahead = None;
        let raw = whyslow_perfdata::import_with(path, |a| ahead = Some(prefetch(a)))?;
        return Ok(perf_data(raw, source, ahead.unwrap_or_default()));
    }
    let bytes = if is_url(source) { http::fetch(source, opts)? } else { read_file(path, opts)? };
    decode(&bytes, source, opts)
}

/// Whether `path` is a regular file, which can be opened twice: a pipe (`<(perf script)`, a FIFO) or
/// standard input is read once.
fn is_regular_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

fn starts_with(path: &Path, magic: &[u8]) -> bool {
    let mut head = vec![0u8; magic.len()];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && head == magic
}

/// Starts reading the symbols a perf.data file's header says its samples need, while its records are read.
fn prefetch(a: &whyslow_perfdata::Ahead) -> whyslow_symbolize::Prefetch {
    whyslow_symbolize::Prefetch::start(&a.files, a.kernel_build_id.as_deref())
}

/// A perf.data recording symbolized like a live one, marked as imported.
fn perf_data(
    raw: whyslow_model::raw::RawRecording,
    origin: &str,
    ahead: whyslow_symbolize::Prefetch,
) -> Profile {
    let overflowed = raw.overflowed;
    let mut p = whyslow_symbolize::symbolize_with(raw, ahead);
    let note = match p.sample_type(whyslow_model::sample_types::OFFCPU) {
        // sched:sched_switch events: off-CPU time is there.
        Some(_) => format!(
            "{}perf.data {origin}: no syscall counters or exact call counts",
            whyslow_model::IMPORTED_NOTE
        ),
        None => source_note("perf.data", origin),
    };
    p.meta.notes.insert(0, note);
    if overflowed > 0 {
        p.meta.notes.push(format!("{overflowed} corrupt samples left out: their values overflow the totals"));
    }
    p
}

/// Reads at most `opts.max_bytes` of a file; a file whose first bytes fit no known format is refused
/// before the rest is read (a device or a huge unrelated file is not slurped).
fn read_file(path: &Path, opts: &ImportOptions) -> Result<Vec<u8>, ImportError> {
    let origin = path.display().to_string();
    let err = |source| ImportError::Read { origin: origin.clone(), source };
    let input: Box<dyn Read> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(path).map_err(err)?;
        if f.metadata().map_err(err)?.len() > opts.max_bytes {
            return Err(ImportError::TooLarge { origin, max: opts.max_bytes });
        }
        Box::new(f)
    };
    let mut r = input.take(opts.max_bytes + 1);
    let mut bytes = vec![0u8; 4096];
    let mut n = 0;
    while n < bytes.len() {
        match r.read(&mut bytes[n..]).map_err(err)? {
            0 => break,
            k => n += k,
        }
    }
    bytes.truncate(n);
    if !plausible_start(&bytes) {
        return Err(ImportError::Unknown { origin, detail: String::new() });
    }
    r.read_to_end(&mut bytes).map_err(err)?;
    if bytes.len() as u64 > opts.max_bytes {
        return Err(ImportError::TooLarge { origin, max: opts.max_bytes });
    }
    Ok(bytes)
}

const RECORDING_MAGIC: &[u8] = b"WHYSLOW\0";
const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];

/// Text a person or a tool wrote: UTF-8 without control characters other than tab and line breaks. A
/// multi-byte character cut at the end of `head` still counts.
fn is_text(head: &[u8]) -> bool {
    let valid = match std::str::from_utf8(head) {
        Ok(s) => s,
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or(""),
        Err(_) => return false,
    };
    !valid.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
}

/// First bytes of profile.proto's fields (tag and wire type): a pprof starts with one of them.
const PPROF_TAGS: [u8; 15] =
    [0x0a, 0x12, 0x1a, 0x22, 0x2a, 0x32, 0x38, 0x40, 0x48, 0x50, 0x5a, 0x60, 0x68, 0x6a, 0x70];

/// Whether the first bytes can start any format we read: the magics, text, or a profile.proto field tag
/// (encoders write fields in order, so a pprof starts with one of Profile's fields).
fn plausible_start(head: &[u8]) -> bool {
    head.is_empty()
        || head.starts_with(RECORDING_MAGIC)
        || head.starts_with(whyslow_perfdata::MAGIC)
        || head.starts_with(GZIP_MAGIC)
        || PPROF_TAGS.contains(&head[0])
        || is_text(head)
}

/// Decodes a profile held in memory; `origin` names it in errors and in the profile's metadata.
pub fn decode(bytes: &[u8], origin: &str, opts: &ImportOptions) -> Result<Profile, ImportError> {
    if bytes.starts_with(RECORDING_MAGIC) {
        return Ok(whyslow_model::file::decode(bytes, Path::new(origin))?);
    }
    if bytes.starts_with(whyslow_perfdata::MAGIC) {
        let mut ahead = None;
        let raw = whyslow_perfdata::decode_with(bytes, origin, |a| ahead = Some(prefetch(a)))?;
        return Ok(perf_data(raw, origin, ahead.unwrap_or_default()));
    }
    if bytes.starts_with(GZIP_MAGIC) {
        let raw = gunzip(bytes, origin, opts.max_bytes)?;
        return decode_plain(&raw, origin, opts, true);
    }
    decode_plain(bytes, origin, opts, false)
}

/// The format of uncompressed content (None: none we read).
pub fn detect(bytes: &[u8]) -> Option<Format> {
    if bytes.starts_with(RECORDING_MAGIC) {
        Some(Format::Recording)
    } else if bytes.starts_with(whyslow_perfdata::MAGIC) {
        Some(Format::PerfData)
    } else {
        plain_format(bytes, pprof::parse(bytes).is_ok())
    }
}

/// The format of content without a magic, `pprof` saying whether it parses as profile.proto: the one
/// place that orders the guesses (a pprof first, then the text formats).
fn plain_format(bytes: &[u8], pprof: bool) -> Option<Format> {
    if pprof {
        Some(Format::Pprof)
    } else if !is_text(bytes) || bytes.iter().all(|b| b.is_ascii_whitespace()) {
        None
    } else if perf_script::looks_like(bytes) {
        Some(Format::PerfScript)
    } else {
        Some(Format::Folded)
    }
}

fn decode_plain(
    bytes: &[u8],
    origin: &str,
    opts: &ImportOptions,
    gzipped: bool,
) -> Result<Profile, ImportError> {
    let parsed = pprof::parse(bytes);
    let text = || String::from_utf8_lossy(bytes);
    match (plain_format(bytes, parsed.is_ok()), parsed) {
        (Some(Format::Pprof), Ok(prof)) => pprof::convert(&prof, origin),
        (Some(Format::PerfScript), _) => perf_script::parse(&text(), origin),
        (Some(_), _) /* Folded */ => folded::parse(&text(), origin, opts.folded_type.as_deref()),
        // Binary that is no pprof: after gzip, or when it starts like one, the decoder's word helps.
        (None, Err(what)) if gzipped || bytes.first().is_some_and(|b| PPROF_TAGS.contains(b)) => {
            Err(ImportError::Pprof { origin: origin.to_string(), what })
        }
        (None, _) => Err(ImportError::Unknown { origin: origin.to_string(), detail: String::new() }),
    }
}

fn gunzip(bytes: &[u8], origin: &str, max: u64) -> Result<Vec<u8>, ImportError> {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(max + 1)
        .read_to_end(&mut raw)
        .map_err(|e| ImportError::Gzip { origin: origin.to_string(), what: e.to_string() })?;
    if raw.len() as u64 > max {
        return Err(ImportError::TooLarge { origin: format!("{origin} (decompressed)"), max });
    }
    Ok(raw)
}

/// Checks that summing `values` (any order, any grouping) cannot overflow an i64, so aggregation and
/// every consumer's totals stay exact; returns the sum of absolute values.
pub(crate) fn bounded_sum(total: &mut i64, v: i64) -> bool {
    match v.checked_abs().and_then(|a| total.checked_add(a)) {
        Some(t) => {
            *total = t;
            true
        }
        None => false,
    }
}

/// The pseudo-thread of formats that do not say which thread ran.
pub(crate) const ALL_THREADS: &str = "all threads";

/// A note on where an imported profile came from.
pub(crate) fn source_note(what: &str, origin: &str) -> String {
    format!(
        "{}{what} {origin}: no syscall counters, exact call counts or off-CPU time",
        whyslow_model::IMPORTED_NOTE
    )
}

#[cfg(test)]
mod tests {
    use super::{decode, is_text, load, plausible_start, ImportError, ImportOptions};

    #[test]
    fn plausible_starts() {
        assert!(plausible_start(b""));
        assert!(plausible_start(b"main;f 1\n"));
        assert!(plausible_start(&[0x1f, 0x8b, 8]));
        assert!(plausible_start(&[0x0a, 0x04]));
        assert!(!plausible_start(&[0xff, 0x00, 0x13]));
        assert!(is_text("caf\u{e9}".as_bytes()));
        assert!(is_text(&"caf\u{e9}".as_bytes()[..4]), "a character cut at the end of the head");
        assert!(!is_text(b"a\x00b"));
    }

    #[test]
    fn unknown_content_is_one_clear_error() {
        let e = decode(&[0xff, 0xfe, 0x00, 0x01], "x.bin", &ImportOptions::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.bin is not a whyslow recording, perf.data, pprof profile, folded stacks or perf script output"
        );
        let e = decode(b"", "empty", &ImportOptions::default()).unwrap_err();
        assert!(e.to_string().starts_with("empty is not a whyslow recording"), "{e}");
    }

    #[test]
    fn corrupt_gzip_is_an_error() {
        let e = decode(&[0x1f, 0x8b, 8, 0, 1, 2, 3], "x.gz", &ImportOptions::default()).unwrap_err();
        assert!(matches!(e, ImportError::Gzip { .. }), "{e}");
    }

    #[test]
    fn size_caps_hold_for_files_and_decompressed_streams() {
        let dir = std::env::temp_dir().join(format!("whyslow-import-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big.folded");
        std::fs::write(&path, "main;f 1\n".repeat(100)).unwrap();
        let opts = ImportOptions { max_bytes: 100, ..Default::default() };
        let e = load(path.to_str().unwrap(), &opts).unwrap_err();
        assert!(matches!(e, ImportError::TooLarge { max: 100, .. }), "{e}");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gz, &vec![b'a'; 10_000]).unwrap();
        let e = decode(&gz.finish().unwrap(), "bomb.gz", &opts).unwrap_err();
        assert!(matches!(e, ImportError::TooLarge { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
