//! An order's lines: add (priced by the server at that moment, and kept),
//! change the ordered quantity, remove (releasing what it holds), with the
//! credit check on the order's total. Compare-and-swap on `base_version`
//! and the lock order of `orders.rs`.

use holdfast_protocol::event::EventType;
use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::model::{AddLine, ChangeLine, Line, OrderStatus};
use holdfast_protocol::problem::{Problem, ProblemCode};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use super::allocation::{release_position_in_tx, LineRef};
use super::edit::{bump_announce_query, bump_announce_sql, lock_for_edit, Held};
use super::orders::{author, bump_in_tx, load, lock_at_base};
use super::Done;
use crate::auth::Caller;
use crate::db::order_history::{announce_in_tx, OrderEvent};
use crate::db::outbox::{enqueue_in_tx, Aggregate};
use crate::error::Error;

/// Adds a line in two round trips: `order_for_edit` locks the order and
/// reads its lines and the SKU's price for this customer, every rejection
/// is decided in memory, then one statement inserts the line and bumps and
/// announces the order (nothing at all if the line's id is taken). The
/// answer is the document as read plus the new line, which the order's lock
/// makes exact; the statement's version and timestamp are checked against
/// it.
pub(crate) async fn add_line(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    id: Uuid,
    body: AddLine,
    held: &mut Held,
) -> Result<Done, Error> {
    const ADD_AND_ANNOUNCE: &str = bump_announce_sql!(
        "line as (
             insert into order_lines (tenant_id, id, order_id, sku_id, qty_ordered, unit_price)
             values ($1, $9, $2, $10, $11, $12) on conflict (tenant_id, id) do nothing
             returning id
         ),",
        "and exists (select from line)"
    );
    let t = caller.tenant_id;
    let mut edit = lock_for_edit(conn, caller, id, Some(body.sku_id), held)
        .await?
        .ok_or_else(|| Error::not_found("order"))?
        .at_base(conn, t, id, body.base_version, &[OrderStatus::Draft])
        .await?;
    let unit_price = match edit.sku {
        None => return Err(Error::not_found("SKU")),
        Some((false, _)) => {
            return Err(Problem::new(
                ProblemCode::InvalidState,
                "this SKU is discontinued and takes no new lines",
            )
            .with("sku_active", false)
            .into())
        }
        Some((true, price)) => price,
    };
    check_total(&edit.lines, None, body.qty_ordered, unit_price)?;
    let facts = json!({"change": "line_added", "line_id": body.id, "sku_id": body.sku_id,
                       "qty_ordered": body.qty_ordered, "unit_price": unit_price});
    let bumped = bump_announce_query(
        ADD_AND_ANNOUNCE,
        caller,
        key,
        id,
        body.base_version,
        EventType::OrderUpdated,
        facts,
    )
    .bind(body.id)
    .bind(body.sku_id)
    .bind(body.qty_ordered)
    .bind(unit_price)
    .fetch_optional(&mut *conn)
    .await?;
    // The order is locked at the version we checked, so no row means the
    // insert found the line's id taken (in any order of the tenant), and
    // nothing was written.
    let Some(bumped) = bumped else {
        return Err(line_id_taken(conn, t, id, body.id).await);
    };
    edit.lines.push(Line {
        id: body.id,
        sku_id: body.sku_id,
        qty_ordered: body.qty_ordered,
        qty_allocated: 0,
        unit_price,
    });
    let order = edit.written(caller, id, bumped)?;
    held.keep(id, edit);
    Done::created(order)
}

/// Why adding line `line` to order `id` wrote nothing: its id is taken, a
/// rejection; anything else would mean the order moved under its own lock.
async fn line_id_taken(conn: &mut PgConnection, tenant_id: Uuid, id: Uuid, line: Uuid) -> Error {
    let taken = sqlx::query_scalar::<_, bool>(
        "select exists (select from order_lines where tenant_id = $1 and id = $2)",
    )
    .bind(tenant_id)
    .bind(line)
    .fetch_one(conn)
    .await;
    match taken {
        Ok(true) => Error::validation("id", "a line with this id already exists; mint a new id"),
        Ok(false) => Error::Internal(anyhow::anyhow!(
            "order {id} moved under its own lock: adding line {line} wrote nothing"
        )),
        Err(e) => e.into(),
    }
}

/// Refuses a line quantity that would make the order's total (Σ qty ×
/// unit_price over `lines`, with `changed` counted at `qty` instead, or a
/// new line of `qty` when `changed` is `None`) too large for an invoice to
/// hold.
fn check_total(
    lines: &[Line],
    changed: Option<Uuid>,
    qty: i64,
    unit_price: i64,
) -> Result<(), Error> {
    let total = lines
        .iter()
        .filter(|l| Some(l.id) != changed)
        .map(|l| (l.qty_ordered, l.unit_price))
        .chain([(qty, unit_price)])
        .try_fold(0i128, |sum, (q, p)| {
            sum.checked_add(i128::from(q) * i128::from(p))
        });
    if total.is_some_and(|total| total <= i128::from(i64::MAX)) {
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

/// Changes a line's ordered quantity in two round trips, as
/// [`add_line`] adds one.
pub(crate) async fn change_line(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    id: Uuid,
    line_id: Uuid,
    body: ChangeLine,
    held: &mut Held,
) -> Result<Done, Error> {
    const CHANGE_AND_ANNOUNCE: &str = bump_announce_sql!(
        "line as (
             update order_lines set qty_ordered = $9
              where tenant_id = $1 and id = $10 and order_id = $2
             returning id
         ),",
        "and exists (select from line)"
    );
    let t = caller.tenant_id;
    let mut edit = lock_for_edit(conn, caller, id, None, held)
        .await?
        .ok_or_else(|| Error::not_found("order"))?
        .at_base(conn, t, id, body.base_version, &[OrderStatus::Draft])
        .await?;
    let at = edit
        .lines
        .iter()
        .position(|l| l.id == line_id)
        .ok_or_else(|| Error::not_found("line on this order"))?;
    let Line {
        sku_id,
        qty_allocated,
        unit_price,
        ..
    } = edit.lines[at];
    if body.qty_ordered < qty_allocated {
        return Err(over_allocation(
            format!("{qty_allocated} are allocated; release some before ordering fewer"),
            body.qty_ordered,
            qty_allocated,
        ));
    }
    check_total(&edit.lines, Some(line_id), body.qty_ordered, unit_price)?;
    let facts = json!({"change": "line_changed", "line_id": line_id, "sku_id": sku_id, "qty_ordered": body.qty_ordered});
    let bumped = bump_announce_query(
        CHANGE_AND_ANNOUNCE,
        caller,
        key,
        id,
        body.base_version,
        EventType::OrderUpdated,
        facts,
    )
    .bind(body.qty_ordered)
    .bind(line_id)
    .fetch_optional(&mut *conn)
    .await?;
    // We hold the order's lock and read the line after it: zero rows is a bug.
    let bumped = bumped.ok_or_else(|| {
        Error::Internal(anyhow::anyhow!(
            "line {line_id} of order {id} moved under the order's lock"
        ))
    })?;
    edit.lines[at].qty_ordered = body.qty_ordered;
    let order = edit.written(caller, id, bumped)?;
    held.keep(id, edit);
    Done::ok(order)
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
