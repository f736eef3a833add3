//! Go's heap, as its runtime reports it (`net/http/pprof`'s `/debug/pprof/heap`): Go allocates from its
//! own garbage-collected heap, not through malloc, so this is where its memory in use is seen. A report
//! is read into [`RuntimeHeapReport`] rows of Go's own names (its frames symbolized by the runtime, inlined
//! functions included); `whyslow_convert::runtime_heap` turns consecutive reports into samples.
//!
//! Go's values are already scaled for its sampling (one sample every 512 KiB allocated on average), and
//! in use is as of the last garbage collection; asked with `gc=1`, the runtime collects first, so in use
//! is what is live at the request.

use crate::pprof::parse;
use crate::{gunzip, http, ImportError, ImportOptions, GZIP_MAGIC};
use std::collections::HashMap;
use whyslow_convert::runtime_heap::{NamedFrame, RuntimeHeapReport, RuntimeHeapRow};
use whyslow_model::basename;

/// The heap profile's URL for what a user gives: a Go program's address (`http://HOST:PORT`), its
/// `/debug/pprof` index, or the profile itself (`/debug/pprof/heap`, `/debug/pprof/allocs`: the same
/// data). Anything else (a CPU profile's URL, another path) is an error naming what to give.
pub fn go_heap_url(source: &str) -> Result<String, ImportError> {
    let bad = || ImportError::NotHeapUrl { url: source.to_string() };
    let rest = source.strip_prefix("http://").or_else(|| source.strip_prefix("https://")).ok_or_else(bad)?;
    let (place, query) = match source.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (source, None),
    };
    let path = rest.split_once('/').map_or("", |(_, p)| p.split('?').next().unwrap_or(""));
    let path = path.trim_end_matches('/');
    let base = place.trim_end_matches('/');
    let url = match path {
        "" => format!("{base}/debug/pprof/heap"),
        p if p == "debug/pprof" || p.ends_with("/debug/pprof") => format!("{base}/heap"),
        p if p.ends_with("debug/pprof/heap") || p.ends_with("debug/pprof/allocs") => base.to_string(),
        _ => return Err(bad()),
    };
    Ok(match query {
        Some(q) if !q.is_empty() => format!("{url}?{q}"),
        _ => url,
    })
}

/// Fetches one report of the heap at `url` (from [`go_heap_url`]); `collect` asks the runtime to collect
/// garbage first (`gc=1`), so in use is what is live now rather than at the last collection.
pub fn fetch_go_heap(
    url: &str,
    collect: bool,
    opts: &ImportOptions,
) -> Result<RuntimeHeapReport, ImportError> {
    let asked = match (collect, url.contains('?')) {
        (false, _) => url.to_string(),
        (true, false) => format!("{url}?gc=1"),
        (true, true) => format!("{url}&gc=1"),
    };
    let body = http::fetch(&asked, opts)?;
    let bytes = if body.starts_with(GZIP_MAGIC) { gunzip(&body, url, opts.max_bytes)? } else { body };
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut report = parse_go_heap(&bytes, url)?;
    if report.unix_ns == 0 {
        report.unix_ns = now;
    }
    Ok(report)
}

/// The four types of a Go heap profile, in the order of [`RuntimeHeapRow`]'s values.
const GO_TYPES: [&str; 4] = ["inuse_space", "inuse_objects", "alloc_space", "alloc_objects"];

/// Reads a heap profile (uncompressed profile.proto); `origin` names it in errors. Its time is the
/// profile's own (`time_nanos`, 0 when it has none).
pub fn parse_go_heap(bytes: &[u8], origin: &str) -> Result<RuntimeHeapReport, ImportError> {
    let bad = |what: String| ImportError::Pprof { origin: origin.to_string(), what };
    let prof = parse(bytes).map_err(bad)?;
    let st = |i: i64| -> Result<&str, ImportError> {
        usize::try_from(i)
            .ok()
            .and_then(|i| prof.string_table.get(i))
            .map(String::as_str)
            .ok_or_else(|| bad(format!("string index {i} is out of range")))
    };
    let names: Vec<&str> = prof.sample_type.iter().map(|t| st(t.r#type)).collect::<Result<_, _>>()?;
    let slots: Vec<usize> = GO_TYPES
        .iter()
        .map(|t| names.iter().position(|n| n == t))
        .collect::<Option<_>>()
        .ok_or_else(|| ImportError::NotHeap { origin: origin.to_string(), types: names.join(", ") })?;
    let modules: HashMap<u64, (String, &whyslow_model::pprof::Mapping)> = prof
        .mapping
        .iter()
        .map(|m| Ok((m.id, (st(m.filename)?.to_string(), m))))
        .collect::<Result<_, ImportError>>()?;
    let functions: HashMap<u64, &whyslow_model::pprof::Function> =
        prof.function.iter().map(|f| (f.id, f)).collect();
    // Each location's frames, leaf first: its first line is the innermost (inlined) function.
    let mut locations: HashMap<u64, Vec<NamedFrame>> = HashMap::new();
    for loc in &prof.location {
        let (module, mapping) = match loc.mapping_id {
            0 => (String::new(), None),
            id => modules
                .get(&id)
                .map(|(p, m)| (p.clone(), Some(*m)))
                .ok_or_else(|| bad(format!("location {} names a missing mapping {id}", loc.id)))?,
        };
        let mut frames = Vec::with_capacity(loc.line.len().max(1));
        if loc.line.is_empty() {
            let name = match mapping {
                Some(m) => {
                    let offset = loc.address.wrapping_sub(m.memory_start).wrapping_add(m.file_offset);
                    format!("{}+{offset:#x}", basename(&module))
                }
                None => format!("{:#x}", loc.address),
            };
            frames.push(NamedFrame {
                name,
                module: module.clone(),
                file: String::new(),
                line: 0,
                inlined: false,
            });
        }
        for (i, line) in loc.line.iter().enumerate() {
            let f = functions.get(&line.function_id).ok_or_else(|| {
                bad(format!("location {} names a missing function {}", loc.id, line.function_id))
            })?;
            let name = match st(f.name)? {
                "" => st(f.system_name)?,
                n => n,
            };
            frames.push(NamedFrame {
                name: name.to_string(),
                module: module.clone(),
                file: st(f.filename)?.to_string(),
                line: line.line.clamp(0, u32::MAX as i64) as u32,
                inlined: i + 1 < loc.line.len(),
            });
        }
        locations.insert(loc.id, frames);
    }
    let mut rows = Vec::with_capacity(prof.sample.len());
    for (n, s) in prof.sample.iter().enumerate() {
        if s.value.len() != names.len() {
            return Err(bad(format!(
                "sample {n} has {} values for {} sample types",
                s.value.len(),
                names.len()
            )));
        }
        let mut frames = Vec::new();
        for id in &s.location_id {
            let loc =
                locations.get(id).ok_or_else(|| bad(format!("sample {n} names a missing location {id}")))?;
            frames.extend(loc.iter().cloned());
        }
        let v = |k: usize| s.value[slots[k]].max(0);
        rows.push(RuntimeHeapRow {
            frames,
            inuse_bytes: v(0),
            inuse_count: v(1),
            alloc_bytes: v(2),
            alloc_count: v(3),
        });
    }
    Ok(RuntimeHeapReport { unix_ns: prof.time_nanos.max(0) as u64, rows })
}

#[cfg(test)]
mod tests {
    use super::{go_heap_url, parse_go_heap};
    use whyslow_model::pprof as proto;

    #[test]
    fn a_go_programs_address_leads_to_its_heap_profile() {
        let ok = |s: &str| go_heap_url(s).ok();
        assert_eq!(ok("http://127.0.0.1:6060"), Some("http://127.0.0.1:6060/debug/pprof/heap".into()));
        assert_eq!(ok("http://h:1/"), Some("http://h:1/debug/pprof/heap".into()));
        assert_eq!(ok("http://h:1/debug/pprof"), Some("http://h:1/debug/pprof/heap".into()));
        assert_eq!(ok("https://h/x/debug/pprof/"), Some("https://h/x/debug/pprof/heap".into()));
        assert_eq!(
            ok("http://h:1/debug/pprof/heap?debug=0"),
            Some("http://h:1/debug/pprof/heap?debug=0".into())
        );
        assert_eq!(ok("http://h:1/debug/pprof/allocs"), Some("http://h:1/debug/pprof/allocs".into()));
        let err = go_heap_url("http://h:1/debug/pprof/profile?seconds=5").unwrap_err().to_string();
        assert_eq!(
            err,
            "http://h:1/debug/pprof/profile?seconds=5 is not the address of a Go program's heap profile: give \
             http://HOST:PORT/debug/pprof (whyslow reads /debug/pprof/heap there)"
        );
        assert!(go_heap_url("ftp://h/debug/pprof").is_err());
    }

    /// A Go heap profile as the runtime writes it: four types in Go's order, an inlined call in one
    /// location, values taken by name; a CPU profile is not a heap profile.
    #[test]
    fn heap_rows_carry_go_names_inlined_frames_and_the_four_values() {
        let strings: Vec<String> = [
            "",
            "alloc_objects",
            "count",
            "alloc_space",
            "bytes",
            "inuse_objects",
            "inuse_space",
            "main.leak",
            "main.main",
            "bytes.Repeat",
            "/src/leak.go",
            "/bin/leak",
        ]
        .map(String::from)
        .to_vec();
        let vt = |t, u| proto::ValueType { r#type: t, unit: u };
        let func = |id, name| proto::Function { id, name, filename: 10, ..Default::default() };
        let line = |function_id, line| proto::Line { function_id, line };
        let prof = proto::Profile {
            sample_type: vec![vt(1, 2), vt(3, 4), vt(5, 2), vt(6, 4)],
            sample: vec![proto::Sample {
                location_id: vec![1, 2],
                value: vec![10, 4096, 6, 2048],
                label: vec![],
            }],
            mapping: vec![proto::Mapping { id: 1, filename: 11, ..Default::default() }],
            location: vec![
                proto::Location {
                    id: 1,
                    mapping_id: 1,
                    line: vec![line(3, 5), line(1, 20)],
                    ..Default::default()
                },
                proto::Location { id: 2, mapping_id: 1, line: vec![line(2, 30)], ..Default::default() },
            ],
            function: vec![func(1, 7), func(2, 8), func(3, 9)],
            string_table: strings,
            time_nanos: 123,
            ..Default::default()
        };
        let bytes = prost::Message::encode_to_vec(&prof);
        let r = parse_go_heap(&bytes, "u").unwrap();
        assert_eq!(r.unix_ns, 123);
        let row = &r.rows[0];
        let names: Vec<(&str, bool, u32)> =
            row.frames.iter().map(|f| (f.name.as_str(), f.inlined, f.line)).collect();
        assert_eq!(names, [("bytes.Repeat", true, 5), ("main.leak", false, 20), ("main.main", false, 30)]);
        assert_eq!(row.frames[0].module, "/bin/leak");
        assert_eq!((row.inuse_bytes, row.inuse_count, row.alloc_bytes, row.alloc_count), (2048, 6, 4096, 10));

        let cpu = proto::Profile {
            sample_type: vec![vt(1, 2)],
            string_table: vec!["".into(), "samples".into(), "count".into()],
            ..Default::default()
        };
        let err = parse_go_heap(&prost::Message::encode_to_vec(&cpu), "u").unwrap_err().to_string();
        assert_eq!(
            err,
            "u is not a Go heap profile (its sample types: samples; a heap profile has inuse_space, \
             inuse_objects, alloc_space, alloc_objects)"
        );
    }
}
