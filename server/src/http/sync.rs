//! The sync feed: `GET /v1/sync/pull` (pages of changed documents) and
//! `GET /v1/sync/stream` (Server-Sent Events that poke a desk to pull).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use axum::Json;
use futures_util::stream::{self, StreamExt};
use holdfast_protocol::model::PullResponse;
use holdfast_protocol::problem::{Problem, ProblemCode};
use serde::Deserialize;

use super::{cursor, ApiQuery};
use crate::auth::Caller;
use crate::error::Error;
use crate::feed;
use crate::http::ApiResult;
use crate::AppState;

/// API.md: `limit ≤ 1000`.
const MAX_LIMIT: i64 = 1000;
const DEFAULT_LIMIT: i64 = 500;
/// API.md promises a comment at least every 15 s; 10 leaves room for a busy
/// machine.
const HEARTBEAT: Duration = Duration::from_secs(10);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct PullParams {
    /// The `cursor` of the previous pull; absent (or empty) for the first
    /// pull, which returns the whole current state before the changes.
    #[param(nullable = false)]
    cursor: Option<String>,
    /// Documents per page, 1–1000, default 500.
    #[param(nullable = false, minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

#[utoipa::path(get, operation_id = "pull_changes", path = "/v1/sync/pull", params(PullParams), security(("bearer" = [])),
    responses((status = 200, body = PullResponse), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 410, body = Problem, description = "`server_restored`: the cursor was cut before the server was restored from a backup; pull again without one")))]
pub(crate) async fn pull(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<PullParams>,
) -> ApiResult<Json<PullResponse>> {
    let limit = cursor::limit(params.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let from = params
        .cursor
        .as_deref()
        .filter(|c| !c.is_empty())
        .map(|c| cursor::decode::<feed::Cursor>("cursor", c))
        .transpose()?;
    // A read the replica may serve (`db/reads.rs`).
    let mut conn = state.reads.connection(&caller).await?;
    let page = feed::pull::pull_on(&mut conn, caller.tenant_id, from, limit as usize)
        .await
        .map_err(|e| match e {
            feed::FeedError::OtherHistory => restored(),
            e => Error::Internal(e.into()),
        })?;
    Ok(Json(PullResponse {
        changes: page.changes,
        cursor: cursor::encode(&page.next),
        has_more: page.has_more,
        history: Some(page.history),
    }))
}

/// 410 `server_restored`: what a desk from before a restore hears, on a pull
/// with its old cursor or a push naming its old history.
pub(crate) fn restored() -> Error {
    Error::problem(
        ProblemCode::ServerRestored,
        "this server's database was restored from a backup after your last pull: \
         nothing was applied; pull again from the start (no cursor) and re-send what it lacks",
    )
}

/// `event: changed` with `data: {"cursor": ...}` once a commit touching the
/// caller's tenant can be pulled. The cursor is the one a pull that has
/// caught up would hold now: a desk whose last pull returned exactly it has
/// nothing to fetch. It is never a substitute for the desk's own cursor
/// (changes before it may not be pulled yet). Open the stream first, then
/// pull: every commit that pull cannot see yet is announced once it can.
#[utoipa::path(get, operation_id = "stream_changes", path = "/v1/sync/stream", security(("bearer" = [])),
    responses((status = 200, content_type = "text/event-stream", body = String,
               description = "`event: changed` / `data: {\"cursor\"}` per commit; a comment at least every 15 s"),
              (status = 401, body = Problem)))]
pub(crate) async fn stream(State(state): State<AppState>, caller: Caller) -> impl IntoResponse {
    // Opened before the response starts, so a desk that sees the headers
    // hears of every commit its next pull cannot see yet.
    let subscription = state.hub.open(&state.db, caller.tenant_id).await;
    let pokes = stream::unfold(subscription, |mut subscription| async move {
        let position = subscription.next().await?;
        let data = serde_json::json!({ "cursor": cursor::encode(&position) }).to_string();
        let event = Event::default().event("changed").data(data);
        Some((Ok::<_, Infallible>(event), subscription))
    });
    // A first comment at once: proxies and clients see the stream is live.
    let hello = stream::once(async { Ok(Event::default().comment("subscribed")) });
    Sse::new(hello.chain(pokes)).keep_alive(KeepAlive::new().interval(HEARTBEAT))
}
