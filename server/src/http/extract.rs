//! Extractors that reject with API.md problems: JSON bodies (415, 413, 400
//! malformed_json / validation_failed naming the field), paths, queries, and
//! the caller behind a bearer token.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::request::Parts;
use holdfast_protocol::json;
use holdfast_protocol::problem::ProblemCode;
use serde::de::DeserializeOwned;

use crate::auth::Caller;
use crate::error::Error;
use crate::AppState;

/// A JSON body that must be `application/json`, within the body limit, and
/// exactly of shape `T` (unknown fields rejected by `T` itself).
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        require_json_content_type(req.headers())?;
        let bytes = read_body(req, state).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// The raw body, with the body limit answered as a 413 problem.
pub(crate) struct ApiBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        read_body(req, state).await.map(ApiBytes)
    }
}

pub(super) fn require_json_content_type(headers: &axum::http::HeaderMap) -> Result<(), Error> {
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
        Err(Error::problem(
            ProblemCode::UnsupportedMediaType,
            "send the body as Content-Type: application/json",
        ))
    }
}

/// The body, read whole within the route's limit (`DefaultBodyLimit`), or
/// a 413 problem. A body whose declared Content-Length is past the limit is
/// refused before a byte of it is read: otherwise a client declaring 5 GiB
/// would be read up to the limit first (or, sending nothing, hold the
/// request until it gives up).
pub(super) async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, Error> {
    use axum::body::HttpBody;
    use axum::RequestExt;

    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let req = req.with_limited_body();
    // The limited body's upper bound is the route's limit (or less, if the
    // declared length is less): a declared length above it cannot fit.
    if let (Some(declared), Some(limit)) = (declared, req.body().size_hint().upper()) {
        if declared > limit {
            return Err(too_large(limit));
        }
    }
    Bytes::from_request(req, state)
        .await
        .map_err(body_rejection)
}

fn too_large(limit: u64) -> Error {
    Error::problem(
        ProblemCode::PayloadTooLarge,
        format!("request bodies are limited to {limit} bytes"),
    )
}

pub(super) fn body_rejection(rejection: BytesRejection) -> Error {
    if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        Error::problem(
            ProblemCode::PayloadTooLarge,
            format!(
                "request bodies are limited to {} bytes",
                super::MAX_BODY_BYTES
            ),
        )
    } else {
        Error::problem(
            ProblemCode::MalformedJson,
            format!("could not read the body: {rejection}"),
        )
    }
}

/// Parses JSON into `T`: bad syntax is `malformed_json`; a wrong shape is
/// `validation_failed` with the offending field's path (`set.notes`), and so
/// is a string holding U+0000 (`holdfast_protocol::json::reject_nul`).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    Ok(json::parse(bytes)?)
}

/// [`parse_json`] without the U+0000 check, for a body whose parts are
/// judged one by one (batch push: each item gets its own answer).
pub(super) fn parse_json_keeping_nul<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    Ok(json::parse_keeping_nul(bytes)?)
}

/// The client's address as the socket saw it ("unknown" when served without
/// connect info). Behind a proxy this is the proxy; trusting a forwarded
/// header is a deployment decision this server does not make for you.
pub struct ClientAddr(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = Error;

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
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if has_encoded_nul(parts.uri.path()) {
            // No name holds U+0000 (the database could not even compare it).
            return Err(Error::problem(
                ProblemCode::NotFound,
                "no such resource: the path holds a NUL character",
            ));
        }
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| ApiPath(v))
            .map_err(|e: PathRejection| {
                Error::problem(ProblemCode::NotFound, format!("no such resource: {e}"))
            })
    }
}

fn has_encoded_nul(s: &str) -> bool {
    s.as_bytes().windows(3).any(|w| w == b"%00")
}

/// Query parameters; a wrong one is a 400 naming it.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        // A raw NUL cannot be in a URI, so `%00` is the only way to send one.
        let query = parts.uri.query().unwrap_or_default();
        if let Some(pair) = query.split('&').find(|pair| has_encoded_nul(pair)) {
            let name = pair.split('=').next().unwrap_or(pair);
            return Err(Error::validation(
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
                let (field, message) = query_field(message);
                Error::validation(field, message.to_owned())
            })
    }
}

/// The parameter a query rejection is about: axum puts its name first
/// (`limit: number too large to fit in target type`), so a client learns
/// which one to fix; "query" when the rejection names none.
fn query_field(message: &str) -> (&str, &str) {
    match message.split_once(": ") {
        Some((name, rest))
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            (name, rest)
        }
        _ => ("query", message),
    }
}

/// The token of an `Authorization: Bearer <token>` value. The scheme is
/// case-insensitive and may be followed by several spaces (RFC 9110 §11.1,
/// §11.4); anything else, or an empty token, is no bearer token.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ')?;
    let token = rest.trim_matches(' ');
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
        .then_some(token)
}

/// The request's bearer token, or 401 when it has none (or a malformed one).
fn request_bearer(parts: &Parts) -> Result<&str, Error> {
    parts
        .headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .ok_or_else(Error::unauthorized)
}

/// The caller behind the bearer token, looked up on every request so a
/// revoked token stops working at once.
impl FromRequestParts<AppState> for Caller {
    type Rejection = Error;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = request_bearer(parts)?;
        crate::db::sessions::caller_for_token(&state.db, token)
            .await?
            .ok_or_else(Error::unauthorized)
    }
}

/// The caller of a mutation route: from the token cache when the token was
/// looked up lately (`proved` false: the mutation's claim proves it, see
/// `db::sessions::TokenCache`), else looked up now. A missing or malformed
/// bearer token is refused here, as [`Caller`] refuses it.
pub(crate) struct MutationCaller {
    pub(crate) caller: Caller,
    pub(crate) proved: bool,
    token: String,
}

impl MutationCaller {
    /// The caller looked up now: 401 when the token is not (or no longer)
    /// live.
    pub(crate) async fn prove(self, state: &AppState) -> Result<MutationCaller, Error> {
        if self.proved {
            return Ok(self);
        }
        MutationCaller::look_up(state, self.token).await
    }

    /// Looks the token up (refreshing the cache) or refuses it with 401.
    async fn look_up(state: &AppState, token: String) -> Result<MutationCaller, Error> {
        let cache = crate::db::sessions::TokenCache::global();
        cache.forget(&token);
        let caller = crate::db::sessions::caller_for_token(&state.db, &token)
            .await?
            .ok_or_else(Error::unauthorized)?;
        cache.put(&token, &caller);
        Ok(MutationCaller {
            caller,
            proved: true,
            token,
        })
    }
}

impl FromRequestParts<AppState> for MutationCaller {
    type Rejection = Error;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = request_bearer(parts)?.to_owned();
        match crate::db::sessions::TokenCache::global().get(&token) {
            Some(caller) => Ok(MutationCaller {
                caller,
                proved: false,
                token,
            }),
            None => MutationCaller::look_up(state, token).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_protocol::model::PatchOrder;

    #[test]
    fn bodies_answer_with_api_problems() {
        let err = parse_json::<PatchOrder>(br#"{"base_version": 1, "set": {"notez": "x"}}"#)
            .expect_err("unknown");
        let p = err.to_problem();
        assert_eq!(p.code, ProblemCode::ValidationFailed);
        assert_eq!(
            p.extension("errors").expect("errors")[0]["field"],
            "set.notez"
        );
        let err = parse_json::<PatchOrder>(b"{not json").expect_err("syntax");
        assert_eq!(err.to_problem().code, ProblemCode::MalformedJson);
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for ok in [
            "Bearer hf_x",
            "bearer hf_x",
            "BEARER hf_x",
            "bEaReR   hf_x",
            "Bearer hf_x ",
        ] {
            assert_eq!(bearer_token(ok), Some("hf_x"), "{ok:?}");
        }
        for bad in [
            "Bearer",
            "Bearer ",
            "Basic hf_x",
            "Bearerhf_x",
            "Bearer a b",
            "hf_x",
        ] {
            assert_eq!(bearer_token(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_encoded_nul_is_found_in_paths_and_queries() {
        assert!(has_encoded_nul("q=a%00b") && !has_encoded_nul("q=a%20b"));
    }
}
