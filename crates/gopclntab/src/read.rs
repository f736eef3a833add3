//! Bounds-checked little-endian reads and the pc-value table decoder.
//!
//! Everything the table parser reads from the file goes through these helpers, so that a corrupt or
//! truncated table yields `None` instead of a panic. Nothing here may index a slice unchecked, allocate,
//! or loop without consuming input.

/// Reads the byte at `off`.
pub(crate) fn u8_at(bytes: &[u8], off: usize) -> Option<u8> {
    bytes.get(off).copied()
}

/// Reads a little-endian u32 at `off`.
pub(crate) fn u32_at(bytes: &[u8], off: usize) -> Option<u32> {
    let raw = bytes.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes(raw.try_into().ok()?))
}

/// Reads a little-endian u64 at `off`.
pub(crate) fn u64_at(bytes: &[u8], off: usize) -> Option<u64> {
    let raw = bytes.get(off..off.checked_add(8)?)?;
    Some(u64::from_le_bytes(raw.try_into().ok()?))
}

/// The NUL-terminated string starting at `off`, without its terminator. A string that runs off the end
/// of `bytes` is corrupt.
pub(crate) fn cstr_at(bytes: &[u8], off: usize) -> Option<&[u8]> {
    let rest = bytes.get(off..)?;
    let len = rest.iter().position(|&b| b == 0)?;
    rest.get(..len)
}

/// Decodes one unsigned LEB128 value of at most 32 bits, advancing `pos`. Go writes at most five bytes;
/// a longer run is corrupt.
fn varint(bytes: &[u8], pos: &mut usize) -> Option<u32> {
    let mut value = 0u32;
    let mut shift = 0u32;
    loop {
        let byte = u8_at(bytes, *pos)?;
        *pos += 1;
        // Bits beyond 32 are dropped, as the Go runtime's reader does.
        value |= u32::from(byte & 0x7f).checked_shl(shift).unwrap_or(0);
        if byte & 0x80 == 0 {
            return Some(value);
        }
        shift += 7;
        if shift >= 35 {
            return None;
        }
    }
}

/// Iterates the (value, pc range end) pairs of one pc-value table.
///
/// A table is a sequence of (zigzag value delta, pc delta / quantum) varint pairs; the value applies
/// from the previous pc up to (not including) the new pc. It starts at value -1 and pc `entry`, and
/// ends at a zero value delta (except on the very first pair, where a zero delta is a real entry).
struct PcValues<'a> {
    table: &'a [u8],
    pos: usize,
    entry: u64,
    pc: u64,
    value: i32,
    quantum: u64,
}

impl<'a> PcValues<'a> {
    fn new(table: &'a [u8], entry: u64, quantum: u8) -> Self {
        PcValues { table, pos: 0, entry, pc: entry, value: -1, quantum: u64::from(quantum) }
    }

    /// The next step: `Some(Some((value, end_pc)))`, `Some(None)` at the table's terminator, `None` when
    /// the table is cut short or overflows.
    fn step(&mut self) -> Option<Option<(i32, u64)>> {
        let first = self.pc == self.entry;
        let uvdelta = varint(self.table, &mut self.pos)?;
        if uvdelta == 0 && !first {
            return Some(None);
        }
        // Zigzag: the low bit is the sign.
        let delta = ((uvdelta >> 1) as i32) ^ -((uvdelta & 1) as i32);
        self.value = self.value.wrapping_add(delta);
        let pcdelta = varint(self.table, &mut self.pos)?;
        self.pc = self.pc.checked_add(u64::from(pcdelta) * self.quantum)?;
        Some(Some((self.value, self.pc)))
    }
}

/// The value a pc-value table gives for `target`, in a function starting at `entry`. `None` when the
/// table ends before reaching `target` (the pc is past the function's code) or is corrupt.
///
/// Each step consumes at least two bytes of `table`, so this ends after at most `table.len() / 2`
/// steps whatever the input.
pub(crate) fn pc_value(table: &[u8], entry: u64, target: u64, quantum: u8) -> Option<i32> {
    if target < entry {
        return None;
    }
    let mut values = PcValues::new(table, entry, quantum);
    loop {
        let (value, end) = values.step()??;
        if target < end {
            return Some(value);
        }
    }
}

/// The pc where a pc-value table stops: the end of the function's code, since the Go toolchain writes
/// every table up to the function's size. `None` when the table is cut short.
pub(crate) fn pc_table_end(table: &[u8], entry: u64, quantum: u8) -> Option<u64> {
    let mut values = PcValues::new(table, entry, quantum);
    let mut end = entry;
    while let Some((_, pc)) = values.step()? {
        end = pc;
    }
    Some(end)
}

#[cfg(test)]
mod tests {
    use super::{cstr_at, pc_table_end, pc_value, u32_at, u64_at, varint};

    #[test]
    fn varints_of_one_to_five_bytes() {
        let mut pos = 0;
        assert_eq!(varint(&[0x05], &mut pos), Some(5));
        pos = 0;
        assert_eq!(varint(&[0x80, 0x01], &mut pos), Some(128));
        assert_eq!(pos, 2);
        pos = 0;
        assert_eq!(varint(&[0xff, 0xff, 0xff, 0xff, 0x0f], &mut pos), Some(u32::MAX));
        pos = 0;
        assert_eq!(varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01], &mut pos), None, "six bytes");
        pos = 0;
        assert_eq!(varint(&[0x80], &mut pos), None, "cut short");
    }

    #[test]
    fn pc_values_follow_zigzag_deltas_scaled_by_quantum() {
        // value -1 + 11 (zigzag 22) = 10 for pcs [0x100, 0x104); then -1 (zigzag 1) = 9 up to 0x10c;
        // then the terminator.
        let table = [22, 4, 1, 8, 0];
        assert_eq!(pc_value(&table, 0x100, 0x100, 1), Some(10));
        assert_eq!(pc_value(&table, 0x100, 0x103, 1), Some(10));
        assert_eq!(pc_value(&table, 0x100, 0x104, 1), Some(9));
        assert_eq!(pc_value(&table, 0x100, 0x10b, 1), Some(9));
        assert_eq!(pc_value(&table, 0x100, 0x10c, 1), None, "past the end");
        assert_eq!(pc_value(&table, 0x100, 0xff, 1), None, "before the entry");
        assert_eq!(pc_table_end(&table, 0x100, 1), Some(0x10c));
        assert_eq!(pc_table_end(&table, 0x100, 4), Some(0x100 + 48));
        assert_eq!(pc_table_end(&table[..3], 0x100, 1), None, "no terminator");
    }

    #[test]
    fn zero_value_delta_is_an_entry_only_at_the_start() {
        // First pair: delta 0 keeps the value at -1 (e.g. "not inlined") for 3 bytes.
        let table = [0, 3, 4, 2, 0];
        assert_eq!(pc_value(&table, 0, 0, 1), Some(-1));
        assert_eq!(pc_value(&table, 0, 3, 1), Some(1));
        assert_eq!(pc_table_end(&table, 0, 1), Some(5));
    }

    #[test]
    fn reads_are_bounds_checked() {
        let bytes = [1, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(u32_at(&bytes, 0), Some(1));
        assert_eq!(u32_at(&bytes, 5), None);
        assert_eq!(u32_at(&bytes, usize::MAX - 1), None);
        assert_eq!(u64_at(&bytes, 0), Some(1));
        assert_eq!(u64_at(&bytes, 1), None);
        assert_eq!(cstr_at(b"ab\0cd", 0), Some(&b"ab"[..]));
        assert_eq!(cstr_at(b"ab\0cd", 3), None, "no terminator");
        assert_eq!(cstr_at(b"ab\0", 9), None);
    }
}
