//! Demangling of C++ (Itanium) and Rust (legacy and v0) symbol names; anything else is returned as is,
//! so plain C and Go names are never mistaken for mangled ones.

/// Demangled form of a symbol name. Rust names lose their hash suffix.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_R") || is_rust_legacy(name) {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return format!("{d:#}");
        }
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = sym.demangle() {
                return d;
            }
        }
    }
    name.to_string()
}

/// Rust legacy names are Itanium-shaped but end in a `17h<16 hex>E` hash element (maybe followed by a
/// `.llvm.N`-style suffix; the path itself may contain `..`).
fn is_rust_legacy(name: &str) -> bool {
    if !name.starts_with("_ZN") {
        return false;
    }
    let b = name.as_bytes();
    (0..b.len().saturating_sub(19)).any(|i| {
        &b[i..i + 3] == b"17h"
            && b[i + 3..i + 19].iter().all(u8::is_ascii_hexdigit)
            && b[i + 19] == b'E'
            && (i + 20 == b.len() || b[i + 20] == b'.')
    })
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn demangles_each_language_and_leaves_plain_names() {
        assert_eq!(demangle("a"), "a");
        assert_eq!(demangle("main.main"), "main.main");
        assert_eq!(demangle("burn_a"), "burn_a");
        assert_eq!(demangle("_ZN4work8hot_loopEi"), "work::hot_loop(int)");
        assert_eq!(demangle("_ZN8rustwork4work9burn_rust17h0123456789abcdefE"), "rustwork::work::burn_rust");
        assert_eq!(demangle("_RNvNtCs1234_8rustwork4work9burn_rust"), "rustwork::work::burn_rust");
        assert_eq!(demangle("_ZN4core4iter5range101_$LT$impl$u20$core..iter..traits..iterator..Iterator$u20$for$u20$core..ops..range..Range$LT$A$GT$$GT$4next17h1d5f216feff501d1E"),
            "core::iter::range::<impl core::iter::traits::iterator::Iterator for core::ops::range::Range<A>>::next");
    }
}
