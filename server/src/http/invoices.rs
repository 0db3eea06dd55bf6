//! `GET /v1/invoices/{id}`.

use axum::extract::State;
use axum::Json;
use holdfast_protocol::model::Invoice;
use holdfast_protocol::problem::Problem;
use uuid::Uuid;

use super::ApiPath;
use crate::auth::Caller;
use crate::error::Error;
use crate::http::ApiResult;
use crate::AppState;

#[utoipa::path(get, operation_id = "get_invoice", path = "/v1/invoices/{id}", security(("bearer" = [])), params(("id" = Uuid, Path)),
    responses((status = 200, body = Invoice), (status = 404, body = Problem), (status = 401, body = Problem)))]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<Invoice>> {
    // A read the replica may serve (`db/reads.rs`).
    let mut conn = state.reads.connection(&caller).await?;
    let mut tx = crate::db::begin_for_tenant_on(&mut conn, caller.tenant_id).await?;
    let invoice = crate::db::invoices::load(&mut tx, caller.tenant_id, id).await?;
    tx.commit().await?;
    invoice.map(Json).ok_or_else(|| Error::not_found("invoice"))
}
