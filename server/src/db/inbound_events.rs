//! The inbox as operators see it: each provider's events with their outcome
//! (processed or refused, with the problem the provider was answered), and
//! the invoices whose payments do not match their amount.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InboundOutcome {
    Processed,
    /// Answered 4xx and kept: a redelivery gets the same answer.
    Refused,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct InboundEvent {
    pub provider: String,
    /// The provider's `webhook-id`.
    pub event_id: String,
    /// The envelope's `type`, when the body had one.
    pub event_type: Option<String>,
    #[schema(value_type = InboundOutcome)]
    pub outcome: String,
    /// The problem the provider was answered with (refused events only).
    #[schema(value_type = Option<Object>)]
    pub refusal: Option<serde_json::Value>,
    /// The body as received (UTF-8, lossy), for the operator to read.
    pub body: String,
    pub received_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct EventRow {
    provider: String,
    event_id: String,
    event_type: Option<String>,
    outcome: String,
    refusal: Option<serde_json::Value>,
    body: Vec<u8>,
    received_at: DateTime<Utc>,
}

impl From<EventRow> for InboundEvent {
    fn from(r: EventRow) -> Self {
        InboundEvent {
            provider: r.provider,
            event_id: r.event_id,
            event_type: r.event_type,
            outcome: r.outcome,
            refusal: r.refusal,
            // Lossy here rather than `convert_from` in SQL: a body that is
            // not UTF-8 (refused for it, and kept) must not fail the list.
            body: String::from_utf8_lossy(&r.body).into_owned(),
            received_at: r.received_at,
        }
    }
}

/// How an event id narrows a listing.
#[derive(Debug, Clone, Copy)]
enum ById<'a> {
    Exact(&'a str),
    Prefix(&'a str),
}

async fn query(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    provider: Option<&str>,
    outcome: Option<InboundOutcome>,
    by_id: Option<ById<'_>>,
    limit: i64,
) -> Result<Vec<InboundEvent>, sqlx::Error> {
    let (exact, prefix) = match by_id {
        Some(ById::Exact(id)) => (Some(id), None),
        Some(ById::Prefix(p)) => (None, Some(p)),
        None => (None, None),
    };
    let rows: Vec<EventRow> = sqlx::query_as(
        "select provider, event_id, event_type, outcome, refusal, body, received_at
           from inbox
          where tenant_id = $1
            and ($2::text is null or provider = $2)
            and ($3::text is null or outcome = $3)
            and ($4::text is null or event_id = $4)
            and ($5::text is null or starts_with(event_id, $5))
          order by received_at desc, provider, event_id
          limit $6",
    )
    .bind(tenant_id)
    .bind(provider)
    .bind(outcome.map(|o| match o {
        InboundOutcome::Processed => "processed",
        InboundOutcome::Refused => "refused",
    }))
    .bind(exact)
    .bind(prefix)
    .bind(limit)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(InboundEvent::from).collect())
}

/// Newest first, filtered by whichever of provider, outcome and event id are given.
pub async fn list(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    provider: Option<&str>,
    outcome: Option<InboundOutcome>,
    event_id: Option<&str>,
    limit: i64,
) -> Result<Vec<InboundEvent>, sqlx::Error> {
    let by_id = event_id.map(ById::Exact);
    query(conn, tenant_id, provider, outcome, by_id, limit).await
}

/// Newest first like [`list`], but finding events whose id starts with
/// `event_id_prefix` (an exact id is its own prefix): what an operator
/// searching for one event types.
pub async fn search(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    provider: Option<&str>,
    outcome: Option<InboundOutcome>,
    event_id_prefix: Option<&str>,
    limit: i64,
) -> Result<Vec<InboundEvent>, sqlx::Error> {
    let by_id = event_id_prefix.map(ById::Prefix);
    query(conn, tenant_id, provider, outcome, by_id, limit).await
}

/// A provider's inbound secret as operators may see it: when it was
/// issued, never the secret.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SecretStatus {
    pub provider: String,
    /// When the current secret was issued (a re-issue replaces it).
    pub issued_at: DateTime<Utc>,
    /// When the provider's first secret was issued; null for secrets
    /// issued before that was recorded.
    pub first_issued_at: Option<DateTime<Utc>>,
}

/// The providers that have a secret (a provider without one has every
/// webhook refused).
pub async fn secrets(
    conn: &mut PgConnection,
    tenant_id: Uuid,
) -> Result<Vec<SecretStatus>, sqlx::Error> {
    sqlx::query_as(
        "select provider, created_at as issued_at, first_issued_at
           from inbound_secrets where tenant_id = $1 order by provider",
    )
    .bind(tenant_id)
    .fetch_all(conn)
    .await
}

/// An invoice whose payments so far are not its amount: partly paid (still
/// awaiting the rest) or over-paid (a difference to settle).
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct PaymentMismatch {
    pub invoice_id: Uuid,
    pub order_id: Uuid,
    pub customer_name: String,
    pub amount: i64,
    pub amount_paid: i64,
    pub payments: i64,
    pub last_payment_at: Option<DateTime<Utc>>,
}

pub async fn payment_mismatches(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    limit: i64,
) -> Result<Vec<PaymentMismatch>, sqlx::Error> {
    sqlx::query_as(
        "select i.id as invoice_id, i.order_id, c.name as customer_name, i.amount, i.amount_paid,
                (select count(*) from payments p where p.tenant_id = i.tenant_id and p.invoice_id = i.id) as payments,
                (select max(received_at) from payments p where p.tenant_id = i.tenant_id and p.invoice_id = i.id)
                    as last_payment_at
           from invoices i
           join customers c on c.tenant_id = i.tenant_id and c.id = i.customer_id
          where i.tenant_id = $1 and i.amount_paid > 0 and i.amount_paid <> i.amount
          order by last_payment_at desc nulls last
          limit $2",
    )
    .bind(tenant_id)
    .bind(limit)
    .fetch_all(conn)
    .await
}
