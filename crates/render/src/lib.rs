//! Renderers: text tables, JSON, SVG flame graphs and export formats. Every renderer writes to an
//! `impl Write` it is given and never prints by itself.

pub mod export;
pub mod flamegraph;
pub mod json;
pub mod text;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("the recording has no samples of type '{0}'")]
    Empty(String),
}

use whyslow_model::Profile;

/// Percentage of `part` in `whole`, 0 when the whole is 0.
pub(crate) fn pct(part: i64, whole: i64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Frame names of a sample's stack, root first.
pub(crate) fn stack_names(p: &Profile, leaf: u32) -> Vec<&str> {
    p.stack_frames(leaf).into_iter().map(|f| p.frame_name(f)).collect()
}

/// Folded stacks (`root;...;leaf`) with their summed value, sorted, zero values left out.
pub(crate) fn folded_lines(p: &Profile, value: usize) -> Vec<(String, i64)> {
    let mut sums: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    for s in p.samples.iter().filter(|s| s.values[value] != 0) {
        // `;` separates frames in this format; keep names that contain it readable.
        let names: Vec<String> = stack_names(p, s.stack).iter().map(|n| n.replace(';', ":")).collect();
        *sums.entry(names.join(";")).or_default() += s.values[value];
    }
    let mut v: Vec<(String, i64)> = sums.into_iter().collect();
    v.sort();
    v
}

#[cfg(test)]
pub(crate) mod fixture {
    use whyslow_model::{FrameKind, Metadata, Profile, ProfileBuilder, SampleType, UnwindStats};

    /// A fixed profile: main -> run -> a/b/c (6/3/1 ms), an inlined helper, a kernel frame, two threads.
    pub fn profile() -> Profile {
        let meta = Metadata {
            tool_version: "0.1.0".into(),
            command: vec!["./app".into(), "3".into()],
            target_pids: vec![100],
            event: "cpu-clock".into(),
            frequency_hz: 999,
            start_unix_ns: 1_700_000_000_000_000_000,
            duration_ns: 3_000_000_000,
            lost_samples: 2,
            unwind: UnwindStats { complete: 99, partial: 1 },
            exit_code: Some(0),
            hostname: "host".into(),
            kernel_release: "6.1".into(),
            notes: vec!["example note".into()],
        };
        let types = vec![
            SampleType { name: "cpu".into(), unit: "samples".into() },
            SampleType { name: "cpu-ns".into(), unit: "nanoseconds".into() },
        ];
        let mut b = ProfileBuilder::new(meta, types);
        let app = b.module("/opt/app/app", "00ff");
        let k = b.module("[kernel.kallsyms]", "");
        let main = b.frame("main", app, "app.c", FrameKind::User);
        let run = b.frame("run", app, "app.c", FrameKind::User);
        let a = b.frame("burn_a", app, "app.c", FrameKind::User);
        let mix = b.frame("mix", app, "mix.h", FrameKind::Inlined);
        let bb = b.frame("burn_b", app, "app.c", FrameKind::User);
        let c = b.frame("burn_c", app, "app.c", FrameKind::User);
        let sys = b.frame("do_syscall_64", k, "", FrameKind::Kernel);
        let t1 = b.thread(100, 100, "app");
        let t2 = b.thread(100, 101, "worker");
        for (stack, thread, n) in [
            (vec![main, run, a], t1, 40),
            (vec![main, run, a, mix], t1, 20),
            (vec![main, run, bb], t2, 30),
            (vec![main, run, c, sys], t2, 10),
        ] {
            let s = b.stack(&stack);
            b.add_sample(s, thread, &[n, n * 1_001_001]);
        }
        b.finish()
    }

    pub fn check_golden(name: &str, actual: &[u8]) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
        if std::env::var_os("WHYSLOW_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, actual).unwrap();
            return;
        }
        let expected = std::fs::read(&path)
            .unwrap_or_else(|_| panic!("missing golden {path:?}; run with WHYSLOW_BLESS=1"));
        assert!(
            expected == actual,
            "{name} differs from its golden file (WHYSLOW_BLESS=1 to update):\n{}",
            String::from_utf8_lossy(actual)
        );
    }
}
