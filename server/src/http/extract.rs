//! Extractors that reject with API.md problems: JSON bodies (415, 413, 400
//! malformed_json / validation_failed naming the field), paths, queries, and
//! the caller behind a bearer token.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::request::Parts;
use holdfast_protocol::model::Role;
use holdfast_protocol::problem::ProblemCode;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::error::ApiError;
use crate::AppState;

/// A JSON body that must be `application/json`, within the body limit, and
/// exactly of shape `T` (unknown fields rejected by `T` itself).
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        require_json_content_type(req.headers())?;
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(body_rejection)?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// The raw body, with the body limit answered as a 413 problem.
pub struct ApiBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Bytes::from_request(req, state)
            .await
            .map(ApiBytes)
            .map_err(body_rejection)
    }
}

pub fn require_json_content_type(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let ok = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| {
            let mime = mime.trim().to_ascii_lowercase();
            mime == "application/json"
                || (mime.starts_with("application/") && mime.ends_with("+json"))
        });
    if ok {
        Ok(())
    } else {
        Err(ApiError::problem(
            ProblemCode::UnsupportedMediaType,
            "send the body as Content-Type: application/json",
        ))
    }
}

pub fn body_rejection(rejection: BytesRejection) -> ApiError {
    if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::problem(
            ProblemCode::PayloadTooLarge,
            format!(
                "request bodies are limited to {} bytes",
                super::MAX_BODY_BYTES
            ),
        )
    } else {
        ApiError::problem(
            ProblemCode::MalformedJson,
            format!("could not read the body: {rejection}"),
        )
    }
}

/// Parses JSON into `T`: bad syntax is `malformed_json`; a wrong shape is
/// `validation_failed` with the offending field's path (`set.notes`), and so
/// is a string holding U+0000 (see [`reject_nul`]).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value = parse_json_keeping_nul::<serde_json::Value>(bytes)?;
    reject_nul(&value)?;
    parse_json_keeping_nul(bytes)
}

/// [`parse_json`] without the U+0000 check, for a body whose parts are
/// judged one by one (batch push: each item gets its own answer).
pub fn parse_json_keeping_nul<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        return Err(ApiError::problem(
            ProblemCode::MalformedJson,
            format!("body is not JSON: {e}"),
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        ApiError::validation(field_name(&path, &message), strip_position(&message))
    })
}

/// Postgres text and jsonb cannot hold U+0000, so a string (or member name)
/// carrying one could never be stored or even looked up: it is refused as
/// `validation_failed` naming the field, never left to fail in the database.
pub fn reject_nul(value: &serde_json::Value) -> Result<(), ApiError> {
    match nul_field(value, "") {
        Some(field) => Err(ApiError::validation(
            field,
            "must not contain the NUL character (\\u0000)",
        )),
        None => Ok(()),
    }
}

fn nul_field(value: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
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

/// The client's address as the socket saw it ("unknown" when served without
/// connect info). Behind a proxy this is the proxy; trusting a forwarded
/// header is a deployment decision this server does not make for you.
pub struct ClientAddr(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let addr = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip().to_string())
            .unwrap_or_else(|| "unknown".to_owned());
        Ok(ClientAddr(addr))
    }
}

/// Path parameters; a malformed id cannot name anything, so it is a 404.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if has_encoded_nul(parts.uri.path()) {
            // No name holds U+0000 (the database could not even compare it).
            return Err(ApiError::problem(
                ProblemCode::NotFound,
                "no such resource: the path holds a NUL character",
            ));
        }
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| ApiPath(v))
            .map_err(|e: PathRejection| {
                ApiError::problem(ProblemCode::NotFound, format!("no such resource: {e}"))
            })
    }
}

fn has_encoded_nul(s: &str) -> bool {
    s.as_bytes().windows(3).any(|w| w == b"%00")
}

/// Query parameters; a wrong one is a 400 naming it.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        // A raw NUL cannot be in a URI, so `%00` is the only way to send one.
        let query = parts.uri.query().unwrap_or_default();
        if let Some(pair) = query.split('&').find(|pair| has_encoded_nul(pair)) {
            let name = pair.split('=').next().unwrap_or(pair);
            return Err(ApiError::validation(
                name.to_owned(),
                "must not contain the NUL character (%00)",
            ));
        }
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| ApiQuery(v))
            .map_err(|e: QueryRejection| {
                let message = e.body_text();
                let message = message
                    .strip_prefix("Failed to deserialize query string: ")
                    .unwrap_or(&message);
                ApiError::validation("query", message.to_owned())
            })
    }
}

/// Who is calling: resolved from the bearer token on every request, so a
/// revoked token stops working at once. Every query a handler runs takes
/// `tenant_id` from here, never from the request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant_id: Uuid,
    pub user_id: Uuid,
    pub token_id: Uuid,
    pub role: Role,
    pub display_name: String,
}

impl Caller {
    pub fn require(&self, role: Role) -> Result<(), ApiError> {
        if self.role == role {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "this route needs the {} role; you are {}",
                role.as_str(),
                self.role.as_str()
            )))
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(ApiError::unauthorized)?;
        crate::db::sessions::caller_for_token(&state.db, token)
            .await?
            .ok_or_else(ApiError::unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_protocol::model::PatchOrder;

    fn field_of(err: ApiError) -> String {
        let p = err.to_problem();
        assert_eq!(p.code, ProblemCode::ValidationFailed);
        p.extension("errors").expect("errors")[0]["field"]
            .as_str()
            .expect("field")
            .to_owned()
    }

    #[test]
    fn names_nested_unknown_fields() {
        let err = parse_json::<PatchOrder>(br#"{"base_version": 1, "set": {"notez": "x"}}"#)
            .expect_err("unknown");
        assert_eq!(field_of(err), "set.notez");
    }

    #[test]
    fn names_wrong_types_and_missing_fields() {
        let err =
            parse_json::<PatchOrder>(br#"{"base_version": "one", "set": {}}"#).expect_err("type");
        assert_eq!(field_of(err), "base_version");
        let err = parse_json::<PatchOrder>(br#"{"set": {}}"#).expect_err("missing");
        assert_eq!(field_of(err), "base_version");
    }

    #[test]
    fn names_the_field_holding_a_nul() {
        let err = parse_json::<PatchOrder>(br#"{"base_version": 1, "set": {"notes": "a\u0000b"}}"#)
            .expect_err("nul");
        assert_eq!(field_of(err), "set.notes");
        let err = reject_nul(&serde_json::json!({"a": [1, "x\u{0}"]})).expect_err("nul");
        assert_eq!(field_of(err), "a[1]");
        let err = reject_nul(&serde_json::json!({"k\u{0}": 1})).expect_err("nul");
        assert_eq!(field_of(err), "k\u{0}");
        // An escaped backslash followed by `u0000` is text, not a NUL.
        parse_json::<PatchOrder>(br#"{"base_version": 1, "set": {"notes": "\\u0000"}}"#)
            .expect("no nul");
        assert!(has_encoded_nul("q=a%00b") && !has_encoded_nul("q=a%20b"));
    }

    #[test]
    fn tells_malformed_from_invalid() {
        let err = parse_json::<PatchOrder>(b"{not json").expect_err("syntax");
        assert_eq!(err.to_problem().code, ProblemCode::MalformedJson);
    }
}
