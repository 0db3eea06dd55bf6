//! A user's act as the pending queue keeps it: a typed, versioned envelope
//! (what the optimistic view and conflict resolution read) next to the exact
//! API.md request it becomes (what the server sees, bound to its key).
//!
//! # Schema versions and upcasting
//!
//! Every pending row records the envelope schema it was written with. A row
//! queued by an older app is read through the chain of upcasters, one per
//! schema change, so it still applies after an upgrade:
//!
//! - schema 1: the API request alone (method, path, body); no typed act.
//! - schema 2 (current): the typed [`Act`] beside the request.
//!   Upcaster 1 → 2 derives the act from the request.
//!
//! An upcaster rewrites only the envelope. The request (method, path, body)
//! is frozen when the act is queued: its fingerprint is bound to the
//! idempotency key, and a server may already have run it, so changing a byte
//! would turn the retry of a done act into `idempotency_key_reused`.
//!
//! To change the envelope: bump [`SCHEMA`], append an upcaster to
//! [`UPCASTERS`] that turns the previous shape into the new one, and add a
//! test that reads a row of the previous shape.

use chrono::NaiveDate;
use holdfast_protocol::model::{AddLine, ChangeLine, CreateOrder, OrderHeaderSet, PatchOrder};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uuid::Uuid;

/// The envelope schema this build writes.
pub const SCHEMA: u32 = 2;

/// One user act on an order. Base versions are the version of the order the
/// user was looking at (see [`crate::engine`] for the rule).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Act {
    CreateOrder {
        order_id: Uuid,
        customer_id: Uuid,
        #[serde(default)]
        customer_po: Option<String>,
        #[serde(default)]
        ship_window_start: Option<NaiveDate>,
        #[serde(default)]
        ship_window_end: Option<NaiveDate>,
        #[serde(default)]
        notes: Option<String>,
    },
    PatchOrder {
        order_id: Uuid,
        base_version: i64,
        set: OrderHeaderSet,
    },
    AddLine {
        order_id: Uuid,
        line_id: Uuid,
        sku_id: Uuid,
        qty_ordered: i64,
        base_version: i64,
    },
    ChangeLine {
        order_id: Uuid,
        line_id: Uuid,
        qty_ordered: i64,
        base_version: i64,
    },
    RemoveLine {
        order_id: Uuid,
        line_id: Uuid,
        base_version: i64,
    },
    Allocate {
        order_id: Uuid,
        line_id: Uuid,
        qty: i64,
    },
    Release {
        order_id: Uuid,
        line_id: Uuid,
        qty: i64,
    },
    Confirm {
        order_id: Uuid,
        base_version: i64,
    },
    Cancel {
        order_id: Uuid,
        base_version: i64,
    },
}

/// An API.md mutation request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRequest {
    pub method: String,
    pub path: String,
    pub body: Value,
}

#[derive(Debug, thiserror::Error)]
pub enum ActError {
    #[error("pending act has schema {0}, newer than this build's {SCHEMA}; upgrade holdfast")]
    TooNew(u32),
    #[error("pending act has unknown schema {0}")]
    Unknown(u32),
    #[error("pending act cannot be read: {0}")]
    Unreadable(String),
}

impl Act {
    pub fn order_id(&self) -> Uuid {
        match self {
            Act::CreateOrder { order_id, .. }
            | Act::PatchOrder { order_id, .. }
            | Act::AddLine { order_id, .. }
            | Act::ChangeLine { order_id, .. }
            | Act::RemoveLine { order_id, .. }
            | Act::Allocate { order_id, .. }
            | Act::Release { order_id, .. }
            | Act::Confirm { order_id, .. }
            | Act::Cancel { order_id, .. } => *order_id,
        }
    }

    /// The line this act is about, if any.
    pub fn line_id(&self) -> Option<Uuid> {
        match self {
            Act::AddLine { line_id, .. }
            | Act::ChangeLine { line_id, .. }
            | Act::RemoveLine { line_id, .. }
            | Act::Allocate { line_id, .. }
            | Act::Release { line_id, .. } => Some(*line_id),
            _ => None,
        }
    }

    /// The base version the request carries (allocation and creation carry
    /// none: their safety is the ATS check and the client-minted id).
    pub fn wire_base(&self) -> Option<i64> {
        match self {
            Act::PatchOrder { base_version, .. }
            | Act::AddLine { base_version, .. }
            | Act::ChangeLine { base_version, .. }
            | Act::RemoveLine { base_version, .. }
            | Act::Confirm { base_version, .. }
            | Act::Cancel { base_version, .. } => Some(*base_version),
            _ => None,
        }
    }

    /// The same act on another base version (no-op for acts without one).
    pub fn with_base(&self, base: i64) -> Act {
        let mut act = self.clone();
        match &mut act {
            Act::PatchOrder { base_version, .. }
            | Act::AddLine { base_version, .. }
            | Act::ChangeLine { base_version, .. }
            | Act::RemoveLine { base_version, .. }
            | Act::Confirm { base_version, .. }
            | Act::Cancel { base_version, .. } => *base_version = base,
            _ => {}
        }
        act
    }

    /// A short name of the kind of act.
    pub fn kind(&self) -> &'static str {
        match self {
            Act::CreateOrder { .. } => "create_order",
            Act::PatchOrder { .. } => "edit_order",
            Act::AddLine { .. } => "add_line",
            Act::ChangeLine { .. } => "change_line",
            Act::RemoveLine { .. } => "remove_line",
            Act::Allocate { .. } => "allocate",
            Act::Release { .. } => "release",
            Act::Confirm { .. } => "confirm",
            Act::Cancel { .. } => "cancel",
        }
    }

    /// One line a person can read off a printout.
    pub fn describe(&self) -> String {
        let short = |id: &Uuid| id.to_string()[..8].to_owned();
        match self {
            Act::CreateOrder {
                customer_id,
                customer_po,
                ..
            } => format!(
                "new order for customer {}{}",
                short(customer_id),
                customer_po
                    .as_ref()
                    .map(|po| format!(", PO {po}"))
                    .unwrap_or_default()
            ),
            Act::PatchOrder { set, .. } => {
                let fields: Vec<String> = header_changes(set)
                    .into_iter()
                    .map(|(field, value)| format!("{field} = {value}"))
                    .collect();
                format!("edit {}", fields.join(", "))
            }
            Act::AddLine {
                line_id,
                sku_id,
                qty_ordered,
                ..
            } => format!(
                "add line {} of SKU {} × {qty_ordered}",
                short(line_id),
                short(sku_id)
            ),
            Act::ChangeLine {
                line_id,
                qty_ordered,
                ..
            } => format!("set line {} quantity to {qty_ordered}", short(line_id)),
            Act::RemoveLine { line_id, .. } => format!("remove line {}", short(line_id)),
            Act::Allocate { line_id, qty, .. } => {
                format!("allocate {qty} on line {}", short(line_id))
            }
            Act::Release { line_id, qty, .. } => {
                format!("release {qty} on line {}", short(line_id))
            }
            Act::Confirm { .. } => "confirm".to_owned(),
            Act::Cancel { .. } => "cancel".to_owned(),
        }
    }

    /// The API.md request for this act.
    pub fn request(&self) -> WireRequest {
        let o = self.order_id();
        let (method, path, body) = match self {
            Act::CreateOrder {
                order_id,
                customer_id,
                customer_po,
                ship_window_start,
                ship_window_end,
                notes,
            } => {
                let body = CreateOrder {
                    id: *order_id,
                    customer_id: *customer_id,
                    customer_po: customer_po.clone(),
                    ship_window_start: *ship_window_start,
                    ship_window_end: *ship_window_end,
                    notes: notes.clone(),
                };
                ("POST", "/v1/orders".to_owned(), to_value(&body))
            }
            Act::PatchOrder {
                base_version, set, ..
            } => (
                "PATCH",
                format!("/v1/orders/{o}"),
                to_value(&PatchOrder {
                    base_version: *base_version,
                    set: set.clone(),
                }),
            ),
            Act::AddLine {
                line_id,
                sku_id,
                qty_ordered,
                base_version,
                ..
            } => (
                "POST",
                format!("/v1/orders/{o}/lines"),
                to_value(&AddLine {
                    id: *line_id,
                    sku_id: *sku_id,
                    qty_ordered: *qty_ordered,
                    base_version: *base_version,
                }),
            ),
            Act::ChangeLine {
                line_id,
                qty_ordered,
                base_version,
                ..
            } => (
                "PATCH",
                format!("/v1/orders/{o}/lines/{line_id}"),
                to_value(&ChangeLine {
                    base_version: *base_version,
                    qty_ordered: *qty_ordered,
                }),
            ),
            Act::RemoveLine {
                line_id,
                base_version,
                ..
            } => (
                "POST",
                format!("/v1/orders/{o}/lines/{line_id}/remove"),
                json!({ "base_version": base_version }),
            ),
            Act::Allocate { line_id, qty, .. } => (
                "POST",
                format!("/v1/orders/{o}/lines/{line_id}/allocate"),
                json!({ "qty": qty }),
            ),
            Act::Release { line_id, qty, .. } => (
                "POST",
                format!("/v1/orders/{o}/lines/{line_id}/release"),
                json!({ "qty": qty }),
            ),
            Act::Confirm { base_version, .. } => (
                "POST",
                format!("/v1/orders/{o}/confirm"),
                json!({ "base_version": base_version }),
            ),
            Act::Cancel { base_version, .. } => (
                "POST",
                format!("/v1/orders/{o}/cancel"),
                json!({ "base_version": base_version }),
            ),
        };
        WireRequest {
            method: method.to_owned(),
            path,
            body,
        }
    }

    /// The act an API.md request expresses (the inverse of [`Act::request`]).
    pub fn from_request(req: &WireRequest) -> Result<Act, ActError> {
        let bad = |why: &str| ActError::Unreadable(format!("{} {}: {why}", req.method, req.path));
        let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        let id = |s: &str| s.parse::<Uuid>().map_err(|_| bad("id is not a UUID"));
        let body = &req.body;
        let field = |name: &str| body.get(name).cloned().unwrap_or(Value::Null);
        let int = |name: &str| field(name).as_i64().ok_or_else(|| bad(name));
        let method = req.method.to_ascii_uppercase();
        let act = match (method.as_str(), segments.as_slice()) {
            ("POST", ["v1", "orders"]) => {
                let b: CreateOrder =
                    serde_json::from_value(body.clone()).map_err(|e| bad(&e.to_string()))?;
                Act::CreateOrder {
                    order_id: b.id,
                    customer_id: b.customer_id,
                    customer_po: b.customer_po,
                    ship_window_start: b.ship_window_start,
                    ship_window_end: b.ship_window_end,
                    notes: b.notes,
                }
            }
            ("PATCH", ["v1", "orders", o]) => {
                let b: PatchOrder =
                    serde_json::from_value(body.clone()).map_err(|e| bad(&e.to_string()))?;
                Act::PatchOrder {
                    order_id: id(o)?,
                    base_version: b.base_version,
                    set: b.set,
                }
            }
            ("POST", ["v1", "orders", o, "lines"]) => {
                let b: AddLine =
                    serde_json::from_value(body.clone()).map_err(|e| bad(&e.to_string()))?;
                Act::AddLine {
                    order_id: id(o)?,
                    line_id: b.id,
                    sku_id: b.sku_id,
                    qty_ordered: b.qty_ordered,
                    base_version: b.base_version,
                }
            }
            ("PATCH", ["v1", "orders", o, "lines", l]) => Act::ChangeLine {
                order_id: id(o)?,
                line_id: id(l)?,
                qty_ordered: int("qty_ordered")?,
                base_version: int("base_version")?,
            },
            ("POST", ["v1", "orders", o, "lines", l, "remove"]) => Act::RemoveLine {
                order_id: id(o)?,
                line_id: id(l)?,
                base_version: int("base_version")?,
            },
            ("POST", ["v1", "orders", o, "lines", l, "allocate"]) => Act::Allocate {
                order_id: id(o)?,
                line_id: id(l)?,
                qty: int("qty")?,
            },
            ("POST", ["v1", "orders", o, "lines", l, "release"]) => Act::Release {
                order_id: id(o)?,
                line_id: id(l)?,
                qty: int("qty")?,
            },
            ("POST", ["v1", "orders", o, "confirm"]) => Act::Confirm {
                order_id: id(o)?,
                base_version: int("base_version")?,
            },
            ("POST", ["v1", "orders", o, "cancel"]) => Act::Cancel {
                order_id: id(o)?,
                base_version: int("base_version")?,
            },
            _ => return Err(bad("not a mutation route")),
        };
        Ok(act)
    }
}

/// The header fields a patch sets, with their new values as text.
pub fn header_changes(set: &OrderHeaderSet) -> Vec<(&'static str, String)> {
    fn text<T: ToString>(v: &Option<T>) -> String {
        v.as_ref()
            .map(|v| v.to_string())
            .unwrap_or_else(|| "(none)".to_owned())
    }
    let mut out = Vec::new();
    if let Some(c) = &set.customer_id {
        out.push(("customer_id", c.to_string()));
    }
    if let Some(v) = &set.customer_po {
        out.push(("customer_po", text(v)));
    }
    if let Some(v) = &set.ship_window_start {
        out.push(("ship_window_start", text(v)));
    }
    if let Some(v) = &set.ship_window_end {
        out.push(("ship_window_end", text(v)));
    }
    if let Some(v) = &set.notes {
        out.push(("notes", text(v)));
    }
    out
}

fn to_value<T: Serialize>(v: &T) -> Value {
    // Our own plain structs always serialize; Null keeps this total.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A pending row's envelope as stored, before upcasting.
#[derive(Debug, Clone)]
pub struct Stored {
    pub schema: u32,
    /// The typed act (absent in schema 1).
    pub act: Option<Value>,
    pub request: WireRequest,
}

/// Turns the envelope of schema `n` into that of `n + 1`; index `n - 1`.
type Upcaster = fn(Option<Value>, &WireRequest) -> Result<Value, ActError>;

/// One upcaster per schema change, oldest first.
const UPCASTERS: &[Upcaster] = &[upcast_1_to_2];

/// Schema 1 kept only the request; the act is what the request says.
fn upcast_1_to_2(_act: Option<Value>, request: &WireRequest) -> Result<Value, ActError> {
    let act = Act::from_request(request)?;
    serde_json::to_value(act).map_err(|e| ActError::Unreadable(e.to_string()))
}

/// Reads a stored envelope of any known schema as the current [`Act`].
pub fn upcast(stored: &Stored) -> Result<Act, ActError> {
    if stored.schema > SCHEMA {
        return Err(ActError::TooNew(stored.schema));
    }
    if stored.schema == 0 {
        return Err(ActError::Unknown(0));
    }
    let mut act = stored.act.clone();
    for step in &UPCASTERS[(stored.schema - 1) as usize..] {
        act = Some(step(act, &stored.request)?);
    }
    let act = act.ok_or(ActError::Unknown(stored.schema))?;
    serde_json::from_value(act).map_err(|e| ActError::Unreadable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_act() -> Vec<Act> {
        let (o, l, s, c) = (
            Uuid::now_v7(),
            Uuid::now_v7(),
            Uuid::now_v7(),
            Uuid::now_v7(),
        );
        vec![
            Act::CreateOrder {
                order_id: o,
                customer_id: c,
                customer_po: Some("PO-7".into()),
                ship_window_start: NaiveDate::from_ymd_opt(2026, 3, 1),
                ship_window_end: None,
                notes: None,
            },
            Act::PatchOrder {
                order_id: o,
                base_version: 3,
                set: OrderHeaderSet {
                    notes: Some(None),
                    customer_po: Some(Some("X".into())),
                    ..Default::default()
                },
            },
            Act::AddLine {
                order_id: o,
                line_id: l,
                sku_id: s,
                qty_ordered: 4,
                base_version: 4,
            },
            Act::ChangeLine {
                order_id: o,
                line_id: l,
                qty_ordered: 5,
                base_version: 5,
            },
            Act::Allocate {
                order_id: o,
                line_id: l,
                qty: 2,
            },
            Act::Release {
                order_id: o,
                line_id: l,
                qty: 1,
            },
            Act::RemoveLine {
                order_id: o,
                line_id: l,
                base_version: 8,
            },
            Act::Confirm {
                order_id: o,
                base_version: 9,
            },
            Act::Cancel {
                order_id: o,
                base_version: 10,
            },
        ]
    }

    #[test]
    fn request_and_back_is_the_same_act() {
        for act in every_act() {
            let req = act.request();
            assert_eq!(Act::from_request(&req).expect("parse"), act, "{req:?}");
        }
    }

    #[test]
    fn envelope_round_trips_and_keeps_absent_apart_from_null() {
        for act in every_act() {
            let json = serde_json::to_value(&act).expect("serialize");
            let back: Act = serde_json::from_value(json.clone()).expect("deserialize");
            assert_eq!(back, act, "{json}");
        }
        let patch = &every_act()[1];
        let json = serde_json::to_value(patch).expect("serialize");
        assert_eq!(json["set"]["notes"], Value::Null);
        assert!(json["set"].get("ship_window_end").is_none());
    }

    #[test]
    fn a_schema_1_row_upcasts_to_the_current_act() {
        for act in every_act() {
            let stored = Stored {
                schema: 1,
                act: None,
                request: act.request(),
            };
            assert_eq!(upcast(&stored).expect("upcast"), act);
        }
    }

    #[test]
    fn a_row_from_a_newer_app_is_refused_not_guessed() {
        let act = &every_act()[0];
        let stored = Stored {
            schema: SCHEMA + 1,
            act: Some(serde_json::to_value(act).expect("json")),
            request: act.request(),
        };
        assert!(matches!(upcast(&stored), Err(ActError::TooNew(_))));
    }
}
