//! Renderers: text tables, JSON, SVG flame graphs and export formats. Every renderer writes to an
//! `impl Write` it is given and never prints by itself.

pub mod calls;
pub mod compare;
pub mod diff;
pub mod doctor;
pub mod export;
pub mod fit;
pub mod flamegraph;
pub mod json;
pub mod loadtest;
pub mod source;
pub mod stacks;
pub mod syscalls;
pub mod text;
pub mod top;
pub mod tree;
pub mod units;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("the recording has no samples of type '{0}'")]
    Empty(String),
    #[error("no sample type #{index}: the recording has {count}")]
    NoSuchValue { index: usize, count: usize },
}

use whyslow_model::{FrameKind, Profile, SampleType};

/// The chosen sample type, or a typed error instead of an index panic further down.
pub(crate) fn sample_type(p: &Profile, value: usize) -> Result<&SampleType, RenderError> {
    p.sample_types.get(value).ok_or(RenderError::NoSuchValue { index: value, count: p.sample_types.len() })
}

pub(crate) use whyslow_model::{percent as pct, NO_STACK_FRAME as NO_STACK};

/// A C++ or Rust function name with the arguments of its templates (generics) shortened to `…`, for
/// text output, where `std::vector<std::pair<int, std::string>>::push_back` would wrap over lines:
/// `std::vector<…>::push_back`. A `<` opens template arguments only right after a name (an identifier
/// character); `operator<`, `operator<<`, `operator->` and Rust's `<T as Trait>::f` stay as they are (the
/// last's inner generics are shortened). JSON keeps the full names.
pub fn short_name(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains('<') {
        return name.into();
    }
    let b = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        // `operator` followed by one of its symbolic names is copied through whole.
        if name[i..].starts_with("operator") && (i == 0 || !ident(b[i - 1])) {
            let rest = &name[i + 8..];
            let op = ["<=>", "<<=", "<<", "<=", "<", "->*", "->", ">>=", ">>", ">=", ">"]
                .iter()
                .find(|op| rest.starts_with(**op))
                .map_or(0, |op| op.len());
            out.push_str(&name[i..i + 8 + op]);
            i += 8 + op;
            continue;
        }
        if c == b'<' && i > 0 && ident(b[i - 1]) {
            // Skip to the matching `>`; unbalanced brackets (a truncated name) are left as they are.
            let mut depth = 0usize;
            let mut end = None;
            for (j, &d) in b.iter().enumerate().skip(i) {
                match d {
                    b'<' => depth += 1,
                    b'>' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(j);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            if let Some(end) = end {
                out.push_str("<…>");
                i = end + 1;
                continue;
            }
        }
        let ch = name[i..].chars().next().unwrap_or('?');
        out.push(ch);
        i += ch.len_utf8();
    }
    out.into()
}

fn ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Folded stacks (`root;...;leaf`) with their summed value, sorted, zero values left out. With `annotate`,
/// kernel frames end in `_[k]` and inlined ones in `_[i]`, the suffixes FlameGraph palettes color by.
pub(crate) fn folded_lines(p: &Profile, value: usize, annotate: bool) -> Vec<(String, i64)> {
    let mut sums: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    for s in p.samples.iter().filter(|s| s.values[value] != 0) {
        let names: Vec<String> = p
            .stack_frames(s.stack)
            .into_iter()
            .map(|f| {
                // `;` separates frames and a line break ends the record: keep such names on one frame.
                let name = p.frame_name(f).replace(';', ":").replace(['\n', '\r'], " ");
                match p.frames[f as usize].kind {
                    FrameKind::Kernel if annotate => name + "_[k]",
                    FrameKind::Inlined if annotate => name + "_[i]",
                    _ => name,
                }
            })
            .collect();
        let stack = if names.is_empty() { NO_STACK.to_string() } else { names.join(";") };
        *sums.entry(stack).or_default() += s.values[value];
    }
    let mut v: Vec<(String, i64)> = sums.into_iter().collect();
    v.sort();
    v
}

#[cfg(test)]
mod names {
    use super::short_name;

    #[test]
    fn template_arguments_are_shortened() {
        let cases = [
            ("std::vector<std::pair<int, std::string>>::push_back", "std::vector<…>::push_back"),
            (
                "std::_Hashtable<int, std::pair<int const, int>, std::allocator<int>>::find(int const&)",
                "std::_Hashtable<…>::find(int const&)",
            ),
            ("void f<int>(std::map<int, int> const&)", "void f<…>(std::map<…> const&)"),
            ("main", "main"),
            ("Point::operator<(Point const&) const", "Point::operator<(Point const&) const"),
            (
                "std::operator<< <std::char_traits<char>>(std::ostream&)",
                "std::operator<< <std::char_traits<…>>(std::ostream&)",
            ),
            ("Box<int>::operator->()", "Box<…>::operator->()"),
            (
                "<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop",
                "<alloc::vec::Vec<…> as core::ops::drop::Drop>::drop",
            ),
            ("broken<int", "broken<int"),
        ];
        for (full, short) in cases {
            assert_eq!(short_name(full), short, "{full}");
        }
    }
}

#[cfg(test)]
pub(crate) mod fixture {
    use whyslow_model::{FrameKind, Metadata, Profile, ProfileBuilder, SampleType, UnwindStats};

    /// A fixed profile: main -> run -> a/b/c (6/3/1 ms), an inlined helper, a kernel frame, two threads.
    pub fn profile() -> Profile {
        let meta = Metadata {
            tool_version: "0.1.0".into(),
            command: vec!["./app".into(), "3".into()],
            target_pids: vec![100],
            event: "cpu-clock".into(),
            frequency_hz: 999,
            start_unix_ns: 1_700_000_000_000_000_000,
            duration_ns: 3_000_000_000,
            lost_samples: 2,
            lost_events: 0,
            unwind: UnwindStats { complete: 99, partial: 1 },
            exit_code: Some(0),
            hostname: "host".into(),
            kernel_release: "6.1".into(),
            notes: vec!["example note".into()],
            syscalls_duration_ns: 0,
            calls_duration_ns: 0,
            killed: Vec::new(),
            target_env: None,
            syscall_cost_ns: 0,
            syscall_slices: Vec::new(),
        };
        let types = vec![
            SampleType { name: "cpu".into(), unit: "samples".into() },
            SampleType { name: "cpu-ns".into(), unit: "nanoseconds".into() },
        ];
        let mut b = ProfileBuilder::new(meta, types);
        let app = b.module("/opt/app/app", "00ff");
        let k = b.module("[kernel.kallsyms]", "");
        let main = b.frame("main", app, "app.c", FrameKind::User);
        let run = b.frame("run", app, "app.c", FrameKind::User);
        let a = b.frame("burn_a", app, "app.c", FrameKind::User);
        let mix = b.frame("mix", app, "mix.h", FrameKind::Inlined);
        let bb = b.frame("burn_b", app, "app.c", FrameKind::User);
        let c = b.frame("burn_c", app, "app.c", FrameKind::User);
        let sys = b.frame("do_syscall_64", k, "", FrameKind::Kernel);
        let t1 = b.thread(100, 100, "app");
        let t2 = b.thread(100, 101, "worker");
        for (stack, thread, n) in [
            (vec![main, run, a], t1, 40),
            (vec![main, run, a, mix], t1, 20),
            (vec![main, run, bb], t2, 30),
            (vec![main, run, c, sys], t2, 10),
        ] {
            let s = b.stack(&stack);
            b.add_sample(s, thread, &[n, n * 1_001_001]);
        }
        b.finish()
    }

    /// What a renderer writes into a buffer; it must succeed.
    pub fn render(f: impl FnOnce(&mut Vec<u8>) -> Result<(), crate::RenderError>) -> Vec<u8> {
        let mut out = Vec::new();
        f(&mut out).unwrap();
        out
    }

    /// Compares with `tests/golden/NAME` byte for byte; `WHYSLOW_BLESS=1` rewrites the file instead.
    pub fn check_golden(name: &str, actual: &[u8]) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
        if std::env::var_os("WHYSLOW_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, actual).unwrap();
            return;
        }
        let expected = std::fs::read(&path)
            .unwrap_or_else(|_| panic!("missing golden {path:?}; run with WHYSLOW_BLESS=1"));
        assert!(
            expected == actual,
            "{name} differs from its golden file (WHYSLOW_BLESS=1 to update):\n{}",
            String::from_utf8_lossy(actual)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::{self, render};
    use super::{export, flamegraph, json, text, RenderError, NO_STACK};
    use whyslow_model::Profile;

    /// The fixture without samples (all threads idle) and one with no sample types at all.
    fn empty_profiles() -> (Profile, Profile) {
        let mut p = fixture::profile();
        p.samples.clear();
        let mut none = p.clone();
        none.sample_types.clear();
        (p, none)
    }

    #[test]
    fn every_renderer_handles_an_empty_profile() {
        let (p, _) = empty_profiles();
        let text =
            render(|w| text::report(w, &p, &text::ReportOptions { threads: true, ..Default::default() }));
        assert!(String::from_utf8(text).unwrap().ends_with("\nno cpu samples\n"));
        let v: serde_json::Value = serde_json::from_slice(&render(|w| json::report(w, &p, 0))).unwrap();
        assert_eq!(
            (v["total_samples"].as_i64(), v["functions"].as_array().map(Vec::len)),
            (Some(0), Some(0))
        );
        assert!(render(|w| export::folded(w, &p, 0)).is_empty());
        let v: serde_json::Value = serde_json::from_slice(&render(|w| export::speedscope(w, &p, 0))).unwrap();
        assert_eq!(v["profiles"][0]["samples"], serde_json::json!([]));
        let cg = String::from_utf8(render(|w| export::callgrind(w, &p, 0))).unwrap();
        assert!(cg.ends_with("events: cpu\n\ntotals: 0\n"), "{cg}");
        assert!(!render(|w| export::pprof(w, &p)).is_empty());
        let svg = flamegraph::svg(&mut Vec::new(), &p, 0, &Default::default());
        assert!(matches!(svg, Err(RenderError::Empty(t)) if t == "cpu"));
    }

    #[test]
    fn a_missing_sample_type_is_an_error_not_a_panic() {
        let (_, p) = empty_profiles();
        let no_value =
            |r: Result<(), RenderError>| matches!(r, Err(RenderError::NoSuchValue { index: 0, count: 0 }));
        let w = &mut Vec::new();
        assert!(no_value(text::report(w, &p, &Default::default())));
        assert!(no_value(json::report(w, &p, 0)));
        assert!(no_value(flamegraph::svg(w, &p, 0, &Default::default())));
        assert!(no_value(export::folded(w, &p, 0)));
        assert!(no_value(export::speedscope(w, &p, 0)));
        assert!(no_value(export::callgrind(w, &p, 0)));
        assert!(export::pprof(w, &p).is_ok());
    }

    #[test]
    fn stacks_without_frames_keep_their_value() {
        let mut p = fixture::profile();
        p.samples[0].stack = whyslow_model::NONE;
        let folded = String::from_utf8(render(|w| export::folded(w, &p, 0))).unwrap();
        assert!(folded.starts_with("[no stack] 40\n"), "{folded}");
        let v: serde_json::Value = serde_json::from_slice(&render(|w| export::speedscope(w, &p, 0))).unwrap();
        assert_eq!(v["shared"]["frames"][7]["name"], NO_STACK);
        assert_eq!(v["profiles"][0]["samples"][0], serde_json::json!([7]));
    }
}
