//! HotSpot's code cache read from a running JVM's memory: every code blob's range and frame layout, so
//! compiled Java frames unwind without -XX:+PreserveFramePointer (compiled code keeps no frame pointer
//! and has no CFI, but each blob knows its frame size).
//!
//! Where things are comes from the JVM itself: libjvm.so exports `gHotSpotVMStructs` and
//! `gHotSpotVMTypes`, tables of (type, field, offset or static address) and (type, size) that debuggers
//! and profilers read (the serviceability agent, the OpenTelemetry eBPF profiler). From them: the code
//! heaps (`CodeCache::_heaps`), each heap's committed memory and segment map (a byte per segment: 0 at
//! a block's first segment, 0xFF where free), each block's header (`HeapBlock`: length, used) and the
//! `CodeBlob` after it (code range, frame size in words, where its prologue is complete, its name). The
//! code range is two pointers up to JDK 21 (`_code_begin`, `_code_end`) and two offsets from the blob
//! from JDK 22 on (`_code_offset`, `_data_offset`), whose `_frame_complete_offset` shrank to 16 bits:
//! each field is read at the width its type string gives (a block's length went from size_t to uint32_t
//! in JDK 22 too).
//!
//! Reads /proc/PID/mem only: it never writes to or stops the JVM. A layout it does not know (another
//! JVM, a field renamed) is an error naming the missing piece, never a guess.

use object::{Object, ObjectSymbol};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use whyslow_convert::MethodLayout;
use whyslow_unwind::{JitCode, JitFrameRule};

/// Why a JVM's code cache could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("cannot {0}: {1}")]
    Io(&'static str, std::io::Error),
    #[error("its code cache's layout is not known: no {0}")]
    Missing(String),
}

/// Fewer blocks than this are read per heap (a code cache is at most 2 GB of 64+ byte segments).
const MAX_BLOCKS: usize = 1 << 22;

/// The bytes of a code blob's header read at once (its fields sit in the first 100 bytes on JDK 11-21).
const BLOB_HEADER: usize = 256;

/// What a VM structure entry says: a field's offset, or a static field's address, and its type.
#[derive(Debug, Clone)]
struct Entry {
    offset: u64,
    address: u64,
    type_string: String,
}

/// Where a code blob's code is.
#[derive(Debug, Clone, Copy)]
enum CodeRange {
    /// Fields holding its first and end addresses (JDK 21 and before).
    Pointers { begin: u64, end: u64 },
    /// Fields holding offsets (32-bit) of its first and end bytes from the blob's start (JDK 22 on).
    Offsets { begin: u64, end: u64 },
}

/// An integer field: its offset, width in bytes (2, 4 or 8) and signedness, from its type string.
#[derive(Debug, Clone, Copy)]
struct IntField {
    offset: u64,
    width: usize,
    signed: bool,
}

impl IntField {
    fn of(e: &Entry) -> Option<IntField> {
        let (width, signed) = match e.type_string.as_str() {
            "int16_t" | "short" | "jshort" => (2, true),
            "uint16_t" | "u2" | "unsigned short" => (2, false),
            "int" | "jint" | "int32_t" => (4, true),
            "uint32_t" | "u4" | "juint" | "unsigned int" => (4, false),
            "size_t" | "uintx" | "uint64_t" | "u8" => (8, false),
            "intx" | "int64_t" | "jlong" => (8, true),
            _ => return None,
        };
        Some(IntField { offset: e.offset, width, signed })
    }

    fn read(self, b: &[u8]) -> Option<i64> {
        let at = self.offset as usize;
        let mut raw = [0u8; 8];
        raw[..self.width].copy_from_slice(b.get(at..at + self.width)?);
        let v = u64::from_le_bytes(raw);
        let shift = 64 - 8 * self.width as u32;
        Some(if self.signed { ((v << shift) as i64) >> shift } else { v as i64 })
    }
}

/// Where the code cache's structures are in one JVM (found once, then read at every refresh).
#[derive(Debug, Clone)]
pub struct Layout {
    heaps: u64,
    array_len: u64,
    array_data: u64,
    heap_memory: u64,
    heap_segmap: u64,
    heap_log2_segment: u64,
    vs_low_boundary: u64,
    vs_high: u64,
    vs_low: u64,
    block_length: IntField,
    block_used: u64,
    block_size: u64,
    blob_name: u64,
    blob_frame_size: IntField,
    blob_complete: IntField,
    blob_code: CodeRange,
    /// Where its methods' names are, for its interpreted frames (None: a field is missing).
    pub methods: Option<MethodLayout>,
}

/// A process's memory, read through /proc/PID/mem.
struct Mem(File);

impl Mem {
    fn open(pid: u32) -> Result<Mem, LayoutError> {
        File::open(format!("/proc/{pid}/mem"))
            .map(Mem)
            .map_err(|e| LayoutError::Io("open the JVM's memory", e))
    }

    fn bytes(&self, addr: u64, len: usize) -> Result<Vec<u8>, LayoutError> {
        let mut buf = vec![0u8; len];
        self.0.read_exact_at(&mut buf, addr).map_err(|e| LayoutError::Io("read the JVM's memory", e))?;
        Ok(buf)
    }

    fn u64(&self, addr: u64) -> Result<u64, LayoutError> {
        Ok(u64::from_le_bytes(self.bytes(addr, 8)?.try_into().unwrap_or_default()))
    }

    fn i32(&self, addr: u64) -> Result<i32, LayoutError> {
        Ok(i32::from_le_bytes(self.bytes(addr, 4)?.try_into().unwrap_or_default()))
    }

    /// A NUL-terminated string of at most 128 bytes (type and field names are short).
    fn cstr(&self, addr: u64) -> Result<String, LayoutError> {
        let mut buf = [0u8; 128];
        // A name near the end of a mapping: read what there is.
        let n = self.0.read_at(&mut buf, addr).map_err(|e| LayoutError::Io("read the JVM's memory", e))?;
        let s = &buf[..n];
        let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        Ok(String::from_utf8_lossy(&s[..end]).into_owned())
    }
}

/// libjvm.so of `pid`: its path as the process sees it and its load bias (where its first segment,
/// at file offset and address 0, is mapped).
fn libjvm(pid: u32) -> Option<(String, u64)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let path = *f.get(5)?;
        (path.ends_with("/libjvm.so") && f.get(2)? == &"00000000").then(|| {
            let start = u64::from_str_radix(f[0].split('-').next()?, 16).ok()?;
            Some((path.to_string(), start))
        })?
    })
}

impl Layout {
    /// Reads the VM structure tables of JVM `pid`.
    pub fn read(pid: u32) -> Result<Layout, LayoutError> {
        let missing = |what: &str| LayoutError::Missing(what.to_string());
        let (path, bias) = libjvm(pid).ok_or_else(|| missing("libjvm.so mapping"))?;
        let file = crate::files::open(pid, &path).map_err(|e| LayoutError::Io("open libjvm.so", e))?;
        let bytes = whyslow_unwind::FileBytes::map(&file).map_err(|e| LayoutError::Io("map libjvm.so", e))?;
        let obj = object::File::parse(&*bytes).map_err(|_| missing("libjvm.so as ELF"))?;
        let symbols: HashMap<&str, u64> = obj
            .dynamic_symbols()
            .filter_map(|s| Some((s.name().ok()?, s.address())))
            .filter(|(n, _)| n.starts_with("gHotSpotVM"))
            .collect();
        let mem = Mem::open(pid)?;
        let var = |name: &str| -> Result<u64, LayoutError> {
            let at = symbols.get(name).ok_or_else(|| missing(name))?;
            mem.u64(bias + at)
        };
        let (structs, stride) = (var("gHotSpotVMStructs")?, var("gHotSpotVMStructEntryArrayStride")?);
        let (type_name, field_name) =
            (var("gHotSpotVMStructEntryTypeNameOffset")?, var("gHotSpotVMStructEntryFieldNameOffset")?);
        let (offset, address) =
            (var("gHotSpotVMStructEntryOffsetOffset")?, var("gHotSpotVMStructEntryAddressOffset")?);
        let type_string = var("gHotSpotVMStructEntryTypeStringOffset")?;
        let mut fields: HashMap<(String, String), Entry> = HashMap::new();
        for i in 0..10_000u64 {
            let e = structs + i * stride;
            let t = mem.u64(e + type_name)?;
            if t == 0 {
                break;
            }
            let f = mem.u64(e + field_name)?;
            let (ty, field) = (mem.cstr(t)?, if f == 0 { String::new() } else { mem.cstr(f)? });
            let ts = mem.u64(e + type_string)?;
            let entry = Entry {
                offset: mem.u64(e + offset)?,
                address: mem.u64(e + address)?,
                type_string: if ts == 0 { String::new() } else { mem.cstr(ts)? },
            };
            fields.insert((ty, field), entry);
        }
        let (types, tstride) = (var("gHotSpotVMTypes")?, var("gHotSpotVMTypeEntryArrayStride")?);
        let (tname, tsize) =
            (var("gHotSpotVMTypeEntryTypeNameOffset")?, var("gHotSpotVMTypeEntrySizeOffset")?);
        let mut sizes: HashMap<String, u64> = HashMap::new();
        for i in 0..10_000u64 {
            let e = types + i * tstride;
            let t = mem.u64(e + tname)?;
            if t == 0 {
                break;
            }
            sizes.insert(mem.cstr(t)?, mem.u64(e + tsize)?);
        }
        let get = |ty: &str, field: &str| {
            fields
                .get(&(ty.to_string(), field.to_string()))
                .cloned()
                .ok_or_else(|| missing(&format!("{ty}::{field}")))
        };
        let off = |ty: &str, field: &str| get(ty, field).map(|e| e.offset);
        let integer = |ty: &str, field: &str| {
            let e = get(ty, field)?;
            IntField::of(&e)
                .ok_or_else(|| missing(&format!("{ty}::{field} of a known type (it is '{}')", e.type_string)))
        };
        let blob_code = match (off("CodeBlob", "_code_begin"), off("CodeBlob", "_code_end")) {
            (Ok(begin), Ok(end)) => CodeRange::Pointers { begin, end },
            _ => CodeRange::Offsets {
                begin: off("CodeBlob", "_code_offset")
                    .map_err(|_| missing("CodeBlob::_code_begin or CodeBlob::_code_offset"))?,
                end: off("CodeBlob", "_data_offset")?,
            },
        };
        let size = |ty: &str| sizes.get(ty).copied().ok_or_else(|| missing(&format!("sizeof({ty})")));
        let methods = || -> Result<MethodLayout, LayoutError> {
            Ok(MethodLayout {
                method_const: off("Method", "_constMethod")?,
                const_constants: off("ConstMethod", "_constants")?,
                const_name_index: off("ConstMethod", "_name_index")?,
                const_signature_index: off("ConstMethod", "_signature_index")?,
                pool_holder: off("ConstantPool", "_pool_holder")?,
                pool_length: off("ConstantPool", "_length")?,
                pool_size: size("ConstantPool")?,
                klass_name: off("Klass", "_name")?,
                symbol_length: off("Symbol", "_length")?,
                symbol_body: off("Symbol", "_body")?,
            })
        };
        Ok(Layout {
            heaps: get("CodeCache", "_heaps")?.address,
            array_len: off("GrowableArrayBase", "_len")?,
            array_data: off("GrowableArray<int>", "_data")?,
            heap_memory: off("CodeHeap", "_memory")?,
            heap_segmap: off("CodeHeap", "_segmap")?,
            heap_log2_segment: off("CodeHeap", "_log2_segment_size")?,
            vs_low_boundary: off("VirtualSpace", "_low_boundary")?,
            vs_high: off("VirtualSpace", "_high")?,
            vs_low: off("VirtualSpace", "_low")?,
            block_length: {
                let length = integer("HeapBlock::Header", "_length")?;
                IntField { offset: off("HeapBlock", "_header")? + length.offset, ..length }
            },
            block_used: off("HeapBlock", "_header")? + off("HeapBlock::Header", "_used")?,
            block_size: size("HeapBlock")?,
            blob_name: off("CodeBlob", "_name")?,
            blob_frame_size: integer("CodeBlob", "_frame_size")?,
            blob_complete: integer("CodeBlob", "_frame_complete_offset")?,
            blob_code,
            methods: methods().ok(),
        })
    }

    /// Every code blob of JVM `pid` now, with the rule its frames are stepped by.
    pub fn code(&self, pid: u32) -> Result<Vec<JitCode>, LayoutError> {
        let mem = Mem::open(pid)?;
        let heaps = mem.u64(self.heaps)?;
        let n = mem.i32(heaps + self.array_len)?.clamp(0, 16) as u64;
        let data = mem.u64(heaps + self.array_data)?;
        let mut names: HashMap<u64, String> = HashMap::new();
        let mut code = Vec::new();
        for h in 0..n {
            let heap = mem.u64(data + 8 * h)?;
            let low = mem.u64(heap + self.heap_memory + self.vs_low_boundary)?;
            let high = mem.u64(heap + self.heap_memory + self.vs_high)?;
            let segmap = mem.u64(heap + self.heap_segmap + self.vs_low)?;
            let log2 = mem.i32(heap + self.heap_log2_segment)?;
            if !(4..=16).contains(&log2) || high <= low {
                continue;
            }
            let segments = (((high - low) >> log2) as usize).min(MAX_BLOCKS);
            let map = mem.bytes(segmap, segments)?;
            let mut i = 0;
            while i < map.len() {
                // Inside a block (its later segments count back to its start) or free: not a start.
                if map[i] != 0 {
                    i += 1;
                    continue;
                }
                let block = low + ((i as u64) << log2);
                // A block freed or reused since the map was read is skipped (read again next time).
                let Ok(h) = mem.bytes(block, self.block_size as usize + BLOB_HEADER) else {
                    i += 1;
                    continue;
                };
                let length = self.block_length.read(&h).unwrap_or(0).max(0) as usize;
                i += length.max(1);
                if h.get(self.block_used as usize) != Some(&1) {
                    continue;
                }
                let blob = &h[self.block_size as usize..];
                let at = block + self.block_size;
                let range = match self.blob_code {
                    CodeRange::Pointers { begin, end } => word(blob, begin).zip(word(blob, end)),
                    CodeRange::Offsets { begin, end } => int(blob, begin)
                        .zip(int(blob, end))
                        .filter(|(b, e)| *b >= 0 && *e >= 0)
                        .map(|(b, e)| (at + b as u64, at + e as u64)),
                };
                let (Some((begin, end)), Some(frame), Some(complete), Some(name)) = (
                    range,
                    self.blob_frame_size.read(blob),
                    self.blob_complete.read(blob),
                    word(blob, self.blob_name),
                ) else {
                    continue;
                };
                if begin >= end || end - begin > 1 << 30 {
                    continue;
                }
                let name = match names.get(&name) {
                    Some(n) => n.clone(),
                    None => {
                        let n = mem.cstr(name).unwrap_or_default();
                        names.insert(name, n.clone());
                        n
                    }
                };
                let rule = if name == "Interpreter" {
                    JitFrameRule::Interpreter
                } else if frame > 0 {
                    // frame_never_safe (-1): never complete; the prologue rule holds throughout.
                    let complete = if complete < 0 { end } else { begin + complete as u64 };
                    JitFrameRule::Fixed { words: frame as u32, complete }
                } else {
                    JitFrameRule::FramePointer
                };
                code.push(JitCode { start: begin, end, rule });
            }
        }
        Ok(code)
    }
}

fn word(b: &[u8], at: u64) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at as usize..at as usize + 8)?.try_into().ok()?))
}

fn int(b: &[u8], at: u64) -> Option<i32> {
    Some(i32::from_le_bytes(b.get(at as usize..at as usize + 4)?.try_into().ok()?))
}
