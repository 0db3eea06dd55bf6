//! Reading a request body as API.md judges it: bad syntax is
//! `malformed_json`; a wrong shape is `validation_failed` naming the field
//! (`set.notes`), and so is a string holding U+0000.
//!
//! Both sides use it: the server for every body, the desk to read back the
//! requests it queued.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::problem::{FieldError, Problem, ProblemCode};

/// Why a body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Not JSON at all (`malformed_json`).
    #[error("body is not JSON: {0}")]
    Malformed(String),
    /// JSON of the wrong shape or value (`validation_failed`).
    #[error("{}: {}", .0.field, .0.message)]
    Invalid(FieldError),
}

impl BodyError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        BodyError::Invalid(FieldError {
            field: field.into(),
            message: message.into(),
        })
    }

    /// The API.md problem this refusal answers with.
    pub fn to_problem(&self) -> Problem {
        match self {
            BodyError::Malformed(why) => Problem::new(
                ProblemCode::MalformedJson,
                format!("body is not JSON: {why}"),
            ),
            BodyError::Invalid(error) => Problem::new(
                ProblemCode::ValidationFailed,
                format!("{}: {}", error.field, error.message),
            )
            .with("errors", [error]),
        }
    }
}

/// Parses JSON into `T`, refusing U+0000 anywhere (see [`reject_nul`]).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyError> {
    let value = parse_keeping_nul::<Value>(bytes)?;
    reject_nul(&value)?;
    parse_keeping_nul(bytes)
}

/// [`parse`] without the U+0000 check, for a body whose parts are judged one
/// by one (batch push: each item gets its own answer).
pub fn parse_keeping_nul<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyError> {
    if let Err(e) = serde_json::from_slice::<UniqueMembers>(bytes) {
        return Err(BodyError::Malformed(e.to_string()));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        BodyError::invalid(field_name(&path, &message), strip_position(&message))
    })
}

/// Syntax check that also refuses an object naming a member twice
/// (`{"qty": 1, "qty": 1000}`). RFC 8259 leaves such objects' meaning open
/// and parsers disagree (serde_json keeps the last, others the first or
/// fail), so a proxy, a partner and this server could each read a different
/// request; and once parsed into a `Value` the duplicate is gone, so the
/// idempotency fingerprint could not tell the two readings apart. Refused
/// as `malformed_json`, at any depth, before anything else reads the body.
struct UniqueMembers;

impl<'de> serde::Deserialize<'de> for UniqueMembers {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueMembersVisitor)
    }
}

struct UniqueMembersVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueMembersVisitor {
    type Value = UniqueMembers;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }
    fn visit_i64<E>(self, _: i64) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }
    fn visit_u64<E>(self, _: u64) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }
    fn visit_f64<E>(self, _: f64) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }
    fn visit_str<E>(self, _: &str) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }
    fn visit_unit<E>(self) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> Result<UniqueMembers, A::Error> {
        while seq.next_element::<UniqueMembers>()?.is_some() {}
        Ok(UniqueMembers)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<UniqueMembers, A::Error> {
        let mut seen = std::collections::HashSet::new();
        // Keys as owned strings: a key with an escape (`"q\u0074y"`) is not
        // borrowable from the input, and is the same name as `"qty"`.
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "the member \"{}\" appears twice in one object",
                    key.escape_debug()
                )));
            }
            seen.insert(key);
            map.next_value::<UniqueMembers>()?;
        }
        Ok(UniqueMembers)
    }
}

/// An already parsed body as `T`, with the same field naming as [`parse`].
/// It goes through bytes so that serde's messages (and so the fields named)
/// are the ones a body read from the wire gets.
pub fn typed<T: DeserializeOwned>(body: &Value) -> Result<T, BodyError> {
    let bytes = serde_json::to_vec(body).map_err(|e| BodyError::Malformed(e.to_string()))?;
    parse_keeping_nul(&bytes)
}

/// Postgres text and jsonb cannot hold U+0000, so a string (or member name)
/// carrying one could never be stored or even looked up: it is refused as
/// `validation_failed` naming the field, never left to fail in the database.
pub fn reject_nul(value: &Value) -> Result<(), BodyError> {
    match nul_field(value, "") {
        Some(field) => Err(BodyError::invalid(
            field,
            "must not contain the NUL character (\\u0000)",
        )),
        None => Ok(()),
    }
}

fn nul_field(value: &Value, at: &str) -> Option<String> {
    let here = || {
        if at.is_empty() {
            "body".to_owned()
        } else {
            at.to_owned()
        }
    };
    match value {
        Value::String(s) if s.contains('\0') => Some(here()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| nul_field(v, &format!("{}[{i}]", here()))),
        Value::Object(members) => members.iter().find_map(|(k, v)| {
            let field = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            if k.contains('\0') {
                Some(field)
            } else {
                nul_field(v, &field)
            }
        }),
        _ => None,
    }
}

/// The path names an unknown field itself, but stops at the object that
/// lacks a missing one; serde names that field only in its message.
fn field_name(path: &str, message: &str) -> String {
    let parent = if path == "." { "" } else { path };
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    match missing {
        Some(name) if parent.is_empty() => name.to_owned(),
        Some(name) => format!("{parent}.{name}"),
        None if parent.is_empty() => "body".to_owned(),
        None => parent.to_owned(),
    }
}

fn strip_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PatchOrder;

    fn field_of(err: BodyError) -> String {
        match err {
            BodyError::Invalid(e) => e.field,
            other => panic!("expected validation_failed, got {other:?}"),
        }
    }

    /// Before: serde_json kept the last `qty` and the request ran as 1000.
    #[test]
    fn a_member_named_twice_is_malformed_at_any_depth() {
        for body in [
            &br#"{"qty": 1, "qty": 1000}"#[..],
            br#"{"base_version": 1, "set": {"notes": "a", "notes": "b"}}"#,
            br#"{"mutations": [{"body": {"qty": 1, "q\u0074y": 2}}]}"#,
            br#"[{"a": {"b": [{"c": 1, "c": 1}]}}]"#,
        ] {
            let err = parse::<Value>(body).expect_err("duplicate");
            assert!(
                matches!(&err, BodyError::Malformed(why) if why.contains("appears twice")),
                "{}: {err:?}",
                String::from_utf8_lossy(body)
            );
            assert_eq!(err.to_problem().code, ProblemCode::MalformedJson);
            assert!(parse_keeping_nul::<Value>(body).is_err());
        }
        // The same name in sibling objects is two members, not a duplicate.
        parse::<Value>(br#"[{"qty": 1}, {"qty": 2, "x": {"qty": 3}}]"#).expect("distinct objects");
    }

    #[test]
    fn names_nested_unknown_fields() {
        let err = parse::<PatchOrder>(br#"{"base_version": 1, "set": {"notez": "x"}}"#)
            .expect_err("unknown");
        assert_eq!(field_of(err), "set.notez");
    }

    #[test]
    fn names_wrong_types_and_missing_fields() {
        let err = parse::<PatchOrder>(br#"{"base_version": "one", "set": {}}"#).expect_err("type");
        assert_eq!(field_of(err), "base_version");
        let err = parse::<PatchOrder>(br#"{"set": {}}"#).expect_err("missing");
        assert_eq!(field_of(err), "base_version");
        let err = typed::<PatchOrder>(&serde_json::json!({"set": {}})).expect_err("missing");
        assert_eq!(field_of(err), "base_version");
    }

    #[test]
    fn names_the_field_holding_a_nul() {
        let err = parse::<PatchOrder>(br#"{"base_version": 1, "set": {"notes": "a\u0000b"}}"#)
            .expect_err("nul");
        assert_eq!(field_of(err), "set.notes");
        let err = reject_nul(&serde_json::json!({"a": [1, "x\u{0}"]})).expect_err("nul");
        assert_eq!(field_of(err), "a[1]");
        let err = reject_nul(&serde_json::json!({"k\u{0}": 1})).expect_err("nul");
        assert_eq!(field_of(err), "k\u{0}");
        // An escaped backslash followed by `u0000` is text, not a NUL.
        parse::<PatchOrder>(br#"{"base_version": 1, "set": {"notes": "\\u0000"}}"#)
            .expect("no nul");
    }

    #[test]
    fn tells_malformed_from_invalid() {
        let err = parse::<PatchOrder>(b"{not json").expect_err("syntax");
        assert!(matches!(err, BodyError::Malformed(_)), "{err:?}");
    }
}
