//! Deliveries as operators see them (listing, requeue, backlog statistics)
//! and as desks see them (the orders with a dead letter). The relay's claim
//! and state changes live in `relay/`.

use chrono::{DateTime, Utc};
use holdfast_protocol::model::DeadLetteredOrder;
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    Pending,
    Delivered,
    Dead,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Dead => "dead",
        }
    }
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Delivery {
    pub id: i64,
    pub partner_id: Uuid,
    pub partner_name: String,
    /// The `webhook-id` partners see and dedupe on.
    pub event_id: String,
    pub event_type: String,
    pub state: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub dead_lettered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// Newest first, optionally one state only.
pub async fn list(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    state: Option<DeliveryState>,
    limit: i64,
) -> Result<Vec<Delivery>, sqlx::Error> {
    sqlx::query_as(
        "select d.id, d.partner_id, p.name as partner_name, 'evt_' || d.outbox_id as event_id,
                o.event_type, d.state, d.attempts, d.next_attempt_at, d.last_status, d.last_error,
                d.delivered_at, d.dead_lettered_at, d.created_at
           from deliveries d
           join partners p on p.tenant_id = d.tenant_id and p.id = d.partner_id
           join outbox o on o.tenant_id = d.tenant_id and o.id = d.outbox_id
          where d.tenant_id = $1 and ($2::text is null or d.state = $2)
          order by d.id desc
          limit $3",
    )
    .bind(tenant_id)
    .bind(state.map(DeliveryState::as_str))
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Dead or pending → pending, due now, attempts reset. Delivered ones are left
/// alone (false), so a double click cannot resend a delivered event.
pub async fn requeue(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: i64,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "update deliveries set state = 'pending', attempts = 0, next_attempt_at = now(),
                dead_lettered_at = null, lease_id = null, lease_expires_at = null
          where tenant_id = $1 and id = $2 and state in ('pending', 'dead')",
    )
    .bind(tenant_id)
    .bind(id)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The tenant's orders with at least one partner delivery dead-lettered now,
/// with how many and since when, the longest waiting first.
///
/// "Now" is the delivery's state: a requeue puts it back to `pending` (and
/// clears `dead_lettered_at`), a later success makes it `delivered`, and
/// either way the order drops out. The reaper never deletes a dead delivery
/// or its event, so an old dead letter stays listed until someone acts on it.
///
/// One statement: the partial index `deliveries_dead` (migration
/// `dead_letters_by_tenant`) yields the tenant's dead deliveries only, and
/// each joins its event by the outbox's primary key for the order's id.
pub async fn dead_lettered_orders(
    conn: &mut PgConnection,
    tenant_id: Uuid,
) -> Result<Vec<DeadLetteredOrder>, sqlx::Error> {
    let rows: Vec<(Uuid, i64, DateTime<Utc>)> = sqlx::query_as(
        "select o.aggregate_id, count(*), min(d.dead_lettered_at)
           from deliveries d
           join outbox o on o.tenant_id = d.tenant_id and o.id = d.outbox_id
          where d.tenant_id = $1 and d.state = 'dead' and o.aggregate_kind = 'order'
          group by o.aggregate_id
          order by 3, 1",
    )
    .bind(tenant_id)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(order_id, dead_lettered, oldest_at)| DeadLetteredOrder {
            order_id,
            dead_lettered,
            oldest_at,
        })
        .collect())
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct PartnerStats {
    pub partner_id: Uuid,
    pub name: String,
    pub enabled: bool,
    pub paused_reason: Option<String>,
    pub pending: i64,
    pub dead: i64,
    pub delivered: i64,
    pub oldest_pending_at: Option<DateTime<Utc>>,
    pub last_delivered_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Stats {
    /// Deliveries not yet delivered nor dead (first attempts a relay holds in
    /// memory included), plus events not yet fanned out.
    pub backlog: i64,
    pub dead_letters: i64,
    pub oldest_pending_age_seconds: Option<f64>,
    pub partners: Vec<PartnerStats>,
}

pub async fn stats(conn: &mut PgConnection, tenant_id: Uuid) -> Result<Stats, sqlx::Error> {
    let partners: Vec<PartnerStats> = sqlx::query_as(
        "select p.id as partner_id, p.name, p.enabled, p.paused_reason,
                count(*) filter (where d.state = 'pending') + max(s.sending) as pending,
                count(*) filter (where d.state = 'dead') as dead,
                count(*) filter (where d.state = 'delivered') as delivered,
                least(min(d.created_at) filter (where d.state = 'pending'), max(s.oldest))
                    as oldest_pending_at,
                max(d.delivered_at) as last_delivered_at,
                (select d2.last_error from deliveries d2
                  where d2.tenant_id = p.tenant_id and d2.partner_id = p.id and d2.last_error is not null
                  order by d2.id desc limit 1) as last_error
           from partners p
           -- First attempts a relay holds in memory are pending deliveries
           -- without their row yet.
           cross join lateral (
                select count(*) as sending, min(created_at) as oldest from relay_sending_events s
                 where s.tenant_id = p.tenant_id and s.partner_id = p.id) s
           left join deliveries d on d.tenant_id = p.tenant_id and d.partner_id = p.id
          where p.tenant_id = $1
          group by p.tenant_id, p.id
          order by p.name",
    )
    .bind(tenant_id)
    .fetch_all(&mut *conn)
    .await?;
    let unfanned: (i64, Option<DateTime<Utc>>) = sqlx::query_as(
        "select count(*), min(created_at) from outbox where tenant_id = $1 and fanned_out_at is null",
    )
    .bind(tenant_id)
    .fetch_one(conn)
    .await?;
    let oldest = partners
        .iter()
        .filter_map(|p| p.oldest_pending_at)
        .chain(unfanned.1)
        .min();
    Ok(Stats {
        backlog: partners.iter().map(|p| p.pending).sum::<i64>() + unfanned.0,
        dead_letters: partners.iter().map(|p| p.dead).sum(),
        oldest_pending_age_seconds: oldest
            .map(|t| (Utc::now() - t).num_milliseconds() as f64 / 1000.0),
        partners,
    })
}
