//! Kernel addresses to names: which kallsyms table answers for an address, and how long a table read once
//! stays good. The kernel image's own symbols do not change while it runs; modules and BPF programs come
//! and go, so their addresses are looked up in /proc/kallsyms as it is now. Reading /proc/kallsyms costs
//! ~65 ms of CPU (the kernel formats every symbol): a service symbolizing a window every few seconds
//! reads it again when a module was loaded or unloaded since, and at most once a minute when only BPF
//! programs changed (they come and go with every process a service starts following: reading the table
//! at each of its windows was a fifth of its CPU). Until then a new program's address is named after the
//! program before it, still a BPF program (which is all the probe accounting asks of its name).

use crate::kallsyms::Kallsyms;
use std::sync::Arc;
use std::time::{Duration, Instant};
use whyslow_model::raw::RawKernel;

/// Where the symbolizer finds the kernel's tables.
pub(crate) trait KernelTables {
    /// The table for the recorded kernel, and whether it answers for the image's own text only (perf's
    /// copy of the recorded kernel's table, this boot's copy of the image symbols, or a table read
    /// before): addresses outside it are looked up in [`KernelTables::loaded`].
    fn image(&mut self, recorded: Option<&RawKernel>) -> (Arc<Kallsyms>, bool);
    /// /proc/kallsyms as it is now.
    fn loaded(&mut self) -> Arc<Kallsyms>;
}

/// The kernel symbols of the kernel with this build id: perf's copy of its table where perf kept one,
/// else (and for no build id, "") the running kernel's (true: the image only, see
/// [`Kallsyms::load_running`]).
pub(crate) fn kernel_table(build_id: &str) -> (Kallsyms, bool) {
    match Kallsyms::from_perf_cache(build_id) {
        Some(k) => (k, true),
        None => Kallsyms::load_running(),
    }
}

/// Tables for one symbolization: each read when first needed (or taken from a read started ahead).
pub(crate) struct Once {
    pub ahead: Option<(String, std::thread::JoinHandle<(Kallsyms, bool)>)>,
}

impl KernelTables for Once {
    fn image(&mut self, recorded: Option<&RawKernel>) -> (Arc<Kallsyms>, bool) {
        let (table, image_only) = match self.ahead.take() {
            Some((id, load)) => load.join().unwrap_or_else(|_| kernel_table(&id)),
            None => kernel_table(recorded.map_or("", |k| &k.build_id)),
        };
        (Arc::new(table), image_only)
    }

    fn loaded(&mut self) -> Arc<Kallsyms> {
        Arc::new(Kallsyms::load())
    }
}

/// How long a [`Kept`] /proc/kallsyms stays good without the privilege to list BPF programs, or once the
/// BPF programs changed; and at most while the modules and BPF programs stay the same (a BPF trampoline
/// comes and goes with an attachment, not a program).
const LOADED_REFRESH: Duration = Duration::from_secs(60);
const LOADED_REFRESH_UNCHANGED: Duration = Duration::from_secs(600);

/// Tables kept from one symbolization to the next, for a service (see the module's documentation). The
/// running kernel's addresses are named from one table, /proc/kallsyms, read again when the code loaded
/// into the kernel changed (a copy of the image's symbols beside it would hold the same 7 MB twice).
#[derive(Default)]
pub(crate) struct Kept {
    /// perf's copy of a recorded kernel's table, by its build id.
    perf: Option<(String, Arc<Kallsyms>)>,
    /// /proc/kallsyms, when it was read and what was loaded then.
    loaded: Option<(Instant, Loaded, Arc<Kallsyms>)>,
}

impl KernelTables for Kept {
    fn image(&mut self, recorded: Option<&RawKernel>) -> (Arc<Kallsyms>, bool) {
        let id = recorded.map_or("", |k| k.build_id.as_str());
        // (Only a build id perf has a copy for is kept: never "".)
        if let Some((_, table)) = self.perf.as_ref().filter(|(kept, _)| kept == id) {
            return (table.clone(), true);
        }
        if let Some(table) = Kallsyms::from_perf_cache(id) {
            let table = Arc::new(table);
            self.perf = Some((id.to_string(), table.clone()));
            return (table, true);
        }
        (self.loaded(), false)
    }

    fn loaded(&mut self) -> Arc<Kallsyms> {
        let now = loaded_code();
        if let Some((at, then, table)) = &self.loaded {
            let limit = match now.programs {
                Some(_) if now == *then => LOADED_REFRESH_UNCHANGED,
                _ => LOADED_REFRESH,
            };
            if now.modules == then.modules && at.elapsed() < limit {
                return table.clone();
            }
        }
        let table = Arc::new(Kallsyms::load());
        self.loaded = Some((Instant::now(), now, table.clone()));
        table
    }
}

/// What code is loaded into the kernel beside its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loaded {
    /// A hash of the modules (name and address).
    modules: u64,
    /// A hash of the BPF programs' ids (ids are never reused while the kernel runs); None when they cannot
    /// be listed (that needs CAP_SYS_ADMIN).
    programs: Option<u64>,
}

fn loaded_code() -> Loaded {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for line in std::fs::read_to_string("/proc/modules").unwrap_or_default().lines() {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        (f.first(), f.get(5)).hash(&mut h);
    }
    Loaded { modules: h.finish(), programs: bpf_programs() }
}

fn bpf_programs() -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut id = 0u32;
    loop {
        // union bpf_attr for BPF_PROG_GET_NEXT_ID: start_id, next_id, open_flags.
        let mut attr = [id, 0u32, 0u32];
        // SAFETY: attr is a valid bpf_attr prefix of the size passed; the kernel writes next_id in it.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_GET_NEXT_ID,
                attr.as_mut_ptr(),
                std::mem::size_of_val(&attr),
            )
        };
        if r != 0 {
            return (std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT))
                .then(|| h.finish());
        }
        id = attr[1];
        id.hash(&mut h);
    }
}

const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;

/// A kallsyms table and how far the recorded kernel's addresses lie from it (KASLR moves the kernel at
/// every boot): perf records where its reference symbol (`_text`) was.
struct Shifted {
    table: Arc<Kallsyms>,
    shift: u64,
}

impl Shifted {
    fn new(table: Arc<Kallsyms>, reloc: Option<&(String, u64)>) -> Shifted {
        let at = reloc.and_then(|(symbol, addr)| Some((*addr, table.address_of(symbol)?)));
        Shifted { shift: at.map_or(0, |(recorded, here)| recorded.wrapping_sub(here)), table }
    }

    fn lookup(&self, addr: u64) -> Option<&str> {
        self.table.lookup(addr.wrapping_sub(self.shift))
    }
}

/// Names kernel addresses: from the recorded kernel's table for the kernel image's own text, from
/// /proc/kallsyms otherwise when that table answers for the image only.
pub(crate) struct KernelSymbols<'t> {
    first: Shifted,
    image_only: bool,
    proc: Option<Shifted>,
    reloc: Option<(String, u64)>,
    tables: &'t mut dyn KernelTables,
}

impl<'t> KernelSymbols<'t> {
    pub fn new(tables: &'t mut dyn KernelTables, recorded: Option<&RawKernel>) -> KernelSymbols<'t> {
        let (table, image_only) = tables.image(recorded);
        let reloc = recorded.and_then(|k| k.reloc.clone());
        KernelSymbols { first: Shifted::new(table, reloc.as_ref()), image_only, proc: None, reloc, tables }
    }

    pub fn lookup(&mut self, addr: u64) -> Option<&str> {
        let core = self.first.table.in_core_text(addr.wrapping_sub(self.first.shift));
        if !self.image_only || core {
            return self.first.lookup(addr);
        }
        let (reloc, tables) = (self.reloc.as_ref(), &mut self.tables);
        self.proc.get_or_insert_with(|| Shifted::new(tables.loaded(), reloc)).lookup(addr)
    }

    pub fn is_empty(&self) -> bool {
        self.first.table.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::{loaded_code, Kept, KernelSymbols, KernelTables, LOADED_REFRESH};
    use crate::kallsyms::Kallsyms;
    use std::sync::Arc;
    use whyslow_model::raw::RawKernel;

    fn table() -> Kallsyms {
        Kallsyms::parse(
            "ffff0000 T _text\nffff0000 T _stext\nffff0010 T do_sys_open\nffff0040 T _etext\n\
             ffff9000 t mod_fn\t[some_mod]\n"
                .into(),
        )
    }

    /// Tables given, counting how often /proc/kallsyms would be read.
    struct Given {
        image: (Arc<Kallsyms>, bool),
        loaded: usize,
    }

    impl KernelTables for Given {
        fn image(&mut self, _: Option<&RawKernel>) -> (Arc<Kallsyms>, bool) {
            self.image.clone()
        }
        fn loaded(&mut self) -> Arc<Kallsyms> {
            self.loaded += 1;
            Arc::new(Kallsyms::parse("ffff9000 t other_fn\t[other_mod]\n".into()))
        }
    }

    fn given(image_only: bool) -> Given {
        Given { image: (Arc::new(table()), image_only), loaded: 0 }
    }

    fn recorded(reloc: Option<u64>) -> RawKernel {
        RawKernel { reloc: reloc.map(|a| ("_text".to_string(), a)), ..Default::default() }
    }

    #[test]
    fn recorded_kernel_addresses_are_moved_to_the_table() {
        // The recording's kernel lay 0x1000 higher (another boot, KASLR).
        let mut t = given(false);
        let moved = recorded(Some(0xffff1000));
        let mut k = KernelSymbols::new(&mut t, Some(&moved));
        assert_eq!(k.lookup(0xffff1015), Some("do_sys_open"));
        // Without a recorded position the addresses are taken as they are.
        let mut k = KernelSymbols::new(&mut t, None);
        assert_eq!(k.lookup(0xffff0015), Some("do_sys_open"));
        assert_eq!(k.lookup(0xfffe0000), None);
        assert_eq!(t.loaded, 0, "a whole table answers for every address");
    }

    #[test]
    fn an_image_table_sends_other_addresses_to_proc_once() {
        let mut t = given(true);
        let at = recorded(Some(0xffff0000));
        let mut k = KernelSymbols::new(&mut t, Some(&at));
        assert!(!k.is_empty());
        assert_eq!(k.lookup(0xffff0015), Some("do_sys_open"));
        // A module address is looked up in /proc/kallsyms as it is now, not in the image's table.
        assert_eq!(k.lookup(0xffff9004), Some("other_fn"));
        assert_eq!(k.lookup(0xffff9008), Some("other_fn"));
        assert_eq!(t.loaded, 1);
    }

    /// A kept /proc/kallsyms is read again at once when the modules changed, and when only BPF programs
    /// did, once it is a minute old: as root here, BPF programs can be listed.
    #[test]
    fn kept_tables_are_read_again_when_loaded_code_changes() {
        let before = loaded_code();
        assert!(before.programs.is_some(), "BPF programs are listed (the suite runs as root)");
        let mut kept = Kept::default();
        let first = kept.loaded();
        assert!(Arc::ptr_eq(&first, &kept.loaded()), "kept while nothing changed");
        // The running kernel's addresses are all named from that one table.
        let (image, image_only) = kept.image(None);
        assert!(!image_only && Arc::ptr_eq(&image, &first));
        // As if a program had come since: kept while the table is younger than a minute...
        if let Some((_, then, _)) = &mut kept.loaded {
            then.programs = then.programs.map(|h| h ^ 1);
        }
        assert!(Arc::ptr_eq(&first, &kept.loaded()));
        // ...and read again once it is older.
        if let Some((at, _, _)) = &mut kept.loaded {
            *at -= LOADED_REFRESH;
        }
        let second = kept.loaded();
        assert!(!Arc::ptr_eq(&first, &second));
        // As if a module had come since: read again at once.
        if let Some((_, then, _)) = &mut kept.loaded {
            then.modules ^= 1;
        }
        assert!(!Arc::ptr_eq(&second, &kept.loaded()));
    }
}
