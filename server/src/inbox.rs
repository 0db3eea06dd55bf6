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
use sqlx::{Connection, PgConnection, PgPool};
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

/// The most one warehouse event may move on_hand, either way. A billion
/// units is beyond any real receipt or count correction, and the bound keeps
/// every sum over positions (on_hand + on_order, ATS) far inside bigint, so
/// an absurd quantity is a clear refusal, never `bigint out of range` (a 500
/// the provider would redeliver for ever) or an overflow.
pub(crate) const MAX_INVENTORY_QTY: i64 = 1_000_000_000;

/// Records and applies one verified event. `envelope` is the body as
/// parsed, or why it could not be: a body we cannot read is refused and
/// recorded like any other refusal.
///
/// The inbox row goes in first: its primary key is the dedupe lock. The
/// effect runs in a savepoint; a refusal (a 4xx problem: bad shape, unknown
/// SKU or invoice, stock that would strand allocations) rolls the effect
/// back, marks the row refused with the problem, commits, and answers that
/// problem. A redelivery of a refused event gets the same problem without
/// running again. Our own failures (anything else) roll everything back and
/// answer 5xx, so the provider redelivers.
pub(crate) async fn handle(
    db: &PgPool,
    tenant_id: Uuid,
    provider: Provider,
    event_id: &str,
    raw: &[u8],
    envelope: Result<Envelope, Error>,
) -> Result<Handled, Error> {
    // Bound like a request: the URL named the tenant and the signature showed
    // the sender holds that tenant's secret.
    let mut tx = crate::db::begin_for_tenant(db, tenant_id).await?;
    let event_type = envelope.as_ref().ok().map(|e| e.type_.clone());
    let inserted = sqlx::query(
        "insert into inbox (tenant_id, provider, event_id, body, event_type) values ($1, $2, $3, $4, $5)
         on conflict do nothing",
    )
    .bind(tenant_id)
    .bind(provider.as_str())
    .bind(event_id)
    .bind(raw)
    .bind(&event_type)
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        let refusal: Option<sqlx::types::Json<Problem>> = sqlx::query_scalar(
            "select refusal from inbox where tenant_id = $1 and provider = $2 and event_id = $3",
        )
        .bind(tenant_id)
        .bind(provider.as_str())
        .bind(event_id)
        .fetch_one(&mut *tx)
        .await?;
        return match refusal {
            Some(problem) => Err(Error::Problem(Box::new(problem.0))),
            None => Ok(Handled::Duplicate),
        };
    }
    let mut effect = (*tx).begin().await?;
    let applied = match envelope {
        Ok(envelope) => apply_in_tx(&mut effect, tenant_id, provider, event_id, envelope).await,
        Err(e) => Err(e),
    };
    match applied {
        Ok(()) => effect.commit().await?,
        Err(Error::Problem(problem)) if problem.code.status() < 500 => {
            effect.rollback().await?;
            sqlx::query(
                "update inbox set outcome = 'refused', refusal = $4
                  where tenant_id = $1 and provider = $2 and event_id = $3",
            )
            .bind(tenant_id)
            .bind(provider.as_str())
            .bind(event_id)
            .bind(sqlx::types::Json(&*problem))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            tracing::info!(
                provider = provider.as_str(),
                event_id,
                code = %problem.code,
                "inbound event refused and recorded"
            );
            return Err(Error::Problem(problem));
        }
        Err(other) => return Err(other),
    }
    tx.commit().await?;
    Ok(Handled::Processed)
}

async fn apply_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    provider: Provider,
    event_id: &str,
    envelope: Envelope,
) -> Result<(), Error> {
    let source = format!("{}:{event_id}", provider.as_str());
    match (provider, envelope.type_.as_str()) {
        (Provider::Warehouse, "inventory.received") => {
            let d: InventoryData = data(envelope.data)?;
            if !(1..=MAX_INVENTORY_QTY).contains(&d.qty) {
                return Err(Error::validation(
                    "data.qty",
                    format!("a received quantity is from 1 to {MAX_INVENTORY_QTY}"),
                ));
            }
            adjust_on_hand_in_tx(
                conn,
                tenant_id,
                d.sku_id,
                d.qty,
                "inventory.received",
                &source,
            )
            .await
        }
        (Provider::Warehouse, "inventory.adjusted") => {
            let d: InventoryData = data(envelope.data)?;
            if d.qty == 0 {
                return Err(Error::validation(
                    "data.qty",
                    "an adjustment of 0 changes nothing",
                ));
            }
            if !(-MAX_INVENTORY_QTY..=MAX_INVENTORY_QTY).contains(&d.qty) {
                return Err(Error::validation(
                    "data.qty",
                    format!("an adjustment is from -{MAX_INVENTORY_QTY} to {MAX_INVENTORY_QTY}"),
                ));
            }
            adjust_on_hand_in_tx(
                conn,
                tenant_id,
                d.sku_id,
                d.qty,
                "inventory.adjusted",
                &source,
            )
            .await
        }
        (Provider::Payments, "payment.succeeded") => {
            let d: PaymentData = data(envelope.data)?;
            if d.amount < 1 {
                return Err(Error::validation(
                    "data.amount",
                    "a payment is at least 1 (minor units)",
                ));
            }
            record_payment_in_tx(conn, tenant_id, event_id, d.invoice_id, d.amount).await
        }
        (_, other) => {
            // Recorded (so a redelivery is a duplicate) and otherwise ignored:
            // providers send event types we have no use for.
            tracing::info!(
                provider = provider.as_str(),
                event_type = other,
                "inbound event type ignored"
            );
            Ok(())
        }
    }
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

/// Records one payment and adds it to the invoice's `amount_paid`; the
/// invoice becomes paid (and `invoice.paid` goes out, once) only when its
/// payments cover its amount. A payment for less leaves it awaiting payment
/// with what was paid visible; one past the amount, or on a paid invoice,
/// is kept as an over-payment for an operator to settle. Every payment
/// changes the invoice document (its `amount_paid`), so desks see it.
async fn record_payment_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    event_id: &str,
    invoice_id: Uuid,
    amount: i64,
) -> Result<(), Error> {
    let moved: Option<(Uuid, i64, i64, String, bool, i64, i64)> = sqlx::query_as(
        "with before as (
             select status from invoices where tenant_id = $1 and id = $2 for update
         )
         update invoices i
            set amount_paid = i.amount_paid + $3,
                status = case when i.amount_paid + $3 >= i.amount then 'paid' else i.status end,
                paid_at = case when i.status = 'awaiting_payment' and i.amount_paid + $3 >= i.amount
                               then now() else i.paid_at end,
                version = i.version + 1,
                -- Partners' sequence is gap-free: it counts events, and only
                -- the payment that covers the invoice sends one.
                event_seq = i.event_seq
                    + case when i.status = 'awaiting_payment' and i.amount_paid + $3 >= i.amount
                           then 1 else 0 end
           from before
          where i.tenant_id = $1 and i.id = $2
            and i.amount_paid <= 9223372036854775807 - $3
          returning i.order_id, i.amount, i.amount_paid, i.status,
                    before.status = 'awaiting_payment' and i.status = 'paid', i.version, i.event_seq",
    )
    .bind(tenant_id)
    .bind(invoice_id)
    .bind(amount)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((order_id, invoice_amount, amount_paid, status, now_paid, version, seq)) = moved
    else {
        let exists: Option<i64> =
            sqlx::query_scalar("select amount_paid from invoices where tenant_id = $1 and id = $2")
                .bind(tenant_id)
                .bind(invoice_id)
                .fetch_optional(&mut *conn)
                .await?;
        return Err(match exists {
            None => Error::not_found("invoice"),
            Some(paid) => Error::validation(
                "data.amount",
                format!("{amount} on top of the {paid} already paid is more than an amount can be"),
            ),
        });
    };
    sqlx::query(
        "insert into payments (tenant_id, event_id, invoice_id, amount) values ($1, $2, $3, $4)",
    )
    .bind(tenant_id)
    .bind(event_id)
    .bind(invoice_id)
    .bind(amount)
    .execute(&mut *conn)
    .await?;
    if amount_paid != invoice_amount && (status == "paid" || amount_paid > invoice_amount) {
        tracing::warn!(%invoice_id, amount, amount_paid, invoice_amount, "invoice over-paid; an operator should settle the difference");
    } else if amount_paid < invoice_amount {
        tracing::info!(%invoice_id, amount, amount_paid, invoice_amount, "partial payment recorded; invoice still awaiting payment");
    }
    record_in_tx(conn, tenant_id, DocKind::Invoice, invoice_id, version).await?;
    if now_paid {
        let facts =
            json!({"order_id": order_id, "amount": invoice_amount, "amount_paid": amount_paid});
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
    }
    Ok(())
}
