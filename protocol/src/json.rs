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
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        return Err(BodyError::Malformed(e.to_string()));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        BodyError::invalid(field_name(&path, &message), strip_position(&message))
    })
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
