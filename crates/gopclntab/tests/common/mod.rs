//! Builds the Go test program (tests/data/prog) with a given toolchain, unstripped and stripped, and
//! checks a stripped build's table against two independent oracles read from the unstripped build:
//! its `.symtab` (function names, entries, sizes) and its DWARF through binutils' `addr2line -i`
//! (names, file:line, inline chains). Shared by the test files; holds no assertions about one version.

#![allow(dead_code)] // each test file uses a different part

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use whyslow_gopclntab::GoTable;

/// The Go toolchain that must be present (the machine's Go, 1.26 when this was written).
pub const INSTALLED_GO: &str = "/usr/local/go/bin/go";

pub fn prog_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/prog")
}

/// A way to run one Go toolchain.
pub struct Toolchain {
    pub label: String,
    go: PathBuf,
    /// `GOTOOLCHAIN`: `local`, or a version the go command downloads through the module proxy.
    gotoolchain: String,
    /// The `go version` line, once known to work.
    pub version: String,
}

impl Toolchain {
    /// The machine's Go; its absence fails the test.
    pub fn installed() -> Toolchain {
        let go =
            if Path::new(INSTALLED_GO).exists() { PathBuf::from(INSTALLED_GO) } else { PathBuf::from("go") };
        Toolchain::probe("installed", go, "local")
            .unwrap_or_else(|why| panic!("the installed Go is required: {why}"))
    }

    /// The Go installed at `go`, or why it cannot be used.
    pub fn at(label: &str, go: &str) -> Result<Toolchain, String> {
        if !Path::new(go).exists() {
            return Err(format!("{go} is not installed"));
        }
        Toolchain::probe(label, PathBuf::from(go), "local")
    }

    /// `version` (e.g. "go1.24.0") run through the installed go's toolchain switching, or why not.
    pub fn downloaded(version: &str) -> Result<Toolchain, String> {
        let go =
            if Path::new(INSTALLED_GO).exists() { PathBuf::from(INSTALLED_GO) } else { PathBuf::from("go") };
        let toolchain = Toolchain::probe(version, go, version)?;
        if !toolchain.version.contains(&format!("{version} ")) {
            return Err(format!("GOTOOLCHAIN={version} ran {}", toolchain.version));
        }
        Ok(toolchain)
    }

    fn probe(label: &str, go: PathBuf, gotoolchain: &str) -> Result<Toolchain, String> {
        let mut toolchain = Toolchain {
            label: label.to_string(),
            go,
            gotoolchain: gotoolchain.to_string(),
            version: String::new(),
        };
        let out = toolchain.command().arg("version").output().map_err(|e| format!("cannot run go: {e}"))?;
        if !out.status.success() {
            return Err(format!("`go version` failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        toolchain.version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(toolchain)
    }

    /// The minor version, e.g. 26 for "go version go1.26.8 linux/amd64".
    pub fn minor(&self) -> u32 {
        let v = self.version.split_whitespace().nth(2).unwrap_or_default();
        v.trim_start_matches("go1.").split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0)
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.go);
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        cmd.current_dir(prog_dir())
            .env("GOCACHE", tmp.join("gocache"))
            .env("GOTOOLCHAIN", &self.gotoolchain)
            .env("GO111MODULE", "on")
            .env("GOFLAGS", "-buildvcs=false")
            .env("CGO_ENABLED", "0");
        cmd
    }

    /// Builds the test program twice with `extra` go build flags: with symbols and DWARF, and with
    /// `-ldflags=-s -w` then `strip`. Panics when a build fails.
    pub fn build(&self, variant: &str, extra: &[&str], cgo: bool) -> Build {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("go-{}-{variant}", self.label));
        std::fs::create_dir_all(&dir).unwrap();
        let unstripped = dir.join("prog");
        let unstripped_ldflags = extra.iter().find_map(|f| f.strip_prefix("-ldflags=")).unwrap_or("");
        let other: Vec<&str> = extra.iter().copied().filter(|f| !f.starts_with("-ldflags=")).collect();
        let go_build = |out: &Path, ldflags: String| {
            let mut cmd = self.command();
            cmd.args(["build", "-o"]).arg(out).arg(format!("-ldflags={ldflags}")).args(&other).arg(".");
            if cgo {
                cmd.env("CGO_ENABLED", "1");
            }
            // binutils 2.40's addr2line misreads Go's DWARF 5 line tables (default from Go 1.25); DWARF 4
            // changes only the debug sections, and both builds get the same setting so their code matches.
            if self.minor() >= 25 {
                cmd.env("GOEXPERIMENT", "nodwarf5");
            }
            let out = cmd.output().expect("run go build");
            assert!(
                out.status.success(),
                "{} go build failed: {}",
                self.version,
                String::from_utf8_lossy(&out.stderr)
            );
        };
        go_build(&unstripped, unstripped_ldflags.to_string());
        let half = dir.join("prog-s-w");
        go_build(&half, format!("-s -w {unstripped_ldflags}"));
        let stripped = dir.join("prog-stripped");
        let out = Command::new("strip").arg("-o").arg(&stripped).arg(&half).output().expect("run strip");
        assert!(out.status.success(), "strip failed: {}", String::from_utf8_lossy(&out.stderr));
        Build { unstripped, stripped, version: self.version.clone() }
    }
}

pub struct Build {
    pub unstripped: PathBuf,
    pub stripped: PathBuf,
    pub version: String,
}

/// A source frame as (name, file, line).
pub type Loc = (String, String, u32);

/// The line of `// MARK:name` in the test program.
pub fn mark_line(name: &str) -> u32 {
    let source = std::fs::read_to_string(prog_dir().join("main.go")).unwrap();
    let tag = format!("// MARK:{name}");
    let index =
        source.lines().position(|l| l.trim_end().ends_with(&tag)).unwrap_or_else(|| panic!("no {tag}"));
    index as u32 + 1
}

pub fn main_go() -> String {
    prog_dir().join("main.go").to_string_lossy().into_owned()
}

/// binutils' `addr2line -a -i -f -C` on `addrs`: for each address its frames, innermost first.
pub fn addr2line(binary: &Path, addrs: &[u64]) -> Vec<Vec<Loc>> {
    addr2line_with("addr2line", binary, addrs)
}

fn addr2line_with(tool: &str, binary: &Path, addrs: &[u64]) -> Vec<Vec<Loc>> {
    let mut result = Vec::new();
    for chunk in addrs.chunks(2000) {
        let out = Command::new(tool)
            .args(["-a", "-i", "-f", "-C", "-e"])
            .arg(binary)
            .args(chunk.iter().map(|a| format!("{a:#x}")))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
        assert!(out.status.success(), "{tool} failed: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines().peekable();
        for &addr in chunk {
            let header = lines.next().expect("addr2line output ends early");
            assert_eq!(u64::from_str_radix(header.trim_start_matches("0x"), 16).unwrap(), addr);
            let mut frames = Vec::new();
            while lines.peek().is_some_and(|l| !l.starts_with("0x")) {
                let name = lines.next().unwrap().to_string();
                let location = lines.next().expect("addr2line: a name without a location");
                let location = location.split(" (discriminator").next().unwrap();
                let (file, line) = location.rsplit_once(':').unwrap();
                // DWARF joins the compilation directory "." to Go's pseudo-file `<autogenerated>`.
                let file = file.strip_prefix("./").filter(|f| f.starts_with('<')).unwrap_or(file);
                frames.push((name, file.to_string(), line.parse().unwrap_or(0)));
            }
            result.push(frames);
        }
    }
    result
}

enum Verdict {
    Same,
    /// A known difference between the DWARF (or binutils' reading of it) and the table, not an error.
    Tolerated(&'static str),
    Differ,
}

const MISNAMED: &str = "binutils named the innermost inlined frame after the physical function";

/// Compares our frames with addr2line's at one address (both innermost first). Every tolerated case is
/// narrow: the rest of the answer must still agree.
fn compare(mine: &[Loc], theirs: &[Loc], is_nop: impl FnOnce() -> bool) -> Verdict {
    if mine == theirs {
        return Verdict::Same;
    }
    let position = |l: &Loc| (l.1.clone(), l.2);
    let names = |ls: &[Loc]| ls.iter().map(|l| l.0.clone()).collect::<Vec<_>>();
    // binutils 2.40 often gives the innermost inlined frame of Go code the physical function's name
    // (llvm-addr2line does not: confirm_with_llvm checks those names).
    if mine.len() > 1
        && mine.len() == theirs.len()
        && theirs[0].0 == theirs[theirs.len() - 1].0
        && position(&mine[0]) == position(&theirs[0])
        && mine[1..] == theirs[1..]
    {
        return Verdict::Tolerated(MISNAMED);
    }
    // The DWARF line table has no line for some compiler-generated code (line 0), where the table
    // says `<autogenerated>:1`.
    if theirs.first().is_some_and(|l| l.2 == 0) && names(mine) == names(theirs) {
        return Verdict::Tolerated("DWARF has no line (0) where the table says <autogenerated>:1");
    }
    // Go's DWARF records no inlining inside autogenerated wrapper methods; the table does.
    if mine.len() == 2
        && theirs.len() == 1
        && mine[1].1 == "<autogenerated>"
        && theirs[0].0 == mine[1].0
        && position(&theirs[0]) == position(&mine[0])
    {
        return Verdict::Tolerated("DWARF omits the call inlined into an autogenerated wrapper");
    }
    // binutils names a function by a linker marker symbol sharing its address (Go 1.24: runtime.text).
    if theirs.len() == 1
        && mine.len() == 1
        && MARKERS.contains(&theirs[0].0.as_str())
        && position(&mine[0]) == position(&theirs[0])
    {
        return Verdict::Tolerated(
            "binutils named the function after the runtime.text marker at its address",
        );
    }
    // An alignment NOP the assembler put inside a function (loop alignment, Go 1.21+): the DWARF line
    // table gives it the row before it, the table the position of what follows.
    if is_nop() {
        return Verdict::Tolerated(
            "alignment NOP inside a function: DWARF and the table place it differently",
        );
    }
    Verdict::Differ
}

/// True when the instruction at `addr` is a NOP, by objdump (binutils).
fn is_nop(binary: &Path, addr: u64) -> bool {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(format!("--start-address={addr:#x}"))
        .arg(format!("--stop-address={:#x}", addr + 16))
        .arg(binary)
        .output()
        .expect("run objdump (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("{addr:x}:");
    text.lines().any(|l| {
        l.trim_start().starts_with(&prefix)
            && l.split_whitespace().nth(1).is_some_and(|m| m.starts_with("nop"))
    })
}

/// Checks the frames binutils misnamed against `llvm-addr2line`, which reads the same DWARF without
/// that defect; says what was done (llvm-addr2line may be absent: then binutils' file:line and outer
/// frames are all that was compared there).
fn confirm_with_llvm(binary: &Path, misnamed: &[(u64, Vec<Loc>)], go118: bool) -> String {
    if misnamed.is_empty() {
        return "none to confirm".into();
    }
    if Command::new("llvm-addr2line").arg("--version").output().is_err() {
        return "names unconfirmed: no llvm-addr2line".into();
    }
    let addrs: Vec<u64> = misnamed.iter().map(|(a, _)| *a).collect();
    let mut llvm = addr2line_with("llvm-addr2line", binary, &addrs);
    for frame in llvm.iter_mut().flatten() {
        frame.0 = table_name(&frame.0, go118);
    }
    for ((addr, mine), theirs) in misnamed.iter().zip(&llvm) {
        assert_eq!(mine, theirs, "frames at {addr:#x} (ours, then llvm-addr2line's)");
    }
    "all confirmed by llvm-addr2line".into()
}

/// Our frames at `addr`, innermost first like addr2line.
pub fn our_frames(table: &GoTable, addr: u64) -> Vec<Loc> {
    let frames = table.frames(addr).unwrap_or_else(|| panic!("no frames at {addr:#x}"));
    frames
        .iter()
        .rev()
        .map(|f| (f.name.to_string(), f.file.as_deref().unwrap_or("??").to_string(), f.line))
        .collect()
}

/// The name the table gives for a function the symbol table or DWARF calls `name`:
/// - assembly functions are `X.abi0` in `.symtab` (the ABI their code follows), `X` in the table;
/// - Go 1.18-1.19 tables write generic instantiations with everything from the first `[` to the last
///   `]` elided as `[...]` (cmd/link's pcln.go, nameParts), so `main.Map[go.shape.int_0]` is
///   `main.Map[...]` there.
/// - the ELF symbol writer turns Go's `·` into `.` (`type:.eq.runtime.untracedG·7`); the table and
///   DWARF keep it.
pub fn table_name(name: &str, go118: bool) -> String {
    let name = name.strip_suffix(".abi0").unwrap_or(name);
    if go118 {
        if let (Some(open), Some(close)) = (name.find('['), name.rfind(']')) {
            if open < close {
                return format!("{}[...]{}", &name[..open], &name[close + 1..]);
            }
        }
    }
    name.to_string()
}

/// FUNC symbols of the unstripped build, by (name as the table writes it, address): the size.
fn symtab_functions(elf: &object::File<'_>, go118: bool) -> BTreeMap<(String, u64), u64> {
    elf.symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
        .map(|s| ((table_name(s.name().unwrap(), go118), s.address()), s.size()))
        .collect()
}

/// Linker-defined FUNC symbols that mark the text's bounds rather than name a function.
const MARKERS: [&str; 2] = ["runtime.text", "runtime.etext"];

/// The whole oracle comparison for one build; returns the stripped table for further checks.
pub fn check_build(build: &Build) -> (GoTable, Vec<u8>) {
    eprintln!("checking {} ({})", build.version, build.stripped.display());
    let stripped_bytes = std::fs::read(&build.stripped).unwrap();
    let unstripped_bytes = std::fs::read(&build.unstripped).unwrap();
    let stripped_elf = object::File::parse(&*stripped_bytes).unwrap();
    assert!(stripped_elf.section_by_name(".symtab").is_none(), "the stripped build keeps .symtab");
    assert!(
        !stripped_elf.sections().any(|s| s.name().unwrap_or("").contains("debug")),
        "the stripped build keeps DWARF"
    );
    let table = GoTable::from_elf(&stripped_bytes).expect("parse").expect("a Go binary");
    assert!(table.has_inline_tree(), "moduledata not found in {}", build.version);
    let expected_hint = if build.version.contains("go1.18") || build.version.contains("go1.19") {
        "1.18-1.19"
    } else {
        "1.20+"
    };
    assert_eq!(table.go_version_hint(), expected_hint);

    // Oracle 1: every FUNC symbol is a function of the table with the same entry, name and size.
    let unstripped_elf = object::File::parse(&*unstripped_bytes).unwrap();
    let go118 = expected_hint == "1.18-1.19";
    let symbols = symtab_functions(&unstripped_elf, go118);
    let ours: BTreeMap<(String, u64), u64> =
        table.functions().map(|f| ((f.name.replace('·', "."), f.entry), f.end)).collect();
    assert_eq!(ours.len(), table.len(), "functions() skipped a record or two share a name and entry");
    // With the external linker, C code (crt files, runtime/cgo's C part) shares .text but lies outside
    // the Go text, which is all the table covers.
    let go_text = table.functions().next().unwrap().entry..table.functions().last().unwrap().end;
    let symbol_keys: BTreeSet<_> = symbols
        .keys()
        .filter(|(name, addr)| !MARKERS.contains(&name.as_str()) && go_text.contains(addr))
        .collect();
    let our_keys: BTreeSet<_> = ours.keys().collect();
    let missing: Vec<_> = symbol_keys.difference(&our_keys).take(20).collect();
    let extra: Vec<_> = our_keys.difference(&symbol_keys).take(20).collect();
    assert!(missing.is_empty() && extra.is_empty(), "symtab-only: {missing:?}\ntable-only: {extra:?}");
    let mut sized = 0;
    for ((name, entry), size) in &symbols {
        // go:textfipsstart and go:textfipsend (Go 1.24+) are 1-byte framing symbols without pc tables
        // (cmd/link fips140.go): the table records no size for them, so they end at the next entry.
        let framing = name.starts_with("go:textfips");
        if *size == 0 || framing || MARKERS.contains(&name.as_str()) || !go_text.contains(entry) {
            continue;
        }
        sized += 1;
        assert_eq!(ours[&(name.clone(), *entry)], entry + size, "end of {name} at {entry:#x}");
    }
    assert!(sized * 10 > symbol_keys.len() * 9, "too few sized symbols: {sized} of {}", symbol_keys.len());
    for f in table.functions() {
        let mid = f.entry + (f.end - f.entry) / 2;
        assert_eq!(table.function_at(mid).map(|g| g.entry), Some(f.entry), "function_at({mid:#x})");
        assert_eq!(table.function_at(f.end - 1).map(|g| g.entry), Some(f.entry));
    }
    assert!(table.function_at(table.text_start().wrapping_sub(1)).is_none());

    // Oracle 2: DWARF through addr2line, at every function's entry and middle.
    let addrs: Vec<u64> =
        table.functions().flat_map(|f| [f.entry, f.entry + (f.end - f.entry) / 2]).collect();
    let mut dwarf = addr2line(&build.unstripped, &addrs);
    for frame in dwarf.iter_mut().flatten() {
        frame.0 = table_name(&frame.0, go118);
    }
    let mut inlined_checked = 0;
    let mut bad = Vec::new();
    let mut tolerated: BTreeMap<&str, usize> = BTreeMap::new();
    let mut misnamed = Vec::new();
    for (addr, theirs) in addrs.iter().zip(&dwarf) {
        let mine = our_frames(&table, *addr);
        inlined_checked += usize::from(mine.len() > 1);
        // binutils sometimes takes a name from .symtab, where `·` became `.` (see table_name).
        let dotted = |frames: &[Loc]| {
            frames.iter().map(|(n, f, l)| (n.replace('·', "."), f.clone(), *l)).collect::<Vec<_>>()
        };
        let (mine, theirs) = (dotted(&mine), dotted(theirs));
        let theirs = &theirs;
        match compare(&mine, theirs, || is_nop(&build.unstripped, *addr)) {
            Verdict::Same => {}
            Verdict::Tolerated(why) => {
                *tolerated.entry(why).or_default() += 1;
                if why == MISNAMED {
                    misnamed.push((*addr, mine));
                }
            }
            Verdict::Differ => bad.push(format!("{addr:#x}\n  ours: {mine:?}\n  addr2line: {theirs:?}")),
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} addresses differ:\n{}",
        bad.len(),
        addrs.len(),
        bad[..bad.len().min(30)].join("\n")
    );
    for (why, count) in &tolerated {
        // Each explained difference stays rare, so it cannot hide a systematic error (binutils' misnamed
        // frames are common, but checked by confirm_with_llvm).
        assert!(*why == MISNAMED || count * 10 < addrs.len(), "{count} of {} addresses: {why}", addrs.len());
    }
    let confirmed = confirm_with_llvm(&build.unstripped, &misnamed, go118);
    assert!(inlined_checked > 0, "no sampled address was in inlined code");
    eprintln!(
        "{}: {} functions; of {} addresses (each function's entry and middle, {inlined_checked} in inlined \
         code) all agree with binutils addr2line except these explained ones: {tolerated:?} ({confirmed})",
        build.version,
        table.len(),
        addrs.len(),
    );
    check_handwritten(&table, build);
    (table, stripped_bytes)
}

/// The constructs the test program was written for, with their known names and lines.
fn check_handwritten(table: &GoTable, build: &Build) {
    let by_name: BTreeMap<String, (u64, u64)> =
        table.functions().map(|f| (f.name.to_string(), (f.entry, f.end))).collect();
    let go118 = table.go_version_hint() == "1.18-1.19";
    // Go 1.18-1.19 named shapes with an index suffix.
    let shape = |t: &str| if go118 { "main.Map[...]".to_string() } else { format!("main.Map[go.shape.{t}]") };
    for name in [
        "main.(*Counter).Add".to_string(),
        "main.Counter.Value".to_string(),
        "main.makeAdder".to_string(),
        "main.makeAdder.func1".to_string(),
        "main.main.func1".to_string(),
        "main.outer".to_string(),
        "main.spin".to_string(),
        "main.main".to_string(),
        shape("int"),
        shape("string"),
    ] {
        assert!(by_name.contains_key(&name), "{}: no function {name}", build.version);
    }
    assert!(
        !by_name.contains_key("main.leaf") && !by_name.contains_key("main.middle"),
        "leaf/middle not inlined"
    );

    // Somewhere in main.outer, pcs of leaf's body are inlined through middle: the full chain.
    let (entry, end) = by_name["main.outer"];
    let file = main_go();
    let want = vec![
        ("main.outer".to_string(), Some(file.clone()), mark_line("outer_calls_middle"), false),
        ("main.middle".to_string(), Some(file.clone()), mark_line("middle_calls_leaf"), true),
        ("main.leaf".to_string(), Some(file.clone()), mark_line("leaf_body"), true),
    ];
    let hits: Vec<u64> = (entry..end)
        .filter(|&pc| {
            let frames = table.frames(pc).unwrap();
            let got: Vec<_> = frames
                .iter()
                .map(|f| (f.name.to_string(), f.file.as_ref().map(|f| f.to_string()), f.line, f.inlined))
                .collect();
            got == want
        })
        .collect();
    assert!(!hits.is_empty(), "{}: no pc of main.outer shows outer -> middle -> leaf", build.version);
    // The same pcs through addr2line: the same chain, innermost first (with the innermost name from
    // llvm-addr2line where binutils shows its defect).
    let mut misnamed = Vec::new();
    for (pc, theirs) in hits.iter().zip(addr2line(&build.unstripped, &hits)) {
        let mine = our_frames(table, *pc);
        match compare(&mine, &theirs, || false) {
            Verdict::Same => {}
            Verdict::Tolerated(MISNAMED) => misnamed.push((*pc, mine)),
            _ => panic!("{}: at {pc:#x} ours {mine:?}, addr2line {theirs:?}", build.version),
        }
    }
    eprintln!(
        "{}: outer -> middle -> leaf at {} pcs: {}",
        build.version,
        hits.len(),
        confirm_with_llvm(&build.unstripped, &misnamed, go118)
    );
}

/// A copy of `elf` in which no aligned word points at `.gopclntab` any more, so the moduledata scan
/// finds nothing (as when a moduledata layout is not recognized).
pub fn without_moduledata(elf: &[u8]) -> Vec<u8> {
    let file = object::File::parse(elf).unwrap();
    let pattern = file.section_by_name(".gopclntab").unwrap().address().to_le_bytes();
    let mut copy = elf.to_vec();
    let mut hits = 0;
    for word in copy.chunks_exact_mut(8) {
        if word == pattern {
            word.fill(0);
            hits += 1;
        }
    }
    assert!(hits > 0, "no pointer to .gopclntab in the file");
    copy
}
