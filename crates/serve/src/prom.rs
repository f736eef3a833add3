//! The Prometheus text format (HELP and TYPE once per family, escaped label values): what each part of
//! the agent writes its metrics with. /metrics itself is `metrics::render`.

use std::fmt::Write;

/// A metrics page being written: its text and the families whose HELP and TYPE it has.
#[derive(Default)]
pub struct Out(String, std::collections::HashSet<String>);

impl Out {
    pub fn into_text(self) -> String {
        self.0
    }

    /// A sample, after its family's HELP and TYPE the first time the family shows.
    pub fn sample(&mut self, name: &str, kind: &str, help: &str, labels: &[(&str, &str)], v: String) {
        if self.1.insert(name.to_string()) {
            self.family(name, kind, help);
        }
        self.value(name, labels, v);
    }

    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    pub fn value(&mut self, name: &str, labels: &[(&str, &str)], v: impl std::fmt::Display) {
        let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
        let l = if l.is_empty() { String::new() } else { format!("{{{}}}", l.join(",")) };
        let _ = writeln!(self.0, "{name}{l} {v}");
    }
    pub fn one(&mut self, name: &str, kind: &str, help: &str, v: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.value(name, &[], v);
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
