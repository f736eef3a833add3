//! What users of other command-line tools expect: the top-level help (a golden file, re-blessed with
//! WHYSLOW_BLESS=1), shell completions, man pages, a version that names its revision.

mod common;
use common::*;

#[test]
fn top_level_help_is_as_blessed() {
    let help = ok(&["--help"]);
    let path = root().join("crates/cli/tests/golden/help.txt");
    if std::env::var_os("WHYSLOW_BLESS").is_some() {
        std::fs::write(&path, &help).unwrap();
    }
    let want = std::fs::read_to_string(&path).expect("golden help (WHYSLOW_BLESS=1 writes it)");
    assert_eq!(help, want, "whyslow --help changed: re-bless with WHYSLOW_BLESS=1 if that was meant");
    assert!(help.starts_with("Start here:\n  whyslow doctor"), "{help}");
    assert!(help.contains("Exit status:") && help.contains("--fail-on"), "{help}");
}

#[test]
fn completions_and_man_pages_cover_every_subcommand() {
    let subcommands = ["record", "report", "flamegraph", "doctor", "syscalls", "calls", "serve", "view"];
    for shell in ["bash", "zsh", "fish"] {
        let script = ok(&["completions", shell]);
        for sub in subcommands {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let dir = tmp();
    ok(&["man", dir.path().to_str().unwrap()]);
    for page in
        std::iter::once("whyslow".to_string()).chain(subcommands.iter().map(|s| format!("whyslow-{s}")))
    {
        let text = std::fs::read_to_string(dir.path().join(format!("{page}.1"))).unwrap();
        assert!(text.starts_with(".ie \\n(.g .ds Aq") && text.contains(&format!(".TH {page} 1")), "{page}");
    }
    let out = run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value 'tcsh'"));
}

/// Built from this git checkout, the version names the revision (`0.1.0 (abc123def456)`).
#[test]
fn version_names_the_revision() {
    let v = ok(&["--version"]);
    let rev = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(root())
        .output();
    match rev {
        Ok(o) if o.status.success() => {
            let rev = String::from_utf8(o.stdout).unwrap();
            assert!(v.starts_with("whyslow 0.") && v.contains(&format!("({}", rev.trim())), "{v}");
        }
        _ => assert!(v.starts_with("whyslow 0."), "{v}"),
    }
}

/// Errors that say what to do next: `report` with no recording here suggests recording one; an empty
/// calls pattern is no query.
#[test]
fn errors_say_what_to_do_next() {
    let dir = tmp();
    let out = whyslow().arg("report").current_dir(dir.path()).output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        err.trim_end(),
        "whyslow: error: no whyslow.data here: record one first (`whyslow record -- ./app`), or name a recording"
    );
    let err = fails(&["calls", "", "--", "true"]);
    assert!(err.contains("an empty pattern names no function"), "{err}");
}
