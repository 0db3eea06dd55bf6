//! The relay's database side: fan events out to deliveries, claim due
//! deliveries under a lease, and record each attempt's outcome fenced by the
//! claim's id.
//!
//! No row lock is held while a partner is called: a claim is a short
//! transaction (`for update skip locked`, then stamp a lease), the HTTP call
//! happens outside any transaction, and the outcome is written with
//! `where lease_id = $claim` — so a worker whose lease expired (it stalled, or
//! it died and another took over) cannot overwrite the newer claim's result.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// Events fanned out per statement.
const FAN_OUT_BATCH: i64 = 500;

/// Turns new outbox events into one delivery per subscribed partner. Paused
/// or disabled partners get their deliveries too (held until re-enabled), so
/// a partner back from a pause hears about everything it missed.
/// Returns how many events it handled (call again while it returns a full batch).
pub async fn fan_out(db: &PgPool) -> Result<u64, sqlx::Error> {
    // `*` in a subscription matches any run of characters; LIKE's own
    // wildcards in a pattern are escaped so they match themselves.
    let done = sqlx::query(
        "with ev as (
            select tenant_id, id, event_type from outbox
             where fanned_out_at is null
             order by id
             limit $1
             for update skip locked
         ), fanned as (
            insert into deliveries (tenant_id, outbox_id, partner_id)
            select ev.tenant_id, ev.id, p.id
              from ev join partners p on p.tenant_id = ev.tenant_id
             where exists (
                   select 1 from unnest(p.event_types) as pattern
                    where ev.event_type like replace(replace(replace(pattern, '\\', '\\\\'), '_', '\\_'), '*', '%'))
            on conflict do nothing
         )
         update outbox o set fanned_out_at = now()
           from ev where o.tenant_id = ev.tenant_id and o.id = ev.id",
    )
    .bind(FAN_OUT_BATCH)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// One claimed delivery, with everything needed to send it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claimed {
    pub tenant_id: Uuid,
    pub id: i64,
    pub outbox_id: i64,
    pub partner_id: Uuid,
    pub attempts: i32,
    pub url: String,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// The event body exactly as first recorded.
    pub payload: String,
    pub event_created_at: DateTime<Utc>,
}

/// Claims up to `limit` due deliveries of enabled partners, skipping rows
/// other relays hold and partners in `saturated` (this relay's per-partner
/// in-flight cap, so one slow partner cannot take every slot).
pub async fn claim(
    db: &PgPool,
    lease_id: Uuid,
    lease: std::time::Duration,
    limit: i64,
    saturated: &[Uuid],
) -> Result<Vec<Claimed>, sqlx::Error> {
    sqlx::query_as(
        "with due as (
            select d.tenant_id, d.id from deliveries d
              join partners p on p.tenant_id = d.tenant_id and p.id = d.partner_id
             where d.state = 'pending' and d.next_attempt_at <= now()
               and (d.lease_expires_at is null or d.lease_expires_at < now())
               and p.enabled and d.partner_id <> all($4)
             order by d.next_attempt_at, d.id
             limit $3
             for update of d skip locked
         ), leased as (
            update deliveries d
               set lease_id = $1, lease_expires_at = now() + make_interval(secs => $2)
              from due where d.tenant_id = due.tenant_id and d.id = due.id
            returning d.tenant_id, d.id, d.outbox_id, d.partner_id, d.attempts
         )
         select l.tenant_id, l.id, l.outbox_id, l.partner_id, l.attempts,
                p.url, p.secret, p.previous_secret, p.previous_secret_expires_at,
                o.payload::text as payload, o.created_at as event_created_at
           from leased l
           join partners p on p.tenant_id = l.tenant_id and p.id = l.partner_id
           join outbox o on o.tenant_id = l.tenant_id and o.id = l.outbox_id
          order by l.id",
    )
    .bind(lease_id)
    .bind(lease.as_secs_f64())
    .bind(limit)
    .bind(saturated)
    .fetch_all(db)
    .await
}

/// 2xx: delivered. False if our lease was lost (someone else owns it now).
pub async fn mark_delivered(
    db: &PgPool,
    d: &Claimed,
    lease_id: Uuid,
    status: u16,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "update deliveries set state = 'delivered', delivered_at = now(), attempts = attempts + 1,
                last_status = $4, last_error = null, lease_id = null, lease_expires_at = null
          where tenant_id = $1 and id = $2 and lease_id = $3",
    )
    .bind(d.tenant_id)
    .bind(d.id)
    .bind(lease_id)
    .bind(status as i32)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// What a failed attempt did to the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    Retrying,
    DeadLettered,
    LeaseLost,
}

/// A failed attempt: count it, schedule the next one after `delay`, or
/// dead-letter once `max_attempts` are used.
pub async fn mark_failed(
    db: &PgPool,
    d: &Claimed,
    lease_id: Uuid,
    status: Option<u16>,
    error: &str,
    delay: std::time::Duration,
    max_attempts: u32,
) -> Result<AfterFailure, sqlx::Error> {
    let state: Option<String> = sqlx::query_scalar(
        "update deliveries set
                attempts = attempts + 1,
                last_status = $4, last_error = $5,
                state = case when attempts + 1 >= $7 then 'dead' else 'pending' end,
                dead_lettered_at = case when attempts + 1 >= $7 then now() end,
                next_attempt_at = now() + make_interval(secs => $6),
                lease_id = null, lease_expires_at = null
          where tenant_id = $1 and id = $2 and lease_id = $3
          returning state",
    )
    .bind(d.tenant_id)
    .bind(d.id)
    .bind(lease_id)
    .bind(status.map(i32::from))
    .bind(truncate(error, 500))
    .bind(delay.as_secs_f64())
    .bind(max_attempts as i32)
    .fetch_optional(db)
    .await?;
    Ok(match state.as_deref() {
        None => AfterFailure::LeaseLost,
        Some("dead") => AfterFailure::DeadLettered,
        Some(_) => AfterFailure::Retrying,
    })
}

/// 410 Gone: the partner asked us to stop. Pause it (an operator re-enables)
/// and put this delivery back, due again once the partner is enabled. A 410
/// answering a request sent before the partner's last change (say, the
/// operator re-enabling it) is stale and does not pause it again.
pub async fn mark_gone(
    db: &PgPool,
    d: &Claimed,
    lease_id: Uuid,
    sent_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    let updated = sqlx::query(
        "update deliveries set attempts = attempts + 1, last_status = 410,
                last_error = 'partner answered 410 Gone; partner paused',
                next_attempt_at = now(), lease_id = null, lease_expires_at = null
          where tenant_id = $1 and id = $2 and lease_id = $3",
    )
    .bind(d.tenant_id)
    .bind(d.id)
    .bind(lease_id)
    .execute(&mut *tx)
    .await?;
    if updated.rows_affected() == 1 {
        sqlx::query(
            "update partners set enabled = false, paused_reason = 'endpoint answered 410 Gone', updated_at = now()
              where tenant_id = $1 and id = $2 and updated_at <= $3",
        )
        .bind(d.tenant_id)
        .bind(d.partner_id)
        .bind(sent_at)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
