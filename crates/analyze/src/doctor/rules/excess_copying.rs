//! excess-copying (seed 002): memcpy/memmove and string copy/append take a large share of CPU.

use super::{cpu_share_rule, named, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::COPY_CPU_PCT;
use crate::doctor::Verdict;

const TEXT: Text = Text {
    id: "excess-copying",
    title: "copying bytes: memcpy/memmove and string copies",
    why: "data is copied more often than it is used: strings rebuilt by concatenation (`s = s + x`), \
          containers passed by value, or a buffer grown without reserve() re-copy everything each time",
    fix: "append in place (`s += x` / append) into a string reserve()d once, pass by const reference or \
          std::string_view, move instead of copy, and write directly into the output buffer",
    shrinks: "memcpy/memmove and std::string copy/append",
};

pub fn is_copy(f: &Func) -> bool {
    if f.kernel {
        return false;
    }
    let string_copy = f.name.contains("basic_string")
        && [
            "_M_append",
            "append(",
            "_M_replace",
            "_M_assign",
            "assign(",
            "_M_mutate",
            "operator+",
            "_M_construct",
            "basic_string(std::",
            "basic_string(char const",
        ]
        .iter()
        .any(|op| f.name.contains(op));
    string_copy
        || named(
            f.plain(),
            &[
                "memcpy",
                "memmove",
                "mempcpy",
                "runtime.memmove",
                "runtime.concatstrings",
                "runtime.slicebytetostring",
                "runtime.growslice",
            ],
            &["memmove_", "memcpy_", "mempcpy_"],
        )
}

pub fn check(f: &Facts) -> Verdict {
    cpu_share_rule(f, &TEXT, COPY_CPU_PCT, &is_copy)
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;

    #[test]
    fn counts_memmove_and_string_append() {
        let p = profile(&[
            ("main;render;lib:__memmove_avx_unaligned_erms", 20, 0),
            ("main;render;std::__cxx11::basic_string<char>::_M_append(char const*, unsigned long)", 10, 0),
            ("main;render", 70, 0),
        ]);
        assert_eq!(fired(super::check, &p), Some(30.0));
        assert_eq!(fired(super::check, &profile(&[("main;lib:memcpy", 5, 0), ("main;render", 95, 0)])), None);
    }
}
