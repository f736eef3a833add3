//! Function symbols of ELF files by demangled name: what `whyslow calls` resolves patterns against, and
//! the demangler every crate shares. Reads files only, and our own process for IFUNC resolution; never
//! touches a target.

mod demangle;
pub mod jit;
pub mod placement;

pub use demangle::demangle;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0} is not an ELF file this tool can read: {1}")]
    Parse(String, object::Error),
}

/// The distinct `DW_AT_producer` strings of a file's compile units (compiler and flags, e.g.
/// `GNU C17 12.2.0 -mtune=generic -march=x86-64 -g -O2`) from the file's own DWARF (a distribution's
/// separate debug files are not read: their flags are known); empty when it has no debug info.
pub fn producers(path: &Path) -> Result<Vec<String>, SymbolError> {
    use object::ObjectSection;
    let shown = path.display().to_string();
    let data = map_file(path)?;
    let file = object::File::parse(&*data).map_err(|e| SymbolError::Parse(shown, e))?;
    let sections: Vec<(String, std::borrow::Cow<[u8]>)> = file
        .sections()
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.uncompressed_data().ok()?)))
        .filter(|(n, _)| n.starts_with(".debug_"))
        .collect();
    let section = |id: gimli::SectionId| {
        let data = sections.iter().find(|(n, _)| n == id.name()).map_or(&[][..], |(_, d)| &d[..]);
        Ok::<_, gimli::Error>(gimli::EndianSlice::new(data, gimli::LittleEndian))
    };
    let Ok(dwarf) = gimli::Dwarf::load(section) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else { continue };
        let mut entries = unit.entries();
        let Ok(Some(cu)) = entries.next_dfs() else { continue };
        let Some(attr) = cu.attr_value(gimli::DW_AT_producer) else { continue };
        if let Ok(s) = dwarf.attr_string(&unit, attr) {
            let s = s.to_string_lossy().into_owned();
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    Ok(out)
}

/// The functions a file takes from other objects: the names of its undefined dynamic symbols (what its
/// code calls through the PLT), without version suffixes.
pub fn imports(path: &Path) -> Result<Vec<String>, SymbolError> {
    use object::{Object, ObjectSymbol};
    let data = map_file(path)?;
    let file = object::File::parse(&*data).map_err(|e| SymbolError::Parse(path.display().to_string(), e))?;
    Ok(file
        .dynamic_symbols()
        .filter(|s| s.is_undefined())
        .filter_map(|s| Some(s.name().ok()?.split('@').next()?.to_string()))
        .collect())
}

/// Maps a file read-only: only the pages looked at are read (a 300 MB browser's symbol and debug pages,
/// not all of it into memory).
pub(crate) fn map_file(path: &Path) -> Result<memmap2::Mmap, SymbolError> {
    let read_error = |e| SymbolError::Read(path.display().to_string(), e);
    let file = std::fs::File::open(path).map_err(read_error)?;
    // SAFETY: read-only and private. A file truncated in place while mapped raises SIGBUS on the lost
    // pages (as in the processes running it); executables cannot be opened for writing while they run.
    unsafe { memmap2::Mmap::map(&file) }.map_err(read_error)
}

/// Where a `.gnu_debuglink` name is looked for: beside the file, in `.debug/` beside it, and under
/// `/usr/lib/debug` at the file's directory.
fn debuglink_paths(path: &Path, name: &[u8]) -> Vec<String> {
    let name = String::from_utf8_lossy(name);
    let dir = std::fs::canonicalize(path).ok().and_then(|p| p.parent().map(Path::to_path_buf));
    let Some(dir) = dir else { return Vec::new() };
    let d = dir.display();
    vec![format!("{d}/{name}"), format!("{d}/.debug/{name}"), format!("/usr/lib/debug{d}/{name}")]
}

/// The separate debug file of a build id (`/usr/lib/debug/.build-id/xx/yyyy.debug`).
fn debug_file(id: &[u8]) -> Option<String> {
    if id.len() < 2 {
        return None;
    }
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]))
}

/// The separate debug file of `file` (read from `path`) on this machine: by build id
/// (`/usr/lib/debug/.build-id/xx/yyyy.debug`), or by its `.gnu_debuglink` name next to it, in `.debug/`
/// beside it or under `/usr/lib/debug` (as gdb looks).
pub fn separate_debug_file(path: &Path, file: &object::File) -> Option<String> {
    let by_id = file.build_id().ok().flatten().and_then(debug_file);
    let linked = file.gnu_debuglink().ok().flatten().map(|(name, _)| debuglink_paths(path, name));
    by_id.into_iter().chain(linked.into_iter().flatten()).find(|p| Path::new(p).is_file())
}

/// The name of the function a GCC clone was made from (`parse.constprop.0.isra.0` -> `parse`,
/// `f(int) [clone .isra.0]` -> `f(int)`): a clone is the function, specialized. `.cold` parts are not
/// entry points and keep their name.
fn without_clone_suffix(name: &str) -> &str {
    // Every suffix starts with '.' or " [": most names have neither, and
    // this runs for every symbol a pattern is matched against.
    if !name.bytes().any(|b| b == b'.' || b == b'[') {
        return name;
    }
    [".constprop.", ".isra.", ".part.", ".lto_priv.", " [clone .constprop", " [clone .isra", " [clone .part"]
        .iter()
        .filter_map(|s| name.find(s))
        .min()
        .map_or(name, |i| &name[..i])
}

/// A function with a symbol: its names and where its code starts in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Demangled name (C and Go names as they are).
    pub name: String,
    /// The symbol as stored in the file.
    pub mangled: String,
    /// File offset of the first instruction (what a uprobe attaches to).
    pub offset: u64,
    /// Virtual address of the first instruction, as the file's code refers to it.
    pub address: u64,
    pub size: u64,
    /// A GNU indirect function: the symbol is a resolver that picks the implementation at load time.
    pub ifunc: bool,
}

/// Every defined function symbol of `.symtab` and `.dynsym` (static functions included), one entry per
/// (name, offset), sorted by offset then name; a stripped Go program's functions from its `.gopclntab`. A stripped file's `.symtab` is read from its separate debug
/// file when there is one: by build id (`/usr/lib/debug/.build-id/xx/yyyy.debug`, e.g. from libc6-dbg), or
/// by its `.gnu_debuglink` name next to it, in `.debug/` beside it or under `/usr/lib/debug` (as gdb looks).
pub fn functions(path: &Path) -> Result<Vec<Function>, SymbolError> {
    let shown = path.display().to_string();
    let data = map_file(path)?;
    let file = object::File::parse(&*data).map_err(|e| SymbolError::Parse(shown, e))?;
    let debug_data = match file.symbol_table() {
        Some(_) => None,
        None => separate_debug_file(path, &file).and_then(|p| map_file(Path::new(&p)).ok()),
    };
    let debug = debug_data.as_deref().and_then(|d| object::File::parse(d).ok());
    // Symbol addresses are virtual; uprobes want file offsets: map through the loadable segments.
    let segments: Vec<(u64, u64, u64)> =
        file.segments().map(|s| (s.address(), s.address() + s.size(), s.file_range().0)).collect();
    let to_offset = |addr: u64| {
        segments
            .iter()
            .find(|(start, end, _)| *start <= addr && addr < *end)
            .map(|(start, _, off)| addr - start + off)
    };
    let mut out = Vec::new();
    let debug_symbols = debug.iter().flat_map(|d| d.symbols());
    for sym in file.symbols().chain(debug_symbols).chain(file.dynamic_symbols()) {
        let ifunc = matches!(sym.flags(), object::SymbolFlags::Elf { st_info, .. } if st_info.st_type() == object::elf::STT_GNU_IFUNC);
        if !(sym.kind() == SymbolKind::Text || ifunc) || sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        let Ok(mangled) = sym.name() else { continue };
        if mangled.is_empty() {
            continue;
        }
        let Some(offset) = to_offset(sym.address()) else { continue };
        // Versioned dynamic names (`memcpy@@GLIBC_2.14`) are the same function as the plain name.
        let plain = mangled.split('@').next().unwrap_or(mangled);
        out.push(Function {
            name: demangle(plain),
            mangled: plain.to_string(),
            offset,
            address: sym.address(),
            size: sym.size(),
            ifunc,
        });
    }
    // A stripped Go program (no symbol table here or in a debug file): its runtime's function table.
    if file.symbol_table().is_none() && debug.is_none() {
        if let Ok(Some(table)) = whyslow_gopclntab::GoTable::from_elf(&data) {
            for f in table.functions() {
                let Some(offset) = to_offset(f.entry) else { continue };
                let name = f.name.into_owned();
                let size = f.end.saturating_sub(f.entry);
                out.push(Function {
                    mangled: name.clone(),
                    name,
                    offset,
                    address: f.entry,
                    size,
                    ifunc: false,
                });
            }
        }
    }
    out.sort_by(|a, b| (a.offset, &a.name).cmp(&(b.offset, &b.name)));
    out.dedup_by(|a, b| a.offset == b.offset && a.name == b.name);
    Ok(out)
}

/// One element of a glob.
enum GlobToken {
    /// `*`: any run of characters.
    Star,
    /// `?`: one character.
    One,
    Literal(char),
    /// `[abc]`, `[a-z]`, `[!x]` (or `[^x]`): one character of (or not of) the set.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// A pattern that is not a glob, and why (one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{pattern}' is not a valid glob: {reason}")]
pub struct GlobError {
    pub pattern: String,
    pub reason: String,
}

fn glob_tokens(pattern: &str) -> Result<Vec<GlobToken>, GlobError> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => out.push(GlobToken::Star),
            '?' => out.push(GlobToken::One),
            // `[]` is C++'s `operator[]`, not an empty set.
            '[' if chars.get(i + 1) == Some(&']') => {
                out.extend([GlobToken::Literal('['), GlobToken::Literal(']')]);
                i += 1;
            }
            '[' => {
                let mut j = i + 1;
                let negated = matches!(chars.get(j), Some('!' | '^'));
                if negated {
                    j += 1;
                }
                let mut ranges = Vec::new();
                // A `]` first in the set is one of its characters, as in the shell.
                let first = j;
                while j < chars.len() && (chars[j] != ']' || j == first) {
                    if chars.get(j + 1) == Some(&'-') && chars.get(j + 2).is_some_and(|&c| c != ']') {
                        let (lo, hi) = (chars[j], chars[j + 2]);
                        if lo > hi {
                            return Err(GlobError {
                                pattern: pattern.into(),
                                reason: format!("the range '{lo}-{hi}' is backwards"),
                            });
                        }
                        ranges.push((lo, hi));
                        j += 3;
                    } else {
                        ranges.push((chars[j], chars[j]));
                        j += 1;
                    }
                }
                if j >= chars.len() {
                    return Err(GlobError {
                        pattern: pattern.into(),
                        reason: "'[' opens a set of characters that no ']' closes (write '[[]' for a \
                                 literal '[')"
                            .into(),
                    });
                }
                out.push(GlobToken::Class { negated, ranges });
                i = j;
            }
            c => out.push(GlobToken::Literal(c)),
        }
        i += 1;
    }
    Ok(out)
}

/// A glob that matches exactly `name` (its `*`, `?` and `[` each in a set of one), for a function name
/// used as a pattern: `std::vector<int>::operator[](unsigned long)`, `<[T]>::sort`, `f [clone .isra.0]`.
pub fn glob_escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '*' | '?' | '[' => {
                out.push('[');
                out.push(c);
                out.push(']');
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether `pattern` is a glob [`glob`] understands (an unclosed `[` is not).
pub fn check_glob(pattern: &str) -> Result<(), GlobError> {
    Glob::new(pattern).map(|_| ())
}

/// Shell-style glob: `*` any run of characters, `?` one character, `[a-z]`/`[!x]` one character of a
/// set (`[]` is the two characters, as in C++'s `operator[]`), everything else literal. A pattern that
/// is not a glob ([`check_glob`]) matches nothing. To match one pattern against many names, compile it
/// once with [`Glob::new`].
pub fn glob(pattern: &str, text: &str) -> bool {
    Glob::new(pattern).is_ok_and(|g| g.matches(text))
}

/// A glob parsed once, matched against names without allocating.
pub struct Glob {
    tokens: Vec<GlobToken>,
    /// The one text a glob without wildcards or sets of several characters matches (an escaped name).
    literal: Option<String>,
}

impl Glob {
    pub fn new(pattern: &str) -> Result<Glob, GlobError> {
        let tokens = glob_tokens(pattern)?;
        let literal = tokens
            .iter()
            .map(|t| match t {
                GlobToken::Literal(c) => Some(*c),
                GlobToken::Class { negated: false, ranges }
                    if ranges.len() == 1 && ranges[0].0 == ranges[0].1 =>
                {
                    Some(ranges[0].0)
                }
                _ => None,
            })
            .collect();
        Ok(Glob { tokens, literal })
    }

    pub fn matches(&self, text: &str) -> bool {
        if let Some(l) = &self.literal {
            return l == text;
        }
        let p = &self.tokens;
        let one = |tok: &GlobToken, c: char| match tok {
            GlobToken::One => true,
            GlobToken::Literal(l) => *l == c,
            GlobToken::Class { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
            GlobToken::Star => false,
        };
        let next = |at: usize| text[at..].chars().next().expect("inside the text");
        // `ti` is a byte offset into `text`; the last star and the text offset it resumes from.
        let (mut pi, mut ti) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while ti < text.len() {
            let c = next(ti);
            if pi < p.len() && one(&p[pi], c) {
                pi += 1;
                ti += c.len_utf8();
            } else if pi < p.len() && matches!(p[pi], GlobToken::Star) {
                star = Some((pi, ti));
                pi += 1;
            } else if let Some((sp, st)) = star {
                let st = st + next(st).len_utf8();
                pi = sp + 1;
                ti = st;
                star = Some((sp, st));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|t| matches!(t, GlobToken::Star))
    }
}

/// The forms of a function's name a pattern may match: the demangled name, without its parameter list,
/// without its namespace/class qualification, and the mangled symbol (so `parse_frames` finds
/// `proto::parse_frames(char const*)` as gdb's `break parse_frames` would).
pub fn name_forms(f: &Function) -> [&str; 4] {
    let base = strip_params(without_clone_suffix(&f.name));
    let tail = unqualified(base);
    [f.name.as_str(), base, tail, f.mangled.as_str()]
}

fn strip_params(name: &str) -> &str {
    // The parameter list is the last top-level "(...)" (templates may contain parentheses too).
    if !name.ends_with(')') && !name.ends_with(") const") {
        return name;
    }
    let mut depth = 0i32;
    for (i, c) in name.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return &name[..i];
                }
            }
            _ => {}
        }
    }
    name
}

fn unqualified(name: &str) -> &str {
    // The last "::" outside template brackets.
    let mut depth = 0i32;
    let b = name.as_bytes();
    for i in (1..b.len()).rev() {
        match b[i] {
            b'>' => depth += 1,
            b'<' => depth -= 1,
            b':' if depth == 0 && b[i - 1] == b':' => return &name[i + 1..],
            _ => {}
        }
    }
    name
}

/// Where the dynamic loader resolved `symbol` in this very process: the file and the offset in it.
/// For an IFUNC this is the implementation picked for this CPU, which a target on the same machine
/// using the same library file picks too.
pub fn resolved_in_self(symbol: &str) -> Option<(String, u64)> {
    let name = std::ffi::CString::new(symbol).ok()?;
    // SAFETY: name is a NUL-terminated CString that outlives the call; dlsym only reads it.
    let addr = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as u64;
    if addr == 0 {
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (range, offset, path) = (f.first()?, f.get(2)?, f.get(5)?);
        let (start, end) = range.split_once('-')?;
        let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
        let offset = u64::from_str_radix(offset, 16).ok()?;
        (start <= addr && addr < end).then(|| (path.to_string(), addr - start + offset))
    })
}

/// Whether two paths name the same file (same device and inode), so links and symlinks agree.
pub fn same_file(a: &Path, b: &Path) -> bool {
    matches!((file_id(a), file_id(b)), (Some(x), Some(y)) if x == y)
}

/// The file a path names, as (device, inode): equal for links, symlinks and /proc/PID/root paths to it.
pub fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::{
        check_glob, functions, glob, glob_escape, name_forms, producers, resolved_in_self,
        without_clone_suffix, Function, Glob,
    };
    use std::path::Path;

    #[test]
    fn reads_producers_of_a_compiled_file() {
        let dir = tempfile::tempdir().unwrap();
        let (src, bin) = (dir.path().join("p.c"), dir.path().join("p"));
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let st = std::process::Command::new("gcc").args(["-g", "-O1", "-o"]).arg(&bin).arg(&src).status();
        assert!(st.unwrap().success());
        let p = producers(&bin).unwrap();
        assert!(p.iter().any(|s| s.starts_with("GNU C") && s.contains(" -O1")), "{p:?}");
    }

    #[test]
    fn globs() {
        assert!(glob("malloc", "malloc"));
        assert!(!glob("malloc", "malloc_usable_size"));
        assert!(glob("operator new*", "operator new(unsigned long)"));
        assert!(glob(
            "std::*string*append*",
            "std::__cxx11::basic_string<char>::_M_append(char const*, unsigned long)"
        ));
        assert!(glob("pthread_rwlock_*", "pthread_rwlock_rdlock"));
        assert!(glob("str?hr", "strchr") && !glob("str?hr", "strrchr"));
        assert!(glob("*", "") && !glob("a*b", "ac"));
        assert!(glob("str[cr]hr", "strchr") && glob("str[cr]hr", "strrhr") && !glob("str[cr]hr", "strxhr"));
        assert!(glob("mem[!s]*", "memcpy") && !glob("mem[!s]*", "memset") && glob("[a-c]x", "bx"));
        assert!(glob("*operator[]*", "std::vector<int>::operator[](unsigned long)"));
        assert!(glob("a[[]b", "a[b") && glob("a[[]]", "a[]"));
        let e = check_glob("[").unwrap_err().to_string();
        assert_eq!(e, "'[' is not a valid glob: '[' opens a set of characters that no ']' closes (write '[[]' for a literal '[')");
        assert!(!glob("[", "[") && check_glob("json_*").is_ok());
        assert!(check_glob("[z-a]").unwrap_err().to_string().contains("backwards"));
        for name in [
            "std::vector<int>::operator[](unsigned long)",
            "<[T]>::sort",
            "f [clone .isra.0]",
            "operator*",
            "a?b",
        ] {
            let p = glob_escape(name);
            assert!(check_glob(&p).is_ok() && glob(&p, name), "{name} -> {p}");
        }
        assert!(!glob(&glob_escape("operator*"), "operator*=") && !glob(&glob_escape("a?b"), "axb"));
        // An escaped name is compared as text; a star steps over whole characters, not bytes.
        let g = Glob::new(&glob_escape("operator[]")).unwrap();
        assert_eq!(g.literal.as_deref(), Some("operator[]"));
        assert!(g.matches("operator[]") && !g.matches("operator[]="));
        assert!(
            glob("a*\u{f6}?", "a\u{df}\u{f6}\u{f6}x")
                && glob("?\u{f6}", "\u{df}\u{f6}")
                && !glob("??", "\u{f6}")
        );
        assert!(Glob::new("a*").unwrap().literal.is_none() && Glob::new("[ab]").unwrap().literal.is_none());
        assert_eq!(without_clone_suffix("parse_frames.constprop.0.isra.0"), "parse_frames");
        assert_eq!(without_clone_suffix("f(int) [clone .isra.0]"), "f(int)");
        assert_eq!(without_clone_suffix("g.cold"), "g.cold");
    }

    #[test]
    fn name_forms_strip_parameters_and_qualification() {
        let f = |name: &str| Function {
            name: name.into(),
            mangled: "_Zx".into(),
            offset: 0,
            address: 0,
            size: 0,
            ifunc: false,
        };
        let g = f("proto::parse_frames(char const*, int)");
        assert_eq!(
            name_forms(&g),
            ["proto::parse_frames(char const*, int)", "proto::parse_frames", "parse_frames", "_Zx"]
        );
        let g = f("std::vector<int (*)(int), std::allocator<int (*)(int)> >::push_back(int (* const&)(int))");
        assert_eq!(name_forms(&g)[2], "push_back");
        assert_eq!(name_forms(&f("malloc"))[1..3], ["malloc", "malloc"]);
    }

    #[test]
    fn libc_functions_have_offsets_and_memcpy_is_an_ifunc_resolved_to_an_implementation() {
        let (path, offset) = resolved_in_self("memcpy").expect("libc memcpy");
        let funcs = functions(Path::new(&path)).unwrap();
        let memcpy: Vec<&Function> = funcs.iter().filter(|f| f.name == "memcpy").collect();
        assert!(memcpy.iter().any(|f| f.ifunc), "the default version is an IFUNC: {memcpy:?}");
        let imp: Vec<&str> = funcs.iter().filter(|f| f.offset == offset).map(|f| f.name.as_str()).collect();
        assert!(imp.iter().any(|n| n.starts_with("__mem")), "implementation names at {offset:#x}: {imp:?}");
        let malloc = funcs.iter().find(|f| f.name == "malloc").unwrap();
        assert!(!malloc.ifunc && malloc.size > 0);
    }
}
