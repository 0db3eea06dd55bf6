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
use holdfast_protocol::event::pattern_matches;
use sqlx::PgPool;
use uuid::Uuid;

/// Events fanned out per statement.
pub const FAN_OUT_BATCH: i64 = 500;

/// Turns new outbox events into one delivery per subscribed partner. Paused
/// or disabled partners get their deliveries too (held until re-enabled), so
/// a partner back from a pause hears about everything it missed.
/// Returns how many events it handled (call again while it returns any).
///
/// One transaction: lock a batch of events (`skip locked`, so relays share
/// the work) and mark them done in the same statement, read their tenants'
/// partners, decide who gets what with protocol's pattern rule, and write
/// the deliveries.
///
/// The mark goes through the locked rows' `ctid`s (a TID scan, as in
/// [`claim`]): joined back by key, the planner saw the batch's 500 ids and
/// hashed them against a sequential scan of the whole outbox, so every
/// batch cost O(outbox), which the retention keeps for a week.
///
/// The partners are read `for key share`: a partner being deleted
/// (`db::partners::delete_in_tx` locks it `for update`, then refuses while
/// deliveries wait) either finishes first, and then gets none, or waits for
/// this transaction and then sees its deliveries. That is the guard the
/// deliveries' foreign key to partners gave with a check per row (migration
/// `relay_fewer_writes_per_delivery`).
pub async fn fan_out(db: &PgPool) -> Result<u64, sqlx::Error> {
    let mut tx = db.begin().await?;
    let mut events: Vec<(Uuid, i64, String)> = sqlx::query_as(
        "update outbox set fanned_out_at = now()
          where ctid = any(array(
                select ctid from outbox
                 where fanned_out_at is null
                 order by id
                 limit $1
                 for update skip locked))
          returning tenant_id, id, event_type",
    )
    .bind(FAN_OUT_BATCH)
    .fetch_all(&mut *tx)
    .await?;
    if events.is_empty() {
        tx.commit().await?;
        return Ok(0);
    }
    events.sort_unstable_by_key(|(_, id, _)| *id);
    let mut tenants: Vec<Uuid> = events.iter().map(|(tenant, _, _)| *tenant).collect();
    tenants.sort_unstable();
    tenants.dedup();
    let partners: Vec<(Uuid, Uuid, Vec<String>)> = sqlx::query_as(
        "select tenant_id, id, event_types from partners where tenant_id = any($1) for key share",
    )
    .bind(&tenants)
    .fetch_all(&mut *tx)
    .await?;
    let (mut tenant_ids, mut outbox_ids, mut partner_ids) = (Vec::new(), Vec::new(), Vec::new());
    for (tenant, outbox_id, event_type) in &events {
        let subscribed = partners.iter().filter(|(t, _, patterns)| {
            t == tenant && patterns.iter().any(|p| pattern_matches(p, event_type))
        });
        for (_, partner, _) in subscribed {
            tenant_ids.push(*tenant);
            outbox_ids.push(*outbox_id);
            partner_ids.push(*partner);
        }
    }
    if !outbox_ids.is_empty() {
        sqlx::query(
            "insert into deliveries (tenant_id, outbox_id, partner_id)
             select * from unnest($1::uuid[], $2::int8[], $3::uuid[])
             on conflict do nothing",
        )
        .bind(&tenant_ids)
        .bind(&outbox_ids)
        .bind(&partner_ids)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(events.len() as u64)
}

/// One claimed delivery, with everything needed to send it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claimed {
    pub tenant_id: Uuid,
    pub id: i64,
    pub outbox_id: i64,
    pub partner_id: Uuid,
    pub attempts: i32,
    /// Never attempted before (a requeue resets `attempts` but leaves the
    /// last status and error, so a requeued delivery is not a first).
    pub first_attempt: bool,
    pub url: String,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// The event body exactly as first recorded.
    pub payload: String,
    pub event_created_at: DateTime<Utc>,
}

/// How much more a relay may take per partner in one claim: `per_partner`
/// for a partner it holds nothing of, else what `partners` says (0: none).
#[derive(Debug, Clone, Copy)]
pub struct Room<'a> {
    pub per_partner: i64,
    pub partners: &'a [(Uuid, i64)],
}

/// Claims up to `limit` due deliveries of enabled partners, oldest first
/// within each partner, skipping rows other relays hold and taking no more
/// of a partner than `room` leaves (this relay's per-partner cap, so one
/// slow partner cannot take every slot). Each partner's share is locked by
/// its own range scan, in order (`deliveries_by_partner_due` or
/// `deliveries_due`), so only rows that are leased get locked.
///
/// The lease is stamped through the locked rows' `ctid`s (`ctid = any(…)`,
/// always a TID scan): joined back by key, the planner hashed the claimed
/// rows against a sequential scan of every delivery once the table had
/// statistics, so each claim cost O(backlog) — 9–18 ms per 64 rows with
/// 20,000 pending against 1–2 ms this way. A locked row cannot move before
/// the same statement updates it, so its `ctid` still names it.
pub async fn claim(
    db: &PgPool,
    lease_id: Uuid,
    lease: std::time::Duration,
    limit: i64,
    room: Room<'_>,
) -> Result<Vec<Claimed>, sqlx::Error> {
    let (partners, rooms): (Vec<Uuid>, Vec<i64>) = room.partners.iter().copied().unzip();
    sqlx::query_as(
        "with due as (
            select d.tid
              from partners p
              left join unnest($4::uuid[], $5::int8[]) as r(partner_id, room)
                     on r.partner_id = p.id
             cross join lateral (
                    select d.ctid as tid from deliveries d
                     where d.tenant_id = p.tenant_id and d.partner_id = p.id
                       and d.state = 'pending' and d.next_attempt_at <= now()
                       and (d.lease_expires_at is null or d.lease_expires_at < now())
                     order by d.next_attempt_at, d.id
                     limit greatest(coalesce(r.room, $6), 0)
                     for update skip locked
                   ) d
             where p.enabled and coalesce(r.room, $6) > 0
             limit $3
         ), leased as (
            update deliveries d
               set lease_id = $1, lease_expires_at = now() + make_interval(secs => $2)
             where d.ctid = any(array(select tid from due))
            returning d.tenant_id, d.id, d.outbox_id, d.partner_id, d.attempts,
                      (d.attempts = 0 and d.last_status is null and d.last_error is null) as first_attempt
         )
         select l.tenant_id, l.id, l.outbox_id, l.partner_id, l.attempts, l.first_attempt,
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
    .bind(&partners)
    .bind(&rooms)
    .bind(room.per_partner)
    .fetch_all(db)
    .await
}

/// A 2xx from the partner, to be recorded.
#[derive(Debug, Clone, Copy)]
pub struct Delivered {
    pub tenant_id: Uuid,
    pub id: i64,
    pub lease_id: Uuid,
    pub status: u16,
}

/// Records a batch of 2xx answers in one statement, each row fenced by its
/// own claim's lease. Returns the ids whose lease had passed to another
/// relay (not marked: the newer claim's outcome stands).
pub async fn mark_delivered(db: &PgPool, batch: &[Delivered]) -> Result<Vec<i64>, sqlx::Error> {
    let tenants: Vec<Uuid> = batch.iter().map(|d| d.tenant_id).collect();
    let ids: Vec<i64> = batch.iter().map(|d| d.id).collect();
    let leases: Vec<Uuid> = batch.iter().map(|d| d.lease_id).collect();
    let statuses: Vec<i32> = batch.iter().map(|d| i32::from(d.status)).collect();
    let marked: Vec<i64> = sqlx::query_scalar(
        "update deliveries d
            set state = 'delivered', delivered_at = now(), attempts = d.attempts + 1,
                last_status = m.status, last_error = null, lease_id = null, lease_expires_at = null
           from unnest($1::uuid[], $2::int8[], $3::uuid[], $4::int4[])
                as m(tenant_id, id, lease_id, status)
          where d.tenant_id = m.tenant_id and d.id = m.id and d.lease_id = m.lease_id
          returning d.id",
    )
    .bind(&tenants)
    .bind(&ids)
    .bind(&leases)
    .bind(&statuses)
    .fetch_all(db)
    .await?;
    let marked: std::collections::HashSet<i64> = marked.into_iter().collect();
    Ok(ids.into_iter().filter(|id| !marked.contains(id)).collect())
}

/// Gives claimed deliveries back unattempted (a relay stopping with some
/// still waiting for a slot): due again at once, for any relay. Each row is
/// `(tenant, delivery, the lease it was claimed under)`.
pub async fn release(db: &PgPool, rows: &[(Uuid, i64, Uuid)]) -> Result<(), sqlx::Error> {
    let tenants: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
    let ids: Vec<i64> = rows.iter().map(|r| r.1).collect();
    let leases: Vec<Uuid> = rows.iter().map(|r| r.2).collect();
    sqlx::query(
        "update deliveries d set lease_id = null, lease_expires_at = null
           from unnest($1::uuid[], $2::int8[], $3::uuid[]) as r(tenant_id, id, lease_id)
          where d.tenant_id = r.tenant_id and d.id = r.id and d.lease_id = r.lease_id",
    )
    .bind(&tenants)
    .bind(&ids)
    .bind(&leases)
    .execute(db)
    .await?;
    Ok(())
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
