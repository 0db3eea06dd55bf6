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

use chrono::{DateTime, Utc};
use holdfast_protocol::event::EventType;
use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::model::{AllocationResult, Line, Order, OrderStatus};
use holdfast_protocol::problem::{Problem, ProblemCode};
use sqlx::PgConnection;
use uuid::Uuid;

use super::edit::{ForEdit, ForEditRow, Held};
use super::lines::over_allocation;
use super::orders::{invalid_state, load};
use super::Done;
use crate::auth::Caller;
use crate::db::outbox::announce_ats_in_tx;
use crate::error::Error;

const ALLOCATABLE: &[OrderStatus] = &[OrderStatus::Draft, OrderStatus::Confirmed];

pub(crate) async fn allocate(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    order_id: Uuid,
    line_id: Uuid,
    qty: i64,
    held: &mut Held,
) -> Result<Done, Error> {
    let wanted = Wanted {
        order_id,
        line_id,
        qty,
        direction: Direction::Allocate,
    };
    move_line(conn, caller, key, wanted, held).await
}

pub(crate) async fn release(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    order_id: Uuid,
    line_id: Uuid,
    qty: i64,
    held: &mut Held,
) -> Result<Done, Error> {
    let wanted = Wanted {
        order_id,
        line_id,
        qty,
        direction: Direction::Release,
    };
    move_line(conn, caller, key, wanted, held).await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    Allocate,
    Release,
}

impl Direction {
    /// The ledger's reason and the order event's type.
    pub(super) fn names(self) -> (&'static str, EventType) {
        match self {
            Direction::Allocate => ("allocate", EventType::OrderLineAllocated),
            Direction::Release => ("release", EventType::OrderLineReleased),
        }
    }
}

/// What a request asks to move: `qty` on a line of an order, one way.
pub(super) struct Wanted {
    pub order_id: Uuid,
    pub line_id: Uuid,
    pub qty: i64,
    pub direction: Direction,
}

/// A move decided against the order as it stands: the line's index in the
/// document, its SKU, and the signed change to its allocation.
pub(super) struct Decided {
    pub at: usize,
    pub sku_id: Uuid,
    pub delta: i64,
}

/// Every refusal an allocation or a release can meet before it touches
/// stock: the order's state, the line, over-allocation. Pure: both paths
/// decide with it, the ordinary one on the order it has locked and read,
/// `known` on the document the server holds.
pub(super) fn decide(
    status: OrderStatus,
    lines: &[Line],
    wanted: &Wanted,
) -> Result<Decided, Error> {
    if !ALLOCATABLE.contains(&status) {
        return Err(invalid_state(status));
    }
    let at = lines
        .iter()
        .position(|l| l.id == wanted.line_id)
        .ok_or_else(|| Error::not_found("line on this order"))?;
    let Line {
        sku_id,
        qty_ordered,
        qty_allocated,
        ..
    } = lines[at];
    let qty = wanted.qty;
    let delta = match wanted.direction {
        Direction::Allocate => {
            // Compared as what is still open (qty_ordered ≥ qty_allocated ≥ 0
            // by the schema): `qty_allocated + qty` overflows for a qty
            // near i64::MAX (a panic in a debug build, a wrap in release).
            if qty > qty_ordered - qty_allocated {
                return Err(over_allocation(
                    format!("the line ordered {qty_ordered} and has {qty_allocated} allocated; {qty} more would exceed it"),
                    qty_ordered,
                    qty_allocated,
                ));
            }
            qty
        }
        Direction::Release => {
            if qty > qty_allocated {
                return Err(over_allocation(
                    format!("only {qty_allocated} allocated on this line; cannot release {qty}"),
                    qty_ordered,
                    qty_allocated,
                ));
            }
            -qty
        }
    };
    Ok(Decided { at, sku_id, delta })
}

/// Allocate or release `qty` on one line in two statements (the engine
/// adds the key's claim, which also binds the tenant):
///
/// 1. `order_for_move`: lock the order row, then read its header, its lines
///    and this key in the ledger (a late retry) after the lock, so no other
///    mutation can change them until we commit; then decide every rejection
///    (status, line, over-allocation) in memory;
/// 2. `allocation_move` (migration 20261210000100): the position update —
///    the ATS check in its WHERE clause — every write that depends on it,
///    and the answer stored on the key row, in one statement.
///
/// The answer is built before 2 from what 1 read (the order is locked, so
/// its document after the move is known but for ATS after and the exact
/// form of its timestamp, which Postgres splices into the stored bytes; see
/// [`Answer`]), and 2's RETURNING is checked against it. The SKU row, the
/// hot one, is locked from statement 2 to the commit, so only the commit
/// waits behind it. A shortfall reads the ATS once more, outside any write,
/// and the engine stores that rejection.
async fn move_line(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    wanted: Wanted,
    held: &mut Held,
) -> Result<Done, Error> {
    let Wanted {
        order_id,
        line_id,
        qty,
        direction,
    } = wanted;
    let t = caller.tenant_id;
    let mut locked = lock_for_move(conn, caller, key, order_id, line_id, held)
        .await?
        .ok_or_else(|| Error::not_found("order"))?;
    if let Some(sku_id) = locked.late_sku {
        return late_retry(conn, t, sku_id, order_id).await;
    }
    let Decided { at, sku_id, delta } = decide(locked.header.status, &locked.lines, &wanted)?;
    let qty_allocated = locked.lines[at].qty_allocated + delta;
    // The answer, known now but for ATS after (the order is locked, so its
    // lines, version and timestamp after the move are ours to say), goes to
    // the key row in the move itself.
    locked.lines[at].qty_allocated = qty_allocated;
    let order = locked.edited(caller, order_id);
    let answer = Answer::new(&order)?;
    let planned = Planned {
        direction,
        line: LineRef {
            order_id,
            line_id,
            sku_id,
        },
        delta,
        order_version: locked.header.version,
    };
    let moved = folded_move(conn, caller, key, planned, &answer).await?;
    let Some(moved) = moved else {
        if direction == Direction::Release {
            // A release cannot want stock: the check cannot fail.
            return Err(Error::Internal(anyhow::anyhow!(
                "releasing {qty} of SKU {sku_id} was refused"
            )));
        }
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
    let wrote = (
        moved.version,
        moved.updated_at,
        moved.qty_allocated,
        &moved.updated_by_name,
        &moved.stamp,
    );
    let expected = (
        order.version,
        order.updated_at,
        qty_allocated,
        &order.updated_by_name,
        &json_timestamp(order.updated_at),
    );
    if wrote != expected {
        return Err(Error::Internal(anyhow::anyhow!(
            "order {order_id}: the move wrote (version, time, allocated, by, stamp) {wrote:?}, \
             not the answer's {expected:?}"
        )));
    }
    locked.advance();
    held.keep(order_id, locked);
    Ok(Done::stored(answer.with(&moved.stamp, moved.ats_after)))
}

/// `t` as the server's JSON writes it (`json_timestamp` in SQL must agree).
pub(super) fn json_timestamp(t: DateTime<Utc>) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// An [`AllocationResult`]'s body serialized with stand-ins for the two
/// values only the write knows, the order's `updated_at` and ATS after, cut
/// around them, so Postgres can store the answer with the values it writes
/// (`allocation_move`) and the request answers with the same bytes.
pub(super) struct Answer {
    head: Vec<u8>,
    mid: Vec<u8>,
    tail: Vec<u8>,
}

/// Stands in for ATS after while serializing. `"ats_after":` with a bare
/// quote before the colon cannot occur inside a JSON string (a quote there
/// is escaped), so the pair is found only where the member is.
const ATS_STAND_IN: i64 = i64::MIN + 1;
/// Stands in for the order's `updated_at`: 1900-01-01T00:00:00.000001Z,
/// found as the whole `"updated_at":"…"` member (no other member of an
/// order is a timestamp that old).
const STAMP_STAND_IN_MICROS: i64 = -2_208_988_799_999_999;

impl Answer {
    pub(super) fn new(order: &Order) -> Result<Answer, Error> {
        let stamp_stand_in = DateTime::<Utc>::from_timestamp_micros(STAMP_STAND_IN_MICROS)
            .ok_or_else(|| anyhow::anyhow!("the timestamp stand-in is out of range"))?;
        let result = AllocationResult {
            order: Order {
                updated_at: stamp_stand_in,
                ..order.clone()
            },
            ats_after: ATS_STAND_IN,
        };
        let bytes = serde_json::to_vec(&result).map_err(|e| Error::Internal(e.into()))?;
        let find = |member: &str| {
            bytes
                .windows(member.len())
                .position(|w| w == member.as_bytes())
                .ok_or_else(|| anyhow::anyhow!("{member} is not in the serialized answer"))
        };
        let (stamp_name, stamp) = ("\"updated_at\":\"", json_timestamp(stamp_stand_in));
        let (ats_name, ats) = ("\"ats_after\":", ATS_STAND_IN.to_string());
        let s = find(&format!("{stamp_name}{stamp}\""))? + stamp_name.len();
        let a = find(&format!("{ats_name}{ats}"))? + ats_name.len();
        if s + stamp.len() > a {
            return Err(Error::Internal(anyhow::anyhow!(
                "the answer has ats_after before the order's updated_at"
            )));
        }
        Ok(Answer {
            head: bytes[..s].to_vec(),
            mid: bytes[s + stamp.len()..a].to_vec(),
            tail: bytes[a + ats.len()..].to_vec(),
        })
    }

    /// The answer's bytes with the order's timestamp, as `json_timestamp`
    /// wrote it, and `ats` in place, as Postgres stores them (`bigint::text`
    /// writes an integer as serde_json does).
    pub(super) fn with(&self, stamp: &str, ats: i64) -> Vec<u8> {
        let mut body = self.head.clone();
        body.extend_from_slice(stamp.as_bytes());
        body.extend_from_slice(&self.mid);
        body.extend_from_slice(ats.to_string().as_bytes());
        body.extend_from_slice(&self.tail);
        body
    }

    /// The three pieces, as `allocation_move` takes them.
    pub(super) fn pieces(&self) -> (&[u8], &[u8], &[u8]) {
        (&self.head, &self.mid, &self.tail)
    }
}

/// Locks the order and reads, after the lock, its lines in document order
/// and the SKU of this key's ledger row for this line if there is one (the
/// request already happened, [`ForEdit::late_sku`]): one round trip,
/// `order_for_move` (migration 20261208100100). `None` when the order is not
/// in the tenant.
///
/// An order in `held` (a batch push's straight chunk edited it already) is
/// locked and known, and is not read again. Its ledger is not read either:
/// a late retry's row makes the move's ledger insert fail on its unique key
/// `(tenant_id, idempotency_key, line_id)`, which aborts the chunk, and the
/// chunk is applied again with a savepoint per item, where this reads it.
async fn lock_for_move(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    order_id: Uuid,
    line_id: Uuid,
    held: &mut Held,
) -> Result<Option<ForEdit>, Error> {
    if let Some(edit) = held.take(order_id) {
        return Ok(Some(edit));
    }
    let rows: Vec<ForEditRow> = sqlx::query_as(
        "select *, null::boolean as sku_active, null::bigint as sku_price
           from order_for_move($1, $2, $3, $4, $5)",
    )
    .bind(caller.tenant_id)
    .bind(order_id)
    .bind(key.as_str())
    .bind(line_id)
    .bind(caller.user_id)
    .fetch_all(&mut *conn)
    .await?;
    ForEdit::from_rows(rows, caller, order_id)
}

/// A retry whose key was already reaped: the ledger still knows it happened.
async fn late_retry(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    sku_id: Uuid,
    order_id: Uuid,
) -> Result<Done, Error> {
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
    Ok(done)
}

/// What [`FOLDED_MOVE`] changed.
struct Moved {
    ats_after: i64,
    version: i64,
    updated_at: DateTime<Utc>,
    /// `updated_at` as the stored answer writes it.
    stamp: String,
    qty_allocated: i64,
    updated_by_name: String,
}

/// The move as one statement: `allocation_move` (migration 20261210000100).
/// Parameters: $1 tenant, $2 SKU, $3 delta (+allocate, −release), $4 order,
/// $5 line, $6 key, $7 user, $8 the locked order version, $9 the event
/// timestamp, $10 the ledger reason, $11 the order event's type, $12 the
/// quantity the event reports (positive), $13–$15 the answer's pieces
/// ([`Answer::pieces`]); the broken build adds $16.
#[cfg(not(feature = "broken-allocation"))]
const FOLDED_MOVE: &str = "select * from allocation_move($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)";

/// DELIBERATELY BROKEN (the `broken-allocation` feature, see
/// [`move_position_in_tx`]'s broken twin): `allocation_move`'s statement
/// with the position's update a blind write of a value computed from an
/// earlier plain read, $16, with no ATS check in the WHERE clause.
#[cfg(feature = "broken-allocation")]
const FOLDED_MOVE: &str = "
with pos as (
    update sku_positions
       set allocated = $16, version = version + 1, event_seq = event_seq + 1, updated_at = now()
     where tenant_id = $1 and sku_id = $2
    returning on_hand + on_order - allocated as ats_after, version, event_seq
), line as (
    update order_lines set qty_allocated = qty_allocated + $3
     where tenant_id = $1 and id = $5 and order_id = $4 and exists (select 1 from pos)
    returning qty_allocated
), ord as (
    update orders set version = version + 1, event_seq = event_seq + 1, updated_at = now(), updated_by = $7
     where tenant_id = $1 and id = $4 and version = $8 and exists (select 1 from pos)
    returning version, event_seq, updated_at, json_timestamp(updated_at) as stamp
), ledger as (
    insert into allocation_ledger (tenant_id, sku_id, order_id, line_id, delta, reason, idempotency_key, created_by)
    select $1, $2, $4, $5, $3, $10, $6, $7 from pos
), feed as (
    insert into changes (tenant_id, kind, doc_id, version)
    select $1, 'order', $4, ord.version from ord
    union all
    select $1, 'sku', $2, pos.version from pos
), events as (
    insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
    select $1, 'sku.ats_changed', 'sku', $2, pos.event_seq,
           jsonb_build_object('type', 'sku.ats_changed', 'timestamp', $9::text,
               'data', jsonb_build_object('ats', pos.ats_after, 'tenant_id', $1, 'sku_id', $2,
                                          'sequence', pos.event_seq, 'version', pos.version))
      from pos
    union all
    select $1, $11, 'order', $4, ord.event_seq,
           jsonb_build_object('type', $11::text, 'timestamp', $9::text,
               'data', jsonb_build_object('line_id', $5, 'sku_id', $2, 'qty', $12,
                                          'ats_after', pos.ats_after, 'tenant_id', $1, 'order_id', $4,
                                          'sequence', ord.event_seq, 'version', ord.version))
      from pos, ord
    returning id
), entry as (
    insert into order_history (tenant_id, order_id, version, created_by, event_type, facts,
                               idempotency_key, outbox_ids)
    select $1, $4, ord.version, $7, $11,
           jsonb_build_object('line_id', $5, 'sku_id', $2, 'qty', $12, 'ats_after', pos.ats_after),
           $6, array(select id from events order by id)
      from pos, ord
), answer as (
    update idempotency_keys
       set status_code = 200,
           response_body = $13::bytea || convert_to(ord.stamp, 'UTF8') || $14::bytea
                           || convert_to(pos.ats_after::text, 'UTF8') || $15::bytea
      from pos, ord
     where idempotency_keys.tenant_id = $1 and idempotency_keys.key = $6
)
select pos.ats_after, ord.version, ord.updated_at, ord.stamp, line.qty_allocated,
       (select display_name from users where tenant_id = $1 and id = $7)
  from pos left join ord on true left join line on true";

/// The move [`FOLDED_MOVE`] makes: which way, on which line, by how much
/// (negative releases), against the order version that was locked.
#[derive(Debug, Clone, Copy)]
struct Planned {
    direction: Direction,
    line: LineRef,
    delta: i64,
    order_version: i64,
}

/// Runs [`FOLDED_MOVE`]; `None` when the stock is not there (nothing was
/// written). A matched position with no order or line row behind it is a
/// bug, reported as an internal error (the caller rolls back).
async fn folded_move(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    planned: Planned,
    answer: &Answer,
) -> Result<Option<Moved>, Error> {
    let Planned {
        direction,
        line,
        delta,
        order_version,
    } = planned;
    let LineRef {
        order_id,
        line_id,
        sku_id,
    } = line;
    type Row = (
        Option<i64>,
        Option<i64>,
        Option<DateTime<Utc>>,
        Option<String>,
        Option<i64>,
        Option<String>,
    );
    let (reason, event_type) = direction.names();
    let (head, mid, tail) = answer.pieces();
    let query = sqlx::query_as::<_, Row>(FOLDED_MOVE)
        .bind(caller.tenant_id)
        .bind(sku_id)
        .bind(delta)
        .bind(order_id)
        .bind(line_id)
        .bind(key.as_str())
        .bind(caller.user_id)
        .bind(order_version)
        .bind(event_timestamp())
        .bind(reason)
        .bind(event_type.as_str())
        .bind(delta.abs())
        .bind(head)
        .bind(mid)
        .bind(tail);
    #[cfg(feature = "broken-allocation")]
    let query = {
        let read: Option<(i64, i64)> = sqlx::query_as(
            "select allocated, on_hand + on_order - allocated from sku_positions
              where tenant_id = $1 and sku_id = $2",
        )
        .bind(caller.tenant_id)
        .bind(sku_id)
        .fetch_optional(&mut *conn)
        .await?;
        match read {
            Some((allocated, ats)) if ats >= delta => query.bind(allocated + delta),
            _ => return Ok(None),
        }
    };
    let Some((Some(ats_after), version, updated_at, stamp, qty_allocated, name)) =
        query.fetch_optional(&mut *conn).await?
    else {
        return Ok(None);
    };
    let (Some(version), Some(updated_at), Some(stamp), Some(qty_allocated), Some(updated_by_name)) =
        (version, updated_at, stamp, qty_allocated, name)
    else {
        return Err(Error::Internal(anyhow::anyhow!(
            "SKU {sku_id} moved but order {order_id} / line {line_id} did not follow"
        )));
    };
    Ok(Some(Moved {
        ats_after,
        version,
        updated_at,
        stamp,
        qty_allocated,
        updated_by_name,
    }))
}

/// An event's `timestamp`, as every outbox event carries it.
pub(super) fn event_timestamp() -> String {
    Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
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
) -> Result<Option<(i64, i64, i64)>, Error> {
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
) -> Result<Option<(i64, i64, i64)>, Error> {
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

/// The order line a movement of stock is booked against, and its SKU.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LineRef {
    pub order_id: Uuid,
    pub line_id: Uuid,
    pub sku_id: Uuid,
}

/// Gives back `qty` units of a line's allocation: position, ledger, SKU
/// events. Used by remove-line and cancel. Returns ATS after and the id of
/// the SKU's `sku.ats_changed` event (the order's history keeps it).
pub(crate) async fn release_position_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    reason: &str,
    line: LineRef,
    qty: i64,
) -> Result<(i64, i64), Error> {
    let t = caller.tenant_id;
    let sku_id = line.sku_id;
    let (ats_after, sku_version, sku_seq) = move_position_in_tx(conn, t, sku_id, -qty)
        .await?
        .ok_or_else(|| {
            Error::Internal(anyhow::anyhow!(
                "releasing {qty} of SKU {sku_id} was refused"
            ))
        })?;
    ledger_in_tx(conn, caller, key, reason, line, -qty).await?;
    let event = announce_ats_in_tx(conn, t, sku_id, ats_after, sku_version, sku_seq).await?;
    Ok((ats_after, event))
}

async fn ledger_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    key: &IdempotencyKey,
    reason: &str,
    line: LineRef,
    delta: i64,
) -> Result<(), Error> {
    sqlx::query(
        "insert into allocation_ledger (tenant_id, sku_id, order_id, line_id, delta, reason, idempotency_key, created_by)
         values ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(caller.tenant_id)
    .bind(line.sku_id)
    .bind(line.order_id)
    .bind(line.line_id)
    .bind(delta)
    .bind(reason)
    .bind(key.as_str())
    .bind(caller.user_id)
    .execute(conn)
    .await?;
    Ok(())
}
