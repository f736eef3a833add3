//! The web UI in a real browser: tests/ui/test_view.py drives apt's Chromium through Playwright (from
//! scripts/deps.sh's .venv-ui) against `whyslow view` of cpu_split, threads, diffwork and doctor_tzlog
//! recordings (flame graph, keyboard, timeline selection, thread filter, table, sandwich, doctor, diffs)
//! and against `whyslow serve` (the live processes view). Screenshots of each view land in the cargo
//! target's tmp dir (ui-test/).

mod common;
use common::{root, workload};

#[test]
fn view_shows_flamegraph_search_zoom_table_in_chromium() {
    let bins = workload("cpu_split").parent().unwrap().to_path_buf();
    let python = root().join(".venv-ui/bin/python");
    assert!(
        python.exists() && std::path::Path::new("/usr/bin/chromium").exists(),
        "the browser tests need .venv-ui (playwright) and /usr/bin/chromium: run scripts/deps.sh (make test does)"
    );
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-test");
    let st = std::process::Command::new(python)
        .arg(root().join("tests/ui/test_view.py"))
        .arg(env!("CARGO_BIN_EXE_whyslow"))
        .arg(&bins)
        .arg(&out)
        .env_remove("LD_LIBRARY_PATH")
        .status()
        .expect("run tests/ui/test_view.py");
    assert!(st.success(), "tests/ui/test_view.py failed (screenshots in {})", out.display());
}
