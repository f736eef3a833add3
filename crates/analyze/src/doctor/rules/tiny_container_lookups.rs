//! tiny-container-lookups (seed 003): tree/hash map lookups (std::map, std::unordered_map, JsonCpp's
//! map-backed values) dominating on small data sets, where a flat array or a switch would be far cheaper.

use super::{named, share_rule, Share, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::CONTAINER_CPU_PCT;
use crate::doctor::{Confidence, Verdict};

const TEXT: Text = Text {
    id: "tiny-container-lookups",
    title: "map lookups dominate (tree or hash maps on small key sets)",
    why: "each lookup in a std::map walks pointer-linked nodes and compares whole keys (strings: a \
          memcmp each); a hash map hashes the key first; for a handful of keys looked up per request that \
          costs more than the work the values are for",
    fix: "for small fixed key sets use a sorted std::array/vector with linear or binary search, a switch on \
          the key, or precomputed indices; look a key up once and keep the iterator; in JsonCpp avoid \
          repeated operator[] on the same object",
    shrinks: "std::_Rb_tree / std::_Hashtable / Json::Value lookups",
};

fn is_lookup(f: &Func) -> bool {
    if f.kernel {
        return false;
    }
    let map_op = (f.name.starts_with("std::map<") || f.name.starts_with("std::unordered_map<"))
        && ["::find(", "::operator[]", "::at(", "::count(", "::lower_bound("]
            .iter()
            .any(|op| f.name.contains(op));
    map_op
        || named(
            f.name,
            &[
                "std::_Rb_tree_increment(std::_Rb_tree_node_base const*)",
                "std::_Rb_tree_increment(std::_Rb_tree_node_base*)",
            ],
            &[
                "std::_Rb_tree<",
                "std::_Hashtable<",
                "std::__detail::_Map_base<",
                "Json::Value::operator[]",
                "Json::Value::find(",
                "Json::Value::get(",
                "Json::Value::isMember(",
            ],
        )
}

pub fn check(f: &Facts) -> Verdict {
    let unsized_ = |_: &Facts| {
        vec!["the containers' sizes are not measured: check that they are small before flattening them"
            .to_string()]
    };
    share_rule(
        f,
        &TEXT,
        Share {
            confidence: Confidence::Medium,
            extra: &unsized_,
            ..Share::cpu(&is_lookup, CONTAINER_CPU_PCT)
        },
    )
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;

    #[test]
    fn fires_on_rb_tree_lookups() {
        let p = profile(&[
            ("main;handle;std::_Rb_tree<std::string, std::pair<std::string const, std::string> >::find(std::string const&);lib:memcmp", 25, 0),
            ("main;handle;std::map<std::string, int>::operator[](std::string const&)", 5, 0),
            ("main;work", 70, 0),
        ]);
        assert_eq!(fired(super::check, &p), Some(30.0));
        assert_eq!(fired(super::check, &profile(&[("main;handle;lookup_flat", 30, 0)])), None);
    }
}
