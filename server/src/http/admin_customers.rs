//! Customers and price lists over HTTP (API.md v1.1): the operator routes
//! that create, edit and import them, each under the idempotency rules
//! (`keyed_write!`), and `GET /v1/price-lists/{id}` for any role. The logic
//! is `master::customers` and `master::price_lists`.

use axum::extract::{FromRequest, Request as HttpRequest, State};
use axum::http::header;
use axum::response::Response;
use axum::Json;
use holdfast_protocol::admin::{
    CreateCustomer, CreatePriceList, ImportSummary, PatchCustomer, PriceListEntries,
    PriceListPrices,
};
use holdfast_protocol::model::{Customer, PriceList, Role};
use holdfast_protocol::problem::Problem;
use uuid::Uuid;

use super::mutations::{Sent, SentFile};
use super::{ApiPath, ApiResult};
use crate::auth::Caller;
use crate::error::Error;
use crate::master;
use crate::AppState;

/// Creates a customer (active, on the given price list or on wholesale prices).
#[utoipa::path(post, path = "/v1/admin/customers", request_body = CreateCustomer,
    security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255)),
    responses((status = 201, body = Customer),
              (status = 400, body = Problem, description = "`validation_failed` (a name the tenant already has is one, on `name`)"),
              (status = 403, body = Problem),
              (status = 404, body = Problem, description = "no such price list"),
              (status = 422, body = Problem, description = "`idempotency_key_reused`")))]
pub(crate) async fn create_customer(
    State(state): State<AppState>,
    caller: Caller,
    sent: Sent<CreateCustomer>,
) -> ApiResult<Response> {
    caller.require(Role::Operator)?;
    let (keyed, body) = sent.into_keyed();
    let tenant = caller.tenant_id;
    keyed_write!(state, caller, keyed, |tx| master::customers::create(
        &mut tx, tenant, body
    ))
}

/// Edits a customer: name, credit limit, price list, contact, or whether it
/// takes new orders (`active`; its open orders keep working either way).
#[utoipa::path(patch, path = "/v1/admin/customers/{id}", request_body = PatchCustomer,
    security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255),
           ("id" = Uuid, Path)),
    responses((status = 200, body = Customer),
              (status = 400, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem, description = "no such customer or price list"),
              (status = 422, body = Problem)))]
pub(crate) async fn patch_customer(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    sent: Sent<PatchCustomer>,
) -> ApiResult<Response> {
    caller.require(Role::Operator)?;
    let (keyed, patch) = sent.into_keyed();
    let tenant = caller.tenant_id;
    keyed_write!(state, caller, keyed, |tx| master::customers::patch(
        &mut tx, tenant, id, patch
    ))
}

/// Upserts customers by name from a CSV file, all or nothing.
#[utoipa::path(post, path = "/v1/admin/customers/import",
    request_body(content = String, content_type = "text/csv",
        description = "header `name,credit_limit,price_list,email,phone`; `price_list` is a price list's name, money in cents, empty = none"),
    security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255)),
    responses((status = 200, body = ImportSummary),
              (status = 400, body = Problem), (status = 403, body = Problem),
              (status = 415, body = Problem),
              (status = 422, body = Problem, description = "`validation_failed` naming every bad line (nothing applied), or `idempotency_key_reused`")))]
pub(crate) async fn import_customers(
    State(state): State<AppState>,
    caller: Caller,
    sent: SentFile,
) -> ApiResult<Response> {
    caller.require(Role::Operator)?;
    let csv = sent.csv;
    let tenant = caller.tenant_id;
    keyed_write!(state, caller, sent.keyed, |tx| master::customers::import(
        &mut tx, tenant, &csv
    ))
}

/// Creates an empty price list.
#[utoipa::path(post, path = "/v1/admin/price-lists", request_body = CreatePriceList,
    security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255)),
    responses((status = 201, body = PriceList),
              (status = 400, body = Problem), (status = 403, body = Problem),
              (status = 422, body = Problem, description = "`idempotency_key_reused`")))]
pub(crate) async fn create_price_list(
    State(state): State<AppState>,
    caller: Caller,
    sent: Sent<CreatePriceList>,
) -> ApiResult<Response> {
    caller.require(Role::Operator)?;
    let (keyed, body) = sent.into_keyed();
    let tenant = caller.tenant_id;
    keyed_write!(state, caller, keyed, |tx| master::price_lists::create(
        &mut tx, tenant, body
    ))
}

/// Replaces a price list's entries, from JSON or from a CSV file.
#[utoipa::path(put, operation_id = "put_price_list_prices", path = "/v1/admin/price-lists/{id}/prices",
    request_body(content(
        (PriceListPrices = "application/json"),
        (String = "text/csv")),
        description = "JSON `{\"prices\": [{\"sku_id\", \"price\"}]}`, or CSV `code,price` by the SKUs' codes"),
    security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255),
           ("id" = Uuid, Path)),
    responses((status = 200, body = PriceListEntries),
              (status = 400, body = Problem, description = "`validation_failed` naming every bad entry (JSON)"),
              (status = 403, body = Problem),
              (status = 404, body = Problem),
              (status = 415, body = Problem),
              (status = 422, body = Problem, description = "`validation_failed` naming every bad line of a CSV file (nothing applied), or `idempotency_key_reused`")))]
pub(crate) async fn put_prices(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    req: HttpRequest,
) -> ApiResult<Response> {
    caller.require(Role::Operator)?;
    let tenant = caller.tenant_id;
    let is_csv = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("text/csv"));
    if is_csv {
        let sent = SentFile::from_request(req, &state).await?;
        let csv = sent.csv;
        keyed_write!(state, caller, sent.keyed, |tx| {
            master::price_lists::replace_prices_csv(&mut tx, tenant, id, &csv)
        })
    } else {
        let sent = Sent::<PriceListPrices>::from_request(req, &state).await?;
        let (keyed, body) = sent.into_keyed();
        keyed_write!(state, caller, keyed, |tx| {
            master::price_lists::replace_prices(&mut tx, tenant, id, body.prices)
        })
    }
}

/// A price list with its prices (any role: a desk shows what a customer pays).
#[utoipa::path(get, path = "/v1/price-lists/{id}", security(("bearer" = [])),
    params(("id" = Uuid, Path)),
    responses((status = 200, body = PriceList),
              (status = 401, body = Problem), (status = 404, body = Problem)))]
pub(crate) async fn get_price_list(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<PriceList>> {
    let mut conn = state.reads.connection(&caller).await?;
    let mut tx = crate::db::begin_for_tenant_on(&mut conn, caller.tenant_id).await?;
    let list = crate::db::price_lists::load(&mut tx, caller.tenant_id, id).await?;
    tx.commit().await?;
    list.map(Json).ok_or_else(|| Error::not_found("price list"))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    create_customer,
    patch_customer,
    import_customers,
    create_price_list,
    put_prices,
    get_price_list
))]
pub(crate) struct ApiDoc;
