//! Text fitted to a width: words folded under a label (at most so many lines, an ellipsis saying that
//! some were left out), one line cut with an ellipsis, a stack's frames elided in their middle. Widths
//! are counted in characters.

/// The width of text output that does not go to a terminal.
pub const WIDTH: usize = 110;

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// `text` on one line of at most `width` characters, ending in `…` when it was cut.
pub fn clip(text: &str, width: usize) -> String {
    if chars(text) <= width {
        return text.to_string();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

/// Folds `text` into lines of at most `width` characters: the first starts with `label`, the others are
/// indented to line up with it; a word longer than a line is cut across lines. With `max`, at most that
/// many lines, the last ending in `…` when text was left out. Text with no words is the label alone.
pub fn wrap(label: &str, text: &str, width: usize, max: Option<usize>) -> Vec<String> {
    let indent = " ".repeat(chars(label));
    let room = width.saturating_sub(chars(label)).max(8);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let used = chars(&line);
            if used > 0 && used + 1 + word.len() <= room {
                line.push(' ');
                line.extend(&word);
                break;
            }
            if used > 0 {
                lines.push(std::mem::take(&mut line));
            }
            if word.len() <= room {
                line.extend(&word);
                break;
            }
            lines.push(word.drain(..room).collect());
        }
    }
    // Text with no words is the label alone.
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    let cut = max.is_some_and(|m| lines.len() > m);
    if let Some(m) = max {
        lines.truncate(m.max(1));
    }
    let mut lines: Vec<String> = lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| format!("{}{l}", if i == 0 { label } else { &indent }))
        .collect();
    if cut {
        if let Some(last) = lines.last_mut() {
            *last = marked_cut(last, width);
        }
    }
    lines
}

/// `line` ending in ` …` (text was left out after it), within `width` characters.
pub fn marked_cut(line: &str, width: usize) -> String {
    let keep: String = line.chars().take(width.saturating_sub(2)).collect();
    format!("{} …", keep.trim_end())
}

/// Frames joined by ` > ` in at most `width` characters: all of them when they fit, else the first
/// (where the path starts), `…`, and as many of the last (where the time goes) as fit.
pub fn path(frames: &[&str], width: usize) -> String {
    let whole = frames.join(" > ");
    if chars(&whole) <= width || frames.len() < 2 {
        return clip(&whole, width);
    }
    let head = format!("{} > … > ", frames[0]);
    let mut tail: Vec<&str> = Vec::new();
    let mut used = chars(&head);
    for f in frames[1..].iter().rev() {
        let add = chars(f) + if tail.is_empty() { 0 } else { 3 };
        if used + add > width {
            break;
        }
        used += add;
        tail.push(f);
    }
    if tail.is_empty() {
        return clip(&format!("{head}{}", frames[frames.len() - 1]), width);
    }
    tail.reverse();
    format!("{head}{}", tail.join(" > "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_folds_under_the_label_and_marks_a_cut() {
        let text = "one two three four five six seven eight nine ten";
        assert_eq!(
            wrap("- ", text, 16, None),
            ["- one two three", "  four five six", "  seven eight", "  nine ten"]
        );
        assert_eq!(wrap("- ", text, 18, Some(2)), ["- one two three", "  four five six …"]);
        assert_eq!(wrap("- ", text, 16, Some(1)), ["- one two thre …"]);
        // A word longer than a line is cut across lines, never past the width.
        let long = wrap("x: ", &"a".repeat(25), 13, None);
        assert_eq!(long, ["x: aaaaaaaaaa", "   aaaaaaaaaa", "   aaaaa"]);
        assert!(long.iter().all(|l| l.chars().count() <= 13));
    }

    #[test]
    fn path_keeps_its_start_and_its_end() {
        let frames =
            ["main", "ngx_worker_process_cycle", "ngx_http_free_request", "ngx_http_log_handler", "write"];
        assert_eq!(path(&frames, 200), frames.join(" > "));
        let short = path(&frames, 50);
        assert_eq!(short, "main > … > ngx_http_log_handler > write");
        assert!(short.chars().count() <= 50);
        assert_eq!(path(&frames, 20), "main > … > write");
        assert_eq!(clip("abcdef", 4), "abc…");
    }
}
