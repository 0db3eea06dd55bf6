//! Operator routes (role `operator`).

use axum::extract::State;
use axum::Json;
use holdfast_protocol::model::Role;
use holdfast_protocol::problem::Problem;
use serde::{Deserialize, Serialize};

use super::{ApiJson, Caller};
use crate::error::{ApiError, ApiResult};
use crate::AppState;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InboundSecretRequest {
    /// `warehouse` or `payments`.
    provider: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SecretResponse {
    /// Shown once; give it to the provider.
    secret: String,
}

/// Issues (or replaces) the secret a provider signs inbound webhooks with.
#[utoipa::path(post, path = "/v1/admin/inbound-secrets", request_body = InboundSecretRequest,
    security(("bearer" = [])),
    responses((status = 200, body = SecretResponse), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 403, body = Problem)))]
pub async fn create_inbound_secret(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<InboundSecretRequest>,
) -> ApiResult<Json<SecretResponse>> {
    caller.require(Role::Operator)?;
    if !matches!(req.provider.as_str(), "warehouse" | "payments") {
        return Err(ApiError::validation(
            "provider",
            "must be `warehouse` or `payments`",
        ));
    }
    let secret = crate::auth::new_webhook_secret();
    sqlx::query(
        "insert into inbound_secrets (tenant_id, provider, secret) values ($1, $2, $3)
         on conflict (tenant_id, provider) do update set secret = excluded.secret, created_at = now()",
    )
    .bind(caller.tenant_id)
    .bind(&req.provider)
    .bind(&secret)
    .execute(&state.db)
    .await?;
    tracing::info!(provider = %req.provider, "inbound webhook secret issued");
    Ok(Json(SecretResponse { secret }))
}
