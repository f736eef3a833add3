//! Export formats other tools read: folded stacks (FlameGraph), pprof (gzip profile.proto, `go tool
//! pprof`), speedscope JSON, and callgrind (kcachegrind) with call edges and inclusive costs.

use crate::{folded_lines, sample_type, RenderError, NO_STACK};
use serde_json::json;
use std::collections::HashMap;
use std::io::Write;
use whyslow_model::pprof as proto;
use whyslow_model::{sample_types, Profile, NONE};

/// `root;...;leaf N` lines, sorted, zero values left out; frame names only (no threads, no annotations).
pub fn folded(w: &mut impl Write, p: &Profile, value: usize) -> Result<(), RenderError> {
    sample_type(p, value)?;
    for (stack, n) in folded_lines(p, value, false) {
        writeln!(w, "{stack} {n}")?;
    }
    Ok(())
}

/// gzip-compressed pprof profile with every sample type (memory types by Go's names); one function and one location per frame (ids =
/// frame + 1; an inlined frame is a location of its own), one mapping per module, samples labelled with
/// their thread's name, tid and pid.
pub fn pprof(w: &mut impl Write, p: &Profile) -> Result<(), RenderError> {
    pprof_with(w, p, None)
}

/// [`pprof`] with the period type (type, unit) and period that consumers read units from (Pyroscope
/// needs `cpu`/`nanoseconds` for CPU, `space`/`bytes` for memory); without, the recording's event in
/// nanoseconds at its sampling frequency.
pub fn pprof_with(
    w: &mut impl Write,
    p: &Profile,
    period: Option<(&str, &str, i64)>,
) -> Result<(), RenderError> {
    // Our string table starts with "" like pprof's, so ids carry over; new strings are appended.
    let mut strings = p.strings.clone();
    let mut index: HashMap<String, i64> =
        strings.iter().enumerate().map(|(i, s)| (s.clone(), i as i64)).collect();
    let mut s = |x: &str| -> i64 {
        *index.entry(x.to_string()).or_insert_with(|| {
            strings.push(x.to_string());
            strings.len() as i64 - 1
        })
    };
    let vt = |s: &mut dyn FnMut(&str) -> i64, t: &str, u: &str| proto::ValueType { r#type: s(t), unit: s(u) };
    let sample_type =
        p.sample_types.iter().map(|t| vt(&mut s, sample_types::pprof_name(&t.name), &t.unit)).collect();
    let mapping = p
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| proto::Mapping {
            id: i as u64 + 1,
            filename: s(&m.path),
            build_id: s(&m.build_id),
            has_functions: true,
            ..Default::default()
        })
        .collect();
    let mut function: Vec<proto::Function> = p
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| proto::Function {
            id: i as u64 + 1,
            name: f.name as i64,
            system_name: f.name as i64,
            filename: f.file as i64,
            ..Default::default()
        })
        .collect();
    let mut location: Vec<proto::Location> = p
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| proto::Location {
            id: i as u64 + 1,
            mapping_id: if f.module == NONE { 0 } else { f.module as u64 + 1 },
            line: vec![proto::Line { function_id: i as u64 + 1, line: 0 }],
            ..Default::default()
        })
        .collect();
    // Samples without frames get one synthetic frame, so their value shows in pprof's tables as in ours.
    let no_stack = p.frames.len() as u64 + 1;
    if p.samples.iter().any(|smp| smp.stack == NONE) {
        let name = s(NO_STACK);
        function.push(proto::Function { id: no_stack, name, system_name: name, ..Default::default() });
        location.push(proto::Location {
            id: no_stack,
            mapping_id: 0,
            line: vec![proto::Line { function_id: no_stack, line: 0 }],
            ..Default::default()
        });
    }
    let (thread_key, tid_key, pid_key) = (s("thread"), s("tid"), s("pid"));
    let sample = p
        .samples
        .iter()
        .map(|smp| {
            let t = &p.threads[smp.thread as usize];
            let mut ids: Vec<u64> = p.stack_frames(smp.stack).iter().map(|&f| f as u64 + 1).collect();
            if ids.is_empty() {
                ids.push(no_stack);
            }
            ids.reverse(); // pprof wants the leaf first
            let num = |key, n: u32| proto::Label { key, num: n as i64, ..Default::default() };
            proto::Sample {
                location_id: ids,
                value: smp.values.clone(),
                label: vec![
                    proto::Label { key: thread_key, str: s(&t.name), ..Default::default() },
                    num(tid_key, t.tid),
                    num(pid_key, t.pid),
                ],
            }
        })
        .collect();
    let comment = vec![s(&format!("whyslow {}: {}", p.meta.tool_version, p.meta.command.join(" ")))];
    let (period_type, period) = match period {
        Some((t, u, n)) => (Some(vt(&mut s, t, u)), n),
        None => (
            Some(vt(&mut s, &p.meta.event, "nanoseconds")),
            if p.meta.frequency_hz > 0 { 1_000_000_000 / p.meta.frequency_hz as i64 } else { 0 },
        ),
    };
    let prof = proto::Profile {
        sample_type,
        sample,
        mapping,
        location,
        function,
        string_table: strings,
        time_nanos: p.meta.start_unix_ns as i64,
        duration_nanos: p.meta.duration_ns as i64,
        period_type,
        period,
        comment,
        ..Default::default()
    };
    let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
    gz.write_all(&prost::Message::encode_to_vec(&prof))?;
    gz.finish()?;
    Ok(())
}

/// speedscope's file format: shared frames and one sampled profile per thread with samples.
pub fn speedscope(w: &mut impl Write, p: &Profile, value: usize) -> Result<(), RenderError> {
    let st = sample_type(p, value)?;
    let mut frames: Vec<_> = p
        .frames
        .iter()
        .map(|f| match p.str(f.file) {
            "" => json!({"name": p.str(f.name)}),
            file => json!({"name": p.str(f.name), "file": file}),
        })
        .collect();
    let no_stack = frames.len() as u32;
    if p.samples.iter().any(|s| s.stack == NONE) {
        frames.push(json!({"name": NO_STACK}));
    }
    let stack = |leaf: u32| if leaf == NONE { vec![no_stack] } else { p.stack_frames(leaf) };
    let unit = match st.unit.as_str() {
        "nanoseconds" => "nanoseconds",
        "bytes" => "bytes",
        _ => "none",
    };
    let sampled = |name: String, samples: Vec<Vec<u32>>, weights: Vec<i64>| {
        let end: i64 = weights.iter().sum();
        json!({
            "type": "sampled", "name": name, "unit": unit,
            "startValue": 0, "endValue": end, "samples": samples, "weights": weights,
        })
    };
    let mut profiles = Vec::new();
    for (ti, t) in p.threads.iter().enumerate() {
        let mine: Vec<_> =
            p.samples.iter().filter(|s| s.thread as usize == ti && s.values[value] != 0).collect();
        if !mine.is_empty() {
            let samples = mine.iter().map(|s| stack(s.stack)).collect();
            let weights = mine.iter().map(|s| s.values[value]).collect();
            profiles.push(sampled(format!("{} (tid {})", t.name, t.tid), samples, weights));
        }
    }
    if profiles.is_empty() {
        // speedscope rejects a file without profiles; an empty one opens as an empty view.
        profiles.push(sampled(format!("no {} samples", st.name), vec![], vec![]));
    }
    let doc = json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "exporter": format!("whyslow {}", p.meta.tool_version),
        "name": p.meta.command.join(" "),
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": profiles,
    });
    serde_json::to_writer(&mut *w, &doc).map_err(std::io::Error::from)?;
    writeln!(w)?;
    Ok(())
}

/// callgrind format: self cost per function, and per call edge the inclusive cost (the value of the
/// samples where the edge appears, once per sample). There are no call counts or lines: `calls=1`, line 0.
pub fn callgrind(w: &mut impl Write, p: &Profile, value: usize) -> Result<(), RenderError> {
    let st = sample_type(p, value)?;
    // Functions are (name, module) like in analyze; the file is the first one any of its frames names.
    let mut ids: HashMap<(&str, &str), usize> = HashMap::new();
    let mut funcs: Vec<(&str, &str, &str)> = Vec::new();
    let of_frame: Vec<usize> = (0..p.frames.len() as u32)
        .map(|f| {
            let id = *ids.entry((p.frame_name(f), p.frame_module(f))).or_insert_with(|| {
                funcs.push((p.frame_name(f), p.frame_module(f), ""));
                funcs.len() - 1
            });
            if funcs[id].2.is_empty() {
                funcs[id].2 = p.str(p.frames[f as usize].file);
            }
            id
        })
        .collect();
    let mut self_cost: Vec<Option<i64>> = vec![None; funcs.len()];
    let mut edges: HashMap<(usize, usize), i64> = HashMap::new();
    for smp in p.samples.iter().filter(|s| s.values[value] != 0) {
        let v = smp.values[value];
        let stack: Vec<usize> = p.stack_frames(smp.stack).iter().map(|&f| of_frame[f as usize]).collect();
        for &f in &stack {
            self_cost[f].get_or_insert(0);
        }
        if let Some(&leaf) = stack.last() {
            *self_cost[leaf].get_or_insert(0) += v;
        }
        let mut pairs: Vec<(usize, usize)> = stack.windows(2).map(|e| (e[0], e[1])).collect();
        pairs.sort_unstable();
        pairs.dedup();
        for e in pairs {
            *edges.entry(e).or_default() += v;
        }
    }
    let mut order: Vec<usize> = (0..funcs.len()).filter(|&f| self_cost[f].is_some()).collect();
    order.sort_by_key(|&f| (funcs[f].0, funcs[f].1));
    let mut rank = vec![0; funcs.len()];
    for (r, &f) in order.iter().enumerate() {
        rank[f] = r;
    }
    let mut edges: Vec<((usize, usize), i64)> = edges.into_iter().collect();
    edges.sort_by_key(|&((a, b), _)| (rank[a], rank[b]));

    let event = event_name(&st.name);
    writeln!(w, "# callgrind format\nversion: 1\ncreator: whyslow {}", p.meta.tool_version)?;
    writeln!(w, "cmd: {}\npositions: line", one_line(&p.meta.command.join(" ")))?;
    writeln!(w, "event: {event} : {} ({})\nevents: {event}\n", st.name, st.unit)?;
    let mut names = Compressor::default();
    let mut edges = edges.into_iter().peekable();
    for &f in &order {
        let (name, module, file) = funcs[f];
        writeln!(
            w,
            "ob={}\nfl={}\nfn={}",
            names.get("ob", module),
            names.get("fl", file),
            names.get("fn", name)
        )?;
        writeln!(w, "0 {}", self_cost[f].unwrap_or(0))?;
        while let Some(((_, callee), incl)) = edges.next_if(|&((caller, _), _)| caller == f) {
            let (name, module, file) = funcs[callee];
            writeln!(w, "cob={}\ncfi={}", names.get("ob", module), names.get("fl", file))?;
            writeln!(w, "cfn={}\ncalls=1 0\n0 {incl}", names.get("fn", name))?;
        }
        writeln!(w)?;
    }
    writeln!(w, "totals: {}", p.total(value))?;
    Ok(())
}

/// callgrind event names are letters and digits only: `cpu-ns` becomes `cpuNs`.
fn event_name(name: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(if upper { c.to_ascii_uppercase() } else { c });
            upper = false;
        } else {
            upper = !out.is_empty();
        }
    }
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert(0, 'v');
    }
    out
}

/// Names go on one line of a line-based format.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// callgrind name compression: the first use of a name defines `(id) name`, later uses say `(id)`.
/// Ids are per kind (`ob` and `cob` share one space, `fl` and `cfi` another, `fn` and `cfn` a third).
#[derive(Default)]
struct Compressor {
    ids: HashMap<(&'static str, String), usize>,
    counts: HashMap<&'static str, usize>,
}

impl Compressor {
    fn get(&mut self, kind: &'static str, name: &str) -> String {
        let name = if name.is_empty() { "???".to_string() } else { one_line(name) };
        if let Some(id) = self.ids.get(&(kind, name.clone())) {
            return format!("({id})");
        }
        let id = self.counts.entry(kind).or_default();
        *id += 1;
        self.ids.insert((kind, name.clone()), *id);
        format!("({id}) {name}")
    }
}

#[cfg(test)]
mod tests {
    use super::{callgrind, event_name, folded, pprof, proto, speedscope};
    use crate::fixture::{self, check_golden, render};
    use std::process::Command;

    #[test]
    fn folded_speedscope_callgrind_golden() {
        let p = fixture::profile();
        check_golden("folded.txt", &render(|w| folded(w, &p, 0)));
        check_golden("speedscope.json", &render(|w| speedscope(w, &p, 0)));
        check_golden("callgrind.out", &render(|w| callgrind(w, &p, 0)));
    }

    fn decode(gz: &[u8]) -> proto::Profile {
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gz), &mut raw).unwrap();
        prost::Message::decode(&raw[..]).unwrap()
    }

    #[test]
    fn pprof_has_all_sample_types_names_and_labels() {
        let prof = decode(&render(|w| pprof(w, &fixture::profile())));
        let st = |i: i64| prof.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = prof.sample_type.iter().map(|t| (st(t.r#type), st(t.unit))).collect();
        assert_eq!(types, [("cpu", "samples"), ("cpu-ns", "nanoseconds")]);
        assert_eq!(prof.sample.iter().map(|s| s.value[0]).sum::<i64>(), 100);
        assert_eq!(prof.sample.iter().map(|s| s.value[1]).sum::<i64>(), 100_100_100);
        let leaf = |s: &proto::Sample| {
            let loc = &prof.location[(s.location_id[0] - 1) as usize];
            st(prof.function[(loc.line[0].function_id - 1) as usize].name)
        };
        let leaves: Vec<&str> = prof.sample.iter().map(leaf).collect();
        assert_eq!(leaves, ["burn_a", "mix", "burn_b", "do_syscall_64"]);
        let labels: Vec<(&str, &str, i64)> =
            prof.sample[2].label.iter().map(|l| (st(l.key), st(l.str), l.num)).collect();
        assert_eq!(labels, [("thread", "worker", 0), ("tid", "", 101), ("pid", "", 100)]);
        assert_eq!((st(prof.period_type.as_ref().unwrap().r#type), prof.period), ("cpu-clock", 1_001_001));
        assert_eq!(prof.duration_nanos, 3_000_000_000);
    }

    /// A command from PATH or a fixed place, or None (the test then skips).
    fn tool(candidates: &[&str], probe: &str) -> Option<String> {
        candidates
            .iter()
            .map(|c| c.to_string())
            .find(|c| Command::new(c).arg(probe).output().is_ok_and(|o| o.status.success()))
    }

    /// `go tool pprof` must read our output (skipped where Go is not installed).
    #[test]
    fn go_tool_pprof_reads_it() {
        let Some(go) = tool(&["go", "/usr/local/go/bin/go"], "version") else {
            eprintln!("go not installed: skipping");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pb.gz");
        std::fs::write(&path, render(|w| pprof(w, &fixture::profile()))).unwrap();
        let out = Command::new(go)
            .args(["tool", "pprof", "-top", "-sample_index=cpu"])
            .arg(&path)
            .env("HOME", dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // flat and cum of each function; burn_a's inlined mix is a frame of its own.
        let row = |name: &str| {
            let l = text.lines().find(|l| l.split_whitespace().last() == Some(name))?;
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f[0].to_string(), f[3].to_string()))
        };
        let want = |flat: &str, cum: &str| Some((flat.to_string(), cum.to_string()));
        assert_eq!(row("burn_a"), want("40samples", "60samples"), "{text}");
        assert_eq!(row("burn_b"), want("30samples", "30samples"), "{text}");
        assert_eq!(row("mix"), want("20samples", "20samples"), "{text}");
        assert_eq!(row("do_syscall_64"), want("10samples", "10samples"), "{text}");
        assert_eq!(row("main"), want("0", "100samples"), "{text}");
    }

    /// callgrind_annotate (valgrind) must read our output without warnings and show inclusive costs.
    #[test]
    fn callgrind_annotate_reads_it() {
        let Some(annotate) = tool(&["callgrind_annotate"], "--version") else {
            eprintln!("callgrind_annotate not installed: skipping");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("callgrind.out");
        std::fs::write(&path, render(|w| callgrind(w, &fixture::profile(), 1))).unwrap();
        let out = Command::new(annotate).arg("--inclusive=yes").arg(&path).output().unwrap();
        let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && err.is_empty(), "{err}");
        let cost = |name: &str| {
            let l = text.lines().find(|l| l.contains(&format!(":{name} [")))?;
            l.split_whitespace().next().map(|n| n.replace(',', ""))
        };
        assert_eq!(cost("main").as_deref(), Some("100100100"), "{text}");
        assert_eq!(cost("burn_a").as_deref(), Some("60060060"), "{text}");
        assert!(text.contains("Events recorded:  cpuNs"), "{text}");
    }

    #[test]
    fn callgrind_counts_a_recursive_edge_once_per_sample() {
        use whyslow_model::{FrameKind, Metadata, ProfileBuilder, SampleType};
        let mut b = ProfileBuilder::new(
            Metadata::default(),
            vec![SampleType { name: "alloc-bytes".into(), unit: "bytes".into() }],
        );
        let m = b.module("/bin/app", "");
        let (main, r) = (b.frame("main", m, "", FrameKind::User), b.frame("r", m, "", FrameKind::User));
        let t = b.thread(1, 1, "app");
        let s = b.stack(&[main, r, r, r]);
        b.add_sample(s, t, &[5]);
        let out = String::from_utf8(render(|w| callgrind(w, &b.finish(), 0))).unwrap();
        let body = out.split_once("\n\n").unwrap().1;
        let want =
            "ob=(1) /bin/app\nfl=(1) ???\nfn=(1) main\n0 0\ncob=(1)\ncfi=(1)\ncfn=(2) r\ncalls=1 0\n0 5\n\n\
                    ob=(1)\nfl=(1)\nfn=(2)\n0 5\ncob=(1)\ncfi=(1)\ncfn=(2)\ncalls=1 0\n0 5\n\ntotals: 5\n";
        assert_eq!(body, want);
        assert!(out.contains("event: allocBytes : alloc-bytes (bytes)\nevents: allocBytes\n"), "{out}");
    }

    #[test]
    fn event_names_are_letters_and_digits() {
        assert_eq!(event_name("cpu"), "cpu");
        assert_eq!(event_name("off-cpu ns"), "offCpuNs");
        assert_eq!(event_name("2x"), "v2x");
        assert_eq!(event_name(""), "v");
    }
}
