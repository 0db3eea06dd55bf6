//! Stock allocation against live ATS, and its release.
//!
//! The oversell guard is one conditional UPDATE: the ATS check sits in its
//! WHERE clause, so the check and the change are one atomic step on the
//! position row; zero rows means not enough stock, decided under the row lock
//! against the latest committed value. The CHECK constraint on sku_positions
//! backs it up: an oversell cannot be stored even by a bug.
//!
//! Every position change writes an allocation-ledger row carrying the
//! idempotency key under a unique constraint that outlives the key's
//! retention, so a retry arriving after its key was reaped still finds "this
//! already happened" and answers with the current order instead of doubling.

use holdfast_protocol::model::{AllocationResult, OrderStatus};
use holdfast_protocol::problem::{Problem, ProblemCode};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use super::orders::{bump_in_tx, line, load, lock_order, over_allocation, require_status};
use super::Done;
use crate::db::changes::{record_in_tx, DocKind};
use crate::db::outbox::{enqueue_in_tx, Aggregate};
use crate::error::ApiError;
use crate::http::Caller;

const ALLOCATABLE: &[OrderStatus] = &[OrderStatus::Draft, OrderStatus::Confirmed];

pub(crate) async fn allocate(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &str,
    order_id: Uuid,
    line_id: Uuid,
    qty: i64,
) -> Result<Done, ApiError> {
    let t = caller.tenant_id;
    let locked = lock_order(conn, t, order_id)
        .await?
        .ok_or_else(|| ApiError::not_found("order"))?;
    if let Some(done) = late_retry(conn, t, key, order_id, line_id).await? {
        return Ok(done);
    }
    require_status(&locked, ALLOCATABLE)?;
    let (sku_id, qty_ordered, qty_allocated) = line(conn, t, order_id, line_id).await?;
    if qty_allocated + qty > qty_ordered {
        return Err(over_allocation(
            format!("the line ordered {qty_ordered} and has {qty_allocated} allocated; {qty} more would exceed it"),
            qty_ordered,
            qty_allocated,
        ));
    }
    // The hot row: as late as possible, so its lock is held only for the
    // few writes below and the commit.
    let moved = move_position_in_tx(conn, t, sku_id, qty).await?;
    let Some((ats_after, sku_version, sku_seq)) = moved else {
        let ats: i64 = sqlx::query_scalar(
            "select on_hand + on_order - allocated from sku_positions where tenant_id = $1 and sku_id = $2",
        )
        .bind(t)
        .bind(sku_id)
        .fetch_one(&mut *conn)
        .await?;
        return Err(Problem::new(
            ProblemCode::InsufficientAts,
            format!("only {ats} available to sell, {qty} requested"),
        )
        .with("ats_available", ats)
        .with("requested", qty)
        .into());
    };
    sqlx::query("update order_lines set qty_allocated = qty_allocated + $3 where tenant_id = $1 and id = $2")
        .bind(t)
        .bind(line_id)
        .bind(qty)
        .execute(&mut *conn)
        .await?;
    let (version, seq) = bump_in_tx(conn, caller, order_id, locked.version, 1).await?;
    ledger_in_tx(
        conn, caller, key, "allocate", order_id, line_id, sku_id, qty,
    )
    .await?;
    position_events_in_tx(conn, t, sku_id, ats_after, sku_version, sku_seq).await?;
    let facts = json!({"line_id": line_id, "sku_id": sku_id, "qty": qty, "ats_after": ats_after});
    enqueue_in_tx(
        conn,
        t,
        "order.line_allocated",
        Aggregate::Order(order_id),
        seq,
        version,
        facts,
    )
    .await?;
    let order = load(conn, t, order_id).await?;
    Done::ok(AllocationResult { order, ats_after })
}

pub(crate) async fn release(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &str,
    order_id: Uuid,
    line_id: Uuid,
    qty: i64,
) -> Result<Done, ApiError> {
    let t = caller.tenant_id;
    let locked = lock_order(conn, t, order_id)
        .await?
        .ok_or_else(|| ApiError::not_found("order"))?;
    if let Some(done) = late_retry(conn, t, key, order_id, line_id).await? {
        return Ok(done);
    }
    require_status(&locked, ALLOCATABLE)?;
    let (sku_id, qty_ordered, qty_allocated) = line(conn, t, order_id, line_id).await?;
    if qty > qty_allocated {
        return Err(over_allocation(
            format!("only {qty_allocated} allocated on this line; cannot release {qty}"),
            qty_ordered,
            qty_allocated,
        ));
    }
    let ats_after =
        release_position_in_tx(conn, caller, key, "release", order_id, line_id, sku_id, qty)
            .await?;
    sqlx::query("update order_lines set qty_allocated = qty_allocated - $3 where tenant_id = $1 and id = $2")
        .bind(t)
        .bind(line_id)
        .bind(qty)
        .execute(&mut *conn)
        .await?;
    let (version, seq) = bump_in_tx(conn, caller, order_id, locked.version, 1).await?;
    let facts = json!({"line_id": line_id, "sku_id": sku_id, "qty": qty, "ats_after": ats_after});
    enqueue_in_tx(
        conn,
        t,
        "order.line_released",
        Aggregate::Order(order_id),
        seq,
        version,
        facts,
    )
    .await?;
    let order = load(conn, t, order_id).await?;
    Done::ok(AllocationResult { order, ats_after })
}

/// A retry whose key was already reaped: the ledger still knows it happened.
async fn late_retry(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    key: &str,
    order_id: Uuid,
    line_id: Uuid,
) -> Result<Option<Done>, ApiError> {
    let sku_id: Option<Uuid> = sqlx::query_scalar(
        "select sku_id from allocation_ledger
          where tenant_id = $1 and idempotency_key = $2 and line_id = $3 and order_id = $4",
    )
    .bind(tenant_id)
    .bind(key)
    .bind(line_id)
    .bind(order_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(sku_id) = sku_id else {
        return Ok(None);
    };
    let ats_after: i64 = sqlx::query_scalar(
        "select on_hand + on_order - allocated from sku_positions where tenant_id = $1 and sku_id = $2",
    )
    .bind(tenant_id)
    .bind(sku_id)
    .fetch_one(&mut *conn)
    .await?;
    let order = load(conn, tenant_id, order_id).await?;
    let mut done = Done::ok(AllocationResult { order, ats_after })?;
    done.replayed = true;
    Ok(Some(done))
}

/// The atomic conditional update: allocates `qty` (negative releases) only if
/// ATS covers it. Returns (ats_after, position version, event sequence), or
/// None when the stock is not there.
#[cfg(not(feature = "broken-allocation"))]
async fn move_position_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    sku_id: Uuid,
    qty: i64,
) -> Result<Option<(i64, i64, i64)>, ApiError> {
    Ok(sqlx::query_as(
        "update sku_positions
            set allocated = allocated + $3, version = version + 1, event_seq = event_seq + 1, updated_at = now()
          where tenant_id = $1 and sku_id = $2 and on_hand + on_order - allocated >= $3
          returning on_hand + on_order - allocated, version, event_seq",
    )
    .bind(tenant_id)
    .bind(sku_id)
    .bind(qty)
    .fetch_optional(conn)
    .await?)
}

/// DELIBERATELY BROKEN, behind the test-only feature `broken-allocation`: the
/// ATS check moved out of the WHERE clause into application code, between a
/// plain read and a blind write. Two transactions read the same `allocated`,
/// both pass the check, and the later write overwrites the earlier one: the
/// position row still reads within on_hand + on_order (the CHECK constraint
/// never fires) while the ledger and the order lines hold more than there was.
/// It exists so the chaos suite can show it catches an oversell; the real
/// function above is the only one a normal build contains.
#[cfg(feature = "broken-allocation")]
async fn move_position_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    sku_id: Uuid,
    qty: i64,
) -> Result<Option<(i64, i64, i64)>, ApiError> {
    let read: Option<(i64, i64)> = sqlx::query_as(
        "select allocated, on_hand + on_order - allocated from sku_positions
          where tenant_id = $1 and sku_id = $2",
    )
    .bind(tenant_id)
    .bind(sku_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((allocated, ats)) = read else {
        return Ok(None);
    };
    if ats < qty {
        return Ok(None);
    }
    Ok(sqlx::query_as(
        "update sku_positions
            set allocated = $3, version = version + 1, event_seq = event_seq + 1, updated_at = now()
          where tenant_id = $1 and sku_id = $2
          returning on_hand + on_order - allocated, version, event_seq",
    )
    .bind(tenant_id)
    .bind(sku_id)
    .bind(allocated + qty)
    .fetch_optional(conn)
    .await?)
}

/// Gives back `qty` units of a line's allocation: position, ledger, SKU
/// events. Used by release, remove-line and cancel. Returns ATS after.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn release_position_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &str,
    reason: &str,
    order_id: Uuid,
    line_id: Uuid,
    sku_id: Uuid,
    qty: i64,
) -> Result<i64, ApiError> {
    let t = caller.tenant_id;
    let (ats_after, sku_version, sku_seq) = move_position_in_tx(conn, t, sku_id, -qty)
        .await?
        .ok_or_else(|| {
            ApiError::Internal(anyhow::anyhow!(
                "releasing {qty} of SKU {sku_id} was refused"
            ))
        })?;
    ledger_in_tx(conn, caller, key, reason, order_id, line_id, sku_id, -qty).await?;
    position_events_in_tx(conn, t, sku_id, ats_after, sku_version, sku_seq).await?;
    Ok(ats_after)
}

#[allow(clippy::too_many_arguments)]
async fn ledger_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &str,
    reason: &str,
    order_id: Uuid,
    line_id: Uuid,
    sku_id: Uuid,
    delta: i64,
) -> Result<(), ApiError> {
    sqlx::query(
        "insert into allocation_ledger (tenant_id, sku_id, order_id, line_id, delta, reason, idempotency_key, created_by)
         values ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(caller.tenant_id)
    .bind(sku_id)
    .bind(order_id)
    .bind(line_id)
    .bind(delta)
    .bind(reason)
    .bind(key)
    .bind(caller.user_id)
    .execute(conn)
    .await?;
    Ok(())
}

async fn position_events_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    sku_id: Uuid,
    ats_after: i64,
    version: i64,
    seq: i64,
) -> Result<(), ApiError> {
    record_in_tx(conn, tenant_id, DocKind::Sku, sku_id, version).await?;
    enqueue_in_tx(
        conn,
        tenant_id,
        "sku.ats_changed",
        Aggregate::Sku(sku_id),
        seq,
        version,
        json!({"ats": ats_after}),
    )
    .await?;
    Ok(())
}
