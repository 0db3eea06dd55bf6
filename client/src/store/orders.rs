//! `orders` and `order_lines`: the mirror of the server's order documents,
//! exactly as the server last answered them (push results and pulls). Pending
//! acts are never written here; the optimistic view applies them on top.

use chrono::{DateTime, NaiveDate, Utc};
use holdfast_protocol::model::{Line, Order, OrderStatus};
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, OptionalExtension, Transaction};
use uuid::Uuid;

use super::{Migration, StoreError, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[
    (
        1,
        "create table orders (
        id                text primary key,
        customer_id       text not null,
        customer_po       text,
        ship_window_start text,
        ship_window_end   text,
        notes             text,
        status            text not null,
        -- The server's version: the mirror only ever moves forward.
        version           integer not null,
        invoice_id        text,
        updated_at        text not null,
        updated_by        text not null,
        updated_by_name   text not null,
        created_at        text not null
    );
    create index orders_created on orders (created_at, id);
    create table order_lines (
        order_id      text not null references orders (id) on delete cascade,
        id            text not null,
        -- The line's place in the server's document.
        position      integer not null,
        sku_id        text not null,
        qty_ordered   integer not null,
        qty_allocated integer not null,
        primary key (order_id, id)
    );
    create index order_lines_sku on order_lines (sku_id);",
    ),
    (
        2,
        "alter table order_lines add column unit_price integer not null default 0;",
    ),
    (
        8,
        // No query looks lines up by SKU, and keeping this index cost every
        // pulled line a random B-tree insert (160,000 of them in a first
        // pull of 10,000 orders).
        "drop index if exists order_lines_sku;",
    ),
];

/// `o`'s header as the `orders` columns `id` … `created_at`, in that order
/// (`?1` … `?13` of [`upsert`] and [`insert_new`]).
fn header_columns(o: &Order) -> [Value; 13] {
    [
        Value::Text(o.id.to_string()),
        Value::Text(o.customer_id.to_string()),
        o.customer_po.clone().into(),
        o.ship_window_start.map(|d| d.to_string()).into(),
        o.ship_window_end.map(|d| d.to_string()).into(),
        o.notes.clone().into(),
        Value::Text(o.status.as_str().to_owned()),
        Value::Integer(o.version),
        o.invoice_id.map(|i| i.to_string()).into(),
        Value::Text(o.updated_at.to_rfc3339()),
        Value::Text(o.updated_by.to_string()),
        Value::Text(o.updated_by_name.clone()),
        Value::Text(o.created_at.to_rfc3339()),
    ]
}

/// Stores `o` unless the mirror already holds a newer version (a replayed
/// answer can carry an old document). Returns whether it was stored.
pub fn upsert(tx: &Transaction<'_>, o: &Order) -> StoreResult<bool> {
    let stored: Option<i64> = tx
        .prepare_cached("select version from orders where id = ?1")?
        .query_row([o.id.to_string()], |r| r.get(0))
        .optional()?;
    if stored.is_some_and(|v| v > o.version) {
        return Ok(false);
    }
    tx.prepare_cached(
        "insert into orders (id, customer_id, customer_po, ship_window_start, ship_window_end,
                             notes, status, version, invoice_id, updated_at, updated_by,
                             updated_by_name, created_at)
         values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
         on conflict (id) do update set customer_id = excluded.customer_id,
                customer_po = excluded.customer_po, ship_window_start = excluded.ship_window_start,
                ship_window_end = excluded.ship_window_end, notes = excluded.notes,
                status = excluded.status, version = excluded.version,
                invoice_id = excluded.invoice_id, updated_at = excluded.updated_at,
                updated_by = excluded.updated_by, updated_by_name = excluded.updated_by_name,
                created_at = excluded.created_at",
    )?
    .execute(params_from_iter(header_columns(o)))?;
    let id = o.id.to_string();
    tx.prepare_cached("delete from order_lines where order_id = ?1")?
        .execute([&id])?;
    insert_lines(tx, &id, o)?;
    Ok(true)
}

/// Stores `o` if the mirror holds no version of it (a bulk first pull):
/// one insert for the order and one per line, nothing read or deleted first.
/// Returns false, having written nothing, if the order is already stored.
pub fn insert_new(tx: &Transaction<'_>, o: &Order) -> StoreResult<bool> {
    let id = o.id.to_string();
    let inserted = tx
        .prepare_cached(
            "insert into orders (id, customer_id, customer_po, ship_window_start, ship_window_end,
                                 notes, status, version, invoice_id, updated_at, updated_by,
                                 updated_by_name, created_at)
             values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
             on conflict (id) do nothing",
        )?
        .execute(params_from_iter(header_columns(o)))?;
    if inserted == 0 {
        return Ok(false);
    }
    insert_lines(tx, &id, o)?;
    Ok(true)
}

fn insert_lines(tx: &Transaction<'_>, id: &str, o: &Order) -> StoreResult<()> {
    let mut insert = tx.prepare_cached(
        "insert into order_lines (order_id, id, position, sku_id, qty_ordered, qty_allocated,
                                  unit_price)
         values (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for (position, line) in o.lines.iter().enumerate() {
        insert.execute(params![
            id,
            line.id.to_string(),
            position as i64,
            line.sku_id.to_string(),
            line.qty_ordered,
            line.qty_allocated,
            line.unit_price
        ])?;
    }
    Ok(())
}

pub fn delete(tx: &Transaction<'_>, id: Uuid) -> StoreResult<()> {
    tx.prepare_cached("delete from orders where id = ?1")?
        .execute([id.to_string()])?;
    Ok(())
}

const COLUMNS: &str = "id, customer_id, customer_po, ship_window_start, ship_window_end, notes,
    status, version, invoice_id, updated_at, updated_by, updated_by_name, created_at";

struct Raw {
    id: String,
    customer_id: String,
    customer_po: Option<String>,
    ship_window_start: Option<String>,
    ship_window_end: Option<String>,
    notes: Option<String>,
    status: String,
    version: i64,
    invoice_id: Option<String>,
    updated_at: String,
    updated_by: String,
    updated_by_name: String,
    created_at: String,
}

fn raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<Raw> {
    Ok(Raw {
        id: r.get(0)?,
        customer_id: r.get(1)?,
        customer_po: r.get(2)?,
        ship_window_start: r.get(3)?,
        ship_window_end: r.get(4)?,
        notes: r.get(5)?,
        status: r.get(6)?,
        version: r.get(7)?,
        invoice_id: r.get(8)?,
        updated_at: r.get(9)?,
        updated_by: r.get(10)?,
        updated_by_name: r.get(11)?,
        created_at: r.get(12)?,
    })
}

fn uuid(s: &str, what: &str) -> StoreResult<Uuid> {
    s.parse()
        .map_err(|_| StoreError::Corrupt(format!("{what} {s:?} is not a UUID")))
}

fn date(s: Option<String>) -> StoreResult<Option<NaiveDate>> {
    s.map(|d| {
        d.parse()
            .map_err(|_| StoreError::Corrupt(format!("date {d:?}")))
    })
    .transpose()
}

fn time(s: &str) -> StoreResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.to_utc())
        .map_err(|_| StoreError::Corrupt(format!("time {s:?}")))
}

fn lines(tx: &Transaction<'_>, order_id: &str) -> StoreResult<Vec<Line>> {
    let mut stmt = tx.prepare_cached(
        "select id, sku_id, qty_ordered, qty_allocated, unit_price from order_lines
          where order_id = ?1 order by position",
    )?;
    let rows = stmt
        .query_map([order_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|(id, sku_id, qty_ordered, qty_allocated, unit_price)| {
            Ok(Line {
                id: uuid(&id, "line id")?,
                sku_id: uuid(&sku_id, "SKU id")?,
                qty_ordered,
                qty_allocated,
                unit_price,
            })
        })
        .collect()
}

fn order(tx: &Transaction<'_>, r: Raw) -> StoreResult<Order> {
    let status = OrderStatus::parse(&r.status)
        .ok_or_else(|| StoreError::Corrupt(format!("order status {:?}", r.status)))?;
    let doc_lines = lines(tx, &r.id)?;
    Ok(Order {
        total: doc_lines.iter().fold(0i64, |sum, l| {
            sum.saturating_add(l.qty_ordered.saturating_mul(l.unit_price))
        }),
        id: uuid(&r.id, "order id")?,
        customer_id: uuid(&r.customer_id, "customer id")?,
        customer_po: r.customer_po,
        ship_window_start: date(r.ship_window_start)?,
        ship_window_end: date(r.ship_window_end)?,
        notes: r.notes,
        status,
        version: r.version,
        invoice_id: r.invoice_id.map(|i| uuid(&i, "invoice id")).transpose()?,
        lines: doc_lines,
        updated_at: time(&r.updated_at)?,
        updated_by: uuid(&r.updated_by, "user id")?,
        updated_by_name: r.updated_by_name,
        created_at: time(&r.created_at)?,
    })
}

pub fn get(tx: &Transaction<'_>, id: Uuid) -> StoreResult<Option<Order>> {
    let row = tx
        .query_row(
            &format!("select {COLUMNS} from orders where id = ?1"),
            [id.to_string()],
            raw,
        )
        .optional()?;
    row.map(|r| order(tx, r)).transpose()
}

/// Every mirrored order, oldest first.
pub fn list(tx: &Transaction<'_>) -> StoreResult<Vec<Order>> {
    let mut stmt = tx.prepare(&format!(
        "select {COLUMNS} from orders order by created_at, id"
    ))?;
    let rows = stmt.query_map([], raw)?.collect::<Result<Vec<_>, _>>()?;
    rows.into_iter().map(|r| order(tx, r)).collect()
}

/// What the desk's list needs of a mirrored order to filter, search and
/// place it, before it builds the row: no lines, nothing else.
#[derive(Debug, Clone)]
pub struct DeskHead {
    pub id: Uuid,
    pub updated_at: DateTime<Utc>,
    /// The customer's name as mirrored (None: the customer is not).
    pub customer_name: Option<String>,
    pub customer_po: Option<String>,
    pub notes: Option<String>,
}

/// Every mirrored order (in `status` when given) in the desk's order, newest
/// change first (ties by id), handed to `f` one at a time so the caller
/// holds none it does not keep.
pub fn each_desk_head(
    tx: &Transaction<'_>,
    status: Option<OrderStatus>,
    mut f: impl FnMut(DeskHead) -> StoreResult<()>,
) -> StoreResult<()> {
    // `updated_at` is stored as RFC 3339 in UTC (`+00:00`, 0/3/6/9 fraction
    // digits), whose text order is its time order.
    let mut stmt = tx.prepare_cached(
        "select o.id, o.updated_at, c.name, o.customer_po, o.notes
           from orders o left join customers c on c.id = o.customer_id
          where ?1 is null or o.status = ?1
          order by o.updated_at desc, o.id",
    )?;
    let mut rows = stmt.query([status.map(|s| s.as_str())])?;
    while let Some(r) = rows.next()? {
        let id: String = r.get(0)?;
        let updated_at: String = r.get(1)?;
        f(DeskHead {
            id: uuid(&id, "order id")?,
            updated_at: time(&updated_at)?,
            customer_name: r.get(2)?,
            customer_po: r.get(3)?,
            notes: r.get(4)?,
        })?;
    }
    Ok(())
}
