//! `GET /v1/admin/inbound-events`: what providers sent and what became of
//! it, refusals with their reason (issue 15 item 3); and
//! `GET /v1/admin/payment-mismatches`: invoices partly or over-paid.

use axum::extract::State;
use axum::Json;
use holdfast_protocol::model::Role;
use holdfast_protocol::problem::Problem;
use serde::{Deserialize, Serialize};

use super::extract::ApiQuery;
use super::ApiResult;
use crate::auth::Caller;
use crate::db::begin_for_tenant;
use crate::db::inbound_events::{self, InboundEvent, InboundOutcome, PaymentMismatch};
use crate::error::Error;
use crate::AppState;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct InboundParams {
    /// `warehouse` or `payments`.
    #[param(nullable = false)]
    provider: Option<String>,
    #[param(nullable = false)]
    outcome: Option<InboundOutcome>,
    /// One event by its `webhook-id`.
    #[param(nullable = false)]
    event_id: Option<String>,
    /// 1–1000, default 100.
    #[param(nullable = false, minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct InboundEventList {
    events: Vec<InboundEvent>,
}

#[utoipa::path(get, operation_id = "list_inbound_events", path = "/v1/admin/inbound-events", params(InboundParams),
    security(("bearer" = [])),
    responses((status = 200, body = InboundEventList), (status = 400, body = Problem), (status = 403, body = Problem)))]
pub(crate) async fn list_inbound_events(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<InboundParams>,
) -> ApiResult<Json<InboundEventList>> {
    caller.require(Role::Operator)?;
    let limit = super::cursor::limit(params.limit, 100, 1000)?;
    if let Some(p) = params.provider.as_deref() {
        if crate::inbox::Provider::parse(p).is_none() {
            return Err(Error::validation("provider", "warehouse or payments"));
        }
    }
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    let events = inbound_events::list(
        &mut tx,
        caller.tenant_id,
        params.provider.as_deref(),
        params.outcome,
        params.event_id.as_deref(),
        limit,
    )
    .await?;
    tx.commit().await?;
    Ok(Json(InboundEventList { events }))
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct PaymentMismatchList {
    invoices: Vec<PaymentMismatch>,
}

#[utoipa::path(get, operation_id = "list_payment_mismatches", path = "/v1/admin/payment-mismatches",
    security(("bearer" = [])),
    responses((status = 200, body = PaymentMismatchList), (status = 403, body = Problem)))]
pub(crate) async fn list_payment_mismatches(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<PaymentMismatchList>> {
    caller.require(Role::Operator)?;
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    let invoices = inbound_events::payment_mismatches(&mut tx, caller.tenant_id, 1000).await?;
    tx.commit().await?;
    Ok(Json(PaymentMismatchList { invoices }))
}
