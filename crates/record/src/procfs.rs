//! The one view of /proc that record and its users share: each file parsed in one place.

/// A /proc (or /sys) file with one value, trimmed; empty when it cannot be read.
pub(crate) fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}
