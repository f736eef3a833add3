//! Source annotation, as `pprof -list` prints it: each matched function's source lines with the samples
//! of each line (self and total), or, where the source text could not be read, the lines with samples
//! and why the text is missing. JSON gives the same per-line counts.
//!
//! Never reads files: the caller hands the text in ([`Source`]).

use crate::units::Scale;
use crate::RenderError;
use serde::Serialize;
use std::io::Write;
use whyslow_analyze::source::FunctionLines;
use whyslow_model::basename;

/// Lines of context shown around the sampled lines.
pub const CONTEXT: u32 = 2;

/// The text of a function's source file, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// The file's lines and where they were read (`disk`, `debuginfod URL`).
    Text { lines: Vec<String>, from: String },
    /// Why the text is missing, in one line.
    Missing(String),
}

/// One annotated function.
pub struct Listing<'a> {
    pub function: &'a FunctionLines,
    pub source: &'a Source,
}

/// The lines shown for a function: its sampled lines with [`CONTEXT`] lines around them (all lines from
/// the first to the last, as pprof shows the whole body), within the file's length when it is known.
fn shown_lines(f: &FunctionLines, file_len: Option<usize>) -> Vec<u32> {
    let sampled: Vec<u32> = f.lines.iter().map(|l| l.line).filter(|&l| l != 0).collect();
    let (Some(&lo), Some(&hi)) = (sampled.first(), sampled.last()) else { return Vec::new() };
    match file_len {
        Some(n) => {
            let n = n as u32;
            (lo.saturating_sub(CONTEXT).max(1)..=(hi + CONTEXT).min(n.max(hi))).collect()
        }
        None => sampled,
    }
}

/// Text listing of every function; `total` is the profile's total of the sample type (for the share).
pub fn text(w: &mut impl Write, listings: &[Listing], total: i64, scale: Scale) -> Result<(), RenderError> {
    for (i, l) in listings.iter().enumerate() {
        let f = l.function;
        if i > 0 {
            writeln!(w)?;
        }
        let file = if f.file.is_empty() { "(no line table)" } else { f.file.as_str() };
        writeln!(
            w,
            "ROUTINE ======================== {} in {file} ({})",
            crate::short_name(&f.name),
            basename(&f.module)
        )?;
        let (s, t) = (scale.show(f.self_), scale.show(f.total));
        let vw = [s.chars().count(), t.chars().count(), 4]
            .into_iter()
            .chain(f.lines.iter().flat_map(|l| [scale.show(l.self_).len(), scale.show(l.total).len()]))
            .max()
            .unwrap_or(4);
        writeln!(w, "{s:>vw$} {t:>vw$} (self, total) {:.2}% of total", crate::pct(f.total, total))?;
        let text = match l.source {
            Source::Text { lines, .. } => Some(lines),
            Source::Missing(why) => {
                writeln!(w, "source not found: {why}; the lines with samples:")?;
                None
            }
        };
        let cell = |v: i64| if v == 0 { ".".to_string() } else { scale.show(v) };
        let lw = shown_lines(f, None).last().map_or(1, |l| l.to_string().len()).max(3);
        for line in shown_lines(f, text.map(Vec::len)) {
            let (own, all) = f.lines.iter().find(|l| l.line == line).map_or((0, 0), |l| (l.self_, l.total));
            let src = text.and_then(|t| t.get(line as usize - 1)).map_or("", String::as_str);
            let row = format!("{:>vw$} {:>vw$} {line:>lw$}:{src}", cell(own), cell(all));
            writeln!(w, "{}", row.trim_end())?;
        }
        if let Some(l) = f.lines.iter().find(|l| l.line == 0) {
            writeln!(w, "{:>vw$} {:>vw$} {:>lw$} (no line information)", cell(l.self_), cell(l.total), "")?;
        }
        if let Source::Text { from, .. } = l.source {
            if from != "disk" {
                writeln!(w, "(source from {from})")?;
            }
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct JsonLine<'a> {
    line: u32,
    #[serde(rename = "self")]
    self_: i64,
    total: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonFunction<'a> {
    name: &'a str,
    file: &'a str,
    module: &'a str,
    build_id: &'a str,
    #[serde(rename = "self")]
    self_: i64,
    total: i64,
    /// `disk`, `debuginfod URL`, or null when the text was not found.
    source: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source_error: Option<&'a str>,
    /// Every line with samples (line 0: no line information), with its text where the source was read.
    lines: Vec<JsonLine<'a>>,
}

#[derive(Serialize)]
struct JsonListing<'a> {
    value_type: &'a str,
    unit: &'a str,
    total: i64,
    functions: Vec<JsonFunction<'a>>,
}

/// JSON: the sample type, its total, and per function its per-line counts.
pub fn json(
    w: &mut impl Write,
    listings: &[Listing],
    value_type: &str,
    unit: &str,
    total: i64,
) -> Result<(), RenderError> {
    let functions = listings
        .iter()
        .map(|l| {
            let f = l.function;
            let text = match l.source {
                Source::Text { lines, .. } => Some(lines),
                Source::Missing(_) => None,
            };
            JsonFunction {
                name: &f.name,
                file: &f.file,
                module: &f.module,
                build_id: &f.build_id,
                self_: f.self_,
                total: f.total,
                source: match l.source {
                    Source::Text { from, .. } => Some(from),
                    Source::Missing(_) => None,
                },
                source_error: match l.source {
                    Source::Missing(why) => Some(why),
                    Source::Text { .. } => None,
                },
                lines: f
                    .lines
                    .iter()
                    .map(|x| JsonLine {
                        line: x.line,
                        self_: x.self_,
                        total: x.total,
                        text: text.and_then(|t| t.get((x.line as usize).checked_sub(1)?)).map(String::as_str),
                    })
                    .collect(),
            }
        })
        .collect();
    serde_json::to_writer_pretty(&mut *w, &JsonListing { value_type, unit, total, functions })
        .map_err(std::io::Error::from)?;
    writeln!(w)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{json, text, Listing, Source};
    use crate::units::Scale;
    use whyslow_analyze::source::FunctionLines;
    use whyslow_analyze::source::LineValue;

    fn function() -> FunctionLines {
        let lv = |line, self_, total| LineValue { line, self_, total };
        FunctionLines {
            name: "work".into(),
            file: "/src/app.c".into(),
            module: "/bin/app".into(),
            build_id: "beef".into(),
            self_: 9,
            total: 10,
            lines: vec![lv(0, 1, 1), lv(3, 6, 6), lv(5, 2, 3)],
        }
    }

    #[test]
    fn lines_with_their_samples_and_context() {
        let f = function();
        let text: Vec<String> = (1..=9).map(|i| format!("  line {i}")).collect();
        let source = Source::Text { lines: text, from: "disk".into() };
        let mut out = Vec::new();
        text_listing(&mut out, &f, &source);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "ROUTINE ======================== work in /src/app.c (app)\n\
             \x20  9   10 (self, total) 50.00% of total\n\
             \x20  .    .   1:  line 1\n\
             \x20  .    .   2:  line 2\n\
             \x20  6    6   3:  line 3\n\
             \x20  .    .   4:  line 4\n\
             \x20  2    3   5:  line 5\n\
             \x20  .    .   6:  line 6\n\
             \x20  .    .   7:  line 7\n\
             \x20  1    1     (no line information)\n"
        );
    }

    #[test]
    fn without_the_source_only_sampled_lines_and_why() {
        let f = function();
        let mut out = Vec::new();
        text_listing(&mut out, &f, &Source::Missing("/src/app.c is not on this machine".into()));
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("source not found: /src/app.c is not on this machine; the lines with samples:\n")
        );
        assert!(out.contains("   6    6   3:\n   2    3   5:\n"), "{out}");
    }

    fn text_listing(out: &mut Vec<u8>, f: &FunctionLines, source: &Source) {
        text(out, &[Listing { function: f, source }], 20, Scale::Count).unwrap();
    }

    #[test]
    fn json_has_per_line_counts_and_text() {
        let f = function();
        let source = Source::Text { lines: vec!["a".into(), "b".into(), "c".into()], from: "disk".into() };
        let mut out = Vec::new();
        json(&mut out, &[Listing { function: &f, source: &source }], "cpu", "samples", 20).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let lines = &v["functions"][0]["lines"];
        assert_eq!(lines[1], serde_json::json!({"line": 3, "self": 6, "total": 6, "text": "c"}));
        assert_eq!(lines[2], serde_json::json!({"line": 5, "self": 2, "total": 3}));
        assert_eq!(v["functions"][0]["source"], "disk");
    }
}
