//! An order's lines: add (priced by the server at that moment, and kept),
//! change the ordered quantity, remove (releasing what it holds), with the
//! credit check on the order's total. Compare-and-swap on `base_version`
//! and the lock order of `orders.rs`.

use holdfast_protocol::event::EventType;
use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::model::{AddLine, ChangeLine, OrderStatus};
use holdfast_protocol::problem::{Problem, ProblemCode};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use super::allocation::{release_position_in_tx, LineRef};
use super::orders::{author, bump_announce_in_tx, bump_in_tx, load, lock_at_base};
use super::Done;
use crate::auth::Caller;
use crate::db::order_history::{announce_in_tx, OrderEvent};
use crate::db::outbox::{enqueue_in_tx, Aggregate};
use crate::error::Error;

pub(crate) async fn add_line(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    id: Uuid,
    body: AddLine,
) -> Result<Done, Error> {
    let t = caller.tenant_id;
    let locked = lock_at_base(conn, t, id, body.base_version, &[OrderStatus::Draft]).await?;
    let unit_price = price_for_new_line(conn, t, locked.customer_id, body.sku_id).await?;
    check_total(conn, t, id, None, body.qty_ordered, unit_price).await?;
    let inserted = sqlx::query(
        "insert into order_lines (tenant_id, id, order_id, sku_id, qty_ordered, unit_price)
         values ($1, $2, $3, $4, $5, $6) on conflict (tenant_id, id) do nothing",
    )
    .bind(t)
    .bind(body.id)
    .bind(id)
    .bind(body.sku_id)
    .bind(body.qty_ordered)
    .bind(unit_price)
    .execute(&mut *conn)
    .await?;
    if inserted.rows_affected() == 0 {
        return Err(Error::validation(
            "id",
            "a line with this id already exists; mint a new id",
        ));
    }
    let facts = json!({"change": "line_added", "line_id": body.id, "sku_id": body.sku_id,
                       "qty_ordered": body.qty_ordered, "unit_price": unit_price});
    bump_announce_in_tx(
        conn,
        caller,
        key,
        id,
        body.base_version,
        EventType::OrderUpdated,
        facts,
    )
    .await?;
    Done::created(load(conn, t, id).await?)
}

/// The price a new line of this customer's order gets for this SKU: the
/// customer's price list if it lists the SKU, else the SKU's wholesale price
/// (API.md v1.1). A discontinued SKU takes no new lines (422 `invalid_state`).
async fn price_for_new_line(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    customer_id: Uuid,
    sku_id: Uuid,
) -> Result<i64, Error> {
    let row: Option<(bool, i64)> = sqlx::query_as(
        "select s.active, coalesce(e.price, s.wholesale_price)
           from skus s
           left join customers c on c.tenant_id = s.tenant_id and c.id = $3
           left join price_list_entries e
                  on e.tenant_id = s.tenant_id and e.price_list_id = c.price_list_id
                 and e.sku_id = s.id
          where s.tenant_id = $1 and s.id = $2",
    )
    .bind(tenant_id)
    .bind(sku_id)
    .bind(customer_id)
    .fetch_optional(conn)
    .await?;
    match row {
        None => Err(Error::not_found("SKU")),
        Some((false, _)) => Err(Problem::new(
            ProblemCode::InvalidState,
            "this SKU is discontinued and takes no new lines",
        )
        .with("sku_active", false)
        .into()),
        Some((true, price)) => Ok(price),
    }
}

/// Refuses a line quantity that would make the order's total (Σ qty ×
/// unit_price) too large for an invoice to hold. `line` is the line being
/// changed (left out of the sum), or `None` for a new one.
async fn check_total(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    order_id: Uuid,
    line: Option<Uuid>,
    qty: i64,
    unit_price: i64,
) -> Result<(), Error> {
    let fits: bool = sqlx::query_scalar(
        "select coalesce(sum(qty_ordered::numeric * unit_price), 0) + $4::numeric * $5
                <= 9223372036854775807
           from order_lines
          where tenant_id = $1 and order_id = $2 and ($3::uuid is null or id <> $3)",
    )
    .bind(tenant_id)
    .bind(order_id)
    .bind(line)
    .bind(qty)
    .bind(unit_price)
    .fetch_one(conn)
    .await?;
    if fits {
        Ok(())
    } else {
        Err(Error::validation(
            "qty_ordered",
            "would make the order's total too large to invoice",
        ))
    }
}

/// A line of a locked order: (sku_id, qty_ordered, qty_allocated).
pub(crate) async fn line(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    order_id: Uuid,
    line_id: Uuid,
) -> Result<(Uuid, i64, i64), Error> {
    let row: Option<(Uuid, i64, i64)> = sqlx::query_as(
        "select sku_id, qty_ordered, qty_allocated from order_lines
          where tenant_id = $1 and order_id = $2 and id = $3",
    )
    .bind(tenant_id)
    .bind(order_id)
    .bind(line_id)
    .fetch_optional(conn)
    .await?;
    row.ok_or_else(|| Error::not_found("line on this order"))
}

pub(crate) fn over_allocation(detail: String, qty_ordered: i64, qty_allocated: i64) -> Error {
    Problem::new(ProblemCode::OverAllocation, detail)
        .with("qty_ordered", qty_ordered)
        .with("qty_allocated", qty_allocated)
        .into()
}

pub(crate) async fn change_line(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    id: Uuid,
    line_id: Uuid,
    body: ChangeLine,
) -> Result<Done, Error> {
    let t = caller.tenant_id;
    lock_at_base(conn, t, id, body.base_version, &[OrderStatus::Draft]).await?;
    let (sku_id, _, qty_allocated) = line(conn, t, id, line_id).await?;
    if body.qty_ordered < qty_allocated {
        return Err(over_allocation(
            format!("{qty_allocated} are allocated; release some before ordering fewer"),
            body.qty_ordered,
            qty_allocated,
        ));
    }
    let unit_price: i64 =
        sqlx::query_scalar("select unit_price from order_lines where tenant_id = $1 and id = $2")
            .bind(t)
            .bind(line_id)
            .fetch_one(&mut *conn)
            .await?;
    check_total(conn, t, id, Some(line_id), body.qty_ordered, unit_price).await?;
    sqlx::query("update order_lines set qty_ordered = $3 where tenant_id = $1 and id = $2")
        .bind(t)
        .bind(line_id)
        .bind(body.qty_ordered)
        .execute(&mut *conn)
        .await?;
    let facts = json!({"change": "line_changed", "line_id": line_id, "sku_id": sku_id, "qty_ordered": body.qty_ordered});
    bump_announce_in_tx(
        conn,
        caller,
        key,
        id,
        body.base_version,
        EventType::OrderUpdated,
        facts,
    )
    .await?;
    Done::ok(load(conn, t, id).await?)
}

pub(crate) async fn remove_line(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    id: Uuid,
    line_id: Uuid,
    base_version: i64,
) -> Result<Done, Error> {
    let t = caller.tenant_id;
    lock_at_base(conn, t, id, base_version, &[OrderStatus::Draft]).await?;
    let (sku_id, _, qty_allocated) = line(conn, t, id, line_id).await?;
    let events = if qty_allocated > 0 { 2 } else { 1 };
    let (version, seq) = bump_in_tx(conn, caller, id, base_version, events).await?;
    let mut seq = seq;
    let facts = json!({"change": "line_removed", "line_id": line_id, "sku_id": sku_id});
    let mut entry_facts = None;
    let mut earlier_events = Vec::new();
    if qty_allocated > 0 {
        let line = LineRef {
            order_id: id,
            line_id,
            sku_id,
        };
        let (ats_after, sku_event) =
            release_position_in_tx(conn, caller, key, "remove_line", line, qty_allocated).await?;
        let released = json!({"line_id": line_id, "sku_id": sku_id, "qty": qty_allocated, "ats_after": ats_after});
        let released_event = enqueue_in_tx(
            conn,
            t,
            EventType::OrderLineReleased,
            Aggregate::Order(id),
            seq,
            version,
            released,
        )
        .await?;
        earlier_events.extend([sku_event, released_event]);
        seq += 1;
        // One version, two order events: the history entry tells both, the
        // removal and what its release gave back.
        let mut both = facts.clone();
        both["qty_released"] = json!(qty_allocated);
        both["ats_after"] = json!(ats_after);
        entry_facts = Some(both);
    }
    sqlx::query("delete from order_lines where tenant_id = $1 and id = $2")
        .bind(t)
        .bind(line_id)
        .execute(&mut *conn)
        .await?;
    let event = OrderEvent {
        order_id: id,
        event_type: EventType::OrderUpdated,
        sequence: seq,
        version,
        facts,
    };
    announce_in_tx(
        conn,
        t,
        author(caller, key),
        event,
        entry_facts,
        &earlier_events,
    )
    .await?;
    Done::ok(load(conn, t, id).await?)
}
