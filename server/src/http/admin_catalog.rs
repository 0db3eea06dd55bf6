//! The catalog's operator routes (API.md v1.1): the SKU CSV import and SKU
//! edits, each under the idempotency rules (`keyed_write!`).

use axum::extract::State;
use axum::response::Response;
use holdfast_protocol::admin::{ImportSummary, SkuPatch};
use holdfast_protocol::model::{Role, Sku};
use holdfast_protocol::problem::Problem;
use uuid::Uuid;

use super::mutations::{Sent, SentFile};
use super::{ApiPath, ApiResult};
use crate::auth::Caller;
use crate::master;
use crate::AppState;

/// Upserts SKUs from a CSV file, all or nothing.
#[utoipa::path(post, path = "/v1/admin/skus/import",
    request_body(content = String, content_type = "text/csv",
        description = "header `code,style,color,size,wholesale_price,msrp[,active]`, money in cents; up to 100,000 rows"),
    security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255)),
    responses((status = 200, body = ImportSummary),
              (status = 400, body = Problem), (status = 403, body = Problem),
              (status = 415, body = Problem),
              (status = 422, body = Problem, description = "`validation_failed` naming every bad line (nothing applied), or `idempotency_key_reused`")))]
pub(crate) async fn import_skus(
    State(state): State<AppState>,
    caller: Caller,
    sent: SentFile,
) -> ApiResult<Response> {
    caller.require(Role::Operator)?;
    let csv = sent.csv;
    let tenant = caller.tenant_id;
    keyed_write!(state, caller, sent.keyed, |tx| master::catalog::import(
        &mut tx, tenant, &csv
    ))
}

/// Changes a SKU's wholesale price, MSRP, code or whether it is sold.
#[utoipa::path(patch, path = "/v1/admin/skus/{id}", request_body = SkuPatch,
    security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255),
           ("id" = Uuid, Path)),
    responses((status = 200, body = Sku),
              (status = 400, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem), (status = 422, body = Problem)))]
pub(crate) async fn patch_sku(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    sent: Sent<SkuPatch>,
) -> ApiResult<Response> {
    caller.require(Role::Operator)?;
    let (keyed, patch) = sent.into_keyed();
    let tenant = caller.tenant_id;
    keyed_write!(state, caller, keyed, |tx| master::catalog::patch(
        &mut tx, tenant, id, patch
    ))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(import_skus, patch_sku))]
pub(crate) struct ApiDoc;
