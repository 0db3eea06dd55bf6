//! The sync loop: push pending acts in order through `POST /v1/sync/push`,
//! then pull with the stored cursor; react to `/v1/sync/stream` pokes; back
//! off with full jitter on network errors and 5xx (honouring Retry-After);
//! retry at once when connectivity returns.
//!
//! Exactly once, in order, across crashes: a pending row leaves the queue
//! (for the journal of acknowledged acts) only in the transaction that
//! records the server's answer to it, and a row is sent
//! only when every earlier row of its order is settled (sent and answered in
//! this batch, or done). A crash anywhere re-sends the same keys, which the
//! server replays; the batch answers `blocked_by_earlier` for a later act on
//! an order whose earlier act failed, so order holds within a batch too.
//!
//! Per-document head-of-line blocking: a conflict or a rejection holds only
//! its own order's later acts; every other order keeps syncing.
//!
//! A server restored from a backup is back where the backup was taken: what
//! the desk mirrors may be newer, and the acts it acknowledged since are gone
//! from it. The desk hears it as 410 `server_restored` (its pushes name the
//! server history of its last pull, its cursor carries it), clears its
//! mirrors, pulls everything again, and then queues again, in their old
//! places, exactly the journaled acts (`store::acked`) the restored documents
//! do not show. They are applied afresh under their own keys — clean
//! re-applies, not replays: the restored server never saw those keys — and
//! nothing the server still has is sent twice.
//!
//! After a pass that pulled, at most once a minute, the desk also asks which
//! orders have a dead-lettered partner delivery (`refresh_order_flags`): a
//! read the pass can do without, so it never fails or backs off the pass.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use holdfast_protocol::backoff::full_jitter_ms;
use holdfast_protocol::model::{
    AllocationResult, Customer, Invoice, Order, PriceList, PushItem, PushResponse, Sku,
};
use holdfast_protocol::problem::ProblemCode;
use rusqlite::Transaction;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::act::Act;
use crate::api::{Api, ApiError, PullPage, SseParser};
use crate::engine::{problem_of, Engine, EngineEvent, Error, Result};
use crate::store::pending::{self, Row, Status, Visit};
use crate::store::{
    acked, conflicts, customers, invoices, now_ms, order_flags, orders, price_lists, rejections,
    skus, sync_state, unreadable, StoreError, SyncLock,
};

/// What one pass did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct SyncReport {
    /// Acts the server accepted (or had already accepted: replays).
    pub applied: usize,
    /// Of those, answers replayed from the idempotency key: the act had run
    /// before but its answer never arrived (a lost response, a crash).
    pub replayed: usize,
    pub conflicts: usize,
    pub rejections: usize,
    /// Acts left to retry later (request in flight, a 5xx on the item).
    pub retrying: usize,
    /// Documents the pull brought.
    pub pulled: usize,
    pub pushes: usize,
    /// The server had been restored from a backup: journaled acts it lacked,
    /// queued again (and sent again in this pass, under their own keys).
    pub requeued: usize,
}

/// How one push result is handled.
enum Outcome {
    Applied,
    Conflict,
    Rejected,
    Retry,
}

fn jitter(engine: &Engine, attempt: u32) -> i64 {
    let c = engine.config();
    full_jitter_ms(
        attempt,
        c.backoff_base_ms,
        c.backoff_cap_ms,
        rand::random::<f64>(),
    ) as i64
}

impl Engine {
    /// Takes the store's sync lock: waits for a pass of this process, fails
    /// with [`Error::Busy`] if another process is syncing.
    async fn lock_sync(&self) -> Result<(tokio::sync::MutexGuard<'_, ()>, SyncLock)> {
        let gate = self.inner.sync_gate.lock().await;
        match self.inner.store.try_sync_lock()? {
            Some(lock) => Ok((gate, lock)),
            None => Err(Error::Busy),
        }
    }

    /// One pass: push everything that may go, then pull until caught up.
    /// Ignores the store-wide backoff (this is "sync now"); per-act retry
    /// times (Retry-After of a request still in flight) are respected.
    pub async fn sync_once(&self) -> Result<SyncReport> {
        let _lock = self.lock_sync().await?;
        let api = self.api()?;
        let mut report = SyncReport::default();
        let result = async {
            self.push_locked(&api, &mut report).await?;
            if self.pull_locked(&api, &mut report).await? {
                // Caught up with a restored server: what it lacked is queued
                // again, in its old places; send it now.
                self.push_locked(&api, &mut report).await?;
            }
            Ok(())
        }
        .await;
        let report = self.finish_pass(&api, result, report)?;
        self.refresh_order_flags(&api).await;
        Ok(report)
    }

    /// Push only (tests and the CLI's `sync --push-only`).
    pub async fn push(&self) -> Result<SyncReport> {
        let _lock = self.lock_sync().await?;
        let api = self.api()?;
        let mut report = SyncReport::default();
        let result = self.push_locked(&api, &mut report).await;
        self.finish_pass(&api, result, report)
    }

    /// Pull only: brings the server's documents, never touches pending acts.
    pub async fn pull(&self) -> Result<SyncReport> {
        let _lock = self.lock_sync().await?;
        let api = self.api()?;
        let mut report = SyncReport::default();
        let result = self.pull_locked(&api, &mut report).await.map(|_| ());
        let report = self.finish_pass(&api, result, report)?;
        self.refresh_order_flags(&api).await;
        Ok(report)
    }

    /// After a pass that pulled: asks the server which orders have a partner
    /// delivery dead-lettered now, if the desk has not asked within
    /// `flags_interval` (or has signed in since), and keeps the answer
    /// ([`order_flags`]).
    ///
    /// Nothing here can fail or hold up the pass. It runs once the pass is
    /// recorded (its outcome, the `SyncFinished` event); the request has a
    /// short timeout of its own (`flags_timeout`: a server hanging on this
    /// route keeps the sync lock that long at most, and the answer is
    /// written in the order asked); and whatever goes wrong (offline, a 404
    /// from a server older than the route, a 5xx, an unreadable answer) is
    /// logged at debug and leaves the last answer in place, with no backoff
    /// and no retry before the next interval. A 401 is left to the next
    /// pass, which signs the desk out if it must.
    async fn refresh_order_flags(&self, api: &Api) {
        let config = self.config();
        let interval = config.flags_interval.as_millis() as i64;
        let claimed = self
            .inner
            .store
            .write(|tx| order_flags::claim_ask(tx, now_ms(), interval));
        match claimed {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(error = %e, "dead-lettered orders: cannot read when the desk last asked");
                return;
            }
        }
        let answer = match api.dead_lettered_orders(config.flags_timeout).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::debug!(error = %e, "dead-lettered orders unavailable; keeping the last answer");
                return;
            }
        };
        let now = now_ms();
        match self
            .inner
            .store
            .write(|tx| order_flags::replace(tx, &answer.orders, now))
        {
            Ok(true) => self.emit(EngineEvent::Changed),
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "dead-lettered orders: cannot keep the answer"),
        }
    }

    fn finish_pass(&self, api: &Api, result: Result<()>, report: SyncReport) -> Result<SyncReport> {
        let now = now_ms();
        match result {
            Ok(()) => {
                // A pass can finish (storing its last page) after the stream
                // was lost; its answers then came before the loss and say
                // nothing about now. Decided inside the write: the stream
                // counts its loss before writing it, so whichever write
                // lands last leaves the true status.
                let reachability = &self.inner.reachability;
                self.inner.store.write(|tx| {
                    sync_state::succeeded(tx, now, reachability.answered_since_loss())
                })?;
                self.emit(EngineEvent::SyncFinished(report.clone()));
                if report.applied + report.conflicts + report.rejections + report.pulled > 0 {
                    self.emit(EngineEvent::Changed);
                }
                Ok(report)
            }
            Err(Error::Api(e)) if e.is_unauthorized() => {
                // The token this pass used is dead (revoked by an operator:
                // the user deactivated, their password reset). Sign the desk
                // out and keep every queued act for the next sign-in.
                self.session_ended(api)?;
                if report.applied + report.conflicts + report.rejections > 0 {
                    self.emit(EngineEvent::Changed);
                }
                Err(Error::Unauthorized)
            }
            Err(Error::Api(e)) => {
                let offline = e.is_offline();
                let retry_after = e.retry_after().map(|d| d.as_millis() as i64);
                let cap = self.config().backoff_cap_ms as i64;
                let next = self.inner.store.write(|tx| {
                    sync_state::failed(tx, &e.to_string(), offline, now, |failures| {
                        // Retry-After is the server's word, within our cap.
                        retry_after
                            .map(|r| r.min(cap))
                            .unwrap_or_else(|| jitter(self, failures.saturating_sub(1)))
                    })
                })?;
                self.emit(EngineEvent::SyncFailed {
                    error: e.to_string(),
                    offline,
                    next_attempt_at: Some(next),
                });
                if report.applied + report.conflicts + report.rejections > 0 {
                    self.emit(EngineEvent::Changed);
                }
                Err(Error::Api(e))
            }
            Err(e) => Err(e),
        }
    }

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

    async fn push_locked(&self, api: &Api, report: &mut SyncReport) -> Result<()> {
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

    /// Pulls until caught up. Returns true when this caught up with a server
    /// restored from a backup and queued again the journaled acts it lacks
    /// (the caller pushes them).
    async fn pull_locked(&self, api: &Api, report: &mut SyncReport) -> Result<bool> {
        let limit = self.config().pull_limit;
        // A store that mirrors nothing yet (a first pull, or one after a
        // restore cleared the mirrors) is written in bulk: see `Bulk`.
        let mut bulk = self.inner.store.read(Bulk::begin)?;
        // The next page, fetched (by the stored page's cursor, exactly the
        // request the next turn would make) while this one is stored.
        let mut prefetched: Option<std::result::Result<PullPage, ApiError>> = None;
        loop {
            let started = std::time::Instant::now();
            // Whether the request named a cursor (a prefetch always does).
            let (fetched_page, with_cursor) = match prefetched.take() {
                Some(page) => (page, true),
                None => {
                    let cursor = self.inner.store.read(sync_state::get)?.cursor;
                    (api.pull(cursor.as_deref(), limit).await, cursor.is_some())
                }
            };
            let page: PullPage = match fetched_page {
                Ok(page) => page,
                // Only a cursor can be of another history: without one the
                // answer is not ours to act on (and would loop).
                Err(e) if e.is_server_restored() && with_cursor => {
                    self.server_restored()?;
                    bulk = self.inner.store.read(Bulk::begin)?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let fetched = started.elapsed();
            let now = now_ms();
            let has_more = page.has_more;
            let next_cursor = page.cursor.clone();
            let changes = page.changes.len();
            let engine = self.clone();
            let store = tokio::task::spawn_blocking(move || {
                let kept = engine.inner.store.write_mirror(|tx| {
                    let mut kept = bulk;
                    for change in &page.changes {
                        apply_change_in(tx, change, &mut kept)?;
                    }
                    sync_state::set_cursor(tx, &page.cursor, page.history.as_deref(), now)?;
                    Ok(kept)
                });
                (kept, started.elapsed())
            });
            let next = async {
                if has_more {
                    Some(api.pull(Some(&next_cursor), limit).await)
                } else {
                    None
                }
            };
            let (stored, next) = tokio::join!(store, next);
            let (kept, stored_at) = stored
                .map_err(|e| Error::Store(StoreError::Invalid(format!("store task: {e}"))))?;
            bulk = kept?;
            prefetched = next;
            report.pulled += changes;
            tracing::info!(
                changes,
                fetch_ms = fetched.as_secs_f64() * 1e3,
                store_ms = (stored_at - fetched).as_secs_f64() * 1e3,
                "pulled a page"
            );
            if !has_more {
                return self.catch_up_with_restore(report);
            }
        }
    }

    /// The server answered 410 `server_restored`: it was restored from a
    /// backup and is back where the backup was taken. What the desk mirrors
    /// may be newer than it (the mirror only moves forward, so it is
    /// cleared), its cursor is of the old history, and the acts it
    /// acknowledged after the backup are gone from the server (they are in
    /// the journal, `store::acked`). Pull everything from the start; once
    /// caught up, [`Engine::catch_up_with_restore`] queues those acts again.
    /// Until then nothing is pushed: the queue was made on top of them.
    fn server_restored(&self) -> Result<()> {
        let now = now_ms();
        self.inner.store.write(|tx| {
            crate::store::reset_mirrors(tx)?;
            sync_state::restore_began(tx, now)
        })?;
        tracing::warn!(
            "the server was restored from a backup: pulling everything again; acts it lost \
             will be sent again"
        );
        self.emit(EngineEvent::Changed);
        Ok(())
    }

    /// After a pull that caught up: if the desk was catching up with a
    /// restored server, every journaled act the server's documents do not
    /// show goes back into the queue, in its old place, to be applied afresh
    /// under its own key (see `store::acked` for how the versions tell).
    /// True if that happened.
    fn catch_up_with_restore(&self, report: &mut SyncReport) -> Result<bool> {
        let state = self.inner.store.read(sync_state::get)?;
        if state.restore_started_at.is_none() {
            return Ok(false);
        }
        let now = now_ms();
        let done = self.inner.store.write(|tx| {
            let done = acked::requeue_missing(
                tx,
                now,
                "the server was restored from a backup taken before this act landed: sent again",
            )?;
            sync_state::restore_caught_up(tx)?;
            Ok(done)
        })?;
        report.requeued += done.requeued;
        tracing::warn!(
            requeued = done.requeued,
            present = done.present,
            "caught up with the restored server: acknowledged acts it lacked are queued again"
        );
        self.emit(EngineEvent::Changed);
        Ok(true)
    }

    /// Keeps this store in sync until `shutdown` resolves: a pass whenever
    /// the stream pokes, the user acts (here or in another process), a retry
    /// falls due, or connectivity returns; backing off while the server is
    /// unreachable.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let stream = tokio::spawn(stream_task(self.clone()));
        let result = self.run_passes(shutdown).await;
        stream.abort();
        result
    }

    async fn run_passes(&self, shutdown: impl Future<Output = ()>) -> Result<()> {
        tokio::pin!(shutdown);
        let mut seen_version = self.inner.store.data_version()?;
        // `force`: sync now even while backing off (a poke, connectivity
        // back, "Sync now"). `want`: sync as soon as the backoff allows.
        let (mut force, mut want) = (true, true);
        loop {
            let now = now_ms();
            let state = self.inner.store.read(sync_state::get)?;
            let backing_off = state.next_attempt_at.is_some_and(|t| t > now);
            if force || (want && !backing_off) {
                want = match self.sync_once().await {
                    Ok(_) => false,
                    Err(Error::Unauthorized) => return Err(Error::Unauthorized),
                    Err(Error::NotSignedIn) => return Err(Error::NotSignedIn),
                    // Another process is syncing: look again shortly.
                    Err(Error::Busy) => true,
                    Err(e) => {
                        if !e.is_offline() {
                            tracing::warn!(error = %e, "sync pass failed");
                        }
                        true
                    }
                };
                force = false;
            }
            let wait = self.next_wake()?;
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = self.inner.wake_now.notified() => force = true,
                _ = self.inner.wake_local.notified() => want = true,
                _ = tokio::time::sleep(wait) => want = true,
                _ = tokio::time::sleep(self.config().local_poll) => {
                    // Another process may have queued acts: SQLite tells us
                    // by bumping data_version.
                    let v = self.inner.store.data_version()?;
                    if v != seen_version {
                        seen_version = v;
                        want = true;
                    }
                }
            }
        }
    }

    /// How long the loop may sleep: until the store-wide backoff ends or the
    /// earliest act waiting to retry falls due (at most `poll_interval`).
    fn next_wake(&self) -> Result<Duration> {
        let now = now_ms();
        let (state, next_row) = self
            .inner
            .store
            .read(|tx| Ok((sync_state::get(tx)?, pending::next_attempt(tx)?)))?;
        let mut at = now + self.config().poll_interval.as_millis() as i64;
        if let Some(t) = state.next_attempt_at {
            at = at.min(t);
        }
        if let Some(t) = next_row {
            if state.next_attempt_at.is_none_or(|b| b <= now) {
                at = at.min(t);
            }
        }
        Ok(Duration::from_millis((at - now).max(0) as u64))
    }

    /// Connectivity is back (the stream connected): forget the backoff and
    /// sync now.
    pub fn connectivity_returned(&self) -> Result<()> {
        self.inner.store.write(sync_state::reset_backoff)?;
        self.sync_soon();
        Ok(())
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

/// One change of the pull feed into the mirrors. Pending acts are untouched:
/// their bases stay what the user saw (see [`crate::engine`]).
///
/// A document this build cannot read (a newer server's status or field, a
/// kind it does not know) neither fails the page (a stuck feed would stop
/// every other document) nor is dropped (the cursor moves past it): it is
/// kept whole in [`unreadable`], shown as needing a newer app, and applied
/// when a build that reads it opens the store ([`reapply_unreadable`]).
/// Returns whether the document was read (false: kept for a newer app).
fn apply_change(tx: &Transaction<'_>, change: &crate::api::RawChange) -> Result<bool, StoreError> {
    apply_change_in(tx, change, &mut Bulk(false))
}

/// A pull into a store that mirrors nothing (checked when the pull starts:
/// no document, no conflict, nothing kept for a newer app) writes it in
/// bulk. There is nothing to compare a pulled document with, so an order is
/// inserted with its lines without first reading its version and deleting
/// its old lines, and no conflict or kept document is looked up for it.
/// Each shortcut checks its assumption as it goes: an order already stored
/// (it came twice, changed while the snapshot was paged) takes the ordinary
/// path, and the first document kept for a newer app ends bulk mode for
/// the rest of the pull. Only the pull writes mirrors and keeps documents,
/// and it holds the sync lock, so nothing else invalidates them meanwhile.
#[derive(Debug, Clone, Copy)]
struct Bulk(bool);

impl Bulk {
    fn begin(tx: &Transaction<'_>) -> Result<Bulk, StoreError> {
        let empty: bool = tx
            .prepare_cached(
                "select not exists (select 1 from orders) and not exists (select 1 from skus)
                    and not exists (select 1 from conflicts)
                    and not exists (select 1 from unreadable_docs)",
            )?
            .query_row([], |r| r.get(0))?;
        Ok(Bulk(empty))
    }
}

fn apply_change_in(
    tx: &Transaction<'_>,
    change: &crate::api::RawChange,
    bulk: &mut Bulk,
) -> Result<bool, StoreError> {
    let Some(data) = &change.data else {
        match change.kind.as_str() {
            "order" => orders::delete(tx, change.id)?,
            "sku" => skus::delete(tx, change.id)?,
            "customer" => customers::delete(tx, change.id)?,
            "invoice" => invoices::delete(tx, change.id)?,
            "price_list" => price_lists::delete(tx, change.id)?,
            _ => {}
        }
        unreadable::forget(tx, &change.kind, change.id, change.version)?;
        return Ok(true);
    };
    let applied = match change.kind.as_str() {
        "order" => Order::deserialize(data).map(|o| -> Result<(), StoreError> {
            if bulk.0 && orders::insert_new(tx, &o)? {
                return Ok(());
            }
            orders::upsert(tx, &o)?;
            conflicts::refresh_theirs(tx, &o)
        }),
        "sku" => Sku::deserialize(data).map(|s| skus::upsert(tx, &s, change.version)),
        "customer" => {
            Customer::deserialize(data).map(|c| customers::upsert(tx, &c, change.version))
        }
        "invoice" => Invoice::deserialize(data).map(|i| invoices::upsert(tx, &i, change.version)),
        "price_list" => PriceList::deserialize(data)
            .map(|p| price_lists::upsert(tx, &p, change.version).map(|_| ())),
        other => Err(serde::de::Error::custom(format!(
            "this build does not know documents of kind {other:?}"
        ))),
    };
    match applied {
        Ok(stored) => {
            stored?;
            if !bulk.0 {
                unreadable::forget(tx, &change.kind, change.id, change.version)?;
            }
            Ok(true)
        }
        Err(e) => {
            tracing::warn!(kind = %change.kind, id = %change.id, version = change.version, error = %e,
                "keeping a pulled document this build cannot read; it needs a newer app");
            let reason = e.to_string();
            *bulk = Bulk(false);
            unreadable::keep(
                tx,
                &change.kind,
                change.id,
                change.version,
                data,
                &reason,
                now_ms(),
            )?;
            Ok(false)
        }
    }
}

/// Applies every kept document this build can read now (the app was
/// upgraded since it was pulled), as the pull would have; the rest stay.
/// Returns how many were applied.
pub(crate) fn reapply_unreadable(tx: &Transaction<'_>) -> Result<usize, StoreError> {
    let mut applied = 0;
    for doc in unreadable::all(tx)? {
        let change = crate::api::RawChange {
            kind: doc.kind,
            id: doc.id,
            version: doc.version,
            data: Some(doc.doc),
        };
        if apply_change(tx, &change)? {
            applied += 1;
        }
    }
    Ok(applied)
}

/// Listens to `/v1/sync/stream` for as long as the engine runs: every
/// `changed` event wakes the loop; a (re)connection after a failure means
/// connectivity returned, so the loop retries at once.
async fn stream_task(engine: Engine) {
    let mut failures: u32 = 0;
    loop {
        let mut used: Option<Api> = None;
        let result: Result<(), Error> = async {
            let api = engine.api()?;
            let stream = api.stream().await;
            used = Some(api);
            let mut resp = stream?;
            // Connected: everything that failed for want of a network may go.
            engine.connectivity_returned()?;
            engine.emit(EngineEvent::StreamConnected);
            failures = 0;
            let mut parser = SseParser::default();
            loop {
                let chunk = resp
                    .chunk()
                    .await
                    .map_err(|e| Error::Api(ApiError::Network(format!("stream: {e}"))))?;
                let Some(chunk) = chunk else {
                    return Err(Error::Api(ApiError::Network("stream ended".into())));
                };
                for event in parser.feed(&chunk) {
                    if event.event == "changed" {
                        engine.sync_soon();
                    }
                }
            }
        }
        .await;
        let e: Error = match result {
            Ok(()) => continue,
            Err(e) => e,
        };
        if matches!(&e, Error::Api(a) if a.is_unauthorized()) {
            if let Some(api) = &used {
                if let Err(e) = engine.session_ended(api) {
                    tracing::warn!(error = %e, "recording the end of the session");
                }
            }
            return;
        }
        if matches!(e, Error::NotSignedIn | Error::Unauthorized) {
            return;
        }
        // The desk is offline from now on, not from the next failed push: an
        // idle desk may have nothing to push for a long while. Said once per
        // outage in the log; every retry keeps the status honest.
        let error = e.to_string();
        if failures == 0 {
            tracing::info!(%error, "lost the server's live stream; offline until it answers again");
        }
        engine.inner.reachability.lost();
        if let Err(e) = engine
            .inner
            .store
            .write(|tx| sync_state::stream_lost(tx, &error))
        {
            tracing::warn!(error = %e, "recording that the desk is offline");
        }
        engine.emit(EngineEvent::StreamLost { error });
        let c = engine.config();
        let wait = full_jitter_ms(
            failures,
            c.stream_retry_base_ms,
            c.stream_retry_cap_ms,
            rand::random::<f64>(),
        );
        failures = failures.saturating_add(1);
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
}
