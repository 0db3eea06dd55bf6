//! `POST /v1/webhooks/{tenant}/{provider}`: signed, not bearer-authenticated.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use holdfast_protocol::problem::{Problem, ProblemCode};
use holdfast_protocol::webhook;
use serde_json::Value;

use super::extract::{parse_json, require_json_content_type, ApiBytes};
use super::ApiPath;
use crate::error::Error;
use crate::http::ApiResult;
use crate::inbox::{self, Handled, Provider};
use crate::AppState;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

fn bad_signature() -> Error {
    // One answer for every verification failure: no oracle for forgers.
    Error::problem(
        ProblemCode::Unauthorized,
        "missing or invalid webhook signature or timestamp",
    )
}

/// An inbound event as providers send it (API.md, "Inbound webhooks");
/// `data`'s members depend on `type`. Providers may add members we do not use.
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub(crate) struct InboundEvent {
    /// `inventory.received`, `inventory.adjusted` or `payment.succeeded`.
    #[serde(rename = "type")]
    pub type_: String,
    #[schema(value_type = Object)]
    pub data: Value,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Ack {
    Processed,
    /// Already processed under this `webhook-id`; nothing was done again.
    Duplicate,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct WebhookAck {
    pub status: Ack,
}

#[utoipa::path(post, operation_id = "receive_inbound_webhook", path = "/v1/webhooks/{tenant}/{provider}", request_body = InboundEvent,
    params(("tenant" = String, Path), ("provider" = String, Path, description = "warehouse or payments"),
           ("webhook-id" = String, Header, description = "the event id; a redelivery carries the same one"),
           ("webhook-timestamp" = String, Header, description = "unix seconds; more than 5 minutes off is refused"),
           ("webhook-signature" = String, Header, description = "`v1,<base64 HMAC-SHA256>` with the tenant's inbound secret")),
    responses((status = 200, body = WebhookAck),
              (status = 401, body = Problem, description = "bad or missing signature, or timestamp too far off"),
              (status = 400, body = Problem), (status = 404, body = Problem),
              (status = 422, body = Problem),
              (status = 500, body = Problem, description = "our failure; the provider redelivers")))]
pub(crate) async fn receive(
    State(state): State<AppState>,
    ApiPath((tenant, provider)): ApiPath<(String, String)>,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<WebhookAck>> {
    let provider =
        Provider::parse(&provider).ok_or_else(|| Error::not_found("webhook provider"))?;
    let (tenant_id, secret) = inbox::secret_for(&state.db, &tenant, provider)
        .await?
        .ok_or_else(bad_signature)?;
    let key = webhook::parse_secret(&secret)
        .map_err(|e| Error::Internal(anyhow::anyhow!("stored inbound secret: {e}")))?;
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
    // A body we cannot read is refused and recorded by the inbox like any
    // other refusal (the signature showed it came from the provider).
    let envelope = parse_json::<InboundEvent>(&body)
        .map(|InboundEvent { type_, data }| inbox::Envelope { type_, data });
    match inbox::handle(&state.db, tenant_id, provider, event_id, &body, envelope).await? {
        Handled::Processed => Ok(Json(WebhookAck {
            status: Ack::Processed,
        })),
        Handled::Duplicate => Ok(Json(WebhookAck {
            status: Ack::Duplicate,
        })),
    }
}
