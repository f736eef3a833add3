//! Samples per source line of the functions a pattern names, as pprof's `-list` shows them: for each
//! line, the value of samples whose innermost frame was at that line (self) and of samples with the
//! function at that line anywhere on their stack (total). Pure: reading the source text is the caller's.
//!
//! A function is (name, file, module): its inlined copies and its own body count together. Recursion counts
//! a sample once per line, and once in the function's total.

use crate::AnalyzeError;
use regex::Regex;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use whyslow_model::{close_matches, Profile, NONE};

/// The samples of one function by source line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionLines {
    pub name: String,
    /// The source file its line table names ("" when it has none).
    pub file: String,
    /// Module path and GNU build id (hex, "" when none): where debuginfod would look for the source.
    pub module: String,
    pub build_id: String,
    /// Value of samples whose innermost frame is this function.
    #[serde(rename = "self")]
    pub self_: i64,
    /// Value of samples with this function anywhere on their stack.
    pub total: i64,
    /// Per line, in line order; line 0 gathers the samples whose address no line table covered.
    pub lines: Vec<LineValue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LineValue {
    pub line: u32,
    #[serde(rename = "self")]
    pub self_: i64,
    pub total: i64,
}

/// Whether `name` is what `query` asks for: a match of the regular expression, or (for names full of
/// regex syntax, `operator()` and templates) the query as a plain substring.
fn named(re: Option<&Regex>, query: &str, name: &str) -> bool {
    re.is_some_and(|re| re.is_match(name)) || name.contains(query)
}

/// The functions with samples whose name `query` matches (a regular expression, unanchored, as pprof's
/// `-list`; also taken literally), largest total first. None matching: an error with close names.
pub fn source_lines(p: &Profile, value: usize, query: &str) -> Result<Vec<FunctionLines>, AnalyzeError> {
    let re = crate::slice::pattern("--source", query).ok();
    let value_of = |v: &[i64]| v.get(value).copied().unwrap_or(0);
    // Which function each frame belongs to, for the frames the query names.
    let mut keys: Vec<(u32, u32, u32)> = Vec::new();
    let mut func_of: Vec<Option<usize>> = vec![None; p.frames.len()];
    let mut index: HashMap<(u32, u32, u32), usize> = HashMap::new();
    for (i, f) in p.frames.iter().enumerate() {
        if named(re.as_ref(), query, p.str(f.name)) {
            let key = (f.name, f.file, f.module);
            let n = keys.len();
            func_of[i] = Some(*index.entry(key).or_insert_with(|| {
                keys.push(key);
                n
            }));
        }
    }
    // Per function: self, total, and (self, total) per line.
    type Sums = (i64, i64, BTreeMap<u32, (i64, i64)>);
    let mut out: Vec<Sums> = vec![(0, 0, BTreeMap::new()); keys.len()];
    let mut seen_fn: Vec<usize> = Vec::new();
    let mut seen_line: Vec<(usize, u32)> = Vec::new();
    for s in &p.samples {
        let v = value_of(&s.values);
        if v == 0 || s.stack == NONE {
            continue;
        }
        seen_fn.clear();
        seen_line.clear();
        let mut node = s.stack;
        let mut leaf = true;
        while node != NONE {
            let n = p.stacks[node as usize];
            if let Some(f) = func_of[n.frame as usize] {
                let entry = &mut out[f];
                if leaf {
                    entry.0 += v;
                    entry.2.entry(n.line).or_default().0 += v;
                }
                if !seen_fn.contains(&f) {
                    seen_fn.push(f);
                    entry.1 += v;
                }
                if !seen_line.contains(&(f, n.line)) {
                    seen_line.push((f, n.line));
                    entry.2.entry(n.line).or_default().1 += v;
                }
            }
            leaf = false;
            node = n.parent;
        }
    }
    let mut found: Vec<FunctionLines> = keys
        .iter()
        .zip(out)
        .filter(|(_, (_, total, _))| *total != 0)
        .map(|(&(name, file, module), (self_, total, lines))| {
            let m = p.modules.get(module as usize);
            FunctionLines {
                name: p.str(name).to_string(),
                file: p.str(file).to_string(),
                module: m.map(|m| m.path.clone()).unwrap_or_default(),
                build_id: m.map(|m| m.build_id.clone()).unwrap_or_default(),
                self_,
                total,
                lines: lines
                    .into_iter()
                    .map(|(line, (s, t))| LineValue { line, self_: s, total: t })
                    .collect(),
            }
        })
        .collect();
    if found.is_empty() {
        let sampled = crate::top_functions(p, value);
        return Err(AnalyzeError::NoSuchFunction {
            query: query.to_string(),
            suggestions: close_matches(query, sampled.iter().map(|f| f.name.as_str()), 5),
        });
    }
    found.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name)));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::{source_lines, FunctionLines};
    use whyslow_model::Profile;
    use whyslow_model::{FrameKind, Metadata, ProfileBuilder, SampleType};

    /// main:10 -> work:20 (leaf) 5; main:10 -> work:21 -> helper:30 3; main:11 -> work:21 (leaf) 2;
    /// main:12 -> rec:40 -> rec:41 (leaf) 4 (recursion); work inlined into main at 22 (leaf) 1.
    fn profile() -> Profile {
        let types = vec![SampleType { name: "cpu".into(), unit: "samples".into() }];
        let mut b = ProfileBuilder::new(Metadata::default(), types);
        let m = b.module("/bin/app", "beef");
        let main = b.frame("main", m, "/src/app.c", FrameKind::User);
        let work = b.frame("work", m, "/src/app.c", FrameKind::User);
        let work_inl = b.frame("work", m, "/src/app.c", FrameKind::Inlined);
        let helper = b.frame("helper", m, "/src/app.c", FrameKind::User);
        let rec = b.frame("rec", m, "/src/rec.c", FrameKind::User);
        let t = b.thread(1, 1, "app");
        for (stack, n) in [
            (vec![(main, 10), (work, 20)], 5),
            (vec![(main, 10), (work, 21), (helper, 30)], 3),
            (vec![(main, 11), (work, 21)], 2),
            (vec![(main, 12), (rec, 40), (rec, 41)], 4),
            (vec![(main, 13), (work_inl, 22)], 1),
        ] {
            let s = b.stack_at_lines(&stack);
            b.add_sample(s, t, &[n]);
        }
        b.finish()
    }

    fn lines(f: &FunctionLines) -> Vec<(u32, i64, i64)> {
        f.lines.iter().map(|l| (l.line, l.self_, l.total)).collect()
    }

    #[test]
    fn lines_hold_self_and_total_with_inlined_copies_merged() {
        let found = source_lines(&profile(), 0, "^work$").unwrap();
        assert_eq!(found.len(), 1);
        let w = &found[0];
        assert_eq!((w.name.as_str(), w.file.as_str(), w.build_id.as_str()), ("work", "/src/app.c", "beef"));
        assert_eq!((w.self_, w.total), (8, 11));
        assert_eq!(lines(w), [(20, 5, 5), (21, 2, 5), (22, 1, 1)]);
        let main = &source_lines(&profile(), 0, "main").unwrap()[0];
        assert_eq!((main.self_, main.total), (0, 15));
        assert_eq!(lines(main), [(10, 0, 8), (11, 0, 2), (12, 0, 4), (13, 0, 1)]);
    }

    #[test]
    fn recursion_counts_once_per_line_and_once_in_the_total() {
        let r = &source_lines(&profile(), 0, "rec").unwrap()[0];
        assert_eq!((r.self_, r.total), (4, 4));
        assert_eq!(lines(r), [(40, 0, 4), (41, 4, 4)]);
    }

    #[test]
    fn a_pattern_names_every_function_it_matches_largest_first() {
        let names: Vec<String> =
            source_lines(&profile(), 0, "^(work|helper|rec)$").unwrap().into_iter().map(|f| f.name).collect();
        assert_eq!(names, ["work", "rec", "helper"]);
        // Regex syntax in a name is also taken literally.
        assert!(source_lines(&profile(), 0, "work(").is_err());
        let e = source_lines(&profile(), 0, "wrok").unwrap_err().to_string();
        assert_eq!(e, "no function matches 'wrok' (did you mean: work?)");
    }
}
