//! Reading what report, flamegraph, export, diff and doctor take: a recording or an imported profile,
//! and the sample type to weigh it by.

use anyhow::{bail, Context, Result};
use std::path::Path;
use whyslow_model::Profile;

/// Reads a whyslow recording, pprof (file or http(s):// URL), folded stacks or `perf script` output;
/// `value_type` names the one type of folded stacks (they carry no name of their own).
pub fn load(source: &Path, value_type: Option<&str>) -> Result<Profile> {
    if source == Path::new(DEFAULT_RECORDING) && !source.exists() {
        bail!(
            "no {DEFAULT_RECORDING} here: record one first (`whyslow record -- ./app`), or name a recording"
        );
    }
    let opts =
        whyslow_import::ImportOptions { folded_type: value_type.map(str::to_string), ..Default::default() };
    Ok(whyslow_import::load(&source.to_string_lossy(), &opts)?)
}

/// The recording record and doctor write, and report, flamegraph and export read, when none is named.
const DEFAULT_RECORDING: &str = "whyslow.data";

/// The sample type asked for; without one, the recording's default ([`Profile::default_type`]).
pub fn value_index(p: &Profile, name: Option<&str>) -> Result<usize> {
    let name = match (name, p.default_type()) {
        (Some(n), _) => n,
        (None, Some(i)) => return Ok(i),
        (None, None) => whyslow_model::sample_types::CPU,
    };
    p.sample_type(name).with_context(|| {
        let have: Vec<&str> = p.sample_types.iter().map(|t| t.name.as_str()).collect();
        format!("this recording has no '{name}' samples (it has: {})", have.join(", "))
    })
}
