//! OTLP profiles (opentelemetry-proto's `profiles` feature, v1development as the current collector
//! speaks it): one request with a shared dictionary, the resource's attributes, and one profile per
//! sample type.

use crate::{select, Labels, Sent, KINDS};
use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development as otlp;
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::HashMap;
use whyslow_model::{Profile, NONE};

fn attr(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue { key: key.to_string(), value: Some(AnyValue { value: Some(v) }), ..Default::default() }
}

/// What a response's partial success says: profiles rejected, and the backend's reason or warning.
pub(crate) fn partial_success(r: &ExportProfilesServiceResponse, sent: &mut Sent) {
    if let Some(p) = &r.partial_success {
        sent.rejected_profiles += u64::try_from(p.rejected_profiles).unwrap_or(0);
        sent.message = p.error_message.trim().to_string();
    }
}

/// The export request of one profile.
pub fn export_request(p: &Profile, l: &Labels) -> ExportProfilesServiceRequest {
    // Tables start with their zero value, as the format requires.
    let mut strings: Vec<String> = vec![String::new()];
    let mut index: HashMap<String, i32> = HashMap::from([(String::new(), 0)]);
    let mut s = |x: &str| -> i32 {
        *index.entry(x.to_string()).or_insert_with(|| {
            strings.push(x.to_string());
            strings.len() as i32 - 1
        })
    };
    let mut mapping_table = vec![otlp::Mapping::default()];
    for m in &p.modules {
        mapping_table.push(otlp::Mapping { filename_strindex: s(&m.path), ..Default::default() });
    }
    let mut function_table = vec![otlp::Function::default()];
    let mut location_table = vec![otlp::Location::default()];
    for (i, f) in p.frames.iter().enumerate() {
        let name = s(p.str(f.name));
        function_table.push(otlp::Function {
            name_strindex: name,
            system_name_strindex: name,
            filename_strindex: s(p.str(f.file)),
            ..Default::default()
        });
        location_table.push(otlp::Location {
            mapping_index: if f.module == NONE { 0 } else { f.module as i32 + 1 },
            lines: vec![otlp::Line { function_index: i as i32 + 1, ..Default::default() }],
            ..Default::default()
        });
    }
    let mut stack_table = vec![otlp::Stack::default()];
    let mut stacks: HashMap<u32, i32> = HashMap::new();
    let mut profiles = Vec::new();
    for kind in KINDS {
        let Some(part) = select(p, kind) else { continue };
        for (vi, t) in part.sample_types.iter().enumerate() {
            let mut samples = Vec::new();
            for smp in part.samples.iter().filter(|x| x.values[vi] != 0) {
                let stack_index = *stacks.entry(smp.stack).or_insert_with(|| {
                    // Leaf first.
                    let mut ids: Vec<i32> = p.stack_frames(smp.stack).iter().map(|&f| f as i32 + 1).collect();
                    ids.reverse();
                    stack_table.push(otlp::Stack { location_indices: ids });
                    stack_table.len() as i32 - 1
                });
                samples.push(otlp::Sample {
                    stack_index,
                    values: vec![smp.values[vi]],
                    ..Default::default()
                });
            }
            if samples.is_empty() {
                continue;
            }
            let period = if kind.name == "process_cpu" && p.meta.frequency_hz > 0 {
                1_000_000_000 / p.meta.frequency_hz as i64
            } else {
                0
            };
            profiles.push(otlp::Profile {
                sample_type: Some(otlp::ValueType { type_strindex: s(&t.name), unit_strindex: s(&t.unit) }),
                samples,
                time_unix_nano: p.meta.start_unix_ns,
                duration_nano: p.meta.duration_ns,
                period_type: Some(otlp::ValueType {
                    type_strindex: s(kind.period.0),
                    unit_strindex: s(kind.period.1),
                }),
                period,
                ..Default::default()
            });
        }
    }
    let mut attributes = vec![attr("service.name", any_value::Value::StringValue(l.service.clone()))];
    if !l.hostname.is_empty() {
        attributes.push(attr("host.name", any_value::Value::StringValue(l.hostname.clone())));
    }
    if !l.process.is_empty() {
        attributes.push(attr("process.executable.name", any_value::Value::StringValue(l.process.clone())));
    }
    if let Some(pid) = l.pid {
        attributes.push(attr("process.pid", any_value::Value::IntValue(i64::from(pid))));
    }
    for (k, v) in &l.extra {
        attributes.push(attr(k, any_value::Value::StringValue(v.clone())));
    }
    ExportProfilesServiceRequest {
        resource_profiles: vec![otlp::ResourceProfiles {
            resource: Some(Resource { attributes, ..Default::default() }),
            scope_profiles: vec![otlp::ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "whyslow".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                profiles,
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(otlp::ProfilesDictionary {
            mapping_table,
            location_table,
            function_table,
            link_table: vec![otlp::Link::default()],
            string_table: strings,
            attribute_table: vec![otlp::KeyValueAndUnit::default()],
            stack_table,
        }),
    }
}
