//! unoptimized-build: hot code compiled without optimization, told by the compiler's own record of its
//! flags (DWARF `DW_AT_producer`, e.g. `GNU C17 12.2.0 -g` without `-O2`).

use super::{finding, Text};
use crate::doctor::facts::{pct, Facts, Match};
use crate::doctor::thresholds::UNOPTIMIZED_CPU_PCT;
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "unoptimized-build",
    title: "hot code was compiled without optimization",
    why: "at -O0 every variable lives in memory, nothing is inlined and loops are not vectorized: the same \
          code typically runs 2-5x slower than at -O2",
    fix: "build with optimization (-O2, or CMAKE_BUILD_TYPE=Release/RelWithDebInfo; keep -g for \
          profiling): check CFLAGS/CXXFLAGS and the build type of the binary you deploy",
    shrinks: "the CPU time of the whole module",
};

/// Whether a GCC producer string says the code was optimized (the last `-O` flag wins); None when the
/// string does not record flags (clang, rustc, the assembler).
pub fn optimized(producer: &str) -> Option<bool> {
    if !producer.starts_with("GNU ") || producer.starts_with("GNU AS") {
        return None;
    }
    let level = producer.split_whitespace().rev().find_map(|f| f.strip_prefix("-O"));
    Some(level.is_some_and(|l| l != "0"))
}

pub fn check(f: &Facts) -> Verdict {
    if !f.has_cpu() {
        return Verdict::NeedsData("CPU samples");
    }
    // Hot modules, and those of them whose compile flags are known: with none known the rule cannot tell
    // (imported profiles and binaries built without -g carry no producer records).
    let (mut hot, mut known) = (Vec::new(), 0);
    for (module, self_cpu) in f.module_self_cpu() {
        let share = pct(self_cpu, f.cpu_total);
        if share < UNOPTIMIZED_CPU_PCT {
            break;
        }
        hot.push(whyslow_model::basename(&module).to_string());
        let Some(m) = f.p.modules.iter().find(|m| m.path == module) else { continue };
        known += !m.producers.is_empty() as usize;
        let verdicts: Vec<(bool, &String)> =
            m.producers.iter().filter_map(|p| optimized(p).map(|o| (o, p))).collect();
        let Some((_, unopt)) = verdicts.iter().find(|v| !v.0) else { continue };
        if verdicts.iter().any(|v| v.0) && verdicts.iter().filter(|v| !v.0).count() * 2 < verdicts.len() {
            continue; // mostly optimized: a stray unoptimized unit is not the story
        }
        let evidence = vec![
            format!("{module} runs {share:.1}% of CPU time in its own code"),
            format!("its compile units were built by `{unopt}` (no -O flag, or -O0)"),
        ];
        let impact = Match { value: self_cpu, pct: share, ..Default::default() };
        return Verdict::Found(finding(f, &TEXT, &impact, "cpu", Confidence::High, evidence));
    }
    if !hot.is_empty() && known == 0 {
        // Say what is true: where the hot code is and that it records no flags; a program built with -g
        // whose time goes to libc is not "built without -g".
        let with: Vec<&str> =
            f.p.modules
                .iter()
                .filter(|m| !m.producers.is_empty())
                .map(|m| whyslow_model::basename(&m.path))
                .collect();
        let others = match with.len() {
            0 => String::new(),
            1 => format!(
                " ({} records them, but runs under {UNOPTIMIZED_CPU_PCT}% of CPU time itself)",
                with[0]
            ),
            _ => format!(
                " ({} record them, but each runs under {UNOPTIMIZED_CPU_PCT}% of CPU time itself)",
                with.join(", ")
            ),
        };
        let (list, record) = match hot.split_last() {
            Some((last, rest)) if !rest.is_empty() => (format!("{} and {last}", rest.join(", ")), "record"),
            _ => (hot.join(""), "records"),
        };
        return Verdict::Unchecked(format!(
            "the hot code is in {list}, which {record} no compile flags (no DWARF producer records: built \
             without -g, or its debug information is not installed){others}",
        ));
    }
    Verdict::Clear
}

#[cfg(test)]
mod tests {
    use super::optimized;
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;

    #[test]
    fn reads_gcc_flags() {
        assert_eq!(optimized("GNU C17 12.2.0 -mtune=generic -march=x86-64 -g -O2"), Some(true));
        assert_eq!(optimized("GNU C17 12.2.0 -mtune=generic -march=x86-64 -g"), Some(false));
        assert_eq!(optimized("GNU C++17 12.2.0 -g -O2 -O0"), Some(false));
        assert_eq!(optimized("GNU C11 12.2.0 -Os"), Some(true));
        assert_eq!(optimized("clang version 14.0.6"), None);
        assert_eq!(optimized("GNU AS 2.40"), None);
    }

    #[test]
    fn fires_on_a_hot_module_built_at_o0() {
        let mut p = profile(&[("main;work", 80, 0), ("main;lib:memcpy", 20, 0)]);
        let app = p.modules.iter().position(|m| m.path == "/app").unwrap();
        p.modules[app].producers = vec!["GNU C17 12.2.0 -mtune=generic -g".into()];
        assert_eq!(fired(super::check, &p), Some(80.0));
        p.modules[app].producers = vec!["GNU C17 12.2.0 -mtune=generic -g -O2".into()];
        assert_eq!(fired(super::check, &p), None);
        p.modules[app].producers.clear();
        assert_eq!(fired(super::check, &p), None, "no debug info: cannot tell");
        let why = match super::check(&crate::doctor::Facts::new(&p)) {
            crate::doctor::Verdict::Unchecked(why) => why,
            _ => panic!("says it could not check"),
        };
        assert!(
            why.starts_with("the hot code is in app and libc.so.6, which record no compile flags"),
            "{why}"
        );
        assert!(!why.contains(" records them"), "no module has flags: {why}");
        // The program has DWARF but its time is in libc: the report names libc, not the program.
        let mut p = profile(&[("main;lib:memcpy", 90, 0), ("main;work", 2, 0)]);
        let app = p.modules.iter().position(|m| m.path == "/app").unwrap();
        p.modules[app].producers = vec!["GNU C17 12.2.0 -g -O2".into()];
        let why = match super::check(&crate::doctor::Facts::new(&p)) {
            crate::doctor::Verdict::Unchecked(why) => why,
            _ => panic!("says it could not check"),
        };
        let lib =
            whyslow_model::basename(&p.modules.iter().find(|m| m.path != "/app").unwrap().path).to_string();
        assert!(
            why.starts_with(&format!("the hot code is in {lib}, which records no compile flags")),
            "{why}"
        );
        assert!(why.contains("(app records them, but runs under"), "{why}");
    }
}
