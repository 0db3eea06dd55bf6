//! The database as the alerts see it: is Postgres answering
//! (`holdfast_db_up`, from a probe every few seconds), how full is the pool
//! (`holdfast_db_pool_*`, read at each scrape), and how often a request
//! gave up waiting for a connection (`holdfast_db_pool_acquire_timeouts_total`).
//!
//! The probe borrows a pooled connection for one `select 1` and gives it
//! back, so it never holds one. When every pooled connection is busy it
//! cannot tell a full pool from a dead server that way, so it asks
//! Postgres over a connection of its own, closed at once: a full pool is
//! the pool alert's business, and must not read as "Postgres unreachable".

use std::time::Duration;

use sqlx::{Connection, PgConnection, PgPool};

/// How often the probe asks.
const PROBE_INTERVAL: Duration = Duration::from_secs(5);
/// How long an answer may take before Postgres counts as down (as `/readyz`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Probes `db` every few seconds, the first time at once, until dropped
/// (`run` aborts it when the server stops).
pub(crate) async fn probe_forever(db: PgPool) {
    let mut every = tokio::time::interval(PROBE_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_up = None;
    loop {
        every.tick().await;
        let up = probe(&db).await;
        if was_up != Some(up) {
            if up {
                tracing::info!("database probe: Postgres answers");
            } else {
                tracing::warn!("database probe: Postgres does not answer");
            }
            was_up = Some(up);
        }
        metrics::gauge!("holdfast_db_up").set(if up { 1.0 } else { 0.0 });
    }
}

/// True when Postgres answered `select 1` in time.
async fn probe(db: &PgPool) -> bool {
    match tokio::time::timeout(PROBE_TIMEOUT, sqlx::query("select 1").execute(db)).await {
        Ok(Ok(_)) => true,
        // No pooled connection came free in time: the pool is busy, which
        // says nothing about Postgres. Ask it directly.
        Ok(Err(sqlx::Error::PoolTimedOut)) | Err(_) if db.num_idle() == 0 && db.size() > 0 => {
            direct(db).await
        }
        Ok(Err(_)) | Err(_) => false,
    }
}

/// `select 1` over a connection opened for it and closed after.
async fn direct(db: &PgPool) -> bool {
    let options = db.connect_options();
    let answered = tokio::time::timeout(PROBE_TIMEOUT, async {
        let mut conn = PgConnection::connect_with(&options).await?;
        sqlx::query("select 1").execute(&mut conn).await?;
        conn.close().await
    })
    .await;
    matches!(answered, Ok(Ok(())))
}

/// Publishes the pool's occupancy; called at each scrape, as it costs
/// nothing to read.
pub(crate) fn record_pool(db: &PgPool) {
    let size = db.size();
    let idle = u32::try_from(db.num_idle()).unwrap_or(u32::MAX).min(size);
    metrics::gauge!("holdfast_db_pool_connections", "state" => "idle").set(f64::from(idle));
    metrics::gauge!("holdfast_db_pool_connections", "state" => "in_use")
        .set(f64::from(size - idle));
    metrics::gauge!("holdfast_db_pool_max_connections")
        .set(f64::from(db.options().get_max_connections()));
}

/// Counts a request answered 503 for `cause` when the cause is the pool's
/// acquire timeout (the other unavailable causes are Postgres's own, which
/// `holdfast_db_up` and the 5xx rate show).
pub(crate) fn note_unavailable(cause: &sqlx::Error) {
    if matches!(cause, sqlx::Error::PoolTimedOut) {
        metrics::counter!("holdfast_db_pool_acquire_timeouts_total").increment(1);
    }
}
