//! SKU reads: search with paging, and one SKU with its live position.

use axum::extract::State;
use axum::Json;
use holdfast_protocol::model::{Sku, SkusPage};
use holdfast_protocol::problem::Problem;
use serde::Deserialize;
use uuid::Uuid;

use super::{cursor, ApiPath, ApiQuery};
use crate::auth::Caller;
use crate::db::skus::SkuKey;
use crate::error::Error;
use crate::http::ApiResult;
use crate::AppState;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListParams {
    /// Words that must each match the style, colour or size.
    #[param(nullable = false)]
    q: Option<String>,
    /// 1–1000, default 100.
    #[param(nullable = false, minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// The `next` of the previous page.
    #[param(nullable = false)]
    after: Option<String>,
}

#[utoipa::path(get, operation_id = "list_skus", path = "/v1/skus", params(ListParams), security(("bearer" = [])),
    responses((status = 200, body = SkusPage), (status = 400, body = Problem), (status = 401, body = Problem)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<SkusPage>> {
    let limit = cursor::limit(params.limit, 100, 1000)?;
    let after = params
        .after
        .as_deref()
        .map(|c| cursor::decode::<SkuKey>("after", c))
        .transpose()?;
    // A read the replica may serve (`db/reads.rs`).
    let mut conn = state.reads.connection(&caller).await?;
    let mut tx = crate::db::begin_for_tenant_on(&mut conn, caller.tenant_id).await?;
    let mut skus = crate::db::skus::search(
        &mut tx,
        caller.tenant_id,
        params.q.as_deref(),
        after.as_ref(),
        limit + 1,
    )
    .await?;
    tx.commit().await?;
    let next = if skus.len() as i64 > limit {
        skus.truncate(limit as usize);
        skus.last()
            .map(|s| cursor::encode(&(&s.style, &s.color, &s.size)))
    } else {
        None
    };
    Ok(Json(SkusPage { skus, next }))
}

#[utoipa::path(get, operation_id = "get_sku", path = "/v1/skus/{id}", security(("bearer" = [])), params(("id" = Uuid, Path)),
    responses((status = 200, body = Sku), (status = 404, body = Problem), (status = 401, body = Problem)))]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<Sku>> {
    // A read the replica may serve (`db/reads.rs`).
    let mut conn = state.reads.connection(&caller).await?;
    let mut tx = crate::db::begin_for_tenant_on(&mut conn, caller.tenant_id).await?;
    let sku = crate::db::skus::load(&mut tx, caller.tenant_id, id).await?;
    tx.commit().await?;
    sku.map(Json).ok_or_else(|| Error::not_found("SKU"))
}
