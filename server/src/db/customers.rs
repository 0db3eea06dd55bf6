//! Customers (retailers): credit limits, contact details, price lists.

use holdfast_protocol::model::Customer;
use sqlx::PgConnection;
use uuid::Uuid;

#[derive(sqlx::FromRow)]
struct Row {
    id: Uuid,
    name: String,
    credit_limit: Option<i64>,
    price_list_id: Option<Uuid>,
    email: Option<String>,
    phone: Option<String>,
    active: bool,
}

impl From<Row> for Customer {
    fn from(r: Row) -> Self {
        Customer {
            id: r.id,
            name: r.name,
            credit_limit: r.credit_limit,
            price_list_id: r.price_list_id,
            email: r.email,
            phone: r.phone,
            active: r.active,
        }
    }
}

const COLUMNS: &str = "id, name, credit_limit, price_list_id, email, phone, active";

/// Every customer of the tenant, active or not (a desk shows the inactive
/// ones on their open orders and offers only the active ones for new orders).
pub async fn list(conn: &mut PgConnection, tenant_id: Uuid) -> Result<Vec<Customer>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "select {COLUMNS} from customers where tenant_id = $1 order by name, id"
    ))
    .bind(tenant_id)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(Customer::from).collect())
}

pub async fn load(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Option<Customer>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(&format!(
        "select {COLUMNS} from customers where tenant_id = $1 and id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Customer::from))
}

/// Several customers by id, in no particular order (the pull feed's pages).
pub async fn load_many(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    ids: &[Uuid],
) -> Result<Vec<Customer>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "select {COLUMNS} from customers where tenant_id = $1 and id = any($2)"
    ))
    .bind(tenant_id)
    .bind(ids)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(Customer::from).collect())
}

/// A customer, its row locked until the transaction ends (an edit).
pub async fn load_for_update(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Option<Customer>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(&format!(
        "select {COLUMNS} from customers where tenant_id = $1 and id = $2 for no key update"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Customer::from))
}
