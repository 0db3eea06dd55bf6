//! The optimistic view: the server's document with the user's pending acts
//! applied on top, each pending effect marked, so the screen shows what the
//! user did at once and what has not reached the server yet.
//!
//! Applying an act here mirrors what the server will do if it accepts it
//! (every success adds exactly 1 to the version). An act that cannot apply
//! locally (its line is gone) changes nothing here; the server will say why.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, Utc};
use holdfast_protocol::model::{Line, Order, OrderStatus, Sku};
use serde::{Deserialize, Serialize};
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
            total: 0,
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
                    // The server decides the price when the line lands;
                    // [`order_view`] shows the desk's expectation meanwhile.
                    unit_price: 0,
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
            // The document may no longer hold what the act releases (a
            // colleague released it, or our own allocation was refused):
            // show none left, never a negative; the server answers the act.
            if let Some(i) = line(&mut o, *line_id) {
                o.lines[i].qty_allocated = (o.lines[i].qty_allocated - qty).max(0);
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
pub fn shows(status: Status) -> bool {
    status != Status::Rejected
}

/// How an order stands with the server.
#[derive(ts_rs::TS, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Badge {
    Synced,
    Pending,
    Conflict,
    Rejected,
}

/// One pending act as the screen marks it.
#[derive(ts_rs::TS, Debug, Clone, Serialize)]
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

/// Where a line's `unit_price` in the view comes from.
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinePrice {
    pub line_id: Uuid,
    /// The price the desk showed when the user added the line here (the
    /// customer's price list, else wholesale); None for a line added
    /// elsewhere, or whose SKU this desk did not know.
    pub expected: Option<i64>,
    /// The server's document carries the line: `unit_price` is the server's
    /// (decided when the line landed, never changed since). False: the add
    /// is pending and `unit_price` is `expected` (0 if unknown).
    pub priced_by_server: bool,
}

/// An order as the user sees it.
#[derive(ts_rs::TS, Debug, Clone, Serialize)]
pub struct OrderView {
    /// The server's document with the pending acts applied; a line the
    /// server has not priced yet carries the desk's expected price, and
    /// `total` is Σ qty_ordered × unit_price over these lines.
    pub order: Order,
    /// One per line of `order`, in the same order.
    pub line_prices: Vec<LinePrice>,
    /// The version the server last told us (None: it has not seen the order).
    pub server_version: Option<i64>,
    pub badge: Badge,
    /// The acts not yet on the server, in order.
    pub pending: Vec<PendingMark>,
    /// The fields those acts touch (`notes`, `status`, `line:<id>`, …).
    pub pending_fields: Vec<String>,
    /// A partner was never told about a change to this order: at least one
    /// of its partner deliveries is dead-lettered on the server, waiting for
    /// an operator to requeue it. As of the desk's last ask (at most a
    /// minute old while online; the last answer while offline).
    pub dead_lettered: bool,
    /// Part of this order needs a newer app: the server's latest version
    /// of it, or one of the user's acts on it, is something this build
    /// cannot read (kept, listed by `Engine::held`). What the desk shows
    /// is the last version it could read, and the order's later acts wait.
    pub needs_newer_app: bool,
}

/// What the desk's list asks for: its filters and search, and the window
/// of rows in view (plus a margin). The engine filters, sorts and counts
/// in the store, so neither it nor the UI holds every order's row.
#[derive(ts_rs::TS, Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct DeskQuery {
    /// Only orders with this badge (None: every order).
    pub badge: Option<Badge>,
    /// Only orders in this status (None: any).
    pub status: Option<OrderStatus>,
    /// Words that must all appear, in any case, in the customer's name,
    /// the PO, the notes or the order id (blank: no search).
    pub q: String,
    /// The first row wanted (0: the newest change).
    pub offset: usize,
    /// How many rows from `offset` (at most [`DeskQuery::MAX_LIMIT`]).
    pub limit: usize,
    /// The selected order, whose place in the list comes back as
    /// [`OrderPage::selected_index`].
    pub selected: Option<Uuid>,
}

impl DeskQuery {
    /// The most rows one page carries.
    pub const MAX_LIMIT: usize = 1000;

    /// The search's words, lowercased (none for a blank search).
    pub fn words(&self) -> Vec<String> {
        self.q
            .to_lowercase()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// Whether an order with this badge and status passes the filters.
    pub fn keeps(&self, badge: Badge, status: OrderStatus) -> bool {
        self.badge.is_none_or(|b| b == badge) && self.status.is_none_or(|s| s == status)
    }
}

/// Whether every word of a search (lowercased, see [`DeskQuery::words`])
/// appears in the customer's name (None: "Unknown customer", as the desk
/// shows it), the PO, the notes or the order id.
pub fn desk_search_hits(
    words: &[String],
    customer_name: Option<&str>,
    customer_po: Option<&str>,
    notes: Option<&str>,
    id: Uuid,
) -> bool {
    if words.is_empty() {
        return true;
    }
    let hay = format!(
        "{} {} {} {}",
        customer_name.unwrap_or("Unknown customer"),
        customer_po.unwrap_or(""),
        notes.unwrap_or(""),
        id
    )
    .to_lowercase();
    words.iter().all(|w| hay.contains(w.as_str()))
}

/// One window of the desk's list: the rows from `offset`, newest change
/// first, and how many orders the filters and search let through.
#[derive(ts_rs::TS, Debug, Clone, Serialize)]
pub struct OrderPage {
    /// Orders in the filtered list (the list's length).
    pub total: usize,
    /// The first row's place in the list (0-based).
    pub offset: usize,
    pub rows: Vec<OrderSummary>,
    /// The place of [`DeskQuery::selected`] in the list (None: not in it).
    pub selected_index: Option<usize>,
}

/// One row of the order desk: an order as the user sees it, without its
/// lines and pending acts. A desk lists every order, and tens of thousands
/// of whole documents are too much to hand the UI at once (bench item 9h).
#[derive(ts_rs::TS, Debug, Clone, Serialize)]
pub struct OrderSummary {
    pub order: OrderHead,
    pub badge: Badge,
    /// Acts not yet on the server.
    pub pending_count: usize,
    pub line_count: usize,
    /// Units ordered over all lines.
    pub units: i64,
    /// An act of this order has waited 15 minutes or more while the desk
    /// was online (see `engine::views::STUCK_AFTER`).
    pub stuck: bool,
    /// A partner delivery of this order's events is dead-lettered on the
    /// server (as `OrderView::dead_lettered`).
    pub dead_lettered: bool,
    /// As `OrderView::needs_newer_app`.
    pub needs_newer_app: bool,
}

/// An order's header: its document without the lines.
#[derive(ts_rs::TS, Debug, Clone, Serialize)]
pub struct OrderHead {
    pub id: Uuid,
    pub customer_id: Uuid,
    pub customer_po: Option<String>,
    pub ship_window_start: Option<NaiveDate>,
    pub ship_window_end: Option<NaiveDate>,
    pub notes: Option<String>,
    pub status: OrderStatus,
    pub version: i64,
    pub invoice_id: Option<Uuid>,
    /// Σ qty_ordered × unit_price, as the view prices the lines.
    pub total: i64,
    pub updated_at: DateTime<Utc>,
    pub updated_by: Uuid,
    pub updated_by_name: String,
    pub created_at: DateTime<Utc>,
}

impl OrderSummary {
    /// `stuck_cutoff`: acts queued at or before it (ms) count as stuck.
    pub fn of(view: OrderView, stuck_cutoff: Option<i64>) -> Self {
        let stuck =
            stuck_cutoff.is_some_and(|cutoff| view.pending.iter().any(|m| m.created_at <= cutoff));
        let o = view.order;
        OrderSummary {
            stuck,
            dead_lettered: view.dead_lettered,
            needs_newer_app: view.needs_newer_app,
            badge: view.badge,
            pending_count: view.pending.len(),
            line_count: o.lines.len(),
            units: o.lines.iter().map(|l| l.qty_ordered).sum(),
            order: OrderHead {
                id: o.id,
                customer_id: o.customer_id,
                customer_po: o.customer_po,
                ship_window_start: o.ship_window_start,
                ship_window_end: o.ship_window_end,
                notes: o.notes,
                status: o.status,
                version: o.version,
                invoice_id: o.invoice_id,
                total: o.total,
                updated_at: o.updated_at,
                updated_by: o.updated_by,
                updated_by_name: o.updated_by_name,
                created_at: o.created_at,
            },
        }
    }
}

/// The view of one order from its mirror, its pending rows (in order), the
/// prices the desk expected for the lines added here, and whether the server
/// last said a partner delivery of it is dead-lettered.
pub fn order_view(
    mirror: Option<Order>,
    rows: &[Row],
    expected: &HashMap<Uuid, i64>,
    dead_lettered: bool,
    me: &Me,
) -> Option<OrderView> {
    let server_version = mirror.as_ref().map(|o| o.version);
    let priced: HashMap<Uuid, i64> = mirror
        .iter()
        .flat_map(|m| m.lines.iter().map(|l| (l.id, l.unit_price)))
        .collect();
    let mut doc = mirror;
    let mut fields = Vec::new();
    for row in rows.iter().filter(|r| shows(r.status)) {
        doc = apply(doc, &row.act, me);
        for f in fields_of(&row.act) {
            let name = f.name();
            if !fields.contains(&name) {
                fields.push(name);
            }
        }
    }
    let mut order = doc?;
    let mut line_prices = Vec::with_capacity(order.lines.len());
    for l in &mut order.lines {
        let server = priced.get(&l.id).copied();
        let mine = expected.get(&l.id).copied();
        l.unit_price = server.or(mine).unwrap_or(0);
        line_prices.push(LinePrice {
            line_id: l.id,
            expected: mine,
            priced_by_server: server.is_some(),
        });
    }
    order.total = order.lines.iter().fold(0i64, |sum, l| {
        sum.saturating_add(l.qty_ordered.saturating_mul(l.unit_price))
    });
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
        line_prices,
        server_version,
        badge,
        pending: rows.iter().map(PendingMark::of).collect(),
        pending_fields: fields,
        dead_lettered,
        needs_newer_app: false,
    })
}

/// A SKU as the user sees it: the server's position less what the user's
/// pending acts will allocate (plus what they will release).
#[derive(ts_rs::TS, Debug, Clone, Serialize)]
pub struct SkuView {
    #[serde(flatten)]
    pub sku: Sku,
    /// ATS after the pending acts (what the user can still promise).
    pub ats_local: i64,
    /// Units the pending acts allocate (negative: release).
    pub pending_allocation: i64,
    /// What the customer the search was made for would pay per unit on a
    /// line added now (their price list, else wholesale); None when the
    /// search named no customer.
    pub customer_price: Option<i64>,
}

/// `allocating`: the net units the user's pending acts allocate on this SKU.
pub fn sku_view(sku: Sku, allocating: i64) -> SkuView {
    SkuView {
        ats_local: sku.ats - allocating,
        pending_allocation: allocating,
        customer_price: None,
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

    fn create(order_id: Uuid) -> Act {
        Act::CreateOrder {
            order_id,
            customer_id: Uuid::now_v7(),
            customer_po: None,
            ship_window_start: None,
            ship_window_end: None,
            notes: None,
        }
    }

    #[test]
    fn every_act_adds_one_to_the_version() {
        let me = me();
        let (o, l) = (Uuid::now_v7(), Uuid::now_v7());
        let acts = [
            create(o),
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

    #[test]
    fn a_summary_keeps_the_header_and_counts_the_rest() {
        let me = me();
        let o = Uuid::now_v7();
        let mut doc = apply(
            None,
            &Act::CreateOrder {
                order_id: o,
                customer_id: Uuid::now_v7(),
                customer_po: Some("PO-7".into()),
                ship_window_start: None,
                ship_window_end: None,
                notes: Some("fax".into()),
            },
            &me,
        );
        for (qty, base) in [(5, 1), (7, 2)] {
            let add = Act::AddLine {
                order_id: o,
                line_id: Uuid::now_v7(),
                sku_id: Uuid::now_v7(),
                qty_ordered: qty,
                base_version: base,
            };
            doc = apply(doc, &add, &me);
        }
        let order = doc.expect("doc");
        let mark = PendingMark {
            seq: 1,
            idempotency_key: "k".into(),
            kind: "add_line",
            description: "add a line".into(),
            status: Status::Queued,
            attempts: 0,
            last_error: None,
            created_at: 0,
        };
        let view = OrderView {
            order: order.clone(),
            line_prices: vec![],
            server_version: None,
            badge: Badge::Pending,
            pending: vec![mark.clone(), mark],
            pending_fields: vec![],
            dead_lettered: true,
            needs_newer_app: false,
        };
        // Stuck only when an act was queued by the cutoff (and there is one).
        assert!(!OrderSummary::of(view.clone(), None).stuck);
        assert!(!OrderSummary::of(view.clone(), Some(-1)).stuck);
        assert!(OrderSummary::of(view.clone(), Some(0)).stuck);
        let summary = OrderSummary::of(view, None);
        assert_eq!(
            (summary.line_count, summary.units, summary.pending_count),
            (2, 12, 2)
        );
        assert_eq!(summary.badge, Badge::Pending);
        assert!(summary.dead_lettered, "the row carries the view's flag");
        assert_eq!(summary.order.id, o);
        assert_eq!(summary.order.customer_po.as_deref(), Some("PO-7"));
        assert_eq!(summary.order.notes.as_deref(), Some("fax"));
        assert_eq!(summary.order.version, order.version);
        let json = serde_json::to_value(&summary).expect("json");
        assert!(json["order"].get("lines").is_none(), "no lines on the wire");
    }

    #[test]
    fn a_release_of_more_than_is_held_shows_none_left_not_a_negative() {
        let me = me();
        let (o, l) = (Uuid::now_v7(), Uuid::now_v7());
        let mut doc = apply(None, &create(o), &me);
        let add = Act::AddLine {
            order_id: o,
            line_id: l,
            sku_id: Uuid::now_v7(),
            qty_ordered: 5,
            base_version: 1,
        };
        doc = apply(doc, &add, &me);
        doc = apply(
            doc,
            &Act::Allocate {
                order_id: o,
                line_id: l,
                qty: 2,
            },
            &me,
        );
        doc = apply(
            doc,
            &Act::Release {
                order_id: o,
                line_id: l,
                qty: 3,
            },
            &me,
        );
        assert_eq!(doc.expect("doc").lines[0].qty_allocated, 0);
    }
}
