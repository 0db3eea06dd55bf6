//! What every write on the page shares. A [`Write`] is a submitted form
//! (URL-encoded, or multipart with a file) from a signed-in operator whose
//! CSRF token checked out, with the one-time idempotency key its form was
//! rendered with and the fingerprint of what was sent; [`page_write!`] runs
//! it under the same idempotency engine as the JSON API (`master::begin` /
//! `finish`), so a double click or a browser's resubmit applies once; and
//! [`Refusal`] says in words why the engine or a master function refused.
//! A [`Viewer`] is the same check for the pages' GETs.

use axum::extract::{FromRequest, FromRequestParts, Multipart, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Form;
use holdfast_protocol::canonical::raw_request_fingerprint;
use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::model::Role;
use holdfast_protocol::problem::{FieldError, Problem, ProblemCode};
use serde::de::DeserializeOwned;

use super::html::{forged, message_page, not_an_operator, redirect};
use super::session::{constant_time_eq, login_csrf, session, Session};
use super::PageError;
use crate::engine::Outcome;
use crate::master::Keyed;
use crate::AppState;

/// The hidden field that carries a form's idempotency key.
pub(super) const KEY_FIELD: &str = "key";
const CSRF_FIELD: &str = "csrf";

/// A fresh key for one rendered form: 256 random bits, so no two forms (nor
/// a form and a desk's key) ever share one.
pub(super) fn fresh_key() -> String {
    format!("admin-page-{}", login_csrf())
}

/// Runs a write under the idempotency rules and evaluates to its
/// [`Outcome`] (stored, replayed or refused), `?`-ing internal errors into
/// the page's error: `page_write!(state, write, |tx| work(&mut tx, ...))`,
/// optionally `redact = f` to keep a one-time secret out of the stored copy.
macro_rules! page_write {
    ($state:expr, $write:expr, |$tx:ident| $work:expr) => {
        page_write!($state, $write, |$tx| $work, redact = |_| {})
    };
    ($state:expr, $write:expr, |$tx:ident| $work:expr, redact = $redact:expr) => {{
        let write: &$crate::http::admin_page::write::Write = $write;
        let caller = &write.session.caller;
        match crate::master::begin(&$state.db, caller, &write.keyed).await? {
            crate::master::Begun::Settled(outcome) => outcome,
            crate::master::Begun::Claimed(mut $tx) => {
                let result = $work.await;
                crate::master::finish_redacting($tx, caller, &write.keyed, result, $redact).await?
            }
        }
    }};
}
pub(super) use page_write;

/// One field of a submitted form.
struct Part {
    name: String,
    value: Vec<u8>,
    file_name: Option<String>,
}

/// A write form as submitted by a signed-in operator, checked.
pub(crate) struct Write {
    pub(super) session: Session,
    pub(super) keyed: Keyed,
    parts: Vec<Part>,
}

impl Write {
    /// A text field's value as sent ("" when absent).
    pub(super) fn text(&self, name: &str) -> String {
        self.parts
            .iter()
            .find(|p| p.name == name && p.file_name.is_none())
            .map(|p| String::from_utf8_lossy(&p.value).into_owned())
            .unwrap_or_default()
    }

    /// An uploaded file: its name and bytes, or None when none was chosen.
    pub(super) fn file(&self, name: &str) -> Option<(&str, &[u8])> {
        self.parts
            .iter()
            .find(|p| p.name == name && p.file_name.as_deref().is_some_and(|f| !f.is_empty()))
            .map(|p| (p.file_name.as_deref().unwrap_or(""), p.value.as_slice()))
    }
}

/// What a form's fields fingerprint as: every field but the CSRF token and
/// the key, in the order sent, each length-prefixed so no two different
/// forms encode alike. A file counts by its bytes, not its name.
fn fingerprint(path: &str, parts: &[Part]) -> String {
    let mut bytes = Vec::new();
    for p in parts {
        if p.name == CSRF_FIELD || p.name == KEY_FIELD {
            continue;
        }
        bytes.extend_from_slice(
            format!("{}:{}={}:", p.name.len(), p.name, p.value.len()).as_bytes(),
        );
        bytes.extend_from_slice(&p.value);
        bytes.push(b'\n');
    }
    raw_request_fingerprint("POST", path, &bytes)
}

/// The signed-in operator behind a request, or the answer that sends anyone
/// else away (to the sign-in form, or an "operators only" page).
async fn operator(state: &AppState, parts: &Parts) -> Result<Session, Response> {
    let session = session(state, &parts.headers)
        .await
        .map_err(IntoResponse::into_response)?;
    let Some(session) = session else {
        return Err(redirect("/admin/login"));
    };
    if session.caller.role != Role::Operator {
        return Err(not_an_operator(&session.caller));
    }
    Ok(session)
}

/// A signed-in operator looking at a page.
pub(crate) struct Viewer(pub(super) Session);

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        operator(state, parts).await.map(Viewer)
    }
}

fn too_large() -> Response {
    message_page(
        StatusCode::PAYLOAD_TOO_LARGE,
        "File too large",
        "That file is larger than the server takes in one upload (32 MB, about 100,000 rows). \
         Nothing was changed. Split it into smaller files and import them one after another.",
    )
}

fn unreadable() -> Response {
    message_page(
        StatusCode::BAD_REQUEST,
        "Bad form",
        "The form could not be read. Nothing was changed. Go back to the page, reload it and \
         try again.",
    )
}

impl FromRequest<AppState> for Write {
    type Rejection = Response;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Response> {
        let (head, body) = req.into_parts();
        // Who is asking is settled before the body is read.
        let session = operator(state, &head).await?;
        let path = head.uri.path().to_owned();
        let multipart = head
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("multipart/form-data"));
        let req = Request::from_parts(head, body);
        let parts = if multipart {
            let mut form = Multipart::from_request(req, state)
                .await
                .map_err(|_| unreadable())?;
            let mut parts = Vec::new();
            loop {
                let field = match form.next_field().await {
                    Ok(Some(field)) => field,
                    Ok(None) => break,
                    Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                        return Err(too_large())
                    }
                    Err(_) => return Err(unreadable()),
                };
                let name = field.name().unwrap_or("").to_owned();
                let file_name = field.file_name().map(str::to_owned);
                let value = match field.bytes().await {
                    Ok(v) => v.to_vec(),
                    Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                        return Err(too_large())
                    }
                    Err(_) => return Err(unreadable()),
                };
                parts.push(Part {
                    name,
                    value,
                    file_name,
                });
            }
            parts
        } else {
            match Form::<Vec<(String, String)>>::from_request(req, state).await {
                Ok(Form(pairs)) => pairs
                    .into_iter()
                    .map(|(name, value)| Part {
                        name,
                        value: value.into_bytes(),
                        file_name: None,
                    })
                    .collect(),
                Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => return Err(too_large()),
                // Unreadable, or not a form at all: nothing to check a token in.
                Err(_) => return Err(forged()),
            }
        };
        let token = parts
            .iter()
            .find(|p| p.name == CSRF_FIELD)
            .map(|p| p.value.as_slice())
            .unwrap_or_default();
        if !constant_time_eq(&session.csrf, &String::from_utf8_lossy(token)) {
            return Err(forged());
        }
        let key = parts
            .iter()
            .find(|p| p.name == KEY_FIELD)
            .and_then(|p| std::str::from_utf8(&p.value).ok())
            .and_then(|k| IdempotencyKey::new(k).ok());
        let Some(key) = key else {
            return Err(message_page(
                StatusCode::BAD_REQUEST,
                "Form out of date",
                "That form came from an older version of this page. Nothing was changed. \
                 Reload the page and try again.",
            ));
        };
        Ok(Write {
            keyed: Keyed {
                key,
                fingerprint: fingerprint(&path, &parts),
            },
            session,
            parts,
        })
    }
}

/// What a write came to.
pub(super) enum Reply<T> {
    /// Applied, now or by the same form sent before (then this is the
    /// stored answer, without any one-time secret).
    Done(T),
    Refused(Refusal),
}

/// Reads an outcome: a success as `T`, anything else as a [`Refusal`].
pub(super) fn reply<T: DeserializeOwned>(outcome: &Outcome) -> Result<Reply<T>, PageError> {
    if outcome.is_success() {
        let value = serde_json::from_slice(&outcome.body)?;
        return Ok(Reply::Done(value));
    }
    let problem: Problem = serde_json::from_slice(&outcome.body)?;
    Ok(Reply::Refused(Refusal::from_problem(&problem)))
}

/// Why nothing was done, in words: a sentence for the top of the page and,
/// for a validation failure, each field's problem (by the field's API name,
/// which the pages use as the input's name).
#[derive(Debug, Clone)]
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    pub(super) message: String,
    /// The problem's own detail (for a file: how many problems, and whether
    /// the list was cut short).
    pub(super) detail: String,
    pub(super) fields: Vec<FieldError>,
}

impl Refusal {
    pub(super) fn from_problem(p: &Problem) -> Refusal {
        let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
        let detail = p.detail.clone().unwrap_or_default();
        let message = match p.code {
            ProblemCode::ValidationFailed => {
                "Nothing was saved: correct what is marked below and send it again.".to_owned()
            }
            ProblemCode::InvalidState => format!("Nothing was changed: {}.", trim_dot(&detail)),
            ProblemCode::NotFound => {
                "Nothing was changed: it no longer exists in your tenant (or never did). \
                 Reload the list."
                    .to_owned()
            }
            ProblemCode::IdempotencyKeyReused => {
                "Nothing was changed: this form had already been used for a different change. \
                 Your input is kept below; send it again."
                    .to_owned()
            }
            ProblemCode::RequestInFlight => {
                "This form is still being processed (was it sent twice?). Reload the page in a \
                 moment to see whether it was applied."
                    .to_owned()
            }
            _ => format!("Nothing was changed: {}.", trim_dot(&detail)),
        };
        let fields = p
            .extensions
            .get("errors")
            .and_then(|e| serde_json::from_value::<Vec<FieldError>>(e.clone()).ok())
            .unwrap_or_default();
        Refusal {
            status,
            message,
            detail,
            fields,
        }
    }

    /// A refusal decided on the page before anything was sent to the
    /// engine (a price that is not a number): 400, field by field.
    pub(super) fn invalid(fields: Vec<FieldError>) -> Refusal {
        Refusal {
            status: StatusCode::BAD_REQUEST,
            message: "Nothing was saved: correct what is marked below and send it again."
                .to_owned(),
            detail: String::new(),
            fields,
        }
    }

    /// The problem with one field, if any.
    pub(super) fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|f| f.field == name)
            .map(|f| f.message.as_str())
    }

    /// The problems not shown beside a field of the form (so no problem
    /// goes unsaid), as "Label: message".
    pub(super) fn others(&self, shown: &[&str]) -> Vec<String> {
        self.fields
            .iter()
            .filter(|f| !shown.contains(&f.field.as_str()))
            .map(|f| format!("{}: {}", f.field.replace('_', " "), f.message))
            .collect()
    }
}

/// A page-side check's problem, in the shape the engine's have.
pub(super) fn field_error(field: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.to_owned(),
        message: message.into(),
    }
}

fn trim_dot(s: &str) -> &str {
    s.trim().trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, value: &str) -> Part {
        Part {
            name: name.into(),
            value: value.as_bytes().to_vec(),
            file_name: None,
        }
    }

    #[test]
    fn the_fingerprint_ignores_token_and_key_but_not_fields() {
        let a = fingerprint(
            "/admin/users",
            &[part("csrf", "one"), part("key", "k1"), part("email", "a@b")],
        );
        let b = fingerprint(
            "/admin/users",
            &[part("csrf", "two"), part("key", "k2"), part("email", "a@b")],
        );
        assert_eq!(a, b);
        let c = fingerprint("/admin/users", &[part("email", "a@c")]);
        assert_ne!(a, c);
        // Length prefixes: moving a character between fields changes it.
        let d = fingerprint("/x", &[part("a", "bc"), part("d", "")]);
        let e = fingerprint("/x", &[part("a", "b"), part("d", "c")]);
        assert_ne!(d, e);
        assert_ne!(a, fingerprint("/admin/other", &[part("email", "a@b")]));
    }
}
