//! Queuing acts: the base-version rule of the [`engine`](super) module docs
//! in code. Each act is checked against the optimistic view, gets the base
//! its place in the queue implies and a fresh idempotency key, and lands in
//! the store at once; [`rechain`] re-chains bases after a user's decision.

use chrono::NaiveDate;
use holdfast_protocol::model::{Order, OrderHeaderSet, OrderStatus};
use rusqlite::Transaction;
use uuid::Uuid;

use super::{new_key, Engine, Error, Result};
use crate::act::Act;
use crate::store::{
    customers, expected_prices, now_ms, orders, pending, price_lists, skus, StoreError,
};
use crate::view::{self, Me};

/// A new order's header.
#[derive(Debug, Clone, Default)]
pub struct NewOrder {
    pub customer_id: Uuid,
    pub customer_po: Option<String>,
    pub ship_window_start: Option<NaiveDate>,
    pub ship_window_end: Option<NaiveDate>,
    pub notes: Option<String>,
}

impl Engine {
    /// Queues one act on `order_id`: computes its base version (see the
    /// engine's module docs), lets `make` build the act from the current view, and
    /// stores it with a fresh idempotency key. Returns the key.
    ///
    /// An added line's expected price (the customer's price list, else the
    /// SKU's wholesale price, as the mirrors say now) is recorded in the same
    /// transaction, so the view can price the pending line and later show
    /// whether the server agreed, across restarts.
    fn queue(
        &self,
        order_id: Uuid,
        make: impl FnOnce(&Transaction<'_>, Option<&Order>, i64) -> Result<Act>,
    ) -> Result<String> {
        let key = new_key();
        let mut failure: Option<Error> = None;
        self.inner.store.write(|tx| {
            failure = Self::queue_in(tx, order_id, &key, make)?.err();
            Ok(())
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        self.changed_locally();
        Ok(key)
    }

    /// [`queue`](Self::queue) inside the caller's store transaction, so that
    /// several acts can land together. The outer error is the store's; the
    /// inner one is `make`'s refusal, which writes nothing.
    fn queue_in(
        tx: &Transaction<'_>,
        order_id: Uuid,
        key: &str,
        make: impl FnOnce(&Transaction<'_>, Option<&Order>, i64) -> Result<Act>,
    ) -> Result<Result<()>, StoreError> {
        let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let mirror = orders::get(tx, order_id)?;
        let rows = pending::queued_for_order(tx, order_id)?;
        let mut doc = mirror.clone();
        for row in rows.iter().filter(|r| view::shows(r.status)) {
            doc = view::apply(doc, &row.act, &me);
        }
        let base = match (rows.last(), &mirror) {
            // Behind the user's own acts: the previous one's base + 1.
            (Some(last), _) => last.base_version + 1,
            (None, Some(m)) => m.version,
            (None, None) => 0,
        };
        let act = match make(tx, doc.as_ref(), base) {
            Ok(act) => act,
            Err(e) => return Ok(Err(e)),
        };
        if let (
            Act::AddLine {
                line_id, sku_id, ..
            },
            Some(o),
        ) = (&act, &doc)
        {
            if let Some(price) = price_lists::expected_price(tx, o.customer_id, *sku_id)? {
                expected_prices::record(tx, order_id, *line_id, *sku_id, price, now_ms())?;
            }
        }
        pending::insert(
            tx,
            &pending::New {
                key,
                act: &act,
                base_version: base,
                base_doc: doc.as_ref(),
                now: now_ms(),
            },
        )?;
        Ok(Ok(()))
    }

    pub fn create_order(&self, new: NewOrder) -> Result<Uuid> {
        if let (Some(s), Some(e)) = (new.ship_window_start, new.ship_window_end) {
            if e < s {
                return Err(Error::Invalid(
                    "the ship window ends before it starts".into(),
                ));
            }
        }
        let order_id = Uuid::now_v7();
        self.queue(order_id, |tx, doc, _| {
            open_customer(tx, new.customer_id)?;
            if doc.is_some() {
                return Err(Error::Invalid(format!("order {order_id} exists")));
            }
            Ok(Act::CreateOrder {
                order_id,
                customer_id: new.customer_id,
                customer_po: new.customer_po,
                ship_window_start: new.ship_window_start,
                ship_window_end: new.ship_window_end,
                notes: new.notes,
            })
        })?;
        Ok(order_id)
    }

    pub fn edit_order(&self, order_id: Uuid, set: OrderHeaderSet) -> Result<String> {
        if crate::act::header_changes(&set).is_empty() {
            return Err(Error::Invalid("nothing to change".into()));
        }
        self.queue(order_id, |tx, doc, base| {
            let o = editable(doc, order_id)?;
            if let Some(c) = set.customer_id.filter(|c| *c != o.customer_id) {
                open_customer(tx, c)?;
            }
            Ok(Act::PatchOrder {
                order_id,
                base_version: base,
                set,
            })
        })
    }

    /// Adds a line; returns its (client-minted) id.
    pub fn add_line(&self, order_id: Uuid, sku_id: Uuid, qty_ordered: i64) -> Result<Uuid> {
        positive("quantity", qty_ordered)?;
        let line_id = Uuid::now_v7();
        self.queue(order_id, |tx, doc, base| {
            editable(doc, order_id)?;
            if let Some(sku) = skus::get(tx, sku_id)? {
                if !sku.active {
                    return Err(Error::Invalid(format!(
                        "{} · {} · {} is discontinued: it cannot be added to an order",
                        sku.style, sku.color, sku.size
                    )));
                }
            }
            Ok(Act::AddLine {
                order_id,
                line_id,
                sku_id,
                qty_ordered,
                base_version: base,
            })
        })?;
        Ok(line_id)
    }

    pub fn change_line(&self, order_id: Uuid, line_id: Uuid, qty_ordered: i64) -> Result<String> {
        positive("quantity", qty_ordered)?;
        self.queue(order_id, |_, doc, base| {
            has_line(editable(doc, order_id)?, line_id)?;
            Ok(Act::ChangeLine {
                order_id,
                line_id,
                qty_ordered,
                base_version: base,
            })
        })
    }

    pub fn remove_line(&self, order_id: Uuid, line_id: Uuid) -> Result<String> {
        self.queue(order_id, |_, doc, base| {
            has_line(editable(doc, order_id)?, line_id)?;
            Ok(Act::RemoveLine {
                order_id,
                line_id,
                base_version: base,
            })
        })
    }

    /// Allocates stock to a line. Whether the stock is there is decided by
    /// the server; offline we cannot know, so this only queues.
    pub fn allocate(&self, order_id: Uuid, line_id: Uuid, qty: i64) -> Result<String> {
        positive("quantity", qty)?;
        self.queue(order_id, |_, doc, _| {
            has_line(allocatable(doc, order_id)?, line_id)?;
            Ok(Act::Allocate {
                order_id,
                line_id,
                qty,
            })
        })
    }

    pub fn release(&self, order_id: Uuid, line_id: Uuid, qty: i64) -> Result<String> {
        positive("quantity", qty)?;
        self.queue(order_id, |_, doc, _| {
            has_line(allocatable(doc, order_id)?, line_id)?;
            Ok(Act::Release {
                order_id,
                line_id,
                qty,
            })
        })
    }

    pub fn confirm(&self, order_id: Uuid) -> Result<String> {
        self.queue(order_id, |_, doc, base| {
            editable(doc, order_id)?;
            Ok(Act::Confirm {
                order_id,
                base_version: base,
            })
        })
    }

    pub fn cancel(&self, order_id: Uuid) -> Result<String> {
        self.queue(order_id, |_, doc, base| {
            let o = found(doc, order_id)?;
            if o.status == OrderStatus::Cancelled {
                return Err(Error::Invalid("the order is already cancelled".into()));
            }
            Ok(Act::Cancel {
                order_id,
                base_version: base,
            })
        })
    }
}

/// What a reorder made: the new draft, and the lines it could not copy.
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reorder {
    pub order_id: Uuid,
    /// "style · colour · size" of each line left out (its SKU is discontinued).
    pub skipped: Vec<String>,
}

impl Engine {
    /// Copies an order into a new draft for the same customer: each line's
    /// SKU and quantity, in order. Not copied: the PO (a reorder comes with
    /// its own), the ship window (it has passed or will), notes, allocations,
    /// and lines whose SKU is discontinued (named in the answer). Every act
    /// of the copy is queued in one local transaction: the whole draft lands
    /// in the queue or none of it does.
    pub fn reorder(&self, from: Uuid) -> Result<Reorder> {
        let order_id = Uuid::now_v7();
        let mut failure: Option<Error> = None;
        let mut skipped = Vec::new();
        self.inner.store.write(|tx| {
            let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
            let mut source = orders::get(tx, from)?;
            for row in pending::queued_for_order(tx, from)?
                .iter()
                .filter(|r| view::shows(r.status))
            {
                source = view::apply(source, &row.act, &me);
            }
            let Some(source) = source else {
                failure = Some(Error::NotFound(format!("no order {from} on this desk")));
                return Ok(());
            };
            if let Err(e) = open_customer(tx, source.customer_id) {
                failure = Some(e);
                return Ok(());
            }
            let mut lines = Vec::new();
            for l in &source.lines {
                match skus::get(tx, l.sku_id)? {
                    Some(sku) if !sku.active => {
                        skipped.push(format!("{} · {} · {}", sku.style, sku.color, sku.size))
                    }
                    _ => lines.push((l.sku_id, l.qty_ordered)),
                }
            }
            let create = Act::CreateOrder {
                order_id,
                customer_id: source.customer_id,
                customer_po: None,
                ship_window_start: None,
                ship_window_end: None,
                notes: None,
            };
            let mut refusal = Self::queue_in(tx, order_id, &new_key(), |_, _, _| Ok(create))?.err();
            for (sku_id, qty_ordered) in lines {
                if refusal.is_some() {
                    break;
                }
                refusal = Self::queue_in(tx, order_id, &new_key(), |_, _, base| {
                    Ok(Act::AddLine {
                        order_id,
                        line_id: Uuid::now_v7(),
                        sku_id,
                        qty_ordered,
                        base_version: base,
                    })
                })?
                .err();
            }
            // Part of a copy is no copy: undo it all.
            if let Some(e) = refusal {
                return Err(StoreError::Invalid(e.to_string()));
            }
            Ok(())
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        self.changed_locally();
        Ok(Reorder { order_id, skipped })
    }
}

/// Re-queues `rows` (in order) on a new chain of bases starting at `base`
/// over the document `doc`: a `None` act drops its row; a kept act gets the
/// chained base, and a new key whenever its request changed (or it is the
/// row the server already refused, `refused_seq`).
pub(super) fn rechain(
    tx: &Transaction<'_>,
    me: &Me,
    rows: Vec<(pending::Row, Option<Act>)>,
    mut base: i64,
    mut doc: Option<Order>,
    refused_seq: Option<i64>,
) -> Result<(), StoreError> {
    let now = now_ms();
    for (row, act) in rows {
        let Some(act) = act else {
            pending::delete(tx, row.seq)?;
            continue;
        };
        let act = act.with_base(base);
        let key = if act.request() == row.request && Some(row.seq) != refused_seq {
            row.key.clone()
        } else {
            new_key()
        };
        pending::replace(tx, row.seq, &key, &act, base, doc.as_ref(), now)?;
        doc = view::apply(doc, &act, me);
        base += 1;
    }
    Ok(())
}

/// A customer a new (or re-assigned) order may name: the server refuses an
/// inactive one (422 invalid_state), so the desk says so before queueing.
/// A customer this desk has not mirrored is left to the server.
fn open_customer(tx: &Transaction<'_>, customer_id: Uuid) -> Result<()> {
    match customers::get(tx, customer_id)? {
        Some(c) if !c.active => Err(Error::Invalid(format!(
            "{} is inactive: it takes no new orders",
            c.name
        ))),
        _ => Ok(()),
    }
}

fn found(doc: Option<&Order>, order_id: Uuid) -> Result<&Order> {
    doc.ok_or_else(|| Error::NotFound(format!("no order {order_id} on this desk")))
}

fn editable(doc: Option<&Order>, order_id: Uuid) -> Result<&Order> {
    let o = found(doc, order_id)?;
    if o.status != OrderStatus::Draft {
        return Err(Error::Invalid(format!(
            "the order is {}; only a draft can be edited",
            o.status.as_str()
        )));
    }
    Ok(o)
}

fn allocatable(doc: Option<&Order>, order_id: Uuid) -> Result<&Order> {
    let o = found(doc, order_id)?;
    if o.status == OrderStatus::Cancelled {
        return Err(Error::Invalid("the order is cancelled".into()));
    }
    Ok(o)
}

fn has_line(o: &Order, line_id: Uuid) -> Result<()> {
    if o.lines.iter().any(|l| l.id == line_id) {
        Ok(())
    } else {
        Err(Error::NotFound(format!(
            "no line {line_id} on order {}",
            o.id
        )))
    }
}

fn positive(what: &str, n: i64) -> Result<()> {
    if n < 1 {
        return Err(Error::Invalid(format!("{what} must be at least 1")));
    }
    Ok(())
}
