//! Field offsets of the tracepoints perf.data samples carry, from the event formats perf saved.

/// Offsets in sched:sched_switch's raw record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SwitchFields {
    pub(crate) prev_state: usize,
    pub(crate) next_pid: usize,
}

impl SwitchFields {
    /// From the event formats perf saved with the file (HEADER_TRACING_DATA); the layout every kernel
    /// since 2.6.32 has where the file has none.
    pub(crate) fn of(perf_file: &linux_perf_data::PerfFile) -> SwitchFields {
        let formats =
            perf_file.feature_section_data(linux_perf_data::Feature::TRACING_DATA).unwrap_or_default();
        let field = |name| tracepoint_field_offset(formats, "sched_switch", name);
        SwitchFields {
            prev_state: field("prev_state").unwrap_or(32),
            next_pid: field("next_pid").unwrap_or(56),
        }
    }
}

/// Offset of `field` in the raw record of tracepoint `event`, from format text as in tracefs
/// (`\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;`).
fn tracepoint_field_offset(formats: &[u8], event: &str, field: &str) -> Option<usize> {
    let marker = format!("name: {event}\n");
    let at = formats.windows(marker.len()).position(|w| w == marker.as_bytes())? + marker.len();
    let rest = &formats[at..];
    let end = rest.windows(10).position(|w| w == b"print fmt:").unwrap_or(rest.len());
    let text = String::from_utf8_lossy(&rest[..end]);
    text.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?;
        let (decl, rest) = decl.split_once(';')?;
        let name = decl.split_whitespace().last()?;
        let name = name.split('[').next()?;
        if name != field {
            return None;
        }
        rest.split(';').find_map(|kv| kv.trim().strip_prefix("offset:")).and_then(|o| o.trim().parse().ok())
    })
}
