//! A REST allocation or release on an order this server knows: one round
//! trip instead of five.
//!
//! The ordinary path (`http::mutations::execute`) sends `BEGIN`, the key's
//! claim, the order's lock and read (`order_for_move`), the move and
//! `COMMIT`: five round trips, each a wake-up on both sides. But when this
//! process answered the order's last edit, it already holds the document
//! that edit left ([`KnownOrders`]), and the read only confirms it. So the
//! move is decided here, from that document, exactly as the ordinary path
//! decides it (`allocation::decide`), its answer built, and the whole of it
//! sent as one call in autocommit, `allocate_on_known_order` (migration
//! 20261210000100): claim the key (binding the tenant, proving a caller
//! from the token cache), lock the order only if it is still at the version
//! held, make the move with the same `allocation_move` the ordinary path
//! calls, check it wrote the answer's values, commit.
//!
//! What that call cannot vouch for it leaves alone, and the request takes the
//! ordinary path, which decides it as it always did: a document not held, or
//! one on which the move would be refused (every refusal is the ordinary
//! path's to answer and store); a key answered before or a caller not proved
//! (nothing was written); the order moved on since (another desk, another
//! server, a batch push), the stock short, the ledger already holding the
//! key (the call raises, which rolls its claim back with everything else).
//! So this path answers only what the ordinary one would have answered,
//! and the held document is a guess that is checked, never trusted: a stale
//! one costs one declined call.
//!
//! Not in the `broken-allocation` build: its oversell lives in the ordinary
//! path, and the chaos suite must reach it.

use std::collections::HashMap;
use std::sync::Mutex;

use holdfast_protocol::key::IdempotencyKey;
use holdfast_protocol::model::{AllocationResult, Order};
use holdfast_protocol::mutation::Mutation;
use sqlx::PgConnection;
use uuid::Uuid;

use super::allocation::{self, Answer, Decided, Direction, Wanted};
use super::{Outcome, Request, Step};
use crate::auth::Caller;
use crate::db::warm::Warm;

/// The orders whose latest document this process answered with, by tenant
/// and id: the last REST edit's answer (the ordinary path's, learned from
/// its bytes, or this path's own). At most [`KnownOrders::CAPACITY`]; a
/// new one past that pushes out an arbitrary other (a forgotten order only
/// costs its next allocation the ordinary path).
#[derive(Default)]
pub struct KnownOrders {
    orders: Mutex<HashMap<(Uuid, Uuid), Order>>,
}

impl KnownOrders {
    pub const CAPACITY: usize = 4096;

    fn get(&self, tenant: Uuid, id: Uuid) -> Option<Order> {
        self.lock().get(&(tenant, id)).cloned()
    }

    fn remember(&self, tenant: Uuid, order: Order) {
        let mut orders = self.lock();
        if orders.len() >= Self::CAPACITY && !orders.contains_key(&(tenant, order.id)) {
            if let Some(&any) = orders.keys().next() {
                orders.remove(&any);
            }
        }
        orders.insert((tenant, order.id), order);
    }

    fn forget(&self, tenant: Uuid, id: Uuid) {
        self.lock().remove(&(tenant, id));
    }

    /// What an ordinary REST mutation's answer says about its order: a
    /// fresh success is the order's document now (allocation's answer
    /// carries it as `order`); a refusal may mean it moved on. A replay
    /// says nothing new.
    pub fn learn(&self, tenant: Uuid, mutation: &Mutation, outcome: &Outcome) {
        if outcome.replayed {
            return;
        }
        let id = mutation.order_id();
        let order = if !outcome.is_success() {
            None
        } else if matches!(
            mutation,
            Mutation::Allocate { .. } | Mutation::Release { .. }
        ) {
            serde_json::from_slice::<AllocationResult>(&outcome.body)
                .ok()
                .map(|r| r.order)
        } else {
            serde_json::from_slice::<Order>(&outcome.body).ok()
        };
        match order {
            Some(order) if order.id == id => self.remember(tenant, order),
            _ => self.forget(tenant, id),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Uuid, Uuid), Order>> {
        // A panic while holding it leaves nothing half-done in the map.
        self.orders.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// SQLSTATE `allocate_on_known_order` raises when the order or the stock is
/// not as the held document says.
const DECLINED: &str = "HF001";
/// Postgres' unique_violation (the ledger already has this key: a late
/// retry, which the ordinary path answers) and deadlock_detected (the call
/// locks key, order, SKU as the ordinary path does; should anything else
/// cross it, the victim is simply declined).
const UNIQUE_VIOLATION: &str = "23505";
const DEADLOCK: &str = "40P01";

/// Runs `req` on the held document when it is an allocation or a release the
/// ordinary path would carry out, as one call. `None`: nothing was written,
/// run the ordinary path. `verify`: the caller came from the token cache and
/// is proved in the call, as in `engine::execute_unbound_in_tx`.
pub async fn try_move(
    warm: &Warm,
    known: &KnownOrders,
    caller: &Caller,
    verify: bool,
    req: &Request,
) -> Result<Option<Outcome>, anyhow::Error> {
    let (order_id, line_id, qty, direction) = match req.mutation {
        Mutation::Allocate {
            order_id,
            line_id,
            qty,
        } => (order_id, line_id, qty, Direction::Allocate),
        Mutation::Release {
            order_id,
            line_id,
            qty,
        } => (order_id, line_id, qty, Direction::Release),
        _ => return Ok(None),
    };
    let wanted = Wanted {
        order_id,
        line_id,
        qty,
        direction,
    };
    if super::check(caller, req).is_err() {
        return Ok(None);
    }
    let Some(held) = known.get(caller.tenant_id, order_id) else {
        return Ok(None);
    };
    let Ok(Decided { at, sku_id, delta }) = allocation::decide(held.status, &held.lines, &wanted)
    else {
        return Ok(None);
    };
    // The document the move leaves, as `ForEdit::edited` builds it on the
    // ordinary path (the answer's timestamp is Postgres's to fill in).
    let mut order = held;
    let base_version = order.version;
    order.lines[at].qty_allocated += delta;
    order.version += 1;
    order.total = crate::db::orders::total(&order.lines);
    order.updated_by = caller.user_id;
    order.updated_by_name = caller.display_name.clone();
    let answer = Answer::new(&order)?;
    let call = Call {
        caller,
        verify,
        key: &req.key,
        fingerprint: &req.fingerprint,
        sku_id,
        delta,
        line_id,
        base_version,
        qty_allocated: order.lines[at].qty_allocated,
        direction,
    };
    let mut lease = warm.take().await?;
    let sent = call.send(&mut lease.conn, order_id, &answer).await;
    match &sent {
        Ok(_) => warm.give_back(lease),
        // Declined by the database: the connection is sound.
        Err(sqlx::Error::Database(e))
            if !e
                .code()
                .as_deref()
                .is_some_and(crate::error::sqlstate_is_unavailable) =>
        {
            warm.give_back(lease)
        }
        // It may have broken while it was kept: the ordinary path, on a
        // tested connection, makes the move or replays the one this call
        // made (the key was claimed in the same transaction).
        Err(e) if lease.is_warm() && crate::error::is_unavailable(e) => {
            tracing::debug!(%order_id, error = %e, "a kept connection failed; taking the ordinary path");
            return Ok(None);
        }
        Err(_) => drop(lease),
    }
    match sent {
        Ok(Sent::Moved { ats_after, stamp }) => {
            metrics::counter!("holdfast_known_order_allocations_total", "outcome" => "moved")
                .increment(1);
            let body = answer.with(&stamp, ats_after);
            match chrono::DateTime::parse_from_rfc3339(&stamp) {
                Ok(at) => {
                    order.updated_at = at.to_utc();
                    known.remember(caller.tenant_id, order);
                }
                Err(e) => {
                    tracing::error!(%order_id, %stamp, error = %e, "the stored answer's timestamp does not parse");
                    known.forget(caller.tenant_id, order_id);
                }
            }
            Ok(Some(Outcome {
                status: 200,
                body,
                replayed: false,
            }))
        }
        Ok(Sent::InFlight) => match super::settle(super::idempotency::Claim::InFlight) {
            Some(Step::Keep(outcome) | Step::Discard(outcome)) => Ok(Some(outcome)),
            None => Ok(None),
        },
        Ok(Sent::NotClaimed) => Ok(None),
        Err(sqlx::Error::Database(e))
            if matches!(
                e.code().as_deref(),
                Some(DECLINED | UNIQUE_VIOLATION | DEADLOCK)
            ) =>
        {
            metrics::counter!("holdfast_known_order_allocations_total", "outcome" => "declined")
                .increment(1);
            tracing::debug!(%order_id, reason = %e, "allocation on a known order declined; taking the ordinary path");
            known.forget(caller.tenant_id, order_id);
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// One `allocate_on_known_order` call's arguments.
struct Call<'a> {
    caller: &'a Caller,
    verify: bool,
    key: &'a IdempotencyKey,
    fingerprint: &'a str,
    sku_id: Uuid,
    delta: i64,
    line_id: Uuid,
    base_version: i64,
    /// The line's allocation once moved, as the answer says.
    qty_allocated: i64,
    direction: Direction,
}

/// What the call did, short of an error.
enum Sent {
    Moved {
        ats_after: i64,
        stamp: String,
    },
    /// Another request holds the key and did not finish within the wait.
    InFlight,
    /// The key was answered before, or the caller is not proved: nothing
    /// was written.
    NotClaimed,
}

impl Call<'_> {
    async fn send(
        &self,
        db: &mut PgConnection,
        order_id: Uuid,
        answer: &Answer,
    ) -> Result<Sent, sqlx::Error> {
        let c = self.caller;
        let (reason, event_type) = self.direction.names();
        let (head, mid, tail) = answer.pieces();
        let (outcome, ats_after, stamp): (String, Option<i64>, Option<String>) = sqlx::query_as(
            "select * from allocate_on_known_order($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                                                   $13, $14, $15, $16, $17, $18, $19, $20, $21, $22,
                                                   $23, $24)",
        )
        .bind(c.tenant_id)
        .bind(self.key.as_str())
        .bind(self.fingerprint)
        .bind(super::KEY_LOCK_TIMEOUT)
        .bind(super::ROW_LOCK_TIMEOUT)
        .bind(crate::db::tenancy::TENANT_ROLE)
        .bind(self.verify)
        .bind(c.token_id)
        .bind(c.user_id)
        .bind(c.role.as_str())
        .bind(&c.display_name)
        .bind(self.sku_id)
        .bind(self.delta)
        .bind(order_id)
        .bind(self.line_id)
        .bind(self.base_version)
        .bind(self.qty_allocated)
        .bind(allocation::event_timestamp())
        .bind(reason)
        .bind(event_type.as_str())
        .bind(self.delta.abs())
        .bind(head)
        .bind(mid)
        .bind(tail)
        .fetch_one(db)
        .await?;
        Ok(match (outcome.as_str(), ats_after, stamp) {
            ("moved", Some(ats_after), Some(stamp)) => Sent::Moved { ats_after, stamp },
            ("in_flight", _, _) => Sent::InFlight,
            _ => Sent::NotClaimed,
        })
    }
}
