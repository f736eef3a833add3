//! Decoding of perf ring-buffer records into owned values. Malformed records decode to `None` (counted by
//! the caller), never panic.

use crate::sys::REGS_USER_MASK;
use perf_event_open_sys::bindings as b;

pub use whyslow_convert::records::{Record, Sample, Timed, UserRegs};

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn u64(&mut self) -> Option<u64> {
        let v = self.b.get(self.at..self.at + 8)?;
        self.at += 8;
        Some(u64::from_ne_bytes(v.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        let v = self.b.get(self.at..self.at + 4)?;
        self.at += 4;
        Some(u32::from_ne_bytes(v.try_into().ok()?))
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let v = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(v)
    }
    /// A NUL-terminated string that ends before `end`.
    fn cstr(&mut self, end: usize) -> Option<String> {
        let s = self.b.get(self.at..end)?;
        let n = s.iter().position(|&c| c == 0).unwrap_or(s.len());
        Some(String::from_utf8_lossy(&s[..n]).into_owned())
    }
}

/// Size of the sample_id trailer of non-sample records: pid, tid, time, id (TID | TIME | ID).
const SAMPLE_ID_LEN: usize = 24;

/// `fixed_period`: the period of the event with this id when its samples do not carry one.
pub fn decode(rec: &[u8], fixed_period: impl Fn(u64) -> Option<u64>) -> Option<Timed> {
    let kind = u32::from_ne_bytes(rec.get(0..4)?.try_into().ok()?);
    let misc = u16::from_ne_bytes(rec.get(4..6)?.try_into().ok()?) as u32;
    let mut r = Reader { b: rec, at: 8 };
    if kind == b::PERF_RECORD_SAMPLE {
        return decode_sample(&mut r, fixed_period);
    }
    let end = rec.len().checked_sub(SAMPLE_ID_LEN)?;
    let time = u64::from_ne_bytes(rec.get(end + 8..end + 16)?.try_into().ok()?);
    let record = match kind {
        b::PERF_RECORD_MMAP2 => {
            let pid = r.u32()?;
            let _tid = r.u32()?;
            let (start, len, pgoff) = (r.u64()?, r.u64()?, r.u64()?);
            r.bytes(24)?; // maj/min/ino/generation or build id
            let prot = r.u32()?;
            let _flags = r.u32()?;
            let path = r.cstr(end)?;
            Record::Mmap { pid, start, len, pgoff, exec: prot & libc::PROT_EXEC as u32 != 0, path }
        }
        b::PERF_RECORD_MMAP => {
            let pid = r.u32()?;
            let _tid = r.u32()?;
            let (start, len, pgoff) = (r.u64()?, r.u64()?, r.u64()?);
            let path = r.cstr(end)?;
            let exec = misc & b::PERF_RECORD_MISC_MMAP_DATA == 0;
            Record::Mmap { pid, start, len, pgoff, exec, path }
        }
        b::PERF_RECORD_COMM => {
            let (pid, tid) = (r.u32()?, r.u32()?);
            let name = r.cstr(end)?;
            Record::Comm { pid, tid, name, exec: misc & b::PERF_RECORD_MISC_COMM_EXEC != 0 }
        }
        b::PERF_RECORD_FORK => {
            let (pid, ppid, tid, ptid) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
            Record::Fork { pid, ppid, tid, ptid }
        }
        b::PERF_RECORD_EXIT => {
            let (pid, _ppid, tid) = (r.u32()?, r.u32()?, r.u32()?);
            Record::Exit { pid, tid }
        }
        b::PERF_RECORD_SWITCH => {
            let tid = u32::from_ne_bytes(rec.get(end + 4..end + 8)?.try_into().ok()?);
            Record::Switch { tid, out: misc & b::PERF_RECORD_MISC_SWITCH_OUT != 0 }
        }
        b::PERF_RECORD_LOST => {
            let _id = r.u64()?;
            Record::Lost(r.u64()?)
        }
        _ => Record::Other,
    };
    Some(Timed { time, record })
}

fn decode_sample(r: &mut Reader, fixed_period: impl Fn(u64) -> Option<u64>) -> Option<Timed> {
    let _ip = r.u64()?;
    let (pid, tid) = (r.u32()?, r.u32()?);
    let time = r.u64()?;
    let id = r.u64()?;
    let period = match fixed_period(id) {
        Some(p) => p,
        None => r.u64()?,
    };
    let nr = r.u64()? as usize;
    let mut kernel = Vec::new();
    for _ in 0..nr.min(4096) {
        let a = r.u64()?;
        if a >= b::PERF_CONTEXT_MAX {
            continue; // PERF_CONTEXT_* markers
        }
        // Return addresses point after the call; step back into it, as for user frames.
        kernel.push(if kernel.is_empty() { a } else { a.saturating_sub(1) });
    }
    let raw_size = r.u32()? as usize;
    let raw = r.bytes(raw_size)?.to_vec();
    let abi = r.u64()?;
    let regs = if abi != 0 {
        let mut v = [0u64; 7];
        debug_assert_eq!(REGS_USER_MASK.count_ones() as usize, v.len());
        for slot in v.iter_mut() {
            *slot = r.u64()?;
        }
        let [ax, dx, si, di, bp, sp, ip] = v;
        Some(UserRegs { ax, dx, si, di, bp, sp, ip })
    } else {
        None
    };
    let size = r.u64()? as usize;
    let mut stack = Vec::new();
    if size > 0 {
        let data = r.bytes(size)?;
        let dyn_size = r.u64()? as usize;
        stack.extend_from_slice(&data[..dyn_size.min(size)]);
    }
    Some(Timed {
        time,
        record: Record::Sample(Sample {
            pid,
            tid,
            id,
            period,
            kernel,
            user: Vec::new(),
            regs,
            stack,
            goroutine: None,
            raw,
        }),
    })
}
