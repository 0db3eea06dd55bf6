//! `POST /v1/sessions` (sign in) and `DELETE /v1/sessions/current` (sign out).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use holdfast_protocol::model::{LoginRequest, LoginResponse};
use holdfast_protocol::problem::Problem;

use holdfast_protocol::model::{SessionTenant, SessionUser};
use holdfast_protocol::problem::ProblemCode;

use super::{ApiJson, ClientAddr};
use crate::auth::Caller;
use crate::error::Error;
use crate::http::ApiResult;
use crate::AppState;

#[utoipa::path(post, operation_id = "create_session", path = "/v1/sessions", request_body = LoginRequest,
    responses((status = 201, body = LoginResponse),
              (status = 401, body = Problem, description = "`unauthorized`: wrong tenant, email or password (one answer for all)"),
              (status = 429, body = Problem, description = "`rate_limited`: too many recent failed sign-ins for this account or address",
               headers(("Retry-After" = u64, description = "seconds until a sign-in is considered again")))))]
pub(crate) async fn login(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    ApiJson(req): ApiJson<LoginRequest>,
) -> ApiResult<(StatusCode, Json<LoginResponse>)> {
    if req.device_name.trim().is_empty() || req.device_name.chars().count() > 200 {
        return Err(Error::validation("device_name", "must be 1–200 characters"));
    }
    let outcome = sign_in(
        &state,
        &addr,
        &req.tenant,
        &req.email,
        &req.password,
        &req.device_name,
    )
    .await?;
    match outcome {
        Some((token, user, tenant)) => {
            tracing::info!(tenant = %tenant.slug, user = %user.id, "signed in");
            Ok((
                StatusCode::CREATED,
                Json(LoginResponse {
                    token,
                    user,
                    tenant,
                }),
            ))
        }
        // One answer for unknown tenant, unknown user and wrong password.
        None => Err(Error::problem(
            holdfast_protocol::problem::ProblemCode::Unauthorized,
            "wrong tenant, email or password",
        )),
    }
}

#[utoipa::path(delete, operation_id = "revoke_current_session", path = "/v1/sessions/current", security(("bearer" = [])),
    responses((status = 204), (status = 401, body = Problem)))]
pub(crate) async fn logout(State(state): State<AppState>, caller: Caller) -> ApiResult<StatusCode> {
    let mut tx = crate::db::begin_for_tenant(&state.db, caller.tenant_id).await?;
    crate::db::sessions::revoke(&mut tx, &caller).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Signs in through the throttle (API sign-in and the admin page alike):
/// too many recent failures for the account or the address answer 429 with
/// Retry-After before the password is even checked.
pub(crate) async fn sign_in(
    state: &AppState,
    addr: &str,
    tenant: &str,
    email: &str,
    password: &str,
    device_name: &str,
) -> ApiResult<Option<(String, SessionUser, SessionTenant)>> {
    if let Err(wait) = state.login_limiter.check(tenant, email, addr) {
        let secs = wait.as_secs().max(1);
        tracing::warn!(
            tenant,
            address = addr,
            "sign-in throttled after repeated failures"
        );
        return Err(Problem::new(
            ProblemCode::RateLimited,
            format!("too many failed sign-ins; try again in {secs} s"),
        )
        .with("retry_after", secs)
        .into());
    }
    let outcome =
        crate::db::sessions::login(&state.db, tenant, email, password, device_name).await?;
    match &outcome {
        Some(_) => state.login_limiter.record_success(tenant, email),
        None => state.login_limiter.record_failure(tenant, email, addr),
    }
    Ok(outcome)
}
