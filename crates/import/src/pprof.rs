//! pprof `profile.proto` (uncompressed bytes; gzip is undone by the caller) into a [`Profile`].
//!
//! Every sample type is kept; pprof's default type (`default_sample_type`, else the last one, as `go tool
//! pprof` picks it) comes first so a report without `--type` shows what pprof would. A Location with
//! several Lines is several frames (the first Line is the innermost, inlined, function); a Location
//! without Lines is `module+0xOFFSET`. Threads come from the `thread`/`tid`/`pid` labels whyslow's export
//! writes, else one pseudo-thread. References to missing ids, out-of-range strings and values that could
//! overflow are errors, never panics.

use crate::{bounded_sum, source_note, ImportError, ALL_THREADS};
use std::collections::HashMap;
use whyslow_model::pprof as proto;
use whyslow_model::{basename, FrameKind, Metadata, ProfileBuilder, SampleType, NONE};

/// Deepest stack kept; deeper ones (only a crafted file has them) are cut at the root side.
const MAX_DEPTH: usize = 8192;

/// The frame name whyslow's export gives samples without a stack; such a sample gets its empty stack back.
use whyslow_model::NO_STACK_FRAME as NO_STACK;

/// Decodes the protobuf and checks the minimum every pprof writer produces (string 0 is "", at least one
/// sample type), so arbitrary bytes that happen to parse as protobuf are not taken for a profile.
pub(crate) fn parse(bytes: &[u8]) -> Result<proto::Profile, String> {
    let prof: proto::Profile = prost::Message::decode(bytes).map_err(|e| e.to_string())?;
    if prof.string_table.first().map(String::as_str) != Some("") {
        return Err("its string table does not start with \"\"".into());
    }
    if prof.sample_type.is_empty() {
        return Err("it has no sample types".into());
    }
    Ok(prof)
}

/// Decodes uncompressed profile.proto bytes into a profile; `origin` names the source.
pub fn decode(bytes: &[u8], origin: &str) -> Result<whyslow_model::Profile, ImportError> {
    let prof = parse(bytes).map_err(|what| ImportError::Pprof { origin: origin.to_string(), what })?;
    convert(&prof, origin)
}

pub(crate) fn convert(prof: &proto::Profile, origin: &str) -> Result<whyslow_model::Profile, ImportError> {
    let bad = |what: String| ImportError::Pprof { origin: origin.to_string(), what };
    let st = |i: i64| -> Result<&str, ImportError> {
        usize::try_from(i)
            .ok()
            .and_then(|i| prof.string_table.get(i))
            .map(String::as_str)
            .ok_or_else(|| bad(format!("string index {i} is out of range")))
    };
    let types: Vec<(String, String)> = prof
        .sample_type
        .iter()
        .map(|t| Ok((st(t.r#type)?.to_string(), st(t.unit)?.to_string())))
        .collect::<Result<_, ImportError>>()?;
    let comments: Vec<&str> = prof.comment.iter().map(|&c| st(c)).collect::<Result<_, _>>()?;
    let from_whyslow = comments.iter().any(|c| c.starts_with("whyslow "));
    // The order of the types in our profile: pprof's default first (kept as written for whyslow's own
    // exports, whose first type already is the one whyslow shows).
    let mut order: Vec<usize> = (0..types.len()).collect();
    if !from_whyslow {
        let default = match prof.default_sample_type {
            0 => None,
            d => {
                let name = st(d)?;
                types.iter().position(|t| t.0 == name)
            }
        }
        .unwrap_or(types.len() - 1);
        order.retain(|&i| i != default);
        order.insert(0, default);
    }

    let (period_type, period_unit) = match &prof.period_type {
        Some(p) => (st(p.r#type)?, st(p.unit)?),
        None => ("", ""),
    };
    let frequency_hz = if period_unit == "nanoseconds" && prof.period > 0 {
        (1e9 / prof.period as f64).round() as u64
    } else {
        0
    };
    let event = match (period_type, &types[order[0]]) {
        ("", (t, u)) => format!("pprof: {t}/{u}"),
        (t, _) => format!("pprof: {t}/{period_unit}"),
    };
    let mut notes = vec![source_note("pprof profile", origin)];
    notes.extend(comments.iter().filter(|c| !c.is_empty()).map(|c| format!("pprof comment: {c}")));
    let meta = Metadata {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command: vec![origin.to_string()],
        event,
        frequency_hz,
        start_unix_ns: prof.time_nanos.max(0) as u64,
        duration_ns: prof.duration_nanos.max(0) as u64,
        notes,
        ..Default::default()
    };
    let sample_types =
        order.iter().map(|&i| SampleType { name: types[i].0.clone(), unit: types[i].1.clone() }).collect();
    let mut b = ProfileBuilder::new(meta, sample_types);

    // Modules by mapping id, frames (root-first within a location: outer function, then what was
    // inlined into it) by location id.
    let mut modules: HashMap<u64, (u32, &proto::Mapping)> = HashMap::new();
    for m in &prof.mapping {
        let path = st(m.filename)?;
        let path = if path.is_empty() { format!("mapping{}", m.id) } else { path.to_string() };
        let id = b.module(&path, st(m.build_id)?);
        modules.insert(m.id, (id, m));
    }
    let functions: HashMap<u64, &proto::Function> = prof.function.iter().map(|f| (f.id, f)).collect();
    let mut locations: HashMap<u64, Vec<(u32, u32)>> = HashMap::new();
    for loc in &prof.location {
        let (module, mapping) = match loc.mapping_id {
            0 => (NONE, None),
            id => match modules.get(&id) {
                Some(&(m, mapping)) => (m, Some(mapping)),
                None => return Err(bad(format!("location {} names a missing mapping {id}", loc.id))),
            },
        };
        let kernel = mapping.is_some_and(|m| {
            let p = st(m.filename).unwrap_or("");
            p.starts_with("[kernel") || p == "[vmlinux]"
        });
        let mut frames = Vec::with_capacity(loc.line.len().max(1));
        if loc.line.is_empty() {
            let name = match mapping {
                Some(m) => {
                    let offset = loc.address.wrapping_sub(m.memory_start).wrapping_add(m.file_offset);
                    format!("{}+{offset:#x}", basename(st(m.filename)?))
                }
                None => format!("{:#x}", loc.address),
            };
            frames.push((b.frame(&name, module, "", FrameKind::Unknown), 0));
        }
        for (i, line) in loc.line.iter().enumerate().rev() {
            let f = functions.get(&line.function_id).ok_or_else(|| {
                bad(format!("location {} names a missing function {}", loc.id, line.function_id))
            })?;
            let name = match st(f.name)? {
                "" => st(f.system_name)?,
                n => n,
            };
            if name == NO_STACK && module == NONE && loc.line.len() == 1 {
                break; // an empty stack in whyslow's export
            }
            let kind = match (kernel, i + 1 == loc.line.len()) {
                (true, _) => FrameKind::Kernel,
                (false, true) => FrameKind::User,
                (false, false) => FrameKind::Inlined,
            };
            // The line each function was at (`report --source`); pprof's 0 is unknown, as ours.
            let at = line.line.clamp(0, u32::MAX as i64) as u32;
            frames.push((b.frame(name, module, st(f.filename)?, kind), at));
        }
        locations.insert(loc.id, frames);
    }

    let label_key = |name: &str| prof.string_table.iter().position(|s| s == name).map(|i| i as i64);
    let (thread_key, tid_key, pid_key) = (label_key("thread"), label_key("tid"), label_key("pid"));
    let mut totals = vec![0i64; types.len()];
    let mut cut = 0u64;
    let mut stack = Vec::new();
    let mut values = vec![0i64; types.len()];
    for (n, s) in prof.sample.iter().enumerate() {
        if s.value.len() != types.len() {
            return Err(bad(format!(
                "sample {n} has {} values for {} sample types",
                s.value.len(),
                types.len()
            )));
        }
        for (i, &v) in s.value.iter().enumerate() {
            if !bounded_sum(&mut totals[i], v) {
                return Err(bad(format!("the values of sample type {} overflow", types[i].0)));
            }
        }
        for (slot, &i) in values.iter_mut().zip(&order) {
            *slot = s.value[i];
        }
        // Leaf first and no deeper than MAX_DEPTH, then turned root first: a location of many lines
        // named many times must not multiply into a stack of their product (memory and time).
        stack.clear();
        let mut deeper = false;
        for id in &s.location_id {
            let frames =
                locations.get(id).ok_or_else(|| bad(format!("sample {n} names a missing location {id}")))?;
            let room = MAX_DEPTH - stack.len();
            deeper |= frames.len() > room;
            stack.extend(frames.iter().rev().take(room).copied());
        }
        stack.reverse();
        if deeper {
            cut += 1;
        }
        let (mut name, mut tid, mut pid) = ("", 0u32, 0u32);
        for l in &s.label {
            if Some(l.key) == thread_key {
                name = st(l.str)?;
            } else if Some(l.key) == tid_key {
                tid = l.num.clamp(0, u32::MAX as i64) as u32;
            } else if Some(l.key) == pid_key {
                pid = l.num.clamp(0, u32::MAX as i64) as u32;
            }
        }
        let thread = if name.is_empty() && tid == 0 && pid == 0 {
            b.thread(0, 0, ALL_THREADS)
        } else {
            b.thread(pid, tid, name)
        };
        let leaf = b.stack_at_lines(&stack);
        b.add_sample(leaf, thread, &values);
    }
    if cut > 0 {
        b.meta_mut()
            .notes
            .push(format!("{cut} stacks deeper than {MAX_DEPTH} frames were cut at the root side"));
    }
    let p = b.finish();
    p.validate().map_err(bad)?;
    Ok(p)
}
