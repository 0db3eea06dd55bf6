//! The catalog: the SKU CSV import and SKU edits (API.md v1.1).
//!
//! An import is three steps, so that "all or nothing" is decided before the
//! first write: [`parse`] reads the file (every bad cell named by line and
//! column), [`plan`] matches each row against the tenant's catalog (by code,
//! else by style/colour/size) and finds what would collide, and [`apply_in_tx`]
//! writes the plan set-wise. The HTTP import runs all three in its one keyed
//! transaction; `holdfast-server catalog import` (`catalog_cli.rs`) plans the
//! whole file once, then applies it page by page with a checkpoint.
//!
//! Hot rows: a SKU's feed version and its partner-event sequence live on its
//! `sku_positions` row, the row every allocation locks. An import touches
//! that row only for SKUs whose catalog fields really changed, in one
//! statement in ascending id order (the lock order of the engine), as the
//! last writes before the commit — so an allocation waits at most for the
//! end of the import, never for its parsing, planning or catalog writes.
//!
//! Here: the rows and the plan the steps hand on, and the two requests
//! (import, patch); each step is a module of its own (`parse`, `plan`,
//! `apply`), and the unit tests are in `tests.rs`.

mod apply;
mod parse;
mod plan;
#[cfg(test)]
mod tests;

use holdfast_protocol::admin::{ImportSummary, SkuPatch};
use serde_json::{json, Value};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::engine::Done;
use crate::error::Error;

pub use apply::apply_in_tx;
pub use parse::parse;
pub use plan::plan;

pub use super::sheet::MAX_ROWS;
/// Longest style, colour, size or code.
const MAX_TEXT: usize = 100;

/// One data row of a catalog file, valid on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The file line it came from (the header is line 1).
    pub line: u64,
    pub code: Option<String>,
    pub style: String,
    pub color: String,
    pub size: String,
    pub wholesale_price: i64,
    pub msrp: i64,
    /// Absent or empty: a new SKU is active, an existing one keeps its state.
    pub active: Option<bool>,
}

/// The catalog fields of a SKU as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
struct Stored {
    id: Uuid,
    code: Option<String>,
    style: String,
    color: String,
    size: String,
    wholesale_price: i64,
    msrp: i64,
    active: bool,
}

impl Stored {
    /// The field names that differ, in the file's column order.
    fn changed(&self, after: &Stored) -> Vec<&'static str> {
        let mut changed = Vec::new();
        let pairs = [
            ("code", self.code != after.code),
            ("style", self.style != after.style),
            ("color", self.color != after.color),
            ("size", self.size != after.size),
            (
                "wholesale_price",
                self.wholesale_price != after.wholesale_price,
            ),
            ("msrp", self.msrp != after.msrp),
            ("active", self.active != after.active),
        ];
        for (name, differs) in pairs {
            if differs {
                changed.push(name);
            }
        }
        changed
    }

    fn facts(&self, change: &str, changed: &[&str]) -> Value {
        json!({
            "change": change,
            "changed": changed,
            "code": self.code,
            "style": self.style,
            "color": self.color,
            "size": self.size,
            "wholesale_price": self.wholesale_price,
            "msrp": self.msrp,
            "active": self.active,
        })
    }
}

/// What applying a file would do.
#[derive(Debug, Default)]
pub struct Plan {
    creates: Vec<Stored>,
    /// New values, and the fields that change.
    updates: Vec<(Stored, Vec<&'static str>)>,
    unchanged: u64,
    /// Which plan entry each file row became, in file order (for paging).
    order: Vec<Step>,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Create(usize),
    Update(usize),
    Unchanged,
}

impl Plan {
    pub fn rows(&self) -> usize {
        self.order.len()
    }

    pub fn summary(&self) -> ImportSummary {
        ImportSummary {
            created: self.creates.len() as u64,
            updated: self.updates.len() as u64,
            unchanged: self.unchanged,
        }
    }

    /// The part of the plan made by file rows `range` (0-based data rows).
    pub fn slice(&self, range: std::ops::Range<usize>) -> Plan {
        let mut part = Plan::default();
        for step in self.order.get(range).unwrap_or_default() {
            match *step {
                Step::Create(i) => {
                    part.order.push(Step::Create(part.creates.len()));
                    part.creates.push(self.creates[i].clone());
                }
                Step::Update(i) => {
                    part.order.push(Step::Update(part.updates.len()));
                    part.updates.push(self.updates[i].clone());
                }
                Step::Unchanged => {
                    part.order.push(Step::Unchanged);
                    part.unchanged += 1;
                }
            }
        }
        part
    }
}

/// `POST /v1/admin/skus/import`: the whole file in the caller's keyed
/// transaction.
pub(crate) async fn import(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    csv: &[u8],
) -> Result<Done, Error> {
    let rows = parse(csv).map_err(super::rejected_file)?;
    let plan = plan(conn, tenant_id, &rows, |_| Uuid::now_v7()).await?;
    Done::ok(apply_in_tx(conn, tenant_id, &plan).await?)
}

/// `PATCH /v1/admin/skus/{id}`: price, MSRP, code or active. A patch that
/// changes nothing writes nothing and answers the SKU as it is.
pub(crate) async fn patch(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    patch: SkuPatch,
) -> Result<Done, Error> {
    if patch == SkuPatch::default() {
        return Err(Error::validation(
            "body",
            "set at least one of wholesale_price, msrp, active, code",
        ));
    }
    for (field, value) in [
        ("wholesale_price", patch.wholesale_price),
        ("msrp", patch.msrp),
    ] {
        if value.is_some_and(|v| v < 0) {
            return Err(Error::validation(field, "must be ≥ 0 (cents)"));
        }
    }
    if let Some(Some(code)) = &patch.code {
        if code.trim().is_empty() || code.chars().count() > MAX_TEXT || code.contains('\0') {
            return Err(Error::validation(
                "code",
                format!("must be 1–{MAX_TEXT} characters of text"),
            ));
        }
    }
    // Locks the catalog row (not the position) so two edits of one SKU
    // decide one after the other.
    let before: Option<Stored> = sqlx::query_as(
        "select id, code, style, color, size, wholesale_price, msrp, active
           from skus where tenant_id = $1 and id = $2 for no key update",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let before = before.ok_or_else(|| Error::not_found("SKU"))?;
    let code = patch.code.clone().unwrap_or(before.code.clone());
    if let Some(code) = &code {
        let taken: bool = sqlx::query_scalar(
            "select exists (select 1 from skus where tenant_id = $1 and code = $2 and id <> $3)",
        )
        .bind(tenant_id)
        .bind(code)
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
        if taken {
            return Err(Error::validation("code", "already used by another SKU"));
        }
    }
    let after = Stored {
        code,
        wholesale_price: patch.wholesale_price.unwrap_or(before.wholesale_price),
        msrp: patch.msrp.unwrap_or(before.msrp),
        active: patch.active.unwrap_or(before.active),
        ..before.clone()
    };
    let changed = before.changed(&after);
    if !changed.is_empty() {
        let plan = Plan {
            updates: vec![(after, changed)],
            order: vec![Step::Update(0)],
            ..Plan::default()
        };
        apply_in_tx(conn, tenant_id, &plan).await?;
    }
    let sku = crate::db::skus::load(conn, tenant_id, id)
        .await?
        .ok_or_else(|| Error::not_found("SKU"))?;
    Done::ok(sku)
}
