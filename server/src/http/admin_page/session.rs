//! The page's cookie session: the device token behind the `hf_admin` cookie,
//! its shift-long lifetime, and the CSRF tokens every form carries (derived
//! from the session, or a random double-submit cookie before sign-in).

use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::html::redirect;
use super::PageError;
use crate::auth::Caller;
use crate::db::{begin_for_tenant, sessions};
use crate::AppState;

/// The session cookie: the device token itself.
pub(super) const SESSION_COOKIE: &str = "hf_admin";
/// The sign-in form's double-submit CSRF cookie.
pub(super) const LOGIN_COOKIE: &str = "hf_admin_login";
/// A page session lasts a working shift; then the operator signs in again.
pub(super) const SESSION_HOURS: i64 = 12;
/// What the page's device tokens are called, so their sessions can be told
/// from desk tokens (only these expire after SESSION_HOURS here).
pub(super) const DEVICE_NAME: &str = "admin page (browser)";

/// A signed-in page session.
pub(super) struct Session {
    pub(super) caller: Caller,
    pub(super) csrf: String,
}

/// Revokes a page token, bound to its tenant like every request's work.
pub(super) async fn revoke(state: &AppState, caller: &Caller) -> Result<(), PageError> {
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    sessions::revoke(&mut tx, caller).await?;
    tx.commit().await?;
    Ok(())
}

/// The session behind the cookie, if it is a live page session.
pub(super) async fn session(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<Session>, PageError> {
    let Some(token) = cookie(headers, SESSION_COOKIE).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let Some(caller) = sessions::caller_for_token(&state.db, token).await? else {
        return Ok(None);
    };
    // Device tokens never expire on their own; a browser session should. A
    // page token past its shift is revoked so it stops working everywhere.
    let fresh: Option<bool> = sqlx::query_scalar(
        "select created_at > now() - make_interval(hours => $3)
           from device_tokens where tenant_id = $1 and id = $2 and device_name = $4",
    )
    .bind(caller.tenant_id)
    .bind(caller.token_id)
    .bind(SESSION_HOURS as i32)
    .bind(DEVICE_NAME)
    .fetch_optional(&state.db)
    .await?;
    match fresh {
        Some(true) => Ok(Some(Session {
            csrf: csrf_for(token),
            caller,
        })),
        Some(false) => {
            revoke(state, &caller).await?;
            Ok(None)
        }
        // A desk's token pasted into the cookie is not a page session.
        None => Ok(None),
    }
}

/// The signed-in CSRF token: a one-way function of the session token, so it
/// reveals nothing about it and cannot be made without it.
fn csrf_for(session_token: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"holdfast admin page csrf v1\0");
    h.update(session_token.as_bytes());
    URL_SAFE_NO_PAD.encode(h.finalize())
}

/// A fresh double-submit token for the sign-in form: 256 random bits.
pub(super) fn login_csrf() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Compares secrets in time independent of where they differ.
pub(super) fn constant_time_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(super) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

pub(super) fn session_cookie(token: &str, max_age: i64, headers: &HeaderMap) -> String {
    session_cookie_named(SESSION_COOKIE, token, max_age, headers)
}

pub(super) fn session_cookie_named(
    name: &str,
    value: &str,
    max_age: i64,
    headers: &HeaderMap,
) -> String {
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    format!(
        "{name}={value}; HttpOnly; SameSite=Strict; Path=/admin; Max-Age={max_age}{}",
        if https { "; Secure" } else { "" }
    )
}

pub(super) fn set_cookie(response: &mut Response, cookie: &str) {
    // Tokens are base64url and names fixed: always a valid header value.
    if let Ok(v) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(SET_COOKIE, v);
    }
}

/// Back to the sign-in form, with the session cookie cleared.
pub(super) fn signed_out() -> Response {
    let mut r = redirect("/admin/login");
    set_cookie(
        &mut r,
        &format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/admin; Max-Age=0"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_tokens_are_per_session_and_compare_exactly() {
        let a = csrf_for("hf_one");
        assert_eq!(a, csrf_for("hf_one"));
        assert_ne!(a, csrf_for("hf_two"));
        assert!(constant_time_eq(&a, &a.clone()));
        assert!(!constant_time_eq(&a, &a[1..]));
        assert!(!constant_time_eq(&a, ""));
    }

    #[test]
    fn reads_cookies_among_others() {
        let mut h = HeaderMap::new();
        h.append(COOKIE, HeaderValue::from_static("a=1; hf_admin=tok"));
        h.append(COOKIE, HeaderValue::from_static("hf_admin_login=l"));
        assert_eq!(cookie(&h, "hf_admin"), Some("tok"));
        assert_eq!(cookie(&h, "hf_admin_login"), Some("l"));
        assert_eq!(cookie(&h, "nope"), None);
    }
}
