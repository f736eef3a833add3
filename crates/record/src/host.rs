//! The live host of the converter: what it asks about a process while the process is alive (its files
//! as it sees them, its mappings and threads, the vDSO), answered from /proc. It never changes the target.

use crate::jvm::{JvmMap, Jvms};
use crate::target;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use whyslow_convert::{FileBytes, Foreign, Host, JitUpdate, ProcessInfo};

/// The live host of the converter: files as the target sees them (containers, chroots), the vDSO from
/// our own memory, processes from /proc.
pub(crate) struct LiveHost {
    /// The JVMs among the targets, asked for the perf maps of their JIT code.
    pub jvms: Arc<Jvms>,
    /// The memory files of the processes read (their Python code objects), kept open: an open, read
    /// and close cost 5.4 us, a read alone 0.1 us, and a sample's Python frames are checked at a read or
    /// two each. At most [`MEM_FILES`]; a file that fails a read is opened again once (the process
    /// exec'd, or its pid names another one now).
    pub mem: Mutex<HashMap<u32, File>>,
}

/// Memory files kept open at most (all are closed when there are more).
const MEM_FILES: usize = 64;

impl LiveHost {
    pub(crate) fn new(jvms: Arc<Jvms>) -> LiveHost {
        LiveHost { jvms, mem: Mutex::new(HashMap::new()) }
    }
}

impl Host for LiveHost {
    fn file(&self, pid: u32, path: &str) -> Option<FileBytes> {
        if path == "[vdso]" {
            return vdso_bytes().map(FileBytes::owned);
        }
        FileBytes::map(&crate::files::open(pid, path).ok()?).ok()
    }

    fn foreign(&self, pid: u32, path: &str) -> Option<Foreign> {
        crate::files::foreign(pid, path)
    }

    fn jit(&self, pid: u32, from: u64, dump: Option<&str>) -> Option<JitUpdate> {
        match self.jvms.jit(pid) {
            JvmMap::NotAsked => crate::files::jit(pid, from, dump),
            JvmMap::Unchanged => None,
            JvmMap::Written(u) => Some(u),
        }
    }

    fn process(&self, pid: u32) -> Option<ProcessInfo> {
        let maps = target::exec_maps(pid);
        let threads =
            target::threads_of(pid).into_iter().filter_map(|t| Some((t, target::comm_of(pid, t)?))).collect();
        Some(ProcessInfo { maps, threads })
    }

    fn thread_name(&self, pid: u32, tid: u32) -> Option<String> {
        target::comm_of(pid, tid)
    }

    fn read_memory(&self, pid: u32, addr: u64, buf: &mut [u8]) -> bool {
        // A read of the memory file: the process is not stopped (no ptrace attach).
        let mut files = self.mem.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = files.get(&pid) {
            if f.read_exact_at(buf, addr).is_ok() {
                return true;
            }
        }
        let Ok(f) = File::open(format!("/proc/{pid}/mem")) else {
            files.remove(&pid);
            return false;
        };
        let read = f.read_exact_at(buf, addr).is_ok();
        if files.len() >= MEM_FILES {
            files.clear();
        }
        files.insert(pid, f);
        read
    }

    fn identity(&self, pid: u32, path: &str) -> Option<(u64, u64, i64)> {
        use std::os::unix::fs::MetadataExt;
        if !path.starts_with('/') {
            return None;
        }
        let m = std::fs::metadata(crate::files::through_root(pid, path))
            .or_else(|_| std::fs::metadata(path))
            .ok()?;
        Some((m.dev(), m.ino(), m.mtime().saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec())))
    }
}

fn vdso_bytes() -> Option<Vec<u8>> {
    // The vDSO image is the same in every process of this kernel; read our own.
    let m = target::exec_maps(std::process::id()).into_iter().find(|m| m.path == "[vdso]")?;
    let f = std::fs::File::open("/proc/self/mem").ok()?;
    let mut buf = vec![0u8; (m.end - m.start) as usize];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, m.start).ok()?;
    Some(buf)
}
