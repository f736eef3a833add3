//! The files of this machine that a perf.data file's records name, checked against the build ids perf
//! recorded, and the JIT maps processes left in /tmp.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use whyslow_convert::{FileBytes, Host, JitUpdate, ProcessInfo};

/// The largest object file read for unwinding and symbolizing.
pub(crate) const MAX_OBJECT_BYTES: u64 = 4 << 30;

/// Files of this machine, checked against the build ids perf recorded.
pub(crate) struct LocalFiles {
    pub(crate) build_ids: HashMap<String, Vec<u8>>,
    pub(crate) missing: RefCell<BTreeSet<String>>,
    pub(crate) found: RefCell<BTreeSet<String>>,
}

impl Host for LocalFiles {
    fn file(&self, _pid: u32, path: &str) -> Option<FileBytes> {
        // The path comes from the file: read only regular files of a plausible size that are ELF objects
        // (a corrupt record could name /dev/zero or /proc/kcore).
        let plausible = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() <= MAX_OBJECT_BYTES);
        let bytes = plausible
            .then(|| FileBytes::map(&std::fs::File::open(path).ok()?).ok())
            .flatten()
            .filter(|b| b.starts_with(b"\x7fELF"));
        let usable = bytes.filter(|b| match self.build_ids.get(path) {
            Some(want) => build_id(b).is_none_or(|have| &have == want),
            None => true,
        });
        match &usable {
            Some(_) => self.found.borrow_mut().insert(path.to_string()),
            // [vdso] and the like are no files: nothing the user could copy.
            None if path.starts_with('[') => false,
            None => self.missing.borrow_mut().insert(path.to_string()),
        };
        usable
    }

    fn process(&self, _pid: u32) -> Option<ProcessInfo> {
        None // everything about the processes is in the file's records
    }

    /// JIT symbols from the perf map a process left in this machine's /tmp, as `perf report` reads them.
    fn jit(&self, pid: u32, from: u64, _dump: Option<&str>) -> Option<JitUpdate> {
        let source = format!("/tmp/{}", whyslow_convert::jit::perf_map_name(pid));
        let plausible = std::fs::metadata(&source).is_ok_and(|m| m.is_file() && m.len() > from);
        if from > 0 || !plausible {
            return None;
        }
        let bytes = std::fs::read(&source).ok()?;
        let (map, stats) = whyslow_convert::JitMap::parse_perf_map(&bytes);
        Some(JitUpdate::symbols(source, map, stats.skipped, bytes.len() as u64))
    }

    fn thread_name(&self, _pid: u32, _tid: u32) -> Option<String> {
        None
    }
}

pub(crate) fn build_id(bytes: &[u8]) -> Option<Vec<u8>> {
    use object::Object;
    object::File::parse(bytes).ok()?.build_id().ok()?.map(<[u8]>::to_vec)
}
