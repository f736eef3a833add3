//! What users of other command-line tools expect: the help of every command (golden files, re-blessed with
//! WHYSLOW_BLESS=1), one flag convention with the old spellings still working, shell completions, man
//! pages, a version that names its revision.

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

/// Every subcommand's `--help`, as blessed: a changed option shows in review.
#[test]
fn every_subcommands_help_is_as_blessed() {
    let bless = std::env::var_os("WHYSLOW_BLESS").is_some();
    for sub in SUBCOMMANDS {
        let help = ok(&[sub, "--help"]);
        let path = root().join(format!("crates/cli/tests/golden/help-{sub}.txt"));
        if bless {
            std::fs::write(&path, &help).unwrap();
        }
        let want = std::fs::read_to_string(&path).expect("golden help (WHYSLOW_BLESS=1 writes it)");
        assert_eq!(
            help, want,
            "whyslow {sub} --help changed: re-bless with WHYSLOW_BLESS=1 if that was meant"
        );
    }
}

const SUBCOMMANDS: [&str; 15] = [
    "record",
    "report",
    "flamegraph",
    "export",
    "syscalls",
    "calls",
    "top",
    "doctor",
    "diff",
    "compare",
    "serve",
    "push",
    "view",
    "completions",
    "man",
];

/// One convention: `--format` explained and `--limit` with one default wherever there is a table, `-o`
/// the file the command writes, `--callers` only `report`'s FUNCTION, `help` a command like the others.
#[test]
fn flags_mean_one_thing_on_every_subcommand() {
    for sub in ["record", "report", "syscalls", "calls", "doctor", "diff", "compare"] {
        let help = ok(&[sub, "--help"]);
        assert!(help.contains("--limit <LIMIT>") && help.contains("[default: 25]"), "{sub}: {help}");
        if sub != "record" {
            assert!(help.contains("--format <FORMAT>\n          Output format"), "{sub}: {help}");
            assert!(
                help.contains("JSON document for programs: exact integers, each named with its unit"),
                "{sub}"
            );
        }
        assert!(!help.contains("--report <FILE>"), "{sub}: --print-to replaced it: {help}");
    }
    let export = ok(&["export", "--help"]);
    assert!(export.contains("File format to write") && export.contains("callgrind's format"), "{export}");
    for sub in ["diff", "compare", "calls"] {
        let help = ok(&[sub, "--help"]);
        assert!(!help.contains("-o, --output"), "{sub}: -o is the file a command writes: {help}");
    }
    assert!(!ok(&["calls", "--help"]).contains("--callers"));
    assert!(ok(&["report", "--help"]).contains("--callers <FUNCTION>"));
    let view = ok(&["view", "--help"]);
    assert!(
        view.contains("Port on 127.0.0.1 [default: a free one]") && !view.contains("[default: 0]"),
        "{view}"
    );
    // `help` is a command with its own help, and explains the others as their --help does.
    assert!(ok(&["help", "--help"]).contains("Usage: whyslow help [COMMAND]..."));
    assert_eq!(ok(&["help", "diff"]), ok(&["diff", "--help"]));
    assert_eq!(ok(&["help"]), ok(&["--help"]));
    let err = fails(&["help", "dif"]);
    assert!(err.contains("no command 'dif' (did you mean: diff"), "{err}");
}

/// Output of a run with its stderr, failing the test unless it succeeded.
fn ok_with_stderr(args: &[&str]) -> (String, String) {
    let out = run(args);
    let (stdout, stderr) = (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap());
    assert!(out.status.success(), "whyslow {args:?}: {stderr}");
    (stdout, stderr)
}

/// The spellings users already script keep working, each with one line saying what replaces it.
#[test]
fn old_spellings_still_work_and_say_what_replaces_them() {
    let dir = tmp();
    let d = dir.path();
    let path = |name: &str| d.join(name).to_str().unwrap().to_string();
    // diff -o SVG: now --flamegraph SVG.
    std::fs::write(d.join("before.folded"), "main;work 30\nmain;idle 10\n").unwrap();
    std::fs::write(d.join("after.folded"), "main;work 10\nmain;idle 10\n").unwrap();
    let (before, after) = (path("before.folded"), path("after.folded"));
    let (new_text, new_err) = ok_with_stderr(&["diff", &before, &after, "--flamegraph", &path("new.svg")]);
    let (old_text, old_err) = ok_with_stderr(&["diff", &before, &after, "-o", &path("old.svg")]);
    assert_eq!(old_text, new_text);
    assert!(!new_err.contains("deprecated"), "{new_err}");
    assert_eq!(
        old_err.lines().filter(|l| l.contains("deprecated")).collect::<Vec<_>>(),
        ["whyslow: warning: diff -o is deprecated, use --flamegraph"]
    );
    let svg = std::fs::read_to_string(path("old.svg")).unwrap();
    assert_eq!(svg, std::fs::read_to_string(path("new.svg")).unwrap());
    // --report FILE: now --print-to FILE; calls --callers and --callers-period: now --stacks and
    // --stacks-period (allocs 200 calls malloc 200 times).
    let allocs = workload("allocs");
    let allocs = allocs.to_str().unwrap();
    let report = path("calls.txt");
    let old =
        ["calls", "--report", &report, "--callers", "--callers-period", "3", "malloc", "--", allocs, "200"];
    let (_, err) = ok_with_stderr(&old);
    let warned: Vec<&str> = err.lines().filter(|l| l.contains("deprecated")).collect();
    assert_eq!(
        warned,
        [
            "whyslow: warning: --report is deprecated, use --print-to",
            "whyslow: warning: calls --callers is deprecated, use --stacks",
            "whyslow: warning: --callers-period is deprecated, use --stacks-period",
        ]
    );
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(text.contains("callers (user stacks of every 3th call"), "{text}");
    let printed = path("printed.txt");
    let (stdout, err) =
        ok_with_stderr(&["calls", "--print-to", &printed, "--stacks", "malloc", "--", allocs, "200"]);
    assert!(!err.contains("deprecated") && !stdout.contains("malloc"), "{err}");
    assert!(std::fs::read_to_string(&printed).unwrap().contains("callers (user stacks of every call"));
    // compare -o DIR: now --output-dir DIR.
    let work = format!("{} 10", workload("diffwork").display());
    let (_, err) =
        ok_with_stderr(&["compare", "-n", "2", "--before", &work, "--after", &work, "-o", &path("cmp")]);
    assert!(err.contains("whyslow: warning: compare -o is deprecated, use --output-dir"), "{err}");
    assert!(d.join("cmp/before.data").is_file() && d.join("cmp/after.data").is_file());
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
    assert!(!err.contains("abs"), "{err}");
    let err = fails(&["calls", "[", "--", "true"]);
    assert_eq!(
        err.trim_end(),
        "whyslow: error: '[' is not a valid glob: '[' opens a set of characters that no ']' closes \
         (write '[[]' for a literal '[')"
    );
}
