//! Order reads: `GET /v1/orders`, `GET /v1/orders/{id}`, the order's
//! history, `GET /v1/orders/{id}/history`, and the orders a partner was never
//! told about, `GET /v1/orders/dead-lettered`.

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use holdfast_protocol::model::{DeadLetteredOrders, Order, OrderHistory, OrderStatus, OrdersPage};
use holdfast_protocol::problem::Problem;
use serde::Deserialize;
use uuid::Uuid;

use super::{cursor, ApiPath, ApiQuery};
use crate::auth::Caller;
use crate::error::Error;
use crate::http::ApiResult;
use crate::AppState;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListParams {
    /// draft, confirmed or cancelled.
    #[param(nullable = false)]
    status: Option<OrderStatus>,
    /// 1–500, default 50.
    #[param(nullable = false, minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// The `next` of the previous page.
    #[param(nullable = false)]
    after: Option<String>,
}

#[utoipa::path(get, operation_id = "list_orders", path = "/v1/orders", params(ListParams), security(("bearer" = [])),
    responses((status = 200, body = OrdersPage), (status = 400, body = Problem), (status = 401, body = Problem)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<OrdersPage>> {
    let limit = cursor::limit(params.limit, 50, 500)?;
    let after = params
        .after
        .as_deref()
        .map(|c| cursor::decode::<(DateTime<Utc>, Uuid)>("after", c))
        .transpose()?;
    // A read the replica may serve (`db/reads.rs`).
    let mut conn = state.reads.connection(&caller).await?;
    let mut tx = crate::db::begin_for_tenant_on(&mut conn, caller.tenant_id).await?;
    let mut orders =
        crate::db::orders::list(&mut tx, caller.tenant_id, params.status, after, limit + 1).await?;
    tx.commit().await?;
    let next = if orders.len() as i64 > limit {
        orders.truncate(limit as usize);
        orders.last().map(|o| cursor::encode(&(o.created_at, o.id)))
    } else {
        None
    };
    Ok(Json(OrdersPage { orders, next }))
}

#[utoipa::path(get, operation_id = "get_order", path = "/v1/orders/{id}", security(("bearer" = [])), params(("id" = Uuid, Path)),
    responses((status = 200, body = Order), (status = 404, body = Problem), (status = 401, body = Problem)))]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<Order>> {
    // A read the replica may serve (`db/reads.rs`).
    let mut conn = state.reads.connection(&caller).await?;
    let mut tx = crate::db::begin_for_tenant_on(&mut conn, caller.tenant_id).await?;
    let order = crate::db::orders::load(&mut tx, caller.tenant_id, id).await?;
    tx.commit().await?;
    order.map(Json).ok_or_else(|| Error::not_found("order"))
}

/// The order's history (API.md v1.1): one entry per version, oldest first.
///
/// Who made each change, the key of the request that made it, and what
/// became of the partner events it produced. Any role of the tenant may read
/// it; another tenant's order answers 404, as `GET /v1/orders/{id}` does.
#[utoipa::path(get, operation_id = "get_order_history", path = "/v1/orders/{id}/history", security(("bearer" = [])), params(("id" = Uuid, Path)),
    responses((status = 200, body = OrderHistory, description = "one entry per version of the order, oldest first"),
              (status = 404, body = Problem, description = "`not_found`: no such order in your tenant"),
              (status = 401, body = Problem)))]
pub(crate) async fn history(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<OrderHistory>> {
    // A read the replica may serve (`db/reads.rs`).
    let mut conn = state.reads.connection(&caller).await?;
    let mut tx = crate::db::begin_for_tenant_on(&mut conn, caller.tenant_id).await?;
    let history = crate::db::order_history::load(&mut tx, caller.tenant_id, id).await?;
    tx.commit().await?;
    history.map(Json).ok_or_else(|| Error::not_found("order"))
}

/// The tenant's orders with a partner delivery dead-lettered now.
///
/// Each with how many of its deliveries are dead-lettered and since when,
/// the longest waiting first. A delivery an operator requeued, or that has
/// been delivered since, no longer counts. Any role of the tenant may read
/// it: desks flag these orders.
#[utoipa::path(get, operation_id = "list_dead_lettered_orders", path = "/v1/orders/dead-lettered", security(("bearer" = [])),
    responses((status = 200, body = DeadLetteredOrders,
               description = "the orders with at least one dead-lettered partner delivery, by `oldest_at`"),
              (status = 401, body = Problem)))]
pub(crate) async fn dead_lettered(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<DeadLetteredOrders>> {
    // A read the replica may serve (`db/reads.rs`).
    let mut conn = state.reads.connection(&caller).await?;
    let mut tx = crate::db::begin_for_tenant_on(&mut conn, caller.tenant_id).await?;
    let orders = crate::db::deliveries::dead_lettered_orders(&mut tx, caller.tenant_id).await?;
    tx.commit().await?;
    Ok(Json(DeadLetteredOrders { orders }))
}
