//! The allocation functions `--alloc` probes: which they are, where each receives the requested size, and
//! how they nest (glibc's aligned allocators and realloc of a null pointer allocate through malloc). The
//! one place these rules live: bpf/calls.bpf.c receives them per probe in its `size_arg` map
//! ([`AllocSite`]), the converter the code ranges that allocate through malloc ([`Nesting`]).

use crate::calls::{PatternSpec, Probe};
use crate::target::Target;
use crate::RecordError;
use std::collections::HashSet;
use std::path::Path;
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
