//! The tenant's users over HTTP (API.md v1.1 "Users"): the operator routes
//! under `/v1/admin/users` and the password change every user has
//! (`POST /v1/sessions/current/password`). Every write runs under the
//! idempotency rules (`keyed_write!`); the logic is `master::users`.
//!
//! Secrets: a generated password is in the first answer only — the copy
//! stored for replays has `password: null`. A password change's stored
//! fingerprint leaves its passwords out (a SHA-256 of a password is a fast
//! hash anyone with the table could guess against); a replay is recognised
//! by the new password verifying against the user's hash instead. No body of
//! these routes is ever logged (the trace layer records the path only, and
//! the bodies' `Debug` is redacted).

use axum::extract::{FromRequest, OriginalUri, Request as HttpRequest, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use holdfast_protocol::admin::{
    ChangePassword, CreateUser, CreatedUser, NewPassword, PatchUser, User, UserList,
};
use holdfast_protocol::canonical::request_fingerprint;
use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::model::Role;
use holdfast_protocol::problem::{Problem, ProblemCode};
use serde_json::Value;
use uuid::Uuid;

use super::extract::{parse_json, read_body, require_json_content_type};
use super::mutations::{respond, Sent, IDEMPOTENCY_KEY, REPLAYED};
use super::{ApiPath, ApiResult, ClientAddr};
use crate::auth::Caller;
use crate::engine::Outcome;
use crate::error::Error;
use crate::master::users::{self, NewUser, UserChange};
use crate::master::{self, Begun, Keyed};
use crate::AppState;

/// Blanks the one-time password in the copy of an answer kept for replays.
fn forget_password(body: &mut Value) {
    if let Some(password) = body.get_mut("password") {
        *password = Value::Null;
    }
}

/// The tenant's users, by email.
#[utoipa::path(get, operation_id = "list_users", path = "/v1/admin/users", security(("bearer" = [])),
    responses((status = 200, body = UserList), (status = 403, body = Problem)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<UserList>> {
    caller.require(Role::Operator)?;
    Ok(Json(users::list(&state.db, &caller).await?))
}

/// Creates a user with a generated password, shown in this answer only.
#[utoipa::path(post, operation_id = "create_user", path = "/v1/admin/users", request_body = CreateUser, security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255,
            description = "one key per intention, 1–255 characters")),
    responses((status = 201, body = CreatedUser,
               description = "the user and their password; a replay answers `password: null`",
               headers(("Idempotent-Replayed" = String, description = "`true` on a replay of the stored answer"))),
              (status = 400, body = Problem,
               description = "`validation_failed` (an email the tenant already has is one, on `email`), or an Idempotency-Key problem"),
              (status = 403, body = Problem),
              (status = 409, body = Problem, description = "`request_in_flight` with Retry-After"),
              (status = 422, body = Problem, description = "`idempotency_key_reused`")))]
pub(crate) async fn create(
    State(state): State<AppState>,
    caller: Caller,
    sent: Sent<CreateUser>,
) -> ApiResult<Response> {
    caller.require(Role::Operator)?;
    let (keyed, body) = sent.into_keyed();
    let new = NewUser::check(body)?;
    let secret = users::generated_secret().await?;
    keyed_write!(
        state,
        caller,
        keyed,
        |tx| users::create_in_tx(&mut tx, &caller, &new, &secret),
        redact = forget_password
    )
}

/// Renames, promotes, demotes, deactivates (revoking every token of the
/// user) or reactivates a user.
#[utoipa::path(patch, operation_id = "patch_user", path = "/v1/admin/users/{id}", request_body = PatchUser, security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255,
            description = "one key per intention, 1–255 characters"),
           ("id" = Uuid, Path)),
    responses((status = 200, body = User,
               headers(("Idempotent-Replayed" = String, description = "`true` on a replay of the stored answer"))),
              (status = 400, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 409, body = Problem, description = "`request_in_flight` with Retry-After"),
              (status = 422, body = Problem,
               description = "`invalid_state`: the tenant's last active operator cannot be deactivated or demoted; or `idempotency_key_reused`")))]
pub(crate) async fn patch(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    sent: Sent<PatchUser>,
) -> ApiResult<Response> {
    caller.require(Role::Operator)?;
    let (keyed, body) = sent.into_keyed();
    let change = UserChange::check(body)?;
    keyed_write!(state, caller, keyed, |tx| users::patch_in_tx(
        &mut tx, &caller, id, &change
    ))
}

/// Gives the user a new generated password, shown in this answer only, and
/// revokes every token they hold. Takes no body (or `{}`).
#[utoipa::path(post, operation_id = "reset_user_password", path = "/v1/admin/users/{id}/reset-password", security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255,
            description = "one key per intention, 1–255 characters"),
           ("id" = Uuid, Path)),
    responses((status = 200, body = NewPassword,
               description = "the new password; a replay answers `password: null`",
               headers(("Idempotent-Replayed" = String, description = "`true` on a replay of the stored answer"))),
              (status = 400, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 409, body = Problem, description = "`request_in_flight` with Retry-After"),
              (status = 422, body = Problem, description = "`idempotency_key_reused`")))]
pub(crate) async fn reset_password(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    NoBody(keyed): NoBody,
) -> ApiResult<Response> {
    caller.require(Role::Operator)?;
    let secret = users::generated_secret().await?;
    keyed_write!(
        state,
        caller,
        keyed,
        |tx| users::reset_password_in_tx(&mut tx, &caller, id, &secret),
        redact = forget_password
    )
}

/// Changes the caller's own password (any role). Every other token of
/// theirs is revoked; the one this request used keeps working.
#[utoipa::path(post, operation_id = "change_own_password", path = "/v1/sessions/current/password", request_body = ChangePassword,
    security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255,
            description = "one key per intention, 1–255 characters")),
    responses((status = 204, description = "changed",
               headers(("Idempotent-Replayed" = String, description = "`true` on a replay of the stored answer"))),
              (status = 400, body = Problem,
               description = "`validation_failed`: `current` is not your password, or `new` is too short or unchanged"),
              (status = 429, body = Problem, description = "`rate_limited`: too many wrong `current` passwords lately",
               headers(("Retry-After" = u64, description = "seconds until a change is considered again"))),
              (status = 409, body = Problem, description = "`request_in_flight` with Retry-After"),
              (status = 422, body = Problem, description = "`idempotency_key_reused`")))]
pub(crate) async fn change_password(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    caller: Caller,
    sent: Sent<ChangePassword>,
) -> ApiResult<Response> {
    let (keyed, body) = sent.into_keyed();
    users::check_new_password(&body)?;
    // A stolen token must not become a way to guess the password behind
    // it: wrong `current`s are throttled like failed sign-ins (their own
    // per-account budget, the address's shared).
    let (tenant, account) = (caller.tenant_id.to_string(), caller.user_id.to_string());
    if let Err(wait) = state.login_limiter.check(&tenant, &account, &addr) {
        let secs = wait.as_secs().max(1);
        return Err(Problem::new(
            ProblemCode::RateLimited,
            format!("too many wrong current passwords; try again in {secs} s"),
        )
        .with("retry_after", secs)
        .into());
    }
    let keyed = Keyed {
        fingerprint: request_fingerprint(
            "POST",
            "/v1/sessions/current/password",
            &serde_json::json!({"user": caller.user_id}),
        ),
        ..keyed
    };
    let outcome = match master::begin(&state.db, &caller, &keyed).await? {
        Begun::Settled(outcome) => {
            let same_act = !(outcome.replayed && outcome.status == 204)
                || users::password_is(&state.db, &caller, &body.new).await?;
            if !same_act {
                let p = Problem::new(
                    ProblemCode::IdempotencyKeyReused,
                    "this Idempotency-Key changed your password to a different one; \
                     mint a new key for a new act",
                );
                return Ok(respond(&Outcome::problem(&p)));
            }
            outcome
        }
        Begun::Claimed(mut tx) => {
            let result = users::change_password_in_tx(&mut tx, &caller, &body).await;
            match &result {
                Ok(_) => state.login_limiter.record_success(&tenant, &account),
                Err(e) if users::is_wrong_current(e) => {
                    state.login_limiter.record_failure(&tenant, &account, &addr)
                }
                Err(_) => {}
            }
            master::finish(tx, &caller, &keyed, result).await?
        }
    };
    if outcome.status != 204 {
        return Ok(respond(&outcome));
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    if outcome.replayed {
        response
            .headers_mut()
            .insert(REPLAYED, HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// A write that takes no body (an empty one, or `{}`): its key and
/// fingerprint, checked as [`Sent`] checks them.
pub(crate) struct NoBody(Keyed);

impl<S: Send + Sync> FromRequest<S> for NoBody {
    type Rejection = Error;

    async fn from_request(req: HttpRequest, state: &S) -> Result<Self, Self::Rejection> {
        let method = req.method().to_string();
        let path = match req.extensions().get::<OriginalUri>() {
            Some(OriginalUri(uri)) => uri.path().to_owned(),
            None => req.uri().path().to_owned(),
        };
        let raw = req
            .headers()
            .get(IDEMPOTENCY_KEY)
            .ok_or_else(|| {
                Error::problem(
                    ProblemCode::IdempotencyKeyMissing,
                    "this write needs an Idempotency-Key header",
                )
            })?
            .to_str()
            .map_err(|_| {
                Error::problem(
                    ProblemCode::IdempotencyKeyInvalid,
                    "Idempotency-Key must be visible ASCII",
                )
            })?;
        let key = IdempotencyKey::new(raw).map_err(|e| Error::from(e.to_problem()))?;
        let headers = req.headers().clone();
        let bytes = read_body(req, state).await?;
        let empty = Value::Object(serde_json::Map::new());
        if !bytes.iter().all(u8::is_ascii_whitespace) {
            require_json_content_type(&headers)?;
            let value: Value = parse_json(&bytes)?;
            if value != empty {
                return Err(Error::validation(
                    "body",
                    "this route takes no body (send none, or {})",
                ));
            }
        }
        Ok(NoBody(Keyed {
            key,
            fingerprint: request_fingerprint(&method, &path, &empty),
        }))
    }
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list, create, patch, reset_password, change_password))]
pub(crate) struct ApiDoc;
