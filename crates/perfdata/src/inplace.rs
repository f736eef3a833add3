//! The records of an uncompressed perf.data file read where they lie (a mapped file, or bytes fetched
//! into memory), handed over in the order linux-perf-data's own reader gives them: perf writes the CPUs'
//! buffers in rounds, each closed by a FINISHED_ROUND record, and no record of round N + 2 is older than
//! one of round N; so the records of a round are sorted by (time, offset) and those no later round can
//! precede are handed over. Nothing is copied: a sample's stack bytes are read from the file's pages
//! (linux-perf-data's reader copies every record into a buffer first, 8 KB a sample for `--call-graph
//! dwarf`). Compressed files and pipe-mode streams go through linux-perf-data instead.

use linux_perf_data::linux_perf_event_reader::{
    Endianness, RawData, RawEventRecord, RecordParseInfo, RecordType, SampleFormat,
};
use linux_perf_data::AttributeDescription;
use std::collections::HashMap;

const PERF_RECORD_USER_TYPE_START: u32 = 64;
const PERF_RECORD_FINISHED_ROUND: u32 = 68;
const PERF_RECORD_AUXTRACE: u32 = 71;
const PERF_RECORD_COMPRESSED: u32 = 81;
const PERF_RECORD_COMPRESSED2: u32 = 83;

/// How to tell which event (attr) a record belongs to: the rules linux-perf-data applies.
enum Ids {
    OnlyOne,
    /// Every attr has the id at the same place.
    Same,
    /// Every attr has PERF_SAMPLE_IDENTIFIER: first in samples, last in other records (sample_id_all).
    Identifier {
        sample_id_all: bool,
    },
}

/// The events of a little-endian file and how to read their records.
pub(crate) struct Layout {
    parse_infos: Vec<RecordParseInfo>,
    ids: Ids,
    attr_of_id: HashMap<u64, usize>,
}

impl Layout {
    /// None where the events cannot be told apart (linux-perf-data refuses such files too).
    pub(crate) fn new(attrs: &[AttributeDescription]) -> Option<Layout> {
        let parse_infos: Vec<RecordParseInfo> =
            attrs.iter().map(|a| RecordParseInfo::new(&a.attr, Endianness::LittleEndian)).collect();
        let first = parse_infos.first()?;
        let ids = if parse_infos.len() == 1 {
            Ids::OnlyOne
        } else if parse_infos.iter().all(|p| p.id_parse_info == first.id_parse_info) {
            Ids::Same
        } else {
            use linux_perf_data::linux_perf_event_reader::AttrFlags;
            let all = |a: &AttributeDescription| a.attr.flags.contains(AttrFlags::SAMPLE_ID_ALL);
            let sample_id_all = all(&attrs[0]);
            let usable = attrs
                .iter()
                .all(|a| a.attr.sample_format.contains(SampleFormat::IDENTIFIER) && all(a) == sample_id_all);
            if !usable {
                return None;
            }
            Ids::Identifier { sample_id_all }
        };
        let attr_of_id =
            attrs.iter().enumerate().flat_map(|(k, a)| a.event_ids.iter().map(move |&id| (id, k))).collect();
        Some(Layout { parse_infos, ids, attr_of_id })
    }

    fn attr_of(&self, record_type: RecordType, misc: u16, body: &[u8]) -> usize {
        let id = match self.ids {
            Ids::OnlyOne => return 0,
            Ids::Same => {
                RawEventRecord::new(record_type, misc, RawData::Single(body), self.parse_infos[0]).id()
            }
            Ids::Identifier { sample_id_all } => {
                let at = if record_type == RecordType::SAMPLE {
                    Some(0)
                } else if sample_id_all {
                    body.len().checked_sub(8)
                } else {
                    None
                };
                at.and_then(|at| body.get(at..at + 8))
                    .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
        };
        id.and_then(|id| self.attr_of_id.get(&id).copied()).unwrap_or(0)
    }
}

/// A record waiting for its round to be sorted: where its body lies in the data section.
struct Pending {
    key: (Option<u64>, Option<u64>), // (time, offset): linux-perf-data's sort key
    start: usize,
    len: usize,
    record_type: u32,
    misc: u16,
    attr: usize,
}

/// linux-perf-data's round sorter over [`Pending`] records (see the module documentation).
#[derive(Default)]
struct Rounds {
    incoming: Vec<Pending>,
    prev_max: (Option<u64>, Option<u64>),
    cur_max: (Option<u64>, Option<u64>),
    /// How many of `incoming` sort at or before `prev_max`.
    before_prev_max: usize,
}

impl Rounds {
    fn insert(&mut self, p: Pending) {
        if p.key <= self.prev_max {
            self.before_prev_max += 1;
        } else if p.key > self.cur_max {
            self.cur_max = p.key;
        }
        self.incoming.push(p);
    }

    /// Moves the records no later round can precede to `out`, in order.
    fn finish_round(&mut self, out: &mut Vec<Pending>) {
        let n = self.before_prev_max;
        if n > 0 {
            self.incoming.select_nth_unstable_by_key(n - 1, |p| p.key);
            self.incoming[..n].sort_unstable_by_key(|p| p.key);
            out.extend(self.incoming.drain(..n));
        }
        self.prev_max = self.cur_max;
        self.before_prev_max = self.incoming.len();
    }

    fn finish(&mut self, out: &mut Vec<Pending>) {
        self.incoming.sort_unstable_by_key(|p| p.key);
        out.append(&mut self.incoming);
    }
}

/// Walks the data section `data` of a little-endian file: `emit` gets each event record (its attr index,
/// the record, its time) in time order; `done(n)` says that no record before offset `n` of `data` is
/// needed any more. An error names what is wrong with the data.
pub(crate) fn walk<'a>(
    data: &'a [u8],
    layout: &Layout,
    mut emit: impl FnMut(usize, RawEventRecord<'a>, Option<u64>),
    mut done: impl FnMut(usize),
) -> Result<(), String> {
    let mut rounds = Rounds::default();
    let mut ready = Vec::new();
    let mut hand_over = |ready: &mut Vec<Pending>| {
        for p in ready.drain(..) {
            let body = RawData::Single(&data[p.start..p.start + p.len]);
            let rec =
                RawEventRecord::new(RecordType(p.record_type), p.misc, body, layout.parse_infos[p.attr]);
            emit(p.attr, rec, p.key.0);
        }
    };
    let mut pos = 0usize;
    while pos < data.len() {
        let h = data.get(pos..pos + 8).ok_or("a record header is cut off")?;
        let record_type = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
        let misc = u16::from_le_bytes(h[4..6].try_into().expect("2 bytes"));
        let size = usize::from(u16::from_le_bytes(h[6..8].try_into().expect("2 bytes")));
        if size < 8 {
            return Err(format!("a record at data offset {pos} has an impossible size ({size} bytes)"));
        }
        let end = pos + size;
        if end > data.len() {
            return Err("the last record is cut off".into());
        }
        let (start, offset) = (pos + 8, pos as u64);
        pos = end;
        if record_type >= PERF_RECORD_USER_TYPE_START {
            match record_type {
                PERF_RECORD_FINISHED_ROUND => {
                    rounds.finish_round(&mut ready);
                    hand_over(&mut ready);
                    done(rounds.incoming.iter().map(|p| p.start - 8).min().unwrap_or(pos));
                }
                // The trace data follows the record; its size is the record's first field.
                PERF_RECORD_AUXTRACE => {
                    let aux = data.get(start..start + 8).ok_or("an AUXTRACE record is cut off")?;
                    let aux = u64::from_le_bytes(aux.try_into().expect("8 bytes"));
                    pos = usize::try_from(aux)
                        .ok()
                        .and_then(|a| pos.checked_add(a))
                        .filter(|&p| p <= data.len())
                        .ok_or("AUXTRACE data is cut off")?;
                }
                PERF_RECORD_COMPRESSED | PERF_RECORD_COMPRESSED2 => {
                    return Err("compressed records in a file whose header declares no compression".into())
                }
                _ => {} // header records (attrs, features, maps) are read by linux-perf-data
            }
            continue;
        }
        let body = &data[start..end];
        let attr = layout.attr_of(RecordType(record_type), misc, body);
        let rec = RawEventRecord::new(
            RecordType(record_type),
            misc,
            RawData::Single(body),
            layout.parse_infos[attr],
        );
        let key = (rec.timestamp(), Some(offset));
        rounds.insert(Pending { key, start, len: end - start, record_type, misc, attr });
    }
    rounds.finish(&mut ready);
    hand_over(&mut ready);
    done(data.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{walk, Ids, Layout, Pending, Rounds};
    use std::collections::HashMap;

    fn pending(time: u64, offset: u64) -> Pending {
        Pending { key: (Some(time), Some(offset)), start: 0, len: 0, record_type: 9, misc: 0, attr: 0 }
    }

    /// The example of perf's FINISHED_ROUND documentation (linux-perf-data's sorter test, with offsets).
    #[test]
    fn rounds_hand_over_what_no_later_round_can_precede() {
        let mut r = Rounds::default();
        let mut out = Vec::new();
        let mut offset = 0;
        let mut round = |r: &mut Rounds, times: &[u64], out: &mut Vec<Pending>| {
            for &t in times {
                offset += 1;
                r.insert(pending(t, offset));
            }
            r.finish_round(out);
            out.drain(..).map(|p| p.key.0.unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(round(&mut r, &[1, 2, 3, 2, 4], &mut out), Vec::<u64>::new());
        // Equal times sort by file offset: the second 4 (and 7) comes after the round's maximum.
        assert_eq!(round(&mut r, &[3, 5, 6, 7, 4, 5], &mut out), vec![1, 2, 2, 3, 3, 4]);
        assert_eq!(round(&mut r, &[6, 8, 9, 7, 10], &mut out), vec![4, 5, 5, 6, 6, 7]);
        r.finish(&mut out);
        assert_eq!(out.iter().map(|p| p.key.0.unwrap()).collect::<Vec<_>>(), vec![7, 8, 9, 10]);
    }

    #[test]
    fn cut_and_impossible_records_are_errors() {
        let layout = Layout { parse_infos: Vec::new(), ids: Ids::OnlyOne, attr_of_id: HashMap::new() };
        let walk = |d: &[u8]| walk(d, &layout, |_, _, _| {}, |_| {});
        assert!(walk(&[1, 0, 0, 0]).unwrap_err().contains("cut off"));
        assert!(walk(&[68, 0, 0, 0, 0, 0, 4, 0]).unwrap_err().contains("impossible size"));
        assert!(walk(&[68, 0, 0, 0, 0, 0, 16, 0]).unwrap_err().contains("cut off"));
        // A FINISHED_ROUND alone is a valid, empty data section.
        assert!(walk(&[68, 0, 0, 0, 0, 0, 8, 0]).is_ok());
    }
}
