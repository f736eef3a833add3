//! User-stack unwinding: registers + a copy of the stack bytes -> return addresses.
//!
//! DWARF CFI (.eh_frame / .debug_frame) through framehop, which falls back to frame pointers where a
//! function has no CFI. Object files are parsed once ([`ObjectImage`]) and shared by every process that
//! maps them. JIT code a runtime describes (HotSpot's code cache) is stepped by its own frame layout
//! (`jit.rs`). This crate never touches a live process: it sees only bytes handed to it.

mod jit;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use jit::WithJit;
pub use jit::{JitCode, JitFrameRule};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use std::ops::Range;
use std::sync::Arc;

/// Deepest stack we follow; deeper ones are reported as partial.
pub const MAX_FRAMES: usize = 1024;

/// An object file's bytes: mapped from disk, so only the pages unwinding touches are read (a 200 MB
/// browser binary costs what its unwind tables and the few code pages looked at cost, and nothing is
/// copied), or held in memory (the vDSO, files in tests).
#[derive(Clone)]
pub struct FileBytes(Arc<Backing>);

enum Backing {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl FileBytes {
    /// Maps `file` (read-only, private).
    pub fn map(file: &std::fs::File) -> std::io::Result<FileBytes> {
        // SAFETY: the mapping is read-only and private. Should the file be truncated in place while it is
        // mapped, reading the lost pages raises SIGBUS; the processes that map the same file for running
        // it fault the same way, and executables cannot be opened for writing while they run (ETXTBSY).
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(FileBytes(Arc::new(Backing::Mapped(map))))
    }

    pub fn owned(bytes: Vec<u8>) -> FileBytes {
        FileBytes(Arc::new(Backing::Owned(bytes)))
    }
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &*self.0 {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// A section of an object file as framehop reads it: a range of the file's bytes, not a copy.
#[derive(Clone)]
struct Bytes {
    file: FileBytes,
    range: Range<usize>,
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.file[self.range.clone()]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("cannot parse object file {path}: {reason}")]
    Parse { path: String, reason: String },
}

/// The unwind-relevant parts of one object file, parsed once.
pub struct ObjectImage {
    pub path: String,
    /// GNU build id as lowercase hex ("" when absent).
    pub build_id: String,
    /// Executable loadable segments: (file offset range, virtual address).
    segments: Vec<(Range<u64>, u64)>,
    sections: ExplicitModuleSectionInfo<Bytes>,
    /// The ELF entry point (virtual address; 0 when none).
    entry: u64,
    /// Functions of a Go runtime linked into this file (virtual addresses).
    go: Vec<(Range<u64>, GoFrame)>,
    /// A Go program's function table: its stack-pointer deltas unwind Go code as Go's own traceback
    /// does, whatever the file's CFI (a cgo program's .eh_frame covers its C code only) and wherever a
    /// function is interrupted (before its frame is set up, in a leaf without one).
    go_table: Option<whyslow_gopclntab::GoTable>,
}

/// Whether an object file is a Go program (it has Go's build information).
pub fn is_go(obj: &object::File) -> bool {
    obj.section_by_name(".go.buildinfo").is_some()
}

/// Go runtime functions that unwinding treats specially.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoFrame {
    /// The outermost frame of a stack, where Go's own traceback ends: a goroutine's (`goexit`), a
    /// thread's (`mstart`, `rt0_go` and the `_rt0_amd64*` entry that jumps to it).
    Root,
    /// `mcall`, which switches to the system stack for good (a goroutine that parks, exits, yields or
    /// waits for a P): the root of the system stack (as in Go's traceback), unless the goroutine it
    /// switched away from was copied, whose stack the unwind goes on with: from its saved registers
    /// ([`Goroutine::parked`]; Go 1.25 on, where mcall clears the frame pointer), or where the
    /// frame-pointer chain leads (before).
    Mcall,
    /// `morestack`, which calls newstack on the system stack for a function that needs more stack: the
    /// goroutine's frames go on from its saved registers ([`Goroutine::parked`]; Go 1.21 on, where it
    /// clears the frame pointer), or, where it keeps the frame pointer, where that leads (as under
    /// [`GoFrame::Switch`]).
    Morestack,
    /// Runs a function on the thread's system stack (`systemstack`, the vDSO calls, cgo calls): the
    /// goroutine's frames go on where the frame pointer left in the chain leads.
    Switch,
    /// Code past which the stack is not a caller's (`gogo` switching to a goroutine): the unwind stops
    /// there, incomplete.
    End,
}

impl GoFrame {
    fn of(symbol: &str) -> Option<GoFrame> {
        let name = symbol.strip_suffix(".abi0").unwrap_or(symbol);
        match name {
            "runtime.goexit" | "runtime.mstart" | "runtime.rt0_go" => Some(GoFrame::Root),
            _ if name.starts_with("_rt0_amd64") => Some(GoFrame::Root),
            "runtime.mcall" => Some(GoFrame::Mcall),
            "runtime.systemstack"
            | "runtime.asmcgocall"
            | "runtime.nanotime1"
            | "runtime.walltime"
            | "time.now" => Some(GoFrame::Switch),
            "runtime.morestack" | "runtime.morestack_noctxt" => Some(GoFrame::Morestack),
            "runtime.gogo" | "gogo" => Some(GoFrame::End),
            _ => None,
        }
    }
}

/// The GNU build id in an object file's notes (hex), read without parsing the rest (as
/// [`ObjectImage::build_id`] names it); None when it has none or is no object file.
pub fn build_id(bytes: &[u8]) -> Option<String> {
    let obj = object::File::parse(bytes).ok()?;
    let id = obj.build_id().ok()??;
    (!id.is_empty()).then(|| id.iter().map(|x| format!("{x:02x}")).collect())
}

impl ObjectImage {
    /// Parses an ELF image from its bytes.
    pub fn parse(path: &str, file: &FileBytes) -> Result<Self, ImageError> {
        let whole: &[u8] = file;
        let obj = object::File::parse(whole)
            .map_err(|e| ImageError::Parse { path: path.to_string(), reason: e.to_string() })?;
        let segments = obj
            .segments()
            .filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags.0 & 1 != 0))
            .map(|s| {
                let (off, size) = s.file_range();
                (off..off + size.max(1), s.address())
            })
            .collect();
        let range = |n: &str| obj.section_by_name(n).map(|s| s.address()..s.address() + s.size());
        // A section's bytes where they lie in the file; a compressed section's inflated into memory.
        let data = |n: &str| -> Option<Bytes> {
            match obj.section_by_name(n)?.uncompressed_data().ok()? {
                std::borrow::Cow::Borrowed(b) => {
                    let start = b.as_ptr() as usize - whole.as_ptr() as usize;
                    Some(Bytes { file: file.clone(), range: start..start + b.len() })
                }
                std::borrow::Cow::Owned(v) => Some(Bytes { range: 0..v.len(), file: FileBytes::owned(v) }),
            }
        };
        let sections = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: range(".text"),
            text: data(".text"),
            got_svma: range(".got"),
            eh_frame_svma: range(".eh_frame"),
            eh_frame: data(".eh_frame"),
            eh_frame_hdr_svma: range(".eh_frame_hdr"),
            eh_frame_hdr: data(".eh_frame_hdr"),
            debug_frame: data(".debug_frame"),
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        };
        let build_id = obj
            .build_id()
            .ok()
            .flatten()
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect())
            .unwrap_or_default();
        // A Go program's own function table (kept: its stack-pointer deltas unwind every Go frame) names
        // the runtime's special functions, stripped or not; its symbol table where the table cannot be
        // read (before Go 1.18). Other files' symbol tables may be large, and have none of these.
        let go_table =
            if is_go(&obj) { whyslow_gopclntab::GoTable::from_elf(whole).ok().flatten() } else { None };
        let go = match &go_table {
            Some(table) => {
                table.functions().filter_map(|f| Some((f.entry..f.end, GoFrame::of(&f.name)?))).collect()
            }
            None if is_go(&obj) => obj
                .symbols()
                .filter_map(|s| Some((s.address()..s.address() + s.size(), GoFrame::of(s.name().ok()?)?)))
                .collect(),
            None => Vec::new(),
        };
        let entry = obj.entry();
        Ok(ObjectImage { path: path.to_string(), build_id, segments, sections, entry, go, go_table })
    }

    /// Load bias for an executable mapping of this file at `start` with file offset `pgoff`
    /// (absolute address = bias + virtual address in the file).
    pub fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        // The mapping begins at the page holding the segment's first byte; linkers such as lld start
        // segments mid-page, so the page-aligned `pgoff` can lie in the previous segment's range.
        let page_down = |x: u64| x & !0xfff;
        self.segments
            .iter()
            .find(|(r, _)| page_down(r.start) == pgoff)
            .or_else(|| self.segments.iter().find(|(r, _)| r.contains(&pgoff)))
            .map(|(r, vaddr)| start.wrapping_add(r.start).wrapping_sub(pgoff).wrapping_sub(*vaddr))
    }
}

/// Bytes from an image's entry point within which a frame is the process's first: `_start` and the
/// return address of its first call.
const ENTRY_CODE: u64 = 64;

/// Whether live address `addr` is in the entry code of the image mapped there.
fn at_entry(mapped: &[(Range<u64>, Arc<ObjectImage>, u64)], addr: u64) -> bool {
    mapped.iter().any(|(r, image, pgoff)| {
        r.contains(&addr)
            && image.entry != 0
            && image
                .bias(r.start, *pgoff)
                .is_some_and(|b| addr.wrapping_sub(b.wrapping_add(image.entry)) < ENTRY_CODE)
    })
}

/// Registers needed to start unwinding (x86-64).
#[derive(Debug, Clone, Copy, Default)]
pub struct Regs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// How an unwind ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Reached the outermost frame.
    Complete,
    /// Stopped early; the frames found so far are still returned.
    Partial,
}

/// The unwinder of one process: the executable mappings it has, each backed by an [`ObjectImage`].
#[derive(Default)]
pub struct ProcessUnwinder {
    unwinder: WithJit,
    cache: Option<Box<CacheX86_64>>,
    mapped: Vec<(Range<u64>, Arc<ObjectImage>, u64)>,
    /// The Go runtime functions of the mappings, at their live addresses.
    go: Vec<(Range<u64>, GoFrame)>,
    /// The mappings of Go programs with a function table: live range, load bias, image.
    go_code: Vec<(Range<u64>, u64, Arc<ObjectImage>)>,
    /// The last unwind's interpreted frames (see [`ProcessUnwinder::interpreted`]).
    interpreted: Vec<(usize, u64)>,
    /// What [`ProcessUnwinder::cfi_covers`] answered at the addresses where walks ended.
    covered: CoveredCache,
}

/// Answers of [`ProcessUnwinder::cfi_covers`] by address, direct-mapped: nearly every walk ends at one of
/// few addresses (the roots of the process's threads), and the answer takes a search of the module's
/// unwind tables, whose header is parsed again each time (a third of what unwinding a shallow stack
/// cost). Emptied when the mappings change.
struct CoveredCache([(u64, bool); COVERED_SLOTS]);

const COVERED_SLOTS: usize = 64;

impl Default for CoveredCache {
    fn default() -> Self {
        // Address 0 is never a frame's (a walk ends before it).
        CoveredCache([(0, false); COVERED_SLOTS])
    }
}

impl CoveredCache {
    fn slot(addr: u64) -> usize {
        // Instructions at unrelated addresses differ in their low bits; the multiplier mixes the rest in.
        (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % COVERED_SLOTS
    }

    fn get(&self, addr: u64) -> Option<bool> {
        let (at, covered) = self.0[Self::slot(addr)];
        (at == addr && addr != 0).then_some(covered)
    }

    fn put(&mut self, addr: u64, covered: bool) {
        self.0[Self::slot(addr)] = (addr, covered);
    }
}

/// A goroutine's stack that the stack being unwound continues on. Go's `runtime.systemstack` runs a
/// function on the thread's system stack, and left a frame pointer on the goroutine's stack in the chain
/// (its own frame's, or its caller's where it has none); `runtime.mcall` switched away from the
/// goroutine for good, which saved its registers (`parked`). `stack` holds the bytes copied from address
/// `at` upwards: from a little below that frame pointer (where a caller's return address lies), or from
/// the saved stack pointer; none where the thread ran its system stack for no goroutine (morestack's
/// goroutine descheduled).
#[derive(Debug, Clone, Copy)]
pub struct Goroutine<'a> {
    pub at: u64,
    pub stack: &'a [u8],
    /// The goroutine's registers when mcall or morestack switched away from it (`ip` is the return address
    /// into its caller): the unwind goes on from them when the system stack's walk ends in either.
    pub parked: Option<Regs>,
}

/// Bytes of a Go assembly function's prologue (`push %rbp; mov %rsp,%rbp`), past which `bp` is its frame.
const PROLOGUE: u64 = 4;

/// Where HotSpot's interpreter keeps the running method's `Method*` below its frame pointer (x86-64).
const INTERPRETER_METHOD: u64 = 24;

/// Switches between stacks followed in one unwind at most.
const MAX_SWITCHES: usize = 4;

/// How far below the frame pointer a stack switch left in the chain the return address into the
/// switching function's caller is looked for, where the switching function has no frame of its own
/// (the caller's frame size, at most; the kernel side copies this much below it).
pub const GO_SWITCH_BELOW: u64 = 1024;

/// The stack bytes of an unwind: the copy from the stack pointer, and the goroutine's if any.
#[derive(Clone, Copy)]
struct Copies<'a> {
    sp: u64,
    own: &'a [u8],
    goroutine: Option<Goroutine<'a>>,
}

impl<'a> Copies<'a> {
    /// The copied bytes from `addr` on (empty when none are), from the copy that holds more of them (the
    /// copy from the stack pointer may run into the goroutine's stack, which Go allocates nearby).
    fn from(&self, addr: u64) -> &'a [u8] {
        let tail = |base: u64, bytes: &'a [u8]| bytes.get(usize::try_from(addr.checked_sub(base)?).ok()?..);
        let own = tail(self.sp, self.own).unwrap_or_default();
        let goroutine = self.goroutine.and_then(|g| tail(g.at, g.stack)).unwrap_or_default();
        if goroutine.len() > own.len() {
            goroutine
        } else {
            own
        }
    }

    fn word(&self, addr: u64) -> Option<u64> {
        Some(u64::from_le_bytes(self.from(addr).get(..8)?.try_into().ok()?))
    }
}

/// How one stack's walk ended.
enum Walked {
    Done(Outcome),
    /// In a switching function (`bp` is its frame pointer there): the caller is on the goroutine's stack.
    Switch {
        bp: u64,
    },
    /// At mcall (`bp` is its frame pointer there): the goroutine it switched away from is the caller,
    /// if it was copied.
    Mcall {
        bp: u64,
    },
    /// At morestack (`bp` is the frame pointer there): the goroutine's saved registers lead on, if they
    /// were read, else the frame pointer as at a switch.
    Morestack {
        bp: u64,
    },
}

/// What one step of a walk found.
enum Step {
    /// The caller's return address.
    Caller(u64),
    /// The CFI says the frame has no caller (`_start`, a thread's clone): the stack's real root.
    Root,
    /// No caller found, or one the unwind rules only guessed at (a zero frame pointer): incomplete.
    Stop,
}

impl ProcessUnwinder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an executable mapping `[start, end)` of `image` at file offset `pgoff`.
    /// Mappings that overlap it are replaced (the address space was remapped).
    pub fn add_mapping(&mut self, start: u64, end: u64, pgoff: u64, image: Arc<ObjectImage>) {
        let overlapping: Vec<Range<u64>> = self
            .mapped
            .iter()
            .filter(|(r, _, _)| r.start < end && start < r.end)
            .map(|(r, _, _)| r.clone())
            .collect();
        for old in overlapping {
            self.unwinder.remove_module(old.start);
            self.mapped.retain(|(r, _, _)| r.start != old.start);
            self.go.retain(|(f, _)| !old.contains(&f.start));
            self.go_code.retain(|(r, _, _)| r.start != old.start);
        }
        self.covered = CoveredCache::default();
        let Some(bias) = image.bias(start, pgoff) else { return };
        let module = Module::new(image.path.clone(), start..end, bias, image.sections.clone());
        self.unwinder.add_module(module);
        let live = |r: &Range<u64>| r.start.wrapping_add(bias)..r.end.wrapping_add(bias);
        self.go.extend(
            image.go.iter().map(|(r, f)| (live(r), *f)).filter(|(r, _)| start <= r.start && r.end <= end),
        );
        if image.go_table.is_some() {
            self.go_code.push((start..end, bias, image.clone()));
        }
        self.mapped.push((start..end, image, pgoff));
    }

    /// Sets the JIT code whose frames are stepped by their runtime's layout (see [`JitFrameRule`]),
    /// replacing what was set before: code the runtime freed since may hold other code now.
    pub fn set_jit_code(&mut self, code: Vec<JitCode>) {
        self.unwinder.set_code(code);
    }

    /// How many ranges of JIT code are known.
    pub fn jit_code_len(&self) -> usize {
        self.unwinder.code().len()
    }

    /// The frames of the last unwind that HotSpot's interpreter runs, with the word its frame keeps the
    /// running method in (rbp-24 on x86-64, `interpreter_frame_method_offset`): (index into the frames,
    /// that word). The word is what the copied stack held, not checked: a frame interrupted before its
    /// prologue set rbp up holds another frame's.
    pub fn interpreted(&self) -> &[(usize, u64)] {
        &self.interpreted
    }

    /// A copy with the same mappings, for a forked child.
    pub fn fork(&self) -> Self {
        let mut child = ProcessUnwinder::new();
        for (r, image, pgoff) in &self.mapped {
            child.add_mapping(r.start, r.end, *pgoff, image.clone());
        }
        child
    }

    /// Unwinds a stack. `stack` holds the bytes copied from `regs.sp` upwards; `goroutine`, the goroutine
    /// stack it continues on past Go's switch to the system stack, if one was copied. Frames are written to
    /// `out`, innermost first: the first is the instruction pointer, the rest are return addresses minus
    /// one (so they point into the call instruction, which is what symbolizers should look up).
    ///
    /// [`Outcome::Complete`] only when the walk reached a real root: a Go stack's `goexit`, `mstart`,
    /// `rt0_go` (or `mcall`, whose goroutine is gone), or a frame the CFI says has no caller (`_start`,
    /// a thread's `clone`), or the entry code of the program.
    pub fn unwind(
        &mut self,
        regs: Regs,
        stack: &[u8],
        goroutine: Option<Goroutine<'_>>,
        out: &mut Vec<u64>,
    ) -> Outcome {
        out.clear();
        self.interpreted.clear();
        let copies = Copies { sp: regs.sp, own: stack, goroutine };
        let mut parked = goroutine.and_then(|g| g.parked);
        let mut at = regs;
        for _ in 0..MAX_SWITCHES {
            let bp = match self.walk(at, copies.from(at.sp), out) {
                Walked::Done(outcome) => return outcome,
                Walked::Switch { bp } => bp,
                Walked::Morestack { bp } => match parked.take() {
                    Some(parked) => {
                        at = Regs { ip: parked.ip.wrapping_sub(1), ..parked };
                        continue;
                    }
                    // Its goroutine was descheduled (a preempted one): the system stack is all this
                    // thread runs for, its root here as in Go's traceback.
                    None if goroutine.is_some_and(|g| g.stack.is_empty()) => return Outcome::Complete,
                    None => bp,
                },
                Walked::Mcall { bp } => match parked.take() {
                    Some(parked) => {
                        at = Regs { ip: parked.ip.wrapping_sub(1), ..parked };
                        continue;
                    }
                    // Before Go 1.25, mcall left the goroutine's frame pointer in the chain, as
                    // systemstack does: the unwind goes on from the goroutine frame it leads to.
                    // (Unless the goroutine runs again elsewhere: its frames there are no caller's.)
                    None if goroutine.is_some_and(|g| g.parked.is_none()) => {
                        match self.switch_caller(&copies, bp) {
                            Some((caller, true)) => {
                                at = caller;
                                continue;
                            }
                            _ => return Outcome::Complete,
                        }
                    }
                    None => return Outcome::Complete,
                },
            };
            match self.switch_caller(&copies, bp) {
                Some((caller, _)) => at = caller,
                None => return Outcome::Partial,
            }
        }
        Outcome::Partial
    }

    /// The registers of the goroutine frame a stack switch returns to, from the frame pointer `bp` the
    /// switching function runs with. Where it set up a frame of its own (Go 1.21 on; the vDSO calls),
    /// that frame holds its caller's frame pointer and return address, and the caller's stack pointer is
    /// past both. Where it has none (systemstack and mcall before Go 1.21, morestack), `bp` is its
    /// caller's frame,
    /// and the return address into that caller is below it: found by the direct call of a switching
    /// function right before it, and checked by the caller's frame size (its frame must be `bp`).
    /// The flag says whether the caller was found so; if not (a caller's frame larger than what was
    /// copied below it), the registers are those the chain leads to, past that caller.
    fn switch_caller(&self, copies: &Copies, bp: u64) -> Option<(Regs, bool)> {
        if bp == 0 {
            return None;
        }
        let (next, ret) = (copies.word(bp)?, copies.word(bp.wrapping_add(8))?);
        let past = Regs { ip: ret.wrapping_sub(1), sp: bp + 16, bp: next };
        if self.calls_switch(ret) {
            return Some((past, true));
        }
        for below in (8..=GO_SWITCH_BELOW).step_by(8) {
            let Some(at) = bp.checked_sub(below) else { break };
            let Some(ret) = copies.word(at) else { break };
            let caller = Regs { ip: ret.wrapping_sub(1), sp: at + 8, bp };
            if self.calls_switch(ret) && self.go_frame_links(copies, caller, bp) {
                return Some((caller, true));
            }
        }
        Some((past, false))
    }

    /// Whether the frame at `regs` (a return address into Go code, at most one frameless function
    /// deep) has its frame pointer at `frame`, by the function table's frame sizes.
    fn go_frame_links(&self, copies: &Copies, mut regs: Regs, frame: u64) -> bool {
        for _ in 0..2 {
            let Some(delta) = self.go_sp_delta(regs.ip) else { return false };
            if delta >= 8 && regs.sp + delta - 8 == frame {
                return true;
            }
            let Some(ret) = copies.word(regs.sp + delta) else { return false };
            regs = Regs { ip: ret.wrapping_sub(1), sp: regs.sp + delta + 8, bp: regs.bp };
        }
        false
    }

    /// Whether the instruction before return address `ret` is a direct call of one of Go's stack
    /// switching functions (how the runtime calls them).
    fn calls_switch(&self, ret: u64) -> bool {
        const CALL_REL32: u8 = 0xe8;
        let Some((range, bias, image)) =
            self.go_code.iter().find(|(r, _, _)| r.contains(&ret.wrapping_sub(1)))
        else {
            return false;
        };
        let (Some(text), Some(svma)) = (&image.sections.text, &image.sections.text_svma) else {
            return false;
        };
        let vaddr = ret.wrapping_sub(*bias);
        let Some(off) = vaddr.checked_sub(svma.start).and_then(|o| o.checked_sub(5)) else { return false };
        let Some(call) = usize::try_from(off).ok().and_then(|o| text.get(o..o + 5)) else { return false };
        if call[0] != CALL_REL32 || !range.contains(&ret) {
            return false;
        }
        let rel = i32::from_le_bytes(call[1..5].try_into().expect("4 bytes"));
        let target = ret.wrapping_add_signed(i64::from(rel));
        self.go.iter().any(|(r, f)| {
            r.start == target && matches!(f, GoFrame::Switch | GoFrame::Mcall | GoFrame::Morestack)
        })
    }

    /// The function table's stack-pointer delta at live address `pc` of Go code.
    fn go_sp_delta(&self, pc: u64) -> Option<u64> {
        let (_, bias, image) = self.go_code.iter().find(|(r, _, _)| r.contains(&pc))?;
        image.go_table.as_ref()?.sp_delta(pc.wrapping_sub(*bias))
    }

    /// Whether the CFI of the module at `addr` describes it: where it ends a walk, it says the frame has
    /// no caller (the return address undefined, as `_start` and glibc's thread start mark theirs).
    fn cfi_covers(&mut self, addr: u64) -> bool {
        if let Some(covered) = self.covered.get(addr) {
            return covered;
        }
        let covered = self.search_cfi(addr);
        self.covered.put(addr, covered);
        covered
    }

    /// [`ProcessUnwinder::cfi_covers`], searched in the module's unwind tables.
    fn search_cfi(&self, addr: u64) -> bool {
        use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
        let Some((range, image, pgoff)) = self.mapped.iter().find(|(r, _, _)| r.contains(&addr)) else {
            return false;
        };
        let sections = &image.sections;
        let (Some(hdr), Some(hdr_svma), Some(eh), Some(eh_svma)) = (
            &sections.eh_frame_hdr,
            &sections.eh_frame_hdr_svma,
            &sections.eh_frame,
            &sections.eh_frame_svma,
        ) else {
            return false;
        };
        let Some(bias) = image.bias(range.start, *pgoff) else { return false };
        let vaddr = addr.wrapping_sub(bias);
        let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_svma.start).set_eh_frame(eh_svma.start);
        let bases = match &sections.text_svma {
            Some(t) => bases.set_text(t.start),
            None => bases,
        };
        let Ok(parsed) = EhFrameHdr::new(&hdr[..], LittleEndian).parse(&bases, 8) else { return false };
        let Some(table) = parsed.table() else { return false };
        let eh_frame = EhFrame::new(&eh[..], LittleEndian);
        table
            .fde_for_address(&eh_frame, &bases, vaddr, EhFrame::cie_from_offset)
            .is_ok_and(|fde| fde.contains(vaddr))
    }

    /// One step of a walk from the frame at `address` with registers `regs`.
    fn step(
        &mut self,
        address: FrameAddress,
        regs: &mut UnwindRegsX86_64,
        cache: &mut CacheX86_64,
        read: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Step {
        let pc = address.address_for_lookup();
        // Go code: the function table's stack-pointer delta at the pc, as Go's own traceback reads it,
        // exact wherever the function was interrupted. The frame pointer is the caller's unless it
        // points at this frame's saved one (just below the return address).
        if let Some(delta) = self.go_sp_delta(pc) {
            let (sp, bp) = (regs.sp(), regs.bp());
            let Some(slot) = sp.checked_add(delta) else { return Step::Stop };
            let Ok(ret) = read(slot) else { return Step::Stop };
            let bp = match delta >= 8 && bp == slot - 8 {
                true => match read(bp) {
                    Ok(saved) => saved,
                    Err(()) => return Step::Stop,
                },
                false => bp,
            };
            if ret == 0 {
                return Step::Stop;
            }
            regs.set_sp(slot + 8);
            regs.set_bp(bp);
            return Step::Caller(ret);
        }
        match self.unwinder.unwind_frame(address, regs, cache, read) {
            Ok(Some(ret)) => Step::Caller(ret),
            Ok(None) if self.cfi_covers(pc) => Step::Root,
            Ok(None) => Step::Stop,
            // The entry code (the loader's `_start` while it relocates) has no caller to find.
            Err(_) if at_entry(&self.mapped, pc) => Step::Root,
            Err(_) => Step::Stop,
        }
    }

    /// Appends the frames of one stack to `out`.
    fn walk(&mut self, regs: Regs, stack: &[u8], out: &mut Vec<u64>) -> Walked {
        let sp = regs.sp;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let bytes = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let mut cache = self.cache.take().unwrap_or_else(|| Box::new(CacheX86_64::new()));
        let mut uregs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut address = FrameAddress::from_instruction_pointer(regs.ip);
        let walked = loop {
            let (a, returns) = match address {
                FrameAddress::InstructionPointer(a) => (a, false),
                FrameAddress::ReturnAddress(a) => (u64::from(a) - 1, true),
            };
            out.push(a);
            if self.unwinder.interprets(a) {
                if let Ok(method) = read_stack(uregs.bp().wrapping_sub(INTERPRETER_METHOD)) {
                    self.interpreted.push((out.len() - 1, method));
                }
            }
            // What lies past a Go root, or past systemstack on the system stack, is no caller's frame.
            // (A switching function interrupted past its prologue may have switched already.)
            match self.go.iter().find(|(r, _)| r.contains(&a)) {
                Some((_, GoFrame::Root)) => break Walked::Done(Outcome::Complete),
                Some((_, GoFrame::End)) => break Walked::Done(Outcome::Partial),
                Some((_, GoFrame::Mcall)) => break Walked::Mcall { bp: uregs.bp() },
                Some((r, GoFrame::Switch)) if returns || a >= r.start + PROLOGUE => {
                    break Walked::Switch { bp: uregs.bp() }
                }
                // It switches stacks only to call newstack: the frame that returns there.
                Some((_, GoFrame::Morestack)) if returns => break Walked::Morestack { bp: uregs.bp() },
                _ => {}
            }
            if out.len() >= MAX_FRAMES {
                break Walked::Done(Outcome::Partial);
            }
            match self.step(address, &mut uregs, &mut cache, &mut read_stack) {
                Step::Caller(ret) => match FrameAddress::from_return_address(ret) {
                    Some(next) => address = next,
                    None => break Walked::Done(Outcome::Partial),
                },
                Step::Root => break Walked::Done(Outcome::Complete),
                // A frame in the entry code is the process's first: what its unwind rule read as its
                // caller (argc, at the loader's first instruction) is none, and the stack is whole.
                Step::Stop if out.len() >= 2 && at_entry(&self.mapped, out[out.len() - 2]) => {
                    out.pop();
                    break Walked::Done(Outcome::Complete);
                }
                Step::Stop => break Walked::Done(Outcome::Partial),
            }
        };
        self.cache = Some(cache);
        walked
    }
}

#[cfg(test)]
mod tests {
    use super::{CoveredCache, FileBytes, ObjectImage, ProcessUnwinder, Regs, COVERED_SLOTS};
    use object::Object;
    use object::ObjectSymbol;
    use std::ops::Range;
    use std::sync::Arc;

    #[inline(never)]
    fn marker() -> u32 {
        std::hint::black_box(42)
    }

    /// The load bias computed from our own mapping turns a live function address back into the
    /// function's address in the file's symbol table.
    #[test]
    fn bias_maps_live_addresses_to_file_addresses() {
        let exe = FileBytes::map(&std::fs::File::open("/proc/self/exe").unwrap()).unwrap();
        let image = ObjectImage::parse("self", &exe).unwrap();
        let me = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let live = marker as *const () as u64;
        let line = maps
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| {
                let (s, e) = f[0].split_once('-').unwrap();
                let (s, e) = (u64::from_str_radix(s, 16).unwrap(), u64::from_str_radix(e, 16).unwrap());
                f.len() >= 6 && std::path::Path::new(f[5]) == me && (s..e).contains(&live)
            })
            .expect("marker lies in a mapping of the test binary");
        let start = u64::from_str_radix(line[0].split_once('-').unwrap().0, 16).unwrap();
        let bias = image.bias(start, u64::from_str_radix(line[2], 16).unwrap()).unwrap();
        let obj = object::File::parse(&*exe).unwrap();
        let sym = obj
            .symbols()
            .find(|s| s.name().is_ok_and(|n| n.contains("tests6marker")))
            .expect("marker symbol");
        assert_eq!(live - bias, sym.address());
        assert!(!image.build_id.is_empty(), "rustc writes a GNU build id");
    }

    /// The cache of where the CFI covers a walk's end answers what was put for an address, and nothing
    /// for an address never put, nor for one whose slot another took since.
    #[test]
    fn covered_cache_answers_what_was_put_for_that_address() {
        let mut cache = CoveredCache::default();
        assert_eq!(cache.get(0), None, "an empty slot answers nothing for address 0");
        cache.put(0x401000, true);
        cache.put(0x7f00_0000_1234, false);
        assert_eq!((cache.get(0x401000), cache.get(0x7f00_0000_1234)), (Some(true), Some(false)));
        assert_eq!(cache.get(0x401001), None);
        // Another address of the first one's slot replaces it.
        let rival = (1..u64::MAX)
            .map(|k| 0x401000 + k)
            .find(|&a| CoveredCache::slot(a) == CoveredCache::slot(0x401000))
            .unwrap();
        cache.put(rival, false);
        assert_eq!((cache.get(0x401000), cache.get(rival)), (None, Some(false)));
        assert!((0..10_000u64).all(|a| CoveredCache::slot(a * 16) < COVERED_SLOTS));
    }

    /// One line of /proc/self/maps: the range, its file offset, permissions and path.
    struct Mapping {
        range: Range<u64>,
        pgoff: u64,
        exec: bool,
        path: String,
    }

    fn own_mappings() -> Vec<Mapping> {
        let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let (s, e) = f[0].split_once('-').unwrap();
                let path = f.get(5).copied().unwrap_or_default().to_string();
                Mapping { range: hex(s)..hex(e), pgoff: hex(f[2]), exec: f[1].contains('x'), path }
            })
            .collect()
    }

    /// The registers at a point of the innermost function and a copy of the stack from there up to the
    /// top of its mapping (at most 256 KB): what the kernel hands over with a sample.
    #[inline(never)]
    fn capture() -> (Regs, Vec<u8>) {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers into outputs; touches no memory and leaves rsp as it was.
        unsafe {
            std::arch::asm!("lea {ip}, [rip]", "mov {sp}, rsp", "mov {bp}, rbp",
                ip = out(reg) ip, sp = out(reg) sp, bp = out(reg) bp, options(nomem, nostack));
        }
        let top =
            own_mappings().into_iter().find(|m| m.range.contains(&sp)).expect("stack mapping").range.end;
        let len = (top - sp).min(256 << 10) as usize;
        let mut stack = vec![0u8; len];
        // SAFETY: [sp, sp + len) lies in this thread's stack mapping (readable); the frames above `sp`
        // that unwinding reads (return addresses, saved registers) stay as they were while it is copied.
        unsafe { std::ptr::copy_nonoverlapping(sp as *const u8, stack.as_mut_ptr(), len) };
        (Regs { ip, sp, bp }, stack)
    }

    #[inline(never)]
    fn middle() -> (Regs, Vec<u8>) {
        let r = capture();
        std::hint::black_box(r)
    }

    #[inline(never)]
    fn outer() -> (Regs, Vec<u8>) {
        let r = middle();
        std::hint::black_box(r)
    }

    /// An unwinder of this process's code mappings.
    fn own_unwinder() -> ProcessUnwinder {
        let mut unwinder = ProcessUnwinder::new();
        let mut images: Vec<(String, Arc<ObjectImage>)> = Vec::new();
        for m in own_mappings().into_iter().filter(|m| m.exec && m.path.starts_with('/')) {
            let image = match images.iter().find(|(p, _)| *p == m.path) {
                Some((_, i)) => i.clone(),
                None => {
                    let bytes = FileBytes::map(&std::fs::File::open(&m.path).unwrap()).unwrap();
                    let i = Arc::new(ObjectImage::parse(&m.path, &bytes).unwrap());
                    images.push((m.path.clone(), i.clone()));
                    i
                }
            };
            unwinder.add_mapping(m.range.start, m.range.end, m.pgoff, image);
        }
        unwinder
    }

    /// A sample at the loader's first instruction (a fresh process faulting in its first page): no frame
    /// pointer yet, argc where a return address would be. The entry code is the process's first frame:
    /// the stack is that one frame, complete.
    #[test]
    fn the_first_instruction_of_a_process_is_a_whole_stack() {
        let mut unwinder = own_unwinder();
        let loader = own_mappings()
            .into_iter()
            .find(|m| m.exec && m.path.contains("/ld-linux"))
            .expect("the dynamic loader's code mapping");
        let bytes = FileBytes::map(&std::fs::File::open(&loader.path).unwrap()).unwrap();
        let image = ObjectImage::parse(&loader.path, &bytes).unwrap();
        let entry = image.bias(loader.range.start, loader.pgoff).unwrap() + image.entry;
        // argc 1, argv[0], the NULL after argv, an empty environment.
        let stack: Vec<u8> = [1u64, 0x7ffd_0000_1000, 0, 0].iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut frames = Vec::new();
        let outcome =
            unwinder.unwind(Regs { ip: entry, sp: 0x7ffd_0000_0000, bp: 0 }, &stack, None, &mut frames);
        assert_eq!((outcome, frames), (super::Outcome::Complete, vec![entry]));
    }

    /// A stack of an interpreted Java method called from another interpreted one: each frame names the
    /// word its frame keeps at rbp-24 (the method), by its index among the frames.
    #[test]
    fn interpreted_frames_name_the_word_their_method_is_kept_in() {
        use super::{JitCode, JitFrameRule};
        let mut unwinder = ProcessUnwinder::new();
        unwinder.set_jit_code(vec![
            JitCode { start: 0x3000, end: 0x4000, rule: JitFrameRule::Interpreter },
            JitCode { start: 0x5000, end: 0x5100, rule: JitFrameRule::FramePointer },
        ]);
        // 0x7000: the leaf's frame (rbp 0x7020): method 0xaaa0 at 0x7008, sender sp 0x7030 at 0x7018,
        // saved rbp 0x7050 and the return into the interpreter at 0x7020; its caller's frame (rbp 0x7050):
        // method 0xbbb0 at 0x7038, sender sp 0x7060 at 0x7048, saved rbp 0x7070 and the return into the
        // call stub; the stub's frame at 0x7070 ends the chain.
        let words: [u64; 18] =
            [0, 0xaaa0, 0, 0x7030, 0x7050, 0x3500, 0, 0xbbb0, 0, 0x7060, 0x7070, 0x5020, 0, 0, 0, 0, 0, 0];
        let stack: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut frames = Vec::new();
        unwinder.unwind(Regs { ip: 0x3400, sp: 0x7000, bp: 0x7020 }, &stack, None, &mut frames);
        assert_eq!(frames[..3], [0x3400, 0x34ff, 0x501f]);
        assert_eq!(unwinder.interpreted(), [(0, 0xaaa0), (1, 0xbbb0)]);
        unwinder.unwind(Regs { ip: 0x5010, sp: 0x7060, bp: 0x7070 }, &stack[0x60..], None, &mut frames);
        assert_eq!(unwinder.interpreted(), [], "a walk forgets the last one's");
    }

    /// Unwinding this test's own stack through the CFI of its binary (built without frame pointers in
    /// the optimized test profile, so the frame-pointer chain alone would not do) finds capture's callers
    /// in order: middle, then outer, then the test function, each frame inside the function it names.
    #[test]
    fn the_test_binary_unwinds_its_own_stack_through_its_cfi() {
        let (regs, stack) = outer();
        let mut unwinder = own_unwinder();
        let mut frames = Vec::new();
        unwinder.unwind(regs, &stack, None, &mut frames);

        let exe = FileBytes::map(&std::fs::File::open("/proc/self/exe").unwrap()).unwrap();
        let obj = object::File::parse(&*exe).unwrap();
        let image = ObjectImage::parse("self", &exe).unwrap();
        let me = std::fs::read_link("/proc/self/exe").unwrap();
        let text = own_mappings()
            .into_iter()
            .find(|m| m.exec && std::path::Path::new(&m.path) == me && m.range.contains(&regs.ip))
            .expect("the test binary's code mapping");
        let bias = image.bias(text.range.start, text.pgoff).unwrap();
        let function_of = |live: u64| {
            obj.symbols()
                .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
                .find(|s| (s.address()..s.address() + s.size()).contains(&(live - bias)))
                .and_then(|s| s.name().ok().map(str::to_string))
                .unwrap_or_default()
        };
        let names: Vec<String> = frames.iter().take(4).map(|&a| function_of(a)).collect();
        let expected = ["5tests7capture", "5tests6middle", "5tests5outer", "the_test_binary_unwinds_its_own"];
        assert_eq!(names.len(), 4, "{frames:x?}");
        for (name, want) in names.iter().zip(expected) {
            assert!(name.contains(want), "expected {want} in {names:?}");
        }
    }
}
