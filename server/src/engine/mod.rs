//! The mutation engine: every order edit and allocation, whichever transport
//! carried it (a REST call or an item of a batch push), runs through
//! [`execute_in_tx`] — claim the idempotency key, run the handler, store the
//! answer, all in the caller's one transaction.
//!
//! Why one transaction instead of three (claim, work, finish): a
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
//! Only unexpected errors (`Error::Internal`) may come after a write; they
//! roll back.

mod allocation;
pub mod batch;
mod edit;
pub mod idempotency;
#[cfg(not(feature = "broken-allocation"))]
pub mod known;
mod lines;
mod orders;

use holdfast_protocol::canonical::request_fingerprint;
use holdfast_protocol::json;
use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::model::{AddLine, ChangeLine, CreateOrder, PatchOrder, PushItem, Role};
use holdfast_protocol::mutation::Mutation;
use holdfast_protocol::problem::{Problem, ProblemCode};
use serde_json::Value;
use sqlx::PgConnection;

use crate::auth::Caller;
use crate::error::Error;
use edit::Held;

/// A mutation as it arrived: its key, the mutation it names, and API.md's
/// fingerprint of the request as sent (method, path, canonical body).
#[derive(Debug, Clone)]
pub struct Request {
    pub key: IdempotencyKey,
    pub mutation: Mutation,
    pub fingerprint: String,
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
pub struct Done {
    pub status: u16,
    pub body: Value,
    pub replayed: bool,
    /// The body as serialized, already stored on the key row (status 200)
    /// by the handler's own write (allocation's folded move); `body` is
    /// then unused.
    pub stored: Option<Vec<u8>>,
}

impl Done {
    pub(crate) fn ok(body: impl serde::Serialize) -> Result<Self, Error> {
        Ok(Done {
            status: 200,
            body: serde_json::to_value(body).map_err(|e| Error::Internal(e.into()))?,
            replayed: false,
            stored: None,
        })
    }

    /// A 200 whose bytes the handler stored on the key row itself.
    pub(crate) fn stored(bytes: Vec<u8>) -> Self {
        Done {
            status: 200,
            body: Value::Null,
            replayed: false,
            stored: Some(bytes),
        }
    }

    pub(crate) fn created(body: impl serde::Serialize) -> Result<Self, Error> {
        Done::ok(body).map(|d| Done { status: 201, ..d })
    }
}

/// How long a duplicate waits for the first request holding its key.
pub(crate) const KEY_LOCK_TIMEOUT: &str = "2s";
/// How long a mutation, once its key is claimed, waits for a row lock (a
/// SKU's position, an order, a customer's invoices). Waiting behind other
/// allocators on a hot SKU is normal and takes milliseconds each; this bound
/// is for a transaction that holds the row and does not finish (stuck, or an
/// operator's session left open), which would otherwise stall every request
/// behind it for ever. Past it the request answers 503 with Retry-After,
/// stores nothing, and the desk retries the same key.
pub(crate) const ROW_LOCK_TIMEOUT: &str = "5s";
/// What `request_in_flight` tells the caller to wait before retrying.
pub const RETRY_AFTER_SECS: u64 = 1;

/// A pushed item as the [`Request`] its REST call would make, or the answer
/// that refuses it (never stored: the key stays free). It is judged as its
/// REST call is: key, then body (a NUL anywhere), then route and fields.
pub(crate) fn parse_item(item: &PushItem) -> Result<Request, Outcome> {
    let refuse = |p: Problem| Outcome::problem(&p);
    let key =
        IdempotencyKey::new(item.idempotency_key.as_str()).map_err(|e| refuse(e.to_problem()))?;
    json::reject_nul(&item.body).map_err(|e| refuse(e.to_problem()))?;
    let mutation = Mutation::parse(&item.method, &item.path, &item.body)
        .map_err(|e| refuse(e.to_problem()))?;
    Ok(Request {
        key,
        mutation,
        fingerprint: request_fingerprint(&item.method, &item.path, &item.body),
    })
}

/// The checks that need no database and that both transports share: the
/// caller's role and the mutation's values. A failure is the whole answer.
fn check(caller: &Caller, req: &Request) -> Result<(), Outcome> {
    caller
        .require(Role::AccountManager)
        .map_err(|e| Outcome::problem(&e.to_problem()))?;
    req.mutation
        .validate()
        .map_err(|e| Outcome::problem(&Error::from(e).to_problem()))
}

/// Runs one mutation inside the caller's open transaction.
pub async fn execute_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    req: &Request,
) -> Result<Step, anyhow::Error> {
    if let Err(outcome) = check(caller, req) {
        return Ok(Step::Discard(outcome));
    }
    let claim = idempotency::claim_in_tx(
        conn,
        caller.tenant_id,
        &req.key,
        &req.fingerprint,
        KEY_LOCK_TIMEOUT,
    )
    .await?;
    if let Some(step) = settle(claim) {
        return Ok(step);
    }
    run_claimed(conn, caller, &req.key, req.mutation.clone()).await
}

/// What [`execute_unbound_in_tx`] ended with.
#[derive(Debug)]
pub enum Executed {
    Step(Step),
    /// The caller, taken from the token cache, was not proved: nothing was
    /// answered; roll back, look the token up and run again (or answer 401).
    Unproved,
}

/// [`execute_in_tx`] in a transaction that is not yet bound to a tenant: the
/// claim binds it (`idempotency::claim_bound_in_tx`). With `verify`, the
/// caller came from the token cache and is proved in the claim; any answer
/// decided before it (a role refused) is not given until the caller is
/// proved: `Executed::Unproved` instead.
pub async fn execute_unbound_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    verify: bool,
    req: &Request,
) -> Result<Executed, anyhow::Error> {
    if let Err(outcome) = check(caller, req) {
        if verify {
            return Ok(Executed::Unproved);
        }
        return Ok(Executed::Step(Step::Discard(outcome)));
    }
    let who = idempotency::ClaimFor { caller, verify };
    let claim = match idempotency::claim_bound_in_tx(
        conn,
        who,
        &req.key,
        &req.fingerprint,
        KEY_LOCK_TIMEOUT,
    )
    .await?
    {
        idempotency::BoundClaim::Claim(claim) => claim,
        idempotency::BoundClaim::CallerChanged => return Ok(Executed::Unproved),
    };
    if let Some(step) = settle(claim) {
        return Ok(Executed::Step(step));
    }
    run_claimed(conn, caller, &req.key, req.mutation.clone())
        .await
        .map(Executed::Step)
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
    key: &IdempotencyKey,
    mutation: Mutation,
) -> Result<Step, anyhow::Error> {
    let (step, stored) = run_to_step(conn, caller, key, mutation, &mut Held::default()).await?;
    if let Step::Keep(outcome) = &step {
        if !stored {
            idempotency::store_in_tx(conn, caller.tenant_id, key, outcome).await?;
        }
    }
    Ok(step)
}

/// [`run_claimed`] without storing: `Step::Keep` carries an outcome the
/// caller must store on the key row before it commits (a batch stores a
/// chunk's answers in one statement; an answer the handler stored already
/// is stored again, the same bytes). `held`: the orders this transaction
/// has edited so far (see [`Held`]).
pub(crate) async fn run_handler(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    mutation: Mutation,
    held: &mut Held,
) -> Result<Step, anyhow::Error> {
    Ok(run_to_step(conn, caller, key, mutation, held).await?.0)
}

/// The handler's answer, and whether it is stored on the key row already.
async fn run_to_step(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    mutation: Mutation,
    held: &mut Held,
) -> Result<(Step, bool), anyhow::Error> {
    match run(conn, caller, key, mutation, held).await {
        Ok(done) => {
            let stored = done.stored.is_some();
            let body = match done.stored {
                Some(bytes) => bytes,
                None => serde_json::to_vec(&done.body)?,
            };
            Ok((
                Step::Keep(Outcome {
                    status: done.status,
                    body,
                    replayed: done.replayed,
                }),
                stored,
            ))
        }
        Err(Error::Problem(p)) => {
            count_rejection(p.code);
            let outcome = Outcome::problem(&p);
            if p.code.is_stored_outcome() {
                Ok((Step::Keep(outcome), false))
            } else {
                Ok((Step::Discard(outcome), false))
            }
        }
        Err(Error::Internal(e)) => Err(e),
    }
}

async fn run(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    mutation: Mutation,
    held: &mut Held,
) -> Result<Done, Error> {
    // Only line adds and changes, allocation and release keep `held`
    // exact; anything else may change an order it holds.
    if !matches!(
        mutation,
        Mutation::AddLine { .. }
            | Mutation::ChangeLine { .. }
            | Mutation::Allocate { .. }
            | Mutation::Release { .. }
    ) {
        held.clear();
    }
    match mutation {
        Mutation::CreateOrder {
            order_id,
            customer_id,
            customer_po,
            ship_window_start,
            ship_window_end,
            notes,
        } => {
            let header = CreateOrder {
                id: order_id,
                customer_id,
                customer_po,
                ship_window_start,
                ship_window_end,
                notes,
            };
            orders::create(conn, caller, key, header).await
        }
        Mutation::PatchOrder {
            order_id,
            base_version,
            set,
        } => {
            let body = PatchOrder { base_version, set };
            orders::patch(conn, caller, key, order_id, body).await
        }
        Mutation::AddLine {
            order_id,
            line_id,
            sku_id,
            qty_ordered,
            base_version,
        } => {
            let line = AddLine {
                id: line_id,
                sku_id,
                qty_ordered,
                base_version,
            };
            lines::add_line(conn, caller, key, order_id, line, held).await
        }
        Mutation::ChangeLine {
            order_id,
            line_id,
            qty_ordered,
            base_version,
        } => {
            let change = ChangeLine {
                base_version,
                qty_ordered,
            };
            lines::change_line(conn, caller, key, order_id, line_id, change, held).await
        }
        Mutation::RemoveLine {
            order_id,
            line_id,
            base_version,
        } => lines::remove_line(conn, caller, key, order_id, line_id, base_version).await,
        Mutation::Allocate {
            order_id,
            line_id,
            qty,
        } => allocation::allocate(conn, caller, key, order_id, line_id, qty, held).await,
        Mutation::Release {
            order_id,
            line_id,
            qty,
        } => allocation::release(conn, caller, key, order_id, line_id, qty, held).await,
        Mutation::Confirm {
            order_id,
            base_version,
        } => orders::confirm(conn, caller, key, order_id, base_version).await,
        Mutation::Cancel {
            order_id,
            base_version,
        } => orders::cancel(conn, caller, key, order_id, base_version).await,
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
