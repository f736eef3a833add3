//! perf.data files (`perf record`) through the same converter as whyslow's own recordings: the records
//! (mmap, comm, fork, exit, samples with kernel callchains, user callchains from `-g`, or user registers
//! and stack copies from `--call-graph dwarf`, which are unwound like ours) become a [`RawRecording`]
//! that the symbolizer turns into a profile. Binaries are read from this machine; a file whose build id
//! differs from the one perf recorded is not used (its frames stay module+offset) and is named in a note.
//! Reads the file only; a corrupt or truncated file is an error, never a panic.
//!
//! A regular file is mapped and its records read in place (`inplace`), without copying them; the header's
//! build ids are handed out before the records are read ([`import_with`]), so symbols can load meanwhile.
//! `sched:sched_switch` samples become off-CPU time (`offcpu`, ns) of the stack the thread switched out
//! in, until it is seen again: switched in (sched_switch's `next_pid`, PERF_RECORD_SWITCH) or sampled.
//! Branch stacks (`--call-graph lbr`) are not used: linux-perf-event-reader 0.10 skips them when it
//! parses a sample, so such samples keep the kernel's callchain only.

mod guard;
mod host;
mod inplace;
mod pipeline;
mod sample;
mod sections;
mod tracepoint;

use host::LocalFiles;
use linux_perf_data::linux_perf_event_reader::{
    ContextSwitchRecord, Endianness, EventRecord, HardwareEventId, PerfEventType, RawData, RawEventRecord,
    RecordType, SamplingPolicy, SoftwareCounterType,
};
use linux_perf_data::{PerfFileReader, PerfFileRecord};
use pipeline::{pipelined, Pages, Parsed};
use sample::SampleFields;
use sections::{check_sections, data_section, Mapped};
use std::collections::HashMap;
use std::io::{Read, Seek};
use std::path::Path;
use tracepoint::SwitchFields;
use whyslow_convert::records::{Record, SampleRef, Timed};
use whyslow_convert::{Converter, Stream};
use whyslow_model::raw::{RawKernel, RawRecording};
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

const SCHED_SWITCH: &str = "sched:sched_switch";
/// perf's name of the kernel (its build id, its map).
const KERNEL_DSO: &str = "[kernel.kallsyms]";

/// What one perf event of the file becomes.
fn stream_of(
    attr: &linux_perf_data::AttributeDescription,
    k: usize,
    types: &mut Vec<SampleType>,
    switch: SwitchFields,
) -> Stream {
    // A thread's switch-out: the time until it runs again is off-CPU time of the stack it blocked in.
    if attr.name.as_deref() == Some(SCHED_SWITCH) && matches!(attr.attr.type_, PerfEventType::Tracepoint(_)) {
        if let Some(slot) = types.iter().position(|t| t.name == st::OFFCPU) {
            return Stream::OffCpu { slot, state_offset: switch.prev_state, min_block_ns: 0 };
        }
        types.push(SampleType { name: st::OFFCPU.into(), unit: "nanoseconds".into() });
        return Stream::OffCpu { slot: types.len() - 1, state_offset: switch.prev_state, min_block_ns: 0 };
    }
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
            Stream::Cpu { slot }
        }
        _ => {
            let slot = types.len();
            let name = attr.name.clone().unwrap_or_else(|| format!("event{k}"));
            types.push(SampleType { name, unit: "count".into() });
            Stream::Events { slot }
        }
    }
}

/// The first bytes of a perf.data file.
pub const MAGIC: &[u8] = b"PERFILE2";

/// What the file's header says will be symbolized, known before its records are read: the files perf
/// recorded a build id for (those its samples hit) and the kernel's build id (hex) when kernel code was hit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ahead {
    pub files: Vec<String>,
    pub kernel_build_id: Option<String>,
}

/// Reads a perf.data file into a raw recording (to symbolize).
pub fn import(path: &Path) -> Result<RawRecording, PerfDataError> {
    import_with(path, |_| {})
}

/// [`import`], telling `ahead` what will be symbolized as soon as the header is read (to start loading
/// symbols while the records are read).
pub fn import_with(path: &Path, ahead: impl FnOnce(&Ahead)) -> Result<RawRecording, PerfDataError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| PerfDataError::Read(shown.clone(), e))?;
    // Read in place where the file can be mapped (a regular file): no copies of the records.
    // SAFETY: the mapping is private and read-only; should another process truncate the file while it is
    // read, this process gets SIGBUS (as `perf report`, which maps perf.data the same way).
    match unsafe { memmap2::Mmap::map(&file) } {
        Ok(map) => {
            let _ = map.advise(memmap2::Advice::Sequential);
            guarded(&shown, || {
                let mapped = Mapped { bytes: &map, map: Some(&map) };
                read(std::io::Cursor::new(&map[..]), Some(mapped), &shown, ahead)
            })
        }
        Err(_) => {
            guarded(&shown, || read(std::io::BufReader::with_capacity(1 << 20, file), None, &shown, ahead))
        }
    }
}

/// A perf.data file held in memory (fetched from a URL); `origin` names it in errors and notes.
pub fn decode(bytes: &[u8], origin: &str) -> Result<RawRecording, PerfDataError> {
    decode_with(bytes, origin, |_| {})
}

/// [`decode`] with [`import_with`]'s `ahead`.
pub fn decode_with(
    bytes: &[u8],
    origin: &str,
    ahead: impl FnOnce(&Ahead),
) -> Result<RawRecording, PerfDataError> {
    guarded(origin, || read(std::io::Cursor::new(bytes), Some(Mapped { bytes, map: None }), origin, ahead))
}

/// The parser crate multiplies lengths read from the file (Cargo.toml turns its overflow checks off, so a
/// corrupt length fails its bounds checks instead); should any other of its checks panic, a corrupt file
/// is still an error, not a crash.
fn guarded(
    origin: &str,
    f: impl FnOnce() -> Result<RawRecording, PerfDataError>,
) -> Result<RawRecording, PerfDataError> {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    result.unwrap_or_else(|_| Err(PerfDataError::Parse(origin.to_string(), "corrupt record lengths".into())))
}

fn read<R: Read + Seek>(
    mut file: R,
    mapped: Option<Mapped<'_>>,
    shown: &str,
    ahead: impl FnOnce(&Ahead),
) -> Result<RawRecording, PerfDataError> {
    let shown = shown.to_string();
    check_sections(&mut file).map_err(|why| PerfDataError::Parse(shown.clone(), why))?;
    let parse = |e: linux_perf_data::Error| PerfDataError::Parse(shown.clone(), e.to_string());
    let PerfFileReader { mut perf_file, mut record_iter } =
        PerfFileReader::parse_file(file).map_err(parse)?;
    let attrs = perf_file.event_attributes().to_vec();
    let mut imp = Importer::new(&perf_file);
    ahead(&imp.ahead);
    let in_place =
        mapped.and_then(|m| Some((m, data_section(&m, &perf_file)?, inplace::Layout::new(&attrs)?)));
    match in_place {
        Some((m, (data, base), layout)) => {
            // Pages already read are given back (the mapping would otherwise count the whole file as
            // resident; they stay in the page cache). Mapping them ahead on the other core
            // (MADV_POPULATE_READ) was tried: no faster, the reader keeps pace.
            let mut pages = Pages { map: m.map, base, given_back: base };
            let walked = pipelined(data, &layout, &mut imp, &mut pages);
            walked.map_err(|why| PerfDataError::Parse(shown.clone(), why))?;
        }
        None => loop {
            let rec = match record_iter.next_record(&mut perf_file) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => return Err(parse(e)),
            };
            if let PerfFileRecord::EventRecord { attr_index, record } = rec {
                let time = record.timestamp();
                imp.record(attr_index, &record, time);
            }
        },
    }
    imp.finish(&perf_file, &attrs, shown)
}

/// The state of one import: the converter and what it is fed.
struct Importer {
    c: Converter<LocalFiles>,
    ids: HashMap<u64, usize>,
    /// Per event: sched_switch's fields where the event is sched:sched_switch.
    switches: Vec<Option<SwitchFields>>,
    /// Times of the first and last sample, and of the last record.
    first: u64,
    last: u64,
    end: u64,
    /// PERF_RECORD_SWITCH records (`perf record --switch-events`) seen.
    switch_records: u64,
    /// Reused for every sample's callchain.
    kernel: Vec<u64>,
    user: Vec<u64>,
    ahead: Ahead,
    /// perf's kernel map: its reference symbol and that symbol's address.
    kernel_reloc: Option<(String, u64)>,
}

impl Importer {
    fn new(perf_file: &linux_perf_data::PerfFile) -> Importer {
        let attrs = perf_file.event_attributes();
        let mut types = Vec::new();
        let mut streams = Vec::new();
        let fields = SwitchFields::of(perf_file);
        let mut switches = Vec::new();
        for (k, a) in attrs.iter().enumerate() {
            let s = stream_of(a, k, &mut types, fields);
            switches.push(matches!(s, Stream::OffCpu { .. }).then_some(fields));
            streams.push(s);
        }
        let build_ids: HashMap<String, Vec<u8>> = perf_file
            .build_ids()
            .map(|ids| {
                ids.into_values()
                    .map(|d| (String::from_utf8_lossy(&d.path).into_owned(), d.build_id))
                    .collect()
            })
            .unwrap_or_default();
        let hex = |id: &[u8]| id.iter().map(|b| format!("{b:02x}")).collect::<String>();
        // Kernel modules (.ko) have build ids too; their addresses are kernel ones, named from kallsyms.
        let module = |p: &str| [".ko", ".ko.xz", ".ko.zst", ".ko.gz"].iter().any(|s| p.ends_with(s));
        let mut files: Vec<String> =
            build_ids.keys().filter(|p| p.starts_with('/') && !module(p)).cloned().collect();
        files.sort();
        let kernel_build_id = build_ids.get(KERNEL_DSO).map(|id| hex(id));
        let host = LocalFiles { build_ids, missing: Default::default(), found: Default::default() };
        Importer {
            ahead: Ahead { files, kernel_build_id },
            kernel_reloc: None,
            c: Converter::new(host, types, streams),
            ids: (0..attrs.len()).map(|k| (k as u64, k)).collect(),
            switches,
            first: u64::MAX,
            last: 0,
            end: 0,
            switch_records: 0,
            kernel: Vec::new(),
            user: Vec::new(),
        }
    }

    /// One record of event `attr`, in time order.
    fn record(&mut self, attr: usize, record: &RawEventRecord<'_>, time: Option<u64>) {
        self.handle(attr, record, time, Self::parse(record));
    }

    /// A record parsed (Err: malformed); any thread may parse while another handles.
    fn parse<'a>(record: &RawEventRecord<'a>) -> Parsed<'a> {
        if !guard::mmap2_build_id_fits(record) {
            return Parsed::Malformed;
        }
        let info = &record.parse_info;
        if let (RecordType::SAMPLE, Endianness::LittleEndian, RawData::Single(body)) =
            (record.record_type, info.endian, record.data)
        {
            if SampleFields::reads(info) {
                return SampleFields::parse_le(body, info).map_or(Parsed::Malformed, Parsed::Sample);
            }
        }
        match record.parse() {
            Ok(EventRecord::Sample(s)) => Parsed::Sample(SampleFields::of(&s)),
            Ok(other) => Parsed::Other(Box::new(other)),
            Err(_) => Parsed::Malformed,
        }
    }

    /// One record of event `attr`, in time order, and what it parsed into.
    fn handle(&mut self, attr: usize, record: &RawEventRecord<'_>, time: Option<u64>, parsed: Parsed<'_>) {
        let time = time.unwrap_or(0);
        self.end = self.end.max(time);
        let parsed = match parsed {
            Parsed::Sample(s) => return self.sample(attr, s, time),
            Parsed::Other(other) => *other,
            Parsed::Malformed => {
                self.c.count_malformed();
                return;
            }
        };
        match parsed {
            // The kernel's map, `[kernel.kallsyms]_text` at the address of _text (relocated kernels).
            EventRecord::Mmap(m) if m.pid == -1 => self.kernel_map(&m.path.as_slice(), m.page_offset),
            EventRecord::Mmap2(m) if m.pid == -1 => self.kernel_map(&m.path.as_slice(), m.page_offset),
            EventRecord::ContextSwitch(cs) => {
                let Some(tid) =
                    record.common_data().ok().and_then(|d| d.tid).and_then(|t| u32::try_from(t).ok())
                else {
                    return;
                };
                self.switch_records += 1;
                let out = matches!(cs, ContextSwitchRecord::Out { .. });
                self.c.handle(Timed { time, record: Record::Switch { tid, out } }, &self.ids);
            }
            other => {
                if let Some(r) = convert(other) {
                    self.c.handle(Timed { time, record: r }, &self.ids);
                }
            }
        }
    }

    fn kernel_map(&mut self, path: &[u8], pgoff: u64) {
        let path = String::from_utf8_lossy(path);
        if let Some(symbol) =
            path.strip_prefix(KERNEL_DSO).filter(|s| !s.is_empty() && self.kernel_reloc.is_none())
        {
            self.kernel_reloc = Some((symbol.to_string(), pgoff));
        }
    }

    fn sample(&mut self, attr: usize, s: SampleFields<'_>, time: u64) {
        let pid = |p: Option<i32>| u32::try_from(p.unwrap_or(0)).ok();
        let (Some(p), Some(t)) = (pid(s.pid), pid(s.tid)) else { return };
        let (kernel, user) = (&mut self.kernel, &mut self.user);
        kernel.clear();
        user.clear();
        let mut into_kernel = true;
        for i in 0..s.chain.len() {
            let Some(a) = s.chain.get(i) else { return };
            if a >= PERF_CONTEXT_MAX {
                into_kernel = a == PERF_CONTEXT_KERNEL || (a != PERF_CONTEXT_USER && into_kernel);
                continue;
            }
            let frames = if into_kernel { &mut *kernel } else { &mut *user };
            // Return addresses point after the call: step back into it (not the first frame).
            frames.push(if frames.is_empty() { a } else { a.saturating_sub(1) });
        }
        let (raw, stack) = (&s.raw, &s.stack);
        // With registers and stack bytes the converter unwinds (dwarf); else the kernel's walk (-g).
        let regs = if stack.is_empty() && !user.is_empty() { None } else { s.regs };
        self.first = self.first.min(time);
        self.last = self.last.max(time);
        let sample = SampleRef {
            pid: p,
            tid: t,
            id: attr as u64,
            period: s.period.unwrap_or(1),
            kernel,
            user,
            regs,
            stack,
            goroutine: None,
            python: &[],
            raw,
        };
        self.c.handle_sample(sample, time, &self.ids);
        // sched_switch names the thread that runs next: if it is one of the file's, its block ends.
        if let Some(f) = self.switches.get(attr).copied().flatten() {
            let next = raw
                .get(f.next_pid..f.next_pid + 4)
                .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")));
            if let Some(next) = next.and_then(|n| u32::try_from(n).ok()).filter(|&n| n != 0) {
                self.c.handle(Timed { time, record: Record::Switch { tid: next, out: false } }, &self.ids);
            }
        }
    }

    fn finish(
        mut self,
        perf_file: &linux_perf_data::PerfFile,
        attrs: &[linux_perf_data::AttributeDescription],
        shown: String,
    ) -> Result<RawRecording, PerfDataError> {
        let c = &mut self.c;
        if c.counters().samples == 0 {
            return Err(PerfDataError::NoSamples(shown));
        }
        // Threads still blocked when the recording ended were blocked until then.
        c.finish_blocked(self.end);
        let missing: Vec<String> = c.host().missing.borrow().iter().cloned().collect();
        let found = c.host().found.borrow().len();
        let offcpu = c.streams().iter().any(|s| matches!(s, Stream::OffCpu { .. }));
        let frequency = attrs.iter().find_map(|a| match a.attr.sampling_policy {
            SamplingPolicy::Frequency(f) => Some(f),
            _ => None,
        });
        let (mut raw, counters) = self.c.finish();
        if self.ahead.kernel_build_id.is_some() || self.kernel_reloc.is_some() {
            let build_id = self.ahead.kernel_build_id.clone().unwrap_or_default();
            raw.kernel = Some(RawKernel { build_id, reloc: self.kernel_reloc.clone() });
        }
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
        let sampled = attrs.iter().any(|a| {
            a.name.as_deref() == Some(SCHED_SWITCH)
                && !matches!(a.attr.sampling_policy, SamplingPolicy::Period(p) if p.get() == 1)
        });
        if sampled {
            notes.push(
                "sched:sched_switch was sampled (perf record -F or -c), so the file holds only some switches: \
                 off-CPU time is incomplete (record it with period 1: no -F, or -e sched:sched_switch/period=1/)"
                    .into(),
            );
        }
        if offcpu && self.switch_records == 0 {
            notes.push(
                "off-CPU time from sched:sched_switch: a block ends when the thread is seen again (switched in \
                 by another recorded thread, or its next sample); a recording of one command holds no switch-ins \
                 from other tasks, so time a thread ran between waking and its next event counts as blocked \
                 (record with --switch-events, -a, or with -e cpu-clock as well, for exact ends)"
                    .into(),
            );
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
            duration_ns: self.last.saturating_sub(self.first),
            lost_samples: counters.lost,
            unwind: counters.unwind,
            hostname: perf_file.hostname().ok().flatten().unwrap_or_default().to_string(),
            kernel_release: perf_file.os_release().ok().flatten().unwrap_or_default().to_string(),
            notes,
            ..Default::default()
        };
        Ok(raw)
    }
}

/// A parsed record other than a sample as the converter's record (None for those it has no use for).
fn convert(r: EventRecord) -> Option<Record> {
    let pid = |p: i32| u32::try_from(p).ok();
    Some(match r {
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
