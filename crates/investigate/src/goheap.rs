//! Memory in use of a Go program, from its runtime's own heap profile (`record --mem URL`): Go allocates
//! from its garbage-collected heap, not through malloc, so neither the memory library nor malloc probes
//! see it, but a program serving `net/http/pprof` reports it. The heap is read at the start and at the end
//! (each after a collection, `gc=1`: in use is what is live then) and every period between (as of the
//! last collection: the series the growth rule fits); `whyslow_convert::runtime_heap` turns the reports
//! into `inuse-*` (the heap at the end) and `alloc-*` (what the run allocated). With `-p PID` and other
//! sources (`--cpu`, `--offcpu`), the process is recorded as usual meanwhile and the heap joins that
//! recording. Nothing here stops or probes the target: each report is one HTTP request it answers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use whyslow_convert::runtime_heap::{add_runtime_heap, RuntimeHeapReport};
use whyslow_import::{fetch_go_heap, go_heap_url, ImportError, ImportOptions};
use whyslow_model::raw::{RawRecording, RawThread};
use whyslow_model::Metadata;
use whyslow_record::{record, signals, Observer, RecordError, RecordOptions, Target};

/// Why a run on a Go heap failed: the heap's URL answered nothing usable at the start, or the recording
/// beside it failed.
#[derive(Debug, thiserror::Error)]
pub enum GoHeapError {
    #[error(transparent)]
    Heap(#[from] ImportError),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(
        "--mem URL reads a running Go program's heap: give -p PID (or nothing), not a command to launch"
    )]
    Launched,
}

/// Where the heap is and how often it is read between the start and the end.
#[derive(Debug, Clone)]
pub struct GoHeapOptions {
    /// The program's address, `/debug/pprof` index or heap profile URL.
    pub url: String,
    pub period: Duration,
}

/// Reads the Go heap over the run `opts` describes (its duration, or until Ctrl-C); records the process
/// (`-p`) beside it when `opts` asks for a source of its own (CPU, off-CPU, allocations). The first report
/// failing is the run's error (nothing is recorded); a later one ends the reading with a note, keeping
/// what was read.
pub fn record_go_heap(
    opts: &RecordOptions,
    heap: &GoHeapOptions,
    observer: &mut impl Observer,
) -> Result<RawRecording, GoHeapError> {
    let pids = match &opts.target {
        Target::Launch(_) => return Err(GoHeapError::Launched),
        Target::Pids(p) => p.clone(),
        _ => Vec::new(),
    };
    let url = go_heap_url(&heap.url)?;
    let import = ImportOptions::default();
    let first = fetch_go_heap(&url, true, &import)?;
    let reader = Reader { url: url.clone(), import, period: heap.period, reports: Mutex::new(vec![first]) };
    let alongside = opts.cpu || opts.offcpu.is_some() || opts.alloc.is_some() || opts.syscalls.is_some();
    let started = Instant::now();
    let mut raw = if alongside && !pids.is_empty() {
        let stop = AtomicBool::new(false);
        let recorded = std::thread::scope(|s| {
            let reading = s.spawn(|| reader.read_until(|| stop.load(Ordering::Relaxed), None));
            let recorded = record(opts, observer);
            stop.store(true, Ordering::Relaxed);
            let _ = reading.join();
            recorded
        });
        recorded?
    } else {
        observer.started(&pids);
        reader.read_until(signals::stop_requested, opts.duration);
        own_recording(&pids, &url, started.elapsed())
    };
    let mut notes = Vec::new();
    let mut reports = reader.reports.into_inner().unwrap_or_else(|e| e.into_inner());
    match fetch_go_heap(&url, true, &reader.import) {
        Ok(last) => reports.push(last),
        Err(e) => notes
            .push(format!("memory: the last read of the Go heap failed ({e}): in use as of the read before")),
    }
    let (first, last) = (reports[0].unix_ns, reports.last().map_or(0, |r| r.unix_ns));
    if !alongside || pids.is_empty() {
        raw.meta.start_unix_ns = first;
        raw.meta.duration_ns = last.saturating_sub(first).max(1);
    }
    let pid = pids.first().copied().unwrap_or(0);
    let thread = RawThread { pid, tid: pid };
    let program = reports
        .iter()
        .flat_map(|r| &r.rows)
        .flat_map(|r| &r.frames)
        .map(|f| f.module.as_str())
        .find(|m| !m.is_empty());
    let name = program.map_or("go heap", whyslow_model::basename).to_string();
    raw.thread_names.entry((pid, pid)).or_insert(name);
    add_runtime_heap(&mut raw, thread, &reports);
    notes.insert(
        0,
        format!(
            "memory: Go's heap as its runtime reports it ({url}, read {} times): in use at the end after a \
             collection, allocated during the run; Go samples allocations every 512 KiB on average and \
             scales them (estimates); C allocations (cgo) are not in it",
            reports.len()
        ),
    );
    raw.meta.notes.extend(notes);
    Ok(raw)
}

/// The reports of one run, read every period.
struct Reader {
    url: String,
    import: ImportOptions,
    period: Duration,
    reports: Mutex<Vec<RuntimeHeapReport>>,
}

impl Reader {
    /// Reads a report every period until `stop` says so or `duration` passed; a failed read ends it.
    fn read_until(&self, stop: impl Fn() -> bool, duration: Option<Duration>) {
        let start = Instant::now();
        let mut next = start + self.period;
        loop {
            let now = Instant::now();
            if stop() || duration.is_some_and(|d| now - start >= d) {
                return;
            }
            if now >= next {
                match fetch_go_heap(&self.url, false, &self.import) {
                    Ok(r) => self.reports.lock().unwrap_or_else(|e| e.into_inner()).push(r),
                    Err(_) => return,
                }
                next += self.period;
            }
            let wait =
                duration.map_or(next, |d| next.min(start + d)).saturating_duration_since(Instant::now());
            std::thread::sleep(wait.min(Duration::from_millis(50)));
        }
    }
}

/// The recording a heap-only run fills: what it was of and on which host.
fn own_recording(pids: &[u32], url: &str, elapsed: Duration) -> RawRecording {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let command = match pids {
        [] => vec![url.to_string()],
        _ => vec!["-p".into(), pids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")],
    };
    RawRecording {
        meta: Metadata {
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            command,
            target_pids: pids.to_vec(),
            event: "go-heap".into(),
            duration_ns: elapsed.as_nanos() as u64,
            hostname: read("/proc/sys/kernel/hostname"),
            kernel_release: read("/proc/sys/kernel/osrelease"),
            ..Default::default()
        },
        ..Default::default()
    }
}
