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
use std::collections::HashMap;

use sqlx::PgPool;
use uuid::Uuid;

/// Events fanned out per statement.
pub const FAN_OUT_BATCH: i64 = 500;

/// Turns new outbox events into one delivery per subscribed partner, every
/// one a pending row (nothing is handed to a relay in memory). Returns how
/// many events it handled (call again while it returns any).
pub async fn fan_out(db: &PgPool) -> Result<u64, sqlx::Error> {
    Ok(fan_out_handing(db, FAN_OUT_BATCH, None).await?.events)
}

/// What a relay's fan-out may keep in memory as first attempts, instead of
/// writing their pending rows (migration
/// `20261212000100_relay_first_attempts_in_memory.sql`).
#[derive(Debug, Clone, Copy)]
pub struct Handout<'a> {
    pub lease_id: Uuid,
    pub lease: std::time::Duration,
    /// At most this many in all…
    pub total: usize,
    /// …and no more of a partner than this leaves it.
    pub room: Room<'a>,
}

/// What one fan-out did.
#[derive(Debug, Default)]
pub struct FannedOut {
    /// Events marked fanned out.
    pub events: u64,
    /// First attempts handed to the caller under the handout's lease
    /// (`Claimed::id` is `None`: no row yet), oldest first.
    pub first: Vec<Claimed>,
    /// Deliveries to enabled partners that became pending rows because the
    /// handout had no room left for them.
    pub overflow: u64,
}

/// Turns up to `limit` new outbox events into deliveries, one per event and
/// subscribed partner. With a `handout`, the first attempts of enabled
/// partners within its room are returned to the caller and recorded in
/// `relay_sending` under its lease, and their delivery rows are written
/// when their outcome is known ([`record_first`]). Everything else (paused
/// or disabled partners, whose deliveries are held until re-enabled so they
/// miss nothing, and partners past their room) becomes a pending row.
///
/// One transaction: lock a batch of events (`skip locked`, so relays share
/// the work) and mark them done in the same statement, read their tenants'
/// partners, decide who gets what with protocol's pattern rule, and write
/// the pending rows and the handout's `relay_sending` rows.
///
/// The mark goes through the locked rows' `ctid`s (a TID scan, as in
/// [`claim`]): joined back by key, the planner saw the batch's 500 ids and
/// hashed them against a sequential scan of the whole outbox, so every
/// batch cost O(outbox), which the retention keeps for a week.
///
/// The partners are read `for key share`: a partner being deleted
/// (`db::partners::delete_in_tx` locks it `for update`, then refuses while
/// deliveries wait or are being sent) either finishes first, and then gets
/// none, or waits for this transaction and then sees its deliveries. That
/// is the guard the deliveries' foreign key to partners gave with a check
/// per row (migration `relay_fewer_writes_per_delivery`).
pub async fn fan_out_handing(
    db: &PgPool,
    limit: i64,
    handout: Option<Handout<'_>>,
) -> Result<FannedOut, sqlx::Error> {
    let mut tx = db.begin().await?;
    let mut events: Vec<(Uuid, i64, String, String, DateTime<Utc>)> = sqlx::query_as(
        "update outbox set fanned_out_at = now()
          where ctid = any(array(
                select ctid from outbox
                 where fanned_out_at is null
                 order by id
                 limit $1
                 for update skip locked))
          returning tenant_id, id, event_type, payload::text, created_at",
    )
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    if events.is_empty() {
        tx.commit().await?;
        return Ok(FannedOut::default());
    }
    events.sort_unstable_by_key(|e| e.1);
    let mut tenants: Vec<Uuid> = events.iter().map(|e| e.0).collect();
    tenants.sort_unstable();
    tenants.dedup();
    let partners: Vec<FanOutPartner> = sqlx::query_as(
        "select tenant_id, id, event_types, enabled, url, secret,
                previous_secret, previous_secret_expires_at
           from partners where tenant_id = any($1) for key share",
    )
    .bind(&tenants)
    .fetch_all(&mut *tx)
    .await?;
    let mut total = handout.map_or(0, |h| h.total);
    let mut rooms: HashMap<Uuid, i64> = HashMap::new();
    let mut first = Vec::new();
    let mut pending = Pairs::default();
    let mut sending = Pairs::default();
    let mut overflow = 0;
    for (tenant, outbox_id, event_type, payload, created_at) in events.iter() {
        let subscribed = partners.iter().filter(|p| {
            p.tenant_id == *tenant && p.event_types.iter().any(|t| pattern_matches(t, event_type))
        });
        for p in subscribed {
            let room = rooms.entry(p.id).or_insert_with(|| {
                handout.map_or(0, |h| {
                    h.room
                        .partners
                        .iter()
                        .find(|(id, _)| *id == p.id)
                        .map_or(h.room.per_partner, |(_, r)| *r)
                })
            });
            if !(p.enabled && total > 0 && *room > 0) {
                if p.enabled && handout.is_some() {
                    overflow += 1;
                }
                pending.push(*tenant, *outbox_id, p.id);
                continue;
            }
            total -= 1;
            *room -= 1;
            sending.push(*tenant, *outbox_id, p.id);
            first.push(Claimed {
                tenant_id: *tenant,
                id: None,
                outbox_id: *outbox_id,
                partner_id: p.id,
                attempts: 0,
                first_attempt: true,
                url: p.url.clone(),
                secret: p.secret.clone(),
                previous_secret: p.previous_secret.clone(),
                previous_secret_expires_at: p.previous_secret_expires_at,
                payload: payload.clone(),
                event_created_at: *created_at,
            });
        }
    }
    if !pending.is_empty() {
        sqlx::query(
            "insert into deliveries (tenant_id, outbox_id, partner_id)
             select * from unnest($1::uuid[], $2::int8[], $3::uuid[])
             on conflict do nothing",
        )
        .bind(&pending.tenants)
        .bind(&pending.outbox_ids)
        .bind(&pending.partners)
        .execute(&mut *tx)
        .await?;
    }
    if let (Some(h), false) = (handout, sending.is_empty()) {
        sqlx::query(
            "insert into relay_sending (tenant_id, partner_id, lease_id, outbox_ids, lease_expires_at)
             select t, p, $4, array_agg(o order by o), now() + make_interval(secs => $5)
               from unnest($1::uuid[], $2::int8[], $3::uuid[]) as s(t, o, p)
              group by t, p",
        )
        .bind(&sending.tenants)
        .bind(&sending.outbox_ids)
        .bind(&sending.partners)
        .bind(h.lease_id)
        .bind(h.lease.as_secs_f64())
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(FannedOut {
        events: events.len() as u64,
        first,
        overflow,
    })
}

/// A partner as the fan-out needs it: who it wants, and how to send to it.
#[derive(sqlx::FromRow)]
struct FanOutPartner {
    tenant_id: Uuid,
    id: Uuid,
    event_types: Vec<String>,
    enabled: bool,
    url: String,
    secret: String,
    previous_secret: Option<String>,
    previous_secret_expires_at: Option<DateTime<Utc>>,
}

/// (tenant, event, partner) triples as three arrays, for `unnest`.
#[derive(Default)]
struct Pairs {
    tenants: Vec<Uuid>,
    outbox_ids: Vec<i64>,
    partners: Vec<Uuid>,
}

impl Pairs {
    fn push(&mut self, tenant: Uuid, outbox_id: i64, partner: Uuid) {
        self.tenants.push(tenant);
        self.outbox_ids.push(outbox_id);
        self.partners.push(partner);
    }

    fn is_empty(&self) -> bool {
        self.outbox_ids.is_empty()
    }
}

/// The events a relay was handed for one partner by one fan-out: the key
/// of its `relay_sending` row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sending {
    pub tenant_id: Uuid,
    pub partner_id: Uuid,
    pub lease_id: Uuid,
}

/// How a first attempt handed out by a fan-out ended, to be written as its
/// delivery row.
#[derive(Debug, Clone)]
pub struct FirstOutcome {
    pub sending: Sending,
    pub outbox_id: i64,
    /// `delivered`, `pending` (due again after `delay`) or `dead`.
    pub state: &'static str,
    /// 1 once attempted; 0 for one given back unattempted.
    pub attempts: i32,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub delay: std::time::Duration,
}

/// Writes first attempts' delivery rows in one statement, each only while
/// its `relay_sending` row still exists (the lease is this relay's), and
/// deletes the `finished` rows, whose every event now has its delivery row,
/// in the same statement. Returns the outcomes not written: their lease had
/// expired and another relay made them pending rows, which stand (the
/// event is sent again; partners dedupe on webhook-id).
pub async fn record_first(
    db: &PgPool,
    outcomes: &[FirstOutcome],
    finished: &[Sending],
) -> Result<Vec<i64>, sqlx::Error> {
    let col = |f: fn(&FirstOutcome) -> Uuid| outcomes.iter().map(f).collect::<Vec<_>>();
    let tenants = col(|o| o.sending.tenant_id);
    let partners = col(|o| o.sending.partner_id);
    let leases = col(|o| o.sending.lease_id);
    let outbox_ids: Vec<i64> = outcomes.iter().map(|o| o.outbox_id).collect();
    let states: Vec<&str> = outcomes.iter().map(|o| o.state).collect();
    let attempts: Vec<i32> = outcomes.iter().map(|o| o.attempts).collect();
    let statuses: Vec<Option<i32>> = outcomes.iter().map(|o| o.status.map(i32::from)).collect();
    let errors: Vec<Option<&str>> = outcomes
        .iter()
        .map(|o| o.error.as_deref().map(|e| truncate(e, 500)))
        .collect();
    let delays: Vec<f64> = outcomes.iter().map(|o| o.delay.as_secs_f64()).collect();
    let written: Vec<i64> = sqlx::query_scalar(
        "with o as (
            select * from unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::int8[], $5::text[],
                                 $6::int4[], $7::int4[], $8::text[], $9::float8[])
                       as o(tenant_id, partner_id, lease_id, outbox_id, state,
                            attempts, status, error, delay)
         ), done as (
            delete from relay_sending s
             using unnest($10::uuid[], $11::uuid[], $12::uuid[]) as f(tenant_id, partner_id, lease_id)
             where s.tenant_id = f.tenant_id and s.partner_id = f.partner_id and s.lease_id = f.lease_id
         )
         insert into deliveries (tenant_id, outbox_id, partner_id, state, attempts, next_attempt_at,
                                 last_status, last_error, delivered_at, dead_lettered_at)
         select o.tenant_id, o.outbox_id, o.partner_id, o.state, o.attempts,
                now() + make_interval(secs => o.delay), o.status, o.error,
                case when o.state = 'delivered' then now() end,
                case when o.state = 'dead' then now() end
           from o
          where exists (select 1 from relay_sending s
                         where s.tenant_id = o.tenant_id and s.partner_id = o.partner_id
                           and s.lease_id = o.lease_id)
         on conflict do nothing
         returning outbox_id",
    )
    .bind(&tenants)
    .bind(&partners)
    .bind(&leases)
    .bind(&outbox_ids)
    .bind(&states)
    .bind(&attempts)
    .bind(&statuses)
    .bind(&errors)
    .bind(&delays)
    .bind(finished.iter().map(|s| s.tenant_id).collect::<Vec<_>>())
    .bind(finished.iter().map(|s| s.partner_id).collect::<Vec<_>>())
    .bind(finished.iter().map(|s| s.lease_id).collect::<Vec<_>>())
    .fetch_all(db)
    .await?;
    let written: std::collections::HashSet<i64> = written.into_iter().collect();
    Ok(outbox_ids
        .into_iter()
        .filter(|id| !written.contains(id))
        .collect())
}

/// Keeps this relay's `relay_sending` rows alive: their leases run `lease`
/// from now.
pub async fn renew(
    db: &PgPool,
    leases: &[Uuid],
    lease: std::time::Duration,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update relay_sending set lease_expires_at = now() + make_interval(secs => $2)
          where lease_id = any($1)",
    )
    .bind(leases)
    .bind(lease.as_secs_f64())
    .execute(db)
    .await?;
    Ok(())
}

/// Takes over what relays that died (or stalled past their lease) were
/// sending: each expired `relay_sending` row is deleted, and every event of
/// it without a delivery row gets a pending one, due now, in the same
/// statement, for the ordinary claims to send. Returns how many it made.
pub async fn take_over_expired(db: &PgPool) -> Result<u64, sqlx::Error> {
    let made = sqlx::query(
        "with expired as (
            delete from relay_sending where lease_expires_at < now()
            returning tenant_id, partner_id, outbox_ids
         )
         insert into deliveries (tenant_id, outbox_id, partner_id)
         select e.tenant_id, o.id, e.partner_id
           from expired e cross join lateral unnest(e.outbox_ids) as o(id)
         on conflict do nothing",
    )
    .execute(db)
    .await?
    .rows_affected();
    if made > 0 {
        tracing::warn!(
            deliveries = made,
            "took over events an earlier relay was sending when its lease ran out; they will be sent again"
        );
    }
    Ok(made)
}

/// A 410 Gone to a first attempt: its delivery row is written due again at
/// once (held until an operator re-enables the partner), and the partner is
/// paused, as [`mark_gone`] does for a claimed row. Returns whether the
/// row was written (false: the lease had passed to another relay).
pub async fn first_gone(
    db: &PgPool,
    d: &Claimed,
    sending: Sending,
    sent_at: DateTime<Utc>,
) -> Result<bool, sqlx::Error> {
    let mut tx = db.begin().await?;
    let written = sqlx::query(
        "insert into deliveries (tenant_id, outbox_id, partner_id, attempts, last_status, last_error)
         select $1, $4, $2, 1, 410, 'partner answered 410 Gone; partner paused'
          where exists (select 1 from relay_sending
                         where tenant_id = $1 and partner_id = $2 and lease_id = $3)
         on conflict do nothing",
    )
    .bind(sending.tenant_id)
    .bind(sending.partner_id)
    .bind(sending.lease_id)
    .bind(d.outbox_id)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if written {
        pause_after(&mut tx, d, sent_at).await?;
    }
    tx.commit().await?;
    Ok(written)
}

/// One claimed delivery, with everything needed to send it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claimed {
    pub tenant_id: Uuid,
    /// The delivery row; `None` for a first attempt a fan-out handed out,
    /// whose row is written with its outcome.
    pub id: Option<i64>,
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
        pause_after(&mut tx, d, sent_at).await?;
    }
    tx.commit().await
}

/// Pauses the partner of a 410, unless it changed since the request was
/// sent (an operator re-enabling it makes that 410 stale).
async fn pause_after(
    tx: &mut sqlx::PgConnection,
    d: &Claimed,
    sent_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update partners set enabled = false, paused_reason = 'endpoint answered 410 Gone', updated_at = now()
          where tenant_id = $1 and id = $2 and updated_at <= $3",
    )
    .bind(d.tenant_id)
    .bind(d.partner_id)
    .bind(sent_at)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
