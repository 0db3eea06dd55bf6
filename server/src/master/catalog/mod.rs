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

use std::collections::HashMap;

use holdfast_protocol::admin::{ImportSummary, SkuPatch};
use holdfast_protocol::event::EventType;
use holdfast_protocol::problem::FieldError;
use serde_json::{json, Value};
use sqlx::PgConnection;
use uuid::Uuid;

use super::sheet::{self, error, Layout};
use crate::db::changes::{record_many_in_tx, DocKind};
use crate::db::outbox::{enqueue_many_in_tx, Aggregate, Event};
use crate::engine::Done;
use crate::error::Error;

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

// ---------------------------------------------------------------- parse

const LAYOUT: Layout = Layout {
    required: &["code", "style", "color", "size", "wholesale_price", "msrp"],
    optional: &["active"],
    expected: "code,style,color,size,wholesale_price,msrp[,active]",
};

/// Reads a catalog file: header `code,style,color,size,wholesale_price,msrp`
/// with an optional `active` column, money in minor units. Every problem is
/// returned, each named `line N: column`.
pub fn parse(bytes: &[u8]) -> Result<Vec<Row>, Vec<FieldError>> {
    let file = sheet::read(bytes, &LAYOUT)?;
    let at = |name: &str| file.column(name).unwrap_or(0);
    let (code, style, color, size, wholesale, msrp) = (
        at("code"),
        at("style"),
        at("color"),
        at("size"),
        at("wholesale_price"),
        at("msrp"),
    );
    let active = file.column("active");

    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for (line, record) in &file.rows {
        let line = *line;
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                errors.push(e.clone());
                continue;
            }
        };
        let cell = |i: usize| record.get(i).unwrap_or("");
        let mut row_errors = Vec::new();
        let mut check = |field: &str, result: Result<String, String>| match result {
            Ok(v) => v,
            Err(message) => {
                row_errors.push(error(line, field, message));
                String::new()
            }
        };
        let row_code = match cell(code) {
            "" => None,
            c => Some(check("code", sheet::text(c, MAX_TEXT))),
        };
        let style = check("style", sheet::text(cell(style), MAX_TEXT));
        let color = check("color", sheet::text(cell(color), MAX_TEXT));
        let size = check("size", sheet::text(cell(size), MAX_TEXT));
        let mut money = |field: &str, value: &str| {
            sheet::money(value).unwrap_or_else(|message| {
                row_errors.push(error(line, field, message));
                0
            })
        };
        let wholesale_price = money("wholesale_price", cell(wholesale));
        let msrp = money("msrp", cell(msrp));
        let active = match active.map(cell) {
            None | Some("") => None,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "yes" | "1" => Some(true),
                "false" | "no" | "0" => Some(false),
                _ => {
                    row_errors.push(error(line, "active", format!("{v:?} is not true or false")));
                    None
                }
            },
        };
        if row_errors.is_empty() {
            rows.push(Row {
                line,
                code: row_code,
                style,
                color,
                size,
                wholesale_price,
                msrp,
                active,
            });
        } else {
            errors.extend(row_errors);
        }
    }
    if errors.is_empty() {
        Ok(rows)
    } else {
        Err(errors)
    }
}

// ---------------------------------------------------------------- plan

type Triple = (String, String, String);

/// Matches every row against the tenant's catalog. New SKUs get their id from
/// `mint` (random v7 ids, or the demo's stable ones). Every collision is an
/// error naming the row: a code or style/colour/size twice in the file, or
/// a row that would take another SKU's code or style/colour/size.
pub async fn plan(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rows: &[Row],
    mint: impl Fn(&Row) -> Uuid,
) -> Result<Plan, Error> {
    let stored: Vec<Stored> = sqlx::query_as(
        "select id, code, style, color, size, wholesale_price, msrp, active
           from skus where tenant_id = $1",
    )
    .bind(tenant_id)
    .fetch_all(&mut *conn)
    .await?;
    plan_against(&stored, rows, mint).map_err(super::rejected_file)
}

fn plan_against(
    stored: &[Stored],
    rows: &[Row],
    mint: impl Fn(&Row) -> Uuid,
) -> Result<Plan, Vec<FieldError>> {
    let by_code: HashMap<&str, usize> = stored
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((s.code.as_deref()?, i)))
        .collect();
    let triple = |s: &str, c: &str, z: &str| (s.to_owned(), c.to_owned(), z.to_owned());
    let by_triple: HashMap<Triple, usize> = stored
        .iter()
        .enumerate()
        .map(|(i, s)| (triple(&s.style, &s.color, &s.size), i))
        .collect();
    let mut codes_in_file: HashMap<String, u64> = HashMap::new();
    let mut triples_in_file: HashMap<Triple, u64> = HashMap::new();
    let mut errors = Vec::new();
    let mut plan = Plan::default();

    for row in rows {
        let t = triple(&row.style, &row.color, &row.size);
        if let Some(code) = &row.code {
            if let Some(first) = codes_in_file.insert(code.clone(), row.line) {
                errors.push(error(
                    row.line,
                    "code",
                    format!("{code:?} is also on line {first}"),
                ));
                continue;
            }
        }
        if let Some(first) = triples_in_file.insert(t.clone(), row.line) {
            errors.push(error(
                row.line,
                "style",
                format!("{} / {} / {} is also on line {first}", t.0, t.1, t.2),
            ));
            continue;
        }
        let matched = row
            .code
            .as_deref()
            .and_then(|c| by_code.get(c))
            .or_else(|| by_triple.get(&t))
            .copied();
        // Whoever holds the row's style/colour/size or code must be the SKU
        // the row updates (or nobody, for a new SKU).
        if let Some(&holder) = by_triple.get(&t) {
            if Some(holder) != matched {
                errors.push(error(
                    row.line,
                    "style",
                    format!(
                        "{} / {} / {} is already another SKU{}",
                        t.0,
                        t.1,
                        t.2,
                        stored[holder]
                            .code
                            .as_deref()
                            .map(|c| format!(" (code {c})"))
                            .unwrap_or_default()
                    ),
                ));
                continue;
            }
        }
        if let Some(&holder) = row.code.as_deref().and_then(|c| by_code.get(c)) {
            if Some(holder) != matched {
                errors.push(error(row.line, "code", "already used by another SKU"));
                continue;
            }
        }
        match matched {
            Some(i) => {
                let before = &stored[i];
                let after = Stored {
                    id: before.id,
                    code: row.code.clone().or_else(|| before.code.clone()),
                    style: row.style.clone(),
                    color: row.color.clone(),
                    size: row.size.clone(),
                    wholesale_price: row.wholesale_price,
                    msrp: row.msrp,
                    active: row.active.unwrap_or(before.active),
                };
                let changed = before.changed(&after);
                if changed.is_empty() {
                    plan.unchanged += 1;
                    plan.order.push(Step::Unchanged);
                } else {
                    plan.order.push(Step::Update(plan.updates.len()));
                    plan.updates.push((after, changed));
                }
            }
            None => {
                plan.order.push(Step::Create(plan.creates.len()));
                plan.creates.push(Stored {
                    id: mint(row),
                    code: row.code.clone(),
                    style: row.style.clone(),
                    color: row.color.clone(),
                    size: row.size.clone(),
                    wholesale_price: row.wholesale_price,
                    msrp: row.msrp,
                    active: row.active.unwrap_or(true),
                });
            }
        }
    }
    if errors.is_empty() {
        Ok(plan)
    } else {
        Err(errors)
    }
}

// ---------------------------------------------------------------- apply

/// Rows per statement: large enough that 100,000 rows are a few dozen
/// statements, small enough that one statement's arrays stay a few MB.
const CHUNK: usize = 10_000;

/// Writes a plan: new SKUs with their empty positions, changed catalog
/// fields, and for each SKU created or changed its change row and its
/// `sku.updated` event, all in the caller's transaction. The positions of
/// changed SKUs are locked last (see the module doc).
pub async fn apply_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    plan: &Plan,
) -> Result<ImportSummary, Error> {
    for chunk in plan.creates.chunks(CHUNK) {
        let cols = Columns::of(chunk.iter());
        sqlx::query(
            "insert into skus (tenant_id, id, code, style, color, size, wholesale_price, msrp, active)
             select $1, * from unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],
                                      $7::int8[], $8::int8[], $9::bool[])",
        )
        .bind(tenant_id)
        .bind(&cols.ids)
        .bind(&cols.codes)
        .bind(&cols.styles)
        .bind(&cols.colors)
        .bind(&cols.sizes)
        .bind(&cols.wholesale)
        .bind(&cols.msrp)
        .bind(&cols.active)
        .execute(&mut *conn)
        .await
        .map_err(raced)?;
        // A new SKU's position: nothing on hand, version 1, and its first
        // event (the sku.updated below) is sequence 1.
        sqlx::query(
            "insert into sku_positions (tenant_id, sku_id, event_seq)
             select $1, unnest($2::uuid[]), 1",
        )
        .bind(tenant_id)
        .bind(&cols.ids)
        .execute(&mut *conn)
        .await?;
        let docs: Vec<(Uuid, i64)> = cols.ids.iter().map(|id| (*id, 1)).collect();
        record_many_in_tx(conn, tenant_id, DocKind::Sku, &docs).await?;
        let events = chunk
            .iter()
            .map(|s| Event {
                aggregate: Aggregate::Sku(s.id),
                sequence: 1,
                version: 1,
                facts: s.facts("created", &[]),
            })
            .collect();
        enqueue_many_in_tx(conn, tenant_id, EventType::SkuUpdated, events).await?;
    }

    for chunk in plan.updates.chunks(CHUNK) {
        let cols = Columns::of(chunk.iter().map(|(s, _)| s));
        sqlx::query(
            "update skus s
                set code = u.code, style = u.style, color = u.color, size = u.size,
                    wholesale_price = u.wholesale_price, msrp = u.msrp, active = u.active,
                    updated_at = now()
               from unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],
                           $7::int8[], $8::int8[], $9::bool[])
                    as u(id, code, style, color, size, wholesale_price, msrp, active)
              where s.tenant_id = $1 and s.id = u.id",
        )
        .bind(tenant_id)
        .bind(&cols.ids)
        .bind(&cols.codes)
        .bind(&cols.styles)
        .bind(&cols.colors)
        .bind(&cols.sizes)
        .bind(&cols.wholesale)
        .bind(&cols.msrp)
        .bind(&cols.active)
        .execute(&mut *conn)
        .await
        .map_err(raced)?;
    }

    if !plan.updates.is_empty() {
        announce_updates_in_tx(conn, tenant_id, &plan.updates).await?;
    }
    Ok(plan.summary())
}

/// The changed SKUs' feed versions and `sku.updated` events. Their sequence
/// lives on the hot `sku_positions` row, so the events are staged first —
/// their facts serialised, sent and parsed while no hot row is locked — and
/// one last statement locks the positions in ascending id order, bumps them,
/// and writes the change rows and the events from what it bumped. An
/// allocation of one of these SKUs waits for that statement and the commit
/// only (item 11 of docs/BENCHMARKS.md measures the wait).
///
/// The payload is `db::outbox`'s shape, built in SQL because the sequence
/// and version are only known under the lock.
async fn announce_updates_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    updates: &[(Stored, Vec<&'static str>)],
) -> Result<(), Error> {
    sqlx::query(
        "create temporary table if not exists staged_sku_events
             (sku_id uuid primary key, facts jsonb not null) on commit drop",
    )
    .execute(&mut *conn)
    .await?;
    for chunk in updates.chunks(CHUNK) {
        let ids: Vec<Uuid> = chunk.iter().map(|(s, _)| s.id).collect();
        let facts: Vec<Value> = chunk
            .iter()
            .map(|(after, changed)| after.facts("updated", changed))
            .collect();
        sqlx::query(
            "insert into staged_sku_events (sku_id, facts)
             select * from unnest($1::uuid[], $2::jsonb[])",
        )
        .bind(&ids)
        .bind(&facts)
        .execute(&mut *conn)
        .await?;
    }
    let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    sqlx::query(
        "with locked as (
             select sku_id from sku_positions
              where tenant_id = $1 and sku_id in (select sku_id from staged_sku_events)
              order by sku_id for update),
         bumped as (
             update sku_positions p
                set version = p.version + 1, event_seq = p.event_seq + 1
               from locked
              where p.tenant_id = $1 and p.sku_id = locked.sku_id
             returning p.sku_id, p.version, p.event_seq),
         feed as (
             insert into changes (tenant_id, kind, doc_id, version)
             select $1, $2, sku_id, version from bumped)
         insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
         select $1, $3, $2, b.sku_id, b.event_seq,
                jsonb_build_object('type', $3::text, 'timestamp', $4::text,
                    'data', s.facts || jsonb_build_object('tenant_id', $1::uuid, 'sku_id', b.sku_id,
                                                          'sequence', b.event_seq, 'version', b.version))
           from bumped b join staged_sku_events s on s.sku_id = b.sku_id
          order by b.sku_id",
    )
    .bind(tenant_id)
    .bind(DocKind::Sku.as_str())
    .bind(EventType::SkuUpdated.as_str())
    .bind(&timestamp)
    .execute(&mut *conn)
    .await?;
    sqlx::query("truncate staged_sku_events")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A plan's SKUs as one array per column, for `unnest`.
#[derive(Default)]
struct Columns {
    ids: Vec<Uuid>,
    codes: Vec<Option<String>>,
    styles: Vec<String>,
    colors: Vec<String>,
    sizes: Vec<String>,
    wholesale: Vec<i64>,
    msrp: Vec<i64>,
    active: Vec<bool>,
}

impl Columns {
    fn of<'a>(skus: impl Iterator<Item = &'a Stored>) -> Columns {
        let mut c = Columns::default();
        for s in skus {
            c.ids.push(s.id);
            c.codes.push(s.code.clone());
            c.styles.push(s.style.clone());
            c.colors.push(s.color.clone());
            c.sizes.push(s.size.clone());
            c.wholesale.push(s.wholesale_price);
            c.msrp.push(s.msrp);
            c.active.push(s.active);
        }
        c
    }
}

/// A unique violation here means another import or edit took a code or a
/// style/colour/size between our plan and our write: nothing is applied
/// (the transaction rolls back) and sending the file again decides afresh.
fn raced(e: sqlx::Error) -> Error {
    match &e {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") => super::rejected_file(vec![
            FieldError {
                field: "file".into(),
                message: "the catalog changed while this file was being applied; nothing was applied, send it again".into(),
            },
        ]),
        _ => e.into(),
    }
}

// ---------------------------------------------------------------- requests

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

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(code: Option<&str>, style: &str, size: &str, price: i64) -> Stored {
        Stored {
            id: Uuid::now_v7(),
            code: code.map(str::to_owned),
            style: style.into(),
            color: "Ecru".into(),
            size: size.into(),
            wholesale_price: price,
            msrp: price * 2,
            active: true,
        }
    }

    #[test]
    fn every_bad_cell_is_named_by_line_and_column() {
        let file = b"code,style,color,size,wholesale_price,msrp\n\
            A1,Swift Tee,Ecru,M,1200,2400\n\
            A2,,Ecru,M,1200,2400\n\
            A3,Swift Tee,Ecru,L,12.00,2400\n\
            A4,Swift Tee,Ecru,XL,1200\n\
            A5,Swift Tee,Ecru,S,1200,-1\n";
        let errors = parse(file).expect_err("four bad rows");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "line 3: style",
                "line 4: wholesale_price",
                "line 5: row",
                "line 6: msrp"
            ]
        );
    }

    #[test]
    fn a_missing_or_unknown_column_is_a_header_error() {
        let errors =
            parse(b"code,style,colour,size,wholesale_price,msrp\n").expect_err("bad header");
        assert!(errors.iter().all(|e| e.field == "line 1: header"));
        assert!(errors.iter().any(|e| e.message.contains("`color`")));
        assert!(errors.iter().any(|e| e.message.contains("`colour`")));
    }

    #[test]
    fn rows_match_by_code_then_by_style_colour_size() {
        let stored = vec![
            stored(Some("A1"), "Swift Tee", "M", 1200),
            stored(None, "Swift Tee", "L", 1200),
        ];
        let file = b"code,style,color,size,wholesale_price,msrp\n\
            A1,Swift Tee,Ecru,M,1300,2400\n\
            B2,Swift Tee,Ecru,L,1200,2400\n\
            C3,Swift Tee,Ecru,XL,1200,2400\n";
        let rows = parse(file).expect("valid");
        let plan = plan_against(&stored, &rows, |_| Uuid::nil()).expect("no collisions");
        assert_eq!(
            plan.summary(),
            ImportSummary {
                created: 1,
                updated: 2,
                unchanged: 0
            }
        );
        assert_eq!(plan.updates[0].1, ["wholesale_price"]);
        assert_eq!(
            plan.updates[1].1,
            ["code"],
            "a code is learned by style/colour/size"
        );
    }

    #[test]
    fn the_same_values_again_are_unchanged() {
        let s = stored(Some("A1"), "Swift Tee", "M", 1200);
        let file =
            b"code,style,color,size,wholesale_price,msrp,active\nA1,Swift Tee,Ecru,M,1200,2400,\n";
        let rows = parse(file).expect("valid");
        let plan = plan_against(&[s], &rows, |_| Uuid::nil()).expect("plan");
        assert_eq!(
            plan.summary(),
            ImportSummary {
                created: 0,
                updated: 0,
                unchanged: 1
            }
        );
    }

    #[test]
    fn collisions_are_named() {
        let stored = vec![
            stored(Some("A1"), "Swift Tee", "M", 1200),
            stored(Some("A2"), "Swift Tee", "L", 1200),
        ];
        let file = b"code,style,color,size,wholesale_price,msrp\n\
            A1,Swift Tee,Ecru,L,1200,2400\n\
            N1,Swift Tee,Ecru,XS,1200,2400\n\
            N1,Swift Tee,Ecru,XXL,1200,2400\n";
        let rows = parse(file).expect("valid cells");
        let errors = plan_against(&stored, &rows, |_| Uuid::nil()).expect_err("collisions");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["line 2: style", "line 4: code"]);
        assert!(errors[0].message.contains("code A2"), "{:?}", errors[0]);
        assert!(errors[1].message.contains("line 3"), "{:?}", errors[1]);
    }

    #[test]
    fn a_slice_keeps_file_order() {
        let file = b"code,style,color,size,wholesale_price,msrp\n\
            A1,Swift Tee,Ecru,M,1200,2400\n\
            A2,Swift Tee,Ecru,L,1200,2400\n\
            A3,Swift Tee,Ecru,XL,1200,2400\n";
        let rows = parse(file).expect("valid");
        let plan = plan_against(&[], &rows, |_| Uuid::now_v7()).expect("plan");
        let tail = plan.slice(1..3);
        assert_eq!(tail.rows(), 2);
        assert_eq!(tail.creates[0].code.as_deref(), Some("A2"));
    }
}
