//! The Go 1.18+ `.gopclntab` layout on amd64: the pcHeader, the `_func` record, the inline tree entry,
//! as written by cmd/link (pcln.go) and read by the runtime (symtab.go, runtime2.go, symtabinl.go).
//!
//! Only decodes fields, with bounds-checked reads; it must never decide policy (what a lookup returns
//! for a corrupt record is lib.rs's call) nor hold state.

use crate::read::{u32_at, u64_at, u8_at};
use crate::Error;

/// Which `_func` and inline-tree layout the table uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Go 1.18-1.19, magic 0xfffffff0.
    Go118,
    /// Go 1.20+, magic 0xfffffff1: `_func` gained `startLine`, the inline tree entry was reshaped.
    Go120,
}

impl Layout {
    /// Size of the fixed part of `_func`, after which come `npcdata` u32 pcdata offsets, then
    /// `nfuncdata` u32 funcdata offsets. `nfuncdata` is its last byte.
    pub(crate) fn func_len(self) -> usize {
        match self {
            Layout::Go118 => 40,
            Layout::Go120 => 44,
        }
    }

    /// (entry size, offset of the name offset, offset of the parent pc) of one inline tree entry:
    /// Go 1.18-1.19 `{parent i16, funcID u8, _ u8, file i32, line i32, func_ i32, parentPc i32}`,
    /// Go 1.20+ `{funcID u8, _ [3]u8, nameOff i32, parentPc i32, startLine i32}`.
    pub(crate) fn inlined_call(self) -> (usize, usize, usize) {
        match self {
            Layout::Go118 => (20, 12, 16),
            Layout::Go120 => (16, 4, 8),
        }
    }
}

// `_func` fields shared by both layouts (byte offsets).
pub(crate) const FUNC_ENTRY_OFF: usize = 0;
pub(crate) const FUNC_NAME_OFF: usize = 4;
pub(crate) const FUNC_PCSP: usize = 16;
pub(crate) const FUNC_PCFILE: usize = 20;
pub(crate) const FUNC_PCLN: usize = 24;
pub(crate) const FUNC_NPCDATA: usize = 28;
pub(crate) const FUNC_CU_OFFSET: usize = 32;

/// Index of the pc-value table mapping pc to an inline tree index (internal/abi PCDATA_InlTreeIndex).
pub(crate) const PCDATA_INL_TREE_INDEX: u32 = 2;
/// Index of the funcdata pointing at the inline tree (internal/abi FUNCDATA_InlTree).
pub(crate) const FUNCDATA_INL_TREE: u32 = 3;
/// Size of the Go 1.18+ pcHeader on a 64-bit target: 8 bytes, then 8 words.
pub(crate) const HEADER_LEN: usize = 8 + 8 * 8;

/// The decoded pcHeader.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub(crate) layout: Layout,
    pub(crate) nfunc: usize,
    /// 0 from Go 1.26 on, which no longer records it here.
    pub(crate) text_start: u64,
    pub(crate) funcname_off: usize,
    pub(crate) cu_off: usize,
    pub(crate) filetab_off: usize,
    pub(crate) pctab_off: usize,
    pub(crate) pcln_off: usize,
}

impl Header {
    pub(crate) fn is_go118(&self) -> bool {
        self.layout == Layout::Go118
    }
}

/// Reads and checks the pcHeader at the start of `pcln`.
pub(crate) fn parse_header(pcln: &[u8]) -> Result<Header, Error> {
    let magic = u32_at(pcln, 0).ok_or(Error::Truncated { what: "no room for the header" })?;
    let layout = match magic {
        0xffff_fff0 => Layout::Go118,
        0xffff_fff1 => Layout::Go120,
        0xffff_fffa => return Err(Error::Unsupported { version: "Go 1.16-1.17", magic }),
        0xffff_fffb => return Err(Error::Unsupported { version: "Go 1.2-1.15", magic }),
        _ => return Err(Error::UnknownMagic { magic }),
    };
    let byte = |off| u8_at(pcln, off).ok_or(Error::Truncated { what: "no room for the header" });
    let (pad1, pad2, quantum, ptr_size) = (byte(4)?, byte(5)?, byte(6)?, byte(7)?);
    if quantum != 1 || ptr_size != 8 {
        return Err(Error::UnsupportedArch { ptr_size, quantum });
    }
    if pad1 != 0 || pad2 != 0 {
        return Err(Error::Corrupt { what: "header padding is not zero" });
    }
    if pcln.len() < HEADER_LEN {
        return Err(Error::Truncated { what: "no room for the header" });
    }
    let word = |i: usize| u64_at(pcln, 8 + 8 * i).ok_or(Error::Truncated { what: "no room for the header" });
    let offset = |i: usize| -> Result<usize, Error> {
        let off =
            usize::try_from(word(i)?).map_err(|_| Error::Corrupt { what: "header offset overflows" })?;
        if off < HEADER_LEN || off > pcln.len() {
            return Err(Error::Truncated { what: "a header offset points past the end" });
        }
        Ok(off)
    };
    let nfunc = usize::try_from(word(0)?).map_err(|_| Error::Corrupt { what: "function count overflows" })?;
    let header = Header {
        layout,
        nfunc,
        text_start: word(2)?,
        funcname_off: offset(3)?,
        cu_off: offset(4)?,
        filetab_off: offset(5)?,
        pctab_off: offset(6)?,
        pcln_off: offset(7)?,
    };
    // The linker lays the tables out in header order; each ends where the next begins.
    let order = [header.funcname_off, header.cu_off, header.filetab_off, header.pctab_off, header.pcln_off];
    if order.windows(2).any(|w| w[0] > w[1]) {
        return Err(Error::Corrupt { what: "header offsets are out of order" });
    }
    Ok(header)
}

/// One `_func` record and its place in the function table.
pub(crate) struct FuncRef<'t> {
    /// The record and everything after it in the pclntab part.
    pub(crate) raw: &'t [u8],
    pub(crate) layout: Layout,
    pub(crate) entry: u64,
    /// The next function's entry (the table's end for the last one): an upper bound for this one's end.
    pub(crate) limit: u64,
}

impl FuncRef<'_> {
    pub(crate) fn field(&self, off: usize) -> Option<u32> {
        u32_at(self.raw, off)
    }

    /// The offset of pc-value table `index` in pctab, if the function has it.
    pub(crate) fn pcdata(&self, index: u32) -> Option<u32> {
        if index >= self.field(FUNC_NPCDATA)? {
            return None;
        }
        let off = self.layout.func_len().checked_add(4 * usize::try_from(index).ok()?)?;
        self.field(off).filter(|&table| table != 0)
    }

    /// The offset of funcdata `index` from `moduledata.gofunc`, if the function has it.
    pub(crate) fn funcdata(&self, index: u32) -> Option<u32> {
        let nfuncdata = u8_at(self.raw, self.layout.func_len() - 1)?;
        if index >= u32::from(nfuncdata) {
            return None;
        }
        let npcdata = usize::try_from(self.field(FUNC_NPCDATA)?).ok()?;
        let off = npcdata
            .checked_add(usize::try_from(index).ok()?)?
            .checked_mul(4)?
            .checked_add(self.layout.func_len())?;
        self.field(off).filter(|&data| data != u32::MAX)
    }
}

/// One inline tree entry: a call inlined into the physical function.
pub(crate) struct InlinedCall {
    pub(crate) name_off: u32,
    /// Offset from the function's entry of an instruction positioned at the call site.
    pub(crate) parent_pc: u32,
}
