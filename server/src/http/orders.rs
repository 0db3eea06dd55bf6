//! Order reads: `GET /v1/orders` and `GET /v1/orders/{id}`.

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use holdfast_protocol::model::{Order, OrderStatus, OrdersPage};
use holdfast_protocol::problem::Problem;
use serde::Deserialize;
use uuid::Uuid;

use super::{cursor, ApiPath, ApiQuery, Caller};
use crate::error::{ApiError, ApiResult};
use crate::AppState;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// draft, confirmed or cancelled.
    status: Option<OrderStatus>,
    /// 1–500, default 50.
    limit: Option<i64>,
    /// The `next` of the previous page.
    after: Option<String>,
}

#[utoipa::path(get, path = "/v1/orders", params(ListParams), security(("bearer" = [])),
    responses((status = 200, body = OrdersPage), (status = 400, body = Problem), (status = 401, body = Problem)))]
pub async fn list(
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
    let mut conn = state.db.acquire().await?;
    let mut orders =
        crate::db::orders::list(&mut conn, caller.tenant_id, params.status, after, limit + 1)
            .await?;
    let next = if orders.len() as i64 > limit {
        orders.truncate(limit as usize);
        orders.last().map(|o| cursor::encode(&(o.created_at, o.id)))
    } else {
        None
    };
    Ok(Json(OrdersPage { orders, next }))
}

#[utoipa::path(get, path = "/v1/orders/{id}", security(("bearer" = [])),
    responses((status = 200, body = Order), (status = 404, body = Problem), (status = 401, body = Problem)))]
pub async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<Order>> {
    let mut conn = state.db.acquire().await?;
    crate::db::orders::load(&mut conn, caller.tenant_id, id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found("order"))
}
