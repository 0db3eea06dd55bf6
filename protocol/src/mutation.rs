//! The mutations of API.md's Mutations table as one type: the only route
//! table for them in the codebase.
//!
//! A desk queues a [`Mutation`] and sends it as [`Mutation::method`],
//! [`Mutation::path`] and [`Mutation::body`]; the server's REST handlers build
//! one from what axum routed, and batch push turns each item back into one
//! with [`Mutation::parse`]. Both then run [`Mutation::validate`], so a REST
//! call and a batch item with the same key are the same request, down to
//! their 400s.
//!
//! Serialized (serde), a mutation is a tagged object (`{"op": "allocate",
//! "order_id": …}`): the form a desk keeps it in while it is pending.

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::json::{self, BodyError};
use crate::model::{
    AddLine, BaseVersion, ChangeLine, CreateOrder, OrderHeaderSet, PatchOrder, Quantity,
};
use crate::problem::{FieldError, Problem, ProblemCode};

/// One mutation of an order. Base versions are the version of the order the
/// change was made on; allocation and creation carry none (their safety is
/// the atomic ATS check and the client-minted id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Mutation {
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

/// A mutation as it travels: the method, path and body of its route. A desk
/// keeps this frozen beside each pending act (its fingerprint is bound to the
/// act's idempotency key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRequest {
    pub method: String,
    pub path: String,
    pub body: Value,
}

/// Why a (method, path, body) is not a mutation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MutationError {
    /// No route of the Mutations table has this method and path (404).
    #[error("{method} {path} is not a mutation route")]
    NoSuchRoute { method: String, path: String },
    /// The path names no order or line: an id is not a UUID (404).
    #[error("no such resource: {path}")]
    NoSuchResource { path: String },
    /// The body is not the route's (400).
    #[error(transparent)]
    Body(#[from] BodyError),
}

impl MutationError {
    /// The API.md problem this answers with.
    pub fn to_problem(&self) -> Problem {
        match self {
            MutationError::Body(e) => e.to_problem(),
            other => Problem::new(ProblemCode::NotFound, other.to_string()),
        }
    }
}

impl From<FieldError> for MutationError {
    fn from(e: FieldError) -> Self {
        MutationError::Body(BodyError::Invalid(e))
    }
}

const MAX_PO: usize = 100;
const MAX_NOTES: usize = 4000;

impl Mutation {
    /// The HTTP method of its route.
    pub fn method(&self) -> &'static str {
        match self {
            Mutation::PatchOrder { .. } | Mutation::ChangeLine { .. } => "PATCH",
            _ => "POST",
        }
    }

    /// The path of its route, ids filled in.
    pub fn path(&self) -> String {
        let o = self.order_id();
        match self {
            Mutation::CreateOrder { .. } => "/v1/orders".to_owned(),
            Mutation::PatchOrder { .. } => format!("/v1/orders/{o}"),
            Mutation::AddLine { .. } => format!("/v1/orders/{o}/lines"),
            Mutation::ChangeLine { line_id, .. } => format!("/v1/orders/{o}/lines/{line_id}"),
            Mutation::RemoveLine { line_id, .. } => {
                format!("/v1/orders/{o}/lines/{line_id}/remove")
            }
            Mutation::Allocate { line_id, .. } => {
                format!("/v1/orders/{o}/lines/{line_id}/allocate")
            }
            Mutation::Release { line_id, .. } => format!("/v1/orders/{o}/lines/{line_id}/release"),
            Mutation::Confirm { .. } => format!("/v1/orders/{o}/confirm"),
            Mutation::Cancel { .. } => format!("/v1/orders/{o}/cancel"),
        }
    }

    /// The request body API.md gives its route.
    pub fn body(&self) -> Value {
        match self.clone() {
            Mutation::CreateOrder {
                order_id,
                customer_id,
                customer_po,
                ship_window_start,
                ship_window_end,
                notes,
            } => to_value(&CreateOrder {
                id: order_id,
                customer_id,
                customer_po,
                ship_window_start,
                ship_window_end,
                notes,
            }),
            Mutation::PatchOrder {
                base_version, set, ..
            } => to_value(&PatchOrder { base_version, set }),
            Mutation::AddLine {
                line_id,
                sku_id,
                qty_ordered,
                base_version,
                ..
            } => to_value(&AddLine {
                id: line_id,
                sku_id,
                qty_ordered,
                base_version,
            }),
            Mutation::ChangeLine {
                qty_ordered,
                base_version,
                ..
            } => to_value(&ChangeLine {
                base_version,
                qty_ordered,
            }),
            Mutation::RemoveLine { base_version, .. }
            | Mutation::Confirm { base_version, .. }
            | Mutation::Cancel { base_version, .. } => to_value(&BaseVersion { base_version }),
            Mutation::Allocate { qty, .. } | Mutation::Release { qty, .. } => {
                to_value(&Quantity { qty })
            }
        }
    }

    /// The request this mutation is sent as.
    pub fn request(&self) -> WireRequest {
        WireRequest {
            method: self.method().to_owned(),
            path: self.path(),
            body: self.body(),
        }
    }

    /// The mutation a request expresses (the inverse of [`Mutation::request`]).
    pub fn from_request(req: &WireRequest) -> Result<Mutation, MutationError> {
        Mutation::parse(&req.method, &req.path, &req.body)
    }

    /// The mutation a request names: its route from method and path, its
    /// fields from the body (unknown fields refused, the wrong one named).
    /// Values are judged by [`Mutation::validate`].
    pub fn parse(method: &str, path: &str, body: &Value) -> Result<Mutation, MutationError> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let id = |s: &str| -> Result<Uuid, MutationError> {
            s.parse().map_err(|_| MutationError::NoSuchResource {
                path: path.to_owned(),
            })
        };
        let method = method.to_ascii_uppercase();
        let mutation = match (method.as_str(), segments.as_slice()) {
            ("POST", ["v1", "orders"]) => {
                let b: CreateOrder = json::typed(body)?;
                Mutation::CreateOrder {
                    order_id: b.id,
                    customer_id: b.customer_id,
                    customer_po: b.customer_po,
                    ship_window_start: b.ship_window_start,
                    ship_window_end: b.ship_window_end,
                    notes: b.notes,
                }
            }
            ("PATCH", ["v1", "orders", o]) => {
                let order_id = id(o)?;
                let PatchOrder { base_version, set } = json::typed(body)?;
                Mutation::PatchOrder {
                    order_id,
                    base_version,
                    set,
                }
            }
            ("POST", ["v1", "orders", o, "lines"]) => {
                let order_id = id(o)?;
                let b: AddLine = json::typed(body)?;
                Mutation::AddLine {
                    order_id,
                    line_id: b.id,
                    sku_id: b.sku_id,
                    qty_ordered: b.qty_ordered,
                    base_version: b.base_version,
                }
            }
            ("PATCH", ["v1", "orders", o, "lines", l]) => {
                let (order_id, line_id) = (id(o)?, id(l)?);
                let ChangeLine {
                    base_version,
                    qty_ordered,
                } = json::typed(body)?;
                Mutation::ChangeLine {
                    order_id,
                    line_id,
                    qty_ordered,
                    base_version,
                }
            }
            ("POST", ["v1", "orders", o, "lines", l, action]) => {
                let (order_id, line_id) = (id(o)?, id(l)?);
                match *action {
                    "remove" => {
                        let BaseVersion { base_version } = json::typed(body)?;
                        Mutation::RemoveLine {
                            order_id,
                            line_id,
                            base_version,
                        }
                    }
                    "allocate" => {
                        let Quantity { qty } = json::typed(body)?;
                        Mutation::Allocate {
                            order_id,
                            line_id,
                            qty,
                        }
                    }
                    "release" => {
                        let Quantity { qty } = json::typed(body)?;
                        Mutation::Release {
                            order_id,
                            line_id,
                            qty,
                        }
                    }
                    _ => return Err(no_such_route(&method, path)),
                }
            }
            ("POST", ["v1", "orders", o, action @ ("confirm" | "cancel")]) => {
                let order_id = id(o)?;
                let BaseVersion { base_version } = json::typed(body)?;
                if *action == "confirm" {
                    Mutation::Confirm {
                        order_id,
                        base_version,
                    }
                } else {
                    Mutation::Cancel {
                        order_id,
                        base_version,
                    }
                }
            }
            _ => return Err(no_such_route(&method, path)),
        };
        Ok(mutation)
    }

    /// The order a request is about, read from the path or (for a create) the
    /// body, even when the request is otherwise malformed: a batch uses it to
    /// hold back later items on the same order.
    pub fn order_hint(path: &str, body: &Value) -> Option<Uuid> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match segments.as_slice() {
            ["v1", "orders"] => body.get("id")?.as_str()?.parse().ok(),
            ["v1", "orders", id, ..] => id.parse().ok(),
            _ => None,
        }
    }

    /// The checks that need no database: lengths, ranges, orderings within
    /// the body.
    pub fn validate(&self) -> Result<(), FieldError> {
        match self {
            Mutation::CreateOrder {
                customer_po,
                notes,
                ship_window_start,
                ship_window_end,
                ..
            } => {
                text("customer_po", customer_po.as_deref(), MAX_PO)?;
                text("notes", notes.as_deref(), MAX_NOTES)?;
                if let (Some(start), Some(end)) = (ship_window_start, ship_window_end) {
                    if end < start {
                        return Err(invalid("ship_window_end", "is before ship_window_start"));
                    }
                }
            }
            Mutation::PatchOrder {
                base_version, set, ..
            } => {
                if set.customer_id.is_none()
                    && set.customer_po.is_none()
                    && set.ship_window_start.is_none()
                    && set.ship_window_end.is_none()
                    && set.notes.is_none()
                {
                    return Err(invalid("set", "names no field to change"));
                }
                text(
                    "set.customer_po",
                    set.customer_po.clone().flatten().as_deref(),
                    MAX_PO,
                )?;
                text(
                    "set.notes",
                    set.notes.clone().flatten().as_deref(),
                    MAX_NOTES,
                )?;
                at_least_one("base_version", *base_version)?;
            }
            Mutation::AddLine {
                base_version,
                qty_ordered,
                ..
            }
            | Mutation::ChangeLine {
                base_version,
                qty_ordered,
                ..
            } => {
                at_least_one("base_version", *base_version)?;
                at_least_one("qty_ordered", *qty_ordered)?;
            }
            Mutation::RemoveLine { base_version, .. }
            | Mutation::Confirm { base_version, .. }
            | Mutation::Cancel { base_version, .. } => {
                at_least_one("base_version", *base_version)?;
            }
            Mutation::Allocate { qty, .. } | Mutation::Release { qty, .. } => {
                at_least_one("qty", *qty)?;
            }
        }
        Ok(())
    }

    pub fn order_id(&self) -> Uuid {
        match self {
            Mutation::CreateOrder { order_id, .. }
            | Mutation::PatchOrder { order_id, .. }
            | Mutation::AddLine { order_id, .. }
            | Mutation::ChangeLine { order_id, .. }
            | Mutation::RemoveLine { order_id, .. }
            | Mutation::Allocate { order_id, .. }
            | Mutation::Release { order_id, .. }
            | Mutation::Confirm { order_id, .. }
            | Mutation::Cancel { order_id, .. } => *order_id,
        }
    }

    /// The line this mutation is about, if any.
    pub fn line_id(&self) -> Option<Uuid> {
        match self {
            Mutation::AddLine { line_id, .. }
            | Mutation::ChangeLine { line_id, .. }
            | Mutation::RemoveLine { line_id, .. }
            | Mutation::Allocate { line_id, .. }
            | Mutation::Release { line_id, .. } => Some(*line_id),
            _ => None,
        }
    }

    /// The same mutation on another base version (unchanged for those
    /// without one).
    pub fn with_base(&self, base: i64) -> Mutation {
        let mut m = self.clone();
        match &mut m {
            Mutation::PatchOrder { base_version, .. }
            | Mutation::AddLine { base_version, .. }
            | Mutation::ChangeLine { base_version, .. }
            | Mutation::RemoveLine { base_version, .. }
            | Mutation::Confirm { base_version, .. }
            | Mutation::Cancel { base_version, .. } => *base_version = base,
            _ => {}
        }
        m
    }

    /// A short name of the kind of mutation (for logs and listings).
    pub fn kind(&self) -> &'static str {
        match self {
            Mutation::CreateOrder { .. } => "create_order",
            Mutation::PatchOrder { .. } => "edit_order",
            Mutation::AddLine { .. } => "add_line",
            Mutation::ChangeLine { .. } => "change_line",
            Mutation::RemoveLine { .. } => "remove_line",
            Mutation::Allocate { .. } => "allocate",
            Mutation::Release { .. } => "release",
            Mutation::Confirm { .. } => "confirm",
            Mutation::Cancel { .. } => "cancel",
        }
    }

    /// One line a person can read off a printout.
    pub fn describe(&self) -> String {
        let short = |id: &Uuid| id.to_string()[..8].to_owned();
        match self {
            Mutation::CreateOrder {
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
            Mutation::PatchOrder { set, .. } => {
                let fields: Vec<String> = header_changes(set)
                    .into_iter()
                    .map(|(field, value)| format!("{field} = {value}"))
                    .collect();
                format!("edit {}", fields.join(", "))
            }
            Mutation::AddLine {
                line_id,
                sku_id,
                qty_ordered,
                ..
            } => format!(
                "add line {} of SKU {} × {qty_ordered}",
                short(line_id),
                short(sku_id)
            ),
            Mutation::ChangeLine {
                line_id,
                qty_ordered,
                ..
            } => format!("set line {} quantity to {qty_ordered}", short(line_id)),
            Mutation::RemoveLine { line_id, .. } => format!("remove line {}", short(line_id)),
            Mutation::Allocate { line_id, qty, .. } => {
                format!("allocate {qty} on line {}", short(line_id))
            }
            Mutation::Release { line_id, qty, .. } => {
                format!("release {qty} on line {}", short(line_id))
            }
            Mutation::Confirm { .. } => "confirm".to_owned(),
            Mutation::Cancel { .. } => "cancel".to_owned(),
        }
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

fn no_such_route(method: &str, path: &str) -> MutationError {
    MutationError::NoSuchRoute {
        method: method.to_owned(),
        path: path.to_owned(),
    }
}

fn invalid(field: &str, message: &str) -> FieldError {
    FieldError {
        field: field.to_owned(),
        message: message.to_owned(),
    }
}

fn text(field: &str, value: Option<&str>, max: usize) -> Result<(), FieldError> {
    match value {
        Some(v) if v.chars().count() > max => {
            Err(invalid(field, &format!("at most {max} characters")))
        }
        _ => Ok(()),
    }
}

fn at_least_one(field: &str, v: i64) -> Result<(), FieldError> {
    if v < 1 {
        Err(invalid(field, "must be at least 1"))
    } else {
        Ok(())
    }
}

fn to_value<T: Serialize>(v: &T) -> Value {
    // Our own plain structs always serialize; Null keeps this total.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn every_mutation() -> Vec<Mutation> {
        let (o, l, s, c) = (
            Uuid::now_v7(),
            Uuid::now_v7(),
            Uuid::now_v7(),
            Uuid::now_v7(),
        );
        vec![
            Mutation::CreateOrder {
                order_id: o,
                customer_id: c,
                customer_po: Some("PO-7".into()),
                ship_window_start: NaiveDate::from_ymd_opt(2026, 3, 1),
                ship_window_end: None,
                notes: None,
            },
            Mutation::PatchOrder {
                order_id: o,
                base_version: 3,
                set: OrderHeaderSet {
                    notes: Some(None),
                    customer_po: Some(Some("X".into())),
                    ..Default::default()
                },
            },
            Mutation::AddLine {
                order_id: o,
                line_id: l,
                sku_id: s,
                qty_ordered: 4,
                base_version: 4,
            },
            Mutation::ChangeLine {
                order_id: o,
                line_id: l,
                qty_ordered: 5,
                base_version: 5,
            },
            Mutation::Allocate {
                order_id: o,
                line_id: l,
                qty: 2,
            },
            Mutation::Release {
                order_id: o,
                line_id: l,
                qty: 1,
            },
            Mutation::RemoveLine {
                order_id: o,
                line_id: l,
                base_version: 8,
            },
            Mutation::Confirm {
                order_id: o,
                base_version: 9,
            },
            Mutation::Cancel {
                order_id: o,
                base_version: 10,
            },
        ]
    }

    #[test]
    fn every_mutation_parses_back_from_its_request() {
        for m in every_mutation() {
            let back = Mutation::parse(m.method(), &m.path(), &m.body()).expect("parse");
            assert_eq!(back, m);
            assert_eq!(back.order_id(), m.order_id());
            m.validate().expect("valid");
        }
    }

    #[test]
    fn the_stored_form_round_trips_and_keeps_absent_apart_from_null() {
        for m in every_mutation() {
            let json = serde_json::to_value(&m).expect("serialize");
            let back: Mutation = serde_json::from_value(json.clone()).expect("deserialize");
            assert_eq!(back, m, "{json}");
        }
        let patch = &every_mutation()[1];
        let json = serde_json::to_value(patch).expect("serialize");
        assert_eq!(json["op"], "patch_order");
        assert_eq!(json["set"]["notes"], Value::Null);
        assert!(json["set"].get("ship_window_end").is_none());
    }

    #[test]
    fn bad_values_name_their_field_and_unknown_routes_are_404() {
        let o = Uuid::now_v7();
        let m = Mutation::parse(
            "post",
            &format!("/v1/orders/{o}/lines/{o}/allocate"),
            &json!({"qty": 0}),
        )
        .expect("routes");
        assert_eq!(m.validate().expect_err("qty").field, "qty");
        let err =
            Mutation::parse("DELETE", &format!("/v1/orders/{o}"), &json!({})).expect_err("route");
        assert_eq!(err.to_problem().code, ProblemCode::NotFound);
        let err = Mutation::parse(
            "POST",
            "/v1/orders/nope/confirm",
            &json!({"base_version": 1}),
        )
        .expect_err("id");
        assert_eq!(err.to_problem().code, ProblemCode::NotFound);
        let err = Mutation::parse("POST", &format!("/v1/orders/{o}/confirm"), &json!({}))
            .expect_err("body");
        assert_eq!(err.to_problem().code, ProblemCode::ValidationFailed);
        assert_eq!(
            Mutation::order_hint("/v1/orders", &json!({"id": o.to_string()})),
            Some(o)
        );
    }
}
