//! The only unsafe code of the perf_event source: opening events, mapping their ring buffers and
//! copying records out of them. Everything above this module sees safe types.

use pe::bindings as b;
use perf_event_open_sys as pe;
use std::borrow::Cow;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

/// Sample layout we ask for; the parser in `records` depends on exactly these bits.
/// Every event of a run uses this layout, so one ring per CPU can carry them all (ID tells them apart).
pub const SAMPLE_TYPE: u64 = (b::PERF_SAMPLE_IP
    | b::PERF_SAMPLE_TID
    | b::PERF_SAMPLE_TIME
    | b::PERF_SAMPLE_ID
    | b::PERF_SAMPLE_PERIOD
    | b::PERF_SAMPLE_CALLCHAIN
    | b::PERF_SAMPLE_REGS_USER
    | b::PERF_SAMPLE_STACK_USER) as u64;

/// User registers copied with each sample, in perf_regs order: AX, DX, SI, DI (the arguments an allocation
/// probe reads the size from, and Go's first argument), BP, SP, IP (for unwinding).
pub const REGS_USER_MASK: u64 = (1 << 0) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8);

/// Which clock drives sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// Cycles where the PMU has them, else cpu-clock, silently.
    Auto,
    /// Hardware cycles (needs a PMU); falls back to cpu-clock with a note.
    Cycles,
    /// The kernel's cpu-clock software timer.
    CpuClock,
}

impl Clock {
    pub fn name(self) -> &'static str {
        match self {
            Clock::Auto | Clock::Cycles => "cycles",
            Clock::CpuClock => "cpu-clock",
        }
    }
}

/// What an event counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Timer or cycles sampling at `frequency` Hz.
    Clock(Clock),
    /// No samples: only the side-band records (mmap, comm, fork, exit) that let the converter follow a
    /// process whose samples come from eBPF.
    Track,
}

/// Settings for one sampling event.
#[derive(Debug, Clone, Copy)]
pub struct EventConfig {
    pub source: Source,
    pub frequency: u64,
    pub stack_bytes: u32,
    pub kernel: bool,
    /// Enable when the (gated) child calls exec, instead of immediately.
    pub enable_on_exec: bool,
}

/// The period an event sampled every Nth hit uses for a requested N: the smallest prime at least N. A
/// fixed period takes the same site over and over when the program makes a multiple of it in probed calls
/// per loop iteration (every 64th allocation of a loop that allocates twice is always the same one; a run
/// of Go's doctor named `runtime.makeslice` an allocation site that way, its stacks never sampled). With a
/// prime, only loops of N calls or more can line up with it.
pub fn sampling_period(requested: u64) -> u64 {
    let prime = |n: u64| n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| !n.is_multiple_of(d));
    (requested.max(1)..).find(|&n| n == 1 || prime(n)).expect("a prime above any u64 period in use")
}

/// Where an event counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One thread (and the threads and children it starts later) on one CPU; `side_band` asks for the
    /// records that follow its mappings, names, forks and exits.
    Task { tid: i32, side_band: bool },
    /// Every process on one CPU, opened disabled: the caller attaches a filter (or not), then enables
    /// it; `side_band` asks for the records of every process's mappings, names, forks and exits.
    Cpu { side_band: bool },
}

/// Opens `cfg` on `cpu` for `scope`, for a ring of `ring_pages` data pages (the kernel wakes its reader
/// when a quarter of it has filled).
pub fn open_event(cfg: &EventConfig, scope: Scope, cpu: i32, ring_pages: usize) -> io::Result<OwnedFd> {
    let mut attr =
        b::perf_event_attr { size: std::mem::size_of::<b::perf_event_attr>() as u32, ..Default::default() };
    match cfg.source {
        Source::Clock(Clock::Auto | Clock::Cycles) => {
            attr.type_ = b::PERF_TYPE_HARDWARE;
            attr.config = b::PERF_COUNT_HW_CPU_CYCLES as u64;
        }
        Source::Clock(Clock::CpuClock) => {
            attr.type_ = b::PERF_TYPE_SOFTWARE;
            attr.config = b::PERF_COUNT_SW_CPU_CLOCK as u64;
        }
        Source::Track => {
            attr.type_ = b::PERF_TYPE_SOFTWARE;
            attr.config = b::PERF_COUNT_SW_DUMMY as u64;
        }
    }
    match cfg.source {
        Source::Clock(_) => {
            attr.__bindgen_anon_1.sample_freq = cfg.frequency;
            attr.set_freq(1);
        }
        Source::Track => attr.__bindgen_anon_1.sample_period = 1,
    }
    attr.sample_type = SAMPLE_TYPE;
    attr.sample_regs_user = REGS_USER_MASK;
    attr.sample_stack_user = cfg.stack_bytes;
    let (pid, side_band) = match scope {
        Scope::Task { tid, side_band } => {
            attr.set_disabled(cfg.enable_on_exec as u64);
            attr.set_enable_on_exec(cfg.enable_on_exec as u64);
            attr.set_inherit(1);
            (tid, side_band)
        }
        Scope::Cpu { side_band } => {
            attr.set_disabled(1);
            (-1, side_band)
        }
    };
    attr.set_exclude_kernel((!cfg.kernel) as u64);
    attr.set_exclude_hv(1);
    // User frames come from our own DWARF unwinding of the stack copy; the kernel's FP walk is useless there.
    attr.set_exclude_callchain_user(1);
    attr.set_mmap(side_band as u64);
    attr.set_mmap2(side_band as u64);
    attr.set_comm(side_band as u64);
    attr.set_comm_exec(side_band as u64);
    attr.set_task(side_band as u64);
    attr.set_sample_id_all(1);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    // Each wake-up of the reader costs it a poll and two context switches (10-20 us in a VM): a quarter
    // of the ring (1 MB of the default 4 MB, ~64 samples of a 16 KB stack) rather than a fixed 256 KB
    // leaves three quarters to fill while it wakes, and it drains every 100 ms whatever the watermark.
    attr.set_watermark(1);
    attr.__bindgen_anon_2.wakeup_watermark =
        (ring_pages * page_size() / 4).clamp(1, u32::MAX as usize) as u32;
    // SAFETY: attr is a fully initialized perf_event_attr owned by this frame; the kernel only reads it.
    let fd = unsafe { pe::perf_event_open(&mut attr, pid, cpu, -1, b::PERF_FLAG_FD_CLOEXEC as u64) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by perf_event_open (checked >= 0) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a disabled, non-sampling event on this thread: the kernel's first perf event bound to a task
/// turns on its context-switch hooks and waits an RCU grace period (about 10 ms) in perf_event_open;
/// done on a thread of its own while the eBPF programs load, that wait is off the start-up path. Keep
/// the event open until the real per-task events are open (closing it lets the hooks go a second later).
pub fn warm_task_events() -> Option<OwnedFd> {
    let mut attr =
        b::perf_event_attr { size: std::mem::size_of::<b::perf_event_attr>() as u32, ..Default::default() };
    attr.type_ = b::PERF_TYPE_SOFTWARE;
    attr.config = b::PERF_COUNT_SW_DUMMY as u64;
    attr.set_disabled(1);
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    // SAFETY: attr is a fully initialized perf_event_attr owned by this frame; the kernel only reads it.
    let fd = unsafe { pe::perf_event_open(&mut attr, 0, -1, -1, b::PERF_FLAG_FD_CLOEXEC as u64) };
    // SAFETY: a non-negative fd was just returned by perf_event_open and is owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The id the kernel puts into samples of this event (and of its inherited copies).
pub fn event_id(fd: &OwnedFd) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: fd is an open perf event; the ioctl writes one u64 into `id`, which we own.
    if unsafe { pe::ioctls::ID(fd.as_raw_fd(), &mut id) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(id)
}

/// Sends the records of `fd` into the ring buffer of `target` (same CPU).
pub fn redirect_output(fd: &OwnedFd, target: &OwnedFd) -> io::Result<()> {
    // SAFETY: both fds are open perf events owned by the caller.
    if unsafe { pe::ioctls::SET_OUTPUT(fd.as_raw_fd(), target.as_raw_fd()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Has the kernel run eBPF program `prog` at each sample of `fd`, keeping the sample only when it
/// returns non-zero.
pub fn set_filter(fd: &OwnedFd, prog: i32) -> io::Result<()> {
    // SAFETY: fd is an open perf event; SET_BPF takes the program's fd as its argument, no pointer.
    if unsafe { pe::ioctls::SET_BPF(fd.as_raw_fd(), prog as u32) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn enable(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fd is an open perf event; ENABLE takes no pointer.
    if unsafe { pe::ioctls::ENABLE(fd.as_raw_fd(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn disable(fd: &OwnedFd) {
    // SAFETY: fd is an open perf event; DISABLE takes no pointer.
    unsafe { pe::ioctls::DISABLE(fd.as_raw_fd(), 0) };
}

/// The machine's memory page size (perf rings are counted in pages).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// How many records ahead [`Ring::read`] has the CPU fetch (see [`Ring::prefetch_ahead`]).
const PREFETCH_RECORDS: usize = 4;

/// A mapped perf ring buffer (one metadata page + 2^n data pages).
pub struct Ring {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
    data_size: usize,
    page: usize,
}

// The mapping is owned by this value alone.
// SAFETY: the mapping is owned by this value alone and only touched through &mut self or on drop.
unsafe impl Send for Ring {}

impl Ring {
    pub fn map(fd: OwnedFd, data_pages: usize) -> io::Result<Ring> {
        let page = page_size();
        let len = page * (1 + data_pages);
        // SAFETY: a fresh shared mapping of the event fd; the result is checked against MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Ring { fd, base: base as *mut u8, len, data_size: page * data_pages, page })
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    fn meta(&self) -> *mut b::perf_event_mmap_page {
        self.base as *mut b::perf_event_mmap_page
    }

    /// Calls `f` with each complete record (header included) currently in the ring, read in place: a
    /// record borrowed from the ring where it lies in one piece (nearly all), copied where it wraps around
    /// the ring's end. Nothing is freed: the space stays the reader's, so the kernel writes no record over
    /// the borrowed ones, until [`Ring::release`] is given the position returned.
    pub fn read<'a>(&'a self, mut f: impl FnMut(Cow<'a, [u8]>)) -> u64 {
        let meta = self.meta();
        // SAFETY: meta points at the ring's first page, mapped for the lifetime of self.
        let head = unsafe { std::ptr::read_volatile(&(*meta).data_head) };
        fence(Ordering::Acquire);
        // SAFETY: as above; only this reader writes data_tail.
        let mut tail = unsafe { std::ptr::read_volatile(&(*meta).data_tail) };
        // SAFETY: the data area starts one page into the mapping of len = page * (1 + data pages).
        let data = unsafe { self.base.add(self.page) };
        while tail < head {
            let off = (tail % self.data_size as u64) as usize;
            let mut hdr = [0u8; 8];
            self.copy(data, off, &mut hdr);
            let size = u16::from_ne_bytes([hdr[6], hdr[7]]) as usize;
            if size < 8 || (head - tail) < size as u64 {
                break; // cannot happen with a sane kernel; never loop forever on garbage
            }
            self.prefetch_ahead(data, tail, head, size);
            if off + size <= self.data_size {
                // SAFETY: off + size <= data_size keeps the slice inside the data area, which stays mapped
                // while self is borrowed; the kernel writes only past data_head or once data_tail has moved
                // past these bytes, and data_tail moves only in `release`, which takes self mutably, after
                // this borrow has ended.
                f(Cow::Borrowed(unsafe { std::slice::from_raw_parts(data.add(off), size) }));
            } else {
                let mut rec = vec![0; size];
                self.copy(data, off, &mut rec);
                f(Cow::Owned(rec));
            }
            tail += size as u64;
        }
        tail
    }

    /// Asks the CPU to fetch the bytes the next records' readers will touch, taking them for the size of
    /// the one at `tail`. A record is the size of its sample's stack copy (16 KB by default), written by
    /// another CPU: reading its end (the stack's used size, right before the next record's header) and
    /// the start of its stack (what unwinding reads first) missed the caches and the TLB one record after
    /// the other, a tenth of what a sample cost the recorder. Fetched ahead, the misses overlap. A guess
    /// of the wrong place fetches bytes nobody reads, and nothing else.
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn prefetch_ahead(&self, data: *const u8, tail: u64, head: u64, size: usize) {
        #[cfg(target_arch = "x86_64")]
        for k in 1..=PREFETCH_RECORDS {
            let start = tail + (k * size) as u64;
            if start >= head {
                break;
            }
            let end = (start + size as u64).min(head) - 8;
            for at in [start, start + 64, start + 128, start + 192, end] {
                let off = (at % self.data_size as u64) as usize;
                // SAFETY: off < data_size lies inside the mapped data area; a prefetch reads nothing
                // into the program and cannot fault.
                unsafe {
                    std::arch::x86_64::_mm_prefetch(
                        data.add(off) as *const i8,
                        std::arch::x86_64::_MM_HINT_T0,
                    )
                };
            }
        }
    }

    /// Frees the ring's space up to `end`, a position [`Ring::read`] returned.
    pub fn release(&mut self, end: u64) {
        fence(Ordering::Release);
        // SAFETY: meta points at the mapped control page; the kernel reads data_tail to reuse the space.
        unsafe { std::ptr::write_volatile(&mut (*self.meta()).data_tail, end) };
    }

    fn copy(&self, data: *const u8, off: usize, out: &mut [u8]) {
        let first = out.len().min(self.data_size - off);
        // SAFETY: off < data_size and first <= data_size - off, so both copies stay inside the data area and inside `out`.
        unsafe {
            std::ptr::copy_nonoverlapping(data.add(off), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping made in Ring::map, unmapped once here.
        unsafe { libc::munmap(self.base as *mut _, self.len) };
    }
}

/// Waits until one of the rings (or another pollable fd) has data or a timeout passes, on an epoll set
/// kept from one wait to the next: poll(2) registers every fd anew at each call (a wait queue entry and
/// the ring's mutex per fd: a tenth of whyslow's CPU at 2 CPUs, growing with the CPUs of a host), epoll
/// only when the fds change.
pub struct Waiter {
    /// None where epoll could not be set up: every wait is a poll(2) then.
    epoll: Option<OwnedFd>,
    /// The fds in the set, each with what tells a reused fd number apart (a ring's mapping, else 0).
    watched: Vec<(i32, usize)>,
}

impl Default for Waiter {
    fn default() -> Self {
        // SAFETY: epoll_create1 takes no pointers.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        // SAFETY: fd was just returned by epoll_create1 (checked >= 0) and is owned by nobody else.
        Waiter { epoll: (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }), watched: Vec::new() }
    }
}

impl Waiter {
    /// Waits until one of `rings` or `extra` is readable, or `timeout_ms` passes.
    pub fn wait(&mut self, rings: &[Ring], extra: impl IntoIterator<Item = i32>, timeout_ms: i32) {
        let now: Vec<(i32, usize)> = rings
            .iter()
            .map(|r| (r.fd.as_raw_fd(), r.base as usize))
            .chain(extra.into_iter().map(|fd| (fd, 0)))
            .collect();
        let Some(epoll) = self.epoll.as_ref().map(AsRawFd::as_raw_fd) else {
            return poll(&now, timeout_ms);
        };
        if now != self.watched {
            let ctl = |op, fd| {
                let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
                // SAFETY: ev is a live epoll_event of this frame; the kernel reads it (or ignores it for DEL).
                unsafe { libc::epoll_ctl(epoll, op, fd, &mut ev) }
            };
            // Gone: a closed fd left the set by itself (DEL fails then); one still open must not wake us.
            for &(fd, _) in self.watched.iter().filter(|w| !now.contains(w)) {
                ctl(libc::EPOLL_CTL_DEL, fd);
            }
            for &(fd, _) in now.iter().filter(|w| !self.watched.contains(w)) {
                if ctl(libc::EPOLL_CTL_ADD, fd) != 0 {
                    ctl(libc::EPOLL_CTL_DEL, fd);
                    ctl(libc::EPOLL_CTL_ADD, fd);
                }
            }
            self.watched = now;
        }
        let mut ready = [libc::epoll_event { events: 0, u64: 0 }; 8];
        // SAFETY: ready is a live array of this frame whose length is passed with it.
        unsafe { libc::epoll_wait(epoll, ready.as_mut_ptr(), ready.len() as i32, timeout_ms) };
    }
}

fn poll(fds: &[(i32, usize)], timeout_ms: i32) {
    let mut fds: Vec<libc::pollfd> =
        fds.iter().map(|&(fd, _)| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: fds is a live Vec of pollfd whose length is passed with it.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as _, timeout_ms) };
}

pub fn online_cpus() -> Vec<i32> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    cpus.extend(a..=b);
                }
            }
            None => cpus.extend(part.parse::<i32>()),
        }
    }
    if cpus.is_empty() {
        // SAFETY: sysconf has no memory-safety preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as i32;
        cpus.extend(0..n);
    }
    cpus
}

/// CLOCK_MONOTONIC now, in ns: the clock of every event time (perf records and eBPF alike).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The calling thread's CPU time, in ns: what work of its own costs, whatever else waits for the CPUs.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a timespec owned by this frame.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::Waiter;
    use crate::target::pipe;
    use std::os::fd::{AsRawFd, OwnedFd};

    #[test]
    fn sampling_periods_are_primes_at_least_the_request() {
        let got: Vec<u64> = [0, 1, 2, 3, 4, 16, 64, 256, 1000].map(super::sampling_period).to_vec();
        assert_eq!(got, [1, 1, 2, 3, 5, 17, 67, 257, 1009]);
    }

    fn readable(fd: &OwnedFd) -> bool {
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: p is a live pollfd of this frame.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    fn put(fd: &OwnedFd) {
        // SAFETY: one byte of a static string.
        assert_eq!(unsafe { libc::write(fd.as_raw_fd(), b"x".as_ptr().cast(), 1) }, 1);
    }

    /// A wait ends when one of the fds given is readable, and only those: one left out since the last
    /// wait (still open and readable) wakes nobody. No timeouts: a wait that never ends hangs the test.
    #[test]
    fn a_wait_follows_the_fds_given_each_time() {
        let (r1, w1) = pipe().unwrap();
        let (r2, w2) = pipe().unwrap();
        let mut waiter = Waiter::default();
        assert!(waiter.epoll.is_some());
        put(&w1);
        waiter.wait(&[], [r1.as_raw_fd()], -1);
        // r1 stays readable; r2 becomes readable a while after the wait begins.
        let late = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            put(&w2);
            w2
        });
        waiter.wait(&[], [r2.as_raw_fd()], -1);
        assert!(readable(&r2), "woken by the fd left out");
        assert_eq!(waiter.watched, [(r2.as_raw_fd(), 0)]);
        drop(late.join());
        // Both again: r1 is added back (and is readable).
        waiter.wait(&[], [r1.as_raw_fd(), r2.as_raw_fd()], -1);
        assert_eq!(waiter.watched.len(), 2);
    }
}
