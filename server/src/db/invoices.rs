//! Pro-forma invoices.

use chrono::{DateTime, Utc};
use holdfast_protocol::model::{Invoice, InvoiceStatus};
use sqlx::PgConnection;
use uuid::Uuid;

type InvoiceRow = (Uuid, Uuid, i64, String, Option<DateTime<Utc>>);

pub async fn load(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Option<Invoice>, sqlx::Error> {
    let row: Option<InvoiceRow> = sqlx::query_as(
        "select id, order_id, amount, status, paid_at from invoices where tenant_id = $1 and id = $2",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|(id, order_id, amount, status, paid_at)| Invoice {
        id,
        order_id,
        amount,
        status: if status == "paid" {
            InvoiceStatus::Paid
        } else {
            InvoiceStatus::AwaitingPayment
        },
        paid_at,
    }))
}
