//! What the parser crates (linux-perf-data, linux-perf-event-reader) would trust: counts in perf.data's
//! header sections that they allocate for before they read what they count (a corrupt count asked for up
//! to hundreds of GB and aborted the process), each checked against the bytes its section has, and a
//! record field they assert on. Found by fuzzing (crates/import/tests/fuzz.rs).

use linux_perf_data::linux_perf_event_reader::constants::PERF_RECORD_MISC_MMAP_BUILD_ID;
use linux_perf_data::linux_perf_event_reader::{RawEventRecord, RecordType};
use std::io::{Read, Seek, SeekFrom};

/// Feature bits (perf's `HEADER_*`).
const CMDLINE: usize = 11;
const EVENT_DESC: usize = 12;
const SIMPLEPERF_META_INFO: usize = 129;
/// The smallest perf_event_attr (PERF_ATTR_SIZE_VER0), a generous largest, and a file section (offset,
/// size).
const ATTR_SIZE_VER0: u64 = 64;
const MAX_ATTR_SIZE: u64 = 1 << 16;
const FILE_SECTION: u64 = 16;
/// Most events a file may have (`perf record -e 'syscalls:*'` has about 700): every sample gets a value
/// per event, so without a bound a crafted file's memory grows with its events times its samples.
const MAX_EVENTS: u64 = 4096;

fn le(b: &[u8], at: usize, width: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(width)?)?;
    Some(s.iter().rev().fold(0u64, |v, &x| v << 8 | x as u64))
}

/// `h`: the file header (104 bytes), `table`: its feature table (offset and size of each feature's
/// section, in bit order), `len`: the file's length. The header's sections and the feature sections are
/// known to lie inside the file.
pub(crate) fn check_counts<R: Read + Seek>(
    file: &mut R,
    h: &[u8],
    table: &[u8],
    len: u64,
) -> Result<(), String> {
    let bit = |b: usize| le(h, 72 + 8 * (b / 64), 8).is_some_and(|w| w >> (b % 64) & 1 == 1);
    let section = |feature: usize| {
        let k = (0..feature).filter(|&b| bit(b)).count();
        bit(feature).then(|| (le(table, 16 * k, 8).unwrap_or(0), le(table, 16 * k + 8, 8).unwrap_or(0)))
    };
    let mut read = |(offset, size): (u64, u64)| -> Result<Vec<u8>, String> {
        let mut b = vec![0u8; usize::try_from(size).map_err(|e| e.to_string())?];
        file.seek(SeekFrom::Start(offset)).map_err(|e| e.to_string())?;
        file.read_exact(&mut b).map_err(|e| e.to_string())?;
        Ok(b)
    };
    let inside = |offset: u64, size: u64| offset.checked_add(size).is_some_and(|end| end <= len);
    let attr_size = le(h, 16, 8).unwrap_or(0);
    let bad_attr_size = || format!("its attribute size {attr_size} fits no perf_event_attr");
    // The parser takes the events from the first of these it finds.
    let event_types = (le(h, 56, 8).unwrap_or(0), le(h, 64, 8).unwrap_or(0));
    let too_many = || format!("it has more than {MAX_EVENTS} events (the most whyslow reads)");
    if let Some(s) = section(EVENT_DESC) {
        let b = read(s)?;
        if !event_desc_fits(&b) {
            return Err("its event descriptions are cut off or corrupt".into());
        }
        if le(&b, 0, 4).unwrap_or(0) > MAX_EVENTS {
            return Err(too_many());
        }
    } else if event_types.1 != 0 || bit(SIMPLEPERF_META_INFO) {
        // Attributes each followed by the (offset, size) of their ids: inside the attributes of
        // simpleperf's attr section, behind them in the old event_types section.
        let (entries, entry_size, attr) = if event_types.1 != 0 {
            (event_types, attr_size.saturating_add(FILE_SECTION), attr_size)
        } else {
            (
                (le(h, 24, 8).unwrap_or(0), le(h, 32, 8).unwrap_or(0)),
                attr_size,
                attr_size.saturating_sub(FILE_SECTION),
            )
        };
        if !(ATTR_SIZE_VER0..=MAX_ATTR_SIZE).contains(&attr) {
            return Err(bad_attr_size());
        }
        if !inside(entries.0, entries.1) {
            return Err("its event types extend past the end of the file (truncated?)".into());
        }
        if entries.1 / entry_size > MAX_EVENTS {
            return Err(too_many());
        }
        let b = read(entries)?;
        let ids_inside = (0..b.len() as u64 / entry_size).all(|i| {
            let at = (i * entry_size) as usize;
            let ids = at + attr as usize;
            attr_read_whole(&b, at, attr)
                && inside(le(&b, ids, 8).unwrap_or(0), le(&b, ids + 8, 8).unwrap_or(0))
        });
        if !ids_inside {
            return Err("its event ids extend past the end of the file (truncated or corrupt)".into());
        }
    } else if !(ATTR_SIZE_VER0..=MAX_ATTR_SIZE).contains(&attr_size) {
        return Err(bad_attr_size());
    } else if le(h, 32, 8).unwrap_or(0) / attr_size > MAX_EVENTS {
        return Err(too_many());
    }
    if let Some(s) = section(CMDLINE) {
        // A count of strings of 4 bytes at least.
        let b = read(s)?;
        if le(&b, 0, 4).is_some_and(|n| n > (b.len() as u64).saturating_sub(4) / 4) {
            return Err("its command line is cut off or corrupt".into());
        }
    }
    Ok(())
}

/// Whether an MMAP2 record's build id has at most 20 bytes, as the parser crate asserts (a corrupt
/// length panicked there). After pid, tid, address, length and page offset comes its length byte.
pub(crate) fn mmap2_build_id_fits(r: &RawEventRecord<'_>) -> bool {
    r.record_type != RecordType::MMAP2
        || r.misc & PERF_RECORD_MISC_MMAP_BUILD_ID == 0
        || r.data.get(32..33).is_none_or(|b| b.as_slice()[0] <= 20)
}

/// Whether the perf_event_attr at `at` is read as `room` bytes: its own size must be one of the sizes
/// the attribute had (the parser reads the fields of the largest version not above it, then skips to
/// `room`, so a size between two versions made it read the next fields a few bytes early: a string
/// length from the middle of a name asked for 1 GB) and fit in `room`.
fn attr_read_whole(b: &[u8], at: usize, room: u64) -> bool {
    const VERSIONS: [u64; 8] = [64, 72, 80, 96, 104, 112, 120, 128];
    le(b, at + 4, 4).is_some_and(|size| size <= room && (VERSIONS.contains(&size) || size > 128))
}

/// Whether HEADER_EVENT_DESC's events fit in its bytes: `nr`, `attr_size`, then per event the attribute,
/// `nr_ids`, a string (length and bytes) and the ids.
fn event_desc_fits(b: &[u8]) -> bool {
    let (Some(nr), Some(attr_size)) = (le(b, 0, 4), le(b, 4, 4)) else { return false };
    if nr > 0 && attr_size < ATTR_SIZE_VER0 {
        return false;
    }
    let mut at = 8usize;
    for _ in 0..nr {
        // Every event takes 72 bytes at least, so this ends after b.len() / 72 rounds.
        if !attr_read_whole(b, at, attr_size) {
            return false;
        }
        let Some(ids_at) = at.checked_add(attr_size as usize) else { return false };
        let (Some(ids), Some(name)) = (le(b, ids_at, 4), le(b, ids_at + 4, 4)) else { return false };
        match (ids_at + 8).checked_add(name as usize).and_then(|n| n.checked_add(8 * ids as usize)) {
            Some(end) if end <= b.len() => at = end,
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{check_counts, event_desc_fits, EVENT_DESC, MAX_EVENTS};

    /// HEADER_EVENT_DESC of `nr` events of 64-byte attributes, each with one id and a 4-byte name.
    fn event_desc(nr: u32) -> Vec<u8> {
        let mut b = [nr.to_le_bytes(), 64u32.to_le_bytes()].concat();
        for _ in 0..nr {
            let mut attr = [0u8; 64];
            attr[4] = 64; // its size
            b.extend(attr);
            b.extend(1u32.to_le_bytes());
            b.extend(4u32.to_le_bytes());
            b.extend(b"ev\0\0");
            b.extend(7u64.to_le_bytes());
        }
        b
    }

    #[test]
    fn event_counts_must_fit_their_bytes() {
        assert!(event_desc_fits(&event_desc(3)));
        let mut b = event_desc(3);
        b[0] = 4; // one more event than there are
        assert!(!event_desc_fits(&b));
        b[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(!event_desc_fits(&b));
        let mut b = event_desc(1);
        b[8 + 64..8 + 68].copy_from_slice(&(1u32 << 31).to_le_bytes()); // ids
        assert!(!event_desc_fits(&b));
        // An attribute size between two versions of perf_event_attr: the parser would misread the rest.
        let mut b = event_desc(1);
        b[8 + 4] = 65;
        assert!(!event_desc_fits(&b));
    }

    #[test]
    fn too_many_events_are_refused() {
        let desc = event_desc(MAX_EVENTS as u32 + 1);
        let mut h = vec![0u8; 104];
        h[16] = 136;
        h[72 + 1] = 1 << (EVENT_DESC - 8); // the one feature
        let table = [104u64.to_le_bytes(), (desc.len() as u64).to_le_bytes()].concat();
        let file = [h.clone(), desc].concat();
        let len = file.len() as u64;
        let e = check_counts(&mut std::io::Cursor::new(file), &h, &table, len).unwrap_err();
        assert!(e.contains("more than 4096 events"), "{e}");
    }
}
