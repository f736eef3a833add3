//! The recording file: one [`Profile`] per file, written atomically, verified on load.
//!
//! Layout: `WHYSLOW\0` magic, u32 format version, u64 payload length, u32 CRC-32 of the payload, then the
//! payload (gzip of the postcard-encoded profile). A missing, truncated or corrupt file is a typed error,
//! never a panic; a failed save never leaves a half-written file behind (temp file + rename).

use crate::Profile;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"WHYSLOW\0";
pub const FORMAT_VERSION: u32 = 7;
const HEADER_LEN: usize = 8 + 4 + 8 + 4;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a whyslow recording (bad magic)")]
    NotRecording { path: PathBuf },
    #[error("{path} was written by another version of whyslow (format {found}, this build reads {FORMAT_VERSION})")]
    Version { path: PathBuf, found: u32 },
    #[error("{path} is truncated: expected {expected} bytes of data, found {found}")]
    Truncated { path: PathBuf, expected: u64, found: u64 },
    #[error("{path} is corrupt: {what}")]
    Corrupt { path: PathBuf, what: String },
}

/// Encodes a profile into the file format (header + compressed payload).
pub fn encode(profile: &Profile) -> Vec<u8> {
    let raw = postcard::to_stdvec(profile).expect("in-memory serialization of plain data cannot fail");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).expect("writing to a Vec cannot fail");
    let payload = gz.finish().expect("writing to a Vec cannot fail");
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
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
    if version != FORMAT_VERSION {
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
    let profile: Profile = postcard::from_bytes(&raw)
        .map_err(|e| FileError::Corrupt { path: path.clone(), what: format!("bad encoding: {e}") })?;
    profile.validate().map_err(|what| FileError::Corrupt { path, what })?;
    Ok(profile)
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
    use super::*;
    use crate::tests::sample_profile;

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
