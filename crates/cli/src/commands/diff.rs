use super::*;
use crate::{DiffArgs, OutputFormat};
use whyslow_analyze::diff::Side;
use whyslow_render as render;

pub fn diff(a: DiffArgs) -> Result<()> {
    let vt = a.value_type.as_deref();
    let (before, after) = (sliced(load(&a.before, vt)?, &a.slice)?, sliced(load(&a.after, vt)?, &a.slice)?);
    let bv = value_index(&before, a.value_type.as_deref())?;
    let name = before.sample_types[bv].name.clone();
    let av = value_index(&after, Some(&name)).with_context(|| format!("{}", a.after.display()))?;
    let (b, af) = (Side::new(&before, bv), Side::new(&after, av));
    let d = whyslow_analyze::diff::diff(b, af, a.shares);
    let mut out = std::io::stdout().lock();
    match a.format {
        OutputFormat::Text => render::diff::report(&mut out, &d, a.limit)?,
        OutputFormat::Json => render::diff::json(&mut out, &d, a.limit)?,
    }
    out.flush()?;
    if let Some(path) = &a.flamegraph {
        let opts = render::diff::DiffFlameOptions {
            title: format!("whyslow diff ({name}): {} -> {}", a.before.display(), a.after.display()),
            negate: a.negate,
            shares_only: a.shares,
        };
        write_output(path, |w| Ok(render::diff::svg(w, b, af, &opts)?))?;
        eprintln!("whyslow: wrote {}", path.display());
    }
    Ok(())
}
