//! The allocation functions `--alloc` probes: which they are, where each receives the requested size, and
//! how they nest (glibc's aligned allocators and realloc of a null pointer allocate through malloc). The
//! one place these rules live: bpf/calls.bpf.c receives them per probe in its `size_arg` map
//! ([`AllocSite`]), the converter the code ranges that allocate through malloc ([`Nesting`]).

use crate::calls::{PatternSpec, Probe};
use crate::target::Target;
use crate::RecordError;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use whyslow_convert::heap::HeapEntry;
use whyslow_convert::{Nesting, SizeArg};
use whyslow_symbols::placement::{Args, Needs, StackNeed};

/// An allocation function's part in nested allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocRole {
    Other,
    /// Allocates through malloc (for small alignments as a tail jump, so the malloc runs with the
    /// wrapper's caller's return address): that malloc is the wrapper's allocation, counted once.
    Wrapper,
    Malloc,
}

/// One allocation function: probed when `size` says where its size argument is.
struct Allocator {
    name: &'static str,
    size: Option<SizeArg>,
    role: AllocRole,
}

const fn allocator(name: &'static str, size: Option<SizeArg>, role: AllocRole) -> Allocator {
    Allocator { name, size, role }
}

/// C++ operator new (every variant) allocates through malloc, so its allocations are counted once, at
/// malloc, with operator new as the caller in the stack. The unprobed wrappers are glibc's other names
/// of the probed ones (and valloc/pvalloc): code inside them that calls malloc is not counted again.
const ALLOCATORS: [Allocator; 17] = {
    use AllocRole::{Malloc, Other, Wrapper};
    [
        allocator("malloc", Some(SizeArg::Arg(0)), Malloc),
        allocator("calloc", Some(SizeArg::Product), Other),
        allocator("realloc", Some(SizeArg::Arg(1)), Wrapper),
        allocator("posix_memalign", Some(SizeArg::Arg(2)), Wrapper),
        allocator("aligned_alloc", Some(SizeArg::Arg(1)), Wrapper),
        allocator("memalign", Some(SizeArg::Arg(1)), Wrapper),
        allocator("runtime.mallocgc", Some(SizeArg::GoFirst), Other),
        allocator("__posix_memalign", None, Wrapper),
        allocator("__libc_memalign", None, Wrapper),
        allocator("_mid_memalign", None, Wrapper),
        allocator("valloc", None, Wrapper),
        allocator("__libc_valloc", None, Wrapper),
        allocator("pvalloc", None, Wrapper),
        allocator("__libc_pvalloc", None, Wrapper),
        allocator("__libc_realloc", None, Wrapper),
        allocator("reallocarray", None, Wrapper),
        allocator("__libc_reallocarray", None, Wrapper),
    ]
};

fn find(name: &str) -> Option<&'static Allocator> {
    ALLOCATORS.iter().find(|a| a.name == name)
}

fn allocates_through_malloc(name: &str) -> bool {
    find(name).is_some_and(|a| a.role == AllocRole::Wrapper)
}

/// What bpf/calls.bpf.c needs per allocation probe: where the size is, the bytes pushed between the
/// function's entry and the probe's site (a probe moved past a push finds the return address that far
/// up the stack), and its role in nested allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocSite {
    pub size: SizeArg,
    pub stack_delta: u32,
    pub role: AllocRole,
}

/// The resolved allocation probes of a target.
#[derive(Debug, Clone, Default)]
pub struct Allocators {
    pub probes: Vec<(Probe, SizeArg)>,
    pub nesting: Nesting,
}

impl Allocators {
    /// Per probe, as `probes`: what the eBPF program needs to count it.
    pub fn sites(&self) -> Vec<AllocSite> {
        self.probes
            .iter()
            .map(|(p, size)| AllocSite {
                size: *size,
                stack_delta: p.site.stack_delta,
                role: find(&p.group).map_or(AllocRole::Other, |a| a.role),
            })
            .collect()
    }
}

/// What a probe reading this size argument and the return address needs kept intact at its site.
fn size_needs(size: SizeArg) -> Needs {
    let args = match size {
        SizeArg::Arg(0) => Args::RDI,
        SizeArg::Arg(1) => Args::RSI,
        SizeArg::Arg(_) => Args::RDX,
        SizeArg::Product => Args::RDI.with(Args::RSI),
        SizeArg::GoFirst => Args::RAX,
    };
    Needs { stack: StackNeed::Known, args, ..Needs::default() }
}

/// The allocation functions of the target, each with where its size argument is, and how they nest.
pub fn resolve(t: &Target, notes: &mut Vec<String>) -> Result<Allocators, RecordError> {
    let patterns: Vec<PatternSpec> = ALLOCATORS
        .iter()
        .filter(|a| a.size.is_some())
        .map(|a| PatternSpec { group: a.name.to_string(), pattern: a.name.to_string(), required: false })
        .collect();
    let size_of = |group: &str| find(group).and_then(|a| a.size);
    let modules = crate::calls::target_modules(t)?;
    let res = crate::calls::resolve(&modules, &patterns, |spec| {
        size_of(&spec.group).map_or_else(Needs::default, size_needs)
    })?;
    notes.extend(res.notes);
    // The loader's own minimal malloc is not the program's allocator.
    let mut probes: Vec<(Probe, SizeArg)> = res
        .probes
        .into_iter()
        .filter(|p| !p.module.to_string_lossy().contains("/ld-linux"))
        .filter_map(|p| {
            let size = size_of(&p.group)?;
            Some((p, size))
        })
        .collect();
    if probes.is_empty() {
        return Err(RecordError::NoAllocator);
    }
    // Aliases (glibc's memalign and aligned_alloc are one function) are named as the program calls them.
    let imported: HashSet<String> =
        modules.iter().flat_map(|m| whyslow_symbols::imports(m).unwrap_or_default()).collect();
    for (p, _) in &mut probes {
        if !imported.contains(&p.name) {
            if let Some(a) = p.aliases.iter_mut().find(|a| imported.contains(a.as_str())) {
                std::mem::swap(&mut p.name, a);
            }
        }
    }
    let mut within = Vec::new();
    let mut seen: Vec<&Path> = Vec::new();
    for (p, _) in &probes {
        if seen.contains(&p.module.as_path()) {
            continue;
        }
        seen.push(&p.module);
        let shown = crate::target::as_the_target_sees_it(&p.module);
        for f in whyslow_symbols::functions(&p.module).unwrap_or_default() {
            if allocates_through_malloc(&f.name) {
                within.push((shown.clone(), f.offset..f.offset + f.size));
            }
        }
    }
    Ok(Allocators { probes, nesting: Nesting { within } })
}

/// How a function changes the heap, for memory in use of a running process (bpf/mem.bpf.c's `enum
/// ws_mem_how`, in its order): where its size is, and what it frees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemHow {
    /// free(p), and every other name of it.
    Free,
    /// malloc(n): the address comes back in rax.
    SizeRdi,
    /// aligned_alloc(a, n), memalign(a, n).
    SizeRsi,
    /// calloc(n, m).
    Product,
    /// realloc(p, n): p is freed when an address comes back (or n is 0).
    Realloc,
    /// reallocarray(p, n, m).
    Reallocarray,
    /// posix_memalign(&p, a, n): the address goes to *rdi when it returns 0.
    PosixMemalign,
}

impl MemHow {
    /// What its probes read and keep intact at their site: the arguments, and for an allocation the return
    /// address on top of the stack (a return probe there takes the address it returns).
    fn needs(self) -> Needs {
        let args = match self {
            MemHow::Free | MemHow::SizeRdi => Args::RDI,
            MemHow::SizeRsi => Args::RSI,
            MemHow::Product | MemHow::Realloc => Args::RDI.with(Args::RSI),
            MemHow::Reallocarray => Args::RDI.with(Args::RSI).with(Args::RDX),
            MemHow::PosixMemalign => Args::RDI.with(Args::RDX),
        };
        let stack = if self == MemHow::Free { StackNeed::Any } else { StackNeed::Untouched };
        Needs { stack, args, per_call: true, at_entry: false }
    }
}

/// What the memory probes need per probed function: how it allocates, and the function its stacks end in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemSite {
    pub how: MemHow,
    pub entry: HeapEntry,
}

/// The allocator's C entry points, as glibc, jemalloc and tcmalloc export them. jemalloc built with a
/// prefix (as redis links it) names them `je_malloc`, ...; tcmalloc also exports `tc_malloc`, ....
const MEM_FUNCTIONS: [(&str, MemHow, HeapEntry); 11] = [
    ("malloc", MemHow::SizeRdi, HeapEntry::Malloc),
    ("calloc", MemHow::Product, HeapEntry::Calloc),
    ("realloc", MemHow::Realloc, HeapEntry::Realloc),
    ("reallocarray", MemHow::Reallocarray, HeapEntry::Reallocarray),
    ("posix_memalign", MemHow::PosixMemalign, HeapEntry::PosixMemalign),
    ("aligned_alloc", MemHow::SizeRsi, HeapEntry::AlignedAlloc),
    ("memalign", MemHow::SizeRsi, HeapEntry::Memalign),
    ("valloc", MemHow::SizeRdi, HeapEntry::Valloc),
    ("pvalloc", MemHow::SizeRdi, HeapEntry::Pvalloc),
    ("free", MemHow::Free, HeapEntry::Malloc),
    ("cfree", MemHow::Free, HeapEntry::Malloc),
];

/// jemalloc's own API (also with the `je_` prefix): mallocx, rallocx, dallocx, sdallocx; tcmalloc's C++
/// entry points.
const MEM_EXTRA: [(&str, MemHow, HeapEntry); 8] = [
    ("mallocx", MemHow::SizeRdi, HeapEntry::Malloc),
    ("rallocx", MemHow::Realloc, HeapEntry::Realloc),
    ("dallocx", MemHow::Free, HeapEntry::Malloc),
    ("sdallocx", MemHow::Free, HeapEntry::Malloc),
    ("tc_new", MemHow::SizeRdi, HeapEntry::Malloc),
    ("tc_newarray", MemHow::SizeRdi, HeapEntry::Malloc),
    ("tc_delete", MemHow::Free, HeapEntry::Malloc),
    ("tc_deletearray", MemHow::Free, HeapEntry::Malloc),
];

/// C++ operator new and delete (every form: sized, aligned, nothrow). libstdc++'s allocate through
/// malloc and are not probed (its probe counts them); an allocator that defines its own (tcmalloc,
/// jemalloc's C++ support) gets them probed in its module.
const MEM_CXX: [(&str, MemHow, HeapEntry); 2] = [
    ("operator new*", MemHow::SizeRdi, HeapEntry::Malloc),
    ("operator delete*", MemHow::Free, HeapEntry::Malloc),
];

/// Every (pattern, how, entry) the memory probes look for.
fn mem_patterns() -> Vec<(String, MemHow, HeapEntry)> {
    let mut out = Vec::new();
    for (prefix, list) in [("", &MEM_FUNCTIONS[..]), ("je_", &MEM_FUNCTIONS), ("tc_", &MEM_FUNCTIONS)] {
        out.extend(list.iter().map(|&(n, how, e)| (format!("{prefix}{n}"), how, e)));
    }
    out.extend(MEM_EXTRA.iter().map(|&(n, how, e)| (n.to_string(), how, e)));
    out.extend(MEM_EXTRA[..4].iter().map(|&(n, how, e)| (format!("je_{n}"), how, e)));
    out.extend(MEM_CXX.iter().map(|&(n, how, e)| (n.to_string(), how, e)));
    out
}

/// The allocation entry points an error names as missing (glibc's, jemalloc's, tcmalloc's).
const ALLOC_NAMES: &str = "malloc, calloc, realloc, je_malloc, mallocx, tc_malloc, ...";
const FREE_NAMES: &str = "free, je_free, dallocx, tc_free, ...";

/// Whether a file was built by Go (its build id note or build info section): its heap is the runtime's.
fn is_go(path: &Path) -> bool {
    use object::Object;
    let Ok(data) = std::fs::read(path) else { return false };
    let Ok(file) = object::File::parse(&*data) else { return false };
    [".go.buildinfo", ".note.go.buildid", ".gopclntab"].iter().any(|n| file.section_by_name(n).is_some())
}

/// The memory probes of a running process: per probe what it does.
#[derive(Debug, Clone, Default)]
pub struct MemProbes {
    pub probes: Vec<(Probe, MemSite)>,
    /// The module of the malloc that serves the program (a jemalloc or tcmalloc it links, else libc), as
    /// its mappings name it.
    pub allocator: String,
}

/// The allocation and free functions of the target's modules, each placed where its probes change
/// nothing it computes, for memory in use.
pub fn resolve_mem(t: &Target, notes: &mut Vec<String>) -> Result<MemProbes, RecordError> {
    let table = mem_patterns();
    let patterns: Vec<PatternSpec> = table
        .iter()
        .map(|(p, _, _)| PatternSpec { group: p.clone(), pattern: p.clone(), required: false })
        .collect();
    let site_of = |group: &str| {
        table.iter().find(|(p, _, _)| p == group).map(|&(_, how, entry)| MemSite { how, entry })
    };
    let modules = crate::calls::target_modules(t)?;
    let res = crate::calls::resolve(&modules, &patterns, |spec| {
        site_of(&spec.group).map_or_else(Needs::default, |s| s.how.needs())
    })?;
    notes.extend(res.notes);
    let is_libc = |m: &Path| m.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libc.so"));
    // A module with an allocator of its own: one whose malloc (under any prefix) is not glibc's.
    let own_allocator: Vec<PathBuf> = res
        .probes
        .iter()
        .filter(|p| ["malloc", "je_malloc", "tc_malloc", "mallocx", "je_mallocx"].contains(&p.group.as_str()))
        .filter(|p| !is_libc(&p.module) && !p.module.to_string_lossy().contains("/ld-linux"))
        .map(|p| p.module.clone())
        .collect();
    let probes: Vec<(Probe, MemSite)> = res
        .probes
        .into_iter()
        // The loader's own minimal malloc is not the program's allocator.
        .filter(|p| !p.module.to_string_lossy().contains("/ld-linux"))
        .filter(|p| !p.group.starts_with("operator ") || own_allocator.contains(&p.module))
        .filter_map(|p| {
            let site = site_of(&p.group)?;
            Some((p, site))
        })
        .collect();
    let go = modules.iter().find(|m| is_go(m)).map(|m| crate::target::as_the_target_sees_it(m));
    let frees: Vec<&str> =
        probes.iter().filter(|(_, s)| s.how == MemHow::Free).map(|(p, _)| p.name.as_str()).collect();
    let allocs: Vec<&str> =
        probes.iter().filter(|(_, s)| s.how != MemHow::Free).map(|(p, _)| p.name.as_str()).collect();
    if frees.is_empty() || allocs.is_empty() {
        if let Some(go) = go {
            return Err(RecordError::GoHeap(go));
        }
        let unnamed = modules.iter().all(|m| whyslow_symbols::functions(m).unwrap_or_default().is_empty());
        if unnamed {
            let files: Vec<String> =
                modules.iter().map(|m| crate::target::as_the_target_sees_it(m)).collect();
            return Err(RecordError::UnknownAllocator(format!(
                "{} {} no symbol table (stripped), so no symbol names its allocator",
                files.join(", "),
                if files.len() == 1 { "has" } else { "have" }
            )));
        }
        let found = |v: &[&str]| {
            let mut v: Vec<&str> = v.to_vec();
            v.sort_unstable();
            v.dedup();
            v.join(", ")
        };
        return Err(RecordError::UnknownAllocator(match (allocs.is_empty(), frees.is_empty()) {
            (true, true) => format!(
                "none of its files has an allocation function ({ALLOC_NAMES}) or a free ({FREE_NAMES})"
            ),
            (true, false) => format!("it has {} but no allocation function ({ALLOC_NAMES})", found(&frees)),
            _ => format!(
                "it has {} but no free ({FREE_NAMES}): what is freed cannot be paired",
                found(&allocs)
            ),
        }));
    }
    if let Some(go) = go {
        notes.push(format!(
            "memory: {go} is a Go program: only what its C code (cgo) allocates with malloc is counted; Go's own \
             heap (garbage-collected, runtime.mallocgc) is not malloc's and is not seen here: for it, give its \
             net/http/pprof address (whyslow record --mem http://HOST:PORT/debug/pprof)"
        ));
    }
    let allocator = own_allocator
        .first()
        .or_else(|| probes.iter().find(|(p, _)| p.group == "malloc").map(|(p, _)| &p.module))
        .map(|m| crate::target::as_the_target_sees_it(m))
        .unwrap_or_default();
    Ok(MemProbes { probes, allocator })
}

#[cfg(test)]
mod tests {
    use super::{allocates_through_malloc, find, size_needs, AllocRole, Args, HashSet, SizeArg, ALLOCATORS};

    #[test]
    fn every_allocator_is_listed_once_and_only_malloc_is_malloc() {
        let names: HashSet<&str> = ALLOCATORS.iter().map(|a| a.name).collect();
        assert_eq!(names.len(), ALLOCATORS.len());
        let mallocs: Vec<&str> =
            ALLOCATORS.iter().filter(|a| a.role == AllocRole::Malloc).map(|a| a.name).collect();
        assert_eq!(mallocs, ["malloc"]);
    }

    #[test]
    fn the_aligned_allocators_and_realloc_allocate_through_malloc_and_calloc_does_not() {
        for name in ["posix_memalign", "aligned_alloc", "memalign", "__libc_memalign", "realloc", "valloc"] {
            assert!(allocates_through_malloc(name), "{name}");
        }
        for name in ["malloc", "calloc", "runtime.mallocgc", "free", "operator new"] {
            assert!(!allocates_through_malloc(name), "{name}");
        }
    }

    #[test]
    fn each_probed_allocator_reads_its_size_where_its_abi_puts_it() {
        let probed: Vec<(&str, SizeArg)> =
            ALLOCATORS.iter().filter_map(|a| Some((a.name, a.size?))).collect();
        assert_eq!(probed.len(), 7);
        assert_eq!(size_needs(find("calloc").unwrap().size.unwrap()).args, Args::RDI.with(Args::RSI));
        assert_eq!(size_needs(find("posix_memalign").unwrap().size.unwrap()).args, Args::RDX);
        assert_eq!(size_needs(find("runtime.mallocgc").unwrap().size.unwrap()).args, Args::RAX);
    }
}
