//! Every threshold of the doctor's rules, in one place. Shares are percentages of CPU time (rules about
//! running code) or of all threads' wall time (rules about blocking); rates are per second of the run.

/// tz-stat-storm: stat-family syscalls per second, and the CPU share under glibc's time-zone file reader.
pub const TZ_STAT_RATE: f64 = 1000.0;
pub const TZ_CPU_PCT: f64 = 2.0;
/// repeated-lookups: open/stat-family syscalls per second, the share of their sampled stacks inside one
/// library call, and the CPU share in that call worth acting on.
pub const LOOKUPS_RATE: f64 = 1000.0;
pub const LOOKUPS_STACKS_PCT: f64 = 50.0;
pub const LOOKUPS_CPU_PCT: f64 = 5.0;
/// hot-logging: CPU share under formatting/logging functions.
pub const LOGGING_CPU_PCT: f64 = 10.0;
/// small-writes: write-family calls per second, with at most this many bytes per call on average.
pub const SMALL_WRITES_RATE: f64 = 1000.0;
pub const SMALL_WRITE_BYTES: f64 = 512.0;
/// small-writes: share of CPU in those syscalls (or of wall blocked in them) worth acting on.
pub const SMALL_WRITES_PCT: f64 = 5.0;
/// small-writes to a regular file at about one per request (a log line per request): the share worth a
/// buffer, lower because each request pays it on the thread that answers, and the fix is one setting.
pub const SMALL_FILE_WRITES_PER_REQUEST_PCT: f64 = 2.0;
/// small-writes to a regular file: the most writes per request (from half a write) still on the request
/// path, a line or a few per request (PostgreSQL with both log_statement and log_min_duration_statement
/// writes two: the statement, then its duration); counted in windows, a ratio of exactly 2 may read a
/// little above it.
pub const SMALL_FILE_WRITES_PER_REQUEST_MAX: f64 = 3.0;
/// small-writes on a socket answering one request per write: the share of CPU in the per-call part of
/// the path (what only pipelining clients or a batching protocol would save) worth that change.
pub const SMALL_REPLIES_PCT: f64 = 10.0;
/// tiny-reads: read-family calls per second bringing at most this many bytes per call on average, and
/// the share of CPU in the read path worth acting on.
pub const TINY_READS_RATE: f64 = 1000.0;
pub const TINY_READ_BYTES: f64 = 64.0;
pub const TINY_READS_PCT: f64 = 5.0;
/// alloc-churn: CPU share in the allocator.
pub const ALLOC_CPU_PCT: f64 = 10.0;
/// excess-copying: CPU share in memcpy/memmove and string copy/append.
pub const COPY_CPU_PCT: f64 = 15.0;
/// protobuf-reflection: CPU share in protobuf's reflection-based serialization.
pub const PROTOBUF_REFLECTION_CPU_PCT: f64 = 10.0;
/// reflection-dispatch: CPU share in Go's reflect package and reflection-based encoders.
pub const REFLECTION_CPU_PCT: f64 = 15.0;
/// gc-pressure: CPU share in Go's allocator and garbage collector.
pub const GC_CPU_PCT: f64 = 15.0;
/// jvm-runtime: CPU share of a JVM's garbage collector threads, or of its JIT compiler threads.
pub const JVM_GC_CPU_PCT: f64 = 15.0;
pub const JVM_JIT_CPU_PCT: f64 = 10.0;
/// redundant-calls: a caller runs at least this many times per call of its work callee, and takes at
/// least this share of CPU in its own code (time in its callees is work, not the pattern).
pub const REDUNDANT_RATIO: f64 = 100.0;
pub const REDUNDANT_CPU_PCT: f64 = 5.0;
/// tiny-container-lookups: CPU share in tree/hash map lookups and their key comparisons.
pub const CONTAINER_CPU_PCT: f64 = 10.0;
/// unoptimized-build: self CPU share of a module built without optimization.
pub const UNOPTIMIZED_CPU_PCT: f64 = 10.0;
/// lock-contention: share of wall time blocked waiting for a lock.
pub const LOCK_WALL_PCT: f64 = 5.0;
/// cache-misses: CPU share in the functions that fill a recognised server's own cache on a miss. A
/// warm cache sized to its working set spends ~0% there (PostgreSQL under pgbench -S: 0.0% with the
/// data in shared_buffers); one at a twentieth of the data 15-30%.
pub const CACHE_MISS_CPU_PCT: f64 = 10.0;
/// hot-python-code: CPU share of the interpreter running Python code (bytecode and its own helpers,
/// not the builtins and extensions it calls). At half the CPU or more, interpreting is most of what
/// the program does: moving its hottest functions to builtins, vectorized or native code (commonly
/// 10-100x faster per operation) would take most of the run away. Below, a CPU-bound Python program's
/// time is mostly in builtins, extensions or the kernel, where other rules speak.
pub const HOT_PYTHON_CPU_PCT: f64 = 50.0;
/// python-c-extension: CPU share in C extension modules (and the libraries under them) called from
/// Python. A third of the CPU under a few native calls is worth calling them less or with more work
/// each; less is the extension doing its part of the work, nothing to fix there.
pub const PYTHON_EXTENSION_CPU_PCT: f64 = 30.0;
/// gil-contention: share of wall time CPython threads wait for the interpreter lock.
pub const GIL_WALL_PCT: f64 = 20.0;
/// blocking-io: share of wall time blocked in file I/O and syncs, and at least this much blocked time
/// in all (a short run that syncs a few times is fine however large its share).
pub const BLOCKING_IO_WALL_PCT: f64 = 10.0;
pub const BLOCKING_IO_MIN_MS: f64 = 100.0;
/// blocking-io: fewer sync syscalls than this (counted) are no sync per record or statement, however
/// long they wait: a batch's one commit on a busy disk (SQLite syncs 3-4 times per transaction).
pub const BLOCKING_IO_MIN_SYNCS: u64 = 10;
/// cpu-throttling: share of the cgroup's periods that hit the quota, and share of the run it spent
/// throttled.
pub const THROTTLED_PERIODS_PCT: f64 = 20.0;
pub const THROTTLED_WALL_PCT: f64 = 10.0;
/// cpu-oversubscription: share of the threads' working time waiting for a CPU, and threads wanting a
/// CPU on average, as a multiple of the CPUs the target may use.
pub const OVERSUB_WAIT_PCT: f64 = 20.0;
pub const OVERSUB_DEMAND_RATIO: f64 = 1.5;
/// too-few-workers: an event-loop worker had work (ran or waited for a CPU) for at least this share of
/// its time; a worker runs for at least this share of the run and is seen for at least this share of it
/// (a listener that only accepts, a thread that lived a moment, are not workers).
pub const WORKER_BUSY_PCT: f64 = 80.0;
pub const WORKER_MIN_RUN_PCT: f64 = 5.0;
pub const WORKER_MIN_SEEN_PCT: f64 = 50.0;
/// memory-pressure: share of the threads' working time blocked in page faults reading from disk or
/// swap, and at least this much blocked time in all.
pub const MEMORY_WALL_PCT: f64 = 5.0;
pub const MEMORY_MIN_MS: f64 = 100.0;

/// blocking-io: a thread idle (waiting for work) for at least this share of its time that ran for under
/// this share of the rest is a background worker (a flusher thread): its disk waits hold up no request.
pub const BACKGROUND_IDLE_PCT: f64 = 50.0;
pub const BACKGROUND_RUNNING_PCT: f64 = 10.0;

/// A thread idle (waiting for work) for at least this share of its time is summarized as idle.
pub const IDLE_THREAD_PCT: f64 = 90.0;

/// Evidence lists show this many call sites / functions.
pub const EVIDENCE_ROWS: usize = 3;
/// Hot paths printed after the findings.
pub const HOT_PATHS: usize = 5;
/// Second phase: count calls of this many hottest functions and this many callees of each.
pub const CANDIDATE_FUNCTIONS: usize = 6;
pub const CANDIDATE_CALLEES: usize = 3;
/// memory-growth: least growth over the run worth a finding, least run to judge (10 slices), and how
/// much of the run's rate the second half must still grow at (else it levelled off: bounded).
pub const MEMORY_GROWTH_MIN_BYTES: u64 = 64 * 1024;
pub const MEMORY_GROWTH_MIN_SECS: f64 = 1.0;
pub const MEMORY_GROWTH_STEADY: f64 = 0.5;
