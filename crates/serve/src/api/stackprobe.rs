//! stackprobe's `/flamegraph` form, so its clients drive the agent unchanged: the `PUT` body (`json=` an
//! object, raw or percent-encoded) read into target definitions named `flamegraph-N`, which a new `PUT`
//! replaces, and the `GET` that lists them. Everything else about targets is the API's own (targets.rs).

use super::guard::body;
use super::reply::{json, ApiResult};
use super::targets::target_json;
use crate::shared::Shared;
use crate::spec::{Match, Output, SourceKind, SpecError, State as TargetState, TargetSpec};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use whyslow_model::unix_now_ns as now_ns;

/// stackprobe's `PUT /flamegraph` body: `json=<object>` (as `curl -d json='{...}'` sends it, raw or
/// percent-encoded), with `cmd.probe` (oncpu, offcpu, mem: memory in use, as stackprobe's leak graph; and
/// alloc: allocation counts, whyslow's own), `snoopers.proc_id`, `snoopers.proc_name`
/// (`[{comm, cmdline}]`), `params` and `state`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stackprobe {
    #[serde(default)]
    cmd: StackprobeCmd,
    #[serde(default)]
    snoopers: Snoopers,
    #[serde(default)]
    params: Params,
    #[serde(default)]
    state: Option<TargetState>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StackprobeCmd {
    #[serde(default)]
    probe: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Snoopers {
    #[serde(default)]
    proc_id: Vec<u32>,
    #[serde(default)]
    proc_name: Vec<ProcName>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcName {
    #[serde(default)]
    comm: Option<String>,
    #[serde(default)]
    cmdline: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    /// Milliseconds between samples.
    #[serde(default)]
    perf_sample_period: Option<u64>,
    /// Seconds between SVG files.
    #[serde(default)]
    svg_period: Option<u64>,
    #[serde(default)]
    output_dir: Option<String>,
    #[serde(default)]
    multi_instance: Option<bool>,
}

/// The name of the targets a stackprobe form defines (one per snooper); a new PUT replaces them.
const STACKPROBE_PREFIX: &str = "flamegraph";

/// The body of a stackprobe request: the JSON object after `json=`, percent-decoded when encoded.
fn stackprobe_json(body: &[u8]) -> Result<Vec<u8>, SpecError> {
    let text = std::str::from_utf8(body).map_err(|_| SpecError::Syntax("body is not UTF-8".into()))?.trim();
    let text = text.strip_prefix("json=").unwrap_or(text);
    if text.starts_with('{') {
        return Ok(text.as_bytes().to_vec());
    }
    let plus = text.replace('+', " ");
    let mut out = Vec::with_capacity(plus.len());
    let b = plus.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex =
                b.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
            out.push(hex.ok_or_else(|| SpecError::Syntax("bad percent-encoding in the form body".into()))?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// The targets a stackprobe `PUT /flamegraph` stands for (one per snooper), checked.
fn from_stackprobe(body: &[u8]) -> Result<Vec<TargetSpec>, SpecError> {
    let json = stackprobe_json(body)?;
    let sp: Stackprobe = serde_json::from_slice(&json).map_err(|e| SpecError::Syntax(e.to_string()))?;
    let mut sources = Vec::new();
    for p in &sp.cmd.probe {
        let s = match p.as_str() {
            "oncpu" => SourceKind::Cpu,
            "offcpu" => SourceKind::Offcpu,
            "mem" => SourceKind::Mem,
            "alloc" => SourceKind::Alloc,
            other => {
                return Err(SpecError::Invalid(format!(
                    "cmd.probe '{other}' is not one of oncpu, offcpu, mem, alloc"
                )))
            }
        };
        if !sources.contains(&s) {
            sources.push(s);
        }
    }
    if sources.is_empty() {
        sources.push(SourceKind::Cpu);
    }
    let frequency = match sp.params.perf_sample_period {
        Some(0) => return Err(SpecError::Invalid("params.perf_sample_period must be at least 1 ms".into())),
        Some(ms) => (1000 / ms).max(1),
        None => 99,
    };
    let output = Output {
        dir: sp.params.output_dir.clone().unwrap_or_else(|| STACKPROBE_PREFIX.to_string()),
        period_s: sp.params.svg_period.unwrap_or(60),
        multi_instance: sp.params.multi_instance.unwrap_or(false),
    };
    let base = |i: usize, matcher: Match| TargetSpec {
        name: Some(format!("{STACKPROBE_PREFIX}-{i}")),
        matcher,
        sources: sources.clone(),
        frequency,
        window_s: output.period_s.clamp(1, 10),
        labels: BTreeMap::new(),
        output: Some(output.clone()),
        state: sp.state.unwrap_or_default(),
    };
    let mut specs = Vec::new();
    if !sp.snoopers.proc_id.is_empty() {
        specs.push(base(specs.len(), Match { pids: sp.snoopers.proc_id.clone(), ..Match::default() }));
    }
    for n in &sp.snoopers.proc_name {
        // stackprobe compares names exactly: an anchored, escaped regex.
        let comm = n.comm.as_ref().map(|c| format!("^{}$", regex::escape(c)));
        specs.push(base(specs.len(), Match { comm, cmdline: n.cmdline.clone(), ..Match::default() }));
    }
    if specs.is_empty() {
        return Err(SpecError::Invalid("snoopers must name processes (proc_id or proc_name)".into()));
    }
    for s in &specs {
        s.check()?;
    }
    Ok(specs)
}

/// stackprobe's form: the targets it defined (named `flamegraph-N`).
pub(super) async fn get_flamegraph(State(s): State<Arc<Shared>>) -> Response {
    let t = s.targets.read().expect("targets lock");
    let list: Vec<serde_json::Value> = t
        .iter()
        .filter(|(_, spec)| spec.name.as_deref().is_some_and(|n| n.starts_with(STACKPROBE_PREFIX)))
        .map(|(&id, spec)| target_json(id, spec))
        .collect();
    json(StatusCode::OK, &serde_json::json!({ "targets": list }))
}

/// stackprobe's `PUT /flamegraph`: replaces the targets an earlier PUT defined.
pub(super) async fn put_flamegraph(
    State(s): State<Arc<Shared>>,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let specs = from_stackprobe(&body(b)?)?;
    let mut store = s.store.lock().expect("store lock");
    let mut targets = s.targets.write().expect("targets lock");
    let old: Vec<i64> = targets
        .iter()
        .filter(|(_, t)| t.name.as_deref().is_some_and(|n| n.starts_with(STACKPROBE_PREFIX)))
        .map(|(&id, _)| id)
        .collect();
    for id in old {
        store.delete_target(id)?;
        targets.remove(&id);
    }
    let mut list = Vec::new();
    for spec in specs {
        let id = store.add_target(&spec, now_ns())?;
        list.push(target_json(id, &spec));
        targets.insert(id, spec);
    }
    Ok(json(StatusCode::OK, &serde_json::json!({ "targets": list })))
}

#[cfg(test)]
mod tests {
    use super::from_stackprobe;
    use crate::spec::SourceKind;

    #[test]
    fn the_stackprobe_form_becomes_targets() {
        let body = br#"json={"cmd":{"probe":["oncpu","offcpu"]},"snoopers":{"proc_id":[7],"proc_name":[{"comm":"redis-server"}]},"params":{"svg_period":60,"perf_sample_period":10,"multi_instance":true}}"#;
        let specs = from_stackprobe(body).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].matcher.pids, [7]);
        assert_eq!(specs[1].matcher.comm.as_deref(), Some("^redis\\-server$"));
        assert_eq!(specs[1].sources, [SourceKind::Cpu, SourceKind::Offcpu]);
        assert_eq!(specs[1].frequency, 100);
        let o = specs[1].output.as_ref().unwrap();
        assert_eq!((o.dir.as_str(), o.period_s, o.multi_instance), ("flamegraph", 60, true));
        // Percent-encoded as a browser form would send it.
        let enc = b"json=%7B%22snoopers%22%3A%7B%22proc_id%22%3A%5B1%5D%7D%7D";
        assert_eq!(from_stackprobe(enc).unwrap()[0].matcher.pids, [1]);
        assert!(from_stackprobe(br#"json={"cmd":{"probe":["gpu"]},"snoopers":{"proc_id":[1]}}"#).is_err());
        // stackprobe's mem is memory in use; allocation counts are asked for as alloc.
        let mem =
            from_stackprobe(br#"json={"cmd":{"probe":["oncpu","mem","alloc"]},"snoopers":{"proc_id":[1]}}"#);
        assert_eq!(mem.unwrap()[0].sources, [SourceKind::Cpu, SourceKind::Mem, SourceKind::Alloc]);
        assert!(
            from_stackprobe(br#"json={"snoopers":{"proc_id":[1]},"params":{"output_dir":"/etc"}}"#).is_err()
        );
        assert!(from_stackprobe(br#"json={}"#).is_err());
    }
}
