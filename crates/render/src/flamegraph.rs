//! Interactive SVG flame graphs (search, zoom) through inferno, fed with folded stacks.

use crate::{folded_lines, sample_type, RenderError};
use inferno::flamegraph::color::{MultiPalette, Palette};
use std::io::Write;
use whyslow_model::Profile;

#[derive(Debug, Clone, Default)]
pub struct FlameOptions {
    pub title: String,
    pub subtitle: Option<String>,
    /// Icicle graph: merged by leaf, roots at the bottom.
    pub reverse: bool,
}

/// Writes an SVG flame graph; [`RenderError::Empty`] when no sample has a positive value.
/// Colors: kernel orange, inlined aqua, C++/Rust (`::`) yellow, other native code red (inferno's "java"
/// palette keyed by the `_[k]`/`_[i]` suffixes, which it strips from the labels). Colors are hashed from
/// the names, so the same input gives the same SVG.
pub fn svg(w: &mut impl Write, p: &Profile, value: usize, o: &FlameOptions) -> Result<(), RenderError> {
    let st = sample_type(p, value)?;
    let lines: Vec<String> = folded_lines(p, value, true)
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(s, n)| format!("{} {n}", unambiguous(s)))
        .collect();
    if lines.is_empty() {
        return Err(RenderError::Empty(st.name.clone()));
    }
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = o.title.clone();
    opts.subtitle = o.subtitle.clone();
    opts.count_name = st.unit.clone();
    opts.colors = Palette::Multi(MultiPalette::Java);
    opts.hash = true;
    opts.reverse_stack_order = o.reverse;
    if o.reverse {
        opts.direction = inferno::flamegraph::Direction::Inverted;
    }
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)?;
    Ok(())
}

/// A stack whose last frame ends in a number (`f 123`) reads to inferno as a differential line (`stack
/// before after`; a number above i64::MAX overflowed it): the space before that number becomes a no-break
/// space, which looks the same.
fn unambiguous(mut stack: String) -> String {
    if let Some(i) = stack.rfind(' ') {
        let tail = &stack[i + 1..];
        if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            stack.replace_range(i..i + 1, "\u{a0}");
        }
    }
    stack
}

#[cfg(test)]
mod tests {
    use super::{svg, FlameOptions};
    use crate::fixture::{self, render};

    fn svg_of(o: &FlameOptions) -> String {
        String::from_utf8(render(|w| svg(w, &fixture::profile(), 0, o))).unwrap()
    }

    /// The `<g>` element of a frame: its title says `name (N samples, P%)`.
    fn frame<'a>(s: &'a str, name: &str) -> &'a str {
        let at = s.find(&format!("<title>{name} (")).unwrap_or_else(|| panic!("{name} missing"));
        &s[s[..at].rfind("<g>").unwrap()..at + s[at..].find("</g>").unwrap()]
    }

    #[test]
    fn svg_has_every_function_with_counts_and_the_scripts() {
        let s = svg_of(&FlameOptions { title: "whyslow test".into(), ..Default::default() });
        for (name, n) in
            [("main", 100), ("run", 100), ("burn_a", 60), ("burn_b", 30), ("burn_c", 10), ("mix", 20)]
        {
            assert!(frame(&s, name).contains(&format!("({n} samples, ")), "{name}");
        }
        assert!(
            s.contains("whyslow test") && s.contains("function search("),
            "title or search script missing"
        );
        assert!(!s.contains("_[k]") && !s.contains("_[i]"), "annotations must not show");
        assert_eq!(
            s,
            svg_of(&FlameOptions { title: "whyslow test".into(), ..Default::default() }),
            "deterministic"
        );
    }

    #[test]
    fn kernel_and_inlined_frames_have_their_own_colors() {
        let s = svg_of(&FlameOptions::default());
        let fill = |name: &str| {
            let g = frame(&s, name);
            let at = g.find("fill=\"rgb(").unwrap() + 10;
            let rgb: Vec<u32> =
                g[at..at + g[at..].find(')').unwrap()].split(',').map(|c| c.parse().unwrap()).collect();
            rgb
        };
        let (k, i, u) = (fill("do_syscall_64"), fill("mix"), fill("burn_a"));
        assert!(k[0] > 180 && k[2] < 100 && k[1] > 100, "kernel orange: {k:?}");
        assert!(i[2] > 150 && i[0] < 100, "inlined aqua: {i:?}");
        assert!(u[0] > 180 && u[1] < 180, "native red: {u:?}");
    }

    #[test]
    fn a_frame_ending_in_a_number_is_no_differential_count() {
        use whyslow_model::{FrameKind, Metadata, ProfileBuilder, SampleType, NONE};
        let types = vec![SampleType { name: "cpu".into(), unit: "samples".into() }];
        let mut b = ProfileBuilder::new(Metadata::default(), types);
        let f = b.frame("f 9223372036854775808", NONE, "", FrameKind::User);
        let (leaf, t) = (b.stack(&[f]), b.thread(1, 1, "t"));
        b.add_sample(leaf, t, &[5]);
        let s = String::from_utf8(render(|w| svg(w, &b.finish(), 0, &FlameOptions::default()))).unwrap();
        assert!(s.contains("<title>f\u{a0}9223372036854775808 (5 samples, 100.00%)"), "{s}");
    }

    #[test]
    fn reverse_is_an_icicle_merged_by_leaf() {
        let s = svg_of(&FlameOptions { reverse: true, ..Default::default() });
        // Merged by leaf, main appears under each leaf instead of once with 100.
        assert!(frame(&s, "main").contains("(40 samples, ") || frame(&s, "main").contains("(30 samples, "));
        assert!(!s.contains("<title>main (100 samples"));
    }
}
