//! An order's history (API.md v1.1): one durable entry per version — who made
//! it, when, under which idempotency key, what changed — and, read beside it,
//! what became of the partner events it produced.
//!
//! The entry is written by the mutation engine in the transaction that makes
//! the version (see the migration `order_history` for why a table of its own
//! and why no extra round trip): the allocation statement and
//! `engine::edit::bump_announce_in_tx` carry it as one more sub-statement,
//! the other acts write it with their last outbox event through
//! [`announce_in_tx`].
//!
//! # After retention
//!
//! Entries are kept forever; their deliveries are read from `deliveries` and
//! `outbox`, which the reaper trims (`housekeeping.rs`): a delivery is deleted
//! once it has been delivered for longer than the outbox retention (168 h by
//! default), and its event once no delivery of it is left. An old entry
//! therefore still lists its dead-lettered, held and pending deliveries (the
//! reaper never deletes those), but no longer the delivered ones: an entry
//! whose deliveries are all gone had every one of them delivered, or had no
//! subscribed partner. Its event ids stay on the entry either way.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use holdfast_protocol::event::{pattern_matches, EventType};
use holdfast_protocol::model::{HistoryDelivery, HistoryDeliveryState, HistoryEntry, OrderHistory};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::db::outbox::{payload, Aggregate};
use crate::relay::deliver::event_id;

/// Who made a change, and the request that carried it. Both `None` for a
/// change the system makes on its own (none does today).
#[derive(Debug, Clone, Copy)]
pub struct Author<'a> {
    pub user_id: Option<Uuid>,
    pub idempotency_key: Option<&'a str>,
}

/// The order event that closes a change, and the version it made.
#[derive(Debug, Clone)]
pub struct OrderEvent {
    pub order_id: Uuid,
    pub event_type: EventType,
    /// The order's new `event_seq` (reserved by the caller's bump).
    pub sequence: i64,
    /// The order's version after the change.
    pub version: i64,
    /// The event's facts (a JSON object).
    pub facts: Value,
}

/// Records the order event that closes a change and the change's history
/// entry, in one statement: the entry keeps `earlier_events` (the ids of the
/// change's other outbox events, in the order they were written) and this
/// event's id. `entry_facts` replaces the event's facts on the entry when the
/// change announced more than one order event (a removed line that released
/// its allocation).
pub async fn announce_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    author: Author<'_>,
    event: OrderEvent,
    entry_facts: Option<Value>,
    earlier_events: &[i64],
) -> Result<(), sqlx::Error> {
    let entry_facts = entry_facts.unwrap_or_else(|| event.facts.clone());
    let body = payload(
        tenant_id,
        event.event_type,
        Aggregate::Order(event.order_id),
        event.sequence,
        event.version,
        event.facts,
    );
    sqlx::query(
        "with event as (
             insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
             values ($1, $2, 'order', $3, $4, $5)
             returning id
         )
         insert into order_history (tenant_id, order_id, version, created_by, event_type, facts,
                                    idempotency_key, outbox_ids)
         select $1, $3, $6, $7, $2, $8, $9, $10::int8[] || event.id from event",
    )
    .bind(tenant_id)
    .bind(event.event_type.as_str())
    .bind(event.order_id)
    .bind(event.sequence)
    .bind(body)
    .bind(event.version)
    .bind(author.user_id)
    .bind(entry_facts)
    .bind(author.idempotency_key)
    .bind(earlier_events)
    .execute(conn)
    .await?;
    Ok(())
}

#[derive(sqlx::FromRow)]
struct EntryRow {
    version: Option<i64>,
    created_at: Option<DateTime<Utc>>,
    created_by: Option<Uuid>,
    by_name: Option<String>,
    event_type: Option<String>,
    facts: Option<Value>,
    idempotency_key: Option<String>,
    outbox_ids: Option<Vec<i64>>,
}

#[derive(sqlx::FromRow)]
struct DeliveryRow {
    outbox_id: i64,
    partner_id: Uuid,
    partner_name: String,
    partner_enabled: bool,
    /// `pending`, `delivered` or `dead`; `unfanned` for a partner the relay
    /// has not yet made a delivery for (`event_type` and `patterns` say
    /// whether it will).
    state: String,
    attempts: i32,
    last_status: Option<i32>,
    delivered_at: Option<DateTime<Utc>>,
    event_type: Option<String>,
    patterns: Option<Vec<String>>,
}

/// The order's history, oldest first; `None` when the order is not in the
/// tenant. Two statements: the entries (with the order's existence), then
/// the deliveries of every event they name.
pub async fn load(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    order_id: Uuid,
) -> Result<Option<OrderHistory>, sqlx::Error> {
    // Left joins from the order: an order with no entry yet (one changed
    // only before the history existed) is one row of nulls, not a 404.
    let rows: Vec<EntryRow> = sqlx::query_as(
        "select h.version, h.created_at, h.created_by, u.display_name as by_name, h.event_type,
                h.facts, h.idempotency_key, h.outbox_ids
           from orders o
           left join order_history h on h.tenant_id = o.tenant_id and h.order_id = o.id
           left join users u on u.tenant_id = h.tenant_id and u.id = h.created_by
          where o.tenant_id = $1 and o.id = $2
          order by h.version",
    )
    .bind(tenant_id)
    .bind(order_id)
    .fetch_all(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let event_ids: Vec<i64> = rows
        .iter()
        .flat_map(|r| r.outbox_ids.iter().flatten().copied())
        .collect();
    let mut deliveries = deliveries(conn, tenant_id, &event_ids).await?;
    let mut entries = Vec::with_capacity(rows.len());
    for row in rows {
        let (Some(version), Some(at), Some(event_type), Some(facts)) =
            (row.version, row.created_at, row.event_type, row.facts)
        else {
            continue;
        };
        let deliveries = row
            .outbox_ids
            .unwrap_or_default()
            .iter()
            .flat_map(|id| deliveries.remove(id).unwrap_or_default())
            .collect();
        entries.push(HistoryEntry {
            version,
            at,
            by: row.created_by,
            by_name: row.by_name,
            event_type,
            facts,
            idempotency_key: row.idempotency_key,
            deliveries,
        });
    }
    Ok(Some(OrderHistory { entries }))
}

/// The deliveries of these events that still exist, by event, each event's
/// by partner name. An event the relay has not fanned out yet has no
/// delivery rows: it shows as pending (held for a disabled partner) for every
/// partner subscribed to its type now, decided by the rule the fan-out uses.
/// Nor has an event a relay is attempting for the first time from memory
/// (`relay_sending_events`): it shows as pending for that partner.
async fn deliveries(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    event_ids: &[i64],
) -> Result<HashMap<i64, Vec<HistoryDelivery>>, sqlx::Error> {
    if event_ids.is_empty() {
        return Ok(HashMap::new());
    }
    // One snapshot for the three parts: an event is not fanned out yet, or
    // being attempted from memory, or has its delivery row; never two or
    // none because the relay moved between reads (the fan-out and the
    // write of a first outcome are each one transaction).
    let rows: Vec<DeliveryRow> = sqlx::query_as(
        "select d.outbox_id, d.partner_id, p.name as partner_name, p.enabled as partner_enabled,
                d.state, d.attempts, d.last_status, d.delivered_at,
                null::text as event_type, null::text[] as patterns
           from deliveries d
           join partners p on p.tenant_id = d.tenant_id and p.id = d.partner_id
          where d.tenant_id = $1 and d.outbox_id = any($2)
         union all
         select o.id, p.id, p.name, p.enabled, 'unfanned', 0, null, null,
                o.event_type, p.event_types
           from outbox o
           join partners p on p.tenant_id = o.tenant_id
          where o.tenant_id = $1 and o.id = any($2) and o.fanned_out_at is null
         union all
         select s.outbox_id, p.id, p.name, p.enabled, 'pending', 0, null, null, null, null
           from relay_sending_events s
           join partners p on p.tenant_id = s.tenant_id and p.id = s.partner_id
          where s.tenant_id = $1 and s.outbox_id = any($2)
          order by 1, 3, 2",
    )
    .bind(tenant_id)
    .bind(event_ids)
    .fetch_all(conn)
    .await?;
    let mut by_event: HashMap<i64, Vec<HistoryDelivery>> = HashMap::new();
    for row in rows {
        if let (Some(event_type), Some(patterns)) = (&row.event_type, &row.patterns) {
            if !patterns.iter().any(|p| pattern_matches(p, event_type)) {
                continue;
            }
        }
        let state = state_in_words(&row.state, row.attempts, row.partner_enabled)?;
        by_event
            .entry(row.outbox_id)
            .or_default()
            .push(HistoryDelivery {
                partner_id: row.partner_id,
                partner_name: row.partner_name,
                webhook_id: event_id(row.outbox_id),
                state,
                attempts: row.attempts,
                last_status: row.last_status,
                delivered_at: row.delivered_at,
            });
    }
    Ok(by_event)
}

/// A delivery's row state, told as the history tells it. A pending delivery
/// of a disabled (or 410-paused) partner is held: the relay claims nothing of
/// it until an operator enables the partner again.
fn state_in_words(
    state: &str,
    attempts: i32,
    partner_enabled: bool,
) -> Result<HistoryDeliveryState, sqlx::Error> {
    Ok(match state {
        "delivered" => HistoryDeliveryState::Delivered,
        "dead" => HistoryDeliveryState::DeadLettered,
        "pending" | "unfanned" if !partner_enabled => HistoryDeliveryState::Held,
        "pending" | "unfanned" if attempts > 0 => HistoryDeliveryState::Retrying,
        "pending" | "unfanned" => HistoryDeliveryState::Pending,
        other => {
            return Err(sqlx::Error::Decode(
                format!("unknown delivery state {other:?}").into(),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_in_words() {
        let s = |state, attempts, enabled| state_in_words(state, attempts, enabled).ok();
        assert_eq!(
            s("delivered", 1, true),
            Some(HistoryDeliveryState::Delivered)
        );
        // Delivered stays delivered when the partner is paused afterwards.
        assert_eq!(
            s("delivered", 3, false),
            Some(HistoryDeliveryState::Delivered)
        );
        assert_eq!(
            s("dead", 12, true),
            Some(HistoryDeliveryState::DeadLettered)
        );
        assert_eq!(s("pending", 0, true), Some(HistoryDeliveryState::Pending));
        assert_eq!(s("unfanned", 0, true), Some(HistoryDeliveryState::Pending));
        assert_eq!(s("pending", 2, true), Some(HistoryDeliveryState::Retrying));
        assert_eq!(s("pending", 2, false), Some(HistoryDeliveryState::Held));
        assert_eq!(s("unfanned", 0, false), Some(HistoryDeliveryState::Held));
        assert_eq!(s("lost", 0, true), None);
    }
}
