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
//! Handlers obey one rule that keeps this simple: every rejection — the
//! stored business outcomes (version_conflict, insufficient_ats,
//! over_allocation, invalid_state, credit_limit_exceeded) and the unstored
//! ones (not_found, validation_failed) alike — is decided before the
//! handler's first write, so storing a rejection on the key row stores nothing
//! else, and an unstored one leaves nothing but its claimed key row.
//! Only unexpected errors (`ApiError::Internal`) may come after a write; they
//! roll back.

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
    /// Keep the work (commit, or go on to the batch's next item).
    Keep(Outcome),
    /// Undo whatever this mutation did (roll back, or roll back to the item's
    /// savepoint); the outcome is not stored and a retry runs again.
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
pub(crate) const KEY_LOCK_TIMEOUT: &str = "2s";
/// What `request_in_flight` tells the caller to wait before retrying.
pub const RETRY_AFTER_SECS: u64 = 1;

/// A mutation that passed the checks needing no database (key length, role,
/// route and body): it may claim its key.
pub(crate) struct Prepared {
    pub mutation: Mutation,
    pub fingerprint: String,
}

/// The checks that need no database; a failure is the whole answer (never
/// stored: the key stays free).
pub(crate) fn prepare(caller: &Caller, req: &Request) -> Result<Prepared, Outcome> {
    let len = req.key.chars().count();
    if len == 0 || len > 255 {
        let p = Problem::new(
            ProblemCode::IdempotencyKeyInvalid,
            "Idempotency-Key must be 1–255 characters",
        );
        return Err(Outcome::problem(&p));
    }
    if req.key.contains('\0') {
        let p = Problem::new(
            ProblemCode::IdempotencyKeyInvalid,
            "Idempotency-Key must not contain the NUL character",
        );
        return Err(Outcome::problem(&p));
    }
    if let Err(e) = caller.require(Role::AccountManager) {
        return Err(Outcome::problem(&e.to_problem()));
    }
    // Postgres cannot store U+0000 (a pushed item's body was not checked yet).
    if let Err(e) = crate::http::reject_nul(&req.body) {
        return Err(Outcome::problem(&e.to_problem()));
    }
    let mutation = route::parse(&req.method, &req.path, &req.body)
        .map_err(|e| Outcome::problem(&e.to_problem()))?;
    let fingerprint = request_fingerprint(&req.method, &req.path, &req.body);
    Ok(Prepared {
        mutation,
        fingerprint,
    })
}

/// Runs one mutation inside the caller's open transaction.
pub async fn execute_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    req: &Request,
) -> Result<Step, anyhow::Error> {
    let prepared = match prepare(caller, req) {
        Ok(prepared) => prepared,
        Err(outcome) => return Ok(Step::Discard(outcome)),
    };
    let claim = idempotency::claim_in_tx(
        conn,
        caller.tenant_id,
        &req.key,
        &prepared.fingerprint,
        KEY_LOCK_TIMEOUT,
    )
    .await?;
    if let Some(step) = settle(claim) {
        return Ok(step);
    }
    run_claimed(conn, caller, &req.key, prepared.mutation).await
}

/// The answer for a key this request did not claim; `None` when it did.
pub(crate) fn settle(claim: idempotency::Claim) -> Option<Step> {
    match claim {
        idempotency::Claim::Claimed => None,
        idempotency::Claim::Replay(outcome) => {
            metrics::counter!("holdfast_idempotent_replays_total").increment(1);
            Some(Step::Keep(outcome))
        }
        idempotency::Claim::Reused => {
            let p = Problem::new(
                ProblemCode::IdempotencyKeyReused,
                "this Idempotency-Key was used for a different request; mint a new key for a new act",
            );
            Some(Step::Discard(Outcome::problem(&p)))
        }
        idempotency::Claim::InFlight => {
            metrics::counter!("holdfast_request_in_flight_total").increment(1);
            let p = Problem::new(
                ProblemCode::RequestInFlight,
                "a request with this Idempotency-Key is still running; retry shortly",
            )
            .with("retry_after", RETRY_AFTER_SECS);
            Some(Step::Discard(Outcome::problem(&p)))
        }
    }
}

/// Runs a mutation whose key this transaction has claimed, and stores its
/// answer on the key row when it is a stored outcome.
///
/// `Step::Discard` from here means the handler rejected the request before
/// its first write (see the module doc), so the claimed key row is this
/// mutation's only effect. Unexpected errors are `Err`, after which the
/// transaction (or the item's savepoint) must be rolled back.
pub(crate) async fn run_claimed(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &str,
    mutation: Mutation,
) -> Result<Step, anyhow::Error> {
    let step = run_handler(conn, caller, key, mutation).await?;
    if let Step::Keep(outcome) = &step {
        idempotency::store_in_tx(conn, caller.tenant_id, key, outcome).await?;
    }
    Ok(step)
}

/// [`run_claimed`] without storing: `Step::Keep` carries an outcome the
/// caller must store on the key row before it commits (a batch stores a
/// chunk's answers in one statement).
pub(crate) async fn run_handler(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &str,
    mutation: Mutation,
) -> Result<Step, anyhow::Error> {
    match run(conn, caller, key, mutation).await {
        Ok(done) => Ok(Step::Keep(Outcome {
            status: done.status,
            body: serde_json::to_vec(&done.body)?,
            replayed: done.replayed,
        })),
        Err(ApiError::Problem(p)) => {
            count_rejection(p.code);
            let outcome = Outcome::problem(&p);
            if p.code.is_stored_outcome() {
                Ok(Step::Keep(outcome))
            } else {
                Ok(Step::Discard(outcome))
            }
        }
        Err(ApiError::Internal(e)) => Err(e),
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
