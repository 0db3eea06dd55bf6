//! Order documents: create, header patch, confirm (with the credit check),
//! cancel (the lines are in `lines.rs`, what an edit locks and reads in
//! `edit.rs`). Compare-and-swap on `base_version` for every edit.
//!
//! Lock order, the same everywhere so two mutations can never wait on each
//! other in a cycle: customer → order → SKU positions (several SKUs in
//! ascending id). The customer is locked `for no key update`, which does not
//! conflict with the key-share locks that foreign-key checks take, so an order
//! edit holding its order row never waits on a confirm holding the customer.

use chrono::{DateTime, NaiveDate, Utc};
use holdfast_protocol::event::EventType;
use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::model::{CreateOrder, Order, OrderStatus, PatchOrder};
use holdfast_protocol::problem::{Problem, ProblemCode};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use super::allocation::{release_position_in_tx, LineRef};
use super::edit::bump_announce_in_tx;
use super::Done;
use crate::auth::Caller;
use crate::db::changes::{record_in_tx, DocKind};
use crate::db::order_history::{self, announce_in_tx, OrderEvent};
use crate::error::Error;

/// The order row as locked for a decision: the whole header, so a handler
/// that knows what it changed can answer with the document without reading
/// it again (allocation does).
#[derive(Clone)]
pub(crate) struct Locked {
    pub version: i64,
    pub status: OrderStatus,
    pub customer_id: Uuid,
    pub customer_po: Option<String>,
    pub ship_window_start: Option<NaiveDate>,
    pub ship_window_end: Option<NaiveDate>,
    pub notes: Option<String>,
    pub invoice_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

/// Locks the order row for the rest of the transaction; `None` if it is not
/// in the caller's tenant.
pub(crate) async fn lock_order(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Option<Locked>, Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        version: i64,
        status: String,
        customer_id: Uuid,
        customer_po: Option<String>,
        ship_window_start: Option<NaiveDate>,
        ship_window_end: Option<NaiveDate>,
        notes: Option<String>,
        invoice_id: Option<Uuid>,
        created_at: DateTime<Utc>,
    }
    // No join here: under READ COMMITTED a row locked after a wait is
    // re-checked against its newest version, but a joined table's row is not
    // re-read, so a join on a column the other writer changed (updated_by)
    // would drop the row.
    let row: Option<Row> = sqlx::query_as(
        "select version, status, customer_id, customer_po, ship_window_start, ship_window_end,
                notes, invoice_id, created_at
           from orders where tenant_id = $1 and id = $2 for update",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let status = OrderStatus::parse(&row.status)
        .ok_or_else(|| anyhow::anyhow!("order {id} has status {:?}", row.status))?;
    Ok(Some(Locked {
        version: row.version,
        status,
        customer_id: row.customer_id,
        customer_po: row.customer_po,
        ship_window_start: row.ship_window_start,
        ship_window_end: row.ship_window_end,
        notes: row.notes,
        invoice_id: row.invoice_id,
        created_at: row.created_at,
    }))
}

/// Locks the order and checks the caller's base version and that the order is
/// in one of `allowed` states. Version first: a stale desk should see what
/// changed (the conflict carries the document), not a state it never saw.
pub(crate) async fn lock_at_base(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    base_version: i64,
    allowed: &[OrderStatus],
) -> Result<Locked, Error> {
    let locked = lock_order(conn, tenant_id, id)
        .await?
        .ok_or_else(|| Error::not_found("order"))?;
    if locked.version != base_version {
        return Err(conflict(conn, tenant_id, id, base_version).await?);
    }
    require_status(&locked, allowed)?;
    Ok(locked)
}

pub(crate) fn require_status(locked: &Locked, allowed: &[OrderStatus]) -> Result<(), Error> {
    if allowed.contains(&locked.status) {
        return Ok(());
    }
    Err(invalid_state(locked.status))
}

/// 422 invalid_state: not possible on an order in `status`.
pub(crate) fn invalid_state(status: OrderStatus) -> Error {
    Problem::new(
        ProblemCode::InvalidState,
        format!("not possible on a {} order", status.as_str()),
    )
    // API.md names this member `status`, which RFC 9457 already uses for
    // the HTTP status; the order's status travels as `order_status`.
    .with("order_status", status)
    .into()
}

/// 409 version_conflict with the whole current document.
pub(crate) async fn conflict(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    your_base: i64,
) -> Result<Error, Error> {
    let current = load(conn, tenant_id, id).await?;
    Ok(Problem::new(
        ProblemCode::VersionConflict,
        format!(
            "{} changed this order (now version {}) after version {your_base}",
            current.updated_by_name, current.version
        ),
    )
    .with("your_base_version", your_base)
    .with("current", &current)
    .into())
}

pub(crate) async fn load(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Order, Error> {
    crate::db::orders::load(conn, tenant_id, id)
        .await?
        .ok_or_else(|| {
            Error::Internal(anyhow::anyhow!(
                "order {id} vanished inside its own transaction"
            ))
        })
}

/// Adds 1 to the order's version (the compare-and-swap: `where version =
/// $base`), reserves `events` sequence numbers for its outbox events, and
/// records the change. Returns (new version, first reserved sequence).
pub(crate) async fn bump_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    id: Uuid,
    base_version: i64,
    events: i64,
) -> Result<(i64, i64), Error> {
    let row: Option<(i64, i64)> = sqlx::query_as(
        "update orders set version = version + 1, event_seq = event_seq + $4,
                updated_at = now(), updated_by = $5
          where tenant_id = $1 and id = $2 and version = $3
          returning version, event_seq - $4 + 1",
    )
    .bind(caller.tenant_id)
    .bind(id)
    .bind(base_version)
    .bind(events)
    .bind(caller.user_id)
    .fetch_optional(&mut *conn)
    .await?;
    // We hold the row lock and checked the version: zero rows is a bug.
    let (version, first_seq) =
        row.ok_or_else(|| Error::Internal(anyhow::anyhow!("order {id} moved under its own lock")))?;
    record_in_tx(conn, caller.tenant_id, DocKind::Order, id, version).await?;
    Ok((version, first_seq))
}

/// A desk's act: its user and the key of the request that carried it.
pub(crate) fn author<'a>(caller: &Caller, key: &'a IdempotencyKey) -> order_history::Author<'a> {
    order_history::Author {
        user_id: Some(caller.user_id),
        idempotency_key: Some(key.as_str()),
    }
}

/// A customer a new or re-assigned order may name: it must exist in the
/// tenant (else 404) and be active (else 422 `invalid_state`). Orders already
/// on a deactivated customer keep working; only new ones are refused.
async fn require_open_customer(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<(), Error> {
    let active: Option<bool> =
        sqlx::query_scalar("select active from customers where tenant_id = $1 and id = $2")
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(conn)
            .await?;
    match active {
        None => Err(Error::not_found("customer")),
        Some(true) => Ok(()),
        Some(false) => Err(Problem::new(
            ProblemCode::InvalidState,
            "this customer is deactivated and takes no new orders",
        )
        .with("customer_active", false)
        .into()),
    }
}

pub(crate) async fn create(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    body: CreateOrder,
) -> Result<Done, Error> {
    let t = caller.tenant_id;
    require_open_customer(conn, t, body.customer_id).await?;
    let inserted = sqlx::query(
        "insert into orders (tenant_id, id, customer_id, customer_po, ship_window_start, ship_window_end,
                             notes, event_seq, created_by, updated_by)
         values ($1, $2, $3, $4, $5, $6, $7, 1, $8, $8)
         on conflict (tenant_id, id) do nothing",
    )
    .bind(t)
    .bind(body.id)
    .bind(body.customer_id)
    .bind(&body.customer_po)
    .bind(body.ship_window_start)
    .bind(body.ship_window_end)
    .bind(&body.notes)
    .bind(caller.user_id)
    .execute(&mut *conn)
    .await?;
    if inserted.rows_affected() == 0 {
        // The id exists under another key: a late retry or a bug. Never a
        // second order, never an overwrite.
        return Err(conflict(conn, t, body.id, 0).await?);
    }
    record_in_tx(conn, t, DocKind::Order, body.id, 1).await?;
    let event = OrderEvent {
        order_id: body.id,
        event_type: EventType::OrderCreated,
        sequence: 1,
        version: 1,
        facts: json!({"customer_id": body.customer_id}),
    };
    announce_in_tx(conn, t, author(caller, key), event, None, &[]).await?;
    Done::created(load(conn, t, body.id).await?)
}

pub(crate) async fn patch(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    id: Uuid,
    body: PatchOrder,
) -> Result<Done, Error> {
    let t = caller.tenant_id;
    let locked = lock_at_base(conn, t, id, body.base_version, &[OrderStatus::Draft]).await?;
    let set = body.set;
    if let Some(customer_id) = set.customer_id.filter(|c| *c != locked.customer_id) {
        require_open_customer(conn, t, customer_id).await?;
    }
    let start = set.ship_window_start.unwrap_or(locked.ship_window_start);
    let end = set.ship_window_end.unwrap_or(locked.ship_window_end);
    if let (Some(start), Some(end)) = (start, end) {
        if end < start {
            return Err(Error::validation(
                "set.ship_window_end",
                "would be before ship_window_start",
            ));
        }
    }
    let mut changed = Vec::new();
    for (name, present) in [
        ("customer_id", set.customer_id.is_some()),
        ("customer_po", set.customer_po.is_some()),
        ("ship_window_start", set.ship_window_start.is_some()),
        ("ship_window_end", set.ship_window_end.is_some()),
        ("notes", set.notes.is_some()),
    ] {
        if present {
            changed.push(name);
        }
    }
    sqlx::query(
        "update orders set
            customer_id = coalesce($3, customer_id),
            customer_po = case when $4 then $5 else customer_po end,
            ship_window_start = case when $6 then $7 else ship_window_start end,
            ship_window_end = case when $8 then $9 else ship_window_end end,
            notes = case when $10 then $11 else notes end
          where tenant_id = $1 and id = $2",
    )
    .bind(t)
    .bind(id)
    .bind(set.customer_id)
    .bind(set.customer_po.is_some())
    .bind(set.customer_po.flatten())
    .bind(set.ship_window_start.is_some())
    .bind(set.ship_window_start.flatten())
    .bind(set.ship_window_end.is_some())
    .bind(set.ship_window_end.flatten())
    .bind(set.notes.is_some())
    .bind(set.notes.flatten())
    .execute(&mut *conn)
    .await?;
    bump_announce_in_tx(
        conn,
        caller,
        key,
        id,
        body.base_version,
        EventType::OrderUpdated,
        json!({"changed": changed}),
    )
    .await?;
    Done::ok(load(conn, t, id).await?)
}

/// Confirms a draft: the credit check, then the pro-forma invoice.
///
/// The credit check reads every open invoice of the customer, a decision no
/// single conditional UPDATE can make. We serialize confirms per customer by
/// locking the customer row first (the documented lock order), rather than
/// SERIALIZABLE with retries: contention is one customer's confirms, the lock
/// costs one statement, and no retry loop can fail a desk's request.
pub(crate) async fn confirm(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    id: Uuid,
    base_version: i64,
) -> Result<Done, Error> {
    let t = caller.tenant_id;
    let customer_id: Option<Uuid> =
        sqlx::query_scalar("select customer_id from orders where tenant_id = $1 and id = $2")
            .bind(t)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
    let customer_id = customer_id.ok_or_else(|| Error::not_found("order"))?;
    let credit_limit: Option<i64> = sqlx::query_scalar(
        "select credit_limit from customers where tenant_id = $1 and id = $2 for no key update",
    )
    .bind(t)
    .bind(customer_id)
    .fetch_one(&mut *conn)
    .await?;
    let locked = lock_at_base(conn, t, id, base_version, &[OrderStatus::Draft]).await?;
    if locked.customer_id != customer_id {
        // The customer changed between our read and the lock; that change
        // bumped the version, which lock_at_base would have caught. Defensive.
        return Err(conflict(conn, t, id, base_version).await?);
    }
    // In numeric: huge quantities must not overflow bigint (a 500). The open
    // amount saturates (it only has to exceed a limit); an order total that
    // no invoice can hold is null here and refused below.
    let (open_amount, order_amount): (i64, Option<i64>) = sqlx::query_as(
        "select
            (select least(coalesce(sum(amount), 0), 9223372036854775807)::bigint from invoices
              where tenant_id = $1 and customer_id = $2 and status = 'awaiting_payment'),
            (select case when total <= 9223372036854775807 then total::bigint end
               from (select coalesce(sum(l.qty_ordered::numeric * l.unit_price), 0) as total
                       from order_lines l
                      where l.tenant_id = $1 and l.order_id = $3) lines)",
    )
    .bind(t)
    .bind(customer_id)
    .bind(id)
    .fetch_one(&mut *conn)
    .await?;
    let order_amount = order_amount.ok_or_else(|| {
        Error::validation(
            "lines",
            "the order's total (quantities × unit prices) is too large to invoice",
        )
    })?;
    if let Some(limit) = credit_limit {
        if open_amount
            .checked_add(order_amount)
            .is_none_or(|sum| sum > limit)
        {
            return Err(Problem::new(
                ProblemCode::CreditLimitExceeded,
                format!("open invoices {open_amount} + this order {order_amount} exceed the limit {limit}"),
            )
            .with("credit_limit", limit)
            .with("open_amount", open_amount)
            .with("order_amount", order_amount)
            .into());
        }
    }
    let invoice_id = Uuid::now_v7();
    sqlx::query(
        "insert into invoices (tenant_id, id, order_id, customer_id, amount) values ($1, $2, $3, $4, $5)",
    )
    .bind(t)
    .bind(invoice_id)
    .bind(id)
    .bind(customer_id)
    .bind(order_amount)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "update orders set status = 'confirmed', invoice_id = $3 where tenant_id = $1 and id = $2",
    )
    .bind(t)
    .bind(id)
    .bind(invoice_id)
    .execute(&mut *conn)
    .await?;
    record_in_tx(conn, t, DocKind::Invoice, invoice_id, 1).await?;
    let facts =
        json!({"invoice_id": invoice_id, "amount": order_amount, "customer_id": customer_id});
    bump_announce_in_tx(
        conn,
        caller,
        key,
        id,
        base_version,
        EventType::OrderConfirmed,
        facts,
    )
    .await?;
    Done::ok(load(conn, t, id).await?)
}

/// Cancels a draft or confirmed order, releasing every allocation.
pub(crate) async fn cancel(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    id: Uuid,
    base_version: i64,
) -> Result<Done, Error> {
    let t = caller.tenant_id;
    lock_at_base(
        conn,
        t,
        id,
        base_version,
        &[OrderStatus::Draft, OrderStatus::Confirmed],
    )
    .await?;
    // Ascending SKU id: two cancels sharing SKUs lock them in the same order.
    let allocated: Vec<(Uuid, Uuid, i64)> = sqlx::query_as(
        "select id, sku_id, qty_allocated from order_lines
          where tenant_id = $1 and order_id = $2 and qty_allocated > 0
          order by sku_id, id",
    )
    .bind(t)
    .bind(id)
    .fetch_all(&mut *conn)
    .await?;
    let (version, seq) = bump_in_tx(conn, caller, id, base_version, 1).await?;
    let mut released = Vec::new();
    let mut sku_events = Vec::new();
    for (line_id, sku_id, qty) in allocated {
        let line = LineRef {
            order_id: id,
            line_id,
            sku_id,
        };
        let (ats_after, sku_event) =
            release_position_in_tx(conn, caller, key, "cancel", line, qty).await?;
        sku_events.push(sku_event);
        released.push(
            json!({"line_id": line_id, "sku_id": sku_id, "qty": qty, "ats_after": ats_after}),
        );
    }
    sqlx::query(
        "update order_lines set qty_allocated = 0 where tenant_id = $1 and order_id = $2 and qty_allocated > 0",
    )
    .bind(t)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    sqlx::query("update orders set status = 'cancelled' where tenant_id = $1 and id = $2")
        .bind(t)
        .bind(id)
        .execute(&mut *conn)
        .await?;
    let event = OrderEvent {
        order_id: id,
        event_type: EventType::OrderCancelled,
        sequence: seq,
        version,
        facts: json!({"released": released}),
    };
    announce_in_tx(conn, t, author(caller, key), event, None, &sku_events).await?;
    Done::ok(load(conn, t, id).await?)
}
