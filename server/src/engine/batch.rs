//! Batch push: a reconnecting desk's queued mutations, applied in order
//! through the same engine as single REST calls, with few commits.
//!
//! The batch is first split into lanes that share no row (`lanes`: the same
//! order, key, SKU, or the customer of a confirm or cancel keep items
//! together), applied side by side on a connection each; within a lane the
//! items run in batch order as described below, and the answers are put
//! back in batch order.
//!
//! Items share a transaction (one fsync for many mutations). A transaction is
//! committed and a new one begun after `MAX_ITEMS_PER_TX` items or
//! `MAX_TX_TIME`, so a batch never holds a hot SKU's row lock for long. Each
//! such chunk is applied one of two ways:
//!
//! * **Straight** (first): no savepoints. The chunk's keys are claimed a
//!   run of items at a time, each run in one statement
//!   (`idempotency::claim_many_in_tx`: the key of every item that will run
//!   unless an earlier item of the chunk fails on its order; the
//!   `lock_timeout` bound set and lifted inside it; a run as long as fits
//!   in what is left of `MAX_TX_TIME` at the pace seen so far, so the chunk
//!   ends on time where every claimed item has run), then
//!   each item runs its handler, or is answered from what the claim read (a
//!   replay, `idempotency_key_reused`); the chunk's answers are stored on
//!   their key rows in one statement just before the commit. Per item only
//!   the handler's own statements remain: no savepoint and release, and
//!   no claim or store of its own. An order the chunk has edited stays
//!   locked and known (`edit::Held`), so the next line edit or
//!   allocation on it is its write alone: one round trip.
//! * **With a savepoint per item** (the fallback): exactly the engine as a
//!   REST call runs it, each item undone alone when it must be.
//!
//! Why the straight way is sound: it only ever commits a transaction that
//! holds exactly the effects of items whose answers it reports. An item's
//! answer comes from one of these, and for each we know what the item left
//! in the transaction:
//!
//! * a 424 `blocked_by_earlier`, or a check that needs no database (key
//!   length, role, route, body: `engine::parse_item` and `engine::check`) —
//!   nothing was executed;
//! * its key was already answered (a replay, or `idempotency_key_reused`) —
//!   the claim inserted nothing and the stored answer was only read (a key
//!   whose holder committed while the chunk's claim waited on it is read
//!   again by the item alone, `idempotency::claim_in_tx`);
//! * its key was claimed and the handler's answer is kept (a success or a
//!   stored rejection) — these are the item's effects, as in a REST call; a
//!   stored rejection is decided before the handler's first write, so it
//!   writes only the key row (the engine's rule, `engine` module docs).
//!   Storing the answer at the end of the chunk instead of after the item
//!   changes nothing another transaction can see (nobody sees the claimed
//!   row before the commit, and a duplicate waits for the commit); the one
//!   reader in between, a later item of the same chunk with the same key,
//!   is answered from the kept answers as the stored row would answer it.
//!
//! Everything else could leave something behind that must not commit, so the
//! straight attempt stops at it, rolls the whole transaction back, and the
//! chunk is applied again from its first item with a savepoint per item:
//!
//! * the claim's wait for a key held by a running request timed out — that
//!   error aborts the transaction (the fallback answers `request_in_flight`
//!   after the same bounded wait);
//! * a key claimed up front whose item did not run: an item blocked (424)
//!   by an earlier item of the chunk on its order;
//! * a claimed key whose answer is not stored (a 404 or 400 the handler
//!   found) — the key row must not commit, and undoing it is a savepoint's
//!   job (the request role may not delete keys);
//! * any unexpected error (a lock timeout elsewhere, a deadlock, a bug, or
//!   storing the answers not finding every claimed row) — the fallback
//!   answers that item 500 and runs the others.
//!
//! The redo starts from the state before the chunk: no result of the
//! abandoned attempt is reported and the map of failed orders is restored,
//! so the order of items and the per-order `blocked_by_earlier` rule are
//! exactly those of one pass with savepoints. (Counters such as replays or
//! rejections may count an item of an abandoned attempt twice.) The database
//! being unavailable is not retried: the push answers 503.

mod lanes;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tracing::Instrument as _;

use holdfast_protocol::model::{PushItem, PushResult};
use holdfast_protocol::problem::{Problem, ProblemCode};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::edit::Held;
use super::idempotency::{self, Claim, ManyClaim};
use holdfast_protocol::mutation::Mutation;

use super::{
    check, execute_in_tx, parse_item, run_handler, settle, Outcome, Request, Step, KEY_LOCK_TIMEOUT,
};
use crate::auth::Caller;
use crate::db::begin_for_tenant;

pub const MAX_ITEMS: usize = 500;
const MAX_ITEMS_PER_TX: usize = 100;
const MAX_TX_TIME: Duration = Duration::from_millis(250);

/// Order id → key of the first item on it that did not succeed.
type Failed = HashMap<Uuid, String>;

/// Applies a batch: its items split into lanes that share no row
/// (`lanes`), each lane applied in batch order on its own connection, the
/// lanes side by side; the answers in batch order.
pub async fn push(
    db: &PgPool,
    caller: &Caller,
    items: Vec<PushItem>,
) -> anyhow::Result<Vec<PushResult>> {
    let items: Vec<Item> = items.iter().map(Item::new).collect();
    let lane_of = lanes_of(db, caller, &items).await?;
    let count = items.len();
    let mut lanes: Vec<(Vec<usize>, Vec<Item>)> = Vec::new();
    for (i, (item, lane)) in items.into_iter().zip(lane_of).enumerate() {
        if lanes.len() <= lane {
            lanes.resize_with(lane + 1, Default::default);
        }
        lanes[lane].0.push(i);
        lanes[lane].1.push(item);
    }
    if let [(_, items)] = lanes.as_slice() {
        return apply_in_order(db, caller, items).await;
    }
    let mut running = tokio::task::JoinSet::new();
    for (indices, items) in lanes {
        let (db, caller) = (db.clone(), caller.clone());
        running.spawn(
            async move {
                let answers = apply_in_order(&db, &caller, &items).await?;
                anyhow::Ok((indices, answers))
            }
            .instrument(tracing::Span::current()),
        );
    }
    let mut results: Vec<Option<PushResult>> = (0..count).map(|_| None).collect();
    while let Some(lane) = running.join_next().await {
        let (indices, answers) = lane??;
        for (i, answer) in indices.into_iter().zip(answers) {
            results[i] = Some(answer);
        }
    }
    results
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .context("a lane of the push left an item unanswered")
}

/// The lane of each item (`lanes::Groups`): what the batch shows, and when
/// that leaves more than one group, what the database holds for its orders.
async fn lanes_of(db: &PgPool, caller: &Caller, items: &[Item]) -> anyhow::Result<Vec<usize>> {
    let mut groups = lanes::Groups::of(items);
    if lanes::LANES == 1 || groups.is_one() {
        return Ok(vec![0; items.len()]);
    }
    let mut tx = begin_for_tenant(db, caller.tenant_id).await?;
    let existing: Vec<(Uuid, Uuid, Vec<Uuid>)> = sqlx::query_as(
        "select o.id, o.customer_id, coalesce(array_agg(l.sku_id) filter (where l.sku_id is not null), '{}')
           from orders o
           left join order_lines l on l.tenant_id = o.tenant_id and l.order_id = o.id
          where o.tenant_id = $1 and o.id = any($2)
          group by o.id, o.customer_id",
    )
    .bind(caller.tenant_id)
    .bind(groups.orders())
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let existing: Vec<lanes::Existing> = existing
        .into_iter()
        .map(|(order, customer, skus)| lanes::Existing {
            order,
            customer,
            skus,
        })
        .collect();
    groups.add_existing(&existing);
    Ok(groups.lanes(lanes::LANES))
}

/// One lane's items in order: chunk after chunk, each tried straight and
/// redone with a savepoint per item when it must be (the module docs).
async fn apply_in_order(
    db: &PgPool,
    caller: &Caller,
    items: &[Item],
) -> anyhow::Result<Vec<PushResult>> {
    let mut results = Vec::with_capacity(items.len());
    let mut failed = Failed::new();
    let mut pace = None;
    while results.len() < items.len() {
        let rest = &items[results.len()..];
        let before = failed.clone();
        let answers = match straight_chunk(db, caller, rest, &mut failed, &mut pace).await? {
            Ok(answers) => answers,
            Err(redo) => {
                failed = before;
                metrics::counter!("holdfast_push_chunks_redone_total").increment(1);
                tracing::info!(
                    key = %rest[redo.at].key,
                    reason = redo.reason,
                    "batch chunk applied again with a savepoint per item"
                );
                savepoint_chunk(db, caller, rest, &mut failed).await?
            }
        };
        results.extend(answers);
    }
    Ok(results)
}

/// One pushed item: the key it was sent with (its result carries it back),
/// the order it is about, and the request it makes or the answer refusing it.
struct Item {
    key: String,
    order: Option<Uuid>,
    request: Result<Request, Outcome>,
}

impl Item {
    fn new(item: &PushItem) -> Self {
        Item {
            key: item.idempotency_key.clone(),
            order: Mutation::order_hint(&item.path, &item.body),
            request: parse_item(item),
        }
    }
}

/// Items whose keys a straight chunk claims in its first statement when
/// there is no pace yet to size it by.
const FIRST_CLAIM: usize = 25;
/// The fewest items a later claim of a straight chunk takes.
const MIN_CLAIM: usize = 4;

/// How many items from `at` a straight chunk begun at `started` claims
/// next: as many as fit in what is left of `MAX_TX_TIME` at the pace seen
/// so far (this chunk's, or the last one's for its first claim), at least
/// `MIN_CLAIM`; `None` when the time is up (commit).
fn next_claim(at: usize, started: Instant, pace: Option<Duration>) -> Option<usize> {
    let elapsed = started.elapsed();
    if at > 0 && elapsed >= MAX_TX_TIME {
        return None;
    }
    let pace = if at > 0 {
        Some(elapsed / at as u32)
    } else {
        pace
    };
    Some(
        match pace {
            None => FIRST_CLAIM,
            Some(pace) if pace.is_zero() => MAX_ITEMS_PER_TX,
            Some(pace) => ((MAX_TX_TIME - elapsed).as_nanos() / pace.as_nanos()) as usize,
        }
        .max(MIN_CLAIM),
    )
}

/// Why a straight attempt was abandoned, and at which item of the chunk.
struct Redo {
    at: usize,
    reason: &'static str,
}

/// True when the chunk begun at `started` holds `count` items: commit it.
fn chunk_full(count: usize, started: Instant) -> bool {
    count >= MAX_ITEMS_PER_TX || (count > 0 && started.elapsed() >= MAX_TX_TIME)
}

/// 424 for an item on an order an earlier item of the batch failed on.
fn blocked(failed: &Failed, hint: Option<Uuid>) -> Option<Outcome> {
    let blocker = hint.and_then(|o| failed.get(&o))?;
    let p = Problem::new(
        ProblemCode::BlockedByEarlier,
        "an earlier mutation on this order in the batch did not succeed; this one was not run",
    )
    .with("blocked_by", blocker);
    Some(Outcome::problem(&p))
}

fn note(failed: &mut Failed, hint: Option<Uuid>, key: &str, outcome: &Outcome) {
    if !outcome.is_success() {
        if let Some(order) = hint {
            failed.entry(order).or_insert_with(|| key.to_owned());
        }
    }
}

/// One chunk from the front of `items` without savepoints; its answers once
/// committed, or `Err(Redo)` after rolling it back (see the module docs).
/// Its keys are claimed a few items at a time (`next_claim`), so that the
/// chunk can end at `MAX_TX_TIME` where every claimed item has run; `pace`
/// is the time per item, carried from one chunk to the next.
async fn straight_chunk(
    db: &PgPool,
    caller: &Caller,
    items: &[Item],
    failed: &mut Failed,
    pace: &mut Option<Duration>,
) -> anyhow::Result<Result<Vec<PushResult>, Redo>> {
    let chunk = &items[..items.len().min(MAX_ITEMS_PER_TX)];
    let mut tx = begin_for_tenant(db, caller.tenant_id).await?;
    let started = Instant::now();
    let mut claims = Claims::default();
    let mut claimed_to = 0;
    let mut answers = Vec::new();
    let mut to_store = ToStore::default();
    let mut held = Held::default();
    for (at, item) in chunk.iter().enumerate() {
        if at == claimed_to {
            let Some(n) = next_claim(at, started, *pace) else {
                break;
            };
            claimed_to = chunk.len().min(at + n);
            let claimed =
                claim_chunk(&mut tx, caller, &chunk[at..claimed_to], failed, &mut claims).await;
            let reason = match claimed {
                Ok(true) => None,
                Ok(false) => Some("key held by a running request"),
                Err(e) if crate::error::is_unavailable(&e) => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(error = format!("{e:#}"), "claiming a chunk's keys failed");
                    Some("unexpected error")
                }
            };
            if let Some(reason) = reason {
                tx.rollback().await?;
                return Ok(Err(Redo { at, reason }));
            }
        }
        let outcome = match (blocked(failed, item.order), &item.request) {
            (Some(outcome), _) => outcome,
            (None, Err(outcome)) => outcome.clone(),
            (None, Ok(req)) => {
                match straight_item(
                    &mut tx,
                    caller,
                    req,
                    &mut claims.found,
                    &mut to_store,
                    &mut held,
                )
                .await
                {
                    Ok(Ok(outcome)) => outcome,
                    Ok(Err(reason)) => {
                        tx.rollback().await?;
                        return Ok(Err(Redo { at, reason }));
                    }
                    Err(e) if crate::error::unavailable_cause(&e).is_some() => return Err(e),
                    Err(e) => {
                        tracing::warn!(error = format!("{e:#}"), key = %item.key, "batch item failed");
                        tx.rollback().await?;
                        return Ok(Err(Redo {
                            at,
                            reason: "unexpected error",
                        }));
                    }
                }
            }
        };
        note(failed, item.order, &item.key, &outcome);
        answers.push(result(item.key.clone(), &outcome));
    }
    if !answers.is_empty() {
        *pace = Some(started.elapsed() / answers.len() as u32);
    }
    // A key claimed up front whose item did not run (an item blocked by an
    // earlier one of the chunk) must not commit its empty row.
    if claims
        .found
        .values()
        .any(|c| matches!(c, ManyClaim::Claimed))
    {
        tx.rollback().await?;
        return Ok(Err(Redo {
            at: 0,
            reason: "claimed key left unanswered",
        }));
    }
    if !to_store.keys.is_empty() {
        let stored = idempotency::store_many_in_tx(
            &mut tx,
            caller.tenant_id,
            &to_store.keys,
            &to_store.statuses,
            &to_store.bodies,
        )
        .await;
        match stored {
            Ok(n) if n == to_store.keys.len() as u64 => {}
            Err(e) if crate::error::is_unavailable(&e) => return Err(e.into()),
            other => {
                tracing::warn!(result = ?other, "storing a chunk's answers failed");
                tx.rollback().await?;
                return Ok(Err(Redo {
                    at: 0,
                    reason: "storing the answers failed",
                }));
            }
        }
    }
    tx.commit().await?;
    Ok(Ok(answers))
}

/// The keys a straight chunk has claimed so far: what the claims found
/// (an entry leaves `found` once its item runs) and every key sent.
#[derive(Default)]
struct Claims {
    found: HashMap<String, ManyClaim>,
    sent: std::collections::HashSet<String>,
}

/// Claims, in one statement, the keys of `part` (the next items of a
/// chunk): of every item that will run unless an earlier item of the chunk
/// fails on its order (it is not blocked now, its request parsed and passes
/// the checks that need no database), each key once per chunk (its first
/// such item's fingerprint; a later item with the same key is judged from
/// the kept answers or the stored row, with its own fingerprint; a key
/// claimed earlier in the chunk is not sent again: the statement would read
/// this transaction's own empty row). `false`: a key is held by a running
/// request past the bound, and the transaction is aborted.
async fn claim_chunk(
    conn: &mut PgConnection,
    caller: &Caller,
    part: &[Item],
    failed: &Failed,
    claims: &mut Claims,
) -> Result<bool, sqlx::Error> {
    let mut keys = Vec::new();
    let mut fingerprints = Vec::new();
    for item in part {
        let Ok(req) = &item.request else { continue };
        if blocked(failed, item.order).is_some() || check(caller, req).is_err() {
            continue;
        }
        if claims.sent.insert(req.key.as_str().to_owned()) {
            keys.push(req.key.as_str().to_owned());
            fingerprints.push(req.fingerprint.clone());
        }
    }
    if keys.is_empty() {
        return Ok(true);
    }
    let found = idempotency::claim_many_in_tx(
        conn,
        caller.tenant_id,
        &keys,
        &fingerprints,
        KEY_LOCK_TIMEOUT,
    )
    .await?;
    let Some(found) = found else {
        return Ok(false);
    };
    claims.found.extend(keys.into_iter().zip(found));
    Ok(true)
}

/// The answers a straight chunk has kept, stored on their key rows in one
/// statement just before the commit; until then a later item of the chunk
/// with the same key replays from here.
#[derive(Default)]
struct ToStore {
    keys: Vec<String>,
    statuses: Vec<i16>,
    bodies: Vec<Vec<u8>>,
    /// Key → (fingerprint, index in the vectors above).
    by_key: HashMap<String, (String, usize)>,
}

impl ToStore {
    fn push(&mut self, key: &str, fingerprint: String, outcome: &Outcome) {
        self.by_key
            .insert(key.to_owned(), (fingerprint, self.keys.len()));
        self.keys.push(key.to_owned());
        self.statuses.push(outcome.status as i16);
        self.bodies.push(outcome.body.clone());
    }

    /// A key claimed earlier in this chunk, as the claim would find it.
    fn claim(&self, key: &str, fingerprint: &str) -> Option<Claim> {
        let (stored_fingerprint, i) = self.by_key.get(key)?;
        Some(idempotency::resolve(
            fingerprint,
            stored_fingerprint,
            self.statuses[*i],
            self.bodies[*i].clone(),
        ))
    }
}

/// One item without a savepoint: its answer when the transaction now holds
/// exactly its effects, or why the chunk must be redone. Its key was
/// claimed with the chunk's (`claims`; taken out once this item runs, so a
/// later item with the same key finds the kept answer in `to_store`), or is
/// claimed now when that claim could not tell (`ManyClaim::Unknown`).
async fn straight_item(
    conn: &mut PgConnection,
    caller: &Caller,
    req: &Request,
    claims: &mut HashMap<String, ManyClaim>,
    to_store: &mut ToStore,
    held: &mut Held,
) -> anyhow::Result<Result<Outcome, &'static str>> {
    if let Err(outcome) = check(caller, req) {
        return Ok(Ok(outcome));
    }
    let key = req.key.as_str();
    let claim = match to_store.claim(key, &req.fingerprint) {
        Some(claim) => claim,
        None => match claims.get(key) {
            Some(ManyClaim::Claimed) => {
                claims.remove(key);
                Claim::Claimed
            }
            Some(ManyClaim::Answered {
                fingerprint,
                status,
                body,
            }) => idempotency::resolve(&req.fingerprint, fingerprint, *status, body.clone()),
            Some(ManyClaim::Unknown) | None => {
                idempotency::claim_in_tx(
                    conn,
                    caller.tenant_id,
                    &req.key,
                    &req.fingerprint,
                    KEY_LOCK_TIMEOUT,
                )
                .await?
            }
        },
    };
    if matches!(claim, Claim::InFlight) {
        return Ok(Err("key held by a running request"));
    }
    if let Some(Step::Keep(outcome) | Step::Discard(outcome)) = settle(claim) {
        // A replay or a reused key: the claim inserted nothing.
        return Ok(Ok(outcome));
    }
    match run_handler(conn, caller, &req.key, req.mutation.clone(), held).await? {
        Step::Keep(outcome) => {
            to_store.push(key, req.fingerprint.clone(), &outcome);
            Ok(Ok(outcome))
        }
        Step::Discard(_) => Ok(Err("claimed key with an unstored answer")),
    }
}

/// One chunk from the front of `items` with a savepoint per item, each item
/// undone alone when it must be; its answers once committed.
async fn savepoint_chunk(
    db: &PgPool,
    caller: &Caller,
    items: &[Item],
    failed: &mut Failed,
) -> anyhow::Result<Vec<PushResult>> {
    let mut tx = begin_for_tenant(db, caller.tenant_id).await?;
    let started = Instant::now();
    let mut answers = Vec::new();
    for (at, item) in items.iter().enumerate() {
        if chunk_full(at, started) {
            break;
        }
        let req = match (blocked(failed, item.order), &item.request) {
            (Some(outcome), _) => {
                answers.push(result(item.key.clone(), &outcome));
                continue;
            }
            (None, Err(outcome)) => {
                note(failed, item.order, &item.key, outcome);
                answers.push(result(item.key.clone(), outcome));
                continue;
            }
            (None, Ok(req)) => req,
        };
        sqlx::query("savepoint item").execute(&mut *tx).await?;
        let outcome = match execute_in_tx(&mut tx, caller, req).await {
            Ok(Step::Keep(outcome)) => {
                sqlx::query("release savepoint item")
                    .execute(&mut *tx)
                    .await?;
                outcome
            }
            Ok(Step::Discard(outcome)) => {
                sqlx::query("rollback to savepoint item")
                    .execute(&mut *tx)
                    .await?;
                outcome
            }
            // The database went away (or refuses writes): so will every later
            // item. Answer the whole push 503; this transaction rolls back
            // and the desk retries the batch, replaying what committed.
            Err(e) if crate::error::unavailable_cause(&e).is_some() => return Err(e),
            // A row this item needs stayed locked past the bound: this item
            // alone answers 503 (nothing stored, the desk retries its key).
            Err(e) if crate::error::is_row_lock_timeout(&e) => {
                tracing::warn!(key = %item.key, "batch item waited too long for a row lock");
                sqlx::query("rollback to savepoint item")
                    .execute(&mut *tx)
                    .await?;
                Outcome::problem(&crate::error::Error::Internal(e).to_problem())
            }
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), key = %item.key, "batch item failed");
                sqlx::query("rollback to savepoint item")
                    .execute(&mut *tx)
                    .await?;
                Outcome::problem(&Problem::new(
                    ProblemCode::Internal,
                    "internal error; it has been logged",
                ))
            }
        };
        note(failed, item.order, &item.key, &outcome);
        answers.push(result(item.key.clone(), &outcome));
    }
    tx.commit().await?;
    Ok(answers)
}

fn result(key: String, outcome: &Outcome) -> PushResult {
    PushResult {
        idempotency_key: key,
        status: outcome.status,
        body: serde_json::from_slice(&outcome.body).unwrap_or(serde_json::Value::Null),
        replayed: outcome.replayed,
    }
}
