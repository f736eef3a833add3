//! Code objects read from a process's memory: a function's name, file, first line and line table, once
//! per code object, and the line an instruction of it is at, by each version's line-table format
//! (`co_lnotab` 3.8-3.9, `co_linetable` 3.10, the location table of 3.11+).

use crate::layout::Layout;

/// Reads a process's memory (/proc/PID/mem for a live one).
pub trait Memory {
    /// Fills `buf` from address `addr`; false when any of it cannot be read.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;
}

/// Why a code object could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodeError {
    #[error("memory at {0:#x} cannot be read")]
    Unreadable(u64),
    #[error("the object at {0:#x} is no code object")]
    NotCode(u64),
    #[error("the string at {0:#x} is not a compact str")]
    BadString(u64),
}

/// Strings longer than this (a name, a path) are cut: what a frame shows.
const MAX_STRING: usize = 4096;
/// Line tables longer than this are not read (a function of some hundred thousand instructions); its
/// frames show its first line.
const MAX_TABLE: usize = 1 << 20;

/// A function's code object, as its frames are named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code {
    /// `co_qualname` (3.11+: `Class.method`), else `co_name`.
    pub name: String,
    pub file: String,
    pub first_line: u32,
    table: Vec<u8>,
    minor: u8,
    /// Where its instructions start in memory (3.11+).
    instructions: u64,
    /// What tells it from a code object allocated at its address after it was freed (None: not read
    /// from memory).
    mark: Option<Mark>,
}

/// What tells a code object from another allocated at its address once it was freed, read again in two
/// reads (see [`Code::still_at`]): its type, name, file and line-table pointers and first line, and the
/// head of its name (length, hash, state, its first bytes), since a new code object's name, file and
/// table may take the freed ones' addresses too (`exec` of a `def f_{i}` in a loop).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mark {
    head: [u64; 5],
    /// The name's bytes from its length field on.
    name: Vec<u8>,
}

/// Bytes of a name's characters in its [`Mark`].
const MARK_NAME: usize = 48;
/// Bytes of a code object's header read at most (its fields' offsets are below 256 in every layout).
const MAX_HEADER: usize = 256;
/// Bytes of a name's head read at most for its mark (its characters start below 80 in every layout).
const MAX_MARK: usize = 128;

/// Bytes of the code object's header read: up to its last field read.
fn header_size(layout: &Layout) -> usize {
    usize::from(layout.code_filename.max(layout.code_name).max(layout.code_linetable))
        .max(usize::from(layout.code_qualname))
        .max(usize::from(layout.code_firstlineno))
        + 8
}

/// The field of the name frames show: `co_qualname` (3.11+), else `co_name`.
/// The header fields of a [`Mark`]: type, name, file, line table, first line.
fn mark_head(co: &[u8], layout: &Layout) -> [u64; 5] {
    let fl = usize::from(layout.code_firstlineno);
    [
        u64_of(co, 8),
        u64_of(co, layout.code_name_field().into()),
        u64_of(co, layout.code_filename.into()),
        u64_of(co, layout.code_linetable.into()),
        u64::from(u32::from_le_bytes(co[fl..fl + 4].try_into().expect("4 bytes"))),
    ]
}

fn u64_of(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn read_u64(mem: &dyn Memory, addr: u64) -> Result<u64, CodeError> {
    let mut b = [0u8; 8];
    match mem.read(addr, &mut b) {
        true => Ok(u64::from_le_bytes(b)),
        false => Err(CodeError::Unreadable(addr)),
    }
}

/// The code object at `addr` of a process running CPython with `layout`.
pub fn read_code(mem: &dyn Memory, layout: &Layout, addr: u64) -> Result<Code, CodeError> {
    // Its type is `code` (3.13's frames may hold other executables).
    let ty = read_u64(mem, addr.wrapping_add(8))?;
    let name_at = read_u64(mem, ty.wrapping_add(u64::from(layout.type_name)))?;
    let mut tn = [0u8; 5];
    if !mem.read(name_at, &mut tn) {
        return Err(CodeError::Unreadable(name_at));
    }
    if &tn != b"code\0" {
        return Err(CodeError::NotCode(addr));
    }
    let size = header_size(layout);
    let mut co = vec![0u8; size];
    if !mem.read(addr, &mut co) {
        return Err(CodeError::Unreadable(addr));
    }
    let name_at = u64_of(&co, layout.code_name_field().into());
    let (name, span) = read_str(mem, layout, name_at)?;
    let (file, _) = read_str(mem, layout, u64_of(&co, layout.code_filename.into()))?;
    let mut mark_name = vec![0u8; span.min(MAX_MARK)];
    let mark = mem
        .read(name_at.wrapping_add(u64::from(layout.unicode_length)), &mut mark_name)
        .then(|| Mark { head: mark_head(&co, layout), name: mark_name });
    let fl = usize::from(layout.code_firstlineno);
    let first_line = i32::from_le_bytes(co[fl..fl + 4].try_into().expect("4 bytes")).max(0) as u32;
    let table = read_bytes(mem, layout, u64_of(&co, layout.code_linetable.into())).unwrap_or_default();
    Ok(Code {
        name,
        file,
        first_line,
        table,
        minor: layout.minor,
        instructions: addr.wrapping_add(u64::from(layout.code_adaptive)),
        mark,
    })
}

/// A compact `str` (what names and file names are): ASCII, Latin-1, UCS-2 or UCS-4; and the bytes from
/// its length field to [`MARK_NAME`] bytes into its characters (its [`Mark`]).
fn read_str(mem: &dyn Memory, layout: &Layout, addr: u64) -> Result<(String, usize), CodeError> {
    let mut head = [0u8; 8];
    let state_at = addr.wrapping_add(u64::from(layout.unicode_state));
    if !mem.read(state_at, &mut head[..4]) {
        return Err(CodeError::Unreadable(state_at));
    }
    let state = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
    let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1 == 1, (state >> 6) & 1 == 1);
    let len =
        read_u64(mem, addr.wrapping_add(u64::from(layout.unicode_length)))?.min(MAX_STRING as u64) as usize;
    if !compact || !matches!(kind, 1 | 2 | 4) {
        return Err(CodeError::BadString(addr));
    }
    let data = match ascii {
        true => addr.wrapping_add(u64::from(layout.unicode_ascii_data)),
        false => addr.wrapping_add(u64::from(layout.unicode_compact_data)),
    };
    let mut b = vec![0u8; len * kind as usize];
    if !mem.read(data, &mut b) {
        return Err(CodeError::Unreadable(data));
    }
    let span =
        (data - addr).saturating_sub(u64::from(layout.unicode_length)) as usize + b.len().min(MARK_NAME);
    let s = match kind {
        1 => b.iter().map(|&c| char::from(c)).collect(),
        2 => char::decode_utf16(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])))
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect(),
        _ => b
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_le_bytes(c.try_into().expect("4 bytes"))).unwrap_or('\u{fffd}'))
            .collect(),
    };
    Ok((s, span))
}

/// A `bytes` object's contents.
fn read_bytes(mem: &dyn Memory, layout: &Layout, addr: u64) -> Result<Vec<u8>, CodeError> {
    let len = read_u64(mem, addr.wrapping_add(u64::from(layout.bytes_size)))? as usize;
    if len > MAX_TABLE {
        return Err(CodeError::BadString(addr));
    }
    let mut b = vec![0u8; len];
    let data = addr.wrapping_add(u64::from(layout.bytes_data));
    match mem.read(data, &mut b) {
        true => Ok(b),
        false => Err(CodeError::Unreadable(data)),
    }
}

impl Code {
    /// A code object from its parts (tests, and sources that read them otherwise); `table` in
    /// 3.`minor`'s line-table format, `instructions` where its instructions start (3.11+).
    pub fn new(
        name: &str,
        file: &str,
        first_line: u32,
        table: Vec<u8>,
        minor: u8,
        instructions: u64,
    ) -> Code {
        Code { name: name.into(), file: file.into(), first_line, table, minor, instructions, mark: None }
    }

    /// Whether the code object at `addr`, read there as this one, is still this one and not another
    /// allocated at its address once it was freed: its header and name's head as they were (two reads,
    /// no allocation). None where they cannot be read (the process is gone: what was read stands), or
    /// for a code object not read from memory.
    pub fn still_at(&self, mem: &dyn Memory, layout: &Layout, addr: u64) -> Option<bool> {
        let mark = self.mark.as_ref()?;
        let mut co = [0u8; MAX_HEADER];
        let co = &mut co[..header_size(layout).min(MAX_HEADER)];
        if !mem.read(addr, co) {
            return None;
        }
        if mark_head(co, layout) != mark.head {
            return Some(false);
        }
        let mut name = [0u8; MAX_MARK];
        let name = &mut name[..mark.name.len()];
        let read = mem.read(mark.head[1].wrapping_add(u64::from(layout.unicode_length)), name);
        Some(read && *name == *mark.name)
    }

    /// Whether this can be the code object a frame held when its sample was taken, the frame's name
    /// string then at `name` with hash `hash` (bpf/python.h; -1: not computed, 0 and 0: not read): the
    /// same string, and the same hash where both are known. A code object read once another took a
    /// freed one's address names another string (`exec` of functions made and dropped in a loop).
    /// True for a code object not read from memory: nothing to compare.
    pub fn named_as(&self, name: u64, hash: u64) -> bool {
        let Some(mark) = &self.mark else { return true };
        if name == 0 {
            return true;
        }
        // The mark's name bytes start at the string's length, its hash next.
        let own = mark.name.get(8..16).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        let known = |h: u64| h != u64::MAX && h != 0;
        name == mark.head[1] && own.is_none_or(|own| !known(own) || !known(hash) || own == hash)
    }

    /// The line of the instruction a frame of it is at: `instr` as the frame holds it (the `f_lasti`
    /// int of 3.8-3.10, a pointer to the instruction from 3.11). Its first line where the table says
    /// nothing.
    pub fn line(&self, instr: u64) -> u32 {
        let line = match self.minor {
            ..=9 => lnotab_line(&self.table, self.first_line, i64::from(instr as u32 as i32)),
            10 => linetable_310(&self.table, self.first_line, i64::from(instr as u32 as i32) * 2),
            _ => {
                let unit = (instr.wrapping_sub(self.instructions) as i64) / 2;
                location_table(&self.table, self.first_line, unit.max(0))
            }
        };
        line.filter(|&l| l > 0).unwrap_or(self.first_line)
    }
}

/// 3.8-3.9: (bytes, line) increments; `offset` in bytes.
fn lnotab_line(table: &[u8], first: u32, offset: i64) -> Option<u32> {
    let (mut addr, mut line) = (0i64, i64::from(first));
    for pair in table.chunks_exact(2) {
        addr += i64::from(pair[0]);
        if addr > offset {
            break;
        }
        line += i64::from(pair[1] as i8);
    }
    u32::try_from(line).ok()
}

/// 3.10: (bytes, line) increments per range, -128 for a range with no line; `offset` in bytes.
fn linetable_310(table: &[u8], first: u32, offset: i64) -> Option<u32> {
    let (mut end, mut line) = (0i64, i64::from(first));
    for pair in table.chunks_exact(2) {
        let start = end;
        end += i64::from(pair[0]);
        let delta = pair[1] as i8;
        let this = match delta {
            -128 => None,
            d => {
                line += i64::from(d);
                Some(line)
            }
        };
        if start <= offset && offset < end {
            return this.and_then(|l| u32::try_from(l).ok());
        }
    }
    None
}

/// 3.11+: the location table, entries of (code, length in code units) and varint line deltas; `unit`
/// in code units.
fn location_table(table: &[u8], first: u32, unit: i64) -> Option<u32> {
    let (mut at, mut addr, mut line) = (0usize, 0i64, i64::from(first));
    while at < table.len() {
        let head = table[at];
        at += 1;
        let code = (head >> 3) & 15;
        let len = i64::from(head & 7) + 1;
        let this = match code {
            15 => None,
            14 => {
                line += svarint(table, &mut at);
                for _ in 0..3 {
                    varint(table, &mut at);
                }
                Some(line)
            }
            13 => {
                line += svarint(table, &mut at);
                Some(line)
            }
            10..=12 => {
                line += i64::from(code - 10);
                at += 2;
                Some(line)
            }
            _ => {
                at += 1;
                Some(line)
            }
        };
        if addr <= unit && unit < addr + len {
            return this.and_then(|l| u32::try_from(l).ok());
        }
        addr += len;
    }
    None
}

fn varint(table: &[u8], at: &mut usize) -> i64 {
    let (mut v, mut shift) = (0i64, 0u32);
    while let Some(&b) = table.get(*at) {
        *at += 1;
        v |= i64::from(b & 63) << shift;
        shift += 6;
        if b & 64 == 0 || shift > 56 {
            break;
        }
    }
    v
}

fn svarint(table: &[u8], at: &mut usize) -> i64 {
    let v = varint(table, at);
    match v & 1 {
        1 => -(v >> 1),
        _ => v >> 1,
    }
}

#[cfg(test)]
mod tests {
    use super::{linetable_310, lnotab_line, location_table, read_code, Code, CodeError, Mark, Memory};

    /// A frame is the code object read at its address only with the name the kernel saw there: the same
    /// string, and the same hash where both are computed; a frame whose name was not read, or a code
    /// object not read from memory, has nothing to tell.
    #[test]
    fn a_code_object_is_the_frames_only_under_its_name() {
        let (at, hash) = (0x7f00_0000_5000u64, 0x1234_5678_9abc_def0u64);
        let mut name = 6u64.to_le_bytes().to_vec();
        name.extend(hash.to_le_bytes());
        name.extend(b"tick_2");
        let mark = Mark { head: [0x8000, at, 0x9000, 0xa000, 1], name };
        let code = Code { mark: Some(mark), ..Code::new("tick_2", "<round 2>", 1, Vec::new(), 10, 0) };
        assert!(code.named_as(at, hash));
        assert!(!code.named_as(at + 0x100, hash), "another string");
        assert!(!code.named_as(at, hash ^ 1), "another string at the same address");
        assert!(code.named_as(at, u64::MAX), "its hash not computed when sampled");
        assert!(code.named_as(0, 0), "not read");
        assert!(Code::new("f", "x.py", 1, Vec::new(), 10, 0).named_as(at + 0x100, 7), "not read from memory");
    }

    /// Memory that reads as all ones everywhere: every pointer in it is `u64::MAX`.
    struct Ones;
    impl Memory for Ones {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            buf.fill(0xff);
            addr < u64::MAX - 64
        }
    }

    /// A frame read mid-change points at garbage: reading it is an error, not an overflow.
    #[test]
    fn garbage_pointers_are_errors() {
        for layout in crate::layout::LAYOUTS {
            for addr in [0, 0x1000, u64::MAX - 4] {
                assert!(
                    matches!(read_code(&Ones, layout, addr), Err(CodeError::Unreadable(_))),
                    "3.{}",
                    layout.minor
                );
            }
        }
    }

    /// Tables as each version's compiler writes them for
    /// `def f(n):\n  if n < 2:\n    return n\n  return f(n - 1) + f(n - 2)` at line 14 (bytes taken from
    /// `f.__code__`).
    #[test]
    fn lines_from_each_format() {
        // 3.8: co_lnotab b'\x00\x01\x08\x01\x04\x01'.
        let t = [0, 1, 8, 1, 4, 1];
        assert_eq!(lnotab_line(&t, 14, 0), Some(15));
        assert_eq!(lnotab_line(&t, 14, 10), Some(16));
        assert_eq!(lnotab_line(&t, 14, 14), Some(17));
        // 3.10: co_linetable b'\x08\x01\x04\x01\x18\x01' (bytes per range, line delta).
        let t = [8, 1, 4, 1, 24, 1];
        assert_eq!(linetable_310(&t, 14, 0), Some(15));
        assert_eq!(linetable_310(&t, 14, 8), Some(16));
        assert_eq!(linetable_310(&t, 14, 30), Some(17));
        assert_eq!(linetable_310(&[8, 0x80], 14, 2), None);
        // 3.11: its location table; co_lines() says units 0 -> 14 (RESUME), 1-6 -> 15, 7-8 -> 16,
        // 9-45 -> 17.
        let t = [
            128, 0, 216, 5, 6, 136, 17, 130, 85, 128, 85, 216, 11, 12, 128, 72, 221, 9, 10, 136, 49, 136,
            113, 137, 53, 137, 24, 140, 24, 149, 65, 144, 97, 152, 33, 145, 101, 145, 72, 148, 72, 209, 9,
            28, 208, 2, 28,
        ];
        let lines: Vec<_> = [0, 1, 6, 7, 8, 9, 45].iter().map(|&u| location_table(&t, 14, u)).collect();
        assert_eq!(lines, [14, 15, 15, 16, 16, 17, 17].map(Some));
    }

    /// 3.11+: a short form (code 0-9: line unchanged), a one-line form (code 11: +1), the no-column
    /// form (13, signed varint) and no location (15).
    #[test]
    fn location_table_entries() {
        let t = [
            0x80 | (13 << 3), // code 13, 1 unit: line + 1 (svarint 2)
            2,
            0x80 | (11 << 3) | 1, // code 11, 2 units: line + 1, two column bytes
            0,
            5,
            0x80 | (15 << 3),     // no location, 1 unit
            0x80 | (13 << 3) | 2, // code 13, 3 units: line - 2 (svarint 5)
            5,
        ];
        assert_eq!(location_table(&t, 10, 0), Some(11));
        assert_eq!(location_table(&t, 10, 2), Some(12));
        assert_eq!(location_table(&t, 10, 3), None);
        assert_eq!(location_table(&t, 10, 6), Some(10));
        assert_eq!(location_table(&t, 10, 7), None);
    }
}
