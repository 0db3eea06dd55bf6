//! One error type for every HTTP path: an RFC 9457 problem with a stable code,
//! or an internal error that becomes a bare 500 and is logged once, here.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use holdfast_protocol::problem::{FieldError, Problem, ProblemCode, PROBLEM_CONTENT_TYPE};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A 4xx the caller can act on; its code is in API.md's table.
    #[error("{}: {}", .0.code, .0.detail.as_deref().unwrap_or(""))]
    Problem(Box<Problem>),
    /// A bug or an outage: 500 `internal`, details only in the log.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn problem(code: ProblemCode, detail: impl Into<String>) -> Self {
        ApiError::Problem(Box::new(Problem::new(code, detail)))
    }

    pub fn not_found(what: &str) -> Self {
        Self::problem(
            ProblemCode::NotFound,
            format!("no such {what} in your tenant"),
        )
    }

    pub fn unauthorized() -> Self {
        Self::problem(
            ProblemCode::Unauthorized,
            "missing, invalid or revoked token",
        )
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::problem(ProblemCode::Forbidden, detail)
    }

    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        let error = FieldError {
            field: field.into(),
            message: message.into(),
        };
        let detail = format!("{}: {}", error.field, error.message);
        ApiError::Problem(Box::new(
            Problem::new(ProblemCode::ValidationFailed, detail).with("errors", vec![error]),
        ))
    }

    /// The problem this error answers with (internal errors become `internal`).
    pub fn to_problem(&self) -> Problem {
        match self {
            ApiError::Problem(p) => (**p).clone(),
            ApiError::Internal(_) => {
                Problem::new(ProblemCode::Internal, "internal error; it has been logged")
            }
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        ApiError::Internal(e.into())
    }
}

impl From<Problem> for ApiError {
    fn from(p: Problem) -> Self {
        ApiError::Problem(Box::new(p))
    }
}

/// Renders a problem document with its status and content type.
pub fn problem_response(problem: &Problem) -> Response {
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(e) = &self {
            // Logged once, inside the request's span (method, route, request id).
            tracing::error!(error = format!("{e:#}"), "internal error");
        }
        problem_response(&self.to_problem())
    }
}
