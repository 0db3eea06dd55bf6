//! Operator routes (role `operator`): inbound secrets, partners, deliveries.
//!
//! API.md lets admin routes carry an Idempotency-Key optionally; these routes
//! are naturally safe to retry (requeue, patch) or show their result (create
//! returns the new partner), so the key is accepted and not required.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use holdfast_protocol::model::Role;
use holdfast_protocol::problem::Problem;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{ApiJson, ApiPath, ApiQuery};
use crate::auth::Caller;
use crate::db::begin_for_tenant;
use crate::db::deliveries::{self, Delivery, DeliveryState, Stats};
use crate::db::partners::{self, Partner};
use crate::error::Error;
use crate::http::ApiResult;
use crate::master::partners::{self as master, NewPartner, PartnerChange};
use crate::relay::test_event::{self, TestResult};
use crate::AppState;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InboundSecretRequest {
    /// `warehouse` or `payments`.
    #[schema(pattern = "^(warehouse|payments)$")]
    provider: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct SecretResponse {
    /// Shown once; give it to the provider or partner.
    secret: String,
}

/// Issues (or replaces) the secret a provider signs inbound webhooks with.
#[utoipa::path(post, path = "/v1/admin/inbound-secrets", request_body = InboundSecretRequest,
    security(("bearer" = [])),
    responses((status = 200, body = SecretResponse), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 403, body = Problem)))]
pub(crate) async fn create_inbound_secret(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<InboundSecretRequest>,
) -> ApiResult<Json<SecretResponse>> {
    caller.require(Role::Operator)?;
    if !matches!(req.provider.as_str(), "warehouse" | "payments") {
        return Err(Error::validation(
            "provider",
            "must be `warehouse` or `payments`",
        ));
    }
    let secret = crate::auth::new_webhook_secret();
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    sqlx::query(
        "insert into inbound_secrets (tenant_id, provider, secret) values ($1, $2, $3)
         on conflict (tenant_id, provider) do update set secret = excluded.secret, created_at = now()",
    )
    .bind(caller.tenant_id)
    .bind(&req.provider)
    .bind(&secret)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    tracing::info!(provider = %req.provider, "inbound webhook secret issued");
    Ok(Json(SecretResponse { secret }))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreatePartner {
    /// 1–200 characters, not all blank.
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    name: String,
    /// http(s); must resolve to a public address unless the server allows
    /// private targets.
    url: String,
    /// Event types or `*` patterns, e.g. `["order.*", "invoice.paid"]`:
    /// 1–100 of `a-z . _ *` each.
    #[schema(min_items = 1)]
    event_types: Vec<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct CreatedPartner {
    id: Uuid,
    /// `whsec_…`: shown once, here.
    secret: String,
    partner: Partner,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PatchPartner {
    enabled: Option<bool>,
    url: Option<String>,
    #[schema(min_items = 1)]
    event_types: Option<Vec<String>>,
}

#[utoipa::path(post, path = "/v1/admin/partners", request_body = CreatePartner, security(("bearer" = [])),
    responses((status = 201, body = CreatedPartner), (status = 400, body = Problem), (status = 403, body = Problem)))]
pub(crate) async fn create_partner(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreatePartner>,
) -> ApiResult<(StatusCode, Json<CreatedPartner>)> {
    caller.require(Role::Operator)?;
    let new = NewPartner::check(
        &req.name,
        &req.url,
        req.event_types,
        state.allow_private_targets,
    )
    .await?;
    let secret = crate::auth::new_webhook_secret();
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    let partner = master::create_in_tx(&mut tx, caller.tenant_id, &new, &secret).await?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedPartner {
            id: partner.id,
            secret,
            partner,
        }),
    ))
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct PartnerList {
    partners: Vec<Partner>,
}

#[utoipa::path(get, path = "/v1/admin/partners", security(("bearer" = [])),
    responses((status = 200, body = PartnerList), (status = 403, body = Problem)))]
pub(crate) async fn list_partners(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<PartnerList>> {
    caller.require(Role::Operator)?;
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    let partners = partners::list(&mut tx, caller.tenant_id).await?;
    tx.commit().await?;
    Ok(Json(PartnerList { partners }))
}

#[utoipa::path(patch, path = "/v1/admin/partners/{id}", request_body = PatchPartner, security(("bearer" = [])),
    params(("id" = Uuid, Path)),
    responses((status = 200, body = Partner), (status = 400, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
pub(crate) async fn patch_partner(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(req): ApiJson<PatchPartner>,
) -> ApiResult<Json<Partner>> {
    caller.require(Role::Operator)?;
    let change = PartnerChange::check(
        req.enabled,
        req.url,
        req.event_types,
        state.allow_private_targets,
    )
    .await?;
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    let partner = master::patch_in_tx(&mut tx, caller.tenant_id, id, &change).await?;
    tx.commit().await?;
    Ok(Json(partner))
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct RotatedSecret {
    /// `whsec_…`: shown once, here.
    secret: String,
    /// Until when the previous secret keeps signing alongside (24 hours).
    previous_secret_expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[utoipa::path(post, operation_id = "rotate_partner_secret", path = "/v1/admin/partners/{id}/rotate-secret", security(("bearer" = [])),
    params(("id" = Uuid, Path)),
    responses((status = 200, body = RotatedSecret), (status = 403, body = Problem), (status = 404, body = Problem)))]
pub(crate) async fn rotate_secret(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<RotatedSecret>> {
    caller.require(Role::Operator)?;
    let secret = crate::auth::new_webhook_secret();
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    let partner = master::rotate_in_tx(&mut tx, caller.tenant_id, id, &secret).await?;
    tx.commit().await?;
    Ok(Json(RotatedSecret {
        secret,
        previous_secret_expires_at: partner.previous_secret_expires_at,
    }))
}

/// Deletes a partner with no pending deliveries; its delivered and
/// dead-lettered delivery records go with it. While deliveries are
/// pending: 422 `invalid_state` with `pending_deliveries`.
#[utoipa::path(delete, operation_id = "delete_partner", path = "/v1/admin/partners/{id}", security(("bearer" = [])),
    params(("id" = Uuid, Path)),
    responses((status = 204, description = "deleted"), (status = 403, body = Problem),
              (status = 404, body = Problem), (status = 422, body = Problem)))]
pub(crate) async fn delete_partner(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<StatusCode> {
    caller.require(Role::Operator)?;
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    master::delete_in_tx(&mut tx, caller.tenant_id, id).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sends one signed `holdfast.test` event to this partner only, now,
/// whatever its subscriptions (paused or not), and answers what the partner
/// answered. It never enters the outbox: nobody else receives it, and it
/// is not retried.
#[utoipa::path(post, operation_id = "send_partner_test_event", path = "/v1/admin/partners/{id}/test-event", security(("bearer" = [])),
    params(("id" = Uuid, Path)),
    responses((status = 200, body = TestResult), (status = 403, body = Problem), (status = 404, body = Problem)))]
pub(crate) async fn send_test_event(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<TestResult>> {
    caller.require(Role::Operator)?;
    let result = test_event_for(&state, &caller, id)
        .await?
        .ok_or_else(|| Error::not_found("partner"))?;
    Ok(Json(result))
}

/// The test event for one partner of the caller's tenant (None: no such
/// partner). Shared with the admin page.
pub(crate) async fn test_event_for(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
) -> Result<Option<TestResult>, Error> {
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    let partner = partners::signing(&mut tx, caller.tenant_id, id).await?;
    tx.commit().await?;
    let Some(partner) = partner else {
        return Ok(None);
    };
    let client = crate::relay::deliver::client(state.relay_timeout, state.allow_private_targets)
        .map_err(anyhow::Error::from)?;
    let result = test_event::send(
        &client,
        &partner,
        state.allow_private_targets,
        caller.tenant_id,
        &caller.display_name,
    )
    .await;
    tracing::info!(partner = %id, webhook_id = %result.webhook_id, status = ?result.status,
        latency_ms = result.latency_ms, failed = result.error.is_some(), "test event sent by an operator");
    Ok(Some(result))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeliveryParams {
    #[param(nullable = false)]
    state: Option<DeliveryState>,
    /// 1–1000, default 100.
    #[param(nullable = false, minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct DeliveryList {
    deliveries: Vec<Delivery>,
}

#[utoipa::path(get, path = "/v1/admin/deliveries", params(DeliveryParams), security(("bearer" = [])),
    responses((status = 200, body = DeliveryList), (status = 403, body = Problem)))]
pub(crate) async fn list_deliveries(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<DeliveryParams>,
) -> ApiResult<Json<DeliveryList>> {
    caller.require(Role::Operator)?;
    let limit = super::cursor::limit(params.limit, 100, 1000)?;
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    let deliveries = deliveries::list(&mut tx, caller.tenant_id, params.state, limit).await?;
    tx.commit().await?;
    Ok(Json(DeliveryList { deliveries }))
}

/// A requeued delivery: due now, attempts reset.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct Requeued {
    id: i64,
    state: DeliveryState,
}

#[utoipa::path(post, operation_id = "requeue_delivery", path = "/v1/admin/deliveries/{id}/requeue", security(("bearer" = [])),
    params(("id" = i64, Path)),
    responses((status = 200, body = Requeued), (status = 404, body = Problem), (status = 403, body = Problem)))]
pub(crate) async fn requeue(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Json<Requeued>> {
    caller.require(Role::Operator)?;
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    let requeued = deliveries::requeue(&mut tx, caller.tenant_id, id).await?;
    tx.commit().await?;
    if !requeued {
        return Err(Error::not_found("pending or dead delivery"));
    }
    tracing::info!(delivery = id, "delivery requeued by an operator");
    Ok(Json(Requeued {
        id,
        state: DeliveryState::Pending,
    }))
}

#[utoipa::path(get, operation_id = "relay_stats", path = "/v1/admin/stats", security(("bearer" = [])),
    responses((status = 200, body = Stats), (status = 403, body = Problem)))]
pub(crate) async fn stats(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Stats>> {
    caller.require(Role::Operator)?;
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    let stats = deliveries::stats(&mut tx, caller.tenant_id).await?;
    tx.commit().await?;
    Ok(Json(stats))
}
