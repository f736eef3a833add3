//! Interactive SVG flame graphs (search, zoom) through inferno, fed with folded stacks.

use crate::{folded_lines, RenderError};
use std::io::Write;
use whyslow_model::Profile;

#[derive(Debug, Clone, Default)]
pub struct FlameOptions {
    pub title: String,
    pub subtitle: Option<String>,
    /// Icicle graph: merged by leaf, roots at the bottom.
    pub reverse: bool,
}

pub fn svg(w: &mut impl Write, p: &Profile, value: usize, o: &FlameOptions) -> Result<(), RenderError> {
    let lines: Vec<String> = folded_lines(p, value).into_iter().map(|(s, n)| format!("{s} {n}")).collect();
    if lines.is_empty() {
        return Err(RenderError::Empty(p.sample_types[value].name.clone()));
    }
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = o.title.clone();
    opts.subtitle = o.subtitle.clone();
    opts.count_name = p.sample_types[value].unit.clone();
    opts.reverse_stack_order = o.reverse;
    if o.reverse {
        opts.direction = inferno::flamegraph::Direction::Inverted;
    }
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn svg_has_every_function_and_the_search_script() {
        let mut out = Vec::new();
        svg(&mut out, &fixture::profile(), 0, &FlameOptions { title: "t".into(), ..Default::default() })
            .unwrap();
        let s = String::from_utf8(out).unwrap();
        for name in ["main", "run", "burn_a", "burn_b", "burn_c", "mix", "do_syscall_64"] {
            assert!(s.contains(&format!(">{name}<")) || s.contains(&format!("{name} (")), "{name} missing");
        }
        assert!(s.contains("function search("), "interactive search script missing");
    }

    #[test]
    fn empty_profile_is_an_error() {
        let mut p = fixture::profile();
        p.samples.clear();
        assert!(matches!(svg(&mut Vec::new(), &p, 0, &FlameOptions::default()), Err(RenderError::Empty(_))));
    }
}
