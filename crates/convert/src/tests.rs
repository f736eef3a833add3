//! The converter fed synthetic records: no kernel, no processes.

use super::alloc::split;
use super::images::{KEEP_CUTS, UNUSED_IMAGES};
use super::records::{Record, Sample, Timed, UserRegs};
use super::{
    Converter, FileBytes, Host, JitMap, JitUpdate, ProcessInfo, SiteCount, SizeArg, StackCount, Stream,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use whyslow_model::raw::{RawFrame, RawRecording};
use whyslow_model::{sample_types as st, SampleType};

/// A host that knows one file by path and nothing about processes; `perf_map` is the text of the JIT
/// perf map of every process, which a test may append to.
#[derive(Clone, Default)]
struct FakeHost {
    files: HashMap<String, Vec<u8>>,
    asked: Rc<RefCell<Vec<String>>>,
    perf_map: Rc<RefCell<String>>,
    jit_asks: Rc<RefCell<u32>>,
    /// File identities by path (none: the path names the file).
    ids: HashMap<String, (u64, u64, i64)>,
}

impl Host for FakeHost {
    fn file(&self, _pid: u32, path: &str) -> Option<FileBytes> {
        self.asked.borrow_mut().push(path.to_string());
        self.files.get(path).cloned().map(FileBytes::owned)
    }
    fn process(&self, _pid: u32) -> Option<ProcessInfo> {
        None
    }
    fn thread_name(&self, _pid: u32, _tid: u32) -> Option<String> {
        None
    }
    fn jit(&self, pid: u32, from: u64, _dump: Option<&str>) -> Option<JitUpdate> {
        *self.jit_asks.borrow_mut() += 1;
        let text = self.perf_map.borrow();
        let new = text.as_bytes().get(from as usize..).filter(|b| !b.is_empty())?;
        let (map, stats) = JitMap::parse_perf_map(new);
        Some(JitUpdate::symbols(format!("/tmp/perf-{pid}.map"), map, stats.skipped, text.len() as u64))
    }
    fn identity(&self, _pid: u32, path: &str) -> Option<(u64, u64, i64)> {
        self.ids.get(path).copied()
    }
}

/// Issue 32: a library that many processes map is read once per file and parsed once per build id: two
/// paths of one file (a link) are one read, a copy elsewhere (another container's) one more read and no
/// more parsing. Files no process maps any more are dropped at a cut beyond the most recent
/// [`UNUSED_IMAGES`], and all of them once none was mapped for [`KEEP_CUTS`] cuts; one still mapped
/// stays.
#[test]
fn a_library_mapped_by_many_processes_is_parsed_once() {
    let lib = std::fs::read("/bin/true").unwrap();
    assert!(whyslow_unwind::build_id(&lib).is_some(), "Debian's /bin/true has a build id");
    let mut host = FakeHost::default();
    for (path, id) in
        [("/usr/lib/libx.so", (1, 10, 5)), ("/lib/libx.so", (1, 10, 5)), ("/ctr/lib/libx.so", (2, 20, 5))]
    {
        host.files.insert(path.into(), lib.clone());
        host.ids.insert(path.into(), id);
    }
    let asked = host.asked.clone();
    let mut c = Converter::new(host, converter().raw.sample_types.clone(), converter().streams.clone());
    for (pid, path) in
        [(1, "/usr/lib/libx.so"), (2, "/lib/libx.so"), (3, "/ctr/lib/libx.so"), (4, "/usr/lib/libx.so")]
    {
        c.handle(at(u64::from(pid), mmap(pid, 0x10000, path)), &ids());
    }
    assert_eq!(c.counters().images_loaded, 1, "one parse for the one build id");
    assert_eq!(*asked.borrow(), ["/usr/lib/libx.so", "/ctr/lib/libx.so"], "one read per file");
    assert_eq!(c.images_held(), 1);
    // 40 other files, each mapped by a process that then ends (unreadable as objects: no build id).
    for i in 0..40u32 {
        let path = format!("/opt/f{i}.so");
        c.handle(at(100 + u64::from(i), mmap(100 + i, 0x10000, &path)), &ids());
        c.handle(at(100 + u64::from(i), Record::Exit { pid: 100 + i, tid: 100 + i }), &ids());
    }
    assert_eq!(c.images_held(), 41);
    // Their processes are forgotten a second after their exit; the cut drops what is beyond the bound.
    c.handle(at(5_000_000_000, Record::Other), &ids());
    c.cut();
    assert_eq!(c.images_held(), UNUSED_IMAGES + 1, "the bound, and the library still mapped");
    c.handle(at(5_000_000_001, mmap(9, 0x10000, "/lib/libx.so")), &ids());
    assert_eq!(c.counters().images_loaded, 41, "the mapped library was kept");
    for _ in 0..KEEP_CUTS - 1 {
        c.cut();
    }
    assert_eq!(c.images_held(), UNUSED_IMAGES + 1, "within {KEEP_CUTS} cuts of their mapping");
    c.cut();
    assert_eq!(c.images_held(), 1, "only the library still mapped");
}

const EXE: &str = "/usr/bin/app";
const LIB: &str = "/usr/lib/libx.so";

fn converter() -> Converter<FakeHost> {
    let types = vec![
        SampleType { name: st::CPU.into(), unit: "samples".into() },
        SampleType { name: st::CPU_NS.into(), unit: "nanoseconds".into() },
        SampleType { name: st::OFFCPU.into(), unit: "nanoseconds".into() },
    ];
    let streams = vec![Stream::Cpu { slot: 0 }, Stream::OffCpu { slot: 2, state_offset: 0, min_block_ns: 0 }];
    Converter::new(FakeHost::default(), types, streams)
}

/// Event ids: 1 is the CPU stream, 2 the off-CPU stream.
fn ids() -> HashMap<u64, usize> {
    HashMap::from([(1, 0), (2, 1)])
}

fn at(time: u64, record: Record) -> Timed {
    Timed { time, record }
}

fn mmap(pid: u32, start: u64, path: &str) -> Record {
    Record::Mmap { pid, start, len: 0x1000, pgoff: 0x2000, exec: true, path: path.into() }
}

fn sample(id: u64, pid: u32, tid: u32, ip: u64) -> Record {
    let regs = UserRegs { ip, sp: 0x7ff0, ..Default::default() };
    Record::Sample(Sample {
        pid,
        tid,
        id,
        period: 1000,
        kernel: vec![],
        user: vec![],
        regs: Some(regs),
        stack: vec![],
        goroutine: None,
        python: Vec::new(),
        raw: vec![],
    })
}

/// The leaf frames of every sample, as (pid, tid, module path or "?", offset) with its cpu count.
fn leaves(raw: &RawRecording) -> Vec<(u32, u32, String, u64, i64)> {
    let mut v: Vec<_> = raw
        .samples
        .iter()
        .map(|((stack, t, _), values)| {
            let (m, off) = match stack.first() {
                Some(RawFrame::User { module, offset }) => {
                    (raw.modules[*module as usize].path.clone(), *offset)
                }
                Some(RawFrame::Unmapped(a)) => ("?".to_string(), *a),
                other => panic!("unexpected leaf {other:?}"),
            };
            (t.pid, t.tid, m, off, values[0])
        })
        .collect();
    v.sort();
    v
}

#[test]
fn samples_normalize_through_the_mappings_of_their_process() {
    let mut c = converter();
    c.handle_batch(
        vec![
            at(1, mmap(10, 0x40_0000, EXE)),
            at(2, sample(1, 10, 10, 0x40_0010)),
            at(3, sample(1, 10, 11, 0x9999)),
        ],
        &ids(),
    );
    let (raw, n) = c.finish();
    assert_eq!(
        leaves(&raw),
        vec![(10, 10, EXE.to_string(), 0x2010, 1), (10, 11, "?".to_string(), 0x9999, 1)],
        "file offset = ip - start + pgoff; an address in no mapping stays visible"
    );
    assert_eq!(n.samples, 2);
}

/// An address in no file is named from the process's perf map: asked for when first unknown, asked
/// again 10 ms after the last ask at the soonest (a function compiled since), never once per sample;
/// garbage lines are counted.
#[test]
fn jit_code_is_named_from_what_the_process_published() {
    let host = FakeHost::default();
    *host.perf_map.borrow_mut() = "9000 100 js_fast\nnot a line\n".into();
    let types = vec![
        SampleType { name: st::CPU.into(), unit: "samples".into() },
        SampleType { name: st::CPU_NS.into(), unit: "nanoseconds".into() },
    ];
    let mut c = Converter::new(host.clone(), types, vec![Stream::Cpu { slot: 0 }]);
    let ms = 1_000_000;
    c.handle_batch(
        vec![
            at(1, mmap(10, 0x40_0000, EXE)),
            at(2, sample(1, 10, 10, 0x9010)),
            at(3, sample(1, 10, 10, 0x9020)),
            // Not in the map yet: asked again only 10 ms after the last ask.
            at(4, sample(1, 10, 10, 0xa010)),
        ],
        &ids(),
    );
    assert_eq!(*host.jit_asks.borrow(), 1, "0x9010 asked (found); 0xa010 not within 10 ms of that ask");
    host.perf_map.borrow_mut().push_str("a000 80 js_new function\n");
    c.handle_batch(
        vec![at(5 * ms, sample(1, 10, 10, 0xa020)), at(20 * ms, sample(1, 10, 10, 0xa030))],
        &ids(),
    );
    assert_eq!(*host.jit_asks.borrow(), 2, "asked once more, 10 ms on (not at 5 ms)");
    let (raw, n) = c.finish();
    let mut named: Vec<(String, String, i64)> = raw
        .samples
        .iter()
        .map(|((stack, _, _), v)| match stack[0] {
            RawFrame::Label(l) => {
                let l = &raw.labels[l as usize];
                (l.name.clone(), l.module.clone(), v[0])
            }
            RawFrame::Unmapped(a) => (format!("{a:#x}"), String::new(), v[0]),
            ref f => panic!("{f:?}"),
        })
        .collect();
    named.sort();
    let map = "/tmp/perf-10.map".to_string();
    assert_eq!(
        named,
        vec![
            ("0xa010".into(), String::new(), 1),
            ("0xa020".into(), String::new(), 1),
            ("js_fast".into(), map.clone(), 2),
            ("js_new function".into(), map, 1),
        ]
    );
    assert_eq!(n.jit_skipped, 1);
}

#[test]
fn out_of_order_records_of_a_batch_are_handled_in_time_order() {
    let mut c = converter();
    // The sample is read from one CPU's ring before the mmap from another: by time the mmap comes first.
    c.handle_batch(vec![at(5, sample(1, 10, 10, 0x40_0010)), at(1, mmap(10, 0x40_0000, EXE))], &ids());
    let (raw, _) = c.finish();
    assert_eq!(leaves(&raw)[0].2, EXE);
}

#[test]
fn a_forked_child_inherits_mappings_and_an_exec_replaces_them() {
    let mut c = converter();
    let ids = ids();
    c.handle(at(1, mmap(10, 0x40_0000, EXE)), &ids);
    c.handle(at(2, Record::Comm { pid: 10, tid: 10, name: "app".into(), exec: false }), &ids);
    c.handle(at(3, Record::Fork { pid: 20, ppid: 10, tid: 20, ptid: 10 }), &ids);
    c.handle(at(4, sample(1, 20, 20, 0x40_0010)), &ids);
    // The child execs another program: the old address space is gone, the new name replaces the old.
    c.handle(at(5, Record::Comm { pid: 20, tid: 20, name: "other".into(), exec: true }), &ids);
    c.handle(at(6, sample(1, 20, 20, 0x40_0020)), &ids);
    c.handle(at(7, mmap(20, 0x40_0000, LIB)), &ids);
    c.handle(at(8, sample(1, 20, 20, 0x40_0030)), &ids);
    let (raw, _) = c.finish();
    assert_eq!(
        leaves(&raw),
        vec![
            (20, 20, LIB.to_string(), 0x2030, 1),
            (20, 20, EXE.to_string(), 0x2010, 1),
            (20, 20, "?".to_string(), 0x40_0020, 1),
        ]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    assert_eq!(raw.thread_names[&(20, 20)], "other", "the exec's comm");
    assert_eq!(raw.thread_names[&(10, 10)], "app");
}

#[test]
fn a_library_mapped_later_resolves_from_then_on_and_files_are_read_once() {
    let mut c = converter();
    let asked = c.host.asked.clone();
    let ids = ids();
    c.handle(at(1, mmap(10, 0x40_0000, EXE)), &ids);
    c.handle(at(2, sample(1, 10, 10, 0x7f00_0010)), &ids);
    c.handle(at(3, mmap(10, 0x7f00_0000, LIB)), &ids);
    c.handle(at(4, sample(1, 10, 10, 0x7f00_0010)), &ids);
    c.handle(at(5, mmap(11, 0x7f00_0000, LIB)), &ids); // another process maps the same file
    let (raw, _) = c.finish();
    let l = leaves(&raw);
    assert!(
        l.contains(&(10, 10, "?".into(), 0x7f00_0010, 1)) && l.contains(&(10, 10, LIB.into(), 0x2010, 1)),
        "{l:?}"
    );
    assert_eq!(*asked.borrow(), vec![EXE.to_string(), LIB.to_string()], "each file read once");
    // Anonymous and data mappings are no modules.
    let mut c = converter();
    c.handle(at(1, mmap(10, 0x1000, "//anon")), &ids);
    c.handle(
        at(1, Record::Mmap { pid: 10, start: 0x5000, len: 0x1000, pgoff: 0, exec: false, path: EXE.into() }),
        &ids,
    );
    assert_eq!(c.finish().0.modules.len(), 0);
}

#[test]
fn blocked_time_runs_from_switch_out_to_switch_in_or_thread_exit() {
    let mut c = converter();
    let ids = ids();
    c.handle(at(100, mmap(10, 0x40_0000, EXE)), &ids);
    // state 1 (TASK_INTERRUPTIBLE) at offset 0: blocked.
    let off = |tid: u32| {
        let mut s = match sample(2, 10, tid, 0x40_0010) {
            Record::Sample(s) => s,
            _ => unreachable!(),
        };
        s.raw = 1u64.to_ne_bytes().to_vec();
        Record::Sample(s)
    };
    c.handle(at(1_000, off(10)), &ids);
    c.handle(at(1_500, Record::Switch { tid: 10, out: false }), &ids);
    c.handle(at(2_000, off(11)), &ids);
    c.handle(at(2_700, Record::Exit { pid: 10, tid: 11 }), &ids);
    c.handle(at(3_000, off(12)), &ids);
    c.finish_blocked(3_250);
    let (raw, _) = c.finish();
    let mut blocked: Vec<(u32, i64)> = raw.samples.iter().map(|((_, t, _), v)| (t.tid, v[2])).collect();
    blocked.sort();
    assert_eq!(blocked, vec![(10, 500), (11, 700), (12, 250)]);
}

#[test]
fn a_block_whose_switch_in_is_not_recorded_ends_at_the_threads_next_sample() {
    // perf.data of `perf record -e sched:sched_switch` holds only the switch-outs of the threads it
    // follows: a thread's next sample of any event shows it ran again.
    let mut c = converter();
    let ids = ids();
    c.handle(at(100, mmap(10, 0x40_0000, EXE)), &ids);
    let off = || {
        let Record::Sample(mut s) = sample(2, 10, 10, 0x40_0010) else { unreachable!() };
        s.raw = 1u64.to_ne_bytes().to_vec();
        Record::Sample(s)
    };
    c.handle(at(1_000, off()), &ids);
    c.handle(at(1_400, sample(1, 10, 10, 0x40_0010)), &ids); // on CPU again
    c.handle(at(2_000, off()), &ids);
    c.handle(at(2_300, off()), &ids); // switched out again: it ran in between
    c.finish_blocked(2_350);
    let (raw, _) = c.finish();
    let offcpu: i64 = raw.samples.values().map(|v| v[2]).sum();
    let cpu: i64 = raw.samples.values().map(|v| v[0]).sum();
    assert_eq!((offcpu, cpu), (400 + 300 + 50, 1));
}

#[test]
fn blocks_decided_in_the_kernel_are_valued_as_sent_and_keep_preemption_apart() {
    // An eBPF off-CPU source sends a block when it ended, with the time it stands for (a sampled short
    // block is valued one period) and the thread's state in `raw`.
    let mut c = converter();
    let ids = ids();
    c.handle(at(100, mmap(10, 0x40_0000, EXE)), &ids);
    let block = |tid: u32, state: u64, ns: u64| {
        let Record::Sample(mut s) = sample(0, 10, tid, 0x40_0010) else { unreachable!() };
        s.raw = state.to_ne_bytes().to_vec();
        Record::OffCpu { sample: s, ns }
    };
    c.handle(at(2_000, block(10, 1, 1_000_000)), &ids);
    c.handle(at(3_000, block(10, 1, 250)), &ids);
    c.handle(at(4_000, block(11, 0, 700)), &ids); // preempted: waiting for a CPU
    let (raw, n) = c.finish();
    let mut blocked: Vec<(u32, usize, i64)> =
        raw.samples.iter().map(|((stack, t, _), v)| (t.tid, stack.len(), v[2])).collect();
    blocked.sort();
    // The preempted block's stack starts with the preempted label (one frame more); neither reaches a
    // root (the executable has no unwind data), so each ends under the cut mark.
    assert_eq!(blocked, vec![(10, 2, 1_000_250), (11, 3, 700)]);
    assert_eq!((n.samples, n.unwind.complete + n.unwind.partial), (3, 3));
}

#[test]
fn lost_and_malformed_records_are_counted() {
    let mut c = converter();
    c.handle(at(1, Record::Lost(7)), &ids());
    c.handle(at(2, Record::Lost(3)), &ids());
    c.count_malformed();
    let n = c.counters();
    assert_eq!((n.lost, n.malformed, n.samples), (10, 1, 0));
}

#[test]
fn exited_processes_are_forgotten_so_memory_stays_bounded_over_churn() {
    let mut c = converter();
    let ids = ids();
    // One process every 10 ms: each is forgotten a second (EXITED_GRACE_NS) after it exits.
    for i in 0..10_000u32 {
        let pid = 100 + i;
        let t = u64::from(i) * 10_000_000;
        c.handle(at(t, Record::Fork { pid, ppid: 1, tid: pid, ptid: 1 }), &ids);
        c.handle(at(t + 1, mmap(pid, 0x40_0000, EXE)), &ids);
        c.handle(at(t + 2, sample(1, pid, pid, 0x40_0010)), &ids);
        c.handle(at(t + 3, Record::Exit { pid, tid: pid }), &ids);
        assert!(c.live_processes() <= 101, "process state of exited processes is dropped");
        if i % 1000 == 999 {
            let w = c.cut();
            assert_eq!(w.samples.len(), 1000, "a window holds its own samples");
            assert_eq!(w.forks.len(), 1000, "and the processes that started in it");
            assert_eq!(w.forks[0], (pid - 999, 1));
            assert!(c.raw.thread_names.len() <= 101, "names of exited threads are not carried on");
        }
    }
    assert_eq!(c.raw.modules.len(), 1, "one module for the one file");
    // A process let go before its exit record came (the side band drops it from then on) is forgotten
    // like an exited one, once records a second (EXITED_GRACE_NS) later arrive.
    let mut c = converter();
    c.handle(at(1, mmap(7, 0x40_0000, EXE)), &ids);
    c.handle(at(2, sample(1, 7, 7, 0x40_0010)), &ids);
    c.forget(7, 10);
    c.forget(7, 20);
    c.handle(at(500_000_000, Record::Lost(1)), &ids);
    assert_eq!(c.live_processes(), 1, "within the grace its late samples still resolve");
    c.handle(at(1_000_000_010, Record::Lost(1)), &ids);
    assert_eq!(c.live_processes(), 0);
    // Kept when asked (allocation sites are read after the run).
    let mut c = converter().retaining_exited();
    c.handle(at(1, mmap(5, 0x40_0000, EXE)), &ids);
    c.handle(at(2, Record::Exit { pid: 5, tid: 5 }), &ids);
    assert_eq!(c.live_processes(), 1);
}

#[test]
fn a_block_that_ends_as_its_process_exits_resolves_through_its_mappings() {
    // A thread blocked until its process is torn down: the kernel sends its block at the switch-in that
    // leads to its exit, after the leader's exit record.
    let mut c = converter();
    let ids = ids();
    c.handle(at(100, mmap(10, 0x40_0000, EXE)), &ids);
    c.handle(at(1_000, Record::Exit { pid: 10, tid: 10 }), &ids);
    let Record::Sample(mut s) = sample(0, 10, 11, 0x40_0010) else { unreachable!() };
    s.raw = 1u64.to_ne_bytes().to_vec();
    c.handle(at(1_500, Record::OffCpu { sample: s, ns: 900 }), &ids);
    let (raw, _) = c.finish();
    assert_eq!(leaves(&raw), vec![(10, 11, EXE.to_string(), 0x2010, 0)]);
}

#[test]
fn windows_partition_the_samples() {
    let mut c = converter();
    let ids = ids();
    c.handle(at(1, mmap(10, 0x40_0000, EXE)), &ids);
    for i in 0..5 {
        c.handle(at(2 + i, sample(1, 10, 10, 0x40_0010)), &ids);
    }
    let first = c.cut();
    for i in 0..3 {
        c.handle(at(10 + i, sample(1, 10, 10, 0x40_0010)), &ids);
    }
    let second = c.cut();
    let total = |r: &RawRecording| r.samples.values().map(|v| v[0]).sum::<i64>();
    assert_eq!((total(&first), total(&second)), (5, 3));
    assert_eq!(leaves(&second)[0].2, EXE, "mappings carry over into the next window");
}

#[test]
fn samples_fall_in_time_slices_from_the_origin() {
    let mut c = converter();
    let ids = ids();
    let ms = 1_000_000;
    c.set_origin(1_000 * ms);
    c.handle(at(1_000 * ms, mmap(10, 0x40_0000, EXE)), &ids);
    for t in [1_000, 1_099, 1_100, 1_350, 1_399, 1_400] {
        c.handle(at(t * ms, sample(1, 10, 10, 0x40_0010)), &ids);
    }
    // A window starting later: its slices count from its own origin.
    let first = c.cut();
    c.set_origin(2_000 * ms);
    c.handle(at(2_250 * ms, sample(1, 10, 10, 0x40_0010)), &ids);
    let by_slice = |r: &RawRecording| {
        let mut v: Vec<(u32, i64)> = r.samples.iter().map(|((_, _, t), v)| (*t, v[0])).collect();
        v.sort();
        v
    };
    assert_eq!(by_slice(&first), vec![(0, 2), (1, 1), (3, 2), (4, 1)]);
    assert_eq!(by_slice(&c.cut()), vec![(2, 1)]);
}

/// Allocation counts come from the kernel per stack key; samples only name a key's stacks. A key's exact
/// count is split over its samples' stacks by the hits each stood for, a key no sample named keeps its
/// count under the lost-stack frame, and a later read adds only what was counted since.
#[test]
fn allocation_counts_are_exact_per_key_and_split_over_the_keys_stacks() {
    let types = vec![
        SampleType { name: st::ALLOC_COUNT.into(), unit: "count".into() },
        SampleType { name: st::ALLOC_BYTES.into(), unit: "bytes".into() },
        SampleType { name: st::ALLOC_SITE_COUNT.into(), unit: "count".into() },
        SampleType { name: st::ALLOC_SITE_BYTES.into(), unit: "bytes".into() },
    ];
    let streams = vec![Stream::Alloc { slot: 0, probe: 0, size: SizeArg::Arg(0) }];
    let mut c = Converter::new(FakeHost::default(), types, streams)
        .with_labels(vec![], vec![("malloc".into(), LIB.into())]);
    let keyed = |tid: u32, ip: u64, ret: u64, id: u64, weight: u64| {
        let Record::Sample(mut s) = sample(1, 7, tid, ip) else { unreachable!() };
        s.period = weight;
        s.raw = [ret.to_ne_bytes(), id.to_ne_bytes()].concat();
        Record::Sample(s)
    };
    let ids = HashMap::from([(1, 0)]);
    // Key (ret 0x1010, id 5) sampled twice from two threads (weights 1 and 3); key id 6 never sampled.
    c.handle_batch(
        vec![
            at(1, mmap(7, 0x1000, EXE)),
            at(2, keyed(7, 0x1004, 0x1010, 5, 1)),
            at(3, keyed(8, 0x1004, 0x1010, 5, 3)),
        ],
        &ids,
    );
    let site = SiteCount { pid: 7, probe: 0, ret: 0x1010, calls: 110, bytes: 1100 };
    let k5 = StackCount { pid: 7, probe: 0, ret: 0x1010, stack: 5, calls: 100, bytes: 1000 };
    let k6 = StackCount { stack: 6, calls: 10, bytes: 100, ..k5 };
    c.add_alloc_counts(&[site], &[k5, k6]);
    let lost = c.raw.labels.iter().position(|l| l.name == whyslow_model::LOST_STACK_FRAME).unwrap() as u32;
    let sum = |c: &Converter<FakeHost>, slot: usize, pred: &dyn Fn(&[RawFrame], u32) -> bool| -> i64 {
        c.raw.samples.iter().filter(|((s, t, _), _)| pred(s, t.tid)).map(|(_, v)| v[slot]).sum()
    };
    let is_lost = |s: &[RawFrame]| s.last() == Some(&RawFrame::Label(lost));
    assert_eq!(sum(&c, 0, &|_, _| true), 110);
    assert_eq!(sum(&c, 1, &|_, _| true), 1100);
    assert_eq!(sum(&c, 2, &|_, _| true), 110, "the site's exact count");
    assert_eq!(sum(&c, 0, &|s, t| !is_lost(s) && t == 7), 25, "weight 1 of 4");
    assert_eq!(sum(&c, 0, &|s, t| !is_lost(s) && t == 8), 75, "weight 3 of 4");
    assert_eq!(sum(&c, 0, &|s, _| is_lost(s)), 10, "the key no sample named");
    // Read again later: only what was counted since is added.
    c.add_alloc_counts(
        &[SiteCount { calls: 114, bytes: 1140, ..site }],
        &[StackCount { calls: 104, bytes: 1040, ..k5 }, k6],
    );
    assert_eq!(sum(&c, 0, &|_, _| true), 114);
    assert_eq!(sum(&c, 2, &|_, _| true), 114);
    assert_eq!(sum(&c, 0, &|s, t| !is_lost(s) && t == 8), 78);
}

#[test]
fn a_split_sums_to_the_whole() {
    assert_eq!(split(10, &[1, 1, 1]), vec![4, 3, 3]);
    assert_eq!(split(7, &[0, 0]), vec![7, 0]);
    assert_eq!(split(u64::MAX, &[u64::MAX, 1]).iter().sum::<u64>(), u64::MAX);
    assert_eq!(split(0, &[]), Vec::<u64>::new());
}
