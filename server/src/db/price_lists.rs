//! Price lists and their entries: what a customer on a list pays per SKU.

use holdfast_protocol::model::{Price, PriceList};
use sqlx::PgConnection;
use uuid::Uuid;

/// Several whole price lists by id, in no particular order (the pull feed's
/// pages, `GET /v1/price-lists/{id}`); unknown ids are left out. Prices are
/// ordered by SKU id so a document reads the same every time.
pub async fn load_many(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    ids: &[Uuid],
) -> Result<Vec<PriceList>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        id: Uuid,
        name: String,
        prices: sqlx::types::Json<Vec<Price>>,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "select p.id, p.name,
                coalesce((select jsonb_agg(jsonb_build_object('sku_id', e.sku_id, 'price', e.price)
                                           order by e.sku_id)
                            from price_list_entries e
                           where e.tenant_id = p.tenant_id and e.price_list_id = p.id),
                         '[]'::jsonb) as prices
           from price_lists p
          where p.tenant_id = $1 and p.id = any($2)",
    )
    .bind(tenant_id)
    .bind(ids)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| PriceList {
            id: r.id,
            name: r.name,
            prices: r.prices.0,
        })
        .collect())
}

pub async fn load(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Option<PriceList>, sqlx::Error> {
    Ok(load_many(conn, tenant_id, &[id]).await?.pop())
}

/// A price list as the operator's page lists it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Summary {
    pub id: Uuid,
    pub name: String,
    /// How many SKUs it prices.
    pub entries: i64,
    /// How many customers are on it.
    pub customers: i64,
}

/// Every price list of the tenant, by name.
pub async fn list(conn: &mut PgConnection, tenant_id: Uuid) -> Result<Vec<Summary>, sqlx::Error> {
    sqlx::query_as(
        "select p.id, p.name,
                (select count(*) from price_list_entries e
                  where e.tenant_id = p.tenant_id and e.price_list_id = p.id) as entries,
                (select count(*) from customers c
                  where c.tenant_id = p.tenant_id and c.price_list_id = p.id) as customers
           from price_lists p
          where p.tenant_id = $1
          order by p.name, p.id",
    )
    .bind(tenant_id)
    .fetch_all(conn)
    .await
}
