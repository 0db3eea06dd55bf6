//! The transactional outbox's write side: partner events recorded in the same
//! transaction as the change they announce, so a rolled-back change is never
//! announced and a committed one always is. The relay reads them.

use chrono::Utc;
use holdfast_protocol::event::EventType;
use serde_json::{json, Value};
use sqlx::PgConnection;

use crate::db::changes::{record_in_tx, DocKind};
use uuid::Uuid;

/// What an event is about; its sequence counts per aggregate.
#[derive(Debug, Clone, Copy)]
pub enum Aggregate {
    Order(Uuid),
    Sku(Uuid),
    Invoice(Uuid),
    Customer(Uuid),
    PriceList(Uuid),
}

impl Aggregate {
    fn kind(self) -> &'static str {
        match self {
            Aggregate::Order(_) => "order",
            Aggregate::Sku(_) => "sku",
            Aggregate::Invoice(_) => "invoice",
            Aggregate::Customer(_) => "customer",
            Aggregate::PriceList(_) => "price_list",
        }
    }

    fn id(self) -> Uuid {
        match self {
            Aggregate::Order(id)
            | Aggregate::Sku(id)
            | Aggregate::Invoice(id)
            | Aggregate::Customer(id)
            | Aggregate::PriceList(id) => id,
        }
    }
}

/// The body partners receive for one event, fixed when it is recorded so
/// every retry sends the same bytes. `facts` must be a JSON object.
pub(crate) fn payload(
    tenant_id: Uuid,
    event_type: EventType,
    aggregate: Aggregate,
    sequence: i64,
    version: i64,
    facts: Value,
) -> Value {
    let mut data = match facts {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    data.insert("tenant_id".into(), json!(tenant_id));
    data.insert(format!("{}_id", aggregate.kind()), json!(aggregate.id()));
    data.insert("sequence".into(), json!(sequence));
    data.insert("version".into(), json!(version));
    json!({
        "type": event_type.as_str(),
        "timestamp": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": data,
    })
}

/// Records one event. `sequence` is the aggregate's new `event_seq` (gap-free
/// per aggregate: the caller bumped it in this transaction) and `version` the
/// aggregate's version after the change. `facts` must be a JSON object.
/// Returns the event's id (its `webhook-id` is `evt_<id>`), which an order's
/// history keeps (`db::order_history`).
pub async fn enqueue_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    event_type: EventType,
    aggregate: Aggregate,
    sequence: i64,
    version: i64,
    facts: Value,
) -> Result<i64, sqlx::Error> {
    let payload = payload(tenant_id, event_type, aggregate, sequence, version, facts);
    sqlx::query_scalar(
        "insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
         values ($1, $2, $3, $4, $5, $6)
         returning id",
    )
    .bind(tenant_id)
    .bind(event_type.as_str())
    .bind(aggregate.kind())
    .bind(aggregate.id())
    .bind(sequence)
    .bind(payload)
    .fetch_one(conn)
    .await
}

/// One event of [`enqueue_many_in_tx`].
pub struct Event {
    pub aggregate: Aggregate,
    pub sequence: i64,
    pub version: i64,
    pub facts: Value,
}

/// Records many events of one type in one statement (a catalog import
/// announces up to 100,000 SKUs), exactly as [`enqueue_in_tx`] would one by
/// one, in the given order.
pub async fn enqueue_many_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    event_type: EventType,
    events: Vec<Event>,
) -> Result<(), sqlx::Error> {
    let mut kinds = Vec::with_capacity(events.len());
    let mut ids = Vec::with_capacity(events.len());
    let mut sequences = Vec::with_capacity(events.len());
    let mut payloads = Vec::with_capacity(events.len());
    for e in events {
        kinds.push(e.aggregate.kind());
        ids.push(e.aggregate.id());
        sequences.push(e.sequence);
        payloads.push(payload(
            tenant_id,
            event_type,
            e.aggregate,
            e.sequence,
            e.version,
            e.facts,
        ));
    }
    sqlx::query(
        "insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
         select $1, $2, e.kind, e.id, e.sequence, e.payload
           from unnest($3::text[], $4::uuid[], $5::int8[], $6::jsonb[])
                with ordinality as e(kind, id, sequence, payload, n)
          order by e.n",
    )
    .bind(tenant_id)
    .bind(event_type.as_str())
    .bind(kinds)
    .bind(ids)
    .bind(sequences)
    .bind(payloads)
    .execute(conn)
    .await?;
    Ok(())
}

/// A SKU's position moved: its change row for the desks' feed and its
/// `sku.ats_changed` event for partners, in the caller's transaction.
/// `version` and `sequence` are the position's new ones (bumped by the
/// caller's update); `ats` is what is available to sell now. Returns the
/// event's id.
pub async fn announce_ats_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    sku_id: Uuid,
    ats: i64,
    version: i64,
    sequence: i64,
) -> Result<i64, sqlx::Error> {
    record_in_tx(conn, tenant_id, DocKind::Sku, sku_id, version).await?;
    enqueue_in_tx(
        conn,
        tenant_id,
        EventType::SkuAtsChanged,
        Aggregate::Sku(sku_id),
        sequence,
        version,
        json!({ "ats": ats }),
    )
    .await
}
