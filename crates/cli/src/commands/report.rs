use super::flamegraph::write_flamegraph;
use super::*;
use crate::{OutputFormat, ReportArgs};
use whyslow_render as render;

pub fn report(a: ReportArgs) -> Result<()> {
    let p = sliced(load(&a.file, a.value_type.as_deref())?, &a.slice)?;
    let value = value_index(&p, a.value_type.as_deref())?;
    let mut out = std::io::stdout().lock();
    let neighbors = match (&a.callees, &a.callers) {
        (Some(f), _) => Some((whyslow_analyze::callees(&p, value, f)?, false)),
        (_, Some(f)) => Some((whyslow_analyze::callers(&p, value, f)?, true)),
        _ => None,
    };
    match (neighbors, a.format) {
        (Some((n, callers)), OutputFormat::Text) => {
            let scale = render::units::Scale::of(&p.sample_types[value].unit);
            render::text::neighbors(&mut out, &n, callers, a.limit, scale)?
        }
        (Some((n, _)), OutputFormat::Json) => {
            serde_json::to_writer_pretty(&mut out, &n)?;
            writeln!(out)?;
        }
        (None, OutputFormat::Text) => {
            render::text::report(
                &mut out,
                &p,
                &render::text::ReportOptions { value, limit: a.limit, threads: a.threads },
            )?;
            if !p.syscalls.is_empty() {
                writeln!(out, "\n{}:", render::syscalls::title(&p.meta))?;
                render::syscalls::table(
                    &mut out,
                    &p,
                    &whyslow_analyze::syscall_summary(&p, a.threads),
                    a.limit,
                )?;
            }
        }
        (None, OutputFormat::Json) => render::json::report(&mut out, &p, value)?,
    }
    out.flush()?;
    if let Some(svg) = &a.flamegraph {
        write_flamegraph(&p, value, svg, None, false)?;
    }
    Ok(())
}
