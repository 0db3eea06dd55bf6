//! Operations: liveness, readiness, Prometheus metrics, the OpenAPI document.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz",
    responses((status = 200, description = "process up", content_type = "text/plain", body = String)))]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// How long `/readyz` waits for the database before it answers 503.
const READY_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// The database answers and every migration is applied.
#[utoipa::path(get, path = "/readyz",
    responses((status = 200, description = "ready", content_type = "text/plain", body = String),
              (status = 503, description = "database unreachable or migrations not applied", content_type = "text/plain", body = String)))]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    // Bounded: a probe must answer even while Postgres restarts (the pool
    // would otherwise wait out its whole acquire timeout).
    let checked = tokio::time::timeout(
        READY_CHECK_TIMEOUT,
        crate::db::migrations_applied(&state.db),
    )
    .await;
    let Ok(checked) = checked else {
        tracing::warn!("readiness check: database did not answer in time");
        return (StatusCode::SERVICE_UNAVAILABLE, "database not answering").into_response();
    };
    match checked {
        Ok(true) => (StatusCode::OK, "ready").into_response(),
        Ok(false) => (StatusCode::SERVICE_UNAVAILABLE, "migrations not applied").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, "database unreachable").into_response()
        }
    }
}

#[utoipa::path(get, operation_id = "get_metrics", path = "/metrics",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String)))]
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    crate::metrics::db::record_pool(&state.db);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

#[utoipa::path(get, operation_id = "get_openapi", path = "/openapi.json",
    responses((status = 200, description = "this API as OpenAPI 3", body = Object)))]
pub(crate) async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(crate::openapi::document())
}
