//! A real table, truncated and bit-flipped at many positions, through every API: nothing may panic or
//! hang (errors and `None`s are fine). Also the typed errors for old layouts, a missing `.gopclntab`
//! and a missing moduledata, and `from_parts` agreeing with `from_elf`.

mod common;

use common::Toolchain;
use object::{Object, ObjectSection, ObjectSymbol};
use std::ops::Range;
use whyslow_gopclntab::{Error, GoTable};

/// The installed Go's unstripped build, and the pieces `from_parts` takes, cut out of it by symbol.
struct Fixture {
    elf: Vec<u8>,
    pclntab: Range<usize>,
    moduledata: Range<usize>,
    text_start: u64,
    gofunc: Range<usize>,
}

fn fixture() -> Fixture {
    let build = Toolchain::installed().build("robustness", &[], false);
    let elf = std::fs::read(&build.unstripped).unwrap();
    let file = object::File::parse(&*elf).unwrap();
    let file_range = |name: &str| {
        let s = file.section_by_name(name).unwrap_or_else(|| panic!("no {name}"));
        let (off, len) = s.file_range().unwrap();
        off as usize..(off + len) as usize
    };
    let pclntab = file_range(".gopclntab");
    let symbol =
        |name: &str| file.symbols().find(|s| s.name() == Ok(name)).unwrap_or_else(|| panic!("no {name}"));
    let text_start = symbol("runtime.text").address();
    // Where go:func.* lives: inside .gopclntab from Go 1.26 on, in .rodata before.
    let gofunc_addr = symbol("go:func.*").address();
    let section = file
        .sections()
        .find(|s| s.address() <= gofunc_addr && gofunc_addr < s.address() + s.size())
        .expect("a section holding go:func.*");
    let (off, len) = section.file_range().unwrap();
    let start = (off + gofunc_addr - section.address()) as usize;
    let gofunc = start..(off + len) as usize;
    let moduledata_addr = symbol("runtime.firstmoduledata").address();
    let md_section = file
        .sections()
        .find(|s| s.address() <= moduledata_addr && moduledata_addr < s.address() + s.size())
        .unwrap();
    let md_off = (md_section.file_range().unwrap().0 + moduledata_addr - md_section.address()) as usize;
    Fixture { pclntab, moduledata: md_off..md_off + 400, text_start, gofunc, elf }
}

/// Calls every API on `table` at `addrs`, consuming the answers.
fn exercise(table: &GoTable, addrs: &[u64]) -> usize {
    let mut seen = table.len() + usize::from(table.has_inline_tree()) + table.go_version_hint().len();
    seen += table.text_start() as usize & 1;
    seen += table.functions().take(100_000).map(|f| f.name.len() + (f.end - f.entry) as usize).sum::<usize>();
    for &addr in addrs {
        seen += table.function_at(addr).map_or(0, |f| f.name.len());
        if let Some(frames) = table.frames(addr) {
            seen += frames
                .iter()
                .map(|f| f.name.len() + f.file.as_ref().map_or(0, |f| f.len()) + f.line as usize)
                .sum::<usize>();
        }
    }
    seen
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Lookup addresses: entries, middles and last bytes of a spread of functions, and some outside.
fn sample_addrs(table: &GoTable) -> Vec<u64> {
    let functions: Vec<_> = table.functions().map(|f| (f.entry, f.end)).collect();
    let mut addrs: Vec<u64> = functions
        .iter()
        .step_by((functions.len() / 60).max(1))
        .flat_map(|&(entry, end)| [entry, entry + (end - entry) / 2, end - 1, end])
        .collect();
    addrs.extend([0, 1, table.text_start() - 1, u64::MAX, functions.last().unwrap().1 + 64]);
    addrs
}

#[test]
fn corrupt_tables_never_panic() {
    let fx = fixture();
    let pcln = &fx.elf[fx.pclntab.clone()];
    let gofunc = &fx.elf[fx.gofunc.clone()];
    let good = GoTable::from_parts(pcln, Some(fx.text_start), Some(gofunc)).expect("the real table parses");
    assert!(good.has_inline_tree());
    let addrs = sample_addrs(&good);
    exercise(&good, &addrs);

    // Truncations: every length in the header and the first function records, then a spread.
    let mut lengths: Vec<usize> = (0..600).collect();
    lengths.extend((600..pcln.len()).step_by(pcln.len() / 1500));
    let mut parsed = 0;
    for &len in &lengths {
        if let Ok(table) = GoTable::from_parts(&pcln[..len], Some(fx.text_start), Some(gofunc)) {
            exercise(&table, &addrs);
            parsed += 1;
        }
    }
    eprintln!("{} truncations of .gopclntab, {parsed} still parsed", lengths.len());
    for len in (0..gofunc.len()).step_by((gofunc.len() / 300).max(1)) {
        let table = GoTable::from_parts(pcln, Some(fx.text_start), Some(&gofunc[..len])).unwrap();
        exercise(&table, &addrs);
    }

    // Bit flips: every bit of the header, then random bits over the table and the inline trees.
    let mut rng = Rng(0x5eed_0f60_5ca1_e000);
    let mut flips: Vec<(usize, u8)> = (0..72 * 8).map(|bit| (bit / 8, 1 << (bit % 8))).collect();
    flips.extend((0..3000).map(|_| (rng.below(pcln.len()), 1 << rng.below(8))));
    let mut corrupt = pcln.to_vec();
    let mut parsed = 0;
    for &(at, bit) in &flips {
        corrupt[at] ^= bit;
        if let Ok(table) = GoTable::from_parts(&corrupt, Some(fx.text_start), Some(gofunc)) {
            exercise(&table, &addrs);
            parsed += 1;
        }
        corrupt[at] ^= bit;
    }
    eprintln!("{} bit flips in .gopclntab, {parsed} still parsed", flips.len());
    let mut corrupt_gofunc = gofunc.to_vec();
    for _ in 0..1000 {
        let (at, bit) = (rng.below(gofunc.len().min(1 << 16)), 1 << rng.below(8));
        corrupt_gofunc[at] ^= bit;
        let table = GoTable::from_parts(pcln, Some(fx.text_start), Some(&corrupt_gofunc)).unwrap();
        exercise(&table, &addrs);
        corrupt_gofunc[at] ^= bit;
    }
    // Several flips at once, accumulating.
    let mut corrupt = pcln.to_vec();
    for round in 0..300 {
        for _ in 0..8 {
            let at = rng.below(corrupt.len());
            corrupt[at] ^= 1 << rng.below(8);
        }
        if let Ok(table) = GoTable::from_parts(&corrupt, Some(fx.text_start), Some(gofunc)) {
            exercise(&table, &addrs[..addrs.len().min(40 + round % 7)]);
        }
    }
}

#[test]
fn corrupt_elf_files_never_panic() {
    let fx = fixture();
    let good = GoTable::from_elf(&fx.elf).unwrap().unwrap();
    let addrs = sample_addrs(&good);
    // Every bit of the moduledata's first 400 bytes (what the scan validates and reads), and of the
    // pcHeader, through from_elf.
    let mut elf = fx.elf.clone();
    let positions = fx.moduledata.clone().chain(fx.pclntab.start..fx.pclntab.start + 72);
    let mut outcomes = std::collections::BTreeMap::new();
    for at in positions {
        for bit in 0..8 {
            elf[at] ^= 1 << bit;
            let outcome = match GoTable::from_elf(&elf) {
                Ok(Some(table)) => {
                    exercise(&table, &addrs[..20]);
                    if table.has_inline_tree() {
                        "parsed"
                    } else {
                        "parsed without inline trees"
                    }
                }
                Ok(None) => "none",
                Err(_) => "error",
            };
            *outcomes.entry(outcome).or_insert(0) += 1;
            elf[at] ^= 1 << bit;
        }
    }
    eprintln!("bit flips in moduledata and header through from_elf: {outcomes:?}");
    // Truncated ELF files: errors (the section headers are at the end), never panics.
    for len in (0..fx.elf.len()).step_by(fx.elf.len() / 200) {
        let _ = GoTable::from_elf(&fx.elf[..len]);
    }
}

#[test]
fn from_parts_agrees_with_from_elf() {
    let fx = fixture();
    let from_elf = GoTable::from_elf(&fx.elf).unwrap().unwrap();
    let pcln = &fx.elf[fx.pclntab.clone()];
    let from_parts =
        GoTable::from_parts(pcln, Some(fx.text_start), Some(&fx.elf[fx.gofunc.clone()])).unwrap();
    assert_eq!(from_elf.text_start(), fx.text_start);
    assert!(from_elf.functions().eq(from_parts.functions()));
    for addr in sample_addrs(&from_elf) {
        assert_eq!(from_elf.frames(addr), from_parts.frames(addr), "{addr:#x}");
    }
    // Without the inline trees: one frame per address, named after the physical function, and the
    // innermost file:line is unchanged (the physical function's tables describe the innermost code).
    let flat = GoTable::from_parts(pcln, Some(fx.text_start), None).unwrap();
    assert!(!flat.has_inline_tree());
    let mut inlined = 0;
    for addr in sample_addrs(&from_elf) {
        let (Some(full), Some(flat)) = (from_elf.frames(addr), flat.frames(addr)) else {
            assert!(from_elf.frames(addr).is_none() && flat.frames(addr).is_none());
            continue;
        };
        inlined += usize::from(full.len() > 1);
        assert_eq!(flat.len(), 1);
        assert_eq!((&flat[0].name, flat[0].inlined), (&full[0].name, false));
        let innermost = full.last().unwrap();
        assert_eq!((&flat[0].file, flat[0].line), (&innermost.file, innermost.line));
    }
    assert!(inlined > 0);
}

/// Overwrites the four magic bytes of `.gopclntab` in a copy of the ELF file.
fn with_magic(fx: &Fixture, magic: u32) -> Vec<u8> {
    let mut elf = fx.elf.clone();
    elf[fx.pclntab.start..fx.pclntab.start + 4].copy_from_slice(&magic.to_le_bytes());
    elf
}

#[test]
fn old_layouts_are_named_errors() {
    let fx = fixture();
    let err = GoTable::from_elf(&with_magic(&fx, 0xffff_fffa)).unwrap_err();
    assert!(matches!(err, Error::Unsupported { version: "Go 1.16-1.17", magic: 0xffff_fffa }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "Go 1.16-1.17 binary: its .gopclntab layout (magic 0xfffffffa) is not supported, only Go 1.18+"
    );
    let err = GoTable::from_elf(&with_magic(&fx, 0xffff_fffb)).unwrap_err();
    assert!(matches!(err, Error::Unsupported { version: "Go 1.2-1.15", .. }), "{err:?}");
    assert!(err.to_string().starts_with("Go 1.2-1.15 binary"));
    let err = GoTable::from_elf(&with_magic(&fx, 0x1234_5678)).unwrap_err();
    assert!(matches!(err, Error::UnknownMagic { magic: 0x1234_5678 }), "{err:?}");
}

#[test]
fn missing_tables_are_none_or_named_errors() {
    let fx = fixture();
    // A Go binary whose .gopclntab cannot be found by name (renamed in the section name table).
    let mut elf = fx.elf.clone();
    let name_at = elf.windows(11).position(|w| w == b".gopclntab\0").expect("section name");
    elf[name_at + 9] = b'X';
    assert!(matches!(GoTable::from_elf(&elf), Err(Error::NoPclntab)));
    // Not a Go binary: this test executable.
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    assert!(GoTable::from_elf(&me).unwrap().is_none());
    // Not an object file at all.
    assert!(matches!(GoTable::from_elf(b"not an ELF file"), Err(Error::Elf(_))));
    assert!(GoTable::from_elf(&[]).is_err());
    // Go 1.26+ records the text start only in the moduledata: without it, a named error.
    let mut elf = fx.elf.clone();
    elf[fx.moduledata.start] ^= 0x40;
    let header_text =
        u64::from_le_bytes(elf[fx.pclntab.start + 24..fx.pclntab.start + 32].try_into().unwrap());
    match GoTable::from_elf(&elf) {
        Err(Error::NoTextStart) => assert_eq!(header_text, 0),
        Ok(Some(table)) => {
            assert_ne!(header_text, 0, "found a moduledata that is not there");
            assert!(!table.has_inline_tree());
        }
        other => panic!("{other:?}"),
    }
}
