//! protobuf-reflection (seed 000): protobuf serialization running through the reflection paths
//! (messages generated with `optimize_for = CODE_SIZE`) instead of generated code.

use super::{cpu_share_rule, Text};
use crate::doctor::facts::{Facts, Func};
use crate::doctor::thresholds::PROTOBUF_REFLECTION_CPU_PCT;
use crate::doctor::Verdict;

const TEXT: Text = Text {
    id: "protobuf-reflection",
    title: "protobuf messages serialized through reflection (optimize_for = CODE_SIZE)",
    why: "with optimize_for = CODE_SIZE (or LITE without generated code) protoc emits no serializers: \
          every ByteSize/Serialize/Parse walks the descriptor with Reflection and WireFormat, several times \
          slower than the generated code",
    fix: "remove `option optimize_for = CODE_SIZE;` from the .proto (the default SPEED generates \
          serialization code), regenerate and rebuild",
    shrinks: "google::protobuf::Reflection / WireFormat / ReflectionOps",
};

fn is_reflection(f: &Func) -> bool {
    [
        "google::protobuf::Reflection::",
        "google::protobuf::internal::WireFormat::",
        "google::protobuf::internal::ReflectionOps::",
        "google::protobuf::internal::GeneratedMessageReflection",
        "google::protobuf::internal::ReflectionSchema",
    ]
    .iter()
    .any(|p| f.name.starts_with(p))
}

pub fn check(f: &Facts) -> Verdict {
    cpu_share_rule(f, &TEXT, PROTOBUF_REFLECTION_CPU_PCT, &is_reflection)
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;

    #[test]
    fn fires_on_wireformat_serialization() {
        let p = profile(&[
            ("main;encode;google::protobuf::MessageLite::SerializeToString(std::string*) const;google::protobuf::internal::WireFormat::_InternalSerialize(google::protobuf::Message const&, unsigned char*, google::protobuf::io::EpsCopyOutputStream*)", 40, 0),
            ("main;encode;google::protobuf::Reflection::GetString(google::protobuf::Message const&, google::protobuf::FieldDescriptor const*) const", 10, 0),
            ("main;work", 50, 0),
        ]);
        assert_eq!(fired(super::check, &p), Some(50.0));
        let generated = profile(&[("main;encode;demo::Item::_InternalSerialize(unsigned char*, google::protobuf::io::EpsCopyOutputStream*) const", 40, 0), ("main;work", 60, 0)]);
        assert_eq!(fired(super::check, &generated), None);
    }
}
