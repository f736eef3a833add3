//! Retention of stored windows, and the periodic SVG and folded files of targets that ask for them (as
//! stackprobe writes them): under the output root only, named `NAME[-PID]-UNIXSECONDS.{svg,folded}`,
//! removed after the retention period like the windows.

use crate::shared::Shared;
use crate::spec::{relative_dir, TargetSpec};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;
use whyslow_model::unix_now_ns as now_ns;

/// Retention runs this often: a quarter of the retention period, from 1 to 30 seconds.
fn retention_every(retention: Duration) -> Duration {
    (retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(30))
}

pub fn run(s: std::sync::Arc<Shared>) {
    let mut next_retention = 0u64;
    // Per target: the end of the last period written.
    let mut written: HashMap<i64, u64> = HashMap::new();
    while !s.stopping() {
        let now = now_ns();
        if now >= next_retention {
            next_retention = now + retention_every(s.opts.retention).as_nanos() as u64;
            retain(&s, now);
            // Every window allocates in a burst (decoding, symbolizing, compressing) on other threads; the
            // freed chunks stay scattered through glibc's heaps, which grew the agent's resident memory
            // with process churn (58 -> 75 MB over 10 minutes). Give the free pages back.
            // SAFETY: malloc_trim takes no pointers and is thread-safe.
            unsafe { libc::malloc_trim(0) };
        }
        let targets: Vec<(i64, TargetSpec)> =
            s.targets.read().expect("targets lock").iter().map(|(&id, t)| (id, t.clone())).collect();
        written.retain(|id, _| targets.iter().any(|(t, _)| t == id));
        for (id, t) in targets {
            let Some(o) = &t.output else { continue };
            let period = o.period_s * 1_000_000_000;
            let since = *written.entry(id).or_insert(now);
            // A window is stored up to one window length after its end: wait for it.
            let lag = t.window_s * 1_000_000_000 + 2_000_000_000;
            if now >= since + period + lag {
                let until = since + period;
                if let Err(e) = write_files(&s, id, &t, since, until) {
                    eprintln!("whyslow serve: periodic files of target {id}: {e}");
                }
                written.insert(id, until);
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn retain(s: &Shared, now: u64) {
    let cutoff = now.saturating_sub(s.opts.retention.as_nanos() as u64);
    let r = s.store.lock().expect("store lock").retain(cutoff);
    match r {
        Ok(n) => {
            s.counters.windows_removed.fetch_add(n, Ordering::Relaxed);
        }
        Err(e) => eprintln!("whyslow serve: retention: {e}"),
    }
    // Periodic files age out with the windows.
    let Ok(root) = s.opts.output_root.canonicalize() else { return };
    for dir in walk_dirs(&root) {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let ours = matches!(p.extension().and_then(|x| x.to_str()), Some("svg" | "folded"));
            let secs = p.file_stem().and_then(|n| n.to_str()?.rsplit('-').next()?.parse::<u64>().ok());
            if ours && secs.is_some_and(|t| t * 1_000_000_000 < cutoff) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

fn walk_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() && out.len() < 10_000 {
        if let Ok(entries) = std::fs::read_dir(&out[i]) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

/// The directory of a target's files, created, and checked to be inside the output root after symlinks.
pub fn output_dir(root: &Path, dir: &str) -> Result<PathBuf, String> {
    let rel = relative_dir(dir).map_err(|e| e.to_string())?;
    let root = root.canonicalize().map_err(|e| format!("output root {}: {e}", root.display()))?;
    let path = root.join(rel);
    std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let real = path.canonicalize().map_err(|e| format!("{}: {e}", path.display()))?;
    if !real.starts_with(&root) {
        return Err(format!("{} leads outside the output root {}", path.display(), root.display()));
    }
    Ok(real)
}

fn write_files(s: &Shared, id: i64, t: &TargetSpec, from: u64, until: u64) -> Result<(), String> {
    let o = t.output.as_ref().expect("targets with output only");
    let dir = output_dir(&s.opts.output_root, &o.dir)?;
    let rows = s.store.lock().expect("store lock").windows(&[id], from, until).map_err(|e| e.to_string())?;
    // Windows that began in the period (each is in exactly one period's files).
    let rows: Vec<_> = rows.into_iter().filter(|w| w.start_ns >= from && w.start_ns < until).collect();
    let mut groups: BTreeMap<Option<u32>, Vec<i64>> = BTreeMap::new();
    for w in &rows {
        groups.entry(o.multi_instance.then_some(w.pid)).or_default().push(w.id);
    }
    let name = t.display_name(id);
    for (pid, ids) in groups {
        let p = crate::shared::merged(s, &ids).map_err(|e| e.to_string())?;
        let stem = match pid {
            Some(pid) => format!("{name}-{pid}-{}", until / 1_000_000_000),
            None => format!("{name}-{}", until / 1_000_000_000),
        };
        let title =
            format!("{name}{}: {} s", pid.map(|p| format!(" pid {p}")).unwrap_or_default(), o.period_s);
        let mut svg = Vec::new();
        let opts = whyslow_render::flamegraph::FlameOptions { title, subtitle: None, reverse: false };
        if whyslow_render::flamegraph::svg(&mut svg, &p, 0, &opts).is_err() {
            continue; // no samples in the period: no file
        }
        let mut folded = Vec::new();
        whyslow_render::export::folded(&mut folded, &p, 0).map_err(|e| e.to_string())?;
        for (ext, bytes) in [("svg", svg), ("folded", folded)] {
            let path = dir.join(format!("{stem}.{ext}"));
            whyslow_model::file::write_atomic(&path, &bytes).map_err(|e| e.to_string())?;
            s.counters.files_written.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}
