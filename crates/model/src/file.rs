//! The recording file: one [`Profile`] per file, written atomically, verified on load.
//!
//! Layout: `WHYSLOW\0` magic, u32 format version, u64 payload length, u32 CRC-32 of the payload, then the
//! payload (gzip of the postcard-encoded profile). A missing, truncated or corrupt file is a typed error,
//! never a panic; a failed save never leaves a half-written file behind (temp file + rename).

use crate::Profile;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"WHYSLOW\0";
pub const FORMAT_VERSION: u32 = 10;
/// The oldest format this build still reads (converting it on load).
pub const OLDEST_READ: u32 = 6;
const HEADER_LEN: usize = 8 + 4 + 8 + 4;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a whyslow recording (bad magic)")]
    NotRecording { path: PathBuf },
    #[error("{path} was written by another version of whyslow (format {found}, this build reads {OLDEST_READ} to {FORMAT_VERSION}){}", if *found > FORMAT_VERSION { "; a newer whyslow reads it" } else { "" })]
    Version { path: PathBuf, found: u32 },
    #[error("{path} is truncated: expected {expected} bytes of data, found {found}")]
    Truncated { path: PathBuf, expected: u64, found: u64 },
    #[error("{path} is corrupt: {what}")]
    Corrupt { path: PathBuf, what: String },
}

/// Encodes a profile into the file format (header + compressed payload).
pub fn encode(profile: &Profile) -> Vec<u8> {
    let raw = postcard::to_stdvec(profile).expect("in-memory serialization of plain data cannot fail");
    let payload = gzip_fast(&raw);
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// `raw` gzipped at the fastest level, as flate2's GzEncoder writes it, with one compressor per thread
/// reused from call to call: a service encodes a window per process it follows, most of them small, and
/// setting up a new compressor's tables each time cost more than compressing (3% of the agent's CPU).
fn gzip_fast(raw: &[u8]) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress, Status};
    thread_local! {
        static DEFLATE: std::cell::RefCell<Compress> =
            std::cell::RefCell::new(Compress::new(Compression::fast(), false));
    }
    // RFC 1952: magic, deflate, no flags, no time, XFL 4 (fastest), unknown OS (255).
    let mut out = Vec::with_capacity(64 + raw.len() / 2);
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255]);
    DEFLATE.with_borrow_mut(|z| {
        z.reset();
        loop {
            let read = z.total_in() as usize;
            out.reserve(raw.len().saturating_sub(read) / 2 + 1024);
            match z.compress_vec(&raw[read..], &mut out, FlushCompress::Finish) {
                Ok(Status::StreamEnd) => break,
                Ok(_) => continue,
                Err(e) => unreachable!("deflating into a Vec with room: {e}"),
            }
        }
    });
    out.extend_from_slice(&crc32fast::hash(raw).to_le_bytes());
    out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    out
}

/// The most a payload of `compressed` bytes may decompress to: recordings compress 2 to 4 times, a
/// gzip bomb a thousand times; it is refused before it fills memory.
fn max_decompressed(compressed: usize) -> u64 {
    (64 << 20) + 64 * compressed as u64
}

/// Decodes bytes read from `path` (used only in error messages).
pub fn decode(bytes: &[u8], path: &Path) -> Result<Profile, FileError> {
    let path = path.to_path_buf();
    if bytes.len() < MAGIC.len() || &bytes[..8] != MAGIC {
        return Err(FileError::NotRecording { path });
    }
    if bytes.len() < HEADER_LEN {
        return Err(FileError::Truncated { path, expected: HEADER_LEN as u64, found: bytes.len() as u64 });
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if !(OLDEST_READ..=FORMAT_VERSION).contains(&version) {
        return Err(FileError::Version { path, found: version });
    }
    let len = u64::from_le_bytes(bytes[12..20].try_into().unwrap());
    let crc = u32::from_le_bytes(bytes[20..24].try_into().unwrap());
    let payload = &bytes[HEADER_LEN..];
    if (payload.len() as u64) < len {
        return Err(FileError::Truncated { path, expected: len, found: payload.len() as u64 });
    }
    if (payload.len() as u64) > len {
        return Err(FileError::Corrupt { path, what: "trailing bytes after the data".into() });
    }
    if crc32fast::hash(payload) != crc {
        return Err(FileError::Corrupt { path, what: "checksum mismatch".into() });
    }
    let mut raw = Vec::new();
    let max = max_decompressed(payload.len());
    flate2::read::GzDecoder::new(payload)
        .take(max + 1)
        .read_to_end(&mut raw)
        .map_err(|e| FileError::Corrupt { path: path.clone(), what: format!("bad compression: {e}") })?;
    if raw.len() as u64 > max {
        return Err(FileError::Corrupt {
            path,
            what: format!("its data decompresses to more than {max} bytes"),
        });
    }
    let decoded = match version {
        6 => older::decode_v6(&raw),
        7 => older::decode_v7(&raw),
        8 => older::decode_v8(&raw),
        9 => older::decode_v9(&raw),
        _ => postcard::from_bytes(&raw),
    };
    let profile: Profile =
        decoded.map_err(|e| FileError::Corrupt { path: path.clone(), what: format!("bad encoding: {e}") })?;
    profile.validate().map_err(|what| FileError::Corrupt { path, what })?;
    Ok(profile)
}

/// Earlier formats, read field by field: postcard writes a struct as its fields one after another, so
/// a format that differs in one type is the current one with that type read in its old shape.
mod older {
    use crate::{
        CallStat, Frame, Killed, Metadata, Module, Profile, Sample, SampleType, StackNode, SyscallStat,
        TargetEnv, Thread, UnwindStats,
    };
    use serde::de::DeserializeOwned;

    fn take<T: DeserializeOwned>(bytes: &mut &[u8]) -> postcard::Result<T> {
        let (value, rest) = postcard::take_from_bytes(bytes)?;
        *bytes = rest;
        Ok(value)
    }

    /// Format 6: modules did not say which source named them.
    #[derive(serde::Deserialize)]
    struct ModuleV6 {
        path: String,
        build_id: String,
        producers: Vec<String>,
    }

    /// Formats 6 and 7: the metadata had no `target_env`.
    #[derive(serde::Deserialize)]
    struct MetadataV7 {
        tool_version: String,
        command: Vec<String>,
        target_pids: Vec<u32>,
        event: String,
        frequency_hz: u64,
        start_unix_ns: u64,
        duration_ns: u64,
        lost_samples: u64,
        lost_events: u64,
        unwind: UnwindStats,
        exit_code: Option<i32>,
        hostname: String,
        kernel_release: String,
        notes: Vec<String>,
        syscalls_duration_ns: u64,
        calls_duration_ns: u64,
        killed: Vec<Killed>,
    }

    /// Format 8: the metadata had no syscall cost or slices (its fields are format 7's and then
    /// `target_env`: postcard writes a nested struct's fields in place).
    #[derive(serde::Deserialize)]
    struct MetadataV8 {
        v7: MetadataV7,
        target_env: Option<TargetEnv>,
    }

    impl From<MetadataV7> for Metadata {
        fn from(m: MetadataV7) -> Metadata {
            Metadata {
                tool_version: m.tool_version,
                command: m.command,
                target_pids: m.target_pids,
                event: m.event,
                frequency_hz: m.frequency_hz,
                start_unix_ns: m.start_unix_ns,
                duration_ns: m.duration_ns,
                lost_samples: m.lost_samples,
                lost_events: m.lost_events,
                unwind: m.unwind,
                exit_code: m.exit_code,
                hostname: m.hostname,
                kernel_release: m.kernel_release,
                notes: m.notes,
                syscalls_duration_ns: m.syscalls_duration_ns,
                calls_duration_ns: m.calls_duration_ns,
                killed: m.killed,
                target_env: None,
                syscall_cost_ns: 0,
                syscall_slices: Vec::new(),
            }
        }
    }

    fn take_meta_v8(b: &mut &[u8]) -> postcard::Result<Metadata> {
        let m: MetadataV8 = take(b)?;
        Ok(Metadata { target_env: m.target_env, ..m.v7.into() })
    }

    fn take_meta_v7(b: &mut &[u8]) -> postcard::Result<Metadata> {
        Ok(take::<MetadataV7>(b)?.into())
    }

    /// Formats 6 to 9: stack nodes had no source line.
    #[derive(serde::Deserialize)]
    struct StackNodeV9 {
        parent: u32,
        frame: u32,
    }

    fn take_stacks_v9(b: &mut &[u8]) -> postcard::Result<Vec<StackNode>> {
        let v: Vec<StackNodeV9> = take(b)?;
        Ok(v.into_iter().map(|n| StackNode { parent: n.parent, frame: n.frame, line: 0 }).collect())
    }

    fn take_meta_v9(b: &mut &[u8]) -> postcard::Result<Metadata> {
        take(b)
    }

    /// Formats 7 to 9: the current layout but for the metadata and the stack nodes.
    fn decode_with_meta(
        mut b: &[u8],
        meta: fn(&mut &[u8]) -> postcard::Result<Metadata>,
    ) -> postcard::Result<Profile> {
        let b = &mut b;
        Ok(Profile {
            meta: meta(b)?,
            strings: take(b)?,
            modules: take(b)?,
            frames: take(b)?,
            stacks: take_stacks_v9(b)?,
            threads: take(b)?,
            sample_types: take(b)?,
            samples: take(b)?,
            syscalls: take(b)?,
            calls: take(b)?,
        })
    }

    pub fn decode_v7(b: &[u8]) -> postcard::Result<Profile> {
        decode_with_meta(b, take_meta_v7)
    }

    pub fn decode_v8(b: &[u8]) -> postcard::Result<Profile> {
        decode_with_meta(b, take_meta_v8)
    }

    pub fn decode_v9(b: &[u8]) -> postcard::Result<Profile> {
        decode_with_meta(b, take_meta_v9)
    }

    pub fn decode_v6(mut b: &[u8]) -> postcard::Result<Profile> {
        let b = &mut b;
        let meta = take_meta_v7(b)?;
        let strings: Vec<String> = take(b)?;
        let modules: Vec<ModuleV6> = take(b)?;
        let modules = modules
            .into_iter()
            .map(|m| Module {
                path: m.path,
                build_id: m.build_id,
                producers: m.producers,
                symbols: String::new(),
            })
            .collect();
        let frames: Vec<Frame> = take(b)?;
        let stacks = take_stacks_v9(b)?;
        let threads: Vec<Thread> = take(b)?;
        let sample_types: Vec<SampleType> = take(b)?;
        let samples: Vec<Sample> = take(b)?;
        let syscalls: Vec<SyscallStat> = take(b)?;
        let calls: Vec<CallStat> = take(b)?;
        Ok(Profile {
            meta,
            strings,
            modules,
            frames,
            stacks,
            threads,
            sample_types,
            samples,
            syscalls,
            calls,
        })
    }
}

pub fn load(path: &Path) -> Result<Profile, FileError> {
    let bytes = std::fs::read(path).map_err(|source| FileError::Read { path: path.to_path_buf(), source })?;
    decode(&bytes, path)
}

/// Writes bytes to `path` atomically: a temp file in the same directory, fsync, rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let err = |source| FileError::Write { path: path.to_path_buf(), source };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(err)
}

pub fn save(profile: &Profile, path: &Path) -> Result<(), FileError> {
    write_atomic(path, &encode(profile))
}

#[cfg(test)]
mod tests {
    use super::{decode, encode, load, save, FileError, FORMAT_VERSION, HEADER_LEN, MAGIC, OLDEST_READ};
    use crate::tests::sample_profile;
    use std::io::Write;
    use std::path::Path;

    /// The reused compressor writes gzip any reader takes back, the same bytes for the same input call
    /// after call, with the header flate2's GzEncoder writes and about its size.
    #[test]
    fn gzip_fast_round_trips_call_after_call() {
        let mut x = 1u64;
        let noise: Vec<u8> = (0..300_000)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 60) as u8
            })
            .collect();
        for raw in [&b""[..], b"whyslow", &[7u8; 200_000], &noise, b"again", &noise] {
            let ours = super::gzip_fast(raw);
            let mut back = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&ours[..]), &mut back).unwrap();
            assert_eq!(back, raw, "{} bytes", raw.len());
            assert_eq!(ours, super::gzip_fast(raw));
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(raw).unwrap();
            let theirs = gz.finish().unwrap();
            assert_eq!(ours[..10], theirs[..10]);
            assert!(
                ours.len() <= theirs.len() + theirs.len() / 50 + 16,
                "{} vs {}",
                ours.len(),
                theirs.len()
            );
        }
    }

    /// One recording per format this build reads (tests/formats/formatN.data, each a cpu_split run):
    /// each loads, with its samples and names, and the modules of an older one say nothing of their
    /// symbol source rather than something made up.
    #[test]
    fn every_format_still_read_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/formats");
        for version in OLDEST_READ..=FORMAT_VERSION {
            let path = dir.join(format!("format{version}.data"));
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), version, "{}", path.display());
            let p = decode(&bytes, &path).unwrap_or_else(|e| panic!("{e}"));
            let total: i64 = p.samples.iter().map(|s| s.values[0]).sum();
            let expected = if version == 6 { 300 } else { 200 };
            assert_eq!(total, expected, "{}", path.display());
            let names: Vec<&str> = p.frames.iter().map(|f| p.strings[f.name as usize].as_str()).collect();
            assert!(names.contains(&"burn_a") && names.contains(&"main"), "{names:?}");
            let split = p.modules.iter().find(|m| m.path.ends_with("cpu_split")).expect("cpu_split module");
            let source = if version == 6 { "" } else { "its symbols and DWARF" };
            assert_eq!(split.symbols, source);
            // From format 10 each stack node says its source line: cpu_split's burn_a is on line 8.
            let burn_a = p.frames.iter().position(|f| p.strings[f.name as usize] == "burn_a").unwrap() as u32;
            let lines: Vec<u32> = p.stacks.iter().filter(|n| n.frame == burn_a).map(|n| n.line).collect();
            let expected = if version >= 10 { vec![8] } else { vec![0] };
            let mut distinct = lines.clone();
            distinct.dedup();
            assert_eq!(distinct, expected, "{}", path.display());
        }
        // A newer format than this build reads names both versions.
        let mut newer = std::fs::read(dir.join(format!("format{FORMAT_VERSION}.data"))).unwrap();
        newer[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let e = decode(&newer, Path::new("x.data")).unwrap_err().to_string();
        assert!(e.contains(&format!("format {}", FORMAT_VERSION + 1)) && e.contains("reads 6 to 10"), "{e}");
    }

    #[test]
    fn round_trip_is_lossless() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.data");
        let p = sample_profile();
        save(&p, &path).unwrap();
        assert_eq!(load(&path).unwrap(), p);
    }

    #[test]
    fn truncated_and_corrupt_files_are_errors() {
        let p = sample_profile();
        let bytes = encode(&p);
        let path = Path::new("t.data");
        for cut in [0, 5, 10, HEADER_LEN, bytes.len() - 1] {
            let e = decode(&bytes[..cut], path).unwrap_err();
            assert!(matches!(e, FileError::NotRecording { .. } | FileError::Truncated { .. }), "{cut}: {e}");
        }
        let mut flipped = bytes.clone();
        let last = flipped.len() - 3;
        flipped[last] ^= 0xff;
        assert!(matches!(decode(&flipped, path), Err(FileError::Corrupt { .. })));
        assert!(matches!(decode(b"hello world, not a profile", path), Err(FileError::NotRecording { .. })));
    }

    #[test]
    fn a_gzip_bomb_is_refused_before_it_fills_memory() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&vec![0u8; 80 << 20]).unwrap();
        let payload = gz.finish().unwrap();
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        let e = decode(&bytes, Path::new("bomb.data")).unwrap_err();
        assert!(e.to_string().contains("decompresses to more than"), "{e}");
    }
}
