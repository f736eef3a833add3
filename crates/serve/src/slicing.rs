//! The slicing options of `report` (crates/analyze's one [`Slice`]) as query parameters of the profile
//! endpoints: `comm=RE`, `module=RE`, `focus=RE`, `ignore=RE`, `no_kernel=1`. The threads (`pid=`,
//! `thread=`) are the endpoints' own thread filter. A bad value is one line for a 400.
//!
//! Must never build a regular expression without the analyze crate's size limits (a UI user's pattern).

use std::collections::BTreeMap;
use whyslow_analyze::slice::{pattern, Slice};

/// The query parameters read here.
pub(crate) const KEYS: [&str; 5] = ["comm", "module", "focus", "ignore", "no_kernel"];

/// The slice a query asks for (everything when it names none), or why the query is wrong.
pub(crate) fn of(q: &BTreeMap<String, String>) -> Result<Slice, String> {
    let re = |key: &'static str| {
        q.get(key).filter(|v| !v.is_empty()).map(|v| pattern(key, v).map_err(|e| e.to_string())).transpose()
    };
    let no_kernel = match q.get("no_kernel").map(String::as_str) {
        None | Some("" | "0" | "false") => false,
        Some("1" | "true") => true,
        Some(v) => return Err(format!("no_kernel '{v}' is not one of 1, true, 0, false")),
    };
    Ok(Slice {
        no_kernel,
        comm: re("comm")?,
        module: re("module")?,
        focus: re("focus")?,
        ignore: re("ignore")?,
        ..Slice::default()
    })
}

#[cfg(test)]
mod tests {
    use super::of;
    use std::collections::BTreeMap;

    fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn parameters_become_one_slice_and_bad_ones_one_line() {
        assert!(of(&q(&[])).unwrap().is_everything());
        assert!(of(&q(&[("focus", ""), ("no_kernel", "0")])).unwrap().is_everything());
        let s = of(&q(&[("focus", "^burn_(a|b)$"), ("no_kernel", "true")])).unwrap();
        assert!(s.no_kernel && s.focus.unwrap().is_match("burn_b"));
        let e = of(&q(&[("ignore", "burn_[")])).unwrap_err();
        assert!(e.starts_with("ignore: 'burn_[' is not a regular expression: "), "{e}");
        assert_eq!(e.lines().count(), 1);
        assert_eq!(
            of(&q(&[("no_kernel", "yes")])).unwrap_err(),
            "no_kernel 'yes' is not one of 1, true, 0, false"
        );
    }
}
