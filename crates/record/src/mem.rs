//! Memory in use for launched commands: the in-process library (preload/whyslow_mem.c, built into this
//! crate) that the command runs with, and the files it writes, read back as [`HeapProfile`]s.
//!
//! The library is written to the run's own directory and named in the command's `LD_PRELOAD`; it writes
//! one file per process image (`mem.PID.N`) into the same directory. It pairs allocations with frees in
//! the target, so nothing crosses a process boundary per call (a uprobe pair costs microseconds, this
//! tens of nanoseconds). A program it cannot enter (statically linked, setuid) writes no file: the run
//! says so instead of reporting an empty heap.
//!
//! File format (little-endian), written by the library as it runs:
//!
//! ```text
//! header  "WSMEM001"  u32 version (1)  u32 pid  u64 start_ns  u64 sample_bytes  u64 period_ns
//! records u32 kind  u32 length  payload[length]
//!   1 stack   u32 id  u16 depth  u8 entry  u8 complete  u64 return_address[depth]
//!   2 snap    u64 time_ns  u64 total_bytes  u64 total_count  u32 n  u32 0
//!             n x (u32 stack  u64 inuse_bytes  u64 inuse_count)
//!   3 totals  u64 time_ns  u64 peak_bytes  u64 unknown_frees  u64 lost  u64 truncated  u64 live
//!             u32 n  u32 0  u64 0
//!             n x (u32 stack  u64 alloc_count  u64 alloc_bytes  u64 inuse_count  u64 inuse_bytes
//!                  u64 peak_count  u64 peak_bytes  u32 oldest_live_ms (u32::MAX: none))
//!   4 maps    the text of /proc/self/maps
//!   5 end
//!   6 allocator  the path of the library that serves the allocations
//! ```
//!
//! A file cut short (the process was killed while writing) keeps every whole record before the cut.

use crate::RecordError;
use std::path::{Path, PathBuf};
use whyslow_convert::heap::{HeapEntry, HeapProfile, HeapRow, HeapSnapshot, HeapStack, HeapTotals};

/// The library, compiled by build.rs from preload/whyslow_mem.c.
const LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libwhyslow_mem.so"));
const MAGIC: &[u8; 8] = b"WSMEM001";
const HEADER_LEN: usize = 40;

/// How to count memory in use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemOptions {
    /// Mean bytes between sampled allocations (a random draw per allocation, as tcmalloc and Go sample);
    /// 0: every allocation, exactly.
    pub sample_bytes: u64,
    /// How often the in-use of the stacks that changed is written (the series), ms.
    pub period_ms: u64,
}

/// Why a memory file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MemFileError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: not a whyslow memory file (bad magic)")]
    BadMagic { path: String },
    #[error("{path}: unsupported memory file version {version}")]
    Version { path: String, version: u32 },
    #[error("{path}: bad {what} record at byte {at}")]
    BadRecord { path: String, what: &'static str, at: usize },
}

/// Refuses a command the library cannot enter: a statically linked program (no dynamic loader to read
/// LD_PRELOAD) or a setuid one (the loader ignores it there). A command not found is left to the launch,
/// which says so.
pub fn check_command(argv: &[String]) -> Result<(), RecordError> {
    use object::read::elf::{ElfFile64, ProgramHeader};
    use object::Object;
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = argv.first().and_then(|a| crate::target::program_path(a)) else { return Ok(()) };
    let Ok(meta) = std::fs::metadata(&path) else { return Ok(()) };
    if meta.permissions().mode() & 0o6000 != 0 {
        return Err(RecordError::SetuidBinary(path.display().to_string()));
    }
    let Ok(data) = std::fs::read(&path) else { return Ok(()) };
    // A script or another format: its interpreter is what runs, and is checked by the loader.
    let Ok(elf) = ElfFile64::<object::Endianness>::parse(&*data) else { return Ok(()) };
    let endian = elf.endian();
    let interp = elf.elf_program_headers().iter().any(|h| h.p_type(endian) == object::elf::PT_INTERP);
    if !interp {
        let named = elf.symbols().next().is_some() || elf.dynamic_symbols().next().is_some();
        return Err(match named {
            true => RecordError::StaticBinary(path.display().to_string()),
            false => RecordError::StaticStripped(path.display().to_string()),
        });
    }
    Ok(())
}

/// A run's memory directory: the library and the files the target's processes write, removed with it.
#[derive(Debug)]
pub struct MemRun {
    dir: PathBuf,
    library: PathBuf,
    options: MemOptions,
}

impl MemRun {
    /// Makes the directory (private to this user) and writes the library into it.
    pub fn new(options: MemOptions) -> std::io::Result<MemRun> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let base = std::env::temp_dir();
        let mut n = 0u32;
        let dir = loop {
            let dir = base.join(format!("whyslow-mem-{}-{n}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => break dir,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(e),
            }
        };
        let library = dir.join("libwhyslow_mem.so");
        std::fs::write(&library, LIBRARY)?;
        std::fs::set_permissions(&library, std::fs::Permissions::from_mode(0o500))?;
        Ok(MemRun { dir, library, options })
    }

    /// The variables the launched command runs with: the library prepended to its `LD_PRELOAD`.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut preload = self.library.display().to_string();
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            preload = format!("{preload}:{}", old.to_string_lossy());
        }
        vec![
            ("LD_PRELOAD".into(), preload),
            ("WHYSLOW_MEM_DIR".into(), self.dir.display().to_string()),
            ("WHYSLOW_MEM_SAMPLE".into(), self.options.sample_bytes.to_string()),
            ("WHYSLOW_MEM_PERIOD_MS".into(), self.options.period_ms.max(1).to_string()),
        ]
    }

    /// Every file the processes wrote, in the order they were made (pid, then image), and the files that
    /// could not be read (each one line).
    pub fn read(&self) -> (Vec<HeapProfile>, Vec<MemFileError>) {
        let mut names: Vec<(u32, u32, PathBuf)> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let mut parts = name.strip_prefix("mem.")?.split('.');
                let pid = parts.next()?.parse().ok()?;
                let n = parts.next()?.parse().ok()?;
                Some((pid, n, e.path()))
            })
            .collect();
        names.sort();
        let mut profiles = Vec::new();
        let mut errors = Vec::new();
        for (_, _, path) in names {
            match read_file(&path) {
                Ok(Some(mut p)) => {
                    // As the process's mappings name it (/usr/lib, not the /lib link), so that its frames
                    // and the allocator's are one module.
                    if let Ok(real) = std::fs::canonicalize(&p.allocator) {
                        p.allocator = real.display().to_string();
                    }
                    profiles.push(p)
                }
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        (profiles, errors)
    }
}

impl Drop for MemRun {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the run should say about memory: per process what it held at its end and at its peak, what
/// the library could not count, and the processes and files it has nothing from.
pub fn notes(profiles: &[HeapProfile], errors: &[MemFileError], launched: Option<u32>) -> Vec<String> {
    let mut notes = Vec::new();
    for p in profiles {
        let held = |bytes: u64, count: u64| {
            format!("{} in {count} objects", whyslow_model::units::bytes(bytes as i64))
        };
        match &p.totals {
            Some(t) => {
                let (b, n) = t.rows.iter().fold((0, 0), |(b, n), r| (b + r.inuse_bytes, n + r.inuse_count));
                let (ab, an) = t.rows.iter().fold((0, 0), |(b, n), r| (b + r.alloc_bytes, n + r.alloc_count));
                notes.push(format!(
                    "memory of pid {}: {} still in use at its end, {} at the peak; {} allocated",
                    p.pid,
                    held(b, n),
                    whyslow_model::units::bytes(t.peak_bytes as i64),
                    held(ab, an)
                ));
                if t.unknown_frees > 0 {
                    notes.push(format!(
                        "memory of pid {}: {} frees of pointers it never saw allocated (made before the library \
                         loaded, or by a path it does not see) were passed on and not counted",
                        p.pid, t.unknown_frees
                    ));
                }
                if t.lost > 0 {
                    notes.push(format!("memory of pid {}: {} allocations could not be kept (no memory for the library's tables)", p.pid, t.lost));
                }
                if t.truncated > 0 {
                    notes.push(format!("memory of pid {}: {} stacks cut at 128 frames", p.pid, t.truncated));
                }
            }
            None => {
                let last = p.snapshots.last().map_or((0, 0), |s| (s.total_bytes, s.total_count));
                notes.push(format!(
                    "memory of pid {}: ended without its totals (killed, or stopped at the end of the run): in use \
                     as of its last snapshot ({}), no allocation or peak totals",
                    p.pid,
                    held(last.0, last.1)
                ));
            }
        }
    }
    if profiles.iter().any(|p| p.sample_bytes > 0) {
        let mean = profiles.iter().map(|p| p.sample_bytes).max().unwrap_or(0);
        notes.push(format!(
            "memory: allocations sampled by bytes, one every {} on average: in use and allocations are \
             estimates (each sample weighted by its chance to be drawn)",
            whyslow_model::units::bytes(mean as i64)
        ));
    }
    if let Some(pid) = launched.filter(|pid| !profiles.iter().any(|p| p.pid == *pid)) {
        notes.push(format!(
            "memory: the command (pid {pid}) wrote no memory profile: it did not load the library, or ended \
             before it allocated"
        ));
    }
    notes.extend(errors.iter().map(|e| format!("memory: {e}")));
    notes
}

/// Reads one file; None for a file with a header only (a process that ended before it allocated).
pub fn read_file(path: &Path) -> Result<Option<HeapProfile>, MemFileError> {
    let name = || path.display().to_string();
    let data = std::fs::read(path).map_err(|source| MemFileError::Io { path: name(), source })?;
    parse(&data).map_err(|e| e.at(name()))
}

/// A parse failure before the path is known.
struct Bad {
    what: &'static str,
    at: usize,
    magic: bool,
    version: Option<u32>,
}

impl Bad {
    fn at(self, path: String) -> MemFileError {
        match (self.magic, self.version) {
            (true, _) => MemFileError::BadMagic { path },
            (_, Some(version)) => MemFileError::Version { path, version },
            _ => MemFileError::BadRecord { path, what: self.what, at: self.at },
        }
    }
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        let b = self.data.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(b)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }
}

fn parse(data: &[u8]) -> Result<Option<HeapProfile>, Bad> {
    let bad = |what, at| Bad { what, at, magic: false, version: None };
    if data.len() < HEADER_LEN || &data[..8] != MAGIC {
        return Err(Bad { what: "header", at: 0, magic: true, version: None });
    }
    let mut r = Reader { data, at: 8 };
    let version = r.u32().unwrap_or(0);
    if version != 1 {
        return Err(Bad { what: "header", at: 8, magic: false, version: Some(version) });
    }
    let mut p = HeapProfile {
        pid: r.u32().unwrap_or(0),
        start_ns: r.u64().unwrap_or(0),
        sample_bytes: r.u64().unwrap_or(0),
        ..Default::default()
    };
    let _period = r.u64();
    let mut ended = false;
    while r.at < data.len() && !ended {
        let start = r.at;
        let (Some(kind), Some(len)) = (r.u32(), r.u32()) else {
            p.truncated_file = true;
            break;
        };
        let Some(body) = r.bytes(len as usize) else {
            p.truncated_file = true;
            break;
        };
        let mut b = Reader { data: body, at: 0 };
        match kind {
            1 => {
                let (Some(id), Some(depth), Some(entry), Some(complete)) = (b.u32(), b.u16(), b.u8(), b.u8())
                else {
                    return Err(bad("stack", start));
                };
                let entry = *HeapEntry::ALL.get(entry as usize).ok_or_else(|| bad("stack", start))?;
                let return_addresses = (0..depth)
                    .map(|_| b.u64())
                    .collect::<Option<Vec<u64>>>()
                    .ok_or_else(|| bad("stack", start))?;
                // Ids are dense but announced in the order their stacks first changed.
                let empty = HeapStack { entry, return_addresses: vec![], complete: false };
                if id as usize >= p.stacks.len() {
                    p.stacks.resize(id as usize + 1, empty);
                }
                p.stacks[id as usize] = HeapStack { entry, return_addresses, complete: complete != 0 };
            }
            2 => {
                let head = (b.u64(), b.u64(), b.u64(), b.u32(), b.u32());
                let (Some(time_ns), Some(total_bytes), Some(total_count), Some(n), Some(_)) = head else {
                    return Err(bad("snapshot", start));
                };
                let changed = (0..n)
                    .map(|_| Some((b.u32()?, b.u64()?, b.u64()?)))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| bad("snapshot", start))?;
                p.snapshots.push(HeapSnapshot { time_ns, total_bytes, total_count, changed });
            }
            3 => p.totals = Some(totals(&mut b).ok_or_else(|| bad("totals", start))?),
            4 => p.maps = String::from_utf8_lossy(body).into_owned(),
            5 => ended = true,
            6 => p.allocator = String::from_utf8_lossy(body).into_owned(),
            _ => return Err(bad("unknown", start)),
        }
    }
    let n = p.stacks.len() as u32;
    let known = p.snapshots.iter().flat_map(|s| &s.changed).all(|c| c.0 < n)
        && p.totals.iter().flat_map(|t| &t.rows).all(|r| r.stack < n);
    if !known {
        return Err(bad("stack reference", HEADER_LEN));
    }
    if p.stacks.is_empty() && p.totals.as_ref().is_none_or(|t| t.unknown_frees == 0) {
        return Ok(None);
    }
    Ok(Some(p))
}

fn totals(b: &mut Reader<'_>) -> Option<HeapTotals> {
    let mut t = HeapTotals {
        time_ns: b.u64()?,
        peak_bytes: b.u64()?,
        unknown_frees: b.u64()?,
        lost: b.u64()?,
        truncated: b.u64()?,
        rows: vec![],
    };
    let _live = b.u64()?;
    let n = b.u32()?;
    b.u32()?;
    b.u64()?;
    for _ in 0..n {
        let stack = b.u32()?;
        let [alloc_count, alloc_bytes, inuse_count, inuse_bytes, peak_count, peak_bytes] =
            [b.u64()?, b.u64()?, b.u64()?, b.u64()?, b.u64()?, b.u64()?];
        let oldest = b.u32()?;
        t.rows.push(HeapRow {
            stack,
            alloc_count,
            alloc_bytes,
            inuse_count,
            inuse_bytes,
            peak_count,
            peak_bytes,
            oldest_live_ns: (oldest != u32::MAX).then_some(oldest as u64 * 1_000_000),
        });
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::{parse, MAGIC};
    use whyslow_convert::heap::HeapEntry;

    fn header(pid: u32) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend(1u32.to_le_bytes());
        b.extend(pid.to_le_bytes());
        b.extend([5u64, 0, 100_000_000].iter().flat_map(|v| v.to_le_bytes()));
        b
    }

    fn record(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut b = kind.to_le_bytes().to_vec();
        b.extend((body.len() as u32).to_le_bytes());
        b.extend(body);
        b
    }

    fn stack(id: u32, entry: u8, ras: &[u64]) -> Vec<u8> {
        let mut b = id.to_le_bytes().to_vec();
        b.extend((ras.len() as u16).to_le_bytes());
        b.extend([entry, 1]);
        b.extend(ras.iter().flat_map(|v| v.to_le_bytes()));
        record(1, &b)
    }

    fn snapshot(t: u64, changed: &[(u32, u64, u64)]) -> Vec<u8> {
        let mut b: Vec<u8> = [t, 0, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        b.extend((changed.len() as u32).to_le_bytes());
        b.extend(0u32.to_le_bytes());
        for (s, bytes, count) in changed {
            b.extend(s.to_le_bytes());
            b.extend(bytes.to_le_bytes());
            b.extend(count.to_le_bytes());
        }
        record(2, &b)
    }

    /// Stacks announced out of order land at their ids; a file cut inside a record keeps every whole
    /// record before the cut and says it was cut.
    #[test]
    fn a_cut_file_keeps_its_whole_records() {
        let mut file = header(42);
        file.extend(stack(1, 1, &[0x10, 0x20]));
        file.extend(stack(0, 0, &[0x30]));
        file.extend(snapshot(7, &[(0, 64, 1), (1, 96, 3)]));
        let whole = parse(&file).ok().flatten().expect("a profile");
        assert_eq!(whole.pid, 42);
        assert_eq!(whole.stacks[1].entry, HeapEntry::Calloc);
        assert_eq!(whole.stacks[1].return_addresses, [0x10, 0x20]);
        assert_eq!(whole.snapshots[0].changed, [(0, 64, 1), (1, 96, 3)]);
        assert!(!whole.truncated_file && whole.totals.is_none());
        let second = snapshot(9, &[(0, 0, 0)]);
        file.extend(&second[..second.len() - 5]);
        let cut = parse(&file).ok().flatten().expect("a profile");
        assert!(cut.truncated_file);
        assert_eq!(cut.snapshots.len(), 1);
    }

    /// Not ours, another version, a snapshot naming a stack never announced: errors, not a profile.
    #[test]
    fn bad_files_are_errors() {
        let err = |b: &[u8]| parse(b).err().map(|e| e.at("f".into()).to_string());
        assert_eq!(
            err(b"hello world, this is not a whyslow memory file"),
            Some("f: not a whyslow memory file (bad magic)".into())
        );
        let mut v2 = header(1);
        v2[8] = 2;
        assert_eq!(err(&v2), Some("f: unsupported memory file version 2".into()));
        let mut dangling = header(1);
        dangling.extend(snapshot(1, &[(3, 8, 1)]));
        assert_eq!(err(&dangling), Some("f: bad stack reference record at byte 40".into()));
        assert!(parse(&header(1)).ok().flatten().is_none(), "a header alone: nothing to report");
    }
}
