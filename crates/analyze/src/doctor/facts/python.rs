//! CPython programs: where their CPU goes below the Python functions they run. Each CPU sample with a
//! Python frame is split by what runs below its innermost one: the interpreter executing that
//! function's bytecode (with its own helpers: number and object protocols, its allocator), a C
//! function the interpreter called (a builtin like `sum`, or a C extension module's, and the libraries
//! under it), or other native code (libc, the kernel). Never decides what is worth a finding: the
//! rules do.

use super::{is_python_interpreter, pct, Facts, Func};
use std::collections::HashMap;

impl Func<'_> {
    /// A Python function's frame: its module is its source file (`app.py`, `<frozen importlib._bootstrap>`,
    /// `<string>`), as the converter names the frames the interpreter runs.
    pub fn is_python(&self) -> bool {
        !self.kernel
            && (self.module.ends_with(".py") || (self.module.starts_with('<') && self.module.ends_with('>')))
    }

    /// The interpreter's own C code (libpython3.X, a python3.X binary).
    pub fn is_python_runtime(&self) -> bool {
        !self.kernel && is_python_interpreter(self.module)
    }

    /// The dynamic loader's code (`__tls_get_addr`, lazy binding): part of the cost of the code that
    /// calls it (a shared libpython finds its thread state through `__tls_get_addr`, 6% of a pure-Python
    /// loop's CPU on 3.13), not a library doing work of its own.
    fn is_loader(&self) -> bool {
        !self.kernel && module_file(self.module).starts_with("ld-linux")
    }

    /// Where the interpreter calls a C function on behalf of Python code (a builtin, a method of a
    /// built-in type, an extension module's function): its dispatch frames (`cfunction_vectorcall_*`,
    /// `method_vectorcall_*`, 3.8's `_PyMethodDef_RawFastCall*`) or, for the calls 3.11+ specialize
    /// into a direct call, the builtin itself (`builtin_sum`).
    fn is_c_call(&self) -> bool {
        const PREFIXES: [&str; 9] = [
            "builtin_",
            "cfunction_",
            "method_vectorcall",
            "methoddescr_call",
            "wrapperdescr_call",
            "wrapper_call",
            "_PyMethodDef_RawFastCall",
            "_PyCFunction_FastCall",
            "PyCFunction_Call",
        ];
        PREFIXES.iter().any(|p| self.name.starts_with(p))
    }

    /// Native code of a library that is neither the interpreter nor the C runtime: a C extension module
    /// (`zlib.cpython-312-x86_64-linux-gnu.so`, numpy's `_multiarray_umath`) or a library it uses
    /// (`libz.so.1`, `libopenblas`).
    fn is_extension(&self) -> bool {
        const C_RUNTIME: [&str; 9] =
            ["libc.so", "libc-", "libm.so", "libm-", "ld-linux", "libpthread", "libdl", "librt", "libutil"];
        let file = module_file(self.module);
        !self.kernel
            && !self.module.is_empty()
            && !self.module.starts_with('[')
            && !self.is_python()
            && !self.is_python_runtime()
            && !C_RUNTIME.iter().any(|c| file.starts_with(c))
    }
}

/// Time by (function id, line).
type ByLine = HashMap<(usize, u32), i64>;

/// The file name of a module path.
pub fn module_file(module: &str) -> &str {
    module.rsplit('/').next().unwrap_or(module)
}

/// The CPU of a CPython program, split by what runs below its innermost Python frames; time values
/// as the profile's CPU values, lists largest first.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PythonCpu {
    /// CPU of the samples with a Python frame.
    pub python: i64,
    /// The interpreter running Python code: the innermost Python frame's own time, with the
    /// interpreter's helpers (and the dynamic loader's TLS lookup) below it but no C function call.
    pub interpreted: i64,
    /// `interpreted` by Python function, each named with its hottest line: `spin (hotloop.py:12)`.
    pub interpreted_by: Vec<(String, i64)>,
    /// Native code of extension modules and the libraries under them, called from Python.
    pub extension: i64,
    /// The first extension frame below the Python caller, with its module: `zlib_compress
    /// (zlib.cpython-312-x86_64-linux-gnu.so)`.
    pub extension_entries: Vec<(String, i64)>,
    /// The module each of those samples was in (its leaf's; `kernel` for the kernel's work).
    pub extension_modules: Vec<(String, i64)>,
    /// The Python function (with its line) that called the extension.
    pub extension_callers: Vec<(String, i64)>,
}

impl PythonCpu {
    pub fn interpreted_pct(&self, f: &Facts) -> f64 {
        pct(self.interpreted, f.cpu_total)
    }

    pub fn extension_pct(&self, f: &Facts) -> f64 {
        pct(self.extension, f.cpu_total)
    }
}

impl Facts<'_> {
    /// The CPU of the samples with Python frames, split as [`PythonCpu`] says (outside our probes).
    /// Extension time through a function `except` matches is left out (another rule's: the allocator,
    /// memcpy).
    pub fn python_cpu(&self, except: &dyn Fn(&Func) -> bool) -> PythonCpu {
        let mut out = PythonCpu::default();
        let (mut is_python, mut skip) = (self.memo(&|x: &Func| x.is_python()), self.memo(except));
        let mut runtime = self.memo(&|x: &Func| x.is_python_runtime() || x.is_loader());
        let mut c_call = self.memo(&|x: &Func| x.is_c_call());
        let mut extension = self.memo(&|x: &Func| x.is_extension());
        // By (function, line) of the innermost Python frame.
        let (mut interpreted, mut callers) = (ByLine::new(), ByLine::new());
        let (mut entries, mut modules): (HashMap<usize, i64>, HashMap<String, i64>) = Default::default();
        for v in self.views.iter().filter(|v| !v.instrumentation && v.cpu != 0) {
            let Some(i) = v.funcs.iter().rposition(|&f| is_python(f)) else { continue };
            out.python += v.cpu;
            let below = &v.funcs[i + 1..];
            let line = || self.p.stack_lines(v.stack).get(i).map_or(0, |&(_, line)| line);
            if below.iter().all(|&f| runtime(f) && !c_call(f)) {
                out.interpreted += v.cpu;
                *interpreted.entry((v.funcs[i], line())).or_default() += v.cpu;
                continue;
            }
            let Some(&entry) = below.iter().find(|&&f| extension(f)) else { continue };
            if below.iter().any(|&f| skip(f)) {
                continue;
            }
            out.extension += v.cpu;
            *entries.entry(entry).or_default() += v.cpu;
            *callers.entry((v.funcs[i], line())).or_default() += v.cpu;
            let leaf = *below.last().expect("an entry below");
            let module = if self.kernel[leaf] { "kernel" } else { module_file(self.modules[leaf]) };
            *modules.entry(module.to_string()).or_default() += v.cpu;
        }
        out.interpreted_by = self.python_functions(interpreted);
        out.extension_callers = self.python_functions(callers);
        let entries = entries
            .into_iter()
            .map(|(f, x)| (format!("{} ({})", self.names[f], module_file(self.modules[f])), x));
        out.extension_entries = sorted(entries.collect());
        out.extension_modules = sorted(modules.into_iter().collect());
        out
    }

    /// Python functions' time by (function, line), by function, each named with its file and the line
    /// that took most of it.
    fn python_functions(&self, by_line: ByLine) -> Vec<(String, i64)> {
        let mut by: HashMap<usize, (i64, u32, i64)> = HashMap::new();
        for ((f, line), x) in by_line {
            let e = by.entry(f).or_default();
            e.0 += x;
            if x > e.2 || (x == e.2 && line < e.1) {
                (e.1, e.2) = (line, x);
            }
        }
        let rows = by.into_iter().map(|(f, (x, line, _))| {
            let file = module_file(self.modules[f]);
            let at = if line == 0 { file.to_string() } else { format!("{file}:{line}") };
            (format!("{} ({at})", self.names[f]), x)
        });
        sorted(rows.collect())
    }

    /// The CPython version of the interpreter the profile's frames run in (`libpython3.8.so.1.0`,
    /// `python3.13t`), as (3, minor); None when no frame is the interpreter's or its name has none.
    pub fn python_version(&self) -> Option<(u32, u32)> {
        self.modules.iter().filter(|m| is_python_interpreter(m)).find_map(|m| {
            let file = module_file(m);
            let v = file.strip_prefix("libpython").or_else(|| file.strip_prefix("python"))?;
            let (major, rest) = v.split_once('.')?;
            let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
            Some((major.parse().ok()?, minor.parse().ok()?))
        })
    }
}

fn sorted(mut v: Vec<(String, i64)>) -> Vec<(String, i64)> {
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}
