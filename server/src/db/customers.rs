//! Customers (retailers) and their credit limits.

use holdfast_protocol::model::Customer;
use sqlx::PgConnection;
use uuid::Uuid;

pub async fn list(conn: &mut PgConnection, tenant_id: Uuid) -> Result<Vec<Customer>, sqlx::Error> {
    let rows: Vec<(Uuid, String, Option<i64>)> = sqlx::query_as(
        "select id, name, credit_limit from customers where tenant_id = $1 order by name, id",
    )
    .bind(tenant_id)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, name, credit_limit)| Customer {
            id,
            name,
            credit_limit,
        })
        .collect())
}

/// Several customers by id, in no particular order (the pull feed's pages).
pub async fn load_many(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    ids: &[Uuid],
) -> Result<Vec<Customer>, sqlx::Error> {
    let rows: Vec<(Uuid, String, Option<i64>)> = sqlx::query_as(
        "select id, name, credit_limit from customers where tenant_id = $1 and id = any($2)",
    )
    .bind(tenant_id)
    .bind(ids)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, name, credit_limit)| Customer {
            id,
            name,
            credit_limit,
        })
        .collect())
}
