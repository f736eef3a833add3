use super::*;
use crate::{ExportArgs, ExportFormat};
use whyslow_render as render;

pub fn export(a: ExportArgs) -> Result<()> {
    let p = sliced(load(&a.file, a.value_type.as_deref())?, &a.slice)?;
    let value = value_index(&p, a.value_type.as_deref())?;
    write_output(&a.output, |w| {
        match a.format {
            ExportFormat::Pprof => render::export::pprof(w, &p)?,
            ExportFormat::Folded => render::export::folded(w, &p, value)?,
            ExportFormat::Speedscope => render::export::speedscope(w, &p, value)?,
            ExportFormat::Callgrind => render::export::callgrind(w, &p, value)?,
        }
        Ok(())
    })?;
    if a.output != Path::new("-") {
        eprintln!("whyslow: wrote {}", a.output.display());
    }
    Ok(())
}
