//! The mutation routes and batch push: thin transport over the engine.
//!
//! Each REST route extracts its caller, its path's ids and a [`Sent`] body,
//! builds the [`Mutation`] they name and hands it to the engine in one
//! transaction; batch push hands each item to the engine to parse. The
//! per-route functions exist so the OpenAPI document can describe each body.

use axum::body::Bytes;
use axum::extract::{FromRequest, OriginalUri, Request as HttpRequest, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use holdfast_protocol::canonical::request_fingerprint;
use holdfast_protocol::json;
use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::model::{
    AddLine, AllocationResult, BaseVersion, ChangeLine, CreateOrder, Order, PatchOrder,
    PushRequest, PushResponse, Quantity,
};
use holdfast_protocol::mutation::Mutation;
use holdfast_protocol::problem::{Problem, ProblemCode, PROBLEM_CONTENT_TYPE};
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::extract::{
    parse_json, parse_json_keeping_nul, read_body, require_json_content_type, ApiBytes,
    MutationCaller,
};
use super::{ApiPath, ApiResult};
use crate::auth::Caller;
use crate::engine::{self, batch, Executed, Outcome, Request, Step};
use crate::error::Error;
use crate::AppState;

pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub(crate) const REPLAYED: &str = "idempotent-replayed";

/// A REST mutation's body as sent: its key (checked here, once), its typed
/// body and API.md's fingerprint of the request. The cheap checks run in the
/// order API.md's table lists them, and none of them burns a key.
pub(crate) struct Sent<B> {
    key: IdempotencyKey,
    body: B,
    fingerprint: String,
}

impl<B> Sent<B> {
    /// A master-data write's key and fingerprint, and its body.
    pub(crate) fn into_keyed(self) -> (crate::master::Keyed, B) {
        let keyed = crate::master::Keyed {
            key: self.key,
            fingerprint: self.fingerprint,
        };
        (keyed, self.body)
    }

    fn into_request(self, mutation: impl FnOnce(B) -> Mutation) -> Request {
        Request {
            key: self.key,
            mutation: mutation(self.body),
            fingerprint: self.fingerprint,
        }
    }
}

impl<S: Send + Sync, B: DeserializeOwned> FromRequest<S> for Sent<B> {
    type Rejection = Error;

    async fn from_request(req: HttpRequest, state: &S) -> Result<Self, Self::Rejection> {
        let method = req.method().to_string();
        let path = match req.extensions().get::<OriginalUri>() {
            Some(OriginalUri(uri)) => uri.path().to_owned(),
            None => req.uri().path().to_owned(),
        };
        let key = required_key(req.headers())?;
        require_json_content_type(req.headers())?;
        let bytes = read_body(req, state).await?;
        let value: serde_json::Value = parse_json(&bytes)?;
        let body = json::typed(&value)?;
        Ok(Sent {
            key,
            body,
            fingerprint: request_fingerprint(&method, &path, &value),
        })
    }
}

/// The request's `Idempotency-Key`, checked (API.md: missing → 400
/// `idempotency_key_missing`, empty or too long → `idempotency_key_invalid`).
fn required_key(headers: &HeaderMap) -> Result<IdempotencyKey, Error> {
    let raw = headers
        .get(IDEMPOTENCY_KEY)
        .ok_or_else(|| {
            Error::problem(
                ProblemCode::IdempotencyKeyMissing,
                "this write needs an Idempotency-Key header",
            )
        })?
        .to_str()
        .map_err(|_| {
            Error::problem(
                ProblemCode::IdempotencyKeyInvalid,
                "Idempotency-Key must be visible ASCII",
            )
        })?;
    IdempotencyKey::new(raw).map_err(|e| Error::from(e.to_problem()))
}

/// `Holdfast-History`, if sent.
fn named_history(headers: &HeaderMap) -> Result<Option<Uuid>, Error> {
    let Some(raw) = headers.get(HISTORY) else {
        return Ok(None);
    };
    raw.to_str()
        .ok()
        .and_then(|s| Uuid::parse_str(s.trim()).ok())
        .map(Some)
        .ok_or_else(|| Error::validation("Holdfast-History", "not a history this server issued"))
}

/// A master-data upload: a CSV file (`text/csv`) with its key and
/// fingerprint, which is over the file's exact bytes.
pub(crate) struct SentFile {
    pub(crate) keyed: crate::master::Keyed,
    pub(crate) csv: Bytes,
}

impl<S: Send + Sync> FromRequest<S> for SentFile {
    type Rejection = Error;

    async fn from_request(req: HttpRequest, state: &S) -> Result<Self, Self::Rejection> {
        let method = req.method().to_string();
        let path = match req.extensions().get::<OriginalUri>() {
            Some(OriginalUri(uri)) => uri.path().to_owned(),
            None => req.uri().path().to_owned(),
        };
        let key = required_key(req.headers())?;
        let csv = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("text/csv"));
        if !csv {
            return Err(Error::problem(
                ProblemCode::UnsupportedMediaType,
                "send the file as Content-Type: text/csv",
            ));
        }
        let bytes = read_body(req, state).await?;
        let fingerprint =
            holdfast_protocol::canonical::raw_request_fingerprint(&method, &path, &bytes);
        Ok(SentFile {
            keyed: crate::master::Keyed { key, fingerprint },
            csv: bytes,
        })
    }
}

/// One REST mutation in one transaction through the engine: the claim, its
/// first statement, binds the transaction to the tenant and proves a caller
/// taken from the token cache (`engine::execute_unbound_in_tx`). A request
/// refused before that (its path, body or key) is refused only once the
/// caller is proved, so a dead token is a 401 whatever else is wrong.
async fn execute(
    state: AppState,
    caller: MutationCaller,
    req: Result<Request, Error>,
) -> ApiResult<Response> {
    let req = match req {
        Ok(req) => req,
        Err(refused) => {
            caller.prove(&state).await?;
            return Err(refused);
        }
    };
    let mut caller = caller;
    #[cfg(not(feature = "broken-allocation"))]
    if let Some(outcome) = engine::known::try_move(
        &state.warm,
        &state.known,
        &caller.caller,
        !caller.proved,
        &req,
    )
    .await?
    {
        return Ok(respond(&outcome));
    }
    loop {
        let mut tx = state.db.begin().await?;
        let executed =
            engine::execute_unbound_in_tx(&mut tx, &caller.caller, !caller.proved, &req).await?;
        let outcome = match executed {
            Executed::Step(Step::Keep(outcome)) => {
                tx.commit().await?;
                outcome
            }
            Executed::Step(Step::Discard(outcome)) => {
                tx.rollback().await?;
                outcome
            }
            Executed::Unproved if !caller.proved => {
                tx.rollback().await?;
                caller = caller.prove(&state).await?;
                continue;
            }
            Executed::Unproved => {
                return Err(Error::Internal(anyhow::anyhow!(
                    "idempotency key {} claimed by no one and answered by no one",
                    req.key
                )));
            }
        };
        #[cfg(not(feature = "broken-allocation"))]
        state
            .known
            .learn(caller.caller.tenant_id, &req.mutation, &outcome);
        return Ok(respond(&outcome));
    }
}

pub(crate) fn respond(outcome: &Outcome) -> Response {
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

/// A mutation route: its OpenAPI description, and a handler that builds the
/// route's [`Mutation`] from the path's ids and the typed body.
macro_rules! mutation_route {
    (@doc $method:ident, $path:literal, $body_ty:ty, $status:literal, $resp:ty, [$($param:literal),*], $handler:item) => {
        #[utoipa::path($method, path = $path, request_body = $body_ty, security(("bearer" = [])),
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
        $handler
    };
    // A route whose path names the order (and line): `ids` binds them.
    ($name:ident, $method:ident, $path:literal, $body_ty:ty, $status:literal, $resp:ty,
     $ids:tt: $ids_ty:ty, $body:pat => $build:expr, [$($param:literal),*]) => {
        mutation_route!(@doc $method, $path, $body_ty, $status, $resp, [$($param),*],
            pub(crate) async fn $name(
                State(state): State<AppState>,
                caller: MutationCaller,
                ids: Result<ApiPath<$ids_ty>, Error>,
                sent: Result<Sent<$body_ty>, Error>,
            ) -> ApiResult<Response> {
                let req = ids.and_then(|ApiPath($ids)| {
                    Ok(sent?.into_request(|$body: $body_ty| $build))
                });
                execute(state, caller, req).await
            });
    };
}

mutation_route!(@doc post, "/v1/orders", CreateOrder, 201, Order, [],
pub(crate) async fn create_order(
    State(state): State<AppState>,
    caller: MutationCaller,
    sent: Result<Sent<CreateOrder>, Error>,
) -> ApiResult<Response> {
    let req = sent.map(|sent| sent.into_request(|b| Mutation::CreateOrder {
        order_id: b.id,
        customer_id: b.customer_id,
        customer_po: b.customer_po,
        ship_window_start: b.ship_window_start,
        ship_window_end: b.ship_window_end,
        notes: b.notes,
    }));
    execute(state, caller, req).await
});
mutation_route!(patch_order, patch, "/v1/orders/{id}", PatchOrder, 200, Order,
    order_id: Uuid, PatchOrder { base_version, set } =>
        Mutation::PatchOrder { order_id, base_version, set },
    ["id"]);
mutation_route!(add_line, post, "/v1/orders/{id}/lines", AddLine, 201, Order,
    order_id: Uuid, AddLine { id, sku_id, qty_ordered, base_version } =>
        Mutation::AddLine { order_id, line_id: id, sku_id, qty_ordered, base_version },
    ["id"]);
mutation_route!(change_line, patch, "/v1/orders/{id}/lines/{line_id}", ChangeLine, 200, Order,
    (order_id, line_id): (Uuid, Uuid), ChangeLine { base_version, qty_ordered } =>
        Mutation::ChangeLine { order_id, line_id, qty_ordered, base_version },
    ["id", "line_id"]);
mutation_route!(remove_line, post, "/v1/orders/{id}/lines/{line_id}/remove", BaseVersion, 200, Order,
    (order_id, line_id): (Uuid, Uuid), BaseVersion { base_version } =>
        Mutation::RemoveLine { order_id, line_id, base_version },
    ["id", "line_id"]);
mutation_route!(allocate, post, "/v1/orders/{id}/lines/{line_id}/allocate", Quantity, 200, AllocationResult,
    (order_id, line_id): (Uuid, Uuid), Quantity { qty } =>
        Mutation::Allocate { order_id, line_id, qty },
    ["id", "line_id"]);
mutation_route!(release, post, "/v1/orders/{id}/lines/{line_id}/release", Quantity, 200, AllocationResult,
    (order_id, line_id): (Uuid, Uuid), Quantity { qty } =>
        Mutation::Release { order_id, line_id, qty },
    ["id", "line_id"]);
mutation_route!(confirm, post, "/v1/orders/{id}/confirm", BaseVersion, 200, Order,
    order_id: Uuid, BaseVersion { base_version } => Mutation::Confirm { order_id, base_version },
    ["id"]);
mutation_route!(cancel, post, "/v1/orders/{id}/cancel", BaseVersion, 200, Order,
    order_id: Uuid, BaseVersion { base_version } => Mutation::Cancel { order_id, base_version },
    ["id"]);

/// The header a desk names its database history in (`PullResponse::history`).
pub(crate) const HISTORY: &str = "holdfast-history";

/// The desktop's transport: up to 500 mutations, one result each, in order.
///
/// With `Holdfast-History` (the history of the desk's last pull), a server
/// restored from a backup since then answers 410 `server_restored` and runs
/// nothing: the desk's queue was made against a newer state than this one
/// holds, and it must pull and re-send first (client/src/sync/).
#[utoipa::path(post, path = "/v1/sync/push", request_body = PushRequest, security(("bearer" = [])),
    params(("Holdfast-History" = Option<Uuid>, Header, description = "the `history` of the desk's last pull")),
    responses((status = 200, body = PushResponse), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 410, body = Problem, description = "`server_restored`: the server was restored from a backup since the desk's last pull; nothing was run")))]
pub(crate) async fn push(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<PushResponse>> {
    require_json_content_type(&headers)?;
    if let Some(named) = named_history(&headers)? {
        let mut conn = state.db.acquire().await?;
        let history = crate::feed::history(&mut conn).await?;
        if !history.admits(Some(named)) {
            return Err(super::sync::restored());
        }
    }
    // Items are judged one by one (engine::parse_item): a NUL in one item is
    // that item's 400, not the whole batch's.
    let req: PushRequest = parse_json_keeping_nul(&body)?;
    if req.mutations.is_empty() || req.mutations.len() > batch::MAX_ITEMS {
        return Err(Error::validation(
            "mutations",
            format!("must hold 1–{} items", batch::MAX_ITEMS),
        ));
    }
    let results = batch::push(&state.db, &caller, req.mutations).await?;
    Ok(Json(PushResponse { results }))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use holdfast_protocol::model::OrderHeaderSet;
    use tower::ServiceExt;

    use super::*;

    /// One of each mutation; the match makes a new variant a compile error
    /// here until it is added.
    fn one_of_each() -> Vec<Mutation> {
        let (o, l) = (Uuid::now_v7(), Uuid::now_v7());
        let all = vec![
            Mutation::CreateOrder {
                order_id: o,
                customer_id: o,
                customer_po: None,
                ship_window_start: None,
                ship_window_end: None,
                notes: None,
            },
            Mutation::PatchOrder {
                order_id: o,
                base_version: 1,
                set: OrderHeaderSet::default(),
            },
            Mutation::AddLine {
                order_id: o,
                line_id: l,
                sku_id: l,
                qty_ordered: 1,
                base_version: 1,
            },
            Mutation::ChangeLine {
                order_id: o,
                line_id: l,
                qty_ordered: 1,
                base_version: 1,
            },
            Mutation::RemoveLine {
                order_id: o,
                line_id: l,
                base_version: 1,
            },
            Mutation::Allocate {
                order_id: o,
                line_id: l,
                qty: 1,
            },
            Mutation::Release {
                order_id: o,
                line_id: l,
                qty: 1,
            },
            Mutation::Confirm {
                order_id: o,
                base_version: 1,
            },
            Mutation::Cancel {
                order_id: o,
                base_version: 1,
            },
        ];
        let mut seen = [false; 9];
        for m in &all {
            let i = match m {
                Mutation::CreateOrder { .. } => 0,
                Mutation::PatchOrder { .. } => 1,
                Mutation::AddLine { .. } => 2,
                Mutation::ChangeLine { .. } => 3,
                Mutation::RemoveLine { .. } => 4,
                Mutation::Allocate { .. } => 5,
                Mutation::Release { .. } => 6,
                Mutation::Confirm { .. } => 7,
                Mutation::Cancel { .. } => 8,
            };
            seen[i] = true;
        }
        assert!(seen.iter().all(|s| *s), "a mutation has no sample");
        all
    }

    /// protocol's table (what desks send and batch push parses), axum's
    /// routes and the OpenAPI document name the same routes.
    #[tokio::test]
    async fn every_mutation_is_routed_and_documented() {
        let db = sqlx::PgPool::connect_lazy("postgres://localhost/none").expect("lazy pool");
        let router = crate::http::router(AppState::new(db));
        let doc = serde_json::to_value(crate::openapi::document()).expect("openapi");
        for m in one_of_each() {
            // Without a token a routed request stops at 401, before any
            // database; an unrouted one is 404 or 405.
            let req = Request::builder()
                .method(m.method())
                .uri(m.path())
                .body(Body::empty())
                .expect("request");
            let status = router.clone().oneshot(req).await.expect("answer").status();
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{} {}",
                m.method(),
                m.path()
            );

            let mut template = m.path().replace(&m.order_id().to_string(), "{id}");
            if let Some(line) = m.line_id() {
                template = template.replace(&line.to_string(), "{line_id}");
            }
            let method = m.method().to_ascii_lowercase();
            assert!(
                doc["paths"][&template][&method].is_object(),
                "{method} {template} is not documented"
            );
        }
        let unrouted = Request::builder()
            .method("POST")
            .uri(format!("/v1/orders/{}/ship", Uuid::now_v7()))
            .body(Body::empty())
            .expect("request");
        let status = router.oneshot(unrouted).await.expect("answer").status();
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
}
