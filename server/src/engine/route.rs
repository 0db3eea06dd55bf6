//! Which mutation a (method, path, body) names. Both transports resolve
//! through here, so a REST call and a batch item with the same key are the
//! same request, down to their 400s.

use holdfast_protocol::model::{
    AddLine, BaseVersion, ChangeLine, CreateOrder, PatchOrder, Quantity,
};
use holdfast_protocol::problem::ProblemCode;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::error::ApiError;

#[derive(Debug, Clone)]
pub enum Mutation {
    CreateOrder(CreateOrder),
    PatchOrder {
        order_id: Uuid,
        body: PatchOrder,
    },
    AddLine {
        order_id: Uuid,
        body: AddLine,
    },
    ChangeLine {
        order_id: Uuid,
        line_id: Uuid,
        body: ChangeLine,
    },
    RemoveLine {
        order_id: Uuid,
        line_id: Uuid,
        body: BaseVersion,
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
        body: BaseVersion,
    },
    Cancel {
        order_id: Uuid,
        body: BaseVersion,
    },
}

impl Mutation {
    pub fn order_id(&self) -> Uuid {
        match self {
            Mutation::CreateOrder(b) => b.id,
            Mutation::PatchOrder { order_id, .. }
            | Mutation::AddLine { order_id, .. }
            | Mutation::ChangeLine { order_id, .. }
            | Mutation::RemoveLine { order_id, .. }
            | Mutation::Allocate { order_id, .. }
            | Mutation::Release { order_id, .. }
            | Mutation::Confirm { order_id, .. }
            | Mutation::Cancel { order_id, .. } => *order_id,
        }
    }
}

/// The order a request is about, read from the path or (for a create) the
/// body, even when the request is otherwise malformed: a batch uses it to hold
/// back later items on the same order.
pub fn order_hint(path: &str, body: &Value) -> Option<Uuid> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["v1", "orders"] => body.get("id")?.as_str()?.parse().ok(),
        ["v1", "orders", id, ..] => id.parse().ok(),
        _ => None,
    }
}

pub fn parse(method: &str, path: &str, body: &Value) -> Result<Mutation, ApiError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let id = |s: &str| -> Result<Uuid, ApiError> {
        s.parse().map_err(|_| {
            ApiError::problem(ProblemCode::NotFound, format!("no such resource: {path}"))
        })
    };
    let method = method.to_ascii_uppercase();
    let mutation = match (method.as_str(), segments.as_slice()) {
        ("POST", ["v1", "orders"]) => Mutation::CreateOrder(typed(body)?),
        ("PATCH", ["v1", "orders", o]) => Mutation::PatchOrder {
            order_id: id(o)?,
            body: typed(body)?,
        },
        ("POST", ["v1", "orders", o, "lines"]) => Mutation::AddLine {
            order_id: id(o)?,
            body: typed(body)?,
        },
        ("PATCH", ["v1", "orders", o, "lines", l]) => Mutation::ChangeLine {
            order_id: id(o)?,
            line_id: id(l)?,
            body: typed(body)?,
        },
        ("POST", ["v1", "orders", o, "lines", l, "remove"]) => Mutation::RemoveLine {
            order_id: id(o)?,
            line_id: id(l)?,
            body: typed(body)?,
        },
        ("POST", ["v1", "orders", o, "lines", l, "allocate"]) => Mutation::Allocate {
            order_id: id(o)?,
            line_id: id(l)?,
            qty: positive_qty(body)?,
        },
        ("POST", ["v1", "orders", o, "lines", l, "release"]) => Mutation::Release {
            order_id: id(o)?,
            line_id: id(l)?,
            qty: positive_qty(body)?,
        },
        ("POST", ["v1", "orders", o, "confirm"]) => Mutation::Confirm {
            order_id: id(o)?,
            body: typed(body)?,
        },
        ("POST", ["v1", "orders", o, "cancel"]) => Mutation::Cancel {
            order_id: id(o)?,
            body: typed(body)?,
        },
        _ => {
            return Err(ApiError::problem(
                ProblemCode::NotFound,
                format!("{method} {path} is not a mutation route"),
            ))
        }
    };
    validate(&mutation)?;
    Ok(mutation)
}

fn typed<T: DeserializeOwned>(body: &Value) -> Result<T, ApiError> {
    // Through bytes so the field-naming parser of the HTTP layer applies.
    let bytes = serde_json::to_vec(body).map_err(|e| ApiError::Internal(e.into()))?;
    crate::http::parse_json(&bytes)
}

fn positive_qty(body: &Value) -> Result<i64, ApiError> {
    let Quantity { qty } = typed(body)?;
    if qty < 1 {
        return Err(ApiError::validation("qty", "must be at least 1"));
    }
    Ok(qty)
}

const MAX_PO: usize = 100;
const MAX_NOTES: usize = 4000;

/// Checks that need no database: lengths, ranges, orderings within the body.
fn validate(m: &Mutation) -> Result<(), ApiError> {
    let text = |field: &str, value: &Option<String>, max: usize| match value {
        Some(v) if v.chars().count() > max => Err(ApiError::validation(
            field,
            format!("at most {max} characters"),
        )),
        _ => Ok(()),
    };
    match m {
        Mutation::CreateOrder(b) => {
            text("customer_po", &b.customer_po, MAX_PO)?;
            text("notes", &b.notes, MAX_NOTES)?;
            if let (Some(start), Some(end)) = (b.ship_window_start, b.ship_window_end) {
                if end < start {
                    return Err(ApiError::validation(
                        "ship_window_end",
                        "is before ship_window_start",
                    ));
                }
            }
        }
        Mutation::PatchOrder { body, .. } => {
            let s = &body.set;
            if s.customer_id.is_none()
                && s.customer_po.is_none()
                && s.ship_window_start.is_none()
                && s.ship_window_end.is_none()
                && s.notes.is_none()
            {
                return Err(ApiError::validation("set", "names no field to change"));
            }
            text("set.customer_po", &s.customer_po.clone().flatten(), MAX_PO)?;
            text("set.notes", &s.notes.clone().flatten(), MAX_NOTES)?;
            base("base_version", body.base_version)?;
        }
        Mutation::AddLine { body, .. } => {
            base("base_version", body.base_version)?;
            if body.qty_ordered < 1 {
                return Err(ApiError::validation("qty_ordered", "must be at least 1"));
            }
        }
        Mutation::ChangeLine { body, .. } => {
            base("base_version", body.base_version)?;
            if body.qty_ordered < 1 {
                return Err(ApiError::validation("qty_ordered", "must be at least 1"));
            }
        }
        Mutation::RemoveLine { body, .. }
        | Mutation::Confirm { body, .. }
        | Mutation::Cancel { body, .. } => {
            base("base_version", body.base_version)?;
        }
        Mutation::Allocate { .. } | Mutation::Release { .. } => {}
    }
    Ok(())
}

fn base(field: &str, v: i64) -> Result<(), ApiError> {
    if v < 1 {
        Err(ApiError::validation(field, "must be at least 1"))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_every_route() {
        let o = Uuid::now_v7();
        let l = Uuid::now_v7();
        let cases = [
            (
                "POST",
                format!("/v1/orders/{o}/lines/{l}/allocate"),
                json!({"qty": 2}),
            ),
            (
                "POST",
                format!("/v1/orders/{o}/lines/{l}/release"),
                json!({"qty": 2}),
            ),
            (
                "PATCH",
                format!("/v1/orders/{o}/lines/{l}"),
                json!({"base_version": 1, "qty_ordered": 3}),
            ),
            (
                "POST",
                format!("/v1/orders/{o}/confirm"),
                json!({"base_version": 1}),
            ),
        ];
        for (method, path, body) in cases {
            let m = parse(method, &path, &body).expect(&path);
            assert_eq!(m.order_id(), o);
        }
    }

    #[test]
    fn rejects_bad_quantities_and_unknown_routes() {
        let o = Uuid::now_v7();
        let err = parse(
            "POST",
            &format!("/v1/orders/{o}/lines/{o}/allocate"),
            &json!({"qty": 0}),
        )
        .expect_err("qty");
        assert_eq!(err.to_problem().code, ProblemCode::ValidationFailed);
        let err = parse("DELETE", &format!("/v1/orders/{o}"), &json!({})).expect_err("route");
        assert_eq!(err.to_problem().code, ProblemCode::NotFound);
        assert_eq!(
            order_hint("/v1/orders", &json!({"id": o.to_string()})),
            Some(o)
        );
    }
}
