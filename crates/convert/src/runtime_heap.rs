//! Memory of a runtime that keeps its own heap (Go: the garbage collector's heap is not malloc's), as the
//! runtime reports it at moments of a run (Go's `/debug/pprof/heap`): per stack of named frames, the
//! bytes and objects in use and those allocated since the process started. Consecutive reports become the
//! same samples the allocation-pairing sources give: `inuse-*` changes per time slice (the first report's
//! in-use at its slice, so their sum is what was held at the last report) and `alloc-*` of what was
//! allocated between reports. Nothing here reads a process, a file or the network.

use std::collections::HashMap;
use whyslow_model::raw::{RawFrame, RawRecording, RawThread};
use whyslow_model::{sample_types as st, FrameKind, SampleType, TIME_BUCKET_NS};

/// One frame as the runtime names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NamedFrame {
    pub name: String,
    /// The file the code is in (the executable), "" when the runtime does not say.
    pub module: String,
    /// Source file and line, "" and 0 when unknown.
    pub file: String,
    pub line: u32,
    /// Inlined into the frame after it (no return address of its own).
    pub inlined: bool,
}

/// One stack of a report and its counters: in use at the report, allocated since the process started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeHeapRow {
    /// Leaf (the allocating function) first.
    pub frames: Vec<NamedFrame>,
    pub inuse_bytes: i64,
    pub inuse_count: i64,
    pub alloc_bytes: i64,
    pub alloc_count: i64,
}

/// One report of the runtime's heap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeHeapReport {
    /// When it was taken (wall clock, ns since the epoch), which places it in the run's time slices.
    pub unix_ns: u64,
    pub rows: Vec<RuntimeHeapRow>,
}

/// The memory types a runtime's reports fill, with their units.
pub const RUNTIME_HEAP_TYPES: [(&str, &str); 4] = [
    (st::INUSE_BYTES, "bytes"),
    (st::INUSE_COUNT, "count"),
    (st::ALLOC_BYTES, "bytes"),
    (st::ALLOC_COUNT, "count"),
];

/// Adds consecutive reports of one process's heap to `raw` as samples of `thread` (the memory types are
/// appended to its sample types where missing). The first report gives what was in use when the run
/// began (at its slice) and the baseline of the allocation counters; each later one, per stack, the change
/// of in-use and what was allocated since the one before (a stack gone from a report holds nothing; a
/// counter that went down, a restarted process, counts nothing). Slices are counted from
/// `raw.meta.start_unix_ns`, within the run's duration.
pub fn add_runtime_heap(raw: &mut RawRecording, thread: RawThread, reports: &[RuntimeHeapReport]) {
    let slots: Vec<usize> =
        RUNTIME_HEAP_TYPES.iter().map(|(name, unit)| type_slot(raw, name, unit)).collect();
    let n = raw.sample_types.len();
    let last_slice = raw.meta.duration_ns.saturating_sub(1) / TIME_BUCKET_NS;
    let mut labels: HashMap<NamedFrame, u32> = HashMap::new();
    // Per stack: (inuse bytes, inuse count, alloc bytes, alloc count) as of the report before.
    let mut before: HashMap<Vec<RawFrame>, [i64; 4]> = HashMap::new();
    for (k, report) in reports.iter().enumerate() {
        let slice = (report.unix_ns.saturating_sub(raw.meta.start_unix_ns) / TIME_BUCKET_NS).min(last_slice);
        let mut now: HashMap<Vec<RawFrame>, [i64; 4]> = HashMap::new();
        for row in &report.rows {
            let stack: Vec<RawFrame> = row
                .frames
                .iter()
                .map(|f| {
                    RawFrame::Label(*labels.entry(f.clone()).or_insert_with(|| {
                        let kind = if f.inlined { FrameKind::Inlined } else { FrameKind::User };
                        raw.label_at(&f.name, &f.module, kind, &f.file, f.line)
                    }))
                })
                .collect();
            let v = now.entry(stack).or_insert([0; 4]);
            for (a, b) in
                v.iter_mut().zip([row.inuse_bytes, row.inuse_count, row.alloc_bytes, row.alloc_count])
            {
                *a = a.saturating_add(b.max(0));
            }
        }
        let add = |raw: &mut RawRecording, stack: &Vec<RawFrame>, d: [i64; 4]| {
            if d != [0; 4] {
                let mut values = vec![0i64; n];
                for (slot, v) in slots.iter().zip(d) {
                    values[*slot] = v;
                }
                raw.add(stack, &thread, slice as u32, &values);
            }
        };
        for (stack, v) in &now {
            let d = match before.get(stack) {
                Some(b) => [v[0] - b[0], v[1] - b[1], (v[2] - b[2]).max(0), (v[3] - b[3]).max(0)],
                // A stack first seen after the first report allocated all it has since the one before.
                None if k > 0 => *v,
                None => [v[0], v[1], 0, 0],
            };
            add(raw, stack, d);
        }
        for (stack, b) in &before {
            if !now.contains_key(stack) {
                add(raw, stack, [-b[0], -b[1], 0, 0]);
            }
        }
        // A stack gone from a report keeps its allocation baseline, should it come back.
        for (stack, b) in before {
            now.entry(stack).or_insert([0, 0, b[2], b[3]]);
        }
        before = now;
    }
}

/// The index of sample type `name` in `raw`, appended (every sample's values widened) when missing.
fn type_slot(raw: &mut RawRecording, name: &str, unit: &str) -> usize {
    if let Some(i) = raw.sample_types.iter().position(|t| t.name == name) {
        return i;
    }
    raw.sample_types.push(SampleType { name: name.into(), unit: unit.into() });
    let n = raw.sample_types.len();
    for v in raw.samples.values_mut() {
        v.resize(n, 0);
    }
    if !raw.totals.is_empty() {
        raw.totals.resize(n, 0);
    }
    n - 1
}

#[cfg(test)]
mod tests {
    use super::{add_runtime_heap, NamedFrame, RuntimeHeapReport, RuntimeHeapRow};
    use whyslow_model::raw::{RawFrame, RawRecording, RawThread};
    use whyslow_model::{sample_types as st, SampleType};

    fn frame(name: &str, inlined: bool) -> NamedFrame {
        NamedFrame { name: name.into(), module: "/bin/app".into(), file: "app.go".into(), line: 7, inlined }
    }

    fn row(names: &[&str], v: [i64; 4]) -> RuntimeHeapRow {
        RuntimeHeapRow {
            frames: names.iter().enumerate().map(|(i, n)| frame(n, i == 0 && names.len() > 2)).collect(),
            inuse_bytes: v[0],
            inuse_count: v[1],
            alloc_bytes: v[2],
            alloc_count: v[3],
        }
    }

    /// Three reports 1 s apart: a leak that grows, a cache that is freed, a stack that appears later.
    /// In use sums to the last report's; allocations are what was allocated after the first report; a
    /// recording that already has a CPU type keeps its samples, widened with zeros.
    #[test]
    fn reports_become_in_use_changes_and_allocations_between_them() {
        let mut raw = RawRecording {
            sample_types: vec![SampleType { name: st::CPU.into(), unit: "count".into() }],
            ..Default::default()
        };
        raw.meta.start_unix_ns = 10_000_000_000;
        raw.meta.duration_ns = 2_500_000_000;
        let t = RawThread { pid: 5, tid: 5 };
        raw.add(&[RawFrame::Unmapped(1)], &t, 0, &[3]);
        let at = |s: u64, rows| RuntimeHeapReport { unix_ns: 10_000_000_000 + s * 1_000_000_000, rows };
        let leak = ["main.leak", "main.main"];
        let cache = ["main.fill", "main.main"];
        let late = ["strings.Repeat", "main.late", "main.main"];
        let reports = [
            at(0, vec![row(&leak, [100, 1, 500, 5]), row(&cache, [40, 4, 40, 4])]),
            at(1, vec![row(&leak, [300, 3, 700, 7]), row(&cache, [40, 4, 40, 4])]),
            at(2, vec![row(&leak, [600, 6, 1000, 10]), row(&late, [8, 1, 8, 1])]),
        ];
        add_runtime_heap(&mut raw, t.clone(), &reports);
        let names: Vec<&str> = raw.sample_types.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [st::CPU, st::INUSE_BYTES, st::INUSE_COUNT, st::ALLOC_BYTES, st::ALLOC_COUNT]);
        let stack = |names: &[&str]| -> Vec<RawFrame> {
            names
                .iter()
                .map(|n| {
                    RawFrame::Label(raw.labels.iter().position(|l| l.name == *n).expect("labelled") as u32)
                })
                .collect()
        };
        let get = |s: &[&str], slice| raw.samples.get(&(stack(s), t.clone(), slice)).cloned();
        assert_eq!(get(&leak, 0), Some(vec![0, 100, 1, 0, 0]));
        assert_eq!(get(&leak, 10), Some(vec![0, 200, 2, 200, 2]));
        assert_eq!(get(&leak, 20), Some(vec![0, 300, 3, 300, 3]));
        assert_eq!(get(&cache, 20), Some(vec![0, -40, -4, 0, 0]));
        assert_eq!(get(&late, 20), Some(vec![0, 8, 1, 8, 1]));
        assert_eq!(raw.samples.get(&(vec![RawFrame::Unmapped(1)], t.clone(), 0)), Some(&vec![3, 0, 0, 0, 0]));
        let inlined = &raw.labels[raw.labels.iter().position(|l| l.name == "strings.Repeat").unwrap()];
        assert_eq!(
            (inlined.kind, inlined.file.as_str(), inlined.line),
            (whyslow_model::FrameKind::Inlined, "app.go", 7)
        );
        let held: i64 = raw.samples.values().map(|v| v[1]).sum();
        assert_eq!(held, 608, "in use at the last report");
        let allocated: i64 = raw.samples.values().map(|v| v[3]).sum();
        assert_eq!(allocated, 508, "allocated after the first report");
    }
}
