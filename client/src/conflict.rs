//! Conflicts, field by field: what the user changed (mine), what the server's
//! document now says (theirs), against what the user was looking at (base);
//! and which of the user's held acts survive a resolution.
//!
//! Fields are the header fields, the status, and each line as one field
//! (`line:<id>`: its quantity ordered, its allocation, its presence).
//! Quantities are never auto-merged: a line both sides touched collides even
//! when the numbers agree, and only a person may pick. A text field both
//! sides set to the same value does not collide (there is nothing to pick).
//! Rebase is allowed only when nothing collides.
//!
//! Confirm and cancel decide money: a confirm invoices the order's total and
//! a cancel gives up the sale. When the user's pending confirm or cancel was
//! made on a version whose lines (quantities, allocations, prices) the
//! server has since changed, the status collides even though only one side
//! touched it: the user decided on one total and the order now has another,
//! so a person must choose with both totals in front of them.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, NaiveDate, Utc};
use holdfast_protocol::model::{Order, OrderHeaderSet};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::act::Act;

/// One field of an order, as conflicts see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    CustomerId,
    CustomerPo,
    ShipWindowStart,
    ShipWindowEnd,
    Notes,
    Status,
    Line(Uuid),
}

impl Field {
    pub const HEADER: [Field; 5] = [
        Field::CustomerId,
        Field::CustomerPo,
        Field::ShipWindowStart,
        Field::ShipWindowEnd,
        Field::Notes,
    ];

    pub fn name(self) -> String {
        match self {
            Field::CustomerId => "customer_id".into(),
            Field::CustomerPo => "customer_po".into(),
            Field::ShipWindowStart => "ship_window_start".into(),
            Field::ShipWindowEnd => "ship_window_end".into(),
            Field::Notes => "notes".into(),
            Field::Status => "status".into(),
            Field::Line(id) => format!("line:{id}"),
        }
    }

    pub fn parse(s: &str) -> Option<Field> {
        Some(match s {
            "customer_id" => Field::CustomerId,
            "customer_po" => Field::CustomerPo,
            "ship_window_start" => Field::ShipWindowStart,
            "ship_window_end" => Field::ShipWindowEnd,
            "notes" => Field::Notes,
            "status" => Field::Status,
            other => Field::Line(other.strip_prefix("line:")?.parse().ok()?),
        })
    }

    /// Quantities (a line) are always a person's choice.
    pub fn is_quantity(self) -> bool {
        matches!(self, Field::Line(_))
    }

    /// The field's value in `o` (a line: its SKU and quantities, or null).
    pub fn value(self, o: &Order) -> Value {
        match self {
            Field::CustomerId => json!(o.customer_id),
            Field::CustomerPo => json!(o.customer_po),
            Field::ShipWindowStart => json!(o.ship_window_start),
            Field::ShipWindowEnd => json!(o.ship_window_end),
            Field::Notes => json!(o.notes),
            Field::Status => json!(o.status),
            Field::Line(id) => o
                .lines
                .iter()
                .find(|l| l.id == id)
                .map(|l| {
                    json!({"sku_id": l.sku_id, "qty_ordered": l.qty_ordered, "qty_allocated": l.qty_allocated})
                })
                .unwrap_or(Value::Null),
        }
    }
}

fn set_fields(set: &OrderHeaderSet) -> Vec<Field> {
    let mut out = Vec::new();
    if set.customer_id.is_some() {
        out.push(Field::CustomerId);
    }
    if set.customer_po.is_some() {
        out.push(Field::CustomerPo);
    }
    if set.ship_window_start.is_some() {
        out.push(Field::ShipWindowStart);
    }
    if set.ship_window_end.is_some() {
        out.push(Field::ShipWindowEnd);
    }
    if set.notes.is_some() {
        out.push(Field::Notes);
    }
    out
}

/// The fields an act changes.
pub fn fields_of(act: &Act) -> Vec<Field> {
    match act {
        Act::CreateOrder { .. } => Vec::new(),
        Act::PatchOrder { set, .. } => set_fields(set),
        Act::AddLine { line_id, .. }
        | Act::ChangeLine { line_id, .. }
        | Act::RemoveLine { line_id, .. }
        | Act::Allocate { line_id, .. }
        | Act::Release { line_id, .. } => vec![Field::Line(*line_id)],
        Act::Confirm { .. } => vec![Field::Status],
        // Cancelling releases every allocation, so it touches every line too;
        // counting the status is enough to make it collide with their status
        // change, and their line edits do not stop a cancel.
        Act::Cancel { .. } => vec![Field::Status],
    }
}

/// One field of a conflict.
#[derive(ts_rs::TS, Debug, Clone, Serialize)]
pub struct FieldDiff {
    pub field: String,
    pub base: Value,
    pub mine: Value,
    pub theirs: Value,
    pub mine_changed: bool,
    pub theirs_changed: bool,
    /// Both changed it differently (or it is a quantity both touched).
    pub collides: bool,
    pub quantity: bool,
}

/// Compares, for every field either side may have changed.
pub fn diff(base: &Order, mine: &Order, theirs: &Order, touched: &[Field]) -> Vec<FieldDiff> {
    let mut fields: BTreeSet<Field> = Field::HEADER.into_iter().collect();
    fields.insert(Field::Status);
    for o in [base, mine, theirs] {
        fields.extend(o.lines.iter().map(|l| Field::Line(l.id)));
    }
    fields.extend(touched.iter().copied());
    let money_decision = touched.contains(&Field::Status) && lines_changed(base, theirs);
    let mut out = Vec::new();
    for f in fields {
        let (b, m, t) = (f.value(base), f.value(mine), f.value(theirs));
        let mine_changed = touched.contains(&f);
        let theirs_changed = t != b;
        if !mine_changed && !theirs_changed {
            continue;
        }
        let both = mine_changed && theirs_changed;
        let collides =
            (both && (f.is_quantity() || m != t)) || (f == Field::Status && money_decision);
        out.push(FieldDiff {
            field: f.name(),
            base: b,
            mine: m,
            theirs: t,
            mine_changed,
            theirs_changed,
            collides,
            quantity: f.is_quantity(),
        });
    }
    out
}

/// The server's lines differ from the ones the user decided on: a line
/// added, removed, or with another quantity, allocation or price — or a
/// total that moved for any other reason.
fn lines_changed(base: &Order, theirs: &Order) -> bool {
    let key = |o: &Order| {
        let mut lines: Vec<_> = o
            .lines
            .iter()
            .map(|l| (l.id, l.sku_id, l.qty_ordered, l.qty_allocated, l.unit_price))
            .collect();
        lines.sort();
        lines
    };
    base.total != theirs.total || key(base) != key(theirs)
}

/// A conflict as the user sees it.
#[derive(ts_rs::TS, Debug, Clone, Serialize)]
pub struct ConflictView {
    pub order_id: Uuid,
    /// Who changed the order on the server, and when.
    pub changed_by: String,
    pub changed_at: DateTime<Utc>,
    pub your_base_version: i64,
    pub current_version: i64,
    pub fields: Vec<FieldDiff>,
    /// Nothing collides: re-issuing my changes on theirs keeps both.
    pub can_rebase: bool,
    /// The user's acts on this order that wait for the resolution.
    pub held: usize,
    pub base: Order,
    pub mine: Order,
    pub theirs: Order,
}

/// Which side wins a field.
#[derive(ts_rs::TS, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    Mine,
    Theirs,
}

/// What the user decided about a conflict.
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// Re-issue my changes on the current version (only if nothing collides).
    Rebase,
    /// Per field; every colliding field must be named.
    Choose(BTreeMap<String, Choice>),
    /// Drop all my pending acts on this order.
    DiscardMine,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("these fields changed on both sides; choose mine or theirs for each: {0:?}")]
    Collides(Vec<String>),
    #[error("no such field in this conflict: {0}")]
    UnknownField(String),
    #[error(
        "that choice makes the ship window end ({end}) before it starts ({start}); \
         take both dates from the same side"
    )]
    ReversedShipWindow { start: NaiveDate, end: NaiveDate },
}

/// Filters the user's held acts (in order) by the decision: `None` drops an
/// act, `Some` keeps it (a patch may lose some of its fields).
pub fn plan(
    acts: &[Act],
    diffs: &[FieldDiff],
    resolution: &Resolution,
) -> Result<Vec<Option<Act>>, ResolveError> {
    let choices: BTreeMap<Field, Choice> = match resolution {
        Resolution::DiscardMine => return Ok(acts.iter().map(|_| None).collect()),
        Resolution::Rebase => {
            let colliding: Vec<String> = diffs
                .iter()
                .filter(|d| d.collides)
                .map(|d| d.field.clone())
                .collect();
            if !colliding.is_empty() {
                return Err(ResolveError::Collides(colliding));
            }
            BTreeMap::new()
        }
        Resolution::Choose(map) => {
            let mut parsed = BTreeMap::new();
            for (name, choice) in map {
                let field =
                    Field::parse(name).ok_or_else(|| ResolveError::UnknownField(name.clone()))?;
                if !diffs.iter().any(|d| d.field == *name) {
                    return Err(ResolveError::UnknownField(name.clone()));
                }
                parsed.insert(field, *choice);
            }
            let missing: Vec<String> = diffs
                .iter()
                .filter(|d| d.collides)
                .filter(|d| Field::parse(&d.field).is_none_or(|f| !parsed.contains_key(&f)))
                .map(|d| d.field.clone())
                .collect();
            if !missing.is_empty() {
                return Err(ResolveError::Collides(missing));
            }
            parsed
        }
    };
    let keep = |f: Field| -> bool {
        if let Some(choice) = choices.get(&f) {
            return *choice == Choice::Mine;
        }
        // Both sides already agree on a text field: nothing of mine to send.
        let agreed = diffs
            .iter()
            .any(|d| d.field == f.name() && d.mine_changed && d.theirs_changed && !d.collides);
        !agreed
    };
    Ok(acts
        .iter()
        .map(|act| match act {
            Act::PatchOrder {
                order_id,
                base_version,
                set,
            } => {
                let mut kept = set.clone();
                if !keep(Field::CustomerId) {
                    kept.customer_id = None;
                }
                if !keep(Field::CustomerPo) {
                    kept.customer_po = None;
                }
                if !keep(Field::ShipWindowStart) {
                    kept.ship_window_start = None;
                }
                if !keep(Field::ShipWindowEnd) {
                    kept.ship_window_end = None;
                }
                if !keep(Field::Notes) {
                    kept.notes = None;
                }
                let keep_any = !set_fields(&kept).is_empty();
                keep_any.then_some(Act::PatchOrder {
                    order_id: *order_id,
                    base_version: *base_version,
                    set: kept,
                })
            }
            other => fields_of(other)
                .into_iter()
                .all(keep)
                .then(|| other.clone()),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_protocol::model::{Line, OrderStatus};

    fn order(version: i64) -> Order {
        Order {
            id: Uuid::nil(),
            customer_id: Uuid::nil(),
            customer_po: Some("PO-1".into()),
            ship_window_start: None,
            ship_window_end: None,
            notes: None,
            status: OrderStatus::Draft,
            version,
            invoice_id: None,
            lines: vec![Line {
                id: Uuid::from_u128(7),
                sku_id: Uuid::from_u128(9),
                qty_ordered: 5,
                qty_allocated: 0,
                unit_price: 4200,
            }],
            total: 5 * 4200,
            updated_at: Utc::now(),
            updated_by: Uuid::nil(),
            updated_by_name: "Priya".into(),
            created_at: Utc::now(),
        }
    }

    fn patch(notes: Option<&str>, po: Option<&str>) -> Act {
        Act::PatchOrder {
            order_id: Uuid::nil(),
            base_version: 1,
            set: OrderHeaderSet {
                notes: notes.map(|n| Some(n.to_owned())),
                customer_po: po.map(|p| Some(p.to_owned())),
                ..Default::default()
            },
        }
    }

    #[test]
    fn disjoint_fields_rebase() {
        let base = order(1);
        let mut mine = base.clone();
        mine.notes = Some("rush".into());
        let mut theirs = base.clone();
        theirs.customer_po = Some("PO-2".into());
        theirs.version = 2;
        let acts = [patch(Some("rush"), None)];
        let d = diff(&base, &mine, &theirs, &fields_of(&acts[0]));
        assert!(d.iter().all(|f| !f.collides), "{d:?}");
        let planned = plan(&acts, &d, &Resolution::Rebase).expect("rebase");
        assert_eq!(planned, vec![Some(acts[0].clone())]);
    }

    #[test]
    fn same_field_needs_a_choice_and_theirs_drops_mine() {
        let base = order(1);
        let mut mine = base.clone();
        mine.notes = Some("rush".into());
        let mut theirs = base.clone();
        theirs.notes = Some("hold".into());
        let acts = [patch(Some("rush"), Some("PO-9"))];
        let d = diff(&base, &mine, &theirs, &fields_of(&acts[0]));
        assert_eq!(
            plan(&acts, &d, &Resolution::Rebase),
            Err(ResolveError::Collides(vec!["notes".into()]))
        );
        let choose = Resolution::Choose([("notes".to_owned(), Choice::Theirs)].into());
        let planned = plan(&acts, &d, &choose).expect("choose");
        assert_eq!(planned, vec![Some(patch(None, Some("PO-9")))]);
        let choose = Resolution::Choose([("notes".to_owned(), Choice::Mine)].into());
        assert_eq!(
            plan(&acts, &d, &choose).expect("choose"),
            vec![Some(acts[0].clone())]
        );
    }

    #[test]
    fn quantities_collide_even_when_they_agree() {
        let base = order(1);
        let line = Uuid::from_u128(7);
        let mut mine = base.clone();
        mine.lines[0].qty_ordered = 8;
        let mut theirs = base.clone();
        theirs.lines[0].qty_ordered = 8;
        let acts = [Act::ChangeLine {
            order_id: Uuid::nil(),
            line_id: line,
            qty_ordered: 8,
            base_version: 1,
        }];
        let d = diff(&base, &mine, &theirs, &fields_of(&acts[0]));
        let f = d
            .iter()
            .find(|f| f.field == format!("line:{line}"))
            .expect("line");
        assert!(f.collides && f.quantity);
        assert!(plan(&acts, &d, &Resolution::Rebase).is_err());
    }

    #[test]
    fn discard_drops_everything() {
        let acts = [patch(Some("a"), None), patch(None, Some("b"))];
        assert_eq!(
            plan(&acts, &[], &Resolution::DiscardMine).expect("discard"),
            vec![None, None]
        );
    }

    fn confirm() -> Act {
        Act::Confirm {
            order_id: Uuid::nil(),
            base_version: 1,
        }
    }

    fn status_of(d: &[FieldDiff]) -> &FieldDiff {
        d.iter().find(|f| f.field == "status").expect("status row")
    }

    #[test]
    fn a_confirm_over_changed_quantities_is_a_persons_choice() {
        let base = order(1);
        let mut mine = base.clone();
        mine.status = OrderStatus::Confirmed;
        let mut theirs = base.clone();
        theirs.version = 2;
        theirs.lines[0].qty_ordered = 7;
        theirs.total = 7 * 4200;
        let acts = [confirm()];
        let d = diff(&base, &mine, &theirs, &fields_of(&acts[0]));
        assert!(status_of(&d).collides, "{d:?}");
        assert_eq!(
            plan(&acts, &d, &Resolution::Rebase),
            Err(ResolveError::Collides(vec!["status".into()]))
        );
        let keep = Resolution::Choose([("status".to_owned(), Choice::Mine)].into());
        assert_eq!(plan(&acts, &d, &keep).expect("mine"), vec![Some(confirm())]);
        let drop = Resolution::Choose([("status".to_owned(), Choice::Theirs)].into());
        assert_eq!(plan(&acts, &d, &drop).expect("theirs"), vec![None]);
    }

    #[test]
    fn a_cancel_over_a_changed_allocation_or_price_is_a_persons_choice() {
        let base = order(1);
        let cancel = Act::Cancel {
            order_id: Uuid::nil(),
            base_version: 1,
        };
        let mut mine = base.clone();
        mine.status = OrderStatus::Cancelled;
        let mut allocated = base.clone();
        allocated.lines[0].qty_allocated = 5;
        let mut repriced = base.clone();
        repriced.lines[0].unit_price = 3900;
        for theirs in [allocated, repriced] {
            let d = diff(&base, &mine, &theirs, &fields_of(&cancel));
            assert!(status_of(&d).collides, "{d:?}");
        }
    }

    #[test]
    fn a_confirm_over_a_header_change_still_rebases() {
        let base = order(1);
        let mut mine = base.clone();
        mine.status = OrderStatus::Confirmed;
        let mut theirs = base.clone();
        theirs.notes = Some("call before delivery".into());
        let acts = [confirm()];
        let d = diff(&base, &mine, &theirs, &fields_of(&acts[0]));
        assert!(d.iter().all(|f| !f.collides), "{d:?}");
        assert_eq!(
            plan(&acts, &d, &Resolution::Rebase).expect("rebase"),
            vec![Some(confirm())]
        );
    }
}
