//! Pro-forma invoices.

use chrono::{DateTime, Utc};
use holdfast_protocol::model::{Invoice, InvoiceStatus};
use sqlx::PgConnection;
use uuid::Uuid;

type InvoiceRow = (Uuid, Uuid, i64, String, Option<DateTime<Utc>>, i64);

pub async fn load(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Option<Invoice>, sqlx::Error> {
    let row: Option<InvoiceRow> = sqlx::query_as(
        "select id, order_id, amount, status, paid_at, amount_paid from invoices where tenant_id = $1 and id = $2",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(from_row))
}

/// Several invoices by id, in no particular order (the pull feed's pages).
pub async fn load_many(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    ids: &[Uuid],
) -> Result<Vec<Invoice>, sqlx::Error> {
    let rows: Vec<InvoiceRow> = sqlx::query_as(
        "select id, order_id, amount, status, paid_at, amount_paid from invoices where tenant_id = $1 and id = any($2)",
    )
    .bind(tenant_id)
    .bind(ids)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(from_row).collect())
}

fn from_row((id, order_id, amount, status, paid_at, amount_paid): InvoiceRow) -> Invoice {
    Invoice {
        id,
        order_id,
        amount,
        status: if status == "paid" {
            InvoiceStatus::Paid
        } else {
            InvoiceStatus::AwaitingPayment
        },
        paid_at,
        amount_paid,
    }
}
