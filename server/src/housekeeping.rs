//! The in-process reaper: keeps bookkeeping tables bounded by deleting what
//! has outlived its retention, a small batch per statement (no long locks, no
//! giant transactions), and publishes the relay backlog and its age as gauges.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;

use crate::engine::idempotency;

/// How often the reaper wakes.
const INTERVAL: Duration = Duration::from_secs(60);
/// How often the backlog gauge is refreshed.
const GAUGE_INTERVAL: Duration = Duration::from_secs(5);
/// Rows per delete statement: small enough that no delete holds many locks.
const BATCH: i64 = 1000;

#[derive(Debug, Clone)]
pub struct Retention {
    /// Idempotency keys live this long (API.md: 72 h by default).
    pub idempotency_hours: u32,
    /// Delivered deliveries, and outbox events with nothing left to deliver.
    pub outbox_hours: u32,
    /// Inbound webhook records (the dedupe window for providers' redeliveries).
    pub inbox_hours: u32,
}

/// Runs until `stop` turns true.
pub async fn run(db: PgPool, retention: Retention, mut stop: watch::Receiver<bool>) {
    let mut reap = tokio::time::interval(INTERVAL);
    let mut gauge = tokio::time::interval(GAUGE_INTERVAL);
    loop {
        tokio::select! {
            _ = reap.tick() => {
                if let Err(e) = reap_all(&db, &retention).await {
                    tracing::warn!(error = %e, "reaping failed; will retry");
                }
            }
            _ = gauge.tick() => {
                if let Err(e) = publish_backlog(&db).await {
                    tracing::debug!(error = %e, "backlog gauge not refreshed");
                }
            }
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// One pass over every retained table; returns rows deleted per table.
pub async fn reap_all(db: &PgPool, r: &Retention) -> Result<[u64; 4], sqlx::Error> {
    let keys = idempotency::reap_expired(db, r.idempotency_hours, BATCH).await?;
    // Deliveries first: outbox rows are referenced by them.
    let deliveries = reap(
        db,
        "delete from deliveries where (tenant_id, id) in (
            select tenant_id, id from deliveries
             where state = 'delivered' and delivered_at < now() - make_interval(hours => $1)
             limit $2)",
        r.outbox_hours,
    )
    .await?;
    let events = reap(
        db,
        "delete from outbox where (tenant_id, id) in (
            select o.tenant_id, o.id from outbox o
             where o.fanned_out_at < now() - make_interval(hours => $1)
               and not exists (select 1 from deliveries d where d.tenant_id = o.tenant_id and d.outbox_id = o.id)
             limit $2)",
        r.outbox_hours,
    )
    .await?;
    let inbox = reap(
        db,
        "delete from inbox where (tenant_id, provider, event_id) in (
            select tenant_id, provider, event_id from inbox
             where received_at < now() - make_interval(hours => $1)
             limit $2)",
        r.inbox_hours,
    )
    .await?;
    let counts = [keys, deliveries, events, inbox];
    if counts.iter().any(|n| *n > 0) {
        tracing::info!(
            keys,
            deliveries,
            events,
            inbox,
            "reaped rows past their retention"
        );
    }
    Ok(counts)
}

async fn reap(db: &PgPool, sql: &str, hours: u32) -> Result<u64, sqlx::Error> {
    let mut total = 0;
    loop {
        let n = sqlx::query(sql)
            .bind(hours as i32)
            .bind(BATCH)
            .execute(db)
            .await?
            .rows_affected();
        total += n;
        if n < BATCH as u64 {
            return Ok(total);
        }
    }
}

/// The backlog, its age and the dead letters, over every tenant. The age
/// is the oldest pending delivery's (since its fan-out; a first attempt a
/// relay holds in memory counts as one) or, older still, an event not
/// fanned out yet (since its commit): the alert on it fires when the relays
/// are stopped as well as when one partner holds its queue.
async fn publish_backlog(db: &PgPool) -> Result<(), sqlx::Error> {
    let (pending, dead, unfanned, oldest_age): (i64, i64, i64, f64) = sqlx::query_as(
        "select (select count(*) from deliveries where state = 'pending')
                    + (select count(*) from relay_sending_events),
                (select count(*) from deliveries where state = 'dead'),
                (select count(*) from outbox where fanned_out_at is null),
                coalesce(greatest(0, extract(epoch from now() - least(
                    (select min(created_at) from deliveries where state = 'pending'),
                    (select min(created_at) from relay_sending_events),
                    (select created_at from outbox where fanned_out_at is null order by id limit 1)
                ))), 0)::float8",
    )
    .fetch_one(db)
    .await?;
    metrics::gauge!("holdfast_outbox_backlog").set((pending + unfanned) as f64);
    metrics::gauge!("holdfast_outbox_oldest_pending_age_seconds").set(oldest_age);
    metrics::gauge!("holdfast_dead_letters").set(dead as f64);
    Ok(())
}
