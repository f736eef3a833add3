//! The eBPF sources: generated skeletons (see build.rs) behind safe wrappers. Only this module touches
//! libbpf. Programs detach when the wrapper is dropped, on every exit path.

mod calibrate;
mod calls;
mod clock;
mod exits;
mod mem;
mod offcpu;
mod stacks;
mod syscalls;

pub use calls::{CallCount, CallProbe, StackSampling};
pub use clock::ClockFilter;
pub use exits::ExitWatch;
pub use mem::{MemEvent, MemProbe};
pub use offcpu::{OffCpuConfig, OffCpuProbe};
pub use stacks::{StacksProbe, Taken};
pub use syscalls::{syscall_numbers, Seen, SyscallCost, SyscallProbe};

use crate::RecordError;
use calls_skel::types::ws_sample as UserSampleRec;

#[allow(clippy::all, clippy::undocumented_unsafe_blocks, dead_code, unused_imports, unused_qualifications)]
#[allow(non_camel_case_types)]
#[allow(non_upper_case_globals, non_snake_case, missing_docs)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/syscalls.skel.rs"));
}

#[allow(clippy::all, clippy::undocumented_unsafe_blocks, dead_code, unused_imports, unused_qualifications)]
#[allow(non_camel_case_types)]
#[allow(non_upper_case_globals, non_snake_case, missing_docs)]
mod calls_skel {
    include!(concat!(env!("OUT_DIR"), "/calls.skel.rs"));
}

#[allow(clippy::all, clippy::undocumented_unsafe_blocks, dead_code, unused_imports, unused_qualifications)]
#[allow(non_camel_case_types)]
#[allow(non_upper_case_globals, non_snake_case, missing_docs)]
mod exits_skel {
    include!(concat!(env!("OUT_DIR"), "/exits.skel.rs"));
}

#[allow(clippy::all, clippy::undocumented_unsafe_blocks, dead_code, unused_imports, unused_qualifications)]
#[allow(non_camel_case_types)]
#[allow(non_upper_case_globals, non_snake_case, missing_docs)]
mod clock_skel {
    include!(concat!(env!("OUT_DIR"), "/clock.skel.rs"));
}

#[allow(clippy::all, clippy::undocumented_unsafe_blocks, dead_code, unused_imports, unused_qualifications)]
#[allow(non_camel_case_types)]
#[allow(non_upper_case_globals, non_snake_case, missing_docs)]
mod mem_skel {
    include!(concat!(env!("OUT_DIR"), "/mem.skel.rs"));
}

#[allow(clippy::all, clippy::undocumented_unsafe_blocks, dead_code, unused_imports, unused_qualifications)]
#[allow(non_camel_case_types)]
#[allow(non_upper_case_globals, non_snake_case, missing_docs)]
mod offcpu_skel {
    include!(concat!(env!("OUT_DIR"), "/offcpu.skel.rs"));
}

#[allow(clippy::all, clippy::undocumented_unsafe_blocks, dead_code, unused_imports, unused_qualifications)]
#[allow(non_camel_case_types)]
#[allow(non_upper_case_globals, non_snake_case, missing_docs)]
mod stacks_skel {
    include!(concat!(env!("OUT_DIR"), "/stacks.skel.rs"));
}

/// Fails early, with the fix, where eBPF cannot work: no kernel BTF.
fn check_btf() -> Result<(), RecordError> {
    if std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        Ok(())
    } else {
        Err(RecordError::NoBtf)
    }
}

/// Maps a libbpf failure to the error the user can act on.
fn classify(what: &str, e: libbpf_rs::Error) -> RecordError {
    let text = format!("{e}");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root && text.contains("Permission denied") {
        // Root is allowed: the verifier refused the program (EACCES).
        RecordError::Bpf(format!(
            "{what}: the kernel's verifier refused the program ({text}); WHYSLOW_DEBUG=1 prints its log"
        ))
    } else if matches!(e.kind(), libbpf_rs::ErrorKind::PermissionDenied)
        || text.contains("Operation not permitted")
    {
        RecordError::BpfPermission(text)
    } else {
        RecordError::Bpf(format!("{what}: {text}"))
    }
}

/// Puts process `pid` into a program's `tracked` map (bpf/track.h): observed from now on, with the
/// processes it forks; a `launched` command (still whyslow's forked child) from its exec on.
fn track(tracked: &impl libbpf_rs::MapCore, pid: u32, launched: bool) -> Result<(), RecordError> {
    const TRACKED: u8 = 1; // WS_TRACKED, WS_ARMED in bpf/track.h
    const ARMED: u8 = 2;
    let state = if launched { ARMED } else { TRACKED };
    tracked.update(&pid.to_ne_bytes(), &[state], libbpf_rs::MapFlags::ANY).map_err(|e| classify("track", e))
}

/// Takes process `pid` out of a program's `tracked` and `go_procs` maps (the program leaves it alone from
/// now on; the processes it forked stay tracked).
fn untrack(tracked: &impl libbpf_rs::MapCore, go_procs: &impl libbpf_rs::MapCore, pid: u32) {
    let _ = tracked.delete(&pid.to_ne_bytes());
    let _ = go_procs.delete(&pid.to_ne_bytes());
}

/// Puts process `pid` into a program's `go_procs` map (bpf/go.h) when it runs Go (`go`).
fn track_go(go_procs: &impl libbpf_rs::MapCore, pid: u32, go: bool) -> Result<(), RecordError> {
    if !go {
        return Ok(());
    }
    go_procs.update(&pid.to_ne_bytes(), &[1], libbpf_rs::MapFlags::ANY).map_err(|e| classify("go_procs", e))
}

/// Puts process `pid` into a program's `py_procs` map (bpf/python.h): its Python frames are read from
/// now on, its CPython's `_PyRuntime` at `runtime`, its structs laid out as `layout` says.
fn track_python(
    py_procs: &impl libbpf_rs::MapCore,
    pid: u32,
    runtime: u64,
    layout: &whyslow_python::Layout,
) -> Result<(), RecordError> {
    let p = clock::py_proc(runtime, layout);
    py_procs
        .update(&pid.to_ne_bytes(), bytes_of(&p), libbpf_rs::MapFlags::ANY)
        .map_err(|e| classify("python map", e))
}

/// A ring buffer of a program's records, decoded as they are read and kept until drained, and the
/// records it had no room for, reported as they grow.
struct RecordRing {
    ring: libbpf_rs::RingBuffer<'static>,
    records: std::rc::Rc<std::cell::RefCell<Vec<whyslow_convert::records::Timed>>>,
    lost_reported: u64,
}

impl RecordRing {
    /// Sizes a ring map before its program loads: `bytes` rounded up to a power of two, 1 MB at least.
    fn size(map: &mut libbpf_rs::OpenMapMut<'_>, bytes: usize) -> Result<(), RecordError> {
        let bytes = bytes.next_power_of_two().max(1 << 20) as u32;
        map.set_max_entries(bytes).map_err(|e| classify("ring buffer", e))
    }

    fn new(
        map: &impl libbpf_rs::MapCore,
        decode: impl Fn(&[u8]) -> Option<whyslow_convert::records::Timed> + 'static,
    ) -> Result<RecordRing, RecordError> {
        let records = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let sink = records.clone();
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(map, move |data: &[u8]| {
            if let Some(t) = decode(data) {
                sink.borrow_mut().push(t);
            }
            0
        })
        .map_err(|e| classify("ring buffer", e))?;
        Ok(RecordRing { ring: b.build().map_err(|e| classify("ring buffer", e))?, records, lost_reported: 0 })
    }

    /// Appends the records that arrived since the last call, and a lost record for those lost since
    /// then, `lost` being the program's count of them so far.
    fn drain(&mut self, into: &mut Vec<whyslow_convert::records::Timed>, lost: u64) {
        use whyslow_convert::records::{Record, Timed};
        // Read without a syscall: the ring is drained on the reader's clock (bpf/rings.h).
        let _ = self.ring.consume();
        into.append(&mut self.records.borrow_mut());
        if lost > self.lost_reported {
            into.push(Timed { time: 0, record: Record::Lost(lost - self.lost_reported) });
            self.lost_reported = lost;
        }
    }
}

/// Bytes of user stack a program copies at most (bpf/ustack.h's STACK_MAX, which every program uses).
const STACK_MAX: u32 = 16384;
/// Where a user-stack sample's stack copy starts (bpf/ustack.h's `struct ws_sample`, which the call and
/// syscall programs both send: their skeletons generate the same type).
const USTACK_OFFSET: usize = std::mem::offset_of!(UserSampleRec, ustack);
const _: () = assert!(std::mem::size_of::<UserSampleRec>() - USTACK_OFFSET >= STACK_MAX as usize);
const _: () = assert!(std::mem::size_of::<UserSampleRec>() == std::mem::size_of::<skel::types::ws_sample>());
const _: () = assert!(USTACK_OFFSET == std::mem::offset_of!(skel::types::ws_sample, ustack));

/// A user-stack sample record: the sample (its id, period and raw data left for the program's reader to
/// set) and the fields that say what it stands for.
struct UserSample {
    time: u64,
    sample: whyslow_convert::records::Sample,
    /// The call probe's index (0 for a syscall).
    probe: u32,
    /// Keyed call stacks: the key (return address, stack id) and the hits it stands for. Syscalls: the
    /// syscall's number in `ret`.
    ret: u64,
    stack: u64,
    weight: u64,
}

/// Decodes a `struct ws_sample` (bpf/ustack.h) as the call and syscall programs lay it out; None when the
/// record is short.
fn decode_user_sample(b: &[u8]) -> Option<UserSample> {
    use std::mem::offset_of;
    use UserSampleRec as Rec;
    if b.len() < USTACK_OFFSET {
        return None;
    }
    let u64_of = |at| u64_at(b, at);
    let u32_of = |at| u32_at(b, at);
    let bytes = (u32_of(offset_of!(Rec, ustack_bytes)) as usize).min(b.len() - USTACK_OFFSET);
    let regs = whyslow_convert::records::UserRegs {
        ip: u64_of(offset_of!(Rec, ip)),
        sp: u64_of(offset_of!(Rec, sp)),
        bp: u64_of(offset_of!(Rec, bp)),
        ax: u64_of(offset_of!(Rec, ax)),
        di: u64_of(offset_of!(Rec, di)),
        si: u64_of(offset_of!(Rec, si)),
        dx: u64_of(offset_of!(Rec, dx)),
    };
    let sample = whyslow_convert::records::Sample {
        pid: u32_of(offset_of!(Rec, tgid)),
        tid: u32_of(offset_of!(Rec, tid)),
        id: 0,
        period: 0,
        kernel: Vec::new(),
        user: Vec::new(),
        regs: Some(regs),
        stack: b[USTACK_OFFSET..USTACK_OFFSET + bytes].to_vec(),
        goroutine: None,
        python: Vec::new(),
        raw: Vec::new(),
    };
    Some(UserSample {
        time: u64_of(offset_of!(Rec, time)),
        sample,
        probe: u32_of(offset_of!(Rec, probe)),
        ret: u64_of(offset_of!(Rec, ret)),
        stack: u64_of(offset_of!(Rec, stack)),
        weight: u64_of(offset_of!(Rec, weight)),
    })
}

/// The sum over every CPU and every slot in `slots` of a per-CPU array of u64 counters.
fn per_cpu_total(map: &impl libbpf_rs::MapCore, slots: std::ops::Range<u32>) -> u64 {
    slots
        .filter_map(|k| map.lookup_percpu(&k.to_ne_bytes(), libbpf_rs::MapFlags::ANY).ok().flatten())
        .flatten()
        .map(|v| u64_at(&v, 0))
        .sum()
}

/// The sum over every CPU's row and every slot in `slots` of the programs' `drops` counters (bpf/drops.h),
/// read from the program's mapped .bss while the programs add to them (None: not mapped, nothing read).
fn drops_total<const N: usize>(rows: Option<&[[u64; N]]>, slots: std::ops::Range<usize>) -> u64 {
    rows.unwrap_or_default()
        .iter()
        // SAFETY: an aligned u64 in a live mapping; the kernel's atomic adds are whole-word writes.
        .flat_map(|row| row[slots.clone()].iter().map(|v| unsafe { std::ptr::read_volatile(v) }))
        .sum()
}

/// A C struct of the programs, as the skeleton generates it (so its layout is the C one), made only of
/// integers and arrays of them: every bit pattern is a value.
///
/// # Safety
/// Implement only for `#[repr(C)]` types whose fields are all integers or arrays of integers.
unsafe trait Plain: Copy + Default {}

// SAFETY: each is a generated #[repr(C)] struct of u32/u64 fields only (bpf/calls.bpf.c).
unsafe impl Plain for calls_skel::types::ws_site_key {}
// SAFETY: as above.
unsafe impl Plain for calls_skel::types::ws_site_val {}
// SAFETY: as above.
unsafe impl Plain for calls_skel::types::ws_stack_key {}
// SAFETY: as above.
unsafe impl Plain for calls_skel::types::ws_stack_val {}
// SAFETY: as above.
unsafe impl Plain for calls_skel::types::ws_call_key {}
// SAFETY: as above.
unsafe impl Plain for calls_skel::types::ws_call_val {}
// SAFETY: as above; its enums are #[repr(transparent)] u32s.
unsafe impl Plain for calls_skel::types::ws_size_arg {}
// SAFETY: as above, with arrays of u8 and u64.
unsafe impl Plain for calls_skel::types::ws_sample {}
// SAFETY: as above (bpf/mem.bpf.c): u32 fields, its enum a #[repr(transparent)] u32.
unsafe impl Plain for mem_skel::types::ws_mem_site {}
// SAFETY: as above: u32 and u64 fields.
unsafe impl Plain for mem_skel::types::ws_mem_event {}
// SAFETY: as above: the event, u64 and u32 fields and an array of u8.
unsafe impl Plain for mem_skel::types::ws_mem_alloc {}
// SAFETY: as above (bpf/offcpu.bpf.c).
unsafe impl Plain for offcpu_skel::types::ws_block {}
// SAFETY: as above (bpf/python.h): a u64, u16s and two u8s, 32 bytes with no padding.
unsafe impl Plain for clock_skel::types::ws_py_proc {}
// SAFETY: as above (bpf/syscalls.bpf.c): u32 fields only.
unsafe impl Plain for skel::types::ws_key {}
// SAFETY: as above: u64 fields and an array of them.
unsafe impl Plain for skel::types::ws_stat {}
// SAFETY: as above: u64, u32 and u16 fields and an array of u64.
unsafe impl Plain for skel::types::ws_inflight {}
// SAFETY: as above: u8 and i8 fields.
unsafe impl Plain for skel::types::ws_trace_cfg {}
// SAFETY: as above: u64, u32 and i64 fields, arrays of u64 and of C chars.
unsafe impl Plain for skel::types::ws_event {}

/// The bytes of a C struct as the programs lay it out (the generated type has the C layout).
fn bytes_of<T: Plain>(v: &T) -> &[u8] {
    // SAFETY: a Plain type is made of integers with explicit padding fields, so every byte is
    // initialized; the slice borrows `v` for its lifetime.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// A map key or value as its C struct; bytes past the end of a short `b` read as zero.
fn plain<T: Plain>(b: &[u8]) -> T {
    let mut v = T::default();
    let n = b.len().min(std::mem::size_of::<T>());
    // SAFETY: `v` is a T owned by this frame, at least `n` bytes long; any bytes make a valid T (Plain),
    // and `b` and `v` do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), (&mut v as *mut T).cast::<u8>(), n) };
    v
}

/// Every (key, value) of a hash map, as their C structs (entries deleted meanwhile are skipped).
fn entries<K: Plain, V: Plain>(map: &impl libbpf_rs::MapCore) -> Vec<(K, V)> {
    map.keys()
        .filter_map(|k| Some((plain(&k), plain(&map.lookup(&k, libbpf_rs::MapFlags::ANY).ok()??))))
        .collect()
}

/// A native-endian u32 at `at` in a map value or record (0 when it is short).
fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |s| u32::from_ne_bytes(s.try_into().expect("4 bytes")))
}

/// A native-endian u64 at `at` in a map value (0 when the value is short).
fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |s| u64::from_ne_bytes(s.try_into().expect("8 bytes")))
}

/// libbpf's own messages go to stderr only when asked (`WHYSLOW_DEBUG=1`): errors reach the user as one
/// line through [`RecordError`].
fn quiet_libbpf() {
    if std::env::var_os("WHYSLOW_DEBUG").is_none() {
        libbpf_rs::set_print(None);
    }
}
