//! The records a converter is fed: what perf_event rings (and perf.data files) describe, decoded into
//! owned values by the source that read them.

#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// A thread's name; `exec` when it comes from an exec (a new program image).
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
    /// A thread ended; the process ended when `pid == tid`.
    Exit {
        pid: u32,
        tid: u32,
    },
    /// A traced thread was switched out (`out`) or back in.
    Switch {
        tid: u32,
        out: bool,
    },
    /// A block that ended, decided in the kernel (an eBPF off-CPU source): the thread's stacks when it
    /// blocked (its sched state in `raw`, at the stream's `state_offset`) and the off-CPU time it stands
    /// for (a sampling source values a short block it keeps as one period).
    OffCpu {
        sample: Sample,
        ns: u64,
    },
    /// Records the kernel dropped.
    Lost(u64),
    Other,
}

/// The user registers a sample carries (perf's REGS_USER AX DX SI DI BP SP IP).
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub pid: u32,
    pub tid: u32,
    /// Which event (of the parent, for inherited copies) produced it.
    pub id: u64,
    pub period: u64,
    /// Kernel frames, innermost first (context markers removed).
    pub kernel: Vec<u64>,
    /// User frames the kernel already walked (frame pointers: `perf record -g`), innermost first; used
    /// when there are no registers and stack bytes to unwind.
    pub user: Vec<u64>,
    /// User registers at the time of the sample (absent for kernel threads).
    pub regs: Option<UserRegs>,
    /// The copied user stack, starting at SP.
    pub stack: Vec<u8>,
    /// Where the user stack continues on a goroutine's stack (Go's `runtime.systemstack`, `runtime.mcall`).
    pub goroutine: Option<GoroutineStack>,
    /// The Python frames the thread ran when the sample was taken, innermost first (a CPython process:
    /// bpf/python.h); empty for others.
    pub python: Vec<PyFrame>,
    /// Tracepoint fields (empty for other events).
    pub raw: Vec<u8>,
}

/// A Python frame as the interpreter held it: its code object and instruction (`f_lasti`, or a pointer
/// to the instruction from 3.11), read from the process's memory when the sample was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PyFrame {
    pub code: u64,
    pub instr: u64,
    /// The first frame its `_PyEval_EvalFrameDefault` call ran (the frames from the innermost up to
    /// here are that call's; each frame is one call's before 3.11).
    pub entry: bool,
    /// The code object's name as it was: the string's address and its hash (see
    /// `whyslow_python::Code::named_as`; 0 and 0: not read).
    pub name: u64,
    pub hash: u64,
}

/// A goroutine's stack copied after the user stack: `stack[offset..]` holds the bytes from address `at`,
/// where the frame-pointer chain leaves the thread's system stack for the goroutine's, or for the
/// goroutine `runtime.mcall` switched away from, its saved stack pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoroutineStack {
    pub at: u64,
    pub offset: usize,
    /// The saved pc and frame pointer of the goroutine mcall or morestack switched away from (its stack pointer is
    /// `at`); None for the frame-pointer case.
    pub parked: Option<(u64, u64)>,
}

/// A [`Sample`] whose variable-length parts are borrowed from the source's buffer (a perf.data file read
/// in place): the converter reads them while it handles the sample and keeps none of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleRef<'a> {
    pub pid: u32,
    pub tid: u32,
    pub id: u64,
    pub period: u64,
    pub kernel: &'a [u64],
    pub user: &'a [u64],
    pub regs: Option<UserRegs>,
    pub stack: &'a [u8],
    pub goroutine: Option<GoroutineStack>,
    pub python: &'a [PyFrame],
    pub raw: &'a [u8],
}

impl Sample {
    pub fn borrowed(&self) -> SampleRef<'_> {
        SampleRef {
            pid: self.pid,
            tid: self.tid,
            id: self.id,
            period: self.period,
            kernel: &self.kernel,
            user: &self.user,
            regs: self.regs,
            stack: &self.stack,
            goroutine: self.goroutine,
            python: &self.python,
            raw: &self.raw,
        }
    }
}

/// A record with the time it happened (ns, one clock for all sources) for ordering across rings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    pub time: u64,
    pub record: Record,
}
