//! Grafana Pyroscope: the Push API's messages (push.v1.PushRequest, types.v1.LabelPair) and the legacy
//! `/ingest` URL.

use crate::{pprof, select, uuid, Kind, Labels, KINDS};
use whyslow_model::Profile;

#[derive(Clone, PartialEq, prost::Message)]
pub struct PushRequest {
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<RawProfileSeries>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RawProfileSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RawSample {
    /// A gzipped pprof profile.
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
    /// A UUID: Pyroscope deduplicates retried pushes by it.
    #[prost(string, tag = "2")]
    pub id: String,
}

/// The labels of a kind's series, sorted by name as Prometheus-style label sets are.
fn label_set(kind: &Kind, l: &Labels) -> Vec<(String, String)> {
    let mut v = vec![
        ("__name__".to_string(), kind.name.to_string()),
        ("service_name".to_string(), l.service.clone()),
    ];
    if !l.process.is_empty() {
        v.push(("process".into(), l.process.clone()));
    }
    if !l.hostname.is_empty() {
        v.push(("hostname".into(), l.hostname.clone()));
    }
    if let Some(pid) = l.pid {
        v.push(("pid".into(), pid.to_string()));
    }
    // Pyroscope takes a memory profile's alloc_* for Go's counters since the start and pushes the
    // difference from the one before, unless told they already are per window, as ours are.
    if kind.name == "memory" {
        v.push(("__delta__".into(), "false".into()));
    }
    for (k, val) in &l.extra {
        if !v.iter().any(|(n, _)| n == k) {
            v.push((k.clone(), val.clone()));
        }
    }
    v.sort();
    v
}

/// One series per kind the profile has, each with one sample: the kind's gzipped pprof.
pub fn push_request(p: &Profile, labels: &Labels) -> PushRequest {
    let series = KINDS
        .iter()
        .filter_map(|kind| {
            let part = select(p, kind)?;
            Some(RawProfileSeries {
                labels: label_set(kind, labels)
                    .into_iter()
                    .map(|(name, value)| LabelPair { name, value })
                    .collect(),
                samples: vec![RawSample { raw_profile: pprof(&part, kind), id: uuid() }],
            })
        })
        .collect();
    PushRequest { series }
}

/// The legacy ingest URL of one kind: `name=<service>.<kind>{labels}` (the kind as the suffix, never a
/// pid), the window as unix seconds, the sampling rate, `spyName=whyslow`.
pub fn ingest_url(base: &str, part: &Profile, kind: &Kind, l: &Labels) -> String {
    let suffix = match kind.name {
        "process_cpu" => "cpu",
        "memory" => "alloc_space",
        other => other,
    };
    let tags: Vec<String> = label_set(kind, l)
        .into_iter()
        .filter(|(k, _)| k != "__name__" && k != "service_name")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let name = format!("{}.{suffix}{{{}}}", l.service, tags.join(","));
    let from = part.meta.start_unix_ns / 1_000_000_000;
    let until = (part.meta.start_unix_ns + part.meta.duration_ns).div_ceil(1_000_000_000).max(from + 1);
    format!(
        "{base}/ingest?name={}&from={from}&until={until}&format=pprof&sampleRate={}&spyName=whyslow",
        encode(&name),
        part.meta.frequency_hz.max(1)
    )
}

/// Percent-encodes everything but unreserved characters.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
