//! Order documents: create, header patch, confirm (with the credit check),
//! cancel (the lines are in `lines.rs`). Compare-and-swap on `base_version` for every edit.
//!
//! Lock order, the same everywhere so two mutations can never wait on each
//! other in a cycle: customer → order → SKU positions (several SKUs in
//! ascending id). The customer is locked `for no key update`, which does not
//! conflict with the key-share locks that foreign-key checks take, so an order
//! edit holding its order row never waits on a confirm holding the customer.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, Utc};
use holdfast_protocol::event::EventType;
use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::model::{CreateOrder, Line, Order, OrderStatus, PatchOrder};
use holdfast_protocol::problem::{Problem, ProblemCode};
use serde_json::{json, Value};
use sqlx::PgConnection;
use uuid::Uuid;

use super::allocation::{release_position_in_tx, LineRef};
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

/// An order locked for an edit that answers with the document it writes,
/// read in one round trip after the lock (`order_for_edit`, migration
/// 20261209000100, for line edits; `order_for_move`, 20261208100100, for
/// allocation): the header, the lines in document order, and what the
/// answer needs besides.
#[derive(Clone)]
pub(crate) struct ForEdit {
    pub header: Locked,
    pub lines: Vec<Line>,
    /// The transaction's timestamp: `updated_at` once the edit writes it.
    pub tx_time: DateTime<Utc>,
    pub user_name: String,
    /// A new line's SKU, when one was asked for and is in the tenant:
    /// whether it is active, and the price this order's customer pays.
    pub sku: Option<(bool, i64)>,
    /// Allocation: the SKU this key already moved on the line (a late
    /// retry whose key was reaped).
    pub late_sku: Option<Uuid>,
}

/// The rows both functions return: the order's columns on every row, one
/// row per line (none: one row with the line's columns null).
#[derive(sqlx::FromRow)]
pub(crate) struct ForEditRow {
    version: i64,
    status: String,
    customer_id: Uuid,
    customer_po: Option<String>,
    ship_window_start: Option<NaiveDate>,
    ship_window_end: Option<NaiveDate>,
    notes: Option<String>,
    invoice_id: Option<Uuid>,
    created_at: DateTime<Utc>,
    tx_time: DateTime<Utc>,
    user_name: Option<String>,
    sku_active: Option<bool>,
    sku_price: Option<i64>,
    late_sku: Option<Uuid>,
    line_id: Option<Uuid>,
    sku_id: Option<Uuid>,
    qty_ordered: Option<i64>,
    qty_allocated: Option<i64>,
    unit_price: Option<i64>,
}

impl ForEdit {
    /// `None` when there are no rows: the order is not in the tenant.
    pub(crate) fn from_rows(
        rows: Vec<ForEditRow>,
        caller: &Caller,
        id: Uuid,
    ) -> Result<Option<ForEdit>, Error> {
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let status = OrderStatus::parse(&first.status)
            .ok_or_else(|| anyhow::anyhow!("order {id} has status {:?}", first.status))?;
        let user_name = first
            .user_name
            .clone()
            .ok_or_else(|| anyhow::anyhow!("user {} is not in the tenant", caller.user_id))?;
        let header = Locked {
            version: first.version,
            status,
            customer_id: first.customer_id,
            customer_po: first.customer_po.clone(),
            ship_window_start: first.ship_window_start,
            ship_window_end: first.ship_window_end,
            notes: first.notes.clone(),
            invoice_id: first.invoice_id,
            created_at: first.created_at,
        };
        let (tx_time, late_sku) = (first.tx_time, first.late_sku);
        let sku = first.sku_active.zip(first.sku_price);
        let lines = rows
            .into_iter()
            .filter_map(|r| {
                Some(Line {
                    id: r.line_id?,
                    sku_id: r.sku_id?,
                    qty_ordered: r.qty_ordered?,
                    qty_allocated: r.qty_allocated?,
                    unit_price: r.unit_price?,
                })
            })
            .collect();
        Ok(Some(ForEdit {
            header,
            lines,
            tx_time,
            user_name,
            sku,
            late_sku,
        }))
    }

    /// Checks the caller's base version and the order's state, as
    /// [`lock_at_base`] does.
    pub(crate) async fn at_base(
        self,
        conn: &mut PgConnection,
        tenant_id: Uuid,
        id: Uuid,
        base_version: i64,
        allowed: &[OrderStatus],
    ) -> Result<ForEdit, Error> {
        if self.header.version != base_version {
            return Err(conflict(conn, tenant_id, id, base_version).await?);
        }
        require_status(&self.header, allowed)?;
        Ok(self)
    }

    /// The document once the edit is written: `self.lines` as the edit left
    /// them, the next version, stamped with this transaction's time and the
    /// caller.
    pub(crate) fn edited(&self, caller: &Caller, id: Uuid) -> Order {
        let header = &self.header;
        Order {
            id,
            customer_id: header.customer_id,
            customer_po: header.customer_po.clone(),
            ship_window_start: header.ship_window_start,
            ship_window_end: header.ship_window_end,
            notes: header.notes.clone(),
            status: header.status,
            version: header.version + 1,
            invoice_id: header.invoice_id,
            total: crate::db::orders::total(&self.lines),
            lines: self.lines.clone(),
            updated_at: self.tx_time,
            updated_by: caller.user_id,
            updated_by_name: self.user_name.clone(),
            created_at: header.created_at,
        }
    }

    /// The order as it stands once the edit [`ForEdit::edited`] described
    /// is written, for the next edit of the same transaction ([`Held`]).
    pub(crate) fn advance(&mut self) {
        self.header.version += 1;
        self.sku = None;
        self.late_sku = None;
    }

    /// [`ForEdit::edited`], checked against what the edit's statement wrote
    /// (its new version and `updated_at`): the answer is the stored row.
    /// `self` then stands for the order as written ([`ForEdit::advance`]).
    pub(crate) fn written(
        &mut self,
        caller: &Caller,
        id: Uuid,
        bumped: Bumped,
    ) -> Result<Order, Error> {
        let order = self.edited(caller, id);
        if bumped != (order.version, order.updated_at) {
            return Err(Error::Internal(anyhow::anyhow!(
                "order {id}: the edit wrote version {} at {}, not the answer's {} at {}",
                bumped.0,
                bumped.1,
                order.version,
                order.updated_at
            )));
        }
        self.advance();
        Ok(order)
    }
}

/// The orders a batch push's straight chunk has locked and edited, each as
/// its last edit left it. The transaction holds their row locks until it
/// commits, so nobody else can change them, and the chunk's next line edit
/// or allocation on the same order starts from here instead of reading it
/// again: one round trip fewer. Only the edits that keep an order exact
/// here (line adds and changes, allocation and release) use it; any other
/// mutation forgets it all first (`engine::run`). A REST call, and each item
/// of a chunk applied with savepoints, starts with an empty one: a rollback
/// to a savepoint would leave it ahead of the database.
#[derive(Default)]
pub(crate) struct Held(HashMap<Uuid, ForEdit>);

impl Held {
    /// The order as this transaction's last edit of it left it, if it was
    /// kept; taken out, so an edit that is refused leaves nothing behind
    /// (the next one reads the order again).
    pub(crate) fn take(&mut self, id: Uuid) -> Option<ForEdit> {
        self.0.remove(&id)
    }

    /// Keeps an order after an edit's write, as [`ForEdit::written`] (or
    /// allocation's checked move) left it.
    pub(crate) fn keep(&mut self, id: Uuid, edit: ForEdit) {
        self.0.insert(id, edit);
    }

    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

/// Locks the order for a line edit and reads what it decides on
/// ([`ForEdit`]); `sku` is a new line's SKU. An order in `held` is already
/// locked and known: only the SKU is read. `None`: no such order.
pub(crate) async fn lock_for_edit(
    conn: &mut PgConnection,
    caller: &Caller,
    id: Uuid,
    sku: Option<Uuid>,
    held: &mut Held,
) -> Result<Option<ForEdit>, Error> {
    if let Some(mut edit) = held.take(id) {
        if let Some(sku) = sku {
            edit.sku = price_for(conn, caller.tenant_id, edit.header.customer_id, sku).await?;
        }
        return Ok(Some(edit));
    }
    let rows: Vec<ForEditRow> =
        sqlx::query_as("select *, null::uuid as late_sku from order_for_edit($1, $2, $3, $4)")
            .bind(caller.tenant_id)
            .bind(id)
            .bind(caller.user_id)
            .bind(sku)
            .fetch_all(&mut *conn)
            .await?;
    ForEdit::from_rows(rows, caller, id)
}

/// Whether a SKU is active, and the price a customer pays for it (its price
/// list, else the SKU's wholesale price), as `order_for_edit` reads them;
/// `None` when the SKU is not in the tenant.
async fn price_for(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    customer_id: Uuid,
    sku_id: Uuid,
) -> Result<Option<(bool, i64)>, Error> {
    Ok(sqlx::query_as(
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
    .await?)
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

/// [`bump_in_tx`] and the one outbox event announcing the change, as one
/// statement: the version's compare-and-swap, the order's feed row, the
/// event (its body as `db::outbox::enqueue_in_tx` builds it: `facts`, then
/// tenant, order, sequence and version; jsonb keeps no key order, so the
/// stored value is the same) and the version's history entry (who, which
/// key, these facts, the event's id; `db::order_history`). It returns the
/// new version and `updated_at`.
///
/// `$before` adds data-modifying CTEs ahead of the bump (each ending in a
/// comma) and `$gate` a condition on the bump's WHERE clause, so an edit's
/// own write and its announcement are one round trip, and a write that
/// finds nothing to do (`$gate` false) leaves everything untouched: no row.
/// Parameters: $1 tenant, $2 order, $3 base version, $4 user, $5 event
/// type, $6 timestamp, $7 facts, $8 key; `$before` takes $9 on.
macro_rules! bump_announce_sql {
    ($before:literal, $gate:literal) => {
        concat!(
            "with ",
            $before,
            " ord as (
                 update orders set version = version + 1, event_seq = event_seq + 1,
                        updated_at = now(), updated_by = $4
                  where tenant_id = $1 and id = $2 and version = $3 ",
            $gate,
            " returning version, event_seq, updated_at
             ), feed as (
                 insert into changes (tenant_id, kind, doc_id, version)
                 select $1, 'order', $2, ord.version from ord
             ), events as (
                 insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
                 select $1, $5, 'order', $2, ord.event_seq,
                        jsonb_build_object('type', $5::text, 'timestamp', $6::text,
                            'data', $7::jsonb || jsonb_build_object('tenant_id', $1, 'order_id', $2,
                                                                    'sequence', ord.event_seq,
                                                                    'version', ord.version))
                   from ord
                 returning id
             ), entry as (
                 insert into order_history (tenant_id, order_id, version, created_by, event_type, facts,
                                            idempotency_key, outbox_ids)
                 select $1, $2, ord.version, $4, $5, $7, $8, array(select id from events)
                   from ord
             )
             select version, updated_at from ord"
        )
    };
}
pub(crate) use bump_announce_sql;

/// The new version and `updated_at` a [`bump_announce_sql`] statement wrote.
pub(crate) type Bumped = (i64, DateTime<Utc>);

/// A [`bump_announce_sql`] statement with its first eight parameters bound;
/// the caller binds those of its `$before` and runs it.
pub(crate) fn bump_announce_query<'q>(
    sql: &'q str,
    caller: &Caller,
    key: &'q IdempotencyKey,
    id: Uuid,
    base_version: i64,
    event_type: EventType,
    facts: Value,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, Bumped, sqlx::postgres::PgArguments> {
    let facts = match facts {
        Value::Object(_) => facts,
        _ => json!({}),
    };
    let timestamp = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    sqlx::query_as(sql)
        .bind(caller.tenant_id)
        .bind(id)
        .bind(base_version)
        .bind(caller.user_id)
        .bind(event_type.as_str())
        .bind(timestamp)
        .bind(facts)
        .bind(key.as_str())
}

/// The bump and announcement alone (an edit that wrote its change in a
/// statement of its own). Returns the new version.
pub(crate) async fn bump_announce_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    id: Uuid,
    base_version: i64,
    event_type: EventType,
    facts: Value,
) -> Result<i64, Error> {
    const SQL: &str = bump_announce_sql!("", "");
    let bumped = bump_announce_query(SQL, caller, key, id, base_version, event_type, facts)
        .fetch_optional(&mut *conn)
        .await?;
    // We hold the row lock and checked the version: zero rows is a bug.
    bumped
        .map(|(version, _)| version)
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("order {id} moved under its own lock")))
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
