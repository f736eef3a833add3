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

/// Rust legacy names are Itanium-shaped but end in a `17h<16 hex>E` hash element.
fn is_rust_legacy(name: &str) -> bool {
    let base = name.split('.').next().unwrap_or(name);
    base.starts_with("_ZN")
        && base.len() > 20
        && base.ends_with('E')
        && base[base.len() - 20..].starts_with("17h")
        && base[base.len() - 17..base.len() - 1].bytes().all(|c| c.is_ascii_hexdigit())
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
    }
}
