//! Inbound webhooks from providers (the 3PL warehouse, the payment provider):
//! verify, then record and apply in ONE transaction.
//!
//! The inbox row's primary key (tenant, provider, event id) is the dedupe: a
//! redelivery blocks on it until the first delivery's transaction ends, then
//! finds it committed (a duplicate) or rolled back (it runs). The effect,
//! its ledger row, its change-feed row and its outbox event commit with the
//! inbox row or not at all, so a failure answers 500 and the provider's
//! redelivery gets a clean second chance.

use holdfast_protocol::event::EventType;
use holdfast_protocol::json::{self, BodyError};
use holdfast_protocol::problem::{Problem, ProblemCode};
use serde::Deserialize;
use serde_json::json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::db::changes::{record_in_tx, DocKind};
use crate::db::outbox::{announce_ats_in_tx, enqueue_in_tx, Aggregate};
use crate::error::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provider {
    Warehouse,
    Payments,
}

impl Provider {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "warehouse" => Some(Provider::Warehouse),
            "payments" => Some(Provider::Payments),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Provider::Warehouse => "warehouse",
            Provider::Payments => "payments",
        }
    }
}

/// The envelope; providers may add members we do not use.
#[derive(Debug, Deserialize)]
pub(crate) struct Envelope {
    #[serde(rename = "type")]
    pub type_: String,
    pub data: serde_json::Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InventoryData {
    sku_id: Uuid,
    qty: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PaymentData {
    invoice_id: Uuid,
    amount: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handled {
    Processed,
    Duplicate,
}

/// The tenant's id and its secret for this provider, if it has one.
pub(crate) async fn secret_for(
    db: &PgPool,
    tenant_slug: &str,
    provider: Provider,
) -> Result<Option<(Uuid, String)>, sqlx::Error> {
    sqlx::query_as(
        "select t.id, s.secret from tenants t
           join inbound_secrets s on s.tenant_id = t.id and s.provider = $2
          where t.slug = $1",
    )
    .bind(tenant_slug)
    .bind(provider.as_str())
    .fetch_optional(db)
    .await
}

/// Records and applies one verified event.
pub(crate) async fn handle(
    db: &PgPool,
    tenant_id: Uuid,
    provider: Provider,
    event_id: &str,
    raw: &[u8],
    envelope: Envelope,
) -> Result<Handled, Error> {
    // Bound like a request: the URL named the tenant and the signature showed
    // the sender holds that tenant's secret.
    let mut tx = crate::db::begin_for_tenant(db, tenant_id).await?;
    let inserted = sqlx::query(
        "insert into inbox (tenant_id, provider, event_id, body) values ($1, $2, $3, $4)
         on conflict do nothing",
    )
    .bind(tenant_id)
    .bind(provider.as_str())
    .bind(event_id)
    .bind(raw)
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        return Ok(Handled::Duplicate);
    }
    let source = format!("{}:{event_id}", provider.as_str());
    match (provider, envelope.type_.as_str()) {
        (Provider::Warehouse, "inventory.received") => {
            let d: InventoryData = data(envelope.data)?;
            if d.qty < 1 {
                return Err(Error::validation(
                    "data.qty",
                    "received quantity must be at least 1",
                ));
            }
            adjust_on_hand_in_tx(
                &mut tx,
                tenant_id,
                d.sku_id,
                d.qty,
                "inventory.received",
                &source,
            )
            .await?;
        }
        (Provider::Warehouse, "inventory.adjusted") => {
            let d: InventoryData = data(envelope.data)?;
            if d.qty == 0 {
                return Err(Error::validation(
                    "data.qty",
                    "an adjustment of 0 changes nothing",
                ));
            }
            adjust_on_hand_in_tx(
                &mut tx,
                tenant_id,
                d.sku_id,
                d.qty,
                "inventory.adjusted",
                &source,
            )
            .await?;
        }
        (Provider::Payments, "payment.succeeded") => {
            let d: PaymentData = data(envelope.data)?;
            mark_paid_in_tx(&mut tx, tenant_id, d.invoice_id, d.amount).await?;
        }
        (_, other) => {
            // Recorded (so a redelivery is a duplicate) and otherwise ignored:
            // providers send event types we have no use for.
            tracing::info!(
                provider = provider.as_str(),
                event_type = other,
                "inbound event type ignored"
            );
        }
    }
    tx.commit().await?;
    Ok(Handled::Processed)
}

fn data<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, Error> {
    json::reject_nul(&value)
        .and_then(|()| json::typed(&value))
        .map_err(|e| match e {
            // Name fields from the envelope's root, as the provider sent them.
            BodyError::Invalid(mut e) => {
                e.field = format!("data.{}", e.field);
                Error::from(BodyError::Invalid(e))
            }
            other => Error::from(other),
        })
}

/// Moves on_hand by `delta` through the inventory ledger, refusing to take it
/// below what keeps allocated ≤ on_hand + on_order (and below zero).
async fn adjust_on_hand_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    sku_id: Uuid,
    delta: i64,
    reason: &str,
    source: &str,
) -> Result<(), Error> {
    let moved: Option<(i64, i64, i64)> = sqlx::query_as(
        "update sku_positions
            set on_hand = on_hand + $3, version = version + 1, event_seq = event_seq + 1, updated_at = now()
          where tenant_id = $1 and sku_id = $2
            and on_hand + $3 >= 0 and allocated <= on_hand + $3 + on_order
          returning on_hand + on_order - allocated, version, event_seq",
    )
    .bind(tenant_id)
    .bind(sku_id)
    .bind(delta)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((ats, version, seq)) = moved else {
        let position: Option<(i64, i64, i64)> = sqlx::query_as(
            "select on_hand, on_order, allocated from sku_positions where tenant_id = $1 and sku_id = $2",
        )
        .bind(tenant_id)
        .bind(sku_id)
        .fetch_optional(&mut *conn)
        .await?;
        let Some((on_hand, on_order, allocated)) = position else {
            return Err(Error::not_found("SKU"));
        };
        return Err(Problem::new(
            ProblemCode::InsufficientAts,
            format!(
                "adjusting on_hand {on_hand} by {delta} would leave less than the {allocated} allocated \
                 (on_order {on_order})"
            ),
        )
        .with("ats_available", on_hand + on_order - allocated)
        .with("requested", -delta)
        .into());
    };
    sqlx::query(
        "insert into inventory_ledger (tenant_id, sku_id, on_hand_delta, reason, source)
         values ($1, $2, $3, $4, $5)",
    )
    .bind(tenant_id)
    .bind(sku_id)
    .bind(delta)
    .bind(reason)
    .bind(source)
    .execute(&mut *conn)
    .await?;
    announce_ats_in_tx(conn, tenant_id, sku_id, ats, version, seq).await?;
    Ok(())
}

/// Paid only where the invoice awaits payment; a repeat or unknown invoice
/// is recorded in the inbox and changes nothing.
async fn mark_paid_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    invoice_id: Uuid,
    amount: i64,
) -> Result<(), Error> {
    let paid: Option<(Uuid, i64, i64, i64)> = sqlx::query_as(
        "update invoices set status = 'paid', paid_at = now(), version = version + 1, event_seq = event_seq + 1
          where tenant_id = $1 and id = $2 and status = 'awaiting_payment'
          returning order_id, amount, version, event_seq",
    )
    .bind(tenant_id)
    .bind(invoice_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((order_id, invoice_amount, version, seq)) = paid else {
        tracing::info!(%invoice_id, "payment for an invoice not awaiting payment; recorded, no effect");
        return Ok(());
    };
    if amount != invoice_amount {
        tracing::warn!(%invoice_id, amount, invoice_amount, "payment amount differs from the invoice");
    }
    record_in_tx(conn, tenant_id, DocKind::Invoice, invoice_id, version).await?;
    let facts = json!({"order_id": order_id, "amount": invoice_amount, "amount_paid": amount});
    enqueue_in_tx(
        conn,
        tenant_id,
        EventType::InvoicePaid,
        Aggregate::Invoice(invoice_id),
        seq,
        version,
        facts,
    )
    .await?;
    Ok(())
}
