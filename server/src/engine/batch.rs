//! Batch push: a reconnecting desk's queued mutations, applied in order
//! through the same engine as single REST calls, with few commits.
//!
//! Items share a transaction (one fsync for many mutations), each inside a
//! savepoint so an item that must be undone — a 400, a lock wait that timed
//! out, an unexpected SQL error — is undone alone. A transaction is committed
//! and a new one begun after `MAX_ITEMS_PER_TX` items or `MAX_TX_TIME`, so a
//! batch never holds a hot SKU's row lock for long.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use holdfast_protocol::model::{PushItem, PushResult};
use holdfast_protocol::problem::{Problem, ProblemCode};
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::{execute_in_tx, route, Outcome, Request, Step};
use crate::http::Caller;

pub const MAX_ITEMS: usize = 500;
const MAX_ITEMS_PER_TX: usize = 100;
const MAX_TX_TIME: Duration = Duration::from_millis(250);

pub async fn push(
    db: &PgPool,
    caller: &Caller,
    items: Vec<PushItem>,
) -> anyhow::Result<Vec<PushResult>> {
    let mut results = Vec::with_capacity(items.len());
    // Order id → key of the first item on it that did not succeed.
    let mut failed: HashMap<Uuid, String> = HashMap::new();
    let mut tx: Option<(Transaction<'static, Postgres>, Instant, usize)> = None;

    for item in items {
        let hint = route::order_hint(&item.path, &item.body);
        if let Some(blocker) = hint.and_then(|o| failed.get(&o)) {
            let p = Problem::new(
                ProblemCode::BlockedByEarlier,
                "an earlier mutation on this order in the batch did not succeed; this one was not run",
            )
            .with("blocked_by", blocker);
            results.push(result(item.idempotency_key, &Outcome::problem(&p)));
            continue;
        }

        let (t, started, count) = match tx.take() {
            Some(open) if open.1.elapsed() < MAX_TX_TIME && open.2 < MAX_ITEMS_PER_TX => open,
            Some((open, _, _)) => {
                open.commit().await?;
                (db.begin().await?, Instant::now(), 0)
            }
            None => (db.begin().await?, Instant::now(), 0),
        };
        let mut t = t;
        sqlx::query("savepoint item").execute(&mut *t).await?;
        let req = Request {
            key: item.idempotency_key.clone(),
            method: item.method,
            path: item.path,
            body: item.body,
        };
        let outcome = match execute_in_tx(&mut t, caller, &req).await {
            Ok(Step::Keep(outcome)) => {
                sqlx::query("release savepoint item")
                    .execute(&mut *t)
                    .await?;
                outcome
            }
            Ok(Step::Discard(outcome)) => {
                sqlx::query("rollback to savepoint item")
                    .execute(&mut *t)
                    .await?;
                outcome
            }
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), key = %req.key, "batch item failed");
                sqlx::query("rollback to savepoint item")
                    .execute(&mut *t)
                    .await?;
                Outcome::problem(&Problem::new(
                    ProblemCode::Internal,
                    "internal error; it has been logged",
                ))
            }
        };
        if !outcome.is_success() {
            if let Some(order) = hint {
                failed.entry(order).or_insert_with(|| req.key.clone());
            }
        }
        results.push(result(req.key, &outcome));
        tx = Some((t, started, count + 1));
    }
    if let Some((t, _, _)) = tx {
        t.commit().await?;
    }
    Ok(results)
}

fn result(key: String, outcome: &Outcome) -> PushResult {
    PushResult {
        idempotency_key: key,
        status: outcome.status,
        body: serde_json::from_slice(&outcome.body).unwrap_or(serde_json::Value::Null),
        replayed: outcome.replayed,
    }
}
