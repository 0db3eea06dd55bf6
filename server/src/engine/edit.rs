//! An order locked for an edit that answers with the document it writes:
//! what a line edit or an allocation reads in one round trip after the lock
//! ([`ForEdit`]), the orders a batch push's straight chunk keeps locked and
//! known ([`Held`]), and the one statement that bumps an order's version and
//! announces the change ([`bump_announce_sql`]).

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, Utc};
use holdfast_protocol::event::EventType;
use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::model::{Line, Order, OrderStatus};
use serde_json::{json, Value};
use sqlx::PgConnection;
use uuid::Uuid;

use super::orders::{conflict, require_status, Locked};
use crate::auth::Caller;
use crate::error::Error;

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
    /// [`lock_at_base`](super::orders::lock_at_base) does.
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

/// [`bump_in_tx`](super::orders::bump_in_tx) and the one outbox event
/// announcing the change, as one statement: the version's compare-and-swap, the order's feed row, the
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
