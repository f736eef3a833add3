//! `whyslow view`: the web UI over recordings instead of recorded targets. Each file becomes a stopped
//! target holding one window (its whole profile) in a temporary store; nothing is recorded.

use crate::spec::{Match, ProcessView, State, TargetSpec};
use crate::store::Store;
use crate::{run_with, ServeError, ServeOptions};
use std::net::SocketAddr;
use std::path::Path;
use whyslow_model::Profile;

/// One recording to show: its name (the file) and its profile.
pub struct ViewFile {
    pub name: String,
    pub profile: Profile,
}

/// Serves the UI over `files` on `listen` until SIGINT/SIGTERM; `on_listen` is told the address. The
/// temporary store is removed at the end.
pub fn view(
    files: Vec<ViewFile>,
    listen: SocketAddr,
    on_listen: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let dir = std::env::temp_dir().join(format!("whyslow-view-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|source| ServeError::Dir { path: dir.clone(), source })?;
    let result = fill(&dir, files).and_then(|()| {
        let opts = ServeOptions::local(listen, dir.clone());
        run_with(opts, false, on_listen)
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn fill(dir: &Path, files: Vec<ViewFile>) -> Result<(), ServeError> {
    let mut store = Store::open(dir)?;
    for (i, mut f) in files.into_iter().enumerate() {
        let spec = TargetSpec {
            name: Some(f.name.clone()),
            matcher: Match { cmdline: Some(f.name.clone()), ..Default::default() },
            sources: vec![crate::spec::SourceKind::Cpu],
            frequency: 99,
            window_s: 10,
            labels: Default::default(),
            output: None,
            state: State::Stopped,
        };
        let id = store.add_target(&spec, whyslow_model::unix_now_ns())?;
        // Imported profiles may carry no times: the window still needs a span the API can query.
        if f.profile.meta.start_unix_ns == 0 {
            f.profile.meta.start_unix_ns = 1_000_000_000 * (1 + i as u64);
        }
        if f.profile.meta.duration_ns == 0 {
            f.profile.meta.duration_ns = 1_000_000_000;
        }
        let pid = f.profile.meta.target_pids.first().copied().unwrap_or(0);
        let process = ProcessView {
            pid,
            ppid: 0,
            comm: f.name.clone(),
            cmdline: f.profile.meta.command.join(" "),
            cgroup: String::new(),
            start_ticks: 0,
        };
        store.add_windows(&[(&[id], &process, &f.profile)])?;
    }
    Ok(())
}
