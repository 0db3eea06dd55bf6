//! The in-process reaper: keeps bookkeeping tables bounded by deleting what
//! has outlived its retention, a small batch per statement.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;

use crate::engine::idempotency;

/// How often the reaper wakes.
const INTERVAL: Duration = Duration::from_secs(60);
/// Rows per delete statement: small enough that no delete holds many locks.
const BATCH: i64 = 1000;

#[derive(Debug, Clone)]
pub struct Retention {
    /// Idempotency keys live this long (API.md: 72 h by default).
    pub idempotency_hours: u32,
}

/// Runs until `stop` turns true.
pub async fn run(db: PgPool, retention: Retention, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(INTERVAL);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        match idempotency::reap_expired(&db, retention.idempotency_hours, BATCH).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "reaped expired idempotency keys"),
            Err(e) => tracing::warn!(error = %e, "reaping idempotency keys failed; will retry"),
        }
    }
}
