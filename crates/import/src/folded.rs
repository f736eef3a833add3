//! Folded stacks (FlameGraph's `stackcollapse-*` output, `whyslow export --format folded`): one line per
//! stack, frames root first separated by `;`, then a space and the value. Blank lines are skipped; any
//! other line that does not parse is an error naming its number. FlameGraph's `_[k]` (kernel) and `_[i]`
//! (inlined) suffixes set the frame kind; `[no stack]` (whyslow's name for an empty stack) is one again.

use crate::{bounded_sum, source_note, ImportError, ALL_THREADS};
use whyslow_model::{sample_types, FrameKind, Metadata, Profile, ProfileBuilder, SampleType, NONE};

use whyslow_model::NO_STACK_FRAME as NO_STACK;

/// Parses folded text; `sample_type` names its one value type (default `samples`, a count).
pub fn parse(text: &str, origin: &str, sample_type: Option<&str>) -> Result<Profile, ImportError> {
    let name = sample_type.unwrap_or("samples");
    let unit = if name == sample_types::CPU { "samples" } else { "count" };
    let meta = Metadata {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command: vec![origin.to_string()],
        event: "folded stacks".into(),
        notes: vec![source_note("folded stacks", origin)],
        ..Default::default()
    };
    let mut b = ProfileBuilder::new(meta, vec![SampleType { name: name.into(), unit: unit.into() }]);
    let thread = b.thread(0, 0, ALL_THREADS);
    let mut total = 0i64;
    let mut frames = Vec::new();
    let mut stacks = 0usize;
    for (i, line) in text.lines().enumerate() {
        // Folded stacks are recognized by their first line: text whose first line is not one is no
        // format we know; a bad line after good ones is an error naming it.
        let first = stacks == 0;
        let err = |what: &str| match first {
            true => ImportError::Unknown { origin: origin.to_string(), detail: String::new() },
            false => ImportError::Folded { origin: origin.to_string(), line: i + 1, what: what.into() },
        };
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let Some((stack, value)) = line.rsplit_once(' ') else {
            return Err(err("not folded stacks (`root;caller;leaf COUNT`): no value after the stack"));
        };
        let value: i64 = value.parse().ok().filter(|v| *v >= 0).ok_or_else(|| {
            err(&format!("not folded stacks (`root;caller;leaf COUNT`): bad value {value:?}"))
        })?;
        if !bounded_sum(&mut total, value) {
            return Err(err("the values overflow"));
        }
        let stack = stack.trim_end();
        frames.clear();
        if stack != NO_STACK {
            for f in stack.split(';').filter(|f| !f.is_empty()) {
                let (f, kind) = match (f.strip_suffix("_[k]"), f.strip_suffix("_[i]")) {
                    (Some(k), _) => (k, FrameKind::Kernel),
                    (_, Some(i)) => (i, FrameKind::Inlined),
                    _ => (f, FrameKind::User),
                };
                frames.push(b.frame(f, NONE, "", kind));
            }
        }
        let leaf = b.stack(&frames);
        b.add_sample(leaf, thread, &[value]);
        stacks += 1;
    }
    let p = b.finish();
    if p.samples.is_empty() {
        return Err(ImportError::Unknown { origin: origin.to_string(), detail: " (it has no lines)".into() });
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::parse;
    use crate::ImportError;
    use whyslow_model::FrameKind;

    #[test]
    fn lines_values_and_errors() {
        let p = parse("main;f;g 3\n\nmain;f 2\r\nmain;f;g 1\nmain;k_[k] 4\n", "t", None).unwrap();
        assert_eq!(p.total(0), 10);
        assert_eq!(p.samples.len(), 3);
        assert_eq!(p.sample_types[0].name, "samples");
        let k = p.frames.iter().position(|f| p.str(f.name) == "k").unwrap();
        assert_eq!(p.frames[k].kind, FrameKind::Kernel);
        let e = parse("main;f 1\nmain;g x\n", "t.folded", None).unwrap_err();
        assert!(e.to_string().starts_with("t.folded line 2: not folded stacks"), "{e}");
        let e = parse("main;f 1\nnovalue\n", "t", None).unwrap_err();
        assert!(e.to_string().starts_with("t line 2:"), "{e}");
        let e = parse("\nthis is not a profile\nmain;f 1\n", "t", None).unwrap_err();
        assert!(matches!(e, ImportError::Unknown { .. }), "a first line that is no stack: {e}");
        assert!(parse(&format!("a {}\nb {}\n", i64::MAX, i64::MAX), "t", None).is_err());
        assert_eq!(parse("a 1\n", "t", Some("cpu")).unwrap().sample_types[0].unit, "samples");
    }

    #[test]
    fn names_with_spaces_keep_them() {
        let p = parse("main;operator new(unsigned long) 5\n", "t", None).unwrap();
        let leaf = *p.stack_frames(p.samples[0].stack).last().unwrap();
        assert_eq!(p.frame_name(leaf), "operator new(unsigned long)");
    }
}
