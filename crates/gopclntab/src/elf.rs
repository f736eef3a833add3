//! Finding a Go binary's tables in its ELF file: `.gopclntab` by section name (strip keeps section
//! headers), and `runtime.firstmoduledata` by scanning writable data for a pointer to `.gopclntab`,
//! accepted only when its slices agree with the pcHeader. The moduledata gives the text start (which
//! Go 1.26+ no longer writes into the pcHeader) and `gofunc`, the base of the inline trees.
//!
//! Must never trust a candidate moduledata that does not match the header, nor copy more than the
//! sections that hold the tables.

use crate::format::{parse_header, Header};
use crate::read::u64_at;
use crate::{Error, GoFunc, GoTable};
use object::{BinaryFormat, Object, ObjectSection, SectionKind};

/// What a validated `runtime.firstmoduledata` tells.
struct ModuleData {
    text: u64,
    gofunc: u64,
}

// Word indexes into moduledata, stable from Go 1.18 to 1.26: the pcHeader pointer, six slices
// (funcnametab, cutab, filetab, pctab, pclntable, ftab: pointer, length, capacity), findfunctab,
// minpc, maxpc, text.
const MD_FUNCNAMETAB: usize = 1;
const MD_CUTAB: usize = 4;
const MD_FILETAB: usize = 7;
const MD_PCTAB: usize = 10;
const MD_PCLNTABLE: usize = 13;
const MD_FTAB: usize = 16;
const MD_FTAB_LEN: usize = 17;
const MD_MINPC: usize = 20;
const MD_TEXT: usize = 22;
/// `gofunc` in Go 1.18-1.19: after text..enoptrbss (10 words), end, gcdata, gcbss, types, etypes, rodata.
const MD_GOFUNC_GO118: usize = 38;
/// `gofunc` in Go 1.20-1.26: `covctrs, ecovctrs` came before `end`. Go 1.26 follows it with
/// `epclntab`, the end of `.gopclntab`, which also lets us find `gofunc` if words are added before it.
const MD_GOFUNC_GO120: usize = 40;
/// How far past `gofunc` a later layout might have moved it; `epclntab` is searched up to here.
const MD_GOFUNC_SEARCH_END: usize = 52;

pub(crate) fn from_elf(data: &[u8]) -> Result<Option<GoTable>, Error> {
    let file = object::File::parse(data)?;
    if file.format() != BinaryFormat::Elf {
        return Ok(None);
    }
    let Some(section) = file.section_by_name(".gopclntab") else {
        let is_go = file.section_by_name(".note.go.buildid").is_some()
            || file.section_by_name(".go.buildinfo").is_some();
        return if is_go { Err(Error::NoPclntab) } else { Ok(None) };
    };
    let pcln = section.data()?;
    let pcln_addr = section.address();
    let header = parse_header(pcln)?;
    let first_entry_off =
        crate::read::u32_at(pcln, header.pcln_off).ok_or(Error::Truncated { what: "function table" })?;
    let moduledata = find_moduledata(&file, pcln_addr, pcln.len() as u64, &header, first_entry_off);
    let text_start = match (&moduledata, header.text_start) {
        (_, text) if text != 0 => text,
        (Some(md), _) => md.text,
        (None, _) => return Err(Error::NoTextStart),
    };
    let gofunc = moduledata.and_then(|md| gofunc_region(&file, pcln_addr, pcln.len(), md.gofunc));
    let table = GoTable::new(pcln.into(), header, Some(text_start), gofunc)?;
    // The functions must lie in one executable section, or the text start is wrong.
    let text_end = table.text_start().checked_add(u64::from(table.entry_off(table.len()).unwrap_or(0)));
    let in_text = file.sections().any(|s| {
        s.kind() == SectionKind::Text
            && s.address() <= text_start
            && text_end.is_some_and(|end| end <= s.address().saturating_add(s.size()))
    });
    if !in_text {
        return Err(Error::Corrupt { what: "the functions lie outside the executable sections" });
    }
    Ok(Some(table))
}

/// Scans writable data sections, `.go.module` (Go 1.26+) and `.noptrdata` first, for the moduledata.
fn find_moduledata(
    file: &object::File<'_>,
    pcln_addr: u64,
    pcln_len: u64,
    header: &Header,
    first_entry_off: u32,
) -> Option<ModuleData> {
    let rank = |name: &str| match name {
        ".go.module" => 0,
        ".noptrdata" => 1,
        ".data" => 2,
        _ => 3,
    };
    let mut sections: Vec<_> = file.sections().filter(|s| s.kind() == SectionKind::Data).collect();
    sections.sort_by_key(|s| rank(s.name().unwrap_or("")));
    for section in sections {
        let Ok(data) = section.data() else { continue };
        // moduledata is pointer-aligned in memory.
        let first = ((8 - section.address() % 8) % 8) as usize;
        let mut off = first;
        while let Some(word) = u64_at(data, off) {
            if word == pcln_addr {
                let candidate = data.get(off..).unwrap_or_default();
                if let Some(md) = check_moduledata(candidate, pcln_addr, pcln_len, header, first_entry_off) {
                    return Some(md);
                }
            }
            off += 8;
        }
    }
    None
}

/// Accepts `words` (starting at the pcHeader pointer) as the moduledata only if every table slice
/// agrees with the header.
fn check_moduledata(
    words: &[u8],
    pcln_addr: u64,
    pcln_len: u64,
    header: &Header,
    first_entry_off: u32,
) -> Option<ModuleData> {
    let word = |i: usize| u64_at(words, i * 8);
    let at = |off: usize| pcln_addr.checked_add(off as u64);
    let slices_agree = word(MD_FUNCNAMETAB)? == at(header.funcname_off)?
        && word(MD_CUTAB)? == at(header.cu_off)?
        && word(MD_FILETAB)? == at(header.filetab_off)?
        && word(MD_PCTAB)? == at(header.pctab_off)?
        && word(MD_PCLNTABLE)? == at(header.pcln_off)?
        && word(MD_FTAB)? == at(header.pcln_off)?
        && word(MD_FTAB_LEN)? == (header.nfunc as u64).checked_add(1)?;
    let text = word(MD_TEXT)?;
    if !slices_agree
        || (header.text_start != 0 && text != header.text_start)
        || word(MD_MINPC)? != text.checked_add(u64::from(first_entry_off))?
    {
        return None;
    }
    let gofunc = if header.is_go118() {
        word(MD_GOFUNC_GO118)?
    } else {
        let epclntab = pcln_addr.checked_add(pcln_len)?;
        (MD_GOFUNC_GO120 + 1..=MD_GOFUNC_SEARCH_END)
            .find(|&i| word(i) == Some(epclntab))
            .map_or_else(|| word(MD_GOFUNC_GO120), |i| word(i - 1))?
    };
    Some(ModuleData { text, gofunc })
}

/// Locates `gofunc`: inside `.gopclntab` (Go 1.26+) as an offset, else a copy from it to the end of
/// the read-only section holding it. `None` when no such section has it.
fn gofunc_region(file: &object::File<'_>, pcln_addr: u64, pcln_len: usize, gofunc: u64) -> Option<GoFunc> {
    if let Some(off) = gofunc.checked_sub(pcln_addr).filter(|&off| off < pcln_len as u64) {
        return Some(GoFunc::InPclntab(usize::try_from(off).ok()?));
    }
    let section = file.sections().find(|s| {
        matches!(s.kind(), SectionKind::ReadOnlyData | SectionKind::ReadOnlyString | SectionKind::Data)
            && s.address() <= gofunc
            && gofunc < s.address().saturating_add(s.size())
    })?;
    let data = section.data().ok()?;
    let start = usize::try_from(gofunc - section.address()).ok()?;
    Some(GoFunc::Copied(data.get(start..)?.into()))
}
