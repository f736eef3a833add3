//! Decoding of perf ring-buffer records into owned values. Malformed records decode to `None` (counted by
//! the caller), never panic.

use crate::sys::REGS_USER_MASK;
use perf_event_open_sys::bindings as b;

#[derive(Debug)]
pub enum Record {
    Sample(Sample),
    Mmap {
        pid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        exec: bool,
        path: String,
    },
    Comm {
        pid: u32,
        tid: u32,
        name: String,
        exec: bool,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
    },
    /// A traced thread was switched out (`out`) or back in.
    Switch {
        tid: u32,
        out: bool,
    },
    Lost(u64),
    Other,
}

/// The user registers of [`crate::sys::REGS_USER_MASK`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserRegs {
    pub ax: u64,
    pub dx: u64,
    pub si: u64,
    pub di: u64,
    pub bp: u64,
    pub sp: u64,
    pub ip: u64,
}

#[derive(Debug)]
pub struct Sample {
    pub pid: u32,
    pub tid: u32,
    /// Which event (of the parent, for inherited copies) produced it.
    pub id: u64,
    pub period: u64,
    /// Kernel frames, innermost first (context markers removed).
    pub kernel: Vec<u64>,
    /// User registers at the time of the sample (absent for kernel threads).
    pub regs: Option<UserRegs>,
    /// The copied user stack, starting at SP.
    pub stack: Vec<u8>,
    /// Tracepoint fields (empty for other events).
    pub raw: Vec<u8>,
}

/// A record with the time it happened (CLOCK_MONOTONIC ns) for ordering across rings.
pub struct Timed {
    pub time: u64,
    pub record: Record,
}

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

pub fn decode(rec: &[u8]) -> Option<Timed> {
    let kind = u32::from_ne_bytes(rec.get(0..4)?.try_into().ok()?);
    let misc = u16::from_ne_bytes(rec.get(4..6)?.try_into().ok()?) as u32;
    let mut r = Reader { b: rec, at: 8 };
    if kind == b::PERF_RECORD_SAMPLE {
        return decode_sample(&mut r);
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

fn decode_sample(r: &mut Reader) -> Option<Timed> {
    let _ip = r.u64()?;
    let (pid, tid) = (r.u32()?, r.u32()?);
    let time = r.u64()?;
    let id = r.u64()?;
    let period = r.u64()?;
    let nr = r.u64()? as usize;
    let mut kernel = Vec::new();
    for _ in 0..nr.min(4096) {
        let a = r.u64()?;
        if a >= b::PERF_CONTEXT_MAX {
            continue; // PERF_CONTEXT_* markers
        }
        // Return addresses point after the call; step back into it, as for user frames.
        kernel.push(if kernel.is_empty() { a } else { a - 1 });
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
    Some(Timed { time, record: Record::Sample(Sample { pid, tid, id, period, kernel, regs, stack, raw }) })
}
