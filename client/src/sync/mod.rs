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
//!
//! Here: one pass ([`Engine::sync_once`], [`Engine::push`], [`Engine::pull`])
//! and how it ends (its outcome, the backoff, the dead-lettered flags);
//! `push` sends the queue, `pull` brings the server's documents, and
//! `stream` keeps passes coming for as long as the engine runs.

mod pull;
mod push;
mod stream;

use holdfast_protocol::backoff::full_jitter_ms;
use serde::Serialize;

use crate::api::Api;
use crate::engine::{Engine, EngineEvent, Error, Result};
use crate::store::{now_ms, order_flags, sync_state, SyncLock};

pub(crate) use pull::reapply_unreadable;

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
}
