//! The mutation engine: every order edit and allocation, whichever transport
//! carried it (a REST call or an item of a batch push), runs through
//! [`execute_in_tx`] — claim the idempotency key, run the handler, store the
//! answer, all in the caller's one transaction.
//!
//! Why one transaction instead of the seed's three (claim, work, finish): a
//! crash rolls the key back with the work, so there is never a stale
//! "in progress" key to steal or wait out, and a concurrent duplicate simply
//! blocks on the key's unique index until the first commits, then replays.
//!
//! Handlers obey one rule that keeps this simple: every business rejection
//! (the stored outcomes: version_conflict, insufficient_ats, over_allocation,
//! invalid_state, credit_limit_exceeded) is decided before the handler's first
//! write, so storing the rejection on the key row stores nothing else.

mod allocation;
pub mod batch;
pub mod idempotency;
mod orders;
pub mod route;

use holdfast_protocol::canonical::request_fingerprint;
use holdfast_protocol::model::Role;
use holdfast_protocol::problem::{Problem, ProblemCode};
use serde_json::Value;
use sqlx::PgConnection;

use crate::error::ApiError;
use crate::http::Caller;
pub use route::Mutation;

/// A mutation as it arrives: key, method, path and parsed JSON body.
#[derive(Debug, Clone)]
pub struct Request {
    pub key: String,
    pub method: String,
    pub path: String,
    pub body: Value,
}

/// The answer to one mutation, as stored on its key and replayed.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: u16,
    /// Serialized once; a replay sends these exact bytes.
    pub body: Vec<u8>,
    pub replayed: bool,
}

impl Outcome {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn problem(problem: &Problem) -> Self {
        Outcome {
            status: problem.status,
            body: serde_json::to_vec(problem).unwrap_or_default(),
            replayed: false,
        }
    }

    pub fn is_problem(&self) -> bool {
        self.status >= 400
    }
}

/// What the caller of [`execute_in_tx`] must do with the transaction.
#[derive(Debug)]
pub enum Step {
    /// Keep the work (commit, or release the item's savepoint).
    Keep(Outcome),
    /// Undo whatever this mutation did (roll back, or to the item's savepoint);
    /// the outcome is not stored and a retry runs again.
    Discard(Outcome),
}

/// A handler's success: status and document, or a replay found in the ledger.
pub(crate) struct Done {
    pub status: u16,
    pub body: Value,
    pub replayed: bool,
}

impl Done {
    fn ok(body: impl serde::Serialize) -> Result<Self, ApiError> {
        Ok(Done {
            status: 200,
            body: serde_json::to_value(body).map_err(|e| ApiError::Internal(e.into()))?,
            replayed: false,
        })
    }

    fn created(body: impl serde::Serialize) -> Result<Self, ApiError> {
        Done::ok(body).map(|d| Done { status: 201, ..d })
    }
}

/// How long a duplicate waits for the first request holding its key.
const KEY_LOCK_TIMEOUT: &str = "2s";
/// What `request_in_flight` tells the caller to wait before retrying.
pub const RETRY_AFTER_SECS: u64 = 1;

/// Runs one mutation inside the caller's open transaction.
pub async fn execute_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    req: &Request,
) -> Result<Step, anyhow::Error> {
    let len = req.key.chars().count();
    if len == 0 || len > 255 {
        let p = Problem::new(
            ProblemCode::IdempotencyKeyInvalid,
            "Idempotency-Key must be 1–255 characters",
        );
        return Ok(Step::Discard(Outcome::problem(&p)));
    }
    if let Err(e) = caller.require(Role::AccountManager) {
        return Ok(Step::Discard(Outcome::problem(&e.to_problem())));
    }
    let mutation = match route::parse(&req.method, &req.path, &req.body) {
        Ok(m) => m,
        Err(e) => return Ok(Step::Discard(Outcome::problem(&e.to_problem()))),
    };
    let fingerprint = request_fingerprint(&req.method, &req.path, &req.body);

    match idempotency::claim_in_tx(
        conn,
        caller.tenant_id,
        &req.key,
        &fingerprint,
        KEY_LOCK_TIMEOUT,
    )
    .await?
    {
        idempotency::Claim::Claimed => {}
        idempotency::Claim::Replay(outcome) => {
            metrics::counter!("holdfast_idempotent_replays_total").increment(1);
            return Ok(Step::Keep(outcome));
        }
        idempotency::Claim::Reused => {
            let p = Problem::new(
                ProblemCode::IdempotencyKeyReused,
                "this Idempotency-Key was used for a different request; mint a new key for a new act",
            );
            return Ok(Step::Discard(Outcome::problem(&p)));
        }
        idempotency::Claim::InFlight => {
            metrics::counter!("holdfast_request_in_flight_total").increment(1);
            let p = Problem::new(
                ProblemCode::RequestInFlight,
                "a request with this Idempotency-Key is still running; retry shortly",
            )
            .with("retry_after", RETRY_AFTER_SECS);
            return Ok(Step::Discard(Outcome::problem(&p)));
        }
    }

    let result = run(conn, caller, &req.key, mutation).await;
    let (outcome, store) = match result {
        Ok(done) => (
            Outcome {
                status: done.status,
                body: serde_json::to_vec(&done.body)?,
                replayed: done.replayed,
            },
            true,
        ),
        Err(ApiError::Problem(p)) => {
            count_rejection(p.code);
            (Outcome::problem(&p), p.code.is_stored_outcome())
        }
        Err(ApiError::Internal(e)) => return Err(e),
    };
    if store {
        idempotency::store_in_tx(conn, caller.tenant_id, &req.key, &outcome).await?;
        Ok(Step::Keep(outcome))
    } else {
        Ok(Step::Discard(outcome))
    }
}

async fn run(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &str,
    mutation: Mutation,
) -> Result<Done, ApiError> {
    match mutation {
        Mutation::CreateOrder(body) => orders::create(conn, caller, body).await,
        Mutation::PatchOrder { order_id, body } => {
            orders::patch(conn, caller, order_id, body).await
        }
        Mutation::AddLine { order_id, body } => {
            orders::add_line(conn, caller, order_id, body).await
        }
        Mutation::ChangeLine {
            order_id,
            line_id,
            body,
        } => orders::change_line(conn, caller, order_id, line_id, body).await,
        Mutation::RemoveLine {
            order_id,
            line_id,
            body,
        } => orders::remove_line(conn, caller, key, order_id, line_id, body.base_version).await,
        Mutation::Allocate {
            order_id,
            line_id,
            qty,
        } => allocation::allocate(conn, caller, key, order_id, line_id, qty).await,
        Mutation::Release {
            order_id,
            line_id,
            qty,
        } => allocation::release(conn, caller, key, order_id, line_id, qty).await,
        Mutation::Confirm { order_id, body } => {
            orders::confirm(conn, caller, order_id, body.base_version).await
        }
        Mutation::Cancel { order_id, body } => {
            orders::cancel(conn, caller, key, order_id, body.base_version).await
        }
    }
}

fn count_rejection(code: ProblemCode) {
    match code {
        ProblemCode::VersionConflict => {
            metrics::counter!("holdfast_version_conflicts_total").increment(1)
        }
        ProblemCode::InsufficientAts => {
            metrics::counter!("holdfast_ats_rejections_total").increment(1)
        }
        _ => {}
    }
}
