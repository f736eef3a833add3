//! One test per Go toolchain (and per link mode of the installed one): build tests/data/prog, strip
//! it, and check the stripped build's table against the unstripped build's `.symtab` and DWARF
//! (see common/mod.rs). The installed Go is required; another toolchain that is absent is skipped with
//! the reason printed.

mod common;

use common::{check_build, without_moduledata, Toolchain};
use whyslow_gopclntab::GoTable;

fn skip(label: &str, why: &str) {
    eprintln!("SKIPPED {label}: {why}");
}

#[test]
fn installed_go() {
    let go = Toolchain::installed();
    check_build(&go.build("default", &[], false));
}

#[test]
fn installed_go_pie() {
    let go = Toolchain::installed();
    check_build(&go.build("pie", &["-buildmode=pie"], false));
}

#[test]
fn installed_go_external_linker() {
    if std::process::Command::new("gcc").arg("--version").output().is_err() {
        return skip("external linking", "no gcc");
    }
    let go = Toolchain::installed();
    check_build(&go.build("external", &["-ldflags=-linkmode=external"], true));
}

#[test]
fn debian_go_1_19() {
    match Toolchain::at("go1.19", "/usr/lib/go-1.19/bin/go") {
        Ok(go) => {
            let (table, stripped) = check_build(&go.build("default", &[], false));
            assert_eq!(table.go_version_hint(), "1.18-1.19");
            // Without the moduledata (which only locates the inline trees before Go 1.26), names and
            // lines still work and inlined frames are simply absent.
            let flat = GoTable::from_elf(&without_moduledata(&stripped)).unwrap().unwrap();
            assert!(!flat.has_inline_tree());
            assert!(flat.functions().eq(table.functions()));
            for f in table.functions() {
                let (full, one) = (table.frames(f.entry).unwrap(), flat.frames(f.entry).unwrap());
                assert_eq!(one.len(), 1);
                assert_eq!(
                    (&one[0].name, &one[0].file, one[0].line),
                    (&full[0].name, &full.last().unwrap().file, full.last().unwrap().line)
                );
            }
        }
        Err(why) => skip("Go 1.19 (apt-get install golang-1.19-go)", &why),
    }
}

fn downloaded(version: &str) {
    match Toolchain::downloaded(version) {
        Ok(go) => {
            let (table, _) = check_build(&go.build("default", &[], false));
            assert_eq!(table.go_version_hint(), "1.20+");
        }
        Err(why) => skip(version, &why),
    }
}

#[test]
fn go_1_24() {
    downloaded("go1.24.0");
}

#[test]
fn go_1_22() {
    downloaded("go1.22.12");
}

#[test]
fn go_1_21() {
    downloaded("go1.21.13");
}
