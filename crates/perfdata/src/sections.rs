//! Where a perf.data file's header says its sections lie, checked against the file before the parser
//! trusts them.

use crate::{guard, MAGIC};
use std::io::{Read, Seek, SeekFrom};

/// The whole file in memory or mapped; `map` to give pages back once read.
#[derive(Clone, Copy)]
pub(crate) struct Mapped<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) map: Option<&'a memmap2::Mmap>,
}

/// Checks that every section the header names lies inside the file: the parser allocates a section's
/// size before reading it, so a corrupt size would abort the process instead of failing.
pub(crate) fn check_sections<R: Read + Seek>(file: &mut R) -> Result<(), String> {
    let len = file.seek(SeekFrom::End(0)).map_err(|e| e.to_string())?;
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let mut h = [0u8; 104];
    if file.read_exact(&mut h).is_err() || &h[..8] != MAGIC || u64_le(&h, 8) != 104 {
        return Ok(()); // not the file layout (pipe mode, other byte order): the parser decides
    }
    let inside = |offset: u64, size: u64| offset.checked_add(size).is_some_and(|end| end <= len);
    let (data_offset, data_size) = (u64_le(&h, 40), u64_le(&h, 48));
    if !inside(u64_le(&h, 24), u64_le(&h, 32)) || !inside(data_offset, data_size) {
        return Err("its sections extend past the end of the file (truncated?)".into());
    }
    let features: u32 = (0..4).map(|i| u64_le(&h, 72 + 8 * i).count_ones()).sum();
    let mut table = vec![0u8; features as usize * 16];
    file.seek(SeekFrom::Start(data_offset + data_size)).map_err(|e| e.to_string())?;
    file.read_exact(&mut table).map_err(|_| "its feature table is cut off (truncated?)".to_string())?;
    if table.chunks(16).any(|e| !inside(u64_le(e, 0), u64_le(e, 8))) {
        return Err("a header section extends past the end of the file (truncated or corrupt)".into());
    }
    guard::check_counts(file, &h, &table, len)?;
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    Ok(())
}

pub(crate) fn u64_le(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Where the records lie in an uncompressed little-endian file with the usual header (not pipe mode).
pub(crate) fn data_section<'a>(
    m: &Mapped<'a>,
    perf_file: &linux_perf_data::PerfFile,
) -> Option<(&'a [u8], usize)> {
    let b = m.bytes;
    if b.len() < 104 || &b[..8] != MAGIC || u64_le(b, 8) != 104 {
        return None;
    }
    if perf_file.features().has_feature(linux_perf_data::Feature::COMPRESSED)
        || perf_file.features().has_feature(linux_perf_data::Feature::SIMPLEPERF_META_INFO)
    {
        return None; // compressed records are inflated, simpleperf's are sorted differently: the crate's reader
    }
    let (offset, size) = (usize::try_from(u64_le(b, 40)).ok()?, usize::try_from(u64_le(b, 48)).ok()?);
    Some((b.get(offset..offset.checked_add(size)?)?, offset))
}
