//! Kernel addresses to names: which kallsyms table answers for an address, and how long a table read once
//! stays good. The kernel image's own symbols do not change while it runs; modules and BPF programs come
//! and go, so their addresses are looked up in /proc/kallsyms as it is now. Reading /proc/kallsyms costs
//! ~65 ms of CPU (the kernel formats every symbol): a service symbolizing a window every few seconds
//! reads it again when a module was loaded or unloaded since. BPF programs come and go with every process
//! a service starts following (reading the table again at each window for them was up to a fifth of its CPU): their
//! code is named from what the kernel says of each new program (see [`crate::bpf_programs`]).
use crate::bpf_programs::Programs;
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
    /// The BPF program of the running kernel whose code holds `addr`, where known apart from the tables.
    fn program(&self, _addr: u64) -> Option<&str> {
        None
    }
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

/// How long a [`Kept`] /proc/kallsyms stays good while the modules stay the same: a minute without the
/// privilege to list BPF programs (their code is then named from the table), ten with it (a BPF trampoline
/// comes and goes with an attachment, not a program, and is named from the table).
const LOADED_REFRESH: Duration = Duration::from_secs(60);
const LOADED_REFRESH_LISTED: Duration = Duration::from_secs(600);

/// Tables kept from one symbolization to the next, for a service (see the module's documentation). The
/// running kernel's addresses are named from one table, /proc/kallsyms, read again when the code loaded
/// into the kernel changed (a copy of the image's symbols beside it would hold the same 7 MB twice).
#[derive(Default)]
pub(crate) struct Kept {
    /// perf's copy of a recorded kernel's table, by its build id.
    perf: Option<(String, Arc<Kallsyms>)>,
    /// /proc/kallsyms, when it was read and a hash of the modules then.
    loaded: Option<(Instant, u64, Arc<Kallsyms>)>,
    /// The BPF programs, listed again at each symbolization; empty when they cannot be.
    programs: Programs,
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
        let modules = modules();
        let limit = if self.programs.refresh() { LOADED_REFRESH_LISTED } else { LOADED_REFRESH };
        if let Some((at, then, table)) = &self.loaded {
            if modules == *then && at.elapsed() < limit {
                return table.clone();
            }
        }
        let table = Arc::new(Kallsyms::load());
        self.loaded = Some((Instant::now(), modules, table.clone()));
        table
    }

    fn program(&self, addr: u64) -> Option<&str> {
        self.programs.lookup(addr)
    }
}

/// A hash of the kernel's modules (name and address).
fn modules() -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for line in std::fs::read_to_string("/proc/modules").unwrap_or_default().lines() {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        (f.first(), f.get(5)).hash(&mut h);
    }
    h.finish()
}

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
        // (Looked up twice: a borrow returned from one branch would hold `self` in the others.)
        if !core && self.first.shift == 0 && self.tables.program(addr).is_some() {
            return self.tables.program(addr);
        }
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
    use super::{Kept, KernelSymbols, KernelTables, LOADED_REFRESH_LISTED};
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

    /// A kept /proc/kallsyms is read again when the modules changed, or after ten minutes when BPF
    /// programs are named apart (the suite runs as root: they can be listed).
    #[test]
    fn kept_tables_are_read_again_when_modules_change() {
        let mut kept = Kept::default();
        let first = kept.loaded();
        assert!(Arc::ptr_eq(&first, &kept.loaded()), "kept while nothing changed");
        // The running kernel's addresses are all named from that one table.
        let (image, image_only) = kept.image(None);
        assert!(!image_only && Arc::ptr_eq(&image, &first));
        // As if a module had come since: read again at once.
        if let Some((_, then, _)) = &mut kept.loaded {
            *then ^= 1;
        }
        let second = kept.loaded();
        assert!(!Arc::ptr_eq(&first, &second));
        // Ten minutes on, read again all the same (trampolines come and go unlisted).
        if let Some((at, _, _)) = &mut kept.loaded {
            *at -= LOADED_REFRESH_LISTED;
        }
        assert!(!Arc::ptr_eq(&second, &kept.loaded()));
    }
}
