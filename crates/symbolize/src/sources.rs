//! Where a module's names come from. Several sources answer the one question (module, file offset) ->
//! frames; each module gets the first that can, in a fixed order, and the choice stays visible:
//!
//! 1. the file itself when it has its symbols and debug information, or a separate debug file on this
//!    machine (by build id or `.gnu_debuglink`; blazesym finds and reads it);
//! 2. Go's `.gopclntab` when a Go program has no DWARF (names, file:line and the inline tree);
//! 3. a debug file fetched by build id from the servers in DEBUGINFOD_URLS;
//! 4. whatever the file has left (its dynamic symbols), with a note naming the fix; an address no
//!    symbol covers is then named by the start of the function around it, as the file's `.eh_frame`
//!    bounds it (`nginx+0x51390` for every address of that function), so a stripped hot path still
//!    reads as functions.
//!
//! Reads files (and debuginfod servers when the user configured them), never a process.

use std::collections::HashMap;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use whyslow_debuginfod::Client;
use whyslow_gopclntab::GoTable;

/// Where a line about a debug file being fetched goes (nowhere unless set).
static PROGRESS: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Says what is being fetched through `say` (a terminal's status line); the first call decides.
pub fn set_progress(say: fn(&str)) {
    let _ = PROGRESS.set(say);
}

/// Until when (unix seconds) no debuginfod server is asked: set when one could not be reached (a timeout
/// costs seconds per module), so the other modules of a run are not each held up by it; an agent asks
/// again after [`DOWN_FOR_S`].
static SERVERS_DOWN_UNTIL: AtomicU64 = AtomicU64::new(0);
const DOWN_FOR_S: u64 = 300;
/// Held while debuginfod is asked: modules planned on several threads ask one after another, so the
/// first timeout marks the servers down before the next module would wait for it too.
static ASKING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// How a module is symbolized.
pub(crate) enum Source {
    /// The file through blazesym: its `.symtab`/`.dynsym`, its DWARF, a separate debug file here.
    Elf,
    /// A separate debug file from a debuginfod server, addressed by virtual address.
    Fetched(String),
    /// Go's function table.
    Go(GoTable),
}

/// The source chosen for one file, and what the user should know about it.
pub(crate) struct Plan {
    pub source: Source,
    /// Executable segments: (file offset range, virtual address), to address sources by virtual address.
    segments: Vec<(Range<u64>, u64)>,
    /// Which source names it, in words (kept with the module).
    pub described: String,
    /// It has no symbols of its own (its dynamic symbols at most): frames may stay module+offset.
    pub unnamed: bool,
    /// What went wrong on the way (a fetch that failed, an unreadable table), one line each.
    pub problems: Vec<String>,
    /// For a file without symbols of its own: its functions' virtual address ranges from `.eh_frame`,
    /// sorted by start.
    functions: Vec<Range<u64>>,
}

impl Plan {
    /// The virtual address of a file offset in an executable segment.
    pub fn address(&self, offset: u64) -> Option<u64> {
        self.segments.iter().find(|(r, _)| r.contains(&offset)).map(|(r, va)| va + (offset - r.start))
    }

    /// The file offset where the function around file offset `offset` starts, by the file's
    /// `.eh_frame` (only kept for files without symbols of their own).
    pub fn function_start(&self, offset: u64) -> Option<u64> {
        let va = self.address(offset)?;
        let i = self.functions.partition_point(|f| f.start <= va).checked_sub(1)?;
        let f = &self.functions[i];
        f.contains(&va).then(|| offset - (va - f.start))
    }
}

/// The address ranges of the functions `.eh_frame` describes (its FDEs), sorted; empty when it has none
/// or cannot be read.
fn eh_frame_functions(obj: &object::File) -> Vec<Range<u64>> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
    use object::{Object, ObjectSection};
    let Some(section) = obj.section_by_name(".eh_frame") else { return Vec::new() };
    let Ok(data) = section.data() else { return Vec::new() };
    let eh = EhFrame::new(data, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = obj.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    let mut functions = Vec::new();
    let mut entries = eh.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if let CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) {
                let start = fde.initial_address();
                if fde.len() > 0 {
                    functions.push(start..start.saturating_add(fde.len()));
                }
            }
        }
    }
    functions.sort_by_key(|f| f.start);
    functions
}

/// The note for modules without symbols whose frames stayed module+offset, naming the fix.
pub(crate) fn unnamed_note(modules: &[String]) -> String {
    let (it, its) = if modules.len() == 1 { ("it", "its") } else { ("them", "their") };
    format!(
        "no symbols for {} ({its} frames stay module+offset): install {its} debug symbols (the \
         distribution's -dbgsym or -debuginfo packages), set DEBUGINFOD_URLS to a debuginfod server that \
         has them, or build {it} with -g and without stripping",
        modules.join(", ")
    )
}

/// Chooses the source of the file at `path` (shown to the user as `shown`).
pub(crate) fn plan(path: &str, shown: &str, debuginfod: Option<&Client>) -> Result<Plan, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    // SAFETY: read-only and private; a file truncated in place while mapped raises SIGBUS as it would in
    // the processes running it, and executables cannot be opened for writing while they run.
    let data = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| e.to_string())?;
    let obj = object::File::parse(&*data).map_err(|e| e.to_string())?;
    use object::{Object, ObjectSegment};
    let segments = obj
        .segments()
        .filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags.0 & 1 != 0))
        .map(|s| {
            let (off, size) = s.file_range();
            (off..off + size, s.address())
        })
        .collect();
    let build_id: String = obj
        .build_id()
        .ok()
        .flatten()
        .map(|b| b.iter().map(|x| format!("{x:02x}")).collect())
        .unwrap_or_default();
    let symtab = obj.symbol_table().is_some();
    let dwarf = obj.section_by_name(".debug_info").is_some();
    // A kept file's path is a descriptor of ours: nothing lies beside it.
    let local_debug = if path.starts_with("/proc/self/fd/") {
        None
    } else {
        whyslow_symbols::separate_debug_file(Path::new(path), &obj)
    };
    let plan = |source, described: String, unnamed| Plan {
        source,
        segments: Vec::new(),
        described,
        unnamed,
        problems: Vec::new(),
        functions: Vec::new(),
    };
    let mut notes = Vec::new();
    let mut chosen = if let Some(debug) = &local_debug {
        Some(plan(Source::Elf, format!("separate debug file {debug}"), false))
    } else if symtab && dwarf {
        Some(plan(Source::Elf, "its symbols and DWARF".into(), false))
    } else {
        None
    };
    // A Go program without DWARF: its table has the lines and inlined calls its symbols lack.
    if chosen.is_none() {
        match GoTable::from_elf(&data) {
            Ok(Some(t)) => chosen = Some(plan(Source::Go(t), "Go's .gopclntab".into(), false)),
            Ok(None) => {}
            Err(e) => notes.push(format!("{shown}: cannot read its .gopclntab: {e}")),
        }
    }
    let asking = (chosen.is_none() && !build_id.is_empty() && debuginfod.is_some())
        .then(|| ASKING.lock().unwrap_or_else(|e| e.into_inner()));
    if asking.is_some() {
        if let Some(client) = debuginfod.filter(|_| unix_now() >= SERVERS_DOWN_UNTIL.load(Ordering::Relaxed))
        {
            if let Some(say) = PROGRESS.get() {
                say(&format!("fetching the debug file of {shown} (build id {build_id}) from debuginfod"));
            }
            match client.fetch_debuginfo(&build_id) {
                Ok(p) => {
                    let p = p.display().to_string();
                    chosen = Some(plan(Source::Fetched(p.clone()), format!("debuginfod ({p})"), false));
                }
                Err(e) => {
                    // A server that cannot be reached is not asked again for every other module.
                    use whyslow_debuginfod::FetchError as F;
                    if matches!(e, F::Timeout { .. } | F::Stalled { .. } | F::Unreachable { .. }) {
                        SERVERS_DOWN_UNTIL.store(unix_now() + DOWN_FOR_S, Ordering::Relaxed);
                    }
                    notes.push(format!("{shown}: {e}"));
                }
            }
        }
    }
    drop(asking);
    let mut chosen = chosen.unwrap_or_else(|| {
        let described = if symtab { "its symbols (no DWARF)" } else { "its dynamic symbols only" };
        plan(Source::Elf, described.into(), !symtab)
    });
    chosen.problems = notes;
    chosen.segments = segments;
    if chosen.unnamed {
        chosen.functions = eh_frame_functions(&obj);
    }
    Ok(chosen)
}

/// Which file a path named when it was planned: (device, inode, size, mtime).
type FileStamp = (u64, u64, u64, i64);

/// Plans by file, made once per file as it is (a path reused by another file is planned again).
#[derive(Default)]
pub(crate) struct Plans(HashMap<String, (FileStamp, Arc<Plan>)>);

impl Plans {
    pub fn get(&mut self, path: &str, shown: &str, debuginfod: Option<&Client>) -> Result<Arc<Plan>, String> {
        let m = std::fs::metadata(path).map_err(|e| e.to_string())?;
        let key = (m.dev(), m.ino(), m.size(), m.mtime());
        if let Some((k, p)) = self.0.get(path) {
            if *k == key {
                return Ok(p.clone());
            }
        }
        let p = Arc::new(plan(path, shown, debuginfod)?);
        self.0.insert(path.to_string(), (key, p.clone()));
        Ok(p)
    }

    /// Drops the plan of `path` (made again when it is asked for).
    pub fn forget(&mut self, path: &str) {
        self.0.remove(path);
    }
}

#[cfg(test)]
mod tests {
    use super::{plan, Source};
    use object::{Object, ObjectSection};
    use std::path::Path;

    /// A copy of the stripped Go workload with its .gopclntab changed by `damage`.
    fn damaged_go(dir: &Path, damage: impl Fn(&mut [u8])) -> String {
        let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/workloads/bin/gostrip_stripped");
        let mut bytes = std::fs::read(&built).expect("tests/workloads built (make workloads)");
        let (start, len) = {
            let obj = object::File::parse(&*bytes).unwrap();
            let s = obj.section_by_name(".gopclntab").expect("a .gopclntab");
            let (off, len) = s.file_range().unwrap();
            (off as usize, len as usize)
        };
        damage(&mut bytes[start..start + len]);
        let path = dir.join("damaged");
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    }

    /// A table of a Go older than 1.18 or one whose header is garbage is one note and no source: the
    /// frames stay module+offset, and the fix is offered.
    #[test]
    fn an_unreadable_go_table_is_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let old = damaged_go(dir.path(), |t| t[..4].copy_from_slice(&0xffff_fffau32.to_le_bytes()));
        let p = plan(&old, "app", None).unwrap();
        assert!(matches!(p.source, Source::Elf) && p.unnamed, "{}", p.described);
        assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
        assert!(
            p.problems[0].starts_with("app: cannot read its .gopclntab: ") && p.problems[0].contains("1.16")
        );
        let garbage = damaged_go(dir.path(), |t| t[8..64].fill(0xee));
        let p = plan(&garbage, "app", None).unwrap();
        assert!(matches!(p.source, Source::Elf) && p.problems.len() == 1, "{:?}", p.problems);
    }

    /// The undamaged table is the source, and names main.main at the address of its entry.
    #[test]
    fn a_stripped_go_program_is_named_by_its_table() {
        let dir = tempfile::tempdir().unwrap();
        let intact = damaged_go(dir.path(), |_| {});
        let p = plan(&intact, "app", None).unwrap();
        let Source::Go(table) = &p.source else { panic!("{}", p.described) };
        let main = table.functions().find(|f| f.name == "main.main").unwrap();
        assert_eq!(table.frames(main.entry).unwrap()[0].name, "main.main");
        assert!(p.problems.is_empty() && !p.unnamed);
    }
}
