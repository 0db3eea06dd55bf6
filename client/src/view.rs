//! The optimistic view: the server's document with the user's pending acts
//! applied on top, each pending effect marked, so the screen shows what the
//! user did at once and what has not reached the server yet.
//!
//! Applying an act here mirrors what the server will do if it accepts it
//! (every success adds exactly 1 to the version). An act that cannot apply
//! locally (its line is gone) changes nothing here; the server will say why.

use chrono::Utc;
use holdfast_protocol::model::{Line, Order, OrderStatus, Sku};
use serde::Serialize;
use uuid::Uuid;

use crate::act::Act;
use crate::conflict::fields_of;
use crate::store::pending::{Row, Status};

/// Who "I" am, for the documents the view invents before the server answers.
#[derive(Debug, Clone)]
pub struct Me {
    pub user_id: Uuid,
    pub name: String,
}

/// Applies one act to the document it is about (`None`: not created yet).
pub fn apply(order: Option<Order>, act: &Act, me: &Me) -> Option<Order> {
    let now = Utc::now();
    if let Act::CreateOrder {
        order_id,
        customer_id,
        customer_po,
        ship_window_start,
        ship_window_end,
        notes,
    } = act
    {
        if order.is_some() {
            return order;
        }
        return Some(Order {
            id: *order_id,
            customer_id: *customer_id,
            customer_po: customer_po.clone(),
            ship_window_start: *ship_window_start,
            ship_window_end: *ship_window_end,
            notes: notes.clone(),
            status: OrderStatus::Draft,
            version: 1,
            invoice_id: None,
            lines: Vec::new(),
            updated_at: now,
            updated_by: me.user_id,
            updated_by_name: me.name.clone(),
            created_at: now,
        });
    }
    let mut o = order?;
    let line = |o: &mut Order, id: Uuid| o.lines.iter_mut().position(|l| l.id == id);
    match act {
        Act::CreateOrder { .. } => {}
        Act::PatchOrder { set, .. } => {
            if let Some(c) = set.customer_id {
                o.customer_id = c;
            }
            if let Some(v) = &set.customer_po {
                o.customer_po = v.clone();
            }
            if let Some(v) = set.ship_window_start {
                o.ship_window_start = v;
            }
            if let Some(v) = set.ship_window_end {
                o.ship_window_end = v;
            }
            if let Some(v) = &set.notes {
                o.notes = v.clone();
            }
        }
        Act::AddLine {
            line_id,
            sku_id,
            qty_ordered,
            ..
        } => {
            if line(&mut o, *line_id).is_none() {
                o.lines.push(Line {
                    id: *line_id,
                    sku_id: *sku_id,
                    qty_ordered: *qty_ordered,
                    qty_allocated: 0,
                });
            }
        }
        Act::ChangeLine {
            line_id,
            qty_ordered,
            ..
        } => {
            if let Some(i) = line(&mut o, *line_id) {
                o.lines[i].qty_ordered = *qty_ordered;
            }
        }
        Act::RemoveLine { line_id, .. } => o.lines.retain(|l| l.id != *line_id),
        Act::Allocate { line_id, qty, .. } => {
            if let Some(i) = line(&mut o, *line_id) {
                o.lines[i].qty_allocated += qty;
            }
        }
        Act::Release { line_id, qty, .. } => {
            if let Some(i) = line(&mut o, *line_id) {
                o.lines[i].qty_allocated -= qty;
            }
        }
        Act::Confirm { .. } => o.status = OrderStatus::Confirmed,
        Act::Cancel { .. } => {
            o.status = OrderStatus::Cancelled;
            for l in &mut o.lines {
                l.qty_allocated = 0;
            }
        }
    }
    o.version += 1;
    o.updated_at = now;
    o.updated_by = me.user_id;
    o.updated_by_name = me.name.clone();
    Some(o)
}

/// Whether a pending row's effect shows in the view: a rejected act did not
/// happen, everything else is still the user's intention.
pub fn shows(row: &Row) -> bool {
    row.status != Status::Rejected
}

/// How an order stands with the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Badge {
    Synced,
    Pending,
    Conflict,
    Rejected,
}

/// One pending act as the screen marks it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingMark {
    pub seq: i64,
    pub idempotency_key: String,
    pub kind: &'static str,
    pub description: String,
    pub status: Status,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub created_at: i64,
}

impl PendingMark {
    pub fn of(row: &Row) -> Self {
        PendingMark {
            seq: row.seq,
            idempotency_key: row.key.clone(),
            kind: row.act.kind(),
            description: row.act.describe(),
            status: row.status,
            attempts: row.attempts,
            last_error: row.last_error.clone(),
            created_at: row.created_at,
        }
    }
}

/// An order as the user sees it.
#[derive(Debug, Clone, Serialize)]
pub struct OrderView {
    /// The server's document with the pending acts applied.
    pub order: Order,
    /// The version the server last told us (None: it has not seen the order).
    pub server_version: Option<i64>,
    pub badge: Badge,
    /// The acts not yet on the server, in order.
    pub pending: Vec<PendingMark>,
    /// The fields those acts touch (`notes`, `status`, `line:<id>`, …).
    pub pending_fields: Vec<String>,
}

/// The view of one order from its mirror and its pending rows (in order).
pub fn order_view(mirror: Option<Order>, rows: &[Row], me: &Me) -> Option<OrderView> {
    let server_version = mirror.as_ref().map(|o| o.version);
    let mut doc = mirror;
    let mut fields = Vec::new();
    for row in rows.iter().filter(|r| shows(r)) {
        doc = apply(doc, &row.act, me);
        for f in fields_of(&row.act) {
            let name = f.name();
            if !fields.contains(&name) {
                fields.push(name);
            }
        }
    }
    let order = doc?;
    let badge = if rows.iter().any(|r| r.status == Status::Conflict) {
        Badge::Conflict
    } else if rows.iter().any(|r| r.status == Status::Rejected) {
        Badge::Rejected
    } else if rows.is_empty() {
        Badge::Synced
    } else {
        Badge::Pending
    };
    Some(OrderView {
        order,
        server_version,
        badge,
        pending: rows.iter().map(PendingMark::of).collect(),
        pending_fields: fields,
    })
}

/// A SKU as the user sees it: the server's position less what the user's
/// pending acts will allocate (plus what they will release).
#[derive(Debug, Clone, Serialize)]
pub struct SkuView {
    #[serde(flatten)]
    pub sku: Sku,
    /// ATS after the pending acts (what the user can still promise).
    pub ats_local: i64,
    /// Units the pending acts allocate (negative: release).
    pub pending_allocation: i64,
}

/// `allocating`: the net units the user's pending acts allocate on this SKU.
pub fn sku_view(sku: Sku, allocating: i64) -> SkuView {
    SkuView {
        ats_local: sku.ats - allocating,
        pending_allocation: allocating,
        sku,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_protocol::model::OrderHeaderSet;

    fn me() -> Me {
        Me {
            user_id: Uuid::now_v7(),
            name: "Dana".into(),
        }
    }

    #[test]
    fn every_act_adds_one_to_the_version() {
        let me = me();
        let (o, l) = (Uuid::now_v7(), Uuid::now_v7());
        let acts = [
            Act::CreateOrder {
                order_id: o,
                customer_id: Uuid::now_v7(),
                customer_po: None,
                ship_window_start: None,
                ship_window_end: None,
                notes: None,
            },
            Act::AddLine {
                order_id: o,
                line_id: l,
                sku_id: Uuid::now_v7(),
                qty_ordered: 5,
                base_version: 1,
            },
            Act::Allocate {
                order_id: o,
                line_id: l,
                qty: 3,
            },
            Act::PatchOrder {
                order_id: o,
                base_version: 3,
                set: OrderHeaderSet {
                    notes: Some(Some("rush".into())),
                    ..Default::default()
                },
            },
            Act::Release {
                order_id: o,
                line_id: l,
                qty: 1,
            },
            Act::Cancel {
                order_id: o,
                base_version: 5,
            },
        ];
        let mut doc = None;
        for (i, act) in acts.iter().enumerate() {
            doc = apply(doc, act, &me);
            assert_eq!(doc.as_ref().map(|d| d.version), Some(i as i64 + 1));
        }
        let doc = doc.expect("doc");
        assert_eq!(doc.notes.as_deref(), Some("rush"));
        assert_eq!(doc.status, OrderStatus::Cancelled);
        assert_eq!(doc.lines[0].qty_allocated, 0);
    }
}
