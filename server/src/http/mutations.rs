//! The mutation routes and batch push: thin transport over the engine.
//!
//! Each REST route extracts the same four things (caller, key, path, JSON
//! body) and hands them to [`execute`]; the per-route functions exist so the
//! OpenAPI document can describe each body.

use axum::body::Bytes;
use axum::extract::{OriginalUri, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use holdfast_protocol::model::{
    AddLine, AllocationResult, BaseVersion, ChangeLine, CreateOrder, Order, PatchOrder,
    PushRequest, PushResponse, Quantity,
};
use holdfast_protocol::problem::{Problem, ProblemCode, PROBLEM_CONTENT_TYPE};

use super::extract::{parse_json, parse_json_keeping_nul, require_json_content_type, ApiBytes};
use super::Caller;
use crate::engine::{self, batch, Outcome, Request, Step};
use crate::error::{ApiError, ApiResult};
use crate::AppState;

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const REPLAYED: &str = "idempotent-replayed";

/// One REST mutation: cheap checks first (they never burn a key), then one
/// transaction through the engine.
async fn execute(
    state: AppState,
    caller: Caller,
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let key = headers
        .get(IDEMPOTENCY_KEY)
        .ok_or_else(|| {
            ApiError::problem(
                ProblemCode::IdempotencyKeyMissing,
                "mutations need an Idempotency-Key header",
            )
        })?
        .to_str()
        .map_err(|_| {
            ApiError::problem(
                ProblemCode::IdempotencyKeyInvalid,
                "Idempotency-Key must be visible ASCII",
            )
        })?
        .to_owned();
    require_json_content_type(&headers)?;
    let body: serde_json::Value = parse_json(&body)?;
    let req = Request {
        key,
        method: method.to_string(),
        path: uri.0.path().to_owned(),
        body,
    };
    let mut tx = crate::db::begin_for_tenant(&state.db, caller.tenant_id).await?;
    let outcome = match engine::execute_in_tx(&mut tx, &caller, &req).await? {
        Step::Keep(outcome) => {
            tx.commit().await?;
            outcome
        }
        Step::Discard(outcome) => {
            tx.rollback().await?;
            outcome
        }
    };
    Ok(respond(&outcome))
}

fn respond(outcome: &Outcome) -> Response {
    let status = StatusCode::from_u16(outcome.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, outcome.body.clone()).into_response();
    let headers = response.headers_mut();
    let content_type = if outcome.is_problem() {
        PROBLEM_CONTENT_TYPE
    } else {
        "application/json"
    };
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if outcome.replayed {
        headers.insert(REPLAYED, HeaderValue::from_static("true"));
    }
    if outcome.status == 409 && is_in_flight(outcome) {
        headers.insert(
            header::RETRY_AFTER,
            HeaderValue::from(engine::RETRY_AFTER_SECS),
        );
    }
    response
}

fn is_in_flight(outcome: &Outcome) -> bool {
    serde_json::from_slice::<Problem>(&outcome.body)
        .is_ok_and(|p| p.code == ProblemCode::RequestInFlight)
}

macro_rules! mutation_route {
    ($name:ident, $method:ident, $path:literal, $body:ty, $status:literal, $resp:ty $(, $param:literal)*) => {
        #[utoipa::path($method, path = $path, request_body = $body, security(("bearer" = [])),
            params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255,
                    description = "one key per intention, 1–255 characters"),
                   $(($param = Uuid, Path)),*),
            responses((status = $status, body = $resp,
                       headers(("Idempotent-Replayed" = String, description = "`true` on a replay of the stored answer"))),
                      (status = 400, body = Problem, description = "`malformed_json`, `validation_failed`, `idempotency_key_missing` or `idempotency_key_invalid`"),
                      (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem),
                      (status = 409, body = Problem, description = "`version_conflict`, or `request_in_flight` with Retry-After",
                       headers(("Retry-After" = u64, description = "seconds; only with `request_in_flight`"))),
                      (status = 413, body = Problem), (status = 415, body = Problem),
                      (status = 422, body = Problem, description = "`idempotency_key_reused`, `insufficient_ats`, `over_allocation`, `invalid_state` or `credit_limit_exceeded`")))]
        pub async fn $name(
            State(state): State<AppState>,
            caller: Caller,
            method: Method,
            uri: OriginalUri,
            headers: HeaderMap,
            ApiBytes(body): ApiBytes,
        ) -> ApiResult<Response> {
            execute(state, caller, method, uri, headers, body).await
        }
    };
}

mutation_route!(create_order, post, "/v1/orders", CreateOrder, 201, Order);
mutation_route!(
    patch_order,
    patch,
    "/v1/orders/{id}",
    PatchOrder,
    200,
    Order,
    "id"
);
mutation_route!(
    add_line,
    post,
    "/v1/orders/{id}/lines",
    AddLine,
    201,
    Order,
    "id"
);
mutation_route!(
    change_line,
    patch,
    "/v1/orders/{id}/lines/{line_id}",
    ChangeLine,
    200,
    Order,
    "id",
    "line_id"
);
mutation_route!(
    remove_line,
    post,
    "/v1/orders/{id}/lines/{line_id}/remove",
    BaseVersion,
    200,
    Order,
    "id",
    "line_id"
);
mutation_route!(
    allocate,
    post,
    "/v1/orders/{id}/lines/{line_id}/allocate",
    Quantity,
    200,
    AllocationResult,
    "id",
    "line_id"
);
mutation_route!(
    release,
    post,
    "/v1/orders/{id}/lines/{line_id}/release",
    Quantity,
    200,
    AllocationResult,
    "id",
    "line_id"
);
mutation_route!(
    confirm,
    post,
    "/v1/orders/{id}/confirm",
    BaseVersion,
    200,
    Order,
    "id"
);
mutation_route!(
    cancel,
    post,
    "/v1/orders/{id}/cancel",
    BaseVersion,
    200,
    Order,
    "id"
);

/// The desktop's transport: up to 500 mutations, one result each, in order.
#[utoipa::path(post, path = "/v1/sync/push", request_body = PushRequest, security(("bearer" = [])),
    responses((status = 200, body = PushResponse), (status = 400, body = Problem), (status = 401, body = Problem)))]
pub async fn push(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<PushResponse>> {
    require_json_content_type(&headers)?;
    // Items are judged one by one (engine::prepare): a NUL in one item is
    // that item's 400, not the whole batch's.
    let req: PushRequest = parse_json_keeping_nul(&body)?;
    if req.mutations.is_empty() || req.mutations.len() > batch::MAX_ITEMS {
        return Err(ApiError::validation(
            "mutations",
            format!("must hold 1–{} items", batch::MAX_ITEMS),
        ));
    }
    let results = batch::push(&state.db, &caller, req.mutations).await?;
    Ok(Json(PushResponse { results }))
}
