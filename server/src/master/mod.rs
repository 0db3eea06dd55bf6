//! Master data (API.md v1.1): the tenant's users, catalog, customers and
//! price lists, written by operators.
//!
//! Every write here runs under the same idempotency rules as an order
//! mutation, in one transaction: `begin` claims the key (or finds the
//! stored answer), the write runs, `finish` stores the answer on the key
//! and commits — or rolls everything back when the answer is not a stored
//! outcome. Writes follow the engine's rule: every rejection is decided
//! before the first write (an import validates the whole file first).
//!
//! Every change writes its change row (desks see it on their next pull, and
//! the commit pokes them) and its outbox event (`sku.updated`,
//! `customer.updated`, `price_list.updated`) in that same transaction.
//!
//! [`partners`] is the odd one out: the webhook receivers' rules, shared by
//! the JSON routes and the admin page. A partner is relay configuration, so
//! its changes reach neither the pull feed nor the outbox.

pub mod catalog;
pub mod catalog_cli;
pub mod customers;
pub mod partners;
pub mod price_lists;
pub mod sheet;
pub mod tenants;
pub mod users;

use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::problem::{FieldError, Problem, ProblemCode};
use serde_json::Value;
use sqlx::{PgPool, Postgres, Transaction};

use crate::auth::Caller;
use crate::engine::{self, idempotency, Outcome, Step};
use crate::error::Error;

/// A master-data write's key and API.md's fingerprint of the request as sent.
#[derive(Debug, Clone)]
pub struct Keyed {
    pub key: IdempotencyKey,
    pub fingerprint: String,
}

/// What [`begin`] found.
pub(crate) enum Begun {
    /// The key is ours: run the write in this transaction, then [`finish`].
    Claimed(Transaction<'static, Postgres>),
    /// Answered already (a replay), or refused (key reused, in flight): the
    /// whole answer. The transaction is gone.
    Settled(Outcome),
}

/// Opens the write's transaction, bound to the caller's tenant, and claims
/// its key.
pub(crate) async fn begin(db: &PgPool, caller: &Caller, keyed: &Keyed) -> Result<Begun, Error> {
    let mut tx = crate::db::begin_for_tenant(db, caller.tenant_id).await?;
    let claim = idempotency::claim_in_tx(
        &mut tx,
        caller.tenant_id,
        &keyed.key,
        &keyed.fingerprint,
        engine::KEY_LOCK_TIMEOUT,
    )
    .await?;
    match engine::settle(claim) {
        None => Ok(Begun::Claimed(tx)),
        Some(Step::Keep(outcome)) => {
            tx.commit().await?;
            Ok(Begun::Settled(outcome))
        }
        Some(Step::Discard(outcome)) => {
            tx.rollback().await?;
            Ok(Begun::Settled(outcome))
        }
    }
}

/// Ends a claimed write: a success or a stored rejection is stored on the
/// key and committed; any other rejection rolls back (the key stays free);
/// an internal error rolls back and is returned.
pub(crate) async fn finish(
    tx: Transaction<'static, Postgres>,
    caller: &Caller,
    keyed: &Keyed,
    result: Result<engine::Done, Error>,
) -> Result<Outcome, Error> {
    finish_redacting(tx, caller, keyed, result, |_| {}).await
}

/// [`finish`] for an answer that carries a secret shown once (a generated
/// password): `redact` blanks it in the copy stored for replays, so the
/// database never holds it; the caller gets it this once.
pub(crate) async fn finish_redacting(
    mut tx: Transaction<'static, Postgres>,
    caller: &Caller,
    keyed: &Keyed,
    result: Result<engine::Done, Error>,
    redact: impl FnOnce(&mut Value),
) -> Result<Outcome, Error> {
    match result {
        Ok(done) => {
            let body = serde_json::to_vec(&done.body).map_err(anyhow::Error::from)?;
            let mut stored_body = done.body;
            redact(&mut stored_body);
            let stored = Outcome {
                status: done.status,
                body: serde_json::to_vec(&stored_body).map_err(anyhow::Error::from)?,
                replayed: false,
            };
            idempotency::store_in_tx(&mut tx, caller.tenant_id, &keyed.key, &stored).await?;
            tx.commit().await?;
            Ok(Outcome {
                status: done.status,
                body,
                replayed: done.replayed,
            })
        }
        Err(Error::Problem(p)) => {
            let outcome = Outcome::problem(&p);
            if p.code.is_stored_outcome() {
                idempotency::store_in_tx(&mut tx, caller.tenant_id, &keyed.key, &outcome).await?;
                tx.commit().await?;
            } else {
                tx.rollback().await?;
            }
            Ok(outcome)
        }
        Err(e @ Error::Internal(_)) => {
            // Dropping the transaction rolls it back.
            drop(tx);
            Err(e)
        }
    }
}

/// A file that did not validate: 422 `validation_failed` naming every bad
/// row and field (`"line 17: msrp"`), and nothing applied (API.md v1.1).
pub fn rejected_file(errors: Vec<FieldError>) -> Error {
    let shown = errors.len();
    let mut problem = Problem::new(
        ProblemCode::ValidationFailed,
        format!(
            "{shown} problem{} in the file; nothing was applied",
            if shown == 1 { "" } else { "s" }
        ),
    )
    .with("errors", errors);
    problem.status = 422;
    Error::Problem(Box::new(problem))
}

/// The most errors one rejected file lists (a file of 100,000 bad rows must
/// not answer with a 10 MB problem document); the detail says how many more.
pub const MAX_LISTED_ERRORS: usize = 1000;
