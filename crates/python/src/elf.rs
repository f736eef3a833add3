//! Which mapped file holds a CPython interpreter, and where in it: the `_PyRuntime` structure every
//! thread state hangs off, and the code of `_PyEval_EvalFrameDefault`, whose native frames stand for the
//! Python frames they run. The version comes from the file's name (`libpython3.11.so.1.0`,
//! `python3.11`), else from the `Py_Version` constant 3.11+ exports.

use object::{Object, ObjectSegment, ObjectSymbol};
use std::ops::Range;

/// The name of CPython's evaluation loop: each of its native frames runs Python frames.
const EVAL: &str = "_PyEval_EvalFrameDefault";

/// Whether a mapped file's path may be a CPython interpreter (an executable or libpython), worth
/// reading its symbols for.
pub fn looks_like_python(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.starts_with("libpython3") || base.starts_with("python3")
}

/// A CPython interpreter in an ELF file: addresses are the file's virtual addresses (add the load bias
/// of its mapping).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    /// 3.`minor`.
    pub minor: u8,
    /// `_PyRuntime`.
    pub runtime: u64,
    /// `_PyEval_EvalFrameDefault` and its parts the compiler split off (`.cold`).
    pub eval: Vec<Range<u64>>,
}

impl Interpreter {
    /// The interpreter in the ELF file `bytes` named `path`; None when it is no CPython 3 (no
    /// `_PyRuntime`, which Python 2 and 3.6 lack) or its version cannot be told.
    pub fn find(path: &str, bytes: &[u8]) -> Option<Interpreter> {
        let obj = object::File::parse(bytes).ok()?;
        let mut runtime = None;
        let mut version = None;
        let mut eval = Vec::new();
        // The dynamic table names the exported ones; the symbol table (when not stripped) the `.cold`
        // parts too.
        for s in obj.dynamic_symbols().chain(obj.symbols()) {
            let Ok(name) = s.name() else { continue };
            match name {
                "_PyRuntime" => runtime = Some(s.address()),
                "Py_Version" => version = Some(s.address()),
                n if n == EVAL || n.strip_prefix(EVAL).is_some_and(|r| r.starts_with('.')) => {
                    let r = s.address()..s.address() + s.size().max(1);
                    if s.address() != 0 && !eval.contains(&r) {
                        eval.push(r);
                    }
                }
                _ => {}
            }
        }
        let minor = minor_of_name(path).or_else(|| version.and_then(|v| minor_of_hex(&obj, bytes, v)))?;
        Some(Interpreter { minor, runtime: runtime.filter(|&a| a != 0)?, eval })
    }
}

/// 11 of `.../libpython3.11.so.1.0` or `.../python3.11`.
fn minor_of_name(path: &str) -> Option<u8> {
    let base = path.rsplit('/').next().unwrap_or(path);
    let rest = base.strip_prefix("lib").unwrap_or(base).strip_prefix("python3.")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The minor version in `Py_Version` (PY_VERSION_HEX: 0x030b07f0 is 3.11.7) at virtual address `at`.
fn minor_of_hex(obj: &object::File, bytes: &[u8], at: u64) -> Option<u8> {
    let seg = obj.segments().find(|s| (s.address()..s.address() + s.size()).contains(&at))?;
    let (off, size) = seg.file_range();
    let rel = at - seg.address();
    if rel + 4 > size {
        return None;
    }
    let o = usize::try_from(off + rel).ok()?;
    let v = u32::from_le_bytes(bytes.get(o..o + 4)?.try_into().ok()?);
    (v >> 24 == 3).then_some((v >> 16) as u8)
}

#[cfg(test)]
mod tests {
    use super::{looks_like_python, minor_of_name, Interpreter};

    #[test]
    fn versions_come_from_file_names() {
        assert_eq!(minor_of_name("/usr/lib/libpython3.11.so.1.0"), Some(11));
        assert_eq!(minor_of_name("/root/.pyenv/versions/3.8.18/bin/python3.8"), Some(8));
        assert_eq!(minor_of_name("/usr/bin/python3"), None);
        assert!(looks_like_python("/usr/bin/python3.12") && looks_like_python("/x/libpython3.9.so"));
        assert!(!looks_like_python("/usr/bin/perl") && !looks_like_python("/usr/lib/libpython2.7.so"));
    }

    /// Each pyenv CPython 3.8+ here: the interpreter is found in the file its executable maps (libpython
    /// or the executable itself), with its version and evaluation loop.
    #[test]
    fn pyenv_interpreters_are_found() {
        let Ok(home) = std::env::var("HOME") else { return };
        let Ok(dirs) = std::fs::read_dir(format!("{home}/.pyenv/versions")) else {
            eprintln!("skipped: no pyenv Pythons");
            return;
        };
        for d in dirs.flatten() {
            let v = d.file_name().to_string_lossy().into_owned();
            let Some(minor) = v.strip_prefix("3.").and_then(|r| r.split('.').next()?.parse::<u8>().ok())
            else {
                continue;
            };
            if minor < 8 {
                continue;
            }
            let lib = d.path().join(format!("lib/libpython3.{minor}.so.1.0"));
            let exe = d.path().join(format!("bin/python3.{minor}"));
            let file = if lib.exists() { lib } else { exe };
            let bytes = std::fs::read(&file).unwrap();
            let i = Interpreter::find(&file.to_string_lossy(), &bytes).expect("an interpreter");
            assert_eq!(i.minor, minor, "{v}");
            assert!(!i.eval.is_empty(), "{v}: no {}", super::EVAL);
        }
    }
}
