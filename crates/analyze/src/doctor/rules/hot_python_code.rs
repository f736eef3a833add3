//! hot-python-code: a CPython program spends most of its CPU in the interpreter running its Python
//! code (bytecode and the interpreter's own helpers below it), not in the builtins, C extensions, libc
//! or kernel it calls: the hottest Python functions are where a fix goes (see facts/python.rs for the
//! split; C extension time is python-c-extension's).

use super::{finding, Text};
use crate::doctor::facts::{pct, Facts, Match};
use crate::doctor::thresholds::{EVIDENCE_ROWS, HOT_PYTHON_CPU_PCT};
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "hot-python-code",
    title: "the interpreter running Python code takes most of the CPU",
    why: "CPython executes Python code one bytecode at a time: every `x += i` checks its operands' types, \
          allocates a new int object and frees the old one, then dispatches the next instruction, tens of \
          nanoseconds for what native code does in one; a loop over many items in Python code pays that \
          for every item",
    fix: "first the algorithm (fewer passes, a dict or set instead of a scan, results cached); then let C \
          loops do the per-item work: builtins (sum, min, max, sorted, any, str.join), comprehensions \
          instead of append loops, itertools and collections; vectorize with numpy over arrays; move the \
          hot loop to native code (Cython, a C extension, Rust via PyO3); or run it under PyPy, whose JIT \
          compiles such loops",
    shrinks: "the Python functions named",
};

/// "`a` 12.3%, `b` 4.5%" for the first rows of a ranked list of Python functions (their names carry
/// their file and line in parentheses already), shares of `total`.
pub fn rows(rows: &[(String, i64)], total: i64) -> String {
    let shown = rows.iter().take(EVIDENCE_ROWS).map(|(n, v)| format!("{n} {:.1}%", pct(*v, total)));
    shown.collect::<Vec<_>>().join(", ")
}

pub fn check(f: &Facts) -> Verdict {
    if !f.has_cpu() {
        return Verdict::NeedsData("CPU samples");
    }
    let py = f.python_cpu(&|_| false);
    let share = py.interpreted_pct(f);
    if py.interpreted == 0 || f.cpu_pct_surely(share) < HOT_PYTHON_CPU_PCT {
        return Verdict::Clear;
    }
    let mut evidence = vec![format!(
        "{share:.1}% of CPU time is the interpreter running Python code (bytecode, no builtin or extension \
         call), by function: {}",
        rows(&py.interpreted_by, f.cpu_total)
    )];
    let called = py.python - py.interpreted;
    evidence.push(format!(
        "{:.1}% is in the native code it calls (builtins, C extensions, libc, the kernel)",
        pct(called, f.cpu_total)
    ));
    let version = f.python_version();
    if let Some((major, minor)) = version {
        evidence.push(format!("the interpreter is CPython {major}.{minor}"));
    }
    let m = Match { value: py.interpreted, pct: share, ..Default::default() };
    let mut x = finding(f, &TEXT, &m, "cpu", Confidence::High, evidence);
    if let Some((3, minor @ ..=10)) = version {
        x.fix.push_str(&format!(
            "; this program runs on CPython 3.{minor}: 3.11 and later run Python code faster (the \
             specializing interpreter: 1.25x on average over the pyperformance suite, more on loops like \
             these)"
        ));
    }
    Verdict::Found(x)
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;
    use crate::doctor::{Facts, Verdict};

    const PY38: &str = "/opt/py/lib/libpython3.8.so.1.0";

    fn stack(tail: &str) -> String {
        format!("so:{PY38}:Py_RunMain;py:<module>:/srv/hot.py:30;py:main:/srv/hot.py:25;{tail}")
    }

    #[test]
    fn names_the_hottest_python_functions_by_their_own_time_and_line() {
        let spin = |line: u32, helper: &str| stack(&format!("py:spin:/srv/hot.py:{line}{helper}"));
        let p = profile(&[
            (&spin(12, ""), 40, 0),
            (&spin(12, &format!(";so:{PY38}:PyNumber_InPlaceAdd;so:{PY38}:long_add")), 20, 0),
            (&spin(13, &format!(";so:{PY38}:PyLong_FromLong")), 5, 0),
            (&spin(13, &format!(";so:{PY38}:get_state;so:/lib64/ld-linux-x86-64.so.2:__tls_get_addr")), 5, 0),
            (&stack("py:warm:/srv/hot.py:20"), 15, 0),
            // A builtin's C loop, a C library call, the kernel: not the interpreter running Python code.
            (
                &stack(&format!("py:fixed:/srv/hot.py:8;so:{PY38}:builtin_sum;so:{PY38}:PyLong_FromLong")),
                5,
                0,
            ),
            (&stack("py:spin:/srv/hot.py:12;lib:memcpy"), 5, 0),
            (&stack("py:spin:/srv/hot.py:12;k:asm_exc_page_fault"), 5, 0),
        ]);
        assert_eq!(fired(super::check, &p), Some(85.0));
        let Verdict::Found(x) = super::check(&Facts::new(&p)) else { panic!("fired") };
        assert!(
            x.evidence[0].ends_with("by function: spin (hot.py:12) 70.0%, warm (hot.py:20) 15.0%"),
            "{x:?}"
        );
        assert_eq!(
            x.evidence[1],
            "15.0% is in the native code it calls (builtins, C extensions, libc, the kernel)"
        );
        assert_eq!(x.evidence[2], "the interpreter is CPython 3.8");
        assert!(x.fix.contains("runs on CPython 3.8: 3.11 and later"), "{}", x.fix);
    }

    #[test]
    fn builtins_and_extensions_doing_the_work_are_not_hot_python_code() {
        let py313 = "/opt/py/bin/python3.13";
        let p = profile(&[
            (&format!("so:{py313}:main;py:spin:/srv/hot.py:8;so:{py313}:builtin_sum;so:{py313}:rangeiter_next"), 60, 0),
            (&format!("so:{py313}:main;py:spin:/srv/hot.py:8;so:{py313}:cfunction_vectorcall_O;so:/z.so:zlib_compress"), 30, 0),
            (&format!("so:{py313}:main;py:spin:/srv/hot.py:8"), 10, 0),
        ]);
        assert_eq!(fired(super::check, &p), None);
        // On 3.11+, no advice to upgrade.
        let p = profile(&[(&format!("so:{py313}:main;py:spin:/srv/hot.py:8"), 10, 0)]);
        let Verdict::Found(x) = super::check(&Facts::new(&p)) else { panic!("fired") };
        assert!(!x.fix.contains("3.11 and later"), "{}", x.fix);
        assert_eq!(x.evidence[2], "the interpreter is CPython 3.13");
        // A program without Python frames.
        assert_eq!(fired(super::check, &profile(&[("main;work", 100, 0)])), None);
    }
}
