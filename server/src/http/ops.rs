//! Operations: liveness, readiness, Prometheus metrics, the OpenAPI document.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "process up")))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// The database answers and every migration is applied.
#[utoipa::path(get, path = "/readyz", responses((status = 200), (status = 503)))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    match crate::db::migrations_applied(&state.db).await {
        Ok(true) => (StatusCode::OK, "ready").into_response(),
        Ok(false) => (StatusCode::SERVICE_UNAVAILABLE, "migrations not applied").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, "database unreachable").into_response()
        }
    }
}

#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text format")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "this API as OpenAPI 3")))]
pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(crate::openapi::document())
}
