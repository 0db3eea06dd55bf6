//! The push: which pending acts may go now (in the user's order, every
//! order held behind its earliest unsettled act), up to `push_in_flight`
//! batches on disjoint orders at once, and the server's answer to each act
//! recorded in the transaction that settles its row.

use std::collections::HashSet;

use holdfast_protocol::model::{AllocationResult, Order, PushItem, PushResponse};
use holdfast_protocol::problem::ProblemCode;
use rusqlite::Transaction;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::{jitter, SyncReport};
use crate::act::Act;
use crate::api::{Api, ApiError};
use crate::engine::{problem_of, Engine, EngineEvent, Error, Result};
use crate::store::pending::{self, Row, Status, Visit};
use crate::store::{acked, conflicts, now_ms, orders, rejections, skus, sync_state, StoreError};

/// How one push result is handled.
enum Outcome {
    Applied,
    Conflict,
    Rejected,
    Retry,
}

impl Engine {
    /// The next rows to send: in the user's order, skipping every order that
    /// has an earlier row not being sent now (held, in quarantine, or
    /// waiting to retry). A row this build cannot read is put in quarantine
    /// here, and the batch picked again: it holds its order from then on.
    ///
    /// `busy`: orders of a batch in flight beside this one, skipped whole
    /// (their later rows wait for its answer like any other held order).
    fn next_batch(&self, now: i64, busy: &HashSet<Uuid>) -> Result<Vec<Row>> {
        let config = self.config();
        let max_items = config.batch_size.clamp(1, 500);
        loop {
            let mut blocked: HashSet<Uuid> = busy.clone();
            let (mut items, mut bytes) = (0usize, 0usize);
            let found = self.inner.store.read(|tx| {
                pending::scan(tx, |head| {
                    if blocked.contains(&head.order_id) {
                        return Visit::Skip;
                    }
                    if head.status != Status::Queued || head.next_attempt_at > now {
                        blocked.insert(head.order_id);
                        return Visit::Skip;
                    }
                    let size = head.request_bytes + 128;
                    if items >= max_items || (items > 0 && bytes + size > config.batch_bytes) {
                        return Visit::Stop;
                    }
                    items += 1;
                    bytes += size;
                    Visit::Take
                })
            })?;
            if found.unreadable.is_empty() {
                return Ok(found.taken);
            }
            self.inner.store.write(|tx| {
                for (seq, why) in &found.unreadable {
                    tracing::warn!(seq, error = %why, "quarantining a pending act this build cannot read");
                    pending::quarantine(tx, *seq, why, now)?;
                }
                Ok(())
            })?;
            self.emit(EngineEvent::Changed);
        }
    }

    pub(super) async fn push_locked(&self, api: &Api, report: &mut SyncReport) -> Result<()> {
        loop {
            let state = self.inner.store.read(sync_state::get)?;
            if state.restore_started_at.is_some() {
                // Still catching up with a restored server: the queue must
                // wait for the acts it lost to be queued again before it.
                return Ok(());
            }
            let now = now_ms();
            // Up to `push_in_flight` batches at once, on disjoint orders: the
            // server applies them side by side, and no order has rows in two
            // of them, so each order's acts still go in the user's order.
            let mut batches: Vec<Vec<Row>> = Vec::new();
            let mut busy: HashSet<Uuid> = HashSet::new();
            for _ in 0..self.config().push_in_flight.max(1) {
                let batch = self.next_batch(now, &busy)?;
                if batch.is_empty() {
                    break;
                }
                busy.extend(batch.iter().map(|r| r.order_id));
                batches.push(batch);
            }
            if batches.is_empty() {
                return Ok(());
            }
            let started = std::time::Instant::now();
            let mut sending = tokio::task::JoinSet::new();
            for (i, batch) in batches.iter().enumerate() {
                let items: Vec<PushItem> = batch
                    .iter()
                    .map(|r| PushItem {
                        idempotency_key: r.key.clone(),
                        method: r.request.method.clone(),
                        path: r.request.path.clone(),
                        body: r.request.body.clone(),
                    })
                    .collect();
                let (api, history) = (api.clone(), state.history.clone());
                sending.spawn(async move { (i, api.push(items, history.as_deref()).await) });
            }
            let mut answers: Vec<Option<std::result::Result<PushResponse, ApiError>>> =
                batches.iter().map(|_| None).collect();
            while let Some(joined) = sending.join_next().await {
                let (i, answer) = joined
                    .map_err(|e| Error::Store(StoreError::Invalid(format!("push task: {e}"))))?;
                answers[i] = Some(answer);
            }
            let pushed = started.elapsed();
            report.pushes += batches.len();
            // Every answer that arrived is recorded before any failure is
            // acted on: what the server applied is never sent again.
            let (mut settled, mut restored, mut failed) = (0, false, None);
            for (batch, answer) in batches.iter().zip(answers) {
                let Some(answer) = answer else { continue };
                match answer {
                    Ok(resp) => {
                        if resp.results.len() != batch.len()
                            || resp
                                .results
                                .iter()
                                .zip(batch)
                                .any(|(res, row)| res.idempotency_key != row.key)
                        {
                            failed.get_or_insert(Error::Api(ApiError::Decode(
                                "push answered a different set of mutations than was sent".into(),
                            )));
                            continue;
                        }
                        let recorded = std::time::Instant::now();
                        let now_settled = self.record_results(batch, &resp, report)?;
                        settled += now_settled;
                        tracing::info!(
                            items = batch.len(),
                            settled = now_settled,
                            in_flight = batches.len(),
                            push_ms = pushed.as_secs_f64() * 1e3,
                            record_ms = recorded.elapsed().as_secs_f64() * 1e3,
                            "pushed a batch"
                        );
                    }
                    // Nothing ran. The pull that follows catches up.
                    Err(e) if e.is_server_restored() => restored = true,
                    Err(e) => {
                        if !e.is_unauthorized() {
                            let msg = e.to_string();
                            self.inner.store.write(|tx| {
                                for row in batch {
                                    // Attempt counted; the store-wide backoff decides when.
                                    pending::retry_later(tx, row.seq, &msg, row.next_attempt_at)?;
                                }
                                Ok(())
                            })?;
                        }
                        failed.get_or_insert(Error::Api(e));
                    }
                }
            }
            if restored {
                self.server_restored()?;
                return Ok(());
            }
            if let Some(e) = failed {
                return Err(e);
            }
            if settled == 0 {
                // Nothing moved (every item must wait): don't spin.
                return Ok(());
            }
        }
    }

    /// Records every answer of one push in one transaction. Returns how many
    /// rows settled (applied, conflict, rejection).
    fn record_results(
        &self,
        batch: &[Row],
        resp: &PushResponse,
        report: &mut SyncReport,
    ) -> Result<usize> {
        let now = now_ms();
        let mut outcomes = Vec::with_capacity(batch.len());
        self.inner.store.write(|tx| {
            outcomes.clear();
            for (row, res) in batch.iter().zip(&resp.results) {
                outcomes.push(record_one(self, tx, row, res.status, &res.body, now)?);
            }
            sync_state::pushed(tx, now)?;
            Ok(())
        })?;
        let replayed = batch
            .iter()
            .zip(&resp.results)
            .filter(|(_, r)| r.replayed && (200..300).contains(&r.status))
            .count();
        report.replayed += replayed;
        let (mut applied, mut conflicts, mut rejected) = (0, 0, 0);
        for o in outcomes {
            match o {
                Outcome::Applied => applied += 1,
                Outcome::Conflict => conflicts += 1,
                Outcome::Rejected => rejected += 1,
                Outcome::Retry => report.retrying += 1,
            }
        }
        report.applied += applied;
        report.conflicts += conflicts;
        report.rejections += rejected;
        self.emit(EngineEvent::Pushed {
            applied,
            conflicts,
            rejections: rejected,
            replayed,
        });
        let settled = applied + conflicts + rejected;
        Ok(settled)
    }
}

/// Records the server's answer to one pending row.
fn record_one(
    engine: &Engine,
    tx: &Transaction<'_>,
    row: &Row,
    status: u16,
    body: &Value,
    now: i64,
) -> Result<Outcome, StoreError> {
    let keep_ms = engine.config().journal_retention.as_millis() as i64;
    if (200..300).contains(&status) {
        let version = apply_success(tx, row, body)?;
        acked::record(tx, row.seq, version, now, keep_ms)?;
        return Ok(Outcome::Applied);
    }
    let problem = problem_of(status, body);
    let retry_in = |attempts: i64| jitter(engine, attempts.clamp(0, 30) as u32);
    match (status, problem.code) {
        (409, ProblemCode::VersionConflict) => {
            let current: Option<Order> = problem
                .extension("current")
                .and_then(|c| serde_json::from_value(c.clone()).ok());
            let Some(current) = current else {
                pending::set_status(tx, row.seq, Status::Rejected, "conflict without a document")?;
                rejections::open(tx, row.seq, row.order_id, &row.key, &problem, now)?;
                return Ok(Outcome::Rejected);
            };
            orders::upsert(tx, &current)?;
            if matches!(row.act, Act::CreateOrder { .. }) {
                // Ids are minted here (v7) and never reused: an order with
                // this id is the one this act created, on an earlier attempt
                // whose answer was lost and whose key has since expired.
                // A create makes version 1.
                acked::record(tx, row.seq, Some(1), now, keep_ms)?;
                return Ok(Outcome::Applied);
            }
            pending::set_status(tx, row.seq, Status::Conflict, "version conflict")?;
            conflicts::open(
                tx,
                &conflicts::Record {
                    order_id: row.order_id,
                    pending_seq: row.seq,
                    key: row.key.clone(),
                    your_base_version: problem
                        .extension("your_base_version")
                        .and_then(Value::as_i64)
                        .unwrap_or(row.base_version),
                    base_doc: row.base_doc.clone(),
                    theirs: current,
                    detected_at: now,
                },
            )?;
            Ok(Outcome::Conflict)
        }
        // Not run: an earlier act on this order in the batch did not
        // succeed. Its own outcome now holds this one (or it retries first).
        (424, _) => {
            pending::retry_later(tx, row.seq, "waiting for an earlier act on this order", now)?;
            Ok(Outcome::Retry)
        }
        (409, ProblemCode::RequestInFlight) | (429, _) => {
            let after = problem
                .extension("retry_after")
                .and_then(Value::as_i64)
                .map(|s| s * 1000)
                .unwrap_or_else(|| retry_in(row.attempts));
            pending::retry_later(tx, row.seq, &detail(&problem), now + after)?;
            Ok(Outcome::Retry)
        }
        (s, _) if s >= 500 => {
            pending::retry_later(tx, row.seq, &detail(&problem), now + retry_in(row.attempts))?;
            Ok(Outcome::Retry)
        }
        (401, _) => {
            // Cannot happen per item (auth is per request); retry after login.
            pending::retry_later(tx, row.seq, &detail(&problem), now)?;
            Ok(Outcome::Retry)
        }
        // Business rejections (422) and requests the server calls wrong
        // (400, 403, 404, 413, idempotency_key_reused): a bug or a fact the
        // user must see. Never dropped silently.
        _ => {
            pending::set_status(tx, row.seq, Status::Rejected, &detail(&problem))?;
            rejections::open(tx, row.seq, row.order_id, &row.key, &problem, now)?;
            Ok(Outcome::Rejected)
        }
    }
}

fn detail(p: &holdfast_protocol::problem::Problem) -> String {
    format!(
        "{} {}: {}",
        p.status,
        p.code,
        p.detail.as_deref().unwrap_or(&p.title)
    )
}

/// A 2xx: the returned document is the server's state after the act. The
/// act happened whatever the body says, so a body we cannot read is logged
/// and left to the next pull, never a reason to send the act again. Returns
/// the order's version in the answer (the one the act made), if readable.
fn apply_success(tx: &Transaction<'_>, row: &Row, body: &Value) -> Result<Option<i64>, StoreError> {
    let unreadable = |e: serde_json::Error| {
        tracing::warn!(key = %row.key, error = %e, "applied, but the answer is unreadable");
    };
    match &row.act {
        Act::Allocate { line_id, .. } | Act::Release { line_id, .. } => {
            match AllocationResult::deserialize(body) {
                Ok(r) => {
                    if orders::upsert(tx, &r.order)? {
                        if let Some(line) = r.order.lines.iter().find(|l| l.id == *line_id) {
                            skus::set_ats(tx, line.sku_id, r.ats_after)?;
                        }
                    }
                    Ok(Some(r.order.version))
                }
                Err(e) => {
                    unreadable(e);
                    Ok(None)
                }
            }
        }
        _ => match Order::deserialize(body) {
            Ok(order) => {
                orders::upsert(tx, &order)?;
                Ok(Some(order.version))
            }
            Err(e) => {
                unreadable(e);
                Ok(None)
            }
        },
    }
}
