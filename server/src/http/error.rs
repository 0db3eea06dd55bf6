//! The one place an [`Error`] becomes an HTTP response: problem+json with
//! its status, `Retry-After` where the problem says when to come back, and
//! internal errors logged once, inside the request's span.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use holdfast_protocol::problem::{Problem, PROBLEM_CONTENT_TYPE};

use crate::error::{unavailable_cause, Error};

pub type ApiResult<T> = Result<T, Error>;

/// Renders a problem document with its status and content type.
pub(super) fn problem_response(problem: &Problem) -> Response {
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::to_vec(problem).unwrap_or_default();
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
    );
    // A problem that says when to come back says it in the header too.
    if let Some(secs) = problem.extension("retry_after").and_then(|v| v.as_u64()) {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        if let Error::Internal(e) = &self {
            // Logged once, inside the request's span (method, route, request id).
            if let Some(cause) = unavailable_cause(e) {
                crate::metrics::db::note_unavailable(cause);
                tracing::warn!(
                    error = format!("{e:#}"),
                    "database unavailable; answered 503"
                );
            } else {
                tracing::error!(error = format!("{e:#}"), "internal error");
            }
        }
        problem_response(&self.to_problem())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::UNAVAILABLE_RETRY_AFTER_SECS;

    #[test]
    fn an_outage_is_a_503_with_retry_after_and_a_bug_a_500() {
        let response = Error::from(sqlx::Error::PoolTimedOut).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.headers().get(header::RETRY_AFTER),
            Some(&HeaderValue::from(UNAVAILABLE_RETRY_AFTER_SECS))
        );
        assert_eq!(
            response.headers().get(header::CONTENT_TYPE),
            Some(&HeaderValue::from_static(PROBLEM_CONTENT_TYPE))
        );
        let bug = Error::from(sqlx::Error::RowNotFound).into_response();
        assert_eq!(bug.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(bug.headers().get(header::RETRY_AFTER), None);
    }
}
