//! The transactional outbox's write side: partner events recorded in the same
//! transaction as the change they announce, so a rolled-back change is never
//! announced and a committed one always is. The relay reads them.

use chrono::Utc;
use serde_json::{json, Value};
use sqlx::PgConnection;
use uuid::Uuid;

/// What an event is about; its sequence counts per aggregate.
#[derive(Debug, Clone, Copy)]
pub enum Aggregate {
    Order(Uuid),
    Sku(Uuid),
    Invoice(Uuid),
}

impl Aggregate {
    fn kind(self) -> &'static str {
        match self {
            Aggregate::Order(_) => "order",
            Aggregate::Sku(_) => "sku",
            Aggregate::Invoice(_) => "invoice",
        }
    }

    fn id(self) -> Uuid {
        match self {
            Aggregate::Order(id) | Aggregate::Sku(id) | Aggregate::Invoice(id) => id,
        }
    }
}

/// Records one event. `sequence` is the aggregate's new `event_seq` (gap-free
/// per aggregate: the caller bumped it in this transaction) and `version` the
/// aggregate's version after the change. `facts` must be a JSON object.
pub async fn enqueue_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    event_type: &str,
    aggregate: Aggregate,
    sequence: i64,
    version: i64,
    facts: Value,
) -> Result<(), sqlx::Error> {
    let mut data = match facts {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    data.insert("tenant_id".into(), json!(tenant_id));
    data.insert(format!("{}_id", aggregate.kind()), json!(aggregate.id()));
    data.insert("sequence".into(), json!(sequence));
    data.insert("version".into(), json!(version));
    // The body partners receive, fixed now so every retry sends the same bytes.
    let payload = json!({
        "type": event_type,
        "timestamp": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": data,
    });
    sqlx::query(
        "insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
         values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(tenant_id)
    .bind(event_type)
    .bind(aggregate.kind())
    .bind(aggregate.id())
    .bind(sequence)
    .bind(payload)
    .execute(conn)
    .await?;
    Ok(())
}
