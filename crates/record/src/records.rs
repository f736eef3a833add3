//! Decoding of perf ring-buffer records into owned values. Malformed records decode to `None` (counted by
//! the caller), never panic.

use crate::sys::REGS_USER_MASK;
use perf_event_open_sys::bindings as b;
use std::collections::HashMap;
use whyslow_convert::{Converter, Host};

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

/// A sample read in place: its user stack still in the ring the kernel wrote it to ([`decode_in_place`]).
pub struct InRing<'a> {
    pub time: u64,
    /// The sample, without its user stack.
    pub sample: Sample,
    pub stack: &'a [u8],
}

impl InRing<'_> {
    /// The sample with its stack copied into it: one whose stack grows (a goroutine's joined to it).
    pub fn owned(self) -> Timed {
        let InRing { time, mut sample, stack } = self;
        sample.stack = stack.to_vec();
        Timed { time, record: Record::Sample(sample) }
    }

    /// Hands the sample to the converter, its stack read where it is.
    pub fn handle<H: Host>(&self, c: &mut Converter<H>, ids: &HashMap<u64, usize>) {
        let mut s = self.sample.borrowed();
        s.stack = self.stack;
        c.handle_sample(s, self.time, ids);
    }
}

/// Size of the sample_id trailer of non-sample records: pid, tid, time, id (TID | TIME | ID).
const SAMPLE_ID_LEN: usize = 24;

pub fn decode(rec: &[u8]) -> Option<Timed> {
    let (mut t, stack) = decode_in_place(rec)?;
    if let Record::Sample(s) = &mut t.record {
        s.stack = stack.to_vec();
    }
    Some(t)
}

/// Like [`decode`], but a sample's user stack stays where it is: returned beside the record (whose own
/// `stack` is empty), so a ring's bytes are read where the kernel wrote them rather than copied (a 32 KB
/// copy per sample was the largest part of what a sample cost the recorder). Empty for other records.
pub fn decode_in_place(rec: &[u8]) -> Option<(Timed, &[u8])> {
    let kind = u32::from_ne_bytes(rec.get(0..4)?.try_into().ok()?);
    let misc = u16::from_ne_bytes(rec.get(4..6)?.try_into().ok()?) as u32;
    let mut r = Reader { b: rec, at: 8 };
    if kind == b::PERF_RECORD_SAMPLE {
        return decode_sample(&mut r);
    }
    decode_other(kind, misc, r).map(|t| (t, &[][..]))
}

fn decode_other(kind: u32, misc: u32, mut r: Reader) -> Option<Timed> {
    let rec = r.b;
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

fn decode_sample<'a>(r: &mut Reader<'a>) -> Option<(Timed, &'a [u8])> {
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
        if kernel.is_empty() {
            // Room for them all at once (a user-space sample has a marker alone: nothing allocated).
            kernel.reserve(nr.min(4096));
        }
        // Return addresses point after the call; step back into it, as for user frames.
        kernel.push(if kernel.is_empty() { a } else { a.saturating_sub(1) });
    }
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
    let mut stack = &[][..];
    if size > 0 {
        let data = r.bytes(size)?;
        let dyn_size = r.u64()? as usize;
        stack = &data[..dyn_size.min(size)];
    }
    let t = Timed {
        time,
        record: Record::Sample(Sample {
            pid,
            tid,
            id,
            period,
            kernel,
            user: Vec::new(),
            regs,
            stack: Vec::new(),
            goroutine: None,
            python: Vec::new(),
            raw: Vec::new(),
        }),
    };
    Some((t, stack))
}

#[cfg(test)]
mod tests {
    use super::{decode_in_place, Record, Sample};
    use crate::sys::{self, Clock, EventConfig, Ring, Scope, Source};
    use std::borrow::Cow;

    /// Runs `work` on a thread of its own with a cpu-clock event and its side band open on it (one ring
    /// of `pages` data pages per CPU, as a run opens them), and returns every record the kernel wrote,
    /// read in place as a run reads them (whenever `work` calls the function it is given, and at its
    /// end), decoded; the count of records that did not decode, and of those that wrapped around the end
    /// of their ring (copied).
    fn records_of(
        pages: usize,
        work: impl FnOnce(&mut dyn FnMut()) + Send,
    ) -> (u32, Vec<Record>, usize, usize) {
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                let cfg = EventConfig {
                    source: Source::Clock(Clock::CpuClock),
                    frequency: 997,
                    stack_bytes: 1024,
                    kernel: false,
                    enable_on_exec: false,
                };
                let mut rings: Vec<Ring> = sys::online_cpus()
                    .into_iter()
                    .map(|cpu| {
                        let fd = sys::open_event(&cfg, Scope::Task { tid, side_band: true }, cpu, pages)
                            .expect("perf_event_open (the tests run as root)");
                        Ring::map(fd, pages).expect("map the ring")
                    })
                    .collect();
                let (mut out, mut bad, mut wrapped) = (Vec::new(), 0, 0);
                let mut read = || {
                    for ring in &mut rings {
                        let end = ring.read(|rec| {
                            wrapped += matches!(rec, Cow::Owned(_)) as usize;
                            match decode_in_place(&rec) {
                                Some((mut t, stack)) => {
                                    if let Record::Sample(s) = &mut t.record {
                                        s.stack = stack.to_vec();
                                    }
                                    out.push(t.record)
                                }
                                None => bad += 1,
                            }
                        });
                        ring.release(end);
                    }
                };
                work(&mut read);
                read();
                (tid as u32, out, bad, wrapped)
            })
            .join()
            .unwrap()
        })
    }

    /// The samples of thread `tid` among `records`.
    fn samples_of(records: &[Record], tid: u32) -> Vec<&Sample> {
        records
            .iter()
            .filter_map(|r| match r {
                Record::Sample(s) if s.tid == tid => Some(s),
                _ => None,
            })
            .collect()
    }

    /// Burns `ns` of the calling thread's CPU time in user space, calling `every` about every `every_ns`.
    fn burn(ns: u64, every_ns: u64, every: &mut dyn FnMut()) {
        let until = sys::thread_cpu_ns() + ns;
        let mut next = sys::thread_cpu_ns().saturating_add(every_ns);
        let mut x = 1u64;
        while sys::thread_cpu_ns() < until {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
            if sys::thread_cpu_ns() >= next {
                every();
                next = sys::thread_cpu_ns().saturating_add(every_ns);
            }
        }
    }

    /// Records read in place from a ring of two pages, read every 2 ms of the thread's CPU while it runs
    /// at 997 Hz, wrap around the ring's end again and again: those are copied whole, and every sample
    /// decodes with the stack bytes asked for.
    #[test]
    fn records_read_in_place_decode_whole_across_the_rings_end() {
        let (tid, records, bad, wrapped) = records_of(2, |read| burn(200_000_000, 2_000_000, read));
        assert_eq!(bad, 0, "every record decodes");
        let samples = samples_of(&records, tid);
        // About 199 samples of ~1.2 KB through 8 KB: the ring's end is passed ~30 times, and a record
        // lies across it each time but where one ends exactly there.
        assert!(wrapped >= 5, "{wrapped} records wrapped");
        assert!(samples.len() >= 100, "{} samples", samples.len());
        for s in samples {
            assert_eq!(s.stack.len(), 1024, "the stack bytes asked for");
            assert!(s.regs.is_some_and(|r| r.sp != 0 && r.ip != 0));
        }
    }

    /// What a run's decoder reads from the real kernel: the thread's new name, a file it maps
    /// executable (start, length, offset, path exact), a thread it starts and ends, and clock samples
    /// carrying the registers and the stack bytes asked for.
    #[test]
    fn the_kernels_records_decode_to_what_the_thread_did() {
        let pages = 3;
        let (mut mapped_at, mut child) = (0u64, 0u32);
        let (tid, records, bad, _) = records_of(512, |_| {
            // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
            unsafe { libc::prctl(libc::PR_SET_NAME, c"ws-records".as_ptr()) };
            let file = std::fs::File::open("/proc/self/exe").unwrap();
            // SAFETY: a fresh private read+exec mapping of a file we hold open, unmapped below.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    pages * 4096,
                    libc::PROT_READ | libc::PROT_EXEC,
                    libc::MAP_PRIVATE,
                    std::os::fd::AsRawFd::as_raw_fd(&file),
                    4096,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            mapped_at = at as u64;
            // SAFETY: unmaps exactly the mapping made above.
            unsafe { libc::munmap(at, pages * 4096) };
            // SAFETY: gettid has no preconditions.
            child = std::thread::spawn(|| unsafe { libc::gettid() } as u32).join().unwrap();
            burn(200_000_000, u64::MAX, &mut || {});
        });
        assert_eq!(bad, 0, "every record decodes");
        let pid = std::process::id();
        assert!(records.iter().any(|r| matches!(r,
            Record::Comm { pid: p, tid: t, name, exec: false } if *p == pid && *t == tid && name == "ws-records")));
        let exe = std::fs::read_link("/proc/self/exe").unwrap().display().to_string();
        let maps: Vec<&Record> = records
            .iter()
            .filter(|r| matches!(r, Record::Mmap { start, .. } if *start == mapped_at))
            .collect();
        assert_eq!(maps.len(), 1, "{maps:?}");
        assert!(matches!(maps[0], Record::Mmap { pid: p, len, pgoff: 4096, exec: true, path, .. }
            if *p == pid && *len == pages as u64 * 4096 && *path == exe));
        assert!(records
            .iter()
            .any(|r| matches!(r, Record::Fork { pid: p, tid: t, .. } if *p == pid && *t == child)));
        assert!(records
            .iter()
            .any(|r| matches!(r, Record::Exit { pid: p, tid: t } if *p == pid && *t == child)));
        let samples = samples_of(&records, tid);
        // 200 ms of the thread's CPU at 997 Hz (cpu-clock runs on the thread's own CPU time, so the load
        // of the machine does not change it): 199 samples expected, 198 measured; within 20%.
        assert!((160..=240).contains(&samples.len()), "{} samples", samples.len());
        for s in samples {
            assert_eq!(s.pid, pid);
            assert!(s.period > 0);
            let regs = s.regs.expect("user registers");
            assert!(regs.sp != 0 && regs.ip != 0);
            assert_eq!(s.stack.len(), 1024, "the stack bytes asked for");
            assert!(s.kernel.is_empty(), "kernel frames were not asked for");
        }
    }
}
