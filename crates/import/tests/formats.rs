//! Golden tests of the importers on the corpus (re-bless with WHYSLOW_BLESS=1), and the pprof mapping
//! of inlined lines, unsymbolized locations, labels and sample-type order on a hand-built profile.

use std::path::{Path, PathBuf};
use whyslow_import::{decode, ImportOptions};
use whyslow_model::pprof as proto;
use whyslow_model::{basename, FrameKind, Profile};

fn dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(sub)
}

/// A stable text form of a profile: types, metadata, threads, and one line per sample with its stack
/// (root first, each frame `name [module] kind`), sorted.
fn dump(p: &Profile) -> String {
    let mut out = String::new();
    let types: Vec<String> = p.sample_types.iter().map(|t| format!("{}/{}", t.name, t.unit)).collect();
    out += &format!("types: {}\n", types.join(", "));
    out += &format!(
        "event: {}; frequency_hz: {}; duration_ns: {}\n",
        p.meta.event, p.meta.frequency_hz, p.meta.duration_ns
    );
    for t in &p.threads {
        out += &format!("thread: {}/{} {}\n", t.pid, t.tid, t.name);
    }
    let mut lines: Vec<String> = p
        .samples
        .iter()
        .map(|s| {
            let frames: Vec<String> = p
                .stack_frames(s.stack)
                .iter()
                .map(|&f| {
                    let kind = match p.frames[f as usize].kind {
                        FrameKind::User => "",
                        FrameKind::Inlined => " inlined",
                        FrameKind::Kernel => " kernel",
                        FrameKind::Unknown => " unknown",
                    };
                    format!("{} [{}]{kind}", p.frame_name(f), basename(p.frame_module(f)))
                })
                .collect();
            let values: Vec<String> = s.values.iter().map(i64::to_string).collect();
            format!("{} = {} @{}", frames.join("; "), values.join(" "), s.thread)
        })
        .collect();
    lines.sort();
    out += &lines.join("\n");
    out.push('\n');
    out
}

fn check_golden(name: &str, got: &str) {
    let path = dir("golden").join(name);
    if std::env::var_os("WHYSLOW_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} missing: run with WHYSLOW_BLESS=1", path.display()));
    assert_eq!(got, want, "{name} differs from the golden file (WHYSLOW_BLESS=1 re-blesses)");
}

fn import(name: &str) -> Profile {
    let path = dir("corpus").join(name);
    let bytes = std::fs::read(&path).unwrap();
    decode(&bytes, name, &ImportOptions::default()).unwrap()
}

#[test]
fn folded_golden() {
    let p = import("small.folded");
    check_golden("small.folded.txt", &dump(&p));
    assert_eq!(p.total(0), 105);
}

#[test]
fn perf_script_golden() {
    let p = import("cpu_clock.perf-script");
    check_golden("cpu_clock.perf-script.txt", &dump(&p));
    let types: Vec<&str> = p.sample_types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(types, ["cpu", "cpu-ns"]);
    assert_eq!((p.total(0), p.total(1)), (5, 5_005_005));
    assert_eq!(p.meta.frequency_hz, 999);
    assert_eq!(p.meta.duration_ns, 4_151_000);
    let names: Vec<&str> = p.threads.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["cpu_split", "worker pool"]);
    assert_eq!((p.threads[1].pid, p.threads[1].tid), (7129, 7131));
}

#[test]
fn go_profiles_golden_and_types() {
    let cpu = import("go_cpu.pb.gz");
    let types: Vec<(&str, &str)> =
        cpu.sample_types.iter().map(|t| (t.name.as_str(), t.unit.as_str())).collect();
    assert_eq!(types, [("cpu", "nanoseconds"), ("samples", "count")], "pprof's default (last) type first");
    assert_eq!(cpu.meta.frequency_hz, 100);
    assert_eq!(cpu.meta.event, "pprof: cpu/nanoseconds");
    assert_eq!(cpu.total(0), cpu.total(1) * 10_000_000, "10 ms per sample");
    check_golden("go_cpu.txt", &dump(&cpu));
    let heap = import("go_heap.pb.gz");
    let mut types: Vec<&str> = heap.sample_types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(types[0], "inuse_space");
    types.sort();
    assert_eq!(types, ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"]);
    check_golden("go_heap.txt", &dump(&heap));
}

#[test]
fn whyslow_export_keeps_threads_and_types_in_order() {
    let p = import("whyslow_export.pb.gz");
    let types: Vec<&str> = p.sample_types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(types[0], "cpu", "whyslow's own order is kept");
    assert!(p.threads.iter().all(|t| t.pid != 0 && t.name == "cpu_split"), "{:?}", p.threads);
    assert_eq!(p.meta.frequency_hz, 999);
    check_golden("whyslow_export.txt", &dump(&p));
}

/// A profile as a non-Go tool may write it: two Lines in one Location (inlined), an unsymbolized
/// Location, a kernel mapping, a default sample type, no labels.
fn hand_built() -> proto::Profile {
    let strings = [
        "",
        "alloc_space",
        "bytes",
        "count",
        "allocs",
        "/usr/bin/app",
        "abc123",
        "main",
        "parse",
        "inline_helper",
        "[kernel.kallsyms]",
        "do_page_fault",
        "app.c",
    ];
    let s = |x: &str| strings.iter().position(|y| *y == x).unwrap() as i64;
    let vt = |t, u| proto::ValueType { r#type: s(t), unit: s(u) };
    let func = |id, name| proto::Function {
        id,
        name: s(name),
        system_name: s(name),
        filename: s("app.c"),
        ..Default::default()
    };
    let line = |function_id| proto::Line { function_id, line: 0 };
    proto::Profile {
        sample_type: vec![vt("allocs", "count"), vt("alloc_space", "bytes")],
        mapping: vec![
            proto::Mapping {
                id: 1,
                memory_start: 0x400000,
                file_offset: 0x1000,
                filename: s("/usr/bin/app"),
                build_id: s("abc123"),
                ..Default::default()
            },
            proto::Mapping { id: 2, filename: s("[kernel.kallsyms]"), ..Default::default() },
        ],
        function: vec![func(1, "main"), func(2, "parse"), func(3, "inline_helper"), func(4, "do_page_fault")],
        location: vec![
            proto::Location { id: 10, mapping_id: 1, line: vec![line(1)], ..Default::default() },
            // inline_helper inlined into parse: innermost first.
            proto::Location { id: 11, mapping_id: 1, line: vec![line(3), line(2)], ..Default::default() },
            proto::Location { id: 12, mapping_id: 1, address: 0x400abc, ..Default::default() },
            proto::Location { id: 13, mapping_id: 2, line: vec![line(4)], ..Default::default() },
        ],
        sample: vec![
            proto::Sample { location_id: vec![11, 10], value: vec![2, 200], label: vec![] },
            proto::Sample { location_id: vec![13, 12, 10], value: vec![1, 64], label: vec![] },
        ],
        string_table: strings.iter().map(|x| x.to_string()).collect(),
        default_sample_type: s("alloc_space"),
        duration_nanos: 5_000_000_000,
        ..Default::default()
    }
}

#[test]
fn pprof_lines_mappings_and_default_type() {
    let bytes = prost::Message::encode_to_vec(&hand_built());
    let p = decode(&bytes, "hand.pb", &ImportOptions::default()).unwrap();
    check_golden("hand_built.txt", &dump(&p));
    assert_eq!(p.sample_types[0].name, "alloc_space");
    assert_eq!(p.total(0), 264);
    assert_eq!(p.modules.iter().find(|m| m.path == "/usr/bin/app").unwrap().build_id, "abc123");
    let names = |i: usize| -> Vec<String> {
        p.stack_frames(p.samples[i].stack).iter().map(|&f| p.frame_name(f).to_string()).collect()
    };
    assert_eq!(names(0), ["main", "parse", "inline_helper"]);
    assert_eq!(names(1), ["main", "app+0x1abc", "do_page_fault"]);
    assert_eq!(p.meta.duration_ns, 5_000_000_000);
    assert_eq!(p.threads.len(), 1);
}

/// pprof's line numbers become the stack nodes' lines (`report --source`): each function of a location,
/// inlined ones too, at its own line.
#[test]
fn pprof_line_numbers_are_kept() {
    let mut prof = hand_built();
    let at = [(1, 12), (3, 40), (2, 30), (4, 7)];
    for loc in &mut prof.location {
        for l in &mut loc.line {
            l.line = at.iter().find(|a| a.0 == l.function_id).unwrap().1;
        }
    }
    let p = decode(&prost::Message::encode_to_vec(&prof), "lines.pb", &ImportOptions::default()).unwrap();
    let lines: Vec<(String, u32)> = p
        .stack_lines(p.samples[0].stack)
        .iter()
        .map(|&(f, line)| (p.frame_name(f).to_string(), line))
        .collect();
    assert_eq!(lines, [("main".into(), 12), ("parse".into(), 30), ("inline_helper".into(), 40)]);
    // An address without lines is at line 0.
    assert_eq!(p.stack_lines(p.samples[1].stack).iter().map(|l| l.1).collect::<Vec<_>>(), [12, 0, 7]);
}

#[test]
fn pprof_bad_references_are_errors() {
    type Change = Box<dyn Fn(&mut proto::Profile)>;
    let cases: Vec<(&str, Change)> = vec![
        ("missing location", Box::new(|p| p.sample[0].location_id.push(99))),
        ("missing function", Box::new(|p| p.location[0].line[0].function_id = 99)),
        ("missing mapping", Box::new(|p| p.location[0].mapping_id = 99)),
        ("string out of range", Box::new(|p| p.function[0].name = 1000)),
        ("negative string", Box::new(|p| p.function[0].name = -1)),
        ("value count", Box::new(|p| p.sample[0].value.push(1))),
        (
            "overflow",
            Box::new(|p| {
                p.sample[0].value[0] = i64::MAX;
                p.sample[1].value[0] = i64::MAX;
            }),
        ),
        ("min value", Box::new(|p| p.sample[0].value[0] = i64::MIN)),
    ];
    for (what, change) in cases {
        let mut prof = hand_built();
        change(&mut prof);
        let bytes = prost::Message::encode_to_vec(&prof);
        let e = decode(&bytes, "bad.pb", &ImportOptions::default()).unwrap_err();
        assert!(e.to_string().starts_with("bad.pb is not a valid pprof profile: "), "{what}: {e}");
    }
}

#[test]
fn truncated_pprof_is_one_clear_error() {
    let gz = std::fs::read(dir("corpus").join("go_cpu.pb.gz")).unwrap();
    for cut in [10, gz.len() / 2, gz.len() - 4] {
        let e = decode(&gz[..cut], "cut.pb.gz", &ImportOptions::default()).unwrap_err();
        assert!(e.to_string().starts_with("cut.pb.gz has corrupt gzip data"), "{cut}: {e}");
    }
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
    let e = decode(&raw[..raw.len() / 2], "cut.pb", &ImportOptions::default()).unwrap_err();
    assert!(e.to_string().starts_with("cut.pb is not a valid pprof profile"), "{e}");
}
