//! reflection-dispatch (seed 004): Go code dispatching through reflect.Value.Call or encoding through
//! reflection-based encoders (encoding/json, gob, xml) on the hot path.

use super::{cpu_share_rule, named, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::REFLECTION_CPU_PCT;
use crate::doctor::Verdict;

const TEXT: Text = Text {
    id: "reflection-dispatch",
    title: "Go reflection on the hot path (reflect.Value.Call, reflection-based encoding)",
    why: "reflect.Value.Call boxes every argument and result, allocates, and cannot be inlined; \
          encoding/json and friends walk types with reflection for every value",
    fix: "dispatch through an interface or a map of typed funcs instead of reflect.Value.Call; cache \
          per-type work; for JSON use generated (easyjson, ffjson) or hand-written marshalling on hot types",
    shrinks: "reflect.* and encoding/*",
};

fn is_reflection(f: &Func) -> bool {
    !f.kernel && named(f.name, &[], &["reflect.", "encoding/json.", "encoding/gob.", "encoding/xml."])
}

pub fn check(f: &Facts) -> Verdict {
    cpu_share_rule(f, &TEXT, REFLECTION_CPU_PCT, &is_reflection)
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;

    #[test]
    fn fires_on_reflect_call() {
        let p = profile(&[
            ("main.main;main.dispatch;reflect.Value.Call;reflect.Value.call", 30, 0),
            ("main.main;main.work", 70, 0),
        ]);
        assert_eq!(fired(super::check, &p), Some(30.0));
        assert_eq!(fired(super::check, &profile(&[("main.main;main.dispatch;main.handler", 30, 0)])), None);
    }
}
