//! Command lines given as one string (`--load 'wrk -t2 http://...'`), split like a shell splits words
//! (quotes and backslashes) but never interpreted: no pipes, redirections, variables or globs;
//! `sh -c '...'` is there for those.

/// Splits a command line into words like a POSIX shell: blanks separate words, single quotes keep
/// everything, double quotes keep everything but `\"`, `\\`, `\$` and `` \` ``, a backslash outside
/// quotes keeps the next character. Shell syntax that would need a shell is an error.
pub fn split_command(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(format!("unterminated ' in: {line}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(format!("unterminated \" in: {line}")),
                        },
                        Some(c @ ('$' | '`')) => {
                            return Err(format!(
                                "'{c}' needs a shell: wrap the command in sh -c '...': {line}"
                            ))
                        }
                        Some(c) => word.push(c),
                        None => return Err(format!("unterminated \" in: {line}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err(format!("trailing backslash in: {line}")),
                }
            }
            '|' | '&' | ';' | '<' | '>' | '(' | ')' | '$' | '`' => {
                return Err(format!("'{c}' needs a shell: wrap the command in sh -c '...': {line}"))
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err("empty command".into());
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::split_command;

    #[test]
    fn splits_like_a_shell() {
        let w = |s: &str| split_command(s).unwrap();
        assert_eq!(
            w("wrk -t2  -c32 http://127.0.0.1:8080/"),
            ["wrk", "-t2", "-c32", "http://127.0.0.1:8080/"]
        );
        assert_eq!(w(r#"prog 'a b' "c \"d\" \n" e\ f ''"#), ["prog", "a b", "c \"d\" \\n", "e f", ""]);
        assert_eq!(w("sh -c 'a | b > c'"), ["sh", "-c", "a | b > c"]);
        for bad in ["a | b", "a > out", "echo $HOME", "a; b", "'open", "\"open", "x\\", "", "   "] {
            assert!(split_command(bad).is_err(), "{bad:?}");
        }
        assert!(split_command("a | b").unwrap_err().contains("sh -c"));
    }
}
