//! A user's act as the pending queue keeps it: the protocol [`Mutation`] it
//! asks the server for (what the optimistic view and conflict resolution
//! read), next to the exact API.md request it becomes (what the server sees,
//! bound to its key).
//!
//! # Schema versions and upcasting
//!
//! Every pending row records the envelope schema it was written with. A row
//! queued by an older app is read through the chain of upcasters, one per
//! schema change, so it still applies after an upgrade:
//!
//! - schema 1: the API request alone (method, path, body); no typed act.
//! - schema 2: the typed act (a [`Mutation`] in its serde form) beside the
//!   request. Upcaster 1 → 2 derives the act from the request.
//! - schema 3 (current): the act in an [`Envelope`] that also names the app
//!   version that queued it (what support asks first about a stuck or
//!   quarantined act). Upcaster 2 → 3 wraps the act, with no version.
//!
//! An upcaster rewrites only the envelope. The request (method, path, body)
//! is frozen when the act is queued: its fingerprint is bound to the
//! idempotency key, and a server may already have run it, so changing a byte
//! would turn the retry of a done act into `idempotency_key_reused`.
//!
//! To change the envelope: bump [`SCHEMA`], append an upcaster to
//! `UPCASTERS` that turns the previous shape into the new one, and add a
//! test that reads a row of the previous shape.

use holdfast_protocol::mutation::Mutation;
pub use holdfast_protocol::mutation::{header_changes, WireRequest};
use serde_json::Value;

/// The envelope schema this build writes.
pub const SCHEMA: u32 = 3;

/// One user act on an order: the mutation it asks the server for. Base
/// versions are the version of the order the user was looking at (see
/// [`crate::engine`] for the rule).
pub type Act = Mutation;

#[derive(Debug, thiserror::Error)]
pub enum ActError {
    #[error("pending act has schema {0}, newer than this build's {SCHEMA}; upgrade holdfast")]
    TooNew(u32),
    #[error("pending act has unknown schema {0}")]
    Unknown(u32),
    #[error("pending act cannot be read: {0}")]
    Unreadable(String),
}

/// The `act` column of schema 3: the act and who queued it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Envelope {
    /// The version of the app that queued the act (None: queued before
    /// schema 3, when it was not recorded).
    pub app: Option<String>,
    pub mutation: Act,
}

impl Envelope {
    /// `act`, as this build queues it.
    pub fn new(act: &Act) -> Envelope {
        Envelope {
            app: Some(env!("CARGO_PKG_VERSION").to_owned()),
            mutation: act.clone(),
        }
    }
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
const UPCASTERS: &[Upcaster] = &[upcast_1_to_2, upcast_2_to_3];

/// Schema 1 kept only the request; the act is what the request says.
fn upcast_1_to_2(_act: Option<Value>, request: &WireRequest) -> Result<Value, ActError> {
    let act = Act::from_request(request)
        .map_err(|e| ActError::Unreadable(format!("{} {}: {e}", request.method, request.path)))?;
    serde_json::to_value(act).map_err(|e| ActError::Unreadable(e.to_string()))
}

/// Schema 2 kept the act alone; nobody recorded which app queued it.
fn upcast_2_to_3(act: Option<Value>, _request: &WireRequest) -> Result<Value, ActError> {
    let act = act.ok_or(ActError::Unknown(2))?;
    Ok(serde_json::json!({ "app": null, "mutation": act }))
}

/// Reads a stored envelope of any known schema as the current [`Act`].
pub fn upcast(stored: &Stored) -> Result<Act, ActError> {
    upcast_envelope(stored).map(|e| e.mutation)
}

/// Reads a pending row's `act` column, written with envelope schema
/// `schema`, as the current [`Envelope`]. A row of this build's schema is
/// read straight from its text; an older one goes through
/// [`upcast_envelope`], with the row's request, which only then is decoded.
/// `request`'s own error comes out as it is.
pub fn read_envelope<E: From<ActError>>(
    schema: u32,
    act: Option<&str>,
    request: impl FnOnce() -> Result<WireRequest, E>,
) -> Result<Envelope, E> {
    let unreadable = |e: serde_json::Error| ActError::Unreadable(e.to_string());
    if let (SCHEMA, Some(text)) = (schema, act) {
        return Ok(serde_json::from_str(text).map_err(unreadable)?);
    }
    let act = act
        .map(serde_json::from_str)
        .transpose()
        .map_err(unreadable)?;
    Ok(upcast_envelope(&Stored {
        schema,
        act,
        request: request()?,
    })?)
}

/// Reads a stored envelope of any known schema as the current [`Envelope`].
pub fn upcast_envelope(stored: &Stored) -> Result<Envelope, ActError> {
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
    use chrono::NaiveDate;
    use holdfast_protocol::model::OrderHeaderSet;
    use uuid::Uuid;

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

    /// Schema 2 rows hold the act's serde form: rows already queued must
    /// keep reading as the same act whatever the protocol type does.
    #[test]
    fn a_schema_2_row_reads_as_written() {
        let (o, l, s) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let written = serde_json::json!({
            "op": "add_line", "order_id": o, "line_id": l, "sku_id": s,
            "qty_ordered": 4, "base_version": 7,
        });
        let act = Act::AddLine {
            order_id: o,
            line_id: l,
            sku_id: s,
            qty_ordered: 4,
            base_version: 7,
        };
        let stored = Stored {
            schema: 2,
            act: Some(written.clone()),
            request: act.request(),
        };
        assert_eq!(upcast(&stored).expect("upcast"), act);
        assert_eq!(serde_json::to_value(&act).expect("json"), written);
        let patch = serde_json::json!({
            "op": "patch_order", "order_id": o, "base_version": 3, "set": {"notes": null},
        });
        let read: Act = serde_json::from_value(patch.clone()).expect("patch row");
        assert_eq!(serde_json::to_value(&read).expect("json"), patch);
    }

    /// Schema 3 wraps the act with the app that queued it; a schema 2 row
    /// reads as the same act, queued by an app nobody recorded.
    #[test]
    fn a_schema_2_row_upcasts_to_an_envelope_without_an_app() {
        for act in every_act() {
            let two = Stored {
                schema: 2,
                act: Some(serde_json::to_value(&act).expect("json")),
                request: act.request(),
            };
            let read = upcast_envelope(&two).expect("upcast");
            assert_eq!((read.app, read.mutation), (None, act.clone()));
            let three = Stored {
                schema: 3,
                act: Some(serde_json::to_value(Envelope::new(&act)).expect("json")),
                request: act.request(),
            };
            let read = upcast_envelope(&three).expect("read");
            assert_eq!(read.app.as_deref(), Some(env!("CARGO_PKG_VERSION")));
            assert_eq!(read.mutation, act);
        }
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
