//! `POST /v1/webhooks/{tenant}/{provider}`: signed, not bearer-authenticated.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use holdfast_protocol::problem::{Problem, ProblemCode};
use holdfast_protocol::webhook;
use serde_json::{json, Value};

use super::extract::{parse_json, require_json_content_type, ApiBytes};
use super::ApiPath;
use crate::error::{ApiError, ApiResult};
use crate::inbox::{self, Handled, Provider};
use crate::AppState;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

fn bad_signature() -> ApiError {
    // One answer for every verification failure: no oracle for forgers.
    ApiError::problem(
        ProblemCode::Unauthorized,
        "missing or invalid webhook signature or timestamp",
    )
}

#[utoipa::path(post, path = "/v1/webhooks/{tenant}/{provider}",
    params(("tenant" = String, Path), ("provider" = String, Path, description = "warehouse or payments")),
    responses((status = 200, description = r#"{"status": "processed"} or {"status": "duplicate"}"#),
              (status = 401, body = Problem), (status = 400, body = Problem), (status = 404, body = Problem),
              (status = 422, body = Problem), (status = 500, body = Problem)))]
pub async fn receive(
    State(state): State<AppState>,
    ApiPath((tenant, provider)): ApiPath<(String, String)>,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<Value>> {
    let provider =
        Provider::parse(&provider).ok_or_else(|| ApiError::not_found("webhook provider"))?;
    let (tenant_id, secret) = inbox::secret_for(&state.db, &tenant, provider)
        .await?
        .ok_or_else(bad_signature)?;
    let key = webhook::parse_secret(&secret)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored inbound secret: {e}")))?;
    let event_id = header(&headers, "webhook-id");
    if event_id.is_empty() || event_id.len() > 255 {
        return Err(bad_signature());
    }
    webhook::verify(
        &[key.as_slice()],
        event_id,
        header(&headers, "webhook-timestamp"),
        header(&headers, "webhook-signature"),
        &body,
        chrono::Utc::now().timestamp(),
        webhook::DEFAULT_TOLERANCE_SECS,
    )
    .map_err(|e| {
        tracing::info!(provider = provider.as_str(), reason = %e, "inbound webhook refused");
        bad_signature()
    })?;
    require_json_content_type(&headers)?;
    let envelope: inbox::Envelope = parse_json(&body)?;
    match inbox::handle(&state.db, tenant_id, provider, event_id, &body, envelope).await? {
        Handled::Processed => Ok(Json(json!({"status": "processed"}))),
        Handled::Duplicate => Ok(Json(json!({"status": "duplicate"}))),
    }
}
