//! `GET /v1/customers`.

use axum::extract::State;
use axum::Json;
use holdfast_protocol::model::CustomerList;
use holdfast_protocol::problem::Problem;

use crate::auth::Caller;
use crate::http::ApiResult;
use crate::AppState;

#[utoipa::path(get, operation_id = "list_customers", path = "/v1/customers", security(("bearer" = [])),
    responses((status = 200, body = CustomerList), (status = 401, body = Problem)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<CustomerList>> {
    // A read the replica may serve (`db/reads.rs`).
    let mut conn = state.reads.connection(&caller).await?;
    let mut tx = crate::db::begin_for_tenant_on(&mut conn, caller.tenant_id).await?;
    let customers = crate::db::customers::list(&mut tx, caller.tenant_id).await?;
    tx.commit().await?;
    Ok(Json(CustomerList { customers }))
}
