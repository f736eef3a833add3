use super::*;
use crate::FlamegraphArgs;
use whyslow_render as render;

pub fn flamegraph(a: FlamegraphArgs) -> Result<()> {
    let p = sliced(load(&a.file, a.value_type.as_deref())?, &a.slice)?;
    let value = value_index(&p, a.value_type.as_deref())?;
    write_flamegraph(&p, value, &a.output, a.title, a.reverse)
}

/// The SVG flame graph of sample type `value` (titled by the type and command unless `title` is given).
pub(super) fn write_flamegraph(
    p: &Profile,
    value: usize,
    path: &Path,
    title: Option<String>,
    reverse: bool,
) -> Result<()> {
    let title = title
        .unwrap_or_else(|| format!("whyslow {}: {}", p.sample_types[value].name, p.meta.command.join(" ")));
    let opts = render::flamegraph::FlameOptions { title, subtitle: None, reverse };
    write_output(path, |w| Ok(render::flamegraph::svg(w, p, value, &opts)?))?;
    eprintln!("whyslow: wrote {}", path.display());
    Ok(())
}
