//! Reading the records of a mapped file on two cores: one thread walks and parses them, the other
//! converts them in order, and the pages read are given back as it goes.

use crate::sample::SampleFields;
use crate::{inplace, Importer};
use linux_perf_data::linux_perf_event_reader::{EventRecord, RawEventRecord};
use std::cell::RefCell;

/// A record as the walking thread hands it to the converting one.
struct Walked<'a> {
    attr: usize,
    record: RawEventRecord<'a>,
    time: Option<u64>,
    parsed: Parsed<'a>,
}

/// Records in time order, then (`done`) the offset of the data section before which none is needed any
/// more.
struct Batch<'a> {
    records: Vec<Walked<'a>>,
    done: Option<usize>,
}

/// A record parsed: a sample's fields, another record, or a record shorter than its format says.
pub(crate) enum Parsed<'a> {
    Sample(SampleFields<'a>),
    /// Boxed: other records are few (maps, names, forks, exits).
    Other(Box<EventRecord<'a>>),
    Malformed,
}

const BATCH: usize = 256;

/// The walking thread's end of the pipe.
struct Outbox<'a> {
    tx: std::sync::mpsc::SyncSender<Batch<'a>>,
    records: Vec<Walked<'a>>,
    open: bool,
}

impl<'a> Outbox<'a> {
    fn push(&mut self, w: Walked<'a>) {
        self.records.push(w);
        if self.records.len() >= BATCH {
            self.send(None);
        }
    }

    fn send(&mut self, done: Option<usize>) {
        let records = std::mem::replace(&mut self.records, Vec::with_capacity(BATCH));
        // A converter that stopped (it panicked: the import fails) wants nothing more.
        self.open = self.open && self.tx.send(Batch { records, done }).is_ok();
    }
}

/// Reads the records of `data` on two cores: one thread walks them (headers, the sort into time order,
/// parsing: the first touch of every page), this one converts them (unwinding, normalizing, adding up)
/// in the order they come. One thread does both where no second can be started.
pub(crate) fn pipelined<'a>(
    data: &'a [u8],
    layout: &inplace::Layout,
    imp: &mut Importer,
    pages: &mut Pages<'_>,
) -> Result<(), String> {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Batch<'a>>(16);
        let walk = move || {
            let out = RefCell::new(Outbox { tx, records: Vec::with_capacity(BATCH), open: true });
            let result = inplace::walk(
                data,
                layout,
                |attr, record, time| {
                    let parsed = Importer::parse(&record);
                    out.borrow_mut().push(Walked { attr, record, time, parsed });
                },
                |upto| out.borrow_mut().send(Some(upto)),
            );
            out.borrow_mut().send(None);
            result
        };
        let walker = std::thread::Builder::new().name("perf.data records".into()).spawn_scoped(scope, walk);
        let Ok(walker) = walker else {
            return inplace::walk(
                data,
                layout,
                |attr, record, time| imp.handle(attr, &record, time, Importer::parse(&record)),
                |upto| pages.give_back(upto),
            );
        };
        for Batch { records, done } in rx {
            for Walked { attr, record, time, parsed } in records {
                imp.handle(attr, &record, time, parsed);
            }
            if let Some(upto) = done {
                pages.give_back(upto);
            }
        }
        walker.join().unwrap_or_else(|_| Err("corrupt record lengths".into()))
    })
}

/// The pages of a mapped file's data section, which starts at `base`.
pub(crate) struct Pages<'a> {
    pub(crate) map: Option<&'a memmap2::Mmap>,
    pub(crate) base: usize,
    /// Pages below this (absolute) are given back.
    pub(crate) given_back: usize,
}

impl Pages<'_> {
    /// Nothing before `upto` (relative to `base`) is read again: gives those pages back in 16 MB steps.
    pub(crate) fn give_back(&mut self, upto: usize) {
        let upto = self.base + upto;
        let Some(map) = self.map.filter(|_| upto >= self.given_back + (16 << 20)) else { return };
        // SAFETY: the mapping is read-only, so dropping its pages loses nothing: a later read of them
        // (none is expected) faults them in from the file again.
        let _ = unsafe {
            map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                self.given_back,
                upto - self.given_back,
            )
        };
        self.given_back = upto;
    }
}
