//! The fields of a sample record the importer uses. A little-endian record is read straight from its
//! bytes (the sample format of its event says which fields it has, in the kernel's fixed order); others
//! go through linux-perf-event-reader's parser, which decodes every field through a generic reader (a
//! third of the time spent on a `--call-graph dwarf` file's samples).

use linux_perf_data::linux_perf_event_reader::{
    BranchSampleFormat, RawDataU64, RecordParseInfo, SampleFormat, SampleRecord,
};
use std::borrow::Cow;
use whyslow_convert::records::UserRegs;

/// x86-64 perf register numbers (arch/x86/include/uapi/asm/perf_regs.h).
const REG_AX: u64 = 0;
const REG_DX: u64 = 3;
const REG_SI: u64 = 4;
const REG_DI: u64 = 5;
const REG_BP: u64 = 6;
const REG_SP: u64 = 7;
const REG_IP: u64 = 8;

/// A sample's callchain: the record's bytes, or what the generic parser made of them.
pub(crate) enum Chain<'a> {
    Le(&'a [u8]),
    Parsed(Option<RawDataU64<'a>>),
}

impl Chain<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Chain::Le(b) => b.len() / 8,
            Chain::Parsed(c) => c.as_ref().map_or(0, |c| c.len()),
        }
    }

    pub(crate) fn get(&self, i: usize) -> Option<u64> {
        match self {
            Chain::Le(b) => b.get(i * 8..i * 8 + 8).map(le64),
            Chain::Parsed(c) => c.as_ref()?.get(i),
        }
    }
}

pub(crate) struct SampleFields<'a> {
    pub pid: Option<i32>,
    pub tid: Option<i32>,
    pub period: Option<u64>,
    pub chain: Chain<'a>,
    /// Tracepoint fields (PERF_SAMPLE_RAW).
    pub raw: Cow<'a, [u8]>,
    pub regs: Option<UserRegs>,
    /// The part of the user stack copy the kernel filled (its dynamic size).
    pub stack: Cow<'a, [u8]>,
}

fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}

/// The registers the converter uses, `get` giving one by its perf number.
fn user_regs(get: impl Fn(u64) -> Option<u64>) -> Option<UserRegs> {
    Some(UserRegs {
        ax: get(REG_AX).unwrap_or(0),
        dx: get(REG_DX).unwrap_or(0),
        si: get(REG_SI).unwrap_or(0),
        di: get(REG_DI).unwrap_or(0),
        bp: get(REG_BP).unwrap_or(0),
        sp: get(REG_SP)?,
        ip: get(REG_IP)?,
    })
}

impl<'a> SampleFields<'a> {
    /// From linux-perf-event-reader's parse.
    pub(crate) fn of(s: &SampleRecord<'a>) -> SampleFields<'a> {
        let regs = s.user_regs.as_ref().and_then(|r| user_regs(|n| r.get(n)));
        let stack = match &s.user_stack {
            Some((data, dyn_size)) => {
                let used = (*dyn_size as usize).min(data.len());
                match data.as_slice() {
                    Cow::Borrowed(b) => Cow::Borrowed(&b[..used]),
                    Cow::Owned(mut v) => {
                        v.truncate(used);
                        Cow::Owned(v)
                    }
                }
            }
            None => Cow::Borrowed(&[][..]),
        };
        SampleFields {
            pid: s.pid,
            tid: s.tid,
            period: s.period,
            chain: Chain::Parsed(s.callchain),
            raw: s.raw.map_or(Cow::Borrowed(&[][..]), |r| r.as_slice()),
            regs,
            stack,
        }
    }

    /// Whether [`SampleFields::parse_le`] reads samples of this format. Not with PERF_SAMPLE_READ: the
    /// counter values' layout depends on PERF_FORMAT_LOST, which the parse info does not keep.
    pub(crate) fn reads(info: &RecordParseInfo) -> bool {
        !info.sample_format.contains(SampleFormat::READ)
    }

    /// From the bytes of a little-endian sample record of an event with parse info `info` (a format
    /// [`SampleFields::reads`]); None where the record is shorter than its format says (malformed).
    pub(crate) fn parse_le(body: &'a [u8], info: &RecordParseInfo) -> Option<SampleFields<'a>> {
        let mut r = Reader(body);
        let f = info.sample_format;
        let has = |flag: SampleFormat| f.contains(flag);
        let mut fields = SampleFields {
            pid: None,
            tid: None,
            period: None,
            chain: Chain::Le(&[]),
            raw: Cow::Borrowed(&[]),
            regs: None,
            stack: Cow::Borrowed(&[]),
        };
        for flag in [SampleFormat::IDENTIFIER, SampleFormat::IP] {
            if has(flag) {
                r.u64()?;
            }
        }
        if has(SampleFormat::TID) {
            fields.pid = Some(r.u32()? as i32);
            fields.tid = Some(r.u32()? as i32);
        }
        for flag in [SampleFormat::TIME, SampleFormat::ADDR, SampleFormat::ID, SampleFormat::STREAM_ID] {
            if has(flag) {
                r.u64()?;
            }
        }
        if has(SampleFormat::CPU) {
            r.u64()?; // cpu, reserved
        }
        if has(SampleFormat::PERIOD) {
            fields.period = Some(r.u64()?);
        }
        if has(SampleFormat::CALLCHAIN) {
            let nr = usize::try_from(r.u64()?).ok()?;
            fields.chain = Chain::Le(r.bytes(nr.checked_mul(8)?)?);
        }
        if has(SampleFormat::RAW) {
            let size = r.u32()? as usize;
            fields.raw = Cow::Borrowed(r.bytes(size)?);
        }
        if has(SampleFormat::BRANCH_STACK) {
            let nr = usize::try_from(r.u64()?).ok()?;
            if info.branch_sample_format.contains(BranchSampleFormat::HW_INDEX) {
                r.u64()?;
            }
            r.skip(nr.checked_mul(24)?)?; // from, to, flags: not used (see the crate documentation)
        }
        if has(SampleFormat::REGS_USER) && r.u64()? != 0 {
            let regs = r.bytes(8 * usize::from(info.user_regs_count))?;
            let mask = info.sample_regs_user;
            // The registers in the mask, in number order.
            let at = |n: u64| (mask & (1 << n) != 0).then(|| (mask & ((1 << n) - 1)).count_ones() as usize);
            fields.regs = user_regs(|n| at(n).and_then(|i| regs.get(i * 8..i * 8 + 8)).map(le64));
        }
        if has(SampleFormat::STACK_USER) {
            let size = usize::try_from(r.u64()?).ok()?;
            let stack = r.bytes(size)?;
            let used = if size != 0 { usize::try_from(r.u64()?).ok()?.min(size) } else { 0 };
            fields.stack = Cow::Borrowed(&stack[..used]);
        }
        Some(fields)
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        self.bytes(n).map(|_| ())
    }

    fn u64(&mut self) -> Option<u64> {
        self.bytes(8).map(le64)
    }

    fn u32(&mut self) -> Option<u32> {
        self.bytes(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::SampleFields;
    use linux_perf_data::linux_perf_event_reader::{EventRecord, RawData};
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    use whyslow_convert::records::UserRegs;

    type Fields = (Option<i32>, Option<i32>, Option<u64>, Vec<u64>, Vec<u8>, Option<UserRegs>, Vec<u8>);

    fn fields(f: &SampleFields) -> Fields {
        let chain = (0..f.chain.len()).map(|i| f.chain.get(i).unwrap()).collect();
        (f.pid, f.tid, f.period, chain, f.raw.to_vec(), f.regs, f.stack.to_vec())
    }

    /// Every sample of real perf recordings (-g, dwarf, sched_switch with raw fields, 4 threads) reads
    /// the same through both parsers.
    #[test]
    fn samples_read_in_place_equal_linux_perf_event_readers() {
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../import/tests/corpus");
        for name in ["perf_g.data", "perf_dwarf.data", "perf_sched_switch.data", "perf_threads.data"] {
            let bytes = std::fs::read(corpus.join(name)).unwrap();
            let PerfFileReader { mut perf_file, mut record_iter } =
                PerfFileReader::parse_file(std::io::Cursor::new(&bytes[..])).unwrap();
            let (mut samples, mut with_stack, mut with_raw) = (0, 0, 0);
            while let Some(rec) = record_iter.next_record(&mut perf_file).unwrap() {
                let PerfFileRecord::EventRecord { record, .. } = rec else { continue };
                let Ok(EventRecord::Sample(s)) = record.parse() else { continue };
                let RawData::Single(body) = record.data else { panic!("a file's record is contiguous") };
                assert!(SampleFields::reads(&record.parse_info));
                let fast = SampleFields::parse_le(body, &record.parse_info).expect("a whole sample");
                assert_eq!(fields(&fast), fields(&SampleFields::of(&s)), "{name}: sample {samples}");
                samples += 1;
                with_stack += !fast.stack.is_empty() as usize;
                with_raw += !fast.raw.is_empty() as usize;
            }
            assert!(samples > 10, "{name}: {samples} samples");
            match name {
                "perf_dwarf.data" => assert!(with_stack * 10 >= samples * 9, "{with_stack} of {samples}"),
                "perf_sched_switch.data" => assert_eq!(with_raw, samples),
                _ => {}
            }
        }
    }

    #[test]
    fn a_sample_shorter_than_its_format_is_malformed() {
        let bytes = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../import/tests/corpus/perf_dwarf.data"),
        )
        .unwrap();
        let PerfFileReader { mut perf_file, mut record_iter } =
            PerfFileReader::parse_file(std::io::Cursor::new(&bytes[..])).unwrap();
        let body = loop {
            let rec = record_iter.next_record(&mut perf_file).unwrap().expect("a sample");
            if let PerfFileRecord::EventRecord { record, .. } = rec {
                if let (Ok(EventRecord::Sample(_)), RawData::Single(b)) = (record.parse(), record.data) {
                    break (b.to_vec(), record.parse_info);
                }
            }
        };
        let (body, info) = body;
        for cut in [0, 8, 16, body.len() / 2] {
            assert!(SampleFields::parse_le(&body[..cut], &info).is_none(), "cut at {cut} of {}", body.len());
        }
    }
}
