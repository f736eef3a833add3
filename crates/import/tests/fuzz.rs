//! Fuzzing of every importer: perf.data, pprof (gzipped or not), folded stacks, `perf script` text and
//! whyslow's own recording file. Each test mutates the corpus files of one format (`tests/corpus/`, told
//! apart by content) and checks that every mutant decodes or is refused with a one-line error: never a
//! panic (not even one the importer catches itself), never a hang, and with bounded memory (a size field
//! of 2^40 must not allocate 2^40 bytes). A decoded profile must validate and survive the analyses.
//!
//! Besides byte-level mutations (bit flips, truncations, insertions, duplicated and deleted chunks) each
//! format has structure-aware ones, so mutants get past the first checks: perf.data header fields,
//! attributes, feature sections and record headers and bodies (records deleted or duplicated with the
//! header's sizes and offsets fixed up); pprof protobuf fields at any depth (varints set to edge values,
//! fields deleted or duplicated, lengths re-encoded), mutated before gzip; the recording's postcard
//! payload, re-compressed with a fixed-up length and checksum; lines and numbers of the text formats.
//! Per format the test prints how many mutants decoded and why the others were refused.
//!
//! Seeded, so a failure repeats. WHYSLOW_FUZZ_SEED sets the seed, WHYSLOW_FUZZ_ITERS the mutants per
//! format (the defaults keep the whole test under 10 s of CPU in a debug build), WHYSLOW_FUZZ_SECS
//! instead runs each format for that many seconds (bench/fuzz_importers.sh: 600 s each in release mode).
//! The input being checked is always in `$CARGO_TARGET_TMPDIR/fuzz/current-FORMAT`, so an abort or a
//! hang (the watchdog aborts after WHYSLOW_FUZZ_HANG_SECS, default 60) leaves it behind; a panicking
//! input is saved as `crash-FORMAT-HASH` there and the test fails at the end of its run; the slowest
//! input is kept as `slowest-FORMAT`. WHYSLOW_FUZZ_INPUT=FILE checks one saved input (test
//! `reproduce`); fixed ones go to `tests/corpus/regressions/`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};
use whyslow_import::{decode, detect, Format, ImportError, ImportOptions};

// ---------------------------------------------------------------------------------------------------
// Memory: every allocation is counted per thread, so the peak a check reaches is known.

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    LIVE.with(|l| {
        let v = l.get() + delta;
        l.set(v);
        PEAK.with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counting only reads sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as isize));
        // SAFETY: the caller's pointer and layout, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        track(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's pointer, layout and size, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Most memory a check may hold beyond what was live before it: the decoders keep a few copies of the
/// input and the binaries a perf.data file names, never anything a size field asks for.
fn memory_limit(input_len: usize) -> isize {
    (256 << 20) + 64 * input_len as isize
}

// ---------------------------------------------------------------------------------------------------
// Panics: any panic during a check is a crash, also one an importer catches and turns into an error.

thread_local! {
    static IN_CHECK: Cell<bool> = const { Cell::new(false) };
    static PANICS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_CHECK.with(Cell::get) {
                let loc =
                    info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
                let msg = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                PANICS.with(|p| p.borrow_mut().push(format!("panicked{loc}: {msg}")));
            } else {
                default(info);
            }
        }));
    });
}

// ---------------------------------------------------------------------------------------------------
// Random numbers and edge values.

/// xorshift64*: small, seeded, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    /// A distinct, non-zero state for every seed (splitmix64 of it).
    fn seeded(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)).max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// A value that often sits at a boundary of some check: small counts, powers of two and their
/// neighbours, sign bits, the file's length, or the old value nudged.
fn edge_value(rng: &mut Rng, old: u64, file_len: usize) -> u64 {
    const EDGES: [u64; 24] = [
        0,
        1,
        2,
        3,
        4,
        7,
        8,
        16,
        64,
        127,
        128,
        255,
        256,
        4096,
        0x7fff,
        0xffff,
        0x1_0000,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_ffff,
        1 << 32,
        1 << 40,
        i64::MAX as u64,
        u64::MAX,
    ];
    match rng.below(10) {
        0..=4 => EDGES[rng.below(EDGES.len())],
        5 => (file_len as u64).wrapping_add(rng.below(17) as u64).wrapping_sub(8),
        6 => old.wrapping_add(1 + rng.below(16) as u64),
        7 => old.wrapping_sub(1 + rng.below(16) as u64),
        8 => old ^ (1 << rng.below(64)),
        _ => old.wrapping_mul(2 + rng.below(3) as u64),
    }
}

fn get_le(b: &[u8], at: usize, width: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(width)?)?;
    Some(s.iter().rev().fold(0u64, |v, &x| v << 8 | x as u64))
}

fn put_le(b: &mut [u8], at: usize, width: usize, v: u64) {
    if let Some(s) = at.checked_add(width).and_then(|end| b.get_mut(at..end)) {
        for (i, x) in s.iter_mut().enumerate() {
            *x = (v >> (8 * i)) as u8;
        }
    }
}

/// Sets the `width`-byte little-endian integer at `at` to an edge value.
fn set_edge(rng: &mut Rng, b: &mut [u8], at: usize, width: usize) {
    if let Some(old) = get_le(b, at, width) {
        let len = b.len();
        put_le(b, at, width, edge_value(rng, old, len));
    }
}

// ---------------------------------------------------------------------------------------------------
// Byte-level mutations, for every format.

fn mutate_bytes(rng: &mut Rng, v: &mut Vec<u8>) {
    match rng.below(8) {
        0 if !v.is_empty() => {
            let i = rng.below(v.len());
            v[i] ^= 1 << rng.below(8);
        }
        1 => v.truncate(rng.below(v.len() + 1)),
        2 => {
            let i = rng.below(v.len() + 1);
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            v.splice(i..i, bytes);
        }
        3 if !v.is_empty() => {
            let (a, n) = (rng.below(v.len()), 1 + rng.below(64));
            let chunk: Vec<u8> = v[a..(a + n).min(v.len())].to_vec();
            let at = rng.below(v.len() + 1);
            v.splice(at..at, chunk);
        }
        4 if !v.is_empty() => {
            let a = rng.below(v.len());
            let b = (a + 1 + rng.below(64)).min(v.len());
            v.drain(a..b);
        }
        5 if !v.is_empty() => {
            // An integer of 1, 2, 4 or 8 bytes anywhere, aligned to its width.
            let width = 1 << rng.below(4);
            let at = rng.below(v.len()) / width * width;
            set_edge(rng, v, at, width);
        }
        6 if !v.is_empty() => {
            let i = rng.below(v.len());
            v[i] = rng.next() as u8;
        }
        _ if !v.is_empty() => {
            // A byte that matters to the text formats.
            let i = rng.below(v.len());
            v[i] = b" ;\n\t:/()[]+0x9"[rng.below(14)];
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------------
// perf.data: the file header, attributes, feature sections and records.

/// Where things are in a perf.data file (as far as it can be read).
struct PerfLayout {
    attrs: (usize, usize),
    attr_size: usize,
    data: (usize, usize),
    /// Offsets of the feature table's entries (offset, size: 16 bytes each).
    features: Vec<usize>,
    /// Records in the data section: (offset, size).
    records: Vec<(usize, usize)>,
}

fn perf_layout(b: &[u8]) -> Option<PerfLayout> {
    let u = |at| get_le(b, at, 8).and_then(|v| usize::try_from(v).ok());
    if get_le(b, 8, 8)? != 104 {
        return None;
    }
    let (attrs, attr_size, data) = ((u(24)?, u(32)?), u(16)?, (u(40)?, u(48)?));
    let data_end = data.0.checked_add(data.1).filter(|&e| e <= b.len())?;
    let nfeat: usize = (0..4).map(|i| get_le(b, 72 + 8 * i, 8).unwrap_or(0).count_ones() as usize).sum();
    let features = (0..nfeat).map(|i| data_end + 16 * i).filter(|&at| at + 16 <= b.len()).collect();
    let mut records = Vec::new();
    let mut at = data.0;
    while at + 8 <= data_end {
        let size = get_le(b, at + 6, 2)? as usize;
        if size < 8 || at + size > data_end {
            break;
        }
        records.push((at, size));
        at += size;
    }
    Some(PerfLayout { attrs, attr_size, data, features, records })
}

/// Moves everything the header and the feature table place at or after `at` by `delta` bytes and
/// grows the data section by it (bytes were inserted into or removed from the data section at `at`).
fn perf_shift(b: &mut [u8], l: &PerfLayout, at: usize, delta: isize) {
    let shift = |b: &mut [u8], field: usize| {
        if let Some(v) = get_le(b, field, 8) {
            if v >= at as u64 {
                put_le(b, field, 8, v.wrapping_add(delta as u64));
            }
        }
    };
    put_le(b, 48, 8, (l.data.1 as u64).wrapping_add(delta as u64));
    shift(b, 24); // attrs
    shift(b, 56); // event types
                  // The feature table moved with the end of the data section.
    for &f in &l.features {
        shift(b, (f as isize + delta) as usize);
    }
    // Each attribute's ids section.
    if l.attr_size >= 16 {
        let (mut a, end) = (l.attrs.0, l.attrs.0.saturating_add(l.attrs.1).min(b.len()));
        while a.saturating_add(l.attr_size) <= end {
            shift(b, a + l.attr_size - 16);
            a += l.attr_size;
        }
    }
}

fn mutate_perf_data(rng: &mut Rng, v: &mut Vec<u8>) {
    let Some(l) = perf_layout(v).filter(|_| rng.chance(85)) else {
        return mutate_bytes(rng, v);
    };
    let pick_record = |rng: &mut Rng| l.records.get(rng.below(l.records.len())).copied();
    match rng.below(12) {
        // A header field (sizes, section offsets and sizes, feature bits).
        0 => {
            let at = 16 + 8 * rng.below(11);
            set_edge(rng, v, at, 8)
        }
        // A field of an attribute (type, size, sample_type, read_format, flags, ...).
        1 if l.attrs.1 > 0 && l.attrs.0 < v.len() => {
            let at = l.attrs.0 + rng.below(l.attrs.1.min(v.len() - l.attrs.0)) / 8 * 8;
            if rng.chance(50) {
                set_edge(rng, v, at, 8)
            } else if let Some(x) = v.get_mut(at + rng.below(8)) {
                *x ^= 1 << rng.below(8);
            }
        }
        // A feature section's offset or size.
        2 if !l.features.is_empty() => {
            let f = l.features[rng.below(l.features.len())];
            let at = f + 8 * rng.below(2);
            set_edge(rng, v, at, 8)
        }
        // Inside a feature section (string lengths, counts, build ids).
        3 if !l.features.is_empty() => {
            let f = l.features[rng.below(l.features.len())];
            let (off, size) =
                (get_le(v, f, 8).unwrap_or(0) as usize, get_le(v, f + 8, 8).unwrap_or(0) as usize);
            if size > 0 && off < v.len() {
                let at = off + rng.below(size.min(v.len() - off)) / 4 * 4;
                set_edge(rng, v, at, 4)
            }
        }
        // A record's size, type or misc.
        4 | 5 => {
            if let Some((at, size)) = pick_record(rng) {
                match rng.below(4) {
                    0 | 1 => {
                        let new =
                            [0, 1, 7, 8, 16, size - 8, size + 8, size * 2, 0xfff8, 0xffff][rng.below(10)];
                        put_le(v, at + 6, 2, new as u64)
                    }
                    2 => put_le(
                        v,
                        at,
                        4,
                        [0, 1, 9, 10, 11, 12, 14, 19, 68, 79, 81, 99, u32::MAX][rng.below(13)] as u64,
                    ),
                    _ => v[at + 4] ^= 1 << rng.below(8),
                }
            }
        }
        // A field of a record's body: callchain length, stack size, dyn_size, pid, addresses, ...
        6 | 7 => {
            if let Some((at, size)) = pick_record(rng) {
                if size > 8 {
                    let width = [8, 8, 4, 2][rng.below(4)];
                    let field = at + 8 + rng.below(size - 8) / width * width;
                    set_edge(rng, v, field, width)
                }
            }
        }
        8 => {
            if let Some((at, size)) = pick_record(rng) {
                let i = at + rng.below(size);
                v[i] ^= 1 << rng.below(8);
            }
        }
        // A record deleted or duplicated, the sections behind it moved.
        9 => {
            if let Some((at, size)) = pick_record(rng) {
                v.drain(at..at + size);
                perf_shift(v, &l, at, -(size as isize));
            }
        }
        10 => {
            if let Some((at, size)) = pick_record(rng) {
                let copy = v[at..at + size].to_vec();
                let to = pick_record(rng).map_or(at, |r| r.0);
                v.splice(to..to, copy);
                perf_shift(v, &l, to, size as isize);
            }
        }
        // Two records swapped.
        11 if l.records.len() >= 2 => {
            let (a, b) = (pick_record(rng).unwrap(), pick_record(rng).unwrap());
            let (a, b) = if a.0 < b.0 { (a, b) } else { (b, a) };
            if a.0 + a.1 <= b.0 {
                let mut out = v[..a.0].to_vec();
                out.extend_from_slice(&v[b.0..b.0 + b.1]);
                out.extend_from_slice(&v[a.0 + a.1..b.0]);
                out.extend_from_slice(&v[a.0..a.0 + a.1]);
                out.extend_from_slice(&v[b.0 + b.1..]);
                *v = out;
            }
        }
        _ => mutate_bytes(rng, v),
    }
}

// ---------------------------------------------------------------------------------------------------
// Protobuf (pprof) and postcard (the recording's payload): varints and length-delimited fields.

fn read_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let x = *b.get(*at)?;
        *at += 1;
        v |= ((x & 0x7f) as u64).checked_shl(shift).unwrap_or(0);
        if x & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let x = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(x);
            return out;
        }
        out.push(x | 0x80);
    }
}

/// Replaces the varint at a random position (or what reads as one) with an edge value.
fn mutate_varint(rng: &mut Rng, v: &mut Vec<u8>) {
    if v.is_empty() {
        return;
    }
    let start = rng.below(v.len());
    let mut end = start;
    let old = read_varint(v, &mut end).unwrap_or(0);
    let end = end.max(start + 1).min(v.len());
    let new = varint(edge_value(rng, old, v.len()));
    v.splice(start..end, new);
}

/// One protobuf field: where it starts (its tag) and ends, and its wire type.
struct PbField {
    start: usize,
    end: usize,
    wire: u64,
}

fn pb_fields(b: &[u8]) -> Option<Vec<PbField>> {
    let mut fields = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let start = at;
        let tag = read_varint(b, &mut at)?;
        let wire = tag & 7;
        match wire {
            0 => {
                read_varint(b, &mut at)?;
            }
            1 => at += 8,
            5 => at += 4,
            2 => {
                let n = usize::try_from(read_varint(b, &mut at)?).ok()?;
                at = at.checked_add(n)?;
            }
            _ => return None,
        }
        if at > b.len() {
            return None;
        }
        fields.push(PbField { start, end: at, wire });
    }
    Some(fields)
}

/// Mutates a protobuf message at some depth: a varint set to an edge value, a field deleted,
/// duplicated or replaced by one of another field number; nested messages have their lengths re-encoded.
fn mutate_protobuf(rng: &mut Rng, msg: &mut Vec<u8>, depth: usize) {
    let fields = match pb_fields(msg) {
        Some(f) if !f.is_empty() && rng.chance(90) => f,
        _ => {
            return if rng.chance(50) { mutate_varint(rng, msg) } else { mutate_bytes(rng, msg) };
        }
    };
    let f = &fields[rng.below(fields.len())];
    match rng.below(10) {
        0 => {
            msg.drain(f.start..f.end);
        }
        1 => {
            let copy = msg[f.start..f.end].to_vec();
            let to = fields[rng.below(fields.len())].start;
            msg.splice(to..to, copy);
        }
        2 => {
            // Another field number with the same payload.
            let mut at = f.start;
            let tag = read_varint(msg, &mut at).unwrap_or(0);
            let new = varint((tag & 7) | ((1 + rng.below(16) as u64) << 3));
            msg.splice(f.start..at, new);
        }
        3..=5 if f.wire == 0 => {
            let mut at = f.start;
            read_varint(msg, &mut at);
            let old = read_varint(msg, &mut at.clone()).unwrap_or(0);
            let new = varint(edge_value(rng, old, msg.len()));
            msg.splice(at..f.end, new);
        }
        _ if f.wire == 2 => {
            // Recurse into the payload (a message or a packed array), then write its new length.
            let mut at = f.start;
            let tag = read_varint(msg, &mut at).unwrap_or(0);
            let n = read_varint(msg, &mut at).unwrap_or(0) as usize;
            let mut inner = msg[at..(at + n).min(msg.len())].to_vec();
            if depth < 3 && rng.chance(70) {
                mutate_protobuf(rng, &mut inner, depth + 1);
            } else if rng.chance(50) {
                mutate_varint(rng, &mut inner);
            } else {
                mutate_bytes(rng, &mut inner);
            }
            let mut field = varint(tag);
            field.extend(varint(inner.len() as u64));
            field.extend(inner);
            msg.splice(f.start..f.end, field);
        }
        _ => mutate_varint(rng, msg),
    }
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b).unwrap();
    gz.finish().unwrap()
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(b), &mut raw).unwrap();
    raw
}

// ---------------------------------------------------------------------------------------------------
// The recording file: header (magic, version, length, CRC-32), gzip, postcard.

const RECORDING_HEADER: usize = 24;

fn recording_file(version: u32, postcard: &[u8]) -> Vec<u8> {
    let payload = gzip(postcard);
    let mut crc = flate2::Crc::new();
    crc.update(&payload);
    let mut out = b"WHYSLOW\0".to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// The version and postcard bytes of a recording file.
fn recording_parts(file: &[u8]) -> (u32, Vec<u8>) {
    (get_le(file, 8, 4).unwrap() as u32, gunzip(&file[RECORDING_HEADER..]))
}

// ---------------------------------------------------------------------------------------------------
// Text: lines and numbers.

fn mutate_text(rng: &mut Rng, v: &mut Vec<u8>, others: &[&[u8]]) {
    let lines: Vec<(usize, usize)> = {
        let mut out = Vec::new();
        let mut start = 0;
        for (i, &c) in v.iter().enumerate() {
            if c == b'\n' {
                out.push((start, i + 1));
                start = i + 1;
            }
        }
        if start < v.len() {
            out.push((start, v.len()));
        }
        out
    };
    if lines.is_empty() {
        return mutate_bytes(rng, v);
    }
    let line = |rng: &mut Rng| lines[rng.below(lines.len())];
    match rng.below(9) {
        0 => {
            let (a, b) = line(rng);
            v.drain(a..b);
        }
        1 => {
            let (a, b) = line(rng);
            // Now and then many times, up to 256 KiB (a long line copied 500 times made 20 MB inputs).
            let times = if rng.chance(10) { 1 + rng.below(500).min((256 << 10) / (b - a)) } else { 1 };
            let copy = v[a..b].repeat(times);
            let to = line(rng).0;
            v.splice(to..to, copy);
        }
        2 if !others.is_empty() => {
            // A line of another file of the same format.
            let o = others[rng.below(others.len())];
            let ls: Vec<&[u8]> = o.split_inclusive(|&c| c == b'\n').collect();
            if !ls.is_empty() {
                let copy = ls[rng.below(ls.len())].to_vec();
                let to = line(rng).0;
                v.splice(to..to, copy);
            }
        }
        3 | 4 => {
            // A number (decimal or hex run) replaced by an edge case.
            const NUMBERS: [&str; 16] = [
                "0",
                "-1",
                "1",
                "4294967295",
                "4294967296",
                "9223372036854775807",
                "9223372036854775808",
                "-9223372036854775808",
                "18446744073709551615",
                "18446744073709551616",
                "99999999999999999999999999",
                "ffffffffffffffff",
                "10000000000000000",
                "0x",
                "1.5",
                "",
            ];
            let digits: Vec<usize> = (0..v.len()).filter(|&i| v[i].is_ascii_hexdigit()).collect();
            if let Some(&i) = digits.get(rng.below(digits.len())) {
                let (mut a, mut b) = (i, i);
                while a > 0 && v[a - 1].is_ascii_hexdigit() {
                    a -= 1;
                }
                while b < v.len() && v[b].is_ascii_hexdigit() {
                    b += 1;
                }
                v.splice(a..b, NUMBERS[rng.below(NUMBERS.len())].bytes());
            }
        }
        5 => {
            // Something long or odd inserted: deep stacks, a long name, non-ASCII, a lone CR.
            let insert: Vec<u8> = match rng.below(6) {
                0 => b"f;".repeat(1 + rng.below(20_000)),
                1 => vec![b'x'; 1 + rng.below(100_000)],
                2 => "caf\u{e9} \u{202e}\u{1f600}".as_bytes().to_vec(),
                3 => b"\r".to_vec(),
                4 => b"\tffffffffffffffff [unknown] ([unknown])\n".repeat(1 + rng.below(10_000)),
                _ => b" [000] 1.000001: 1 cpu-clock:ppp: \n".to_vec(),
            };
            let at = rng.below(v.len() + 1);
            v.splice(at..at, insert);
        }
        6 => {
            // Two lines swapped.
            let (a, b) = (line(rng), line(rng));
            let (a, b) = if a.0 <= b.0 { (a, b) } else { (b, a) };
            if a.1 <= b.0 {
                let mut out = v[..a.0].to_vec();
                out.extend_from_slice(&v[b.0..b.1]);
                out.extend_from_slice(&v[a.1..b.0]);
                out.extend_from_slice(&v[a.0..a.1]);
                out.extend_from_slice(&v[b.1..]);
                *v = out;
            }
        }
        _ => mutate_bytes(rng, v),
    }
}

// ---------------------------------------------------------------------------------------------------
// The formats and their seeds.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    PerfData,
    Pprof,
    Folded,
    PerfScript,
    Recording,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::PerfData => "perf.data",
            Kind::Pprof => "pprof",
            Kind::Folded => "folded",
            Kind::PerfScript => "perf-script",
            Kind::Recording => "recording",
        }
    }
    /// Mutants checked when neither WHYSLOW_FUZZ_ITERS nor WHYSLOW_FUZZ_SECS is set: a few seconds of CPU
    /// each in a debug build (a perf.data mutant takes about 2 ms there, the others 0.1 to 0.5 ms).
    fn default_iters(self) -> usize {
        match self {
            Kind::PerfData => 3000,
            Kind::Recording => 10_000,
            Kind::Pprof | Kind::Folded | Kind::PerfScript => 8000,
        }
    }
}

struct Seed {
    name: String,
    /// perf.data and text as stored; pprof decompressed; a recording's postcard payload.
    plain: Vec<u8>,
    /// Stored gzipped (pprof).
    gz: bool,
    /// A recording's format version.
    version: u32,
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn corpus(kind: Kind) -> Vec<Seed> {
    let mut seeds = Vec::new();
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(corpus_dir()).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    for path in paths.into_iter().filter(|p| p.is_file() && p.extension().is_none_or(|e| e != "md")) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).unwrap();
        let gz = bytes.starts_with(&[0x1f, 0x8b]);
        let plain = if gz { gunzip(&bytes) } else { bytes.clone() };
        let format = detect(&plain);
        let k = match format {
            Some(Format::PerfData) => Kind::PerfData,
            Some(Format::Pprof) => Kind::Pprof,
            Some(Format::Folded) => Kind::Folded,
            Some(Format::PerfScript) => Kind::PerfScript,
            Some(Format::Recording) => Kind::Recording,
            None => panic!("corpus file {name} is no format we read"),
        };
        if k != kind {
            continue;
        }
        match decode(&bytes, &name, &ImportOptions::default()) {
            Ok(_) => {}
            // perf.data names binaries of the machine it was recorded on: decoding without them is fine.
            Err(ImportError::PerfData(whyslow_perfdata::PerfDataError::BinariesMissing { .. })) => {}
            Err(ImportError::Recording(whyslow_model::file::FileError::Version { .. })) => panic!(
                "corpus file {name} is a recording of an older format: record it again \
                 (tests/corpus/README.md says how)"
            ),
            Err(e) => panic!("corpus file {name} must import: {e}"),
        }
        let (plain, version) = match kind {
            Kind::Recording => {
                let (version, postcard) = recording_parts(&bytes);
                (postcard, version)
            }
            _ => (plain, 0),
        };
        seeds.push(Seed { name, plain, gz, version });
    }
    if kind == Kind::Recording {
        // Recordings of what the other formats import, so every version has seeds of the current format.
        for k in [Kind::Pprof, Kind::PerfScript, Kind::Folded] {
            for s in corpus(k) {
                let bytes = if s.gz { gzip(&s.plain) } else { s.plain.clone() };
                let p = decode(&bytes, &s.name, &ImportOptions::default()).unwrap();
                let (version, postcard) = recording_parts(&whyslow_model::file::encode(&p));
                seeds.push(Seed {
                    name: format!("{} (as a recording)", s.name),
                    plain: postcard,
                    gz: false,
                    version,
                });
            }
        }
    }
    assert!(!seeds.is_empty(), "no corpus file of format {}", kind.name());
    seeds
}

/// One mutant of a seed: 1 to 4 mutations, structure-aware for the seed's format, plus now and then
/// random bytes behind the format's magic.
fn mutant(rng: &mut Rng, kind: Kind, seed: &Seed, others: &[&[u8]]) -> Vec<u8> {
    let mut v = seed.plain.clone();
    if rng.chance(1) {
        let magic: &[u8] = match kind {
            Kind::PerfData => b"PERFILE2",
            Kind::Recording => b"WHYSLOW\0",
            Kind::Pprof => &[0x1f, 0x8b],
            _ => b"",
        };
        let n = rng.below(4096);
        return magic.iter().copied().chain((0..n).map(|_| rng.next() as u8)).collect();
    }
    let rounds = 1 + rng.below(4);
    match kind {
        Kind::PerfData => (0..rounds).for_each(|_| mutate_perf_data(rng, &mut v)),
        Kind::Pprof => {
            (0..rounds).for_each(|_| mutate_protobuf(rng, &mut v, 0));
            if seed.gz && rng.chance(75) {
                v = gzip(&v);
                if rng.chance(10) {
                    mutate_bytes(rng, &mut v); // corrupt gzip
                }
            }
        }
        Kind::Folded | Kind::PerfScript => (0..rounds).for_each(|_| mutate_text(rng, &mut v, others)),
        Kind::Recording => {
            (0..rounds).for_each(|_| {
                if rng.chance(50) {
                    mutate_varint(rng, &mut v)
                } else {
                    mutate_bytes(rng, &mut v)
                }
            });
            v = recording_file(seed.version, &v);
            if rng.chance(10) {
                // The header or the compressed payload itself.
                if rng.chance(50) {
                    let (at, width) = [(8, 4), (12, 8), (20, 4)][rng.below(3)];
                    set_edge(rng, &mut v, at, width);
                } else {
                    mutate_bytes(rng, &mut v);
                }
            }
        }
    }
    v
}

// ---------------------------------------------------------------------------------------------------
// Checking one input.

enum Outcome {
    Decoded,
    Refused(String),
}

/// An error message without its origin and numbers, to count refusals by reason.
fn reason(e: &ImportError, origin: &str) -> String {
    normalized(&e.to_string().replace(origin, ""))
}

/// A message with each run of digits replaced by N, cut to 90 characters.
fn normalized(s: &str) -> String {
    let mut out = String::new();
    let mut last_digit = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !last_digit {
                out.push('N');
            }
            last_digit = true;
        } else {
            out.push(c);
            last_digit = false;
        }
    }
    let out = out.trim_start_matches([':', ' ']).to_string();
    out.chars().take(90).collect()
}

/// What `whyslow report`, `flamegraph`, `export` and `doctor` do with a profile: analyses and renderers
/// (each may refuse a profile with an error, e.g. one without samples of a type, but never panic). The
/// flame graph, the exports and the doctor only when `all` (they take most of the time).
fn consume(p: &whyslow_model::Profile, origin: &str, all: bool) {
    use whyslow_render as r;
    let mut out = std::io::sink();
    for value in 0..p.sample_types.len().min(4) {
        whyslow_analyze::top_functions(p, value);
        let o = r::text::ReportOptions { value, limit: 20, threads: true };
        let _ = r::text::report(&mut out, p, &o);
    }
    let _ = r::json::report(&mut out, p, 0);
    let _ = r::syscalls::table(&mut out, p, &whyslow_analyze::syscall_summary(p, true), 25);
    let _ = r::calls::table(&mut out, p, &whyslow_analyze::call_summary(p), true, 25);
    if !all {
        return;
    }
    let flame = r::flamegraph::FlameOptions { title: origin.into(), subtitle: None, reverse: false };
    let _ = r::flamegraph::svg(&mut out, p, 0, &flame);
    let _ = r::export::pprof(&mut out, p);
    let _ = r::export::folded(&mut out, p, 0);
    let _ = r::export::speedscope(&mut out, p, 0);
    let _ = r::export::callgrind(&mut out, p, 0);
    let d = whyslow_analyze::doctor::diagnose(p, origin);
    let _ =
        r::doctor::text(&mut out, p, &d, &r::doctor::TextOptions { limit: 25, width: 110, verbose: false });
    let _ = r::doctor::json(&mut out, p, &d);
}

/// Decodes one input and runs what consumers run on it. Err: what went wrong (a crash). Unless `full`,
/// perf.data is decoded (parsed, converted, unwound) without symbolizing (the symbolizer reads every
/// binary's debug info: 50 ms a check) and a profile is not rendered in every format.
fn check(input: &[u8], origin: &str, full: bool) -> Result<Outcome, String> {
    PANICS.with(|p| p.borrow_mut().clear());
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    IN_CHECK.with(|c| c.set(true));
    let opts = ImportOptions { max_bytes: 16 << 20, ..Default::default() };
    let result = catch_unwind(AssertUnwindSafe(|| {
        let decoded = if full || !input.starts_with(whyslow_perfdata::MAGIC) {
            decode(input, origin, &opts).map(Some)
        } else {
            whyslow_perfdata::decode(input, origin).map(|_| None).map_err(ImportError::from)
        };
        match decoded {
            Ok(Some(p)) => {
                p.validate().map_err(|e| format!("decoded an invalid profile: {e}"))?;
                consume(&p, origin, full);
                Ok(Outcome::Decoded)
            }
            Ok(None) => Ok(Outcome::Decoded),
            Err(e) if e.to_string().contains('\n') => Err(format!("error of several lines: {e}")),
            Err(e) => Ok(Outcome::Refused(reason(&e, origin))),
        }
    }));
    IN_CHECK.with(|c| c.set(false));
    let growth = PEAK.with(Cell::get) - base;
    let panics = PANICS.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let outcome = match result {
        Ok(r) => r?,
        Err(_) => return Err(panics.join("; ")),
    };
    if let Some(p) = panics.first() {
        return Err(format!("{p} (caught by the importer, which returned an error)"));
    }
    if growth > memory_limit(input.len()) {
        return Err(format!("held {} MiB for an input of {} bytes", growth >> 20, input.len()));
    }
    Ok(outcome)
}

// ---------------------------------------------------------------------------------------------------
// The run of one format.

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| (h ^ x as u64).wrapping_mul(0x100_0000_01b3))
}

/// Aborts the process when one check runs longer than the limit (its input is in the current file).
fn watchdog(kind: Kind, current: PathBuf, started: Arc<Mutex<Option<Instant>>>, done: Arc<AtomicBool>) {
    let limit = Duration::from_secs(env("WHYSLOW_FUZZ_HANG_SECS").unwrap_or(60));
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let s = *started.lock().unwrap();
            if s.is_some_and(|s| s.elapsed() > limit) {
                eprintln!(
                    "fuzz {}: HANG: one input ran longer than {limit:?}; it is in {}",
                    kind.name(),
                    current.display()
                );
                std::process::abort();
            }
        }
    });
}

fn fuzz(kind: Kind) {
    install_panic_hook();
    let seed: u64 = env("WHYSLOW_FUZZ_SEED").unwrap_or(0x5eed);
    let secs: Option<u64> = env("WHYSLOW_FUZZ_SECS");
    let seeds = corpus(kind);
    let iters = env("WHYSLOW_FUZZ_ITERS").unwrap_or(kind.default_iters());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz");
    std::fs::create_dir_all(&dir).unwrap();
    let current = dir.join(format!("current-{}", kind.name()));
    let current_file = std::fs::File::create(&current).unwrap();
    let started = Arc::new(Mutex::new(None));
    let done = Arc::new(AtomicBool::new(false));
    watchdog(kind, current.clone(), started.clone(), done.clone());

    let mut rng = Rng::seeded(seed ^ (kind as u64) << 56);
    let t0 = Instant::now();
    let deadline = secs.map(|s| t0 + Duration::from_secs(s));
    let (mut tried, mut decoded) = (0usize, 0usize);
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    let mut slowest = (Duration::ZERO, String::new());
    let mut most_memory = 0isize;
    let mut crashes: Vec<String> = Vec::new();
    // Crashes by what they say (numbers left out): a few inputs of each are saved.
    let mut signatures: BTreeMap<String, usize> = BTreeMap::new();
    let plains: Vec<&[u8]> = seeds.iter().map(|s| s.plain.as_slice()).collect();
    loop {
        match deadline {
            Some(d) if Instant::now() >= d => break,
            None if tried >= iters => break,
            _ => {}
        }
        let s = &seeds[tried % seeds.len()];
        let input = mutant(&mut rng, kind, s, &plains);
        let what = format!("{} mutant {tried} (seed {seed})", s.name);
        // Rewritten in place through one open file: replacing the file (or truncating it to nothing)
        // makes ext4 write it out on every close, which made the checks wait for the disk.
        current_file.set_len(input.len() as u64).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&current_file, &input, 0).unwrap();
        *started.lock().unwrap() = Some(Instant::now());
        let t = Instant::now();
        let base = LIVE.with(Cell::get);
        let result = check(&input, &what, tried % if kind == Kind::PerfData { 16 } else { 8 } == 0);
        let took = t.elapsed();
        *started.lock().unwrap() = None;
        most_memory = most_memory.max(PEAK.with(Cell::get) - base);
        tried += 1;
        if took > slowest.0 {
            slowest = (took, what.clone());
            std::fs::write(dir.join(format!("slowest-{}", kind.name())), &input).unwrap();
        }
        match result {
            Ok(Outcome::Decoded) => decoded += 1,
            Ok(Outcome::Refused(r)) => *refused.entry(r).or_default() += 1,
            Err(why) => {
                // "panicked at FILE:LINE: message": the place as it is, the message without numbers.
                let signature = match why.split_once(": ") {
                    Some((place, msg)) => format!("{place}: {}", normalized(msg)),
                    None => normalized(&why),
                };
                let n = signatures.entry(signature).or_default();
                *n += 1;
                if *n <= 3 {
                    let path = dir.join(format!("crash-{}-{:016x}", kind.name(), fnv(&input)));
                    std::fs::write(&path, &input).unwrap();
                    eprintln!(
                        "fuzz {}: CRASH: {what}: {why}; input saved to {}",
                        kind.name(),
                        path.display()
                    );
                }
                crashes.push(format!("{what}: {why}"));
            }
        }
        if took > Duration::from_secs(10) {
            crashes.push(format!("{what}: took {took:?}"));
        }
    }
    done.store(true, Ordering::Relaxed);
    let total_refused: usize = refused.values().sum();
    let mut reasons: Vec<(&String, &usize)> = refused.iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(a.1));
    eprintln!(
        "fuzz {}: {tried} mutants in {:.1} s, {decoded} decoded, {total_refused} refused, slowest {:?} ({}), \
         most memory held {:.1} MiB, {} crashes",
        kind.name(),
        t0.elapsed().as_secs_f64(),
        slowest.0,
        slowest.1,
        most_memory as f64 / (1 << 20) as f64,
        crashes.len()
    );
    for (r, n) in reasons.iter().take(12) {
        eprintln!("  {n:>8} refused: {r}");
    }
    if reasons.len() > 12 {
        eprintln!(
            "  {:>8} refused for {} other reasons",
            reasons[12..].iter().map(|r| r.1).sum::<usize>(),
            reasons.len() - 12
        );
    }
    for (why, n) in &signatures {
        eprintln!("  {n:>8} crashed: {why}");
    }
    assert!(crashes.is_empty(), "{} crashes:\n{}", crashes.len(), crashes.join("\n"));
    // The mutations must reach past the first checks: some mutants decode, and the refusals have
    // more than one reason.
    assert!(decoded * 50 >= tried, "only {decoded} of {tried} mutants decoded: the mutations are too blunt");
    assert!(reasons.len() >= 3, "all refusals for {} reasons", reasons.len());
}

#[test]
fn perf_data() {
    fuzz(Kind::PerfData);
}

#[test]
fn pprof() {
    fuzz(Kind::Pprof);
}

#[test]
fn folded() {
    fuzz(Kind::Folded);
}

#[test]
fn perf_script() {
    fuzz(Kind::PerfScript);
}

#[test]
fn recording() {
    fuzz(Kind::Recording);
}

#[test]
fn random_bytes() {
    install_panic_hook();
    let seed: u64 = env("WHYSLOW_FUZZ_SEED").unwrap_or(0x5eed);
    let mut rng = Rng::seeded(seed);
    for i in 0..env("WHYSLOW_FUZZ_ITERS").unwrap_or(5000) {
        let n = rng.below(4096);
        let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        let what = format!("random input {i} (seed {seed})");
        if let Err(why) = check(&bytes, &what, true) {
            panic!("{what}: {why}");
        }
    }
}

/// Inputs built to multiply small sizes into large ones, which random mutations hardly produce.
#[test]
fn crafted_inputs_stay_bounded() {
    install_panic_hook();
    use whyslow_model::pprof as proto;
    // One location of 20,000 inlined lines named 20,000 times by one sample: 400 million frames,
    // unless the stack is cut while it is built.
    let n = 20_000;
    let prof = proto::Profile {
        sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
        sample: vec![proto::Sample { location_id: vec![1; n], value: vec![1], label: vec![] }],
        location: vec![proto::Location {
            id: 1,
            line: vec![proto::Line { function_id: 1, line: 0 }; n],
            ..Default::default()
        }],
        function: vec![proto::Function { id: 1, name: 3, ..Default::default() }],
        string_table: vec!["".into(), "samples".into(), "count".into(), "f".into()],
        ..Default::default()
    };
    let bytes = prost::Message::encode_to_vec(&prof);
    let t = Instant::now();
    assert!(matches!(check(&bytes, "deep.pb", true), Ok(Outcome::Decoded)));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let p = decode(&bytes, "deep.pb", &ImportOptions::default()).unwrap();
    assert_eq!(p.stack_frames(p.samples[0].stack).len(), 8192);
    assert!(p.meta.notes.iter().any(|n| n.contains("1 stacks deeper than 8192")), "{:?}", p.meta.notes);

    // A sample type's unit of 70,000 characters: a column that wide is a formatting panic.
    let mut wide = prof.clone();
    wide.string_table[2] = "u".repeat(70_000);
    wide.location[0].line.truncate(1);
    wide.sample[0].location_id.truncate(1);
    let bytes = prost::Message::encode_to_vec(&wide);
    assert!(matches!(check(&bytes, "wide.pb", true), Ok(Outcome::Decoded)));

    // perf script text of 20,000 events, one sample each: every sample has a value per event (3.2 GB).
    let text: String = (0..20_000).map(|i| format!("t 1 1.000001: ev{i}:\n\tf000 f{i} (/x)\n\n")).collect();
    let r = check(text.as_bytes(), "events.perf-script", true);
    assert!(matches!(r, Ok(Outcome::Refused(_))), "{:?}", r.as_ref().err());
}

/// Inputs that once crashed an importer (`tests/corpus/regressions/`, found by this fuzzing), each
/// checked as it is: decoded or refused, within bounds.
#[test]
fn regressions() {
    install_panic_hook();
    let Ok(dir) = std::fs::read_dir(corpus_dir().join("regressions")) else { return };
    let mut paths: Vec<PathBuf> = dir.map(|e| e.unwrap().path()).collect();
    paths.retain(|p| p.extension().is_none_or(|e| e != "md"));
    paths.sort();
    let mut failed = Vec::new();
    for path in &paths {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let t = Instant::now();
        match check(&std::fs::read(path).unwrap(), &name, true) {
            Err(why) => failed.push(format!("{name}: {why}")),
            Ok(_) if t.elapsed() > Duration::from_secs(10) => {
                failed.push(format!("{name}: took {:?}", t.elapsed()))
            }
            Ok(_) => {}
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Checks the one input WHYSLOW_FUZZ_INPUT names (a saved crash), outside the panic accounting, so a
/// panic shows its backtrace; does nothing without it.
#[test]
fn reproduce() {
    let Some(path) = std::env::var_os("WHYSLOW_FUZZ_INPUT") else { return };
    let bytes = std::fs::read(&path).unwrap();
    let origin = Path::new(&path).display().to_string();
    if bytes.starts_with(whyslow_perfdata::MAGIC) {
        eprintln!(
            "perf.data decode: {:?}",
            whyslow_perfdata::decode(&bytes, &origin).map(|r| r.samples.len())
        );
    }
    match decode(&bytes, &origin, &ImportOptions::default()) {
        Ok(p) => {
            p.validate().unwrap();
            eprintln!("decoded: {} samples, {} stacks", p.samples.len(), p.stacks.len());
            consume(&p, &origin, true);
        }
        Err(e) => eprintln!("refused: {e}"),
    }
}
