//! `POST /v1/sessions` (sign in) and `DELETE /v1/sessions/current` (sign out).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use holdfast_protocol::model::{LoginRequest, LoginResponse};
use holdfast_protocol::problem::Problem;

use super::{ApiJson, Caller};
use crate::error::{ApiError, ApiResult};
use crate::AppState;

#[utoipa::path(post, path = "/v1/sessions", request_body = LoginRequest,
    responses((status = 201, body = LoginResponse), (status = 401, body = Problem), (status = 400, body = Problem)))]
pub async fn login(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<LoginRequest>,
) -> ApiResult<(StatusCode, Json<LoginResponse>)> {
    if req.device_name.trim().is_empty() || req.device_name.len() > 200 {
        return Err(ApiError::validation(
            "device_name",
            "must be 1–200 characters",
        ));
    }
    let outcome = crate::db::sessions::login(
        &state.db,
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
        None => Err(ApiError::problem(
            holdfast_protocol::problem::ProblemCode::Unauthorized,
            "wrong tenant, email or password",
        )),
    }
}

#[utoipa::path(delete, path = "/v1/sessions/current", security(("bearer" = [])),
    responses((status = 204), (status = 401, body = Problem)))]
pub async fn logout(State(state): State<AppState>, caller: Caller) -> ApiResult<StatusCode> {
    crate::db::sessions::revoke(&state.db, &caller).await?;
    Ok(StatusCode::NO_CONTENT)
}
