//! Names for code no file describes: what JIT runtimes (node --perf-basic-prof, Python 3.12 -X perf,
//! .NET, Java agents, LuaJIT) write for profilers. Two formats become one [`JitMap`] of sorted,
//! non-overlapping named ranges: the perf map text file `/tmp/perf-PID.map` (perf's
//! `tools/perf/Documentation/jit-interface.txt`) and the binary jitdump `jit-PID.dump`, the file
//! `perf inject --jit` reads (`jitdump-specification.txt`); a JIT maps its jitdump, so the path shows in
//! the process's maps.
//!
//! Parses bytes it is given: it never opens a file or touches a process. A bad line or record is skipped
//! and counted, never an error for the whole file (a JIT may still be writing it). Every length read from
//! a file is checked against the bytes present before use, and none sizes an allocation.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The jitdump magic ("JiTD") as the writer's CPU stores a u32; read byte-swapped, the file comes from a
/// machine of the other byte order.
pub const JITDUMP_MAGIC: u32 = 0x4A69_5444;
const HEADER_SIZE: usize = 40;
const RECORD_HEADER_SIZE: usize = 16;
const JIT_CODE_LOAD: u32 = 0;
const JIT_CODE_MOVE: u32 = 1;
const JIT_CODE_DEBUG_INFO: u32 = 2;
const JIT_CODE_CLOSE: u32 = 3;
const JIT_CODE_UNWINDING_INFO: u32 = 4;

/// A named range of jitted code: `[start, start + size)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitSymbol {
    pub start: u64,
    pub size: u64,
    pub name: String,
}

impl JitSymbol {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.size)
    }
}

/// A source position from a jitdump's JIT_CODE_DEBUG_INFO: it holds from `offset` bytes into its
/// function's code up to the next row's offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitLine {
    /// From the start of the function as it was loaded (a move keeps offsets).
    pub offset: u64,
    pub file: String,
    pub line: u32,
    /// Column discriminator; 0 by default.
    pub discrim: u32,
}

/// What the perf map parser read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerfMapStats {
    /// Lines read as symbols (before later lines override parts of them).
    pub symbols: usize,
    /// Lines that are not `START SIZE NAME`: a number not hex (or longer than 64 bits), a missing field,
    /// a range past the end of the address space. Blank lines are not counted.
    pub skipped: usize,
    /// Well-formed lines of size 0: they name no byte and are left out of the map.
    pub empty: usize,
}

/// Where the jitdump's records stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum JitdumpEnd {
    /// Every byte was read as whole records.
    #[default]
    Complete,
    /// The record at this file offset runs past the end (the JIT is still writing it); the records before
    /// it were kept.
    Truncated { offset: u64 },
    /// The record at this file offset declares a size smaller than a record header: nothing after it can
    /// be found.
    BadRecordSize { offset: u64, size: u32 },
}

/// The jitdump's header fields and what its records held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JitdumpStats {
    pub version: u32,
    /// ELF `e_machine` of the code (62 for x86-64).
    pub elf_mach: u32,
    pub pid: u32,
    pub timestamp: u64,
    /// Bit 0: timestamps are an architecture clock (TSC), not CLOCK_MONOTONIC.
    pub flags: u64,
    pub loads: usize,
    pub moves: usize,
    pub debug_info: usize,
    pub unwinding_info: usize,
    /// A JIT_CODE_CLOSE record was seen (the runtime finished).
    pub closed: bool,
    /// Records of an id this parser does not know, skipped whole.
    pub unknown: usize,
    /// Records of a known kind whose fields do not fit in them (a name without its NUL, more code than
    /// follows the name, a range past the end of the address space, a move of an index never loaded):
    /// skipped, or for debug info kept up to the entry that did not fit.
    pub skipped: usize,
    pub end: JitdumpEnd,
}

/// Why a jitdump cannot be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JitError {
    #[error("jitdump is {len} bytes, shorter than its header ({need} bytes)")]
    ShortHeader { len: usize, need: usize },
    #[error("not a jitdump: magic {0:#010x}, expected {JITDUMP_MAGIC:#010x}")]
    BadMagic(u32),
    #[error("jitdump was written by a machine of the other byte order (magic {0:#010x}); read it there")]
    OtherEndian(u32),
    #[error("jitdump header declares {0} bytes, less than the {HEADER_SIZE} every header has")]
    BadHeaderSize(u32),
}

/// Named ranges of jitted code, sorted by start and non-overlapping, with the source lines a jitdump
/// gave. Where two entries cover the same byte the later one (in file order, or the argument of
/// [`JitMap::merge`]) owns it, and what is left of the earlier one keeps its name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JitMap {
    symbols: Vec<JitSymbol>,
    /// Parallel to `symbols`.
    lines: Vec<Option<Lines>>,
}

/// The line table of one loaded function, shared by every piece an override leaves of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Lines {
    /// Where the function's code starts: the offsets count from here, while a leftover piece may start
    /// later.
    base: u64,
    rows: LineRows,
}

impl JitMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads perf map text: lines `START SIZE NAME`, START and SIZE hex with or without `0x`, NAME the rest
    /// of the line (spaces included; surrounding whitespace and a `\r` dropped). A last line without its
    /// newline is read too.
    ///
    /// A JIT reuses memory and appends a line for the new code, so a later line owns the bytes it covers.
    /// perf (6.1, util/symbol.c) instead keeps every line in a tree keyed by start and returns whichever
    /// overlapping entry its search meets first, which depends on the other entries: measured, two lines
    /// for the same range resolve to the first alone, to the second once one higher entry follows.
    /// perf also reads garbage loosely (a non-hex start as 0, zero sizes as matching their start address);
    /// here those lines are counted and left out.
    pub fn parse_perf_map(text: &[u8]) -> (JitMap, PerfMapStats) {
        let mut stats = PerfMapStats::default();
        let mut b = Builder::default();
        for line in text.split(|&c| c == b'\n') {
            let line = line.trim_ascii();
            if line.is_empty() {
                continue;
            }
            match parse_perf_map_line(line) {
                Some((_, 0, _)) => stats.empty += 1,
                Some((start, size, name)) => {
                    stats.symbols += 1;
                    b.insert(start, start + size, String::from_utf8_lossy(name).into_owned(), None);
                }
                None => stats.skipped += 1,
            }
        }
        (b.finish(), stats)
    }

    /// Reads a jitdump written in this machine's byte order. Code is named where JIT_CODE_LOAD puts it
    /// (`code_addr`, as perf does), and again at a JIT_CODE_MOVE's new address under the name of the load
    /// with its `code_index`; the old range keeps its name until later code covers it, since samples taken
    /// before the move land there. A JIT_CODE_DEBUG_INFO gives the lines of the next load (the format
    /// writes it first); its rows outside that load's code are dropped. Unwinding info is skipped.
    pub fn parse_jitdump(bytes: &[u8]) -> Result<(JitMap, JitdumpStats), JitError> {
        if bytes.len() < HEADER_SIZE {
            return Err(JitError::ShortHeader { len: bytes.len(), need: HEADER_SIZE });
        }
        let h = Fields(bytes);
        let magic = h.u32(0).unwrap_or(0);
        if magic != JITDUMP_MAGIC {
            return Err(if magic == JITDUMP_MAGIC.swap_bytes() {
                JitError::OtherEndian(magic)
            } else {
                JitError::BadMagic(magic)
            });
        }
        let header_size = h.u32(8).unwrap_or(0);
        if (header_size as usize) < HEADER_SIZE {
            return Err(JitError::BadHeaderSize(header_size));
        }
        if header_size as usize > bytes.len() {
            return Err(JitError::ShortHeader { len: bytes.len(), need: header_size as usize });
        }
        let stats = JitdumpStats {
            version: h.u32(4).unwrap_or(0),
            elf_mach: h.u32(12).unwrap_or(0),
            pid: h.u32(20).unwrap_or(0),
            timestamp: h.u64(24).unwrap_or(0),
            flags: h.u64(32).unwrap_or(0),
            ..Default::default()
        };
        let mut reader = DumpReader { stats, ..Default::default() };
        let mut off = header_size as usize;
        while off < bytes.len() {
            let rest = &bytes[off..];
            let offset = off as u64;
            if rest.len() < RECORD_HEADER_SIZE {
                reader.stats.end = JitdumpEnd::Truncated { offset };
                break;
            }
            let (id, size) = (Fields(rest).u32(0).unwrap_or(0), Fields(rest).u32(4).unwrap_or(0));
            if (size as usize) < RECORD_HEADER_SIZE {
                reader.stats.end = JitdumpEnd::BadRecordSize { offset, size };
                break;
            }
            let Some(body) = rest.get(RECORD_HEADER_SIZE..size as usize) else {
                reader.stats.end = JitdumpEnd::Truncated { offset };
                break;
            };
            reader.record(id, body);
            off += size as usize;
        }
        Ok((reader.map.finish(), reader.stats))
    }

    /// Adds `other` over this map: where both name a byte, `other`'s entry owns it (it is the later
    /// source, e.g. a jitdump over a perf map, or a map re-read after the JIT wrote more).
    pub fn merge(&mut self, other: JitMap) {
        let mut b = Builder::from_map(std::mem::take(self));
        for (s, lines) in other.symbols.into_iter().zip(other.lines) {
            let end = s.end();
            b.insert(s.start, end, s.name, lines);
        }
        *self = b.finish();
    }

    /// The symbol whose range holds `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&JitSymbol> {
        self.index_of(addr).map(|i| &self.symbols[i])
    }

    /// The source line of `addr`, when a jitdump gave its function's lines: the row with the greatest
    /// offset not past `addr`.
    pub fn line(&self, addr: u64) -> Option<&JitLine> {
        let lines = self.lines[self.index_of(addr)?].as_ref()?;
        let offset = addr.checked_sub(lines.base)?;
        let n = lines.rows.partition_point(|r| r.offset <= offset);
        n.checked_sub(1).map(|i| &lines.rows[i])
    }

    /// Every symbol, sorted by start, none overlapping, none empty.
    pub fn symbols(&self) -> &[JitSymbol] {
        &self.symbols
    }

    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The map as perf map text (`START SIZE NAME` in lowercase hex without `0x`, one line per symbol in
    /// address order), which [`JitMap::parse_perf_map`] reads back to the same symbols. Line tables are
    /// not kept; a line break in a name becomes a space, and an empty name is written as `?` (a line
    /// without a name is garbage to a reader).
    pub fn to_perf_map(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for s in &self.symbols {
            let name: String = s.name.chars().map(|c| if c == '\n' || c == '\r' { ' ' } else { c }).collect();
            let name = if name.trim().is_empty() { "?" } else { name.trim() };
            let _ = writeln!(out, "{:x} {:x} {}", s.start, s.size, name);
        }
        out
    }

    fn index_of(&self, addr: u64) -> Option<usize> {
        let i = self.symbols.partition_point(|s| s.start <= addr).checked_sub(1)?;
        (addr < self.symbols[i].end()).then_some(i)
    }
}

/// The perf map's file name for a process, `perf-PID.map`; JITs write it in `/tmp`. For a process in
/// another mount namespace perf reads `/proc/PID/root/tmp/perf-NSPID.map`, with the pid the process
/// sees itself as.
pub fn perf_map_name(pid: u32) -> String {
    format!("perf-{pid}.map")
}

/// A jitdump's file name, `jit-PID.dump`; the directory is the JIT's choice.
pub fn jitdump_name(pid: u32) -> String {
    format!("jit-{pid}.dump")
}

/// The pid in a jitdump path (`/any/dir/jit-PID.dump`), as a process's maps show the file its JIT
/// mapped; `None` for any other path. perf accepts the file only when that pid is the process's own.
/// A `" (deleted)"` suffix is not stripped: such a path cannot be opened.
pub fn jitdump_pid(path: &str) -> Option<u32> {
    let file = path.rsplit('/').next()?;
    let digits = file.strip_prefix("jit-")?.strip_suffix(".dump")?;
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The first word of `s` and the rest after the blanks that end it.
fn split_word(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = s.iter().position(|&c| c == b' ' || c == b'\t')?;
    Some((&s[..at], s[at..].trim_ascii_start()))
}

fn parse_perf_map_line(line: &[u8]) -> Option<(u64, u64, &[u8])> {
    let (start, rest) = split_word(line)?;
    let (size, name) = split_word(rest)?;
    let (start, size) = (hex(start)?, hex(size)?);
    start.checked_add(size)?;
    let name = name.trim_ascii();
    (!name.is_empty()).then_some((start, size, name))
}

fn hex(s: &[u8]) -> Option<u64> {
    let digits = s.strip_prefix(b"0x").or_else(|| s.strip_prefix(b"0X")).unwrap_or(s);
    // from_str_radix alone would take a sign, and fail only late on 40 digits.
    if digits.is_empty() || digits.len() > 16 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// Fixed-position fields of a record, read in the host's byte order; `None` past the end.
#[derive(Clone, Copy)]
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn u32(self, at: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(self.0.get(at..at.checked_add(4)?)?.try_into().ok()?))
    }
    fn u64(self, at: usize) -> Option<u64> {
        Some(u64::from_ne_bytes(self.0.get(at..at.checked_add(8)?)?.try_into().ok()?))
    }
    /// The NUL-terminated string at `at` (without the NUL) and where the bytes after it start.
    fn cstr(self, at: usize) -> Option<(&'a [u8], usize)> {
        let s = self.0.get(at..)?;
        let len = s.iter().position(|&c| c == 0)?;
        Some((&s[..len], at + len + 1))
    }
}

type LineRows = Arc<[JitLine]>;

/// The state between jitdump records.
#[derive(Default)]
struct DumpReader {
    map: Builder,
    stats: JitdumpStats,
    /// What each JIT_CODE_LOAD's `code_index` named, and its lines, for moves.
    loaded: HashMap<u64, (String, Option<LineRows>)>,
    /// The last debug info, waiting for the load it describes.
    pending_lines: Option<Vec<RawLine>>,
}

impl DumpReader {
    fn record(&mut self, id: u32, body: &[u8]) {
        let used = match id {
            JIT_CODE_LOAD => {
                self.stats.loads += 1;
                // Debug info belongs to the next load, whatever becomes of it.
                let raw = self.pending_lines.take();
                self.load(body, raw)
            }
            JIT_CODE_MOVE => {
                self.stats.moves += 1;
                self.moved(body)
            }
            JIT_CODE_DEBUG_INFO => {
                self.stats.debug_info += 1;
                let (raw, complete) = parse_debug_info(body);
                self.pending_lines = Some(raw);
                complete.then_some(())
            }
            JIT_CODE_CLOSE => {
                self.stats.closed = true;
                Some(())
            }
            JIT_CODE_UNWINDING_INFO => {
                self.stats.unwinding_info += 1;
                Some(())
            }
            _ => {
                self.stats.unknown += 1;
                Some(())
            }
        };
        if used.is_none() {
            self.stats.skipped += 1;
        }
    }

    fn load(&mut self, body: &[u8], raw: Option<Vec<RawLine>>) -> Option<()> {
        let load = parse_load(body)?;
        let rows = raw.and_then(|raw| line_table(raw, load.code_addr, load.end));
        let name = String::from_utf8_lossy(load.name).into_owned();
        if load.end > load.code_addr {
            let lines = rows.clone().map(|rows| Lines { base: load.code_addr, rows });
            self.map.insert(load.code_addr, load.end, name.clone(), lines);
        }
        self.loaded.insert(load.code_index, (name, rows));
        Some(())
    }

    /// JIT_CODE_MOVE after the record header: pid u32, tid u32, vma, old_code_addr, new_code_addr,
    /// code_size, code_index (u64 each).
    fn moved(&mut self, body: &[u8]) -> Option<()> {
        let f = Fields(body);
        let (new_addr, code_size, index) = (f.u64(24)?, f.u64(32)?, f.u64(40)?);
        let end = new_addr.checked_add(code_size)?;
        let (name, rows) = self.loaded.get(&index)?;
        if end > new_addr {
            let lines = rows.clone().map(|rows| Lines { base: new_addr, rows });
            self.map.insert(new_addr, end, name.clone(), lines);
        }
        Some(())
    }
}

struct Load<'a> {
    code_addr: u64,
    end: u64,
    code_index: u64,
    name: &'a [u8],
}

/// JIT_CODE_LOAD after the record header: pid u32, tid u32, vma, code_addr, code_size, code_index (u64
/// each), the name with its NUL, then the code bytes.
fn parse_load(body: &[u8]) -> Option<Load<'_>> {
    let f = Fields(body);
    let (code_addr, code_size, code_index) = (f.u64(16)?, f.u64(24)?, f.u64(32)?);
    let (name, code_at) = f.cstr(40)?;
    // The code itself is not needed, but a record too short to hold it is not what it claims to be.
    if code_size > (body.len() - code_at) as u64 {
        return None;
    }
    Some(Load { code_addr, end: code_addr.checked_add(code_size)?, code_index, name })
}

struct RawLine {
    addr: u64,
    line: u32,
    discrim: u32,
    file: String,
}

/// JIT_CODE_DEBUG_INFO after the record header: code_addr u64, nr_entry u64, then entries of addr u64,
/// line u32, discrim u32 and the file name with its NUL. Bytes after `nr_entry` entries are padding. The
/// entries that fit, and whether all `nr_entry` did.
fn parse_debug_info(body: &[u8]) -> (Vec<RawLine>, bool) {
    let f = Fields(body);
    let Some(count) = f.u64(8) else { return (Vec::new(), false) };
    let mut out = Vec::new();
    let mut at = 16;
    // Each entry takes at least 17 bytes, so the record's size bounds the loop, not `count`.
    while (out.len() as u64) < count {
        let entry = (|| {
            let (addr, line, discrim) = (f.u64(at)?, f.u32(at + 8)?, f.u32(at + 12)?);
            let (file, next) = f.cstr(at + 16)?;
            Some((RawLine { addr, line, discrim, file: String::from_utf8_lossy(file).into_owned() }, next))
        })();
        let Some((row, next)) = entry else { return (out, false) };
        out.push(row);
        at = next;
    }
    (out, true)
}

/// The rows inside `[start, end)` as offsets from `start`, sorted (stable, so equal offsets keep the
/// writer's order); `None` when none are inside.
fn line_table(raw: Vec<RawLine>, start: u64, end: u64) -> Option<LineRows> {
    let mut rows: Vec<JitLine> = raw
        .into_iter()
        .filter(|r| start <= r.addr && r.addr < end)
        .map(|r| JitLine { offset: r.addr - start, file: r.file, line: r.line, discrim: r.discrim })
        .collect();
    rows.sort_by_key(|r| r.offset);
    (!rows.is_empty()).then(|| rows.into())
}

/// Non-overlapping pieces by start, each new range cutting what it covers out of the older ones.
#[derive(Default)]
struct Builder {
    pieces: BTreeMap<u64, Piece>,
}

struct Piece {
    end: u64,
    name: String,
    lines: Option<Lines>,
}

impl Builder {
    fn from_map(map: JitMap) -> Self {
        let pieces = map
            .symbols
            .into_iter()
            .zip(map.lines)
            .map(|(s, lines)| (s.start, Piece { end: s.end(), name: s.name, lines }))
            .collect();
        Builder { pieces }
    }

    /// Puts `[start, end)` over whatever is there; `start < end`.
    fn insert(&mut self, start: u64, end: u64, name: String, lines: Option<Lines>) {
        let mut tail = None;
        // A piece that starts before the range and reaches into it keeps its head, and its part past the
        // range if any.
        if let Some((_, p)) = self.pieces.range_mut(..start).next_back() {
            if p.end > start {
                if p.end > end {
                    tail = Some((end, Piece { end: p.end, name: p.name.clone(), lines: p.lines.clone() }));
                }
                p.end = start;
            }
        }
        // Pieces that start inside the range are covered, all but a part of the last past its end.
        let inside: Vec<u64> = self.pieces.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some(p) = self.pieces.remove(&s) {
                if p.end > end {
                    tail = Some((end, p));
                }
            }
        }
        if let Some((at, p)) = tail {
            self.pieces.insert(at, p);
        }
        self.pieces.insert(start, Piece { end, name, lines });
    }

    fn finish(self) -> JitMap {
        let mut map = JitMap::default();
        for (start, p) in self.pieces {
            map.symbols.push(JitSymbol { start, size: p.end - start, name: p.name });
            map.lines.push(p.lines);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::{
        jitdump_name, jitdump_pid, perf_map_name, JitError, JitMap, JitSymbol, JitdumpEnd, JitdumpStats,
        PerfMapStats, JITDUMP_MAGIC, JIT_CODE_CLOSE, JIT_CODE_DEBUG_INFO, JIT_CODE_LOAD, JIT_CODE_MOVE,
        JIT_CODE_UNWINDING_INFO,
    };

    fn sym(start: u64, size: u64, name: &str) -> JitSymbol {
        JitSymbol { start, size, name: name.to_string() }
    }

    /// Every symbol non-empty, sorted, none overlapping, and the lines parallel.
    fn assert_well_formed(m: &JitMap) {
        assert_eq!(m.symbols.len(), m.lines.len());
        for s in &m.symbols {
            assert!(s.size > 0 && s.start.checked_add(s.size).is_some(), "{s:?}");
        }
        for w in m.symbols.windows(2) {
            assert!(w[0].end() <= w[1].start, "{w:?}");
        }
    }

    const PERF_MAP: &str = "7f0000001000 40 alpha\n\
        7f0000001040 0x20 beta gamma\n\
        0x7f0000001100 10 with prefix\n\
        \n\
        zzzz 10 not hex\n\
        7f0000002000 10\n\
        7f0000002000\n\
        ffffffffffffffff 2 past the end\n\
        7f0000002000 1g bad size\n\
        12345678901234567 1 seventeen digits\n\
        +10 10 signed\n\
        7f0000003000 0 empty\n\
        7f0000001000 10 alpha2\r\n  \
        7f0000004000   8   spaced  name  \n\
        7f0000005000 8 last-unterminated";

    #[test]
    fn perf_map_skips_garbage_and_later_lines_override() {
        let (m, stats) = JitMap::parse_perf_map(PERF_MAP.as_bytes());
        assert_eq!(stats, PerfMapStats { symbols: 6, skipped: 7, empty: 1 });
        assert_eq!(
            m.symbols(),
            [
                sym(0x7f0000001000, 0x10, "alpha2"),
                sym(0x7f0000001010, 0x30, "alpha"),
                sym(0x7f0000001040, 0x20, "beta gamma"),
                sym(0x7f0000001100, 0x10, "with prefix"),
                sym(0x7f0000004000, 8, "spaced  name"),
                sym(0x7f0000005000, 8, "last-unterminated"),
            ]
        );
        assert_well_formed(&m);
        let name = |a: u64| m.lookup(a).map(|s| s.name.as_str());
        assert_eq!(name(0x7f0000001000), Some("alpha2"));
        assert_eq!(name(0x7f000000100f), Some("alpha2"));
        assert_eq!(name(0x7f0000001010), Some("alpha"));
        // start, start + size - 1, start + size of "beta gamma"
        assert_eq!(name(0x7f0000001040), Some("beta gamma"));
        assert_eq!(name(0x7f000000105f), Some("beta gamma"));
        assert_eq!(name(0x7f0000001060), None);
        assert_eq!(name(0x7f0000000fff), None);
        assert_eq!(name(0x7f0000003000), None, "a size-0 line names nothing");
        assert_eq!(name(0), None);
        assert_eq!(name(u64::MAX), None);
        assert_eq!(m.line(0x7f0000001000), None, "perf maps have no lines");
    }

    #[test]
    fn overrides_cut_older_ranges() {
        let text = "1000 100 big\n1040 10 mid\n\
                    ff0 30 left\n1045 100 right\n2000 10 x\n2000 10 y\n3000 10 p\n3010 10 q\n2ff8 30 r\n";
        let (m, stats) = JitMap::parse_perf_map(text.as_bytes());
        assert_eq!(stats, PerfMapStats { symbols: 9, skipped: 0, empty: 0 });
        assert_eq!(
            m.symbols(),
            [
                sym(0xff0, 0x30, "left"),
                sym(0x1020, 0x20, "big"),
                sym(0x1040, 0x5, "mid"),
                sym(0x1045, 0x100, "right"),
                sym(0x2000, 0x10, "y"),
                sym(0x2ff8, 0x30, "r"),
            ]
        );
        // A later range inside an older one splits it in two.
        let (m, _) = JitMap::parse_perf_map(b"1000 100 big\n1040 10 mid\n");
        assert_eq!(
            m.symbols(),
            [sym(0x1000, 0x40, "big"), sym(0x1040, 0x10, "mid"), sym(0x1050, 0xb0, "big")]
        );
    }

    #[test]
    fn perf_map_round_trips_and_merge_prefers_the_other_map() {
        let (m, _) = JitMap::parse_perf_map(PERF_MAP.as_bytes());
        let text = m.to_perf_map();
        assert_eq!(
            text,
            "7f0000001000 10 alpha2\n7f0000001010 30 alpha\n7f0000001040 20 beta gamma\n\
             7f0000001100 10 with prefix\n7f0000004000 8 spaced  name\n7f0000005000 8 last-unterminated\n"
        );
        let (again, stats) = JitMap::parse_perf_map(text.as_bytes());
        assert_eq!((again, stats.skipped), (m.clone(), 0));

        let mut merged = m;
        let (later, _) = JitMap::parse_perf_map(b"7f0000001030 20 newer\n10 10 low\n");
        merged.merge(later);
        assert_eq!(
            merged.symbols()[..5],
            [
                sym(0x10, 0x10, "low"),
                sym(0x7f0000001000, 0x10, "alpha2"),
                sym(0x7f0000001010, 0x20, "alpha"),
                sym(0x7f0000001030, 0x20, "newer"),
                sym(0x7f0000001050, 0x10, "beta gamma"),
            ]
        );
        assert_well_formed(&merged);
        let mut empty = JitMap::new();
        empty.merge(merged.clone());
        assert_eq!(empty, merged);
    }

    #[test]
    fn file_names() {
        assert_eq!(perf_map_name(4242), "perf-4242.map");
        assert_eq!(jitdump_name(4242), "jit-4242.dump");
        assert_eq!(jitdump_pid("/home/u/.debug/jit/java-jit-20240101.abc/jit-4242.dump"), Some(4242));
        assert_eq!(jitdump_pid("/tmp/jit-17.dump"), Some(17));
        assert_eq!(jitdump_pid("jit-17.dump"), Some(17));
        for not in ["/tmp/jit-.dump", "/tmp/jit-12x.dump", "/tmp/jit-12.dump (deleted)", "/tmp/xjit-12.dump"]
        {
            assert_eq!(jitdump_pid(not), None, "{not}");
        }
        assert_eq!(jitdump_pid("/tmp/jit-+12.dump"), None);
        assert_eq!(jitdump_pid("/tmp/jit-99999999999.dump"), None);
        assert_eq!(jitdump_pid("/tmp/jit-12.dump/x"), None);
    }

    /// A jitdump written the way a JIT writes one, field by field in the host's byte order.
    struct Dump(Vec<u8>);

    impl Dump {
        fn new(pid: u32) -> Self {
            let mut d = Dump(Vec::new());
            d.u32(JITDUMP_MAGIC).u32(1).u32(40).u32(62).u32(0).u32(pid).u64(7).u64(0);
            d
        }
        fn u32(&mut self, v: u32) -> &mut Self {
            self.0.extend_from_slice(&v.to_ne_bytes());
            self
        }
        fn u64(&mut self, v: u64) -> &mut Self {
            self.0.extend_from_slice(&v.to_ne_bytes());
            self
        }
        fn bytes(&mut self, v: &[u8]) -> &mut Self {
            self.0.extend_from_slice(v);
            self
        }
        fn record(&mut self, id: u32, body: &Dump) -> &mut Self {
            let size = (16 + body.0.len()) as u32;
            self.u32(id).u32(size).u64(100).bytes(&body.0)
        }
        fn load(&mut self, addr: u64, size: u64, index: u64, name: &str) -> &mut Self {
            let mut b = Dump(Vec::new());
            b.u32(4242).u32(4243).u64(addr).u64(addr).u64(size).u64(index);
            b.bytes(name.as_bytes()).bytes(&[0]).bytes(&vec![0xc3; size as usize]);
            self.record(JIT_CODE_LOAD, &b)
        }
    }

    /// Debug info for code at 0x10000 (two rows inside, written out of order, one outside), two loads,
    /// a move of the first, unwinding info, an unknown record.
    fn sample_dump() -> Dump {
        let mut d = Dump::new(4242);
        let mut info = Dump(Vec::new());
        info.u64(0x10000).u64(3);
        info.u64(0x10008).u32(12).u32(0).bytes(b"a.js\0");
        info.u64(0x10000).u32(10).u32(1).bytes(b"a.js\0");
        info.u64(0x90000).u32(99).u32(0).bytes(b"far.js\0");
        info.bytes(&[0; 3]); // padding after the entries
        d.record(JIT_CODE_DEBUG_INFO, &info);
        d.load(0x10000, 0x20, 1, "fn_a");
        d.load(0x10100, 0x10, 2, "fn b (hot)");
        let mut mv = Dump(Vec::new());
        mv.u32(4242).u32(4243).u64(0x30000).u64(0x10000).u64(0x30000).u64(0x20).u64(1);
        d.record(JIT_CODE_MOVE, &mv);
        let mut unwind = Dump(Vec::new());
        unwind.u64(8).u64(8).u64(0).bytes(&[0; 8]);
        d.record(JIT_CODE_UNWINDING_INFO, &unwind);
        d.record(99, &Dump(vec![1; 8]));
        d
    }

    #[test]
    fn jitdump_loads_moves_lines_and_a_truncated_last_record() {
        let mut d = sample_dump();
        let cut_at = d.0.len() as u64;
        d.load(0x50000, 0x40, 3, "still being written");
        d.0.truncate(cut_at as usize + 30);
        let (m, stats) = JitMap::parse_jitdump(&d.0).unwrap();
        assert_eq!(
            m.symbols(),
            [sym(0x10000, 0x20, "fn_a"), sym(0x10100, 0x10, "fn b (hot)"), sym(0x30000, 0x20, "fn_a")]
        );
        assert_eq!(
            stats,
            JitdumpStats {
                version: 1,
                elf_mach: 62,
                pid: 4242,
                timestamp: 7,
                flags: 0,
                loads: 2,
                moves: 1,
                debug_info: 1,
                unwinding_info: 1,
                closed: false,
                unknown: 1,
                skipped: 0,
                end: JitdumpEnd::Truncated { offset: cut_at },
            }
        );
        let line = |a: u64| m.line(a).map(|l| (l.file.as_str(), l.line, l.discrim, l.offset));
        assert_eq!(line(0x10000), Some(("a.js", 10, 1, 0)));
        assert_eq!(line(0x10007), Some(("a.js", 10, 1, 0)));
        assert_eq!(line(0x10008), Some(("a.js", 12, 0, 8)));
        assert_eq!(line(0x1001f), Some(("a.js", 12, 0, 8)));
        assert_eq!(line(0x10020), None);
        assert_eq!(line(0x30009), Some(("a.js", 12, 0, 8)), "a move keeps the lines");
        assert_eq!(line(0x10100), None, "debug info is for the next load only");
        assert_eq!(m.lookup(0x1001f).map(|s| s.name.as_str()), Some("fn_a"));
        assert_eq!(m.lookup(0x10020), None);
    }

    #[test]
    fn jitdump_ends_and_errors() {
        let mut d = sample_dump();
        d.record(JIT_CODE_CLOSE, &Dump(Vec::new()));
        let (_, stats) = JitMap::parse_jitdump(&d.0).unwrap();
        assert!(stats.closed && stats.end == JitdumpEnd::Complete);

        let at = d.0.len() as u64;
        d.u32(JIT_CODE_LOAD).u32(8).u64(0).load(0x70000, 4, 9, "after the bad record");
        let (m, stats) = JitMap::parse_jitdump(&d.0).unwrap();
        assert_eq!(stats.end, JitdumpEnd::BadRecordSize { offset: at, size: 8 });
        assert_eq!((m.len(), stats.loads), (3, 2));

        // A load whose code does not fit, a name without NUL, a move of an unknown index: skipped.
        let mut d = Dump::new(1);
        let mut short = Dump(Vec::new());
        short.u32(1).u32(1).u64(0x1000).u64(0x1000).u64(0x100).u64(1).bytes(b"f\0").bytes(&[0; 4]);
        d.record(JIT_CODE_LOAD, &short);
        let mut unterminated = Dump(Vec::new());
        unterminated.u32(1).u32(1).u64(0x1000).u64(0x1000).u64(0).u64(2).bytes(b"g");
        d.record(JIT_CODE_LOAD, &unterminated);
        let mut mv = Dump(Vec::new());
        mv.u32(1).u32(1).u64(0x3000).u64(0x1000).u64(0x3000).u64(0x20).u64(77);
        d.record(JIT_CODE_MOVE, &mv);
        d.load(u64::MAX - 1, 4, 3, "wraps");
        d.load(0x2000, 0, 4, "no code");
        let (m, stats) = JitMap::parse_jitdump(&d.0).unwrap();
        assert!(m.is_empty());
        assert_eq!((stats.loads, stats.moves, stats.skipped, stats.end), (4, 1, 4, JitdumpEnd::Complete));

        let header = Dump::new(1).0;
        assert_eq!(JitMap::parse_jitdump(&header[..39]), Err(JitError::ShortHeader { len: 39, need: 40 }));
        let mut swapped = header.clone();
        swapped[..4].copy_from_slice(&JITDUMP_MAGIC.swap_bytes().to_ne_bytes());
        assert_eq!(JitMap::parse_jitdump(&swapped), Err(JitError::OtherEndian(JITDUMP_MAGIC.swap_bytes())));
        let mut bad = header.clone();
        bad[0] ^= 1;
        assert!(matches!(JitMap::parse_jitdump(&bad), Err(JitError::BadMagic(_))));
        let mut small = header.clone();
        small[8..12].copy_from_slice(&39u32.to_ne_bytes());
        assert_eq!(JitMap::parse_jitdump(&small), Err(JitError::BadHeaderSize(39)));
        let mut big = header.clone();
        big[8..12].copy_from_slice(&48u32.to_ne_bytes());
        assert_eq!(JitMap::parse_jitdump(&big), Err(JitError::ShortHeader { len: 40, need: 48 }));
        // A longer header (a later version's fields) is skipped to its declared size.
        big.extend_from_slice(&[0xff; 8]);
        let (m, stats) = JitMap::parse_jitdump(&big).unwrap();
        assert!(m.is_empty() && stats.end == JitdumpEnd::Complete);
    }

    #[test]
    fn corrupt_and_cut_inputs_never_panic() {
        let mut d = sample_dump();
        d.record(JIT_CODE_CLOSE, &Dump(Vec::new()));
        let good = d.0;
        for len in 0..=good.len() {
            if let Ok((m, _)) = JitMap::parse_jitdump(&good[..len]) {
                assert_well_formed(&m);
            }
        }
        let mut bytes = good.clone();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                bytes[i] ^= 1 << bit;
                if let Ok((m, _)) = JitMap::parse_jitdump(&bytes) {
                    assert_well_formed(&m);
                    for s in m.symbols() {
                        let _ = (m.line(s.start), m.line(s.end() - 1));
                    }
                }
                bytes[i] ^= 1 << bit;
            }
        }
        let mut text = PERF_MAP.as_bytes().to_vec();
        for i in 0..text.len() {
            for bit in 0..8 {
                text[i] ^= 1 << bit;
                assert_well_formed(&JitMap::parse_perf_map(&text).0);
                text[i] ^= 1 << bit;
            }
        }
    }

    /// Reads what the jitmap workload writes (`make -C tests/workloads bin/jitmap` first): its jitdump
    /// and its perf map name the same two functions.
    #[test]
    #[ignore = "needs tests/workloads/bin/jitmap"]
    fn reads_the_jitmap_workloads_files() {
        let bin = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/workloads/bin/jitmap");
        let dir = tempfile::tempdir().unwrap();
        let child =
            std::process::Command::new(bin).arg("0.2").arg("--dump").arg(dir.path()).output().unwrap();
        assert!(child.status.success() && child.stdout.is_empty() && child.stderr.is_empty(), "{child:?}");
        let dumps: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(dumps.len(), 1, "{dumps:?}");
        let pid = jitdump_pid(dumps[0].to_str().unwrap()).unwrap();
        let (dumped, stats) = JitMap::parse_jitdump(&std::fs::read(&dumps[0]).unwrap()).unwrap();
        assert_eq!((stats.pid, stats.loads, stats.elf_mach, stats.end), (pid, 2, 62, JitdumpEnd::Complete));
        let map_path = std::path::Path::new("/tmp").join(perf_map_name(pid));
        let text = std::fs::read(&map_path).unwrap();
        let _ = std::fs::remove_file(&map_path);
        let (mapped, stats) = JitMap::parse_perf_map(&text);
        assert_eq!(stats, PerfMapStats { symbols: 2, skipped: 0, empty: 0 });
        assert_eq!(dumped, mapped);
        let [a, b] = mapped.symbols() else { panic!("{mapped:?}") };
        assert_eq!(
            (a.name.as_str(), a.size, b.name.as_str(), b.size),
            ("jit_hot_a", 52, "jit_hot_b [jitted]", 52)
        );
        assert_eq!(b.start - a.start, 0x100);
    }
}
