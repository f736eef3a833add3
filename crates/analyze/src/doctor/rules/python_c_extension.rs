//! python-c-extension: a CPython program spends a large share of its CPU in native code of C extension
//! modules it calls (and the libraries under them: zlib's module and libz, numpy's
//! `_multiarray_umath`), not in the interpreter or its builtins. Disjoint from hot-python-code (time
//! below a Python frame is one or the other); time in the allocator or memcpy under the extension is left
//! to alloc-churn and excess-copying, so that no CPU is counted by two rules.

use super::alloc_churn::is_allocator;
use super::excess_copying::is_copy;
use super::hot_python_code::rows;
use super::{finding, Text};
use crate::doctor::facts::{Facts, Func, Match};
use crate::doctor::thresholds::PYTHON_EXTENSION_CPU_PCT;
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "python-c-extension",
    title: "C extension code called from Python takes the CPU",
    why: "the time is already in native code: the extension's own work (compressing, parsing, numeric \
          kernels) for each call, or its fixed cost per call (converting the arguments, setting up, \
          allocating the result) when it is called many times with little work each; rewriting the Python \
          around the call changes little",
    fix: "call it less: batch items into one call, pass bigger chunks (whole arrays or buffers) rather than \
          one item per call, keep results that repeat; ask for less work or use a faster library for the \
          job (a lower compression level, zlib-ng/lz4/zstd, orjson over json, numpy's in-place `out=`); \
          for more cores, run the calls in threads where the extension releases the GIL (zlib, numpy, \
          hashlib do on large inputs), in processes otherwise (multiprocessing, ProcessPoolExecutor)",
    shrinks: "the extension's functions and the libraries under them",
};

pub fn check(f: &Facts) -> Verdict {
    if !f.has_cpu() {
        return Verdict::NeedsData("CPU samples");
    }
    let py = f.python_cpu(&|x: &Func| is_allocator(x) || is_copy(x));
    let share = py.extension_pct(f);
    if py.extension == 0 || f.cpu_pct_surely(share) < PYTHON_EXTENSION_CPU_PCT {
        return Verdict::Clear;
    }
    let evidence = vec![
        format!(
            "{share:.1}% of CPU time is in C extension code called from Python: {}",
            rows(&py.extension_entries, f.cpu_total)
        ),
        format!("by native module: {}", rows(&py.extension_modules, f.cpu_total)),
        format!("called from: {}", rows(&py.extension_callers, f.cpu_total)),
    ];
    let m = Match { value: py.extension, pct: share, ..Default::default() };
    Verdict::Found(finding(f, &TEXT, &m, "cpu", Confidence::High, evidence))
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;
    use crate::doctor::{Facts, Verdict};

    const PY: &str = "/opt/py/bin/python3.12";
    const ZLIB: &str = "/opt/py/lib/python3.12/lib-dynload/zlib.cpython-312-x86_64-linux-gnu.so";

    fn squeeze(tail: &str) -> String {
        format!("so:{PY}:main;py:<module>:/srv/cext.py:22;py:squeeze:/srv/cext.py:16;so:{ZLIB}:zlib_compress;{tail}")
    }

    #[test]
    fn names_the_extension_its_libraries_and_the_python_caller() {
        let p = profile(&[
            (&squeeze("so:/usr/lib/x86_64-linux-gnu/libz.so.1:deflate"), 60, 0),
            (&squeeze("so:/usr/lib/x86_64-linux-gnu/libz.so.1:deflate;k:asm_exc_page_fault"), 5, 0),
            (&squeeze("zlib_compress_impl"), 5, 0),
            // The allocator and memcpy under it are alloc-churn's and excess-copying's.
            (&squeeze("lib:malloc"), 10, 0),
            (&squeeze("so:/usr/lib/x86_64-linux-gnu/libz.so.1:deflate;lib:memcpy"), 5, 0),
            (&format!("so:{PY}:main;py:<module>:/srv/cext.py:22;py:squeeze:/srv/cext.py:15"), 15, 0),
        ]);
        assert_eq!(fired(super::check, &p), Some(70.0));
        let Verdict::Found(x) = super::check(&Facts::new(&p)) else { panic!("fired") };
        assert_eq!(
            x.evidence,
            [
                "70.0% of CPU time is in C extension code called from Python: zlib_compress \
                 (zlib.cpython-312-x86_64-linux-gnu.so) 70.0%",
                "by native module: libz.so.1 60.0%, app 5.0%, kernel 5.0%",
                "called from: squeeze (cext.py:16) 70.0%",
            ]
        );
        // Builtins of the interpreter (its own C code) are no extension; libc alone neither.
        let p = profile(&[
            (&format!("so:{PY}:main;py:f:/srv/a.py:3;so:{PY}:builtin_sorted"), 50, 0),
            (&format!("so:{PY}:main;py:f:/srv/a.py:3;lib:strlen"), 30, 0),
            (&squeeze("so:/usr/lib/x86_64-linux-gnu/libz.so.1:deflate"), 20, 0),
        ]);
        assert_eq!(fired(super::check, &p), None);
    }
}
