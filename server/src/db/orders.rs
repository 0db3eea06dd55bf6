//! Orders and their lines: loading whole documents, listing with keyset paging.

use chrono::{DateTime, NaiveDate, Utc};
use holdfast_protocol::model::{Line, Order, OrderStatus};
use sqlx::PgConnection;
use uuid::Uuid;

#[derive(sqlx::FromRow)]
struct OrderRow {
    id: Uuid,
    customer_id: Uuid,
    customer_po: Option<String>,
    ship_window_start: Option<NaiveDate>,
    ship_window_end: Option<NaiveDate>,
    notes: Option<String>,
    status: String,
    version: i64,
    invoice_id: Option<Uuid>,
    updated_at: DateTime<Utc>,
    updated_by: Uuid,
    updated_by_name: String,
    created_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct LineRow {
    order_id: Uuid,
    id: Uuid,
    sku_id: Uuid,
    qty_ordered: i64,
    qty_allocated: i64,
    unit_price: i64,
}

const ORDER_COLUMNS: &str = "
    o.id, o.customer_id, o.customer_po, o.ship_window_start, o.ship_window_end, o.notes,
    o.status, o.version, o.invoice_id, o.updated_at, o.updated_by,
    u.display_name as updated_by_name, o.created_at
    from orders o join users u on u.tenant_id = o.tenant_id and u.id = o.updated_by";

/// The whole current document, lines in the order they were added, in one
/// statement (every mutation answers with one, so it is a round trip each).
pub async fn load(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Option<Order>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        order: OrderRow,
        lines: sqlx::types::Json<Vec<Line>>,
    }
    let row: Option<Row> = sqlx::query_as(&format!(
        "select coalesce((select jsonb_agg(jsonb_build_object(
                                 'id', l.id, 'sku_id', l.sku_id, 'qty_ordered', l.qty_ordered,
                                 'qty_allocated', l.qty_allocated, 'unit_price', l.unit_price)
                                 order by l.ordinal)
                            from order_lines l
                           where l.tenant_id = o.tenant_id and l.order_id = o.id),
                         '[]'::jsonb) as lines,
                {ORDER_COLUMNS}
          where o.tenant_id = $1 and o.id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|row| document(row.order, row.lines.0)).transpose()
}

/// Several whole documents by id, in no particular order (the pull feed's
/// pages); ids that are not the tenant's orders are left out.
pub async fn load_many(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    ids: &[Uuid],
) -> Result<Vec<Order>, sqlx::Error> {
    let rows: Vec<OrderRow> = sqlx::query_as(&format!(
        "select {ORDER_COLUMNS} where o.tenant_id = $1 and o.id = any($2)"
    ))
    .bind(tenant_id)
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?;
    assemble(conn, tenant_id, rows).await
}

/// A page of orders oldest first, after the keyset `(created_at, id)`.
pub async fn list(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    status: Option<OrderStatus>,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<Order>, sqlx::Error> {
    let (after_at, after_id) = after.unzip();
    let rows: Vec<OrderRow> = sqlx::query_as(&format!(
        "select {ORDER_COLUMNS}
          where o.tenant_id = $1
            and ($2::text is null or o.status = $2)
            and ($3::timestamptz is null or (o.created_at, o.id) > ($3, $4))
          order by o.created_at, o.id
          limit $5"
    ))
    .bind(tenant_id)
    .bind(status.map(OrderStatus::as_str))
    .bind(after_at)
    .bind(after_id)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    assemble(conn, tenant_id, rows).await
}

async fn assemble(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rows: Vec<OrderRow>,
) -> Result<Vec<Order>, sqlx::Error> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let lines: Vec<LineRow> = sqlx::query_as(
        "select order_id, id, sku_id, qty_ordered, qty_allocated, unit_price
           from order_lines where tenant_id = $1 and order_id = any($2)
          order by ordinal",
    )
    .bind(tenant_id)
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    // Grouped once (lines stay in ordinal order within each order): a pull
    // page of 1,000 orders has 16,000 lines, and scanning all of them for
    // every order was 16 million comparisons a page.
    let mut by_order: std::collections::HashMap<Uuid, Vec<Line>> =
        std::collections::HashMap::with_capacity(rows.len());
    for l in lines {
        by_order.entry(l.order_id).or_default().push(Line {
            id: l.id,
            sku_id: l.sku_id,
            qty_ordered: l.qty_ordered,
            qty_allocated: l.qty_allocated,
            unit_price: l.unit_price,
        });
    }
    rows.into_iter()
        .map(|r| {
            let mine = by_order.remove(&r.id).unwrap_or_default();
            document(r, mine)
        })
        .collect()
}

fn document(r: OrderRow, lines: Vec<Line>) -> Result<Order, sqlx::Error> {
    let status = OrderStatus::parse(&r.status).ok_or_else(|| {
        sqlx::Error::Decode(format!("unknown order status {:?}", r.status).into())
    })?;
    Ok(Order {
        total: total(&lines),
        lines,
        id: r.id,
        customer_id: r.customer_id,
        customer_po: r.customer_po,
        ship_window_start: r.ship_window_start,
        ship_window_end: r.ship_window_end,
        notes: r.notes,
        status,
        version: r.version,
        invoice_id: r.invoice_id,
        updated_at: r.updated_at,
        updated_by: r.updated_by,
        updated_by_name: r.updated_by_name,
        created_at: r.created_at,
    })
}

/// Σ qty_ordered × unit_price. The engine refuses a line that would make it
/// overflow, so saturating here never hides a real total.
pub fn total(lines: &[Line]) -> i64 {
    lines.iter().fold(0i64, |sum, l| {
        sum.saturating_add(l.qty_ordered.saturating_mul(l.unit_price))
    })
}
