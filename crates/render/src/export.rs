//! Export formats other tools read: folded stacks (FlameGraph), pprof (gzip profile.proto, `go tool
//! pprof`), speedscope JSON, and callgrind (kcachegrind) with call edges and inclusive costs.

use crate::{folded_lines, RenderError};
use serde_json::json;
use std::collections::HashMap;
use std::io::Write;
use whyslow_model::Profile;

/// `root;...;leaf N` lines, sorted.
pub fn folded(w: &mut impl Write, p: &Profile, value: usize) -> Result<(), RenderError> {
    for (stack, n) in folded_lines(p, value) {
        writeln!(w, "{stack} {n}")?;
    }
    Ok(())
}

/// The messages of pprof's profile.proto that we write.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// gzip-compressed pprof profile with every sample type; one location per frame (ids = frame + 1).
pub fn pprof(w: &mut impl Write, p: &Profile) -> Result<(), RenderError> {
    use whyslow_model::NONE;
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
    let sample_type = p.sample_types.iter().map(|t| vt(&mut s, &t.name, &t.unit)).collect();
    let mapping = p
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| proto::Mapping {
            id: i as u64 + 1,
            filename: s(&m.path),
            build_id: s(&m.build_id),
            has_functions: true,
        })
        .collect();
    let function = p
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| proto::Function {
            id: i as u64 + 1,
            name: f.name as i64,
            system_name: f.name as i64,
            filename: f.file as i64,
        })
        .collect();
    let location = p
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| proto::Location {
            id: i as u64 + 1,
            mapping_id: if f.module == NONE { 0 } else { f.module as u64 + 1 },
            line: vec![proto::Line { function_id: i as u64 + 1 }],
        })
        .collect();
    let (thread_key, tid_key) = (s("thread"), s("tid"));
    let sample = p
        .samples
        .iter()
        .map(|smp| {
            let t = &p.threads[smp.thread as usize];
            let mut ids: Vec<u64> = p.stack_frames(smp.stack).iter().map(|&f| f as u64 + 1).collect();
            ids.reverse(); // pprof wants the leaf first
            proto::Sample {
                location_id: ids,
                value: smp.values.clone(),
                label: vec![
                    proto::Label { key: thread_key, str: s(&t.name), num: 0 },
                    proto::Label { key: tid_key, str: 0, num: t.tid as i64 },
                ],
            }
        })
        .collect();
    let period = if p.meta.frequency_hz > 0 { 1_000_000_000 / p.meta.frequency_hz as i64 } else { 0 };
    let comment = vec![s(&format!("whyslow {}: {}", p.meta.tool_version, p.meta.command.join(" ")))];
    let period_type = Some(vt(&mut s, &p.meta.event, "nanoseconds"));
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
    };
    let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
    gz.write_all(&prost::Message::encode_to_vec(&prof))?;
    gz.finish()?;
    Ok(())
}

/// speedscope's file format: shared frames and one sampled profile per thread.
pub fn speedscope(w: &mut impl Write, p: &Profile, value: usize) -> Result<(), RenderError> {
    let frames: Vec<_> = p
        .frames
        .iter()
        .map(|f| {
            let file = p.str(f.file);
            if file.is_empty() {
                json!({"name": p.str(f.name)})
            } else {
                json!({"name": p.str(f.name), "file": file})
            }
        })
        .collect();
    let unit = match p.sample_types[value].unit.as_str() {
        "nanoseconds" => "nanoseconds",
        "bytes" => "bytes",
        _ => "none",
    };
    let mut profiles = Vec::new();
    for (ti, t) in p.threads.iter().enumerate() {
        let mine: Vec<_> =
            p.samples.iter().filter(|s| s.thread as usize == ti && s.values[value] != 0).collect();
        if mine.is_empty() {
            continue;
        }
        let samples: Vec<Vec<u32>> = mine.iter().map(|s| p.stack_frames(s.stack)).collect();
        let weights: Vec<i64> = mine.iter().map(|s| s.values[value]).collect();
        let end: i64 = weights.iter().sum();
        profiles.push(json!({
            "type": "sampled", "name": format!("{} (tid {})", t.name, t.tid), "unit": unit,
            "startValue": 0, "endValue": end, "samples": samples, "weights": weights,
        }));
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

/// callgrind format: self cost per function and inclusive cost per call edge (once per sample per edge).
pub fn callgrind(w: &mut impl Write, p: &Profile, value: usize) -> Result<(), RenderError> {
    // Functions keyed by (name, module): self cost and outgoing edges with inclusive cost and sample count.
    type Key<'a> = (&'a str, &'a str);
    let mut self_cost: HashMap<Key, i64> = HashMap::new();
    let mut edges: HashMap<Key, HashMap<Key, (i64, i64)>> = HashMap::new();
    for smp in p.samples.iter().filter(|s| s.values[value] != 0) {
        let v = smp.values[value];
        let keys: Vec<Key> =
            p.stack_frames(smp.stack).iter().map(|&f| (p.frame_name(f), p.frame_module(f))).collect();
        let mut seen = std::collections::HashSet::new();
        for pair in keys.windows(2) {
            if seen.insert((pair[0], pair[1])) {
                let e = edges.entry(pair[0]).or_default().entry(pair[1]).or_default();
                e.0 += v;
                e.1 += 1;
            }
        }
        for &k in &keys {
            self_cost.entry(k).or_default();
        }
        if let Some(leaf) = keys.last() {
            *self_cost.entry(*leaf).or_default() += v;
        }
    }
    let mut order: Vec<Key> = self_cost.keys().copied().collect();
    order.sort();
    let mut names = Compressor::default();
    writeln!(w, "# callgrind format\nversion: 1\ncreator: whyslow {}", p.meta.tool_version)?;
    writeln!(
        w,
        "cmd: {}\npositions: line\nevents: {}\n",
        p.meta.command.join(" "),
        p.sample_types[value].name
    )?;
    for k in &order {
        writeln!(w, "ob={}", names.get("ob", k.1))?;
        writeln!(w, "fn={}", names.get("fn", k.0))?;
        writeln!(w, "0 {}", self_cost[k])?;
        let mut callees: Vec<_> = edges.get(k).map(|m| m.iter().collect()).unwrap_or_default();
        callees.sort();
        for (callee, (incl, count)) in callees {
            writeln!(w, "cob={}", names.get("ob", callee.1))?;
            writeln!(w, "cfn={}", names.get("fn", callee.0))?;
            writeln!(w, "calls={count} 0\n0 {incl}")?;
        }
        writeln!(w)?;
    }
    let total: i64 = p.total(value);
    writeln!(w, "totals: {total}")?;
    Ok(())
}

/// callgrind name compression: the first use of a name defines `(id) name`, later uses say `(id)`.
#[derive(Default)]
struct Compressor {
    ids: HashMap<(String, String), usize>,
}

impl Compressor {
    fn get(&mut self, kind: &str, name: &str) -> String {
        let name = if name.is_empty() { "???" } else { name };
        let next = self.ids.iter().filter(|((k, _), _)| k == kind).count() + 1;
        match self.ids.get(&(kind.to_string(), name.to_string())) {
            Some(id) => format!("({id})"),
            None => {
                self.ids.insert((kind.to_string(), name.to_string()), next);
                format!("({next}) {name}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{self, check_golden};

    fn render(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        f(&mut out);
        out
    }

    #[test]
    fn folded_speedscope_callgrind_golden() {
        let p = fixture::profile();
        check_golden("folded.txt", &render(|w| folded(w, &p, 0).unwrap()));
        check_golden("speedscope.json", &render(|w| speedscope(w, &p, 0).unwrap()));
        check_golden("callgrind.out", &render(|w| callgrind(w, &p, 0).unwrap()));
    }

    #[test]
    fn pprof_decodes_with_all_sample_types() {
        let p = fixture::profile();
        let gz = render(|w| pprof(w, &p).unwrap());
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
        let prof: proto::Profile = prost::Message::decode(&raw[..]).unwrap();
        assert_eq!(prof.sample_type.len(), 2);
        assert_eq!(prof.sample.iter().map(|s| s.value[0]).sum::<i64>(), 100);
        let leaf = |s: &proto::Sample| {
            let f = &prof.function
                [(prof.location[(s.location_id[0] - 1) as usize].line[0].function_id - 1) as usize];
            prof.string_table[f.name as usize].clone()
        };
        let leaves: Vec<String> = prof.sample.iter().map(leaf).collect();
        assert!(leaves.contains(&"mix".to_string()) && leaves.contains(&"do_syscall_64".to_string()));
    }

    /// `go tool pprof` must read our output (skipped where Go is not installed).
    #[test]
    fn go_tool_pprof_reads_it() {
        let go = ["go", "/usr/local/go/bin/go"].into_iter().find(|g| {
            std::process::Command::new(g).arg("version").output().is_ok_and(|o| o.status.success())
        });
        let Some(go) = go else {
            eprintln!("go not installed: skipping");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pb.gz");
        std::fs::write(&path, render(|w| pprof(w, &fixture::profile()).unwrap())).unwrap();
        let out = std::process::Command::new(go)
            .args(["tool", "pprof", "-top", "-sample_index=cpu"])
            .arg(&path)
            .env("HOME", dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // burn_a: 40 flat (20 more are in the inlined mix), burn_b 30.
        let row = |name: &str| {
            text.lines()
                .find(|l| l.trim_end().ends_with(name))
                .map(|l| l.split_whitespace().next().unwrap().to_string())
        };
        assert_eq!(row("burn_a").as_deref(), Some("40samples"), "{text}");
        assert_eq!(row("burn_b").as_deref(), Some("30samples"), "{text}");
        assert_eq!(row("mix").as_deref(), Some("20samples"), "{text}");
    }
}
