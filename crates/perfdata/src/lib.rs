//! perf.data files (`perf record`) through the same converter as whyslow's own recordings: the records
//! (mmap, comm, fork, exit, samples with kernel callchains, user callchains from `-g`, or user registers
//! and stack copies from `--call-graph dwarf`, which are unwound like ours) become a [`RawRecording`]
//! that the symbolizer turns into a profile. Binaries are read from this machine; a file whose build id
//! differs from the one perf recorded is not used (its frames stay module+offset) and is named in a note.
//! Reads the file only; a corrupt or truncated file is an error, never a panic.

mod guard;

use linux_perf_data::linux_perf_event_reader::{
    EventRecord, HardwareEventId, PerfEventType, SamplingPolicy, SoftwareCounterType,
};
use linux_perf_data::{PerfFileReader, PerfFileRecord};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use whyslow_convert::records::{Record, Sample, Timed, UserRegs};
use whyslow_convert::{Converter, Host, ProcessInfo, Stream};
use whyslow_model::raw::RawRecording;
use whyslow_model::{sample_types as st, Metadata, SampleType};

#[derive(Debug, thiserror::Error)]
pub enum PerfDataError {
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0} is not a perf.data file this tool can read: {1}")]
    Parse(String, String),
    #[error("{0} has no samples")]
    NoSamples(String),
    #[error("{path}: none of the recorded programs' files are on this machine (missing: {missing}); copy them (same build id) or import on the recording machine")]
    BinariesMissing { path: String, missing: String },
}

/// perf's context markers in a callchain (PERF_CONTEXT_KERNEL, PERF_CONTEXT_USER; all >= -4095).
const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;
const PERF_CONTEXT_KERNEL: u64 = -128i64 as u64;
const PERF_CONTEXT_USER: u64 = -512i64 as u64;

/// x86-64 perf register numbers (arch/x86/include/uapi/asm/perf_regs.h).
const REG_AX: u64 = 0;
const REG_DX: u64 = 3;
const REG_SI: u64 = 4;
const REG_DI: u64 = 5;
const REG_BP: u64 = 6;
const REG_SP: u64 = 7;
const REG_IP: u64 = 8;

/// The largest object file read for unwinding and symbolizing.
const MAX_OBJECT_BYTES: u64 = 4 << 30;

/// Files of this machine, checked against the build ids perf recorded.
struct LocalFiles {
    build_ids: HashMap<String, Vec<u8>>,
    missing: RefCell<BTreeSet<String>>,
    found: RefCell<BTreeSet<String>>,
}

impl Host for LocalFiles {
    fn file(&self, _pid: u32, path: &str) -> Option<Vec<u8>> {
        // The path comes from the file: read only regular files of a plausible size that are ELF objects
        // (a corrupt record could name /dev/zero or /proc/kcore).
        let plausible = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() <= MAX_OBJECT_BYTES);
        let bytes =
            plausible.then(|| std::fs::read(path).ok()).flatten().filter(|b| b.starts_with(b"\x7fELF"));
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

    fn thread_name(&self, _pid: u32, _tid: u32) -> Option<String> {
        None
    }
}

fn build_id(bytes: &[u8]) -> Option<Vec<u8>> {
    use object::Object;
    object::File::parse(bytes).ok()?.build_id().ok()?.map(<[u8]>::to_vec)
}

/// What one perf event of the file becomes.
fn stream_of(
    attr: &linux_perf_data::AttributeDescription,
    k: usize,
    types: &mut Vec<SampleType>,
) -> (Stream, Option<u64>) {
    let freq = match attr.attr.sampling_policy {
        SamplingPolicy::Frequency(f) => Some(f),
        _ => None,
    };
    let clock = match attr.attr.type_ {
        PerfEventType::Software(SoftwareCounterType::CpuClock | SoftwareCounterType::TaskClock) => {
            Some((st::CPU_NS, "nanoseconds"))
        }
        PerfEventType::Hardware(HardwareEventId::CpuCycles, _) => Some((st::CYCLES, "count")),
        _ => None,
    };
    let have_cpu = types.iter().any(|t| t.name == st::CPU);
    match clock {
        Some((period_name, unit)) if !have_cpu => {
            let slot = types.len();
            types.push(SampleType { name: st::CPU.into(), unit: "samples".into() });
            types.push(SampleType { name: period_name.into(), unit: unit.into() });
            (Stream::Cpu { slot }, freq)
        }
        _ => {
            let slot = types.len();
            let name = attr.name.clone().unwrap_or_else(|| format!("event{k}"));
            types.push(SampleType { name, unit: "count".into() });
            (Stream::Events { slot }, None)
        }
    }
}

/// The first bytes of a perf.data file.
pub const MAGIC: &[u8] = b"PERFILE2";

/// Reads a perf.data file into a raw recording (to symbolize).
pub fn import(path: &Path) -> Result<RawRecording, PerfDataError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| PerfDataError::Read(shown.clone(), e))?;
    import_from(file, &shown)
}

/// A perf.data file held in memory (fetched from a URL); `origin` names it in errors and notes.
pub fn decode(bytes: &[u8], origin: &str) -> Result<RawRecording, PerfDataError> {
    import_from(std::io::Cursor::new(bytes), origin)
}

fn import_from<R: Read + Seek>(reader: R, origin: &str) -> Result<RawRecording, PerfDataError> {
    // The parser crate multiplies lengths read from the file (Cargo.toml turns its overflow checks off,
    // so a corrupt length fails its bounds checks instead); should any other of its checks panic, a
    // corrupt file is still an error, not a crash.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(reader, origin)));
    result.unwrap_or_else(|_| Err(PerfDataError::Parse(origin.to_string(), "corrupt record lengths".into())))
}

/// Checks that every section the header names lies inside the file: the parser allocates a section's
/// size before reading it, so a corrupt size would abort the process instead of failing.
fn check_sections<R: Read + Seek>(file: &mut R) -> Result<(), String> {
    let len = file.seek(SeekFrom::End(0)).map_err(|e| e.to_string())?;
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let mut h = [0u8; 104];
    if file.read_exact(&mut h).is_err() || &h[..8] != MAGIC || u64_le(&h, 8) != 104 {
        return Ok(()); // not the file layout (pipe mode, other byte order): the parser decides
    }
    let inside = |offset: u64, size: u64| offset.checked_add(size).is_some_and(|end| end <= len);
    let (data_offset, data_size) = (u64_le(&h, 40), u64_le(&h, 48));
    if !inside(u64_le(&h, 24), u64_le(&h, 32)) || !inside(data_offset, data_size) {
        return Err("its sections extend past the end of the file (truncated?)".into());
    }
    let features: u32 = (0..4).map(|i| u64_le(&h, 72 + 8 * i).count_ones()).sum();
    let mut table = vec![0u8; features as usize * 16];
    file.seek(SeekFrom::Start(data_offset + data_size)).map_err(|e| e.to_string())?;
    file.read_exact(&mut table).map_err(|_| "its feature table is cut off (truncated?)".to_string())?;
    if table.chunks(16).any(|e| !inside(u64_le(e, 0), u64_le(e, 8))) {
        return Err("a header section extends past the end of the file (truncated or corrupt)".into());
    }
    guard::check_counts(file, &h, &table, len)?;
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    Ok(())
}

fn u64_le(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn read<R: Read + Seek>(mut file: R, shown: &str) -> Result<RawRecording, PerfDataError> {
    let shown = shown.to_string();
    check_sections(&mut file).map_err(|why| PerfDataError::Parse(shown.clone(), why))?;
    let parse = |e: linux_perf_data::Error| PerfDataError::Parse(shown.clone(), e.to_string());
    let PerfFileReader { mut perf_file, mut record_iter } =
        PerfFileReader::parse_file(std::io::BufReader::new(file)).map_err(parse)?;
    let mut types = Vec::new();
    let mut streams = Vec::new();
    let mut frequency = None;
    let attrs = perf_file.event_attributes().to_vec();
    for (k, a) in attrs.iter().enumerate() {
        let (s, f) = stream_of(a, k, &mut types);
        frequency = frequency.or(f);
        streams.push(s);
    }
    let build_ids: HashMap<String, Vec<u8>> = perf_file
        .build_ids()
        .map(|ids| {
            ids.into_values().map(|d| (String::from_utf8_lossy(&d.path).into_owned(), d.build_id)).collect()
        })
        .unwrap_or_default();
    let host = LocalFiles { build_ids, missing: Default::default(), found: Default::default() };
    let mut c = Converter::new(host, types, streams);
    let ids: HashMap<u64, usize> = (0..attrs.len()).map(|k| (k as u64, k)).collect();
    let (mut first, mut last) = (u64::MAX, 0u64);
    let mut batch = Vec::new();
    loop {
        let rec = match record_iter.next_record(&mut perf_file) {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => return Err(parse(e)),
        };
        let PerfFileRecord::EventRecord { attr_index, record } = rec else { continue };
        let parsed = match record.parse() {
            Ok(p) => p,
            Err(_) => {
                c.count_malformed();
                continue;
            }
        };
        let time = record.timestamp().unwrap_or(0);
        let Some(r) = convert(parsed, attr_index) else { continue };
        if matches!(r, Record::Sample(_)) {
            first = first.min(time);
            last = last.max(time);
        }
        batch.push(Timed { time, record: r });
        // The reader yields records in time order; hand them over in chunks to bound memory.
        if batch.len() >= 4096 {
            c.handle_batch(std::mem::take(&mut batch), &ids);
        }
    }
    c.handle_batch(batch, &ids);
    if c.counters().samples == 0 {
        return Err(PerfDataError::NoSamples(shown));
    }
    let missing: Vec<String> = c.host().missing.borrow().iter().cloned().collect();
    let found = c.host().found.borrow().len();
    let (mut raw, counters) = c.finish();
    if found == 0 && !missing.is_empty() {
        return Err(PerfDataError::BinariesMissing { path: shown, missing: missing.join(", ") });
    }
    let mut notes = Vec::new();
    if !missing.is_empty() {
        notes.push(format!(
            "files not on this machine (or rebuilt since the recording), their frames stay module+offset: {}",
            missing.join(", ")
        ));
    }
    let event = attrs.iter().filter_map(|a| a.name.clone()).collect::<Vec<_>>().join(" + ");
    raw.meta = Metadata {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command: perf_file
            .cmdline()
            .ok()
            .flatten()
            .map(|v| v.iter().map(|s| s.to_string()).collect())
            .unwrap_or_else(|| vec![shown.clone()]),
        event: format!("{event} (perf.data)"),
        frequency_hz: frequency.unwrap_or(0),
        duration_ns: last.saturating_sub(first),
        lost_samples: counters.lost,
        unwind: counters.unwind,
        hostname: perf_file.hostname().ok().flatten().unwrap_or_default().to_string(),
        kernel_release: perf_file.os_release().ok().flatten().unwrap_or_default().to_string(),
        notes,
        ..Default::default()
    };
    Ok(raw)
}

/// One parsed perf record as the converter's record (None for those it has no use for).
fn convert(r: EventRecord, attr_index: usize) -> Option<Record> {
    let pid = |p: i32| u32::try_from(p).ok();
    Some(match r {
        EventRecord::Sample(s) => {
            let (mut kernel, mut user) = (Vec::new(), Vec::new());
            if let Some(chain) = &s.callchain {
                let mut into_kernel = true;
                for i in 0..chain.len() {
                    let a = chain.get(i)?;
                    if a >= PERF_CONTEXT_MAX {
                        into_kernel = a == PERF_CONTEXT_KERNEL || (a != PERF_CONTEXT_USER && into_kernel);
                        continue;
                    }
                    let frames = if into_kernel { &mut kernel } else { &mut user };
                    // Return addresses point after the call: step back into it (not the first frame).
                    frames.push(if frames.is_empty() { a } else { a.saturating_sub(1) });
                }
            }
            let regs = s.user_regs.as_ref().and_then(|r| {
                Some(UserRegs {
                    ax: r.get(REG_AX).unwrap_or(0),
                    dx: r.get(REG_DX).unwrap_or(0),
                    si: r.get(REG_SI).unwrap_or(0),
                    di: r.get(REG_DI).unwrap_or(0),
                    bp: r.get(REG_BP).unwrap_or(0),
                    sp: r.get(REG_SP)?,
                    ip: r.get(REG_IP)?,
                })
            });
            let stack = match &s.user_stack {
                Some((data, dyn_size)) => {
                    let bytes = data.as_slice();
                    bytes[..(*dyn_size as usize).min(bytes.len())].to_vec()
                }
                None => Vec::new(),
            };
            // With registers and stack bytes the converter unwinds (dwarf); else the kernel's walk (-g).
            let regs = if stack.is_empty() && !user.is_empty() { None } else { regs };
            Record::Sample(Sample {
                pid: pid(s.pid.unwrap_or(0))?,
                tid: pid(s.tid.unwrap_or(0))?,
                id: attr_index as u64,
                period: s.period.unwrap_or(1),
                kernel,
                user,
                regs,
                stack,
                raw: s.raw.map(|r| r.as_slice().into_owned()).unwrap_or_default(),
            })
        }
        EventRecord::Mmap(m) => Record::Mmap {
            pid: pid(m.pid)?,
            start: m.address,
            len: m.length,
            pgoff: m.page_offset,
            exec: m.is_executable,
            path: String::from_utf8_lossy(&m.path.as_slice()).into_owned(),
        },
        EventRecord::Mmap2(m) => Record::Mmap {
            pid: pid(m.pid)?,
            start: m.address,
            len: m.length,
            pgoff: m.page_offset,
            exec: m.protection & 4 != 0, // PROT_EXEC
            path: String::from_utf8_lossy(&m.path.as_slice()).into_owned(),
        },
        EventRecord::Comm(c) => Record::Comm {
            pid: pid(c.pid)?,
            tid: pid(c.tid)?,
            name: String::from_utf8_lossy(&c.name.as_slice()).into_owned(),
            exec: c.is_execve,
        },
        EventRecord::Fork(f) => {
            Record::Fork { pid: pid(f.pid)?, ppid: pid(f.ppid)?, tid: pid(f.tid)?, ptid: pid(f.ptid)? }
        }
        EventRecord::Exit(f) => Record::Exit { pid: pid(f.pid)?, tid: pid(f.tid)? },
        EventRecord::Lost(l) => Record::Lost(l.count),
        _ => return None,
    })
}
