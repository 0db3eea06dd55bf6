//! The live loop: [`Engine::run`] keeps the store in sync while the engine
//! runs, a pass whenever something may have changed, and `stream_task`
//! listens to `/v1/sync/stream`, whose pokes and reconnections wake it.

use std::future::Future;
use std::time::Duration;

use holdfast_protocol::backoff::full_jitter_ms;

use crate::api::{Api, ApiError, SseParser};
use crate::engine::{Engine, EngineEvent, Error, Result};
use crate::store::{now_ms, pending, sync_state};

impl Engine {
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
