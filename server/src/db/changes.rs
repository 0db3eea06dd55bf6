//! The change feed's write side: one row per committed change of a document a
//! desk can see, written in the same transaction as the change. The pull feed
//! (`http/sync.rs`) reads it.

use sqlx::PgConnection;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocKind {
    Order,
    Sku,
    Customer,
    Invoice,
    PriceList,
}

impl DocKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DocKind::Order => "order",
            DocKind::Sku => "sku",
            DocKind::Customer => "customer",
            DocKind::Invoice => "invoice",
            DocKind::PriceList => "price_list",
        }
    }
}

/// Appends a change row; must run in the transaction that made the change, so
/// the row commits (and becomes visible to pulls) exactly when the change does.
pub async fn record_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    kind: DocKind,
    doc_id: Uuid,
    version: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("insert into changes (tenant_id, kind, doc_id, version) values ($1, $2, $3, $4)")
        .bind(tenant_id)
        .bind(kind.as_str())
        .bind(doc_id)
        .bind(version)
        .execute(conn)
        .await?;
    Ok(())
}

/// [`record_in_tx`] for many documents of one kind in one statement.
pub async fn record_many_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    kind: DocKind,
    docs: &[(Uuid, i64)],
) -> Result<(), sqlx::Error> {
    let (ids, versions): (Vec<Uuid>, Vec<i64>) = docs.iter().copied().unzip();
    sqlx::query(
        "insert into changes (tenant_id, kind, doc_id, version)
         select $1, $2, d.id, d.version
           from unnest($3::uuid[], $4::int8[]) with ordinality as d(id, version, n)
          order by d.n",
    )
    .bind(tenant_id)
    .bind(kind.as_str())
    .bind(ids)
    .bind(versions)
    .execute(conn)
    .await?;
    Ok(())
}
