//! The server's one error type: a rejection the caller can act on (an
//! RFC 9457 problem with a stable code), or an internal error. The engine,
//! the inbox and the db layer return it; `http::error` turns it into a
//! response (a bare 500 for a bug, logged once there).
//!
//! An internal error caused by the database being unavailable (down,
//! restarting, read-only, out of disk or connections, the pool exhausted) is
//! not a bug: it answers 503 `service_unavailable` with `Retry-After`. Such an
//! error rolls its transaction back, so nothing was written and no
//! idempotency key stored: a retry runs the request afresh. (If the
//! connection broke while COMMIT was on its way, the transaction may have
//! committed — whole, key and answer included — and the retry replays it.)

use holdfast_protocol::json::BodyError;
use holdfast_protocol::problem::{FieldError, Problem, ProblemCode};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rejection the caller can act on; its code is in API.md's table.
    #[error("{}: {}", .0.code, .0.detail.as_deref().unwrap_or(""))]
    Problem(Box<Problem>),
    /// A bug: 500 `internal`, details only in the log. When the cause is the
    /// database being unavailable ([`is_unavailable`]): 503
    /// `service_unavailable` with `Retry-After`.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl Error {
    pub fn problem(code: ProblemCode, detail: impl Into<String>) -> Self {
        Error::Problem(Box::new(Problem::new(code, detail)))
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
        Error::Problem(Box::new(
            Problem::new(ProblemCode::ValidationFailed, detail).with("errors", vec![error]),
        ))
    }

    /// The problem this error answers with (internal errors become `internal`,
    /// or `service_unavailable` when the database is the cause).
    pub fn to_problem(&self) -> Problem {
        match self {
            Error::Problem(p) => (**p).clone(),
            Error::Internal(e) if is_row_lock_timeout(e) => Problem::new(
                ProblemCode::ServiceUnavailable,
                "another change to the same stock or order is taking too long to finish; \
                 nothing was stored; retry shortly (a mutation with the same Idempotency-Key)",
            )
            .with("retry_after", UNAVAILABLE_RETRY_AFTER_SECS),
            Error::Internal(e) if unavailable_cause(e).is_some() => Problem::new(
                ProblemCode::ServiceUnavailable,
                "the database is unavailable right now; retry shortly (a mutation with the same Idempotency-Key)",
            )
            .with("retry_after", UNAVAILABLE_RETRY_AFTER_SECS),
            Error::Internal(_) => {
                Problem::new(ProblemCode::Internal, "internal error; it has been logged")
            }
        }
    }
}

/// What a 503 tells the caller to wait before retrying.
pub(crate) const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 2;

/// True when `e` is our `lock_timeout` expiring on a row lock: the engine's
/// `ROW_LOCK_TIMEOUT` (the key's own wait is answered `request_in_flight`
/// by `idempotency::claim_in_tx` before it can become an error). Not an
/// outage — the database serves everyone else — so a batch answers that
/// item alone 503 and runs the others.
pub(crate) fn is_row_lock_timeout(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|cause| cause.downcast_ref::<sqlx::Error>())
        .any(|e| matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03")))
}

/// The database error behind `e`, if it means "the database is unavailable
/// right now" rather than a bug.
pub(crate) fn unavailable_cause(e: &anyhow::Error) -> Option<&sqlx::Error> {
    e.chain()
        .filter_map(|cause| cause.downcast_ref::<sqlx::Error>())
        .find(|e| is_unavailable(e))
}

/// True for errors that say the database cannot serve us now — it is down or
/// restarting, the connection broke, the pool waited too long, or it refuses
/// writes (read-only, out of disk or memory, too many connections) — as
/// opposed to a bug in our SQL. These answer 503.
pub(crate) fn is_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().as_deref().is_some_and(sqlstate_is_unavailable),
        _ => false,
    }
}

/// The SQLSTATEs that mean "unavailable", by class or code.
pub(crate) fn sqlstate_is_unavailable(code: &str) -> bool {
    // 08: connection exception (e.g. 08006 connection_failure).
    // 53: insufficient resources — 53100 disk_full, 53200 out_of_memory,
    //     53300 too_many_connections, 53400 configuration_limit_exceeded.
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(
            code,
            // read_only_sql_transaction: a read-only database or a standby.
            "25006"
            // admin_shutdown (pg_ctl stop, pg_terminate_backend),
            // crash_shutdown (another backend crashed), cannot_connect_now
            // (starting up, shutting down, in recovery).
            | "57P01" | "57P02" | "57P03"
        )
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Internal(e.into())
    }
}

impl From<Problem> for Error {
    fn from(p: Problem) -> Self {
        Error::Problem(Box::new(p))
    }
}

impl From<BodyError> for Error {
    fn from(e: BodyError) -> Self {
        Error::Problem(Box::new(e.to_problem()))
    }
}

impl From<FieldError> for Error {
    fn from(e: FieldError) -> Self {
        Error::validation(e.field, e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outage_sqlstates_are_unavailable_and_bugs_are_not() {
        for code in [
            "53100", // disk_full
            "53200", // out_of_memory
            "53300", // too_many_connections
            "25006", // read_only_sql_transaction
            "57P01", // admin_shutdown
            "57P02", // crash_shutdown
            "57P03", // cannot_connect_now
            "08006", // connection_failure
            "08001", // sqlclient_unable_to_establish_sqlconnection
        ] {
            assert!(sqlstate_is_unavailable(code), "{code}");
        }
        for code in [
            "23505", // unique_violation: a bug or a race we handle elsewhere
            "23514", // check_violation
            "42P01", // undefined_table
            "55P03", // lock_not_available: request_in_flight, not an outage
            "40001", // serialization_failure
            "57014", // query_canceled
            "XX000",
        ] {
            assert!(!sqlstate_is_unavailable(code), "{code}");
        }
    }

    #[test]
    fn an_outage_is_service_unavailable_and_a_bug_internal() {
        let outage = Error::from(sqlx::Error::PoolTimedOut);
        let p = outage.to_problem();
        assert_eq!((p.status, p.code), (503, ProblemCode::ServiceUnavailable));
        assert_eq!(
            p.extension("retry_after").and_then(|v| v.as_u64()),
            Some(UNAVAILABLE_RETRY_AFTER_SECS)
        );

        // Wrapped in context, as the engine's errors are.
        let io = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "server closed");
        let wrapped = anyhow::Error::from(sqlx::Error::Io(io)).context("committing");
        assert_eq!(
            Error::Internal(wrapped).to_problem().code,
            ProblemCode::ServiceUnavailable
        );

        let bug = Error::from(sqlx::Error::RowNotFound);
        assert_eq!(bug.to_problem().code, ProblemCode::Internal);
    }
}
