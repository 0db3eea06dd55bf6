//! What this build cannot read, kept rather than lost (issue 15 items 12
//! and 13): documents the server sent in a shape a newer app knows
//! ([`unreadable`]), and the user's own acts this build cannot read or
//! send (pending rows in quarantine). Both are listed in words, and both
//! can be saved whole to a file for an administrator.

use std::path::Path;

use chrono::{DateTime, Utc};
use rusqlite::Transaction;
use serde::Serialize;
use uuid::Uuid;

use super::{Engine, Error, Result};
use crate::act;
use crate::store::{customers, now_ms, orders, pending, skus, unreadable, StoreError};

/// Which of the two a held item is.
#[derive(ts_rs::TS, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldKind {
    /// The server's latest version of a record, which this app cannot show.
    Document,
    /// One of the user's changes, which this app cannot read or send.
    Act,
}

/// One thing this build holds without being able to read it.
#[derive(ts_rs::TS, Debug, Clone, Serialize)]
pub struct HeldItem {
    pub kind: HeldKind,
    /// What it is, in words ("Order for Bolt & Co, PO 4471").
    pub what: String,
    /// Why it is held and what happens next, in words.
    pub why: String,
    /// The order it belongs to, to open it (never shown).
    pub order_id: Option<Uuid>,
    pub since: DateTime<Utc>,
}

/// The file [`Engine::export_held`] writes: everything held, raw.
#[derive(Debug, Serialize)]
struct Export {
    exported_at: DateTime<Utc>,
    store: String,
    /// The build that wrote the file, and the newest act format it reads.
    app_version: &'static str,
    act_schema: u32,
    acts: Vec<pending::Quarantined>,
    documents: Vec<unreadable::Doc>,
}

fn order_words(
    tx: &Transaction<'_>,
    id: Uuid,
    doc: Option<&serde_json::Value>,
) -> Result<String, StoreError> {
    // What the desk last could read of it, else what the raw document says.
    let mirror = orders::get(tx, id)?;
    let customer_id = mirror
        .as_ref()
        .map(|o| o.customer_id)
        .or_else(|| doc.and_then(|d| d.get("customer_id")?.as_str()?.parse().ok()));
    let po = mirror
        .as_ref()
        .and_then(|o| o.customer_po.clone())
        .or_else(|| doc.and_then(|d| d.get("customer_po")?.as_str().map(str::to_owned)));
    let customer = match customer_id {
        Some(c) => customers::get(tx, c)?.map(|c| c.name),
        None => None,
    };
    let mut words = match customer {
        Some(name) => format!("Order for {name}"),
        None => "An order".to_owned(),
    };
    if let Some(po) = po.filter(|p| !p.is_empty()) {
        words.push_str(&format!(", PO {po}"));
    }
    Ok(words)
}

fn document_words(tx: &Transaction<'_>, doc: &unreadable::Doc) -> Result<String, StoreError> {
    let text = |field: &str| {
        doc.doc
            .get(field)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    Ok(match doc.kind.as_str() {
        "order" => order_words(tx, doc.id, Some(&doc.doc))?,
        "sku" => match skus::get(tx, doc.id)? {
            Some(s) => format!("Product {} {} {}", s.style, s.color, s.size),
            None => match (text("style"), text("color"), text("size")) {
                (Some(st), Some(c), Some(sz)) => format!("Product {st} {c} {sz}"),
                _ => "A product".to_owned(),
            },
        },
        "customer" => match customers::get(tx, doc.id)?
            .map(|c| c.name)
            .or_else(|| text("name"))
        {
            Some(name) => format!("Customer {name}"),
            None => "A customer".to_owned(),
        },
        "invoice" => {
            let order = doc
                .doc
                .get("order_id")
                .and_then(|v| v.as_str()?.parse::<Uuid>().ok());
            match order {
                Some(o) => format!("The invoice of {}", lower_first(&order_words(tx, o, None)?)),
                None => "An invoice".to_owned(),
            }
        }
        "price_list" => match text("name") {
            Some(name) => format!("Price list {name}"),
            None => "A price list".to_owned(),
        },
        _ => "A record of a kind this version does not know".to_owned(),
    })
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

fn time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

impl Engine {
    /// Everything held: kept documents first (oldest first), then the
    /// user's acts in quarantine in the order they were made.
    pub fn held(&self) -> Result<Vec<HeldItem>> {
        Ok(self.inner.store.read(|tx| {
            let mut out = Vec::new();
            for doc in unreadable::all(tx)? {
                let shown_before = match doc.kind.as_str() {
                    "order" => orders::get(tx, doc.id)?.is_some(),
                    "sku" => skus::get(tx, doc.id)?.is_some(),
                    "customer" => customers::get(tx, doc.id)?.is_some(),
                    _ => false,
                };
                let why = if shown_before {
                    "The server has a newer version than this version of Holdfast can show. \
                     Update Holdfast to see it; until then you see it as it was."
                } else {
                    "The server sent it in a form this version of Holdfast cannot show. \
                     It is kept: update Holdfast to see it."
                };
                out.push(HeldItem {
                    kind: HeldKind::Document,
                    what: document_words(tx, &doc)?,
                    why: why.to_owned(),
                    order_id: (doc.kind == "order").then_some(doc.id),
                    since: time(doc.received_at),
                });
            }
            for row in pending::quarantined(tx)? {
                let order_id = row.order_id.parse::<Uuid>().ok();
                let what = match order_id {
                    Some(o) => format!("A change to {}", lower_first(&order_words(tx, o, None)?)),
                    None => "A change to an order".to_owned(),
                };
                let why = if row.schema_version > i64::from(act::SCHEMA) {
                    "Made with a newer version of Holdfast, which this one cannot read. \
                     It is kept, and goes to the server once Holdfast is updated; \
                     later changes to this order wait behind it."
                } else {
                    "It is damaged and cannot be sent. It is kept: save a copy for your \
                     administrator. Later changes to this order wait behind it."
                };
                out.push(HeldItem {
                    kind: HeldKind::Act,
                    what,
                    why: why.to_owned(),
                    order_id,
                    since: time(row.created_at),
                });
            }
            Ok(out)
        })?)
    }

    /// Writes everything held, raw and whole (each act's key, request and
    /// base version; each document as the server sent it; and why), to
    /// `path` as JSON, for an administrator. Written to a temporary file
    /// first and renamed, so `path` is never half a file. Returns how many
    /// items it holds.
    pub fn export_held(&self, path: &Path) -> Result<usize> {
        let export = self.inner.store.read(|tx| {
            Ok(Export {
                exported_at: time(now_ms()),
                store: self.inner.store.path().display().to_string(),
                app_version: env!("CARGO_PKG_VERSION"),
                act_schema: act::SCHEMA,
                acts: pending::quarantined(tx)?,
                documents: unreadable::all(tx)?,
            })
        })?;
        let n = export.acts.len() + export.documents.len();
        let text = serde_json::to_vec_pretty(&export)
            .map_err(|e| Error::Invalid(format!("cannot write the export: {e}")))?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".part");
        let tmp = std::path::PathBuf::from(tmp);
        let failed =
            |e: std::io::Error| Error::Invalid(format!("cannot save {}: {e}", path.display()));
        std::fs::write(&tmp, text).map_err(failed)?;
        std::fs::rename(&tmp, path).map_err(failed)?;
        Ok(n)
    }
}
