//! Price lists (API.md v1.1): a named list of per-SKU prices that customers
//! on it pay instead of the wholesale price. A list's entries are replaced
//! as a whole, from JSON `{"prices": [{"sku_id", "price"}]}` or a CSV file
//! `code,price`.
//!
//! A change bumps the list's version and event sequence and writes its
//! change row and its `price_list.updated` event in the caller's
//! transaction. Entered lines keep their price: a line's `unit_price` is
//! decided once, when the line is added.

use std::collections::{BTreeMap, HashMap};

use holdfast_protocol::admin::{CreatePriceList, PriceListEntries};
use holdfast_protocol::event::EventType;
use holdfast_protocol::model::{Price, PriceList};
use holdfast_protocol::problem::{FieldError, Problem, ProblemCode};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use super::sheet::{self, error, Layout};
use crate::db::changes::{record_in_tx, DocKind};
use crate::db::outbox::{enqueue_in_tx, Aggregate};
use crate::engine::Done;
use crate::error::Error;

const MAX_NAME: usize = 200;

/// `POST /v1/admin/price-lists` → 201 with the (empty) list.
pub(crate) async fn create(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    body: CreatePriceList,
) -> Result<Done, Error> {
    let name = body.name.trim().to_owned();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.contains('\0') {
        return Err(Error::validation(
            "name",
            format!("must be 1–{MAX_NAME} characters of text"),
        ));
    }
    let (id_taken, name_taken): (bool, bool) = sqlx::query_as(
        "select exists (select 1 from price_lists where tenant_id = $1 and id = $2),
                exists (select 1 from price_lists where tenant_id = $1 and name = $3)",
    )
    .bind(tenant_id)
    .bind(body.id)
    .bind(&name)
    .fetch_one(&mut *conn)
    .await?;
    if id_taken {
        return Err(Error::validation(
            "id",
            "a price list with this id already exists; mint a new id",
        ));
    }
    if name_taken {
        return Err(Error::validation(
            "name",
            "already used by another price list",
        ));
    }
    sqlx::query(
        "insert into price_lists (tenant_id, id, name, version, event_seq) values ($1, $2, $3, 1, 1)",
    )
    .bind(tenant_id)
    .bind(body.id)
    .bind(&name)
    .execute(&mut *conn)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") => Error::validation(
            "name",
            "another change took this name just now; nothing was applied, try again",
        ),
        _ => e.into(),
    })?;
    record_in_tx(conn, tenant_id, DocKind::PriceList, body.id, 1).await?;
    enqueue_in_tx(
        conn,
        tenant_id,
        EventType::PriceListUpdated,
        Aggregate::PriceList(body.id),
        1,
        1,
        json!({"change": "created", "name": name, "entries": 0}),
    )
    .await?;
    Done::created(PriceList {
        id: body.id,
        name,
        prices: Vec::new(),
    })
}

/// `PUT /v1/admin/price-lists/{id}/prices` as JSON: every entry must name a
/// SKU of the tenant once, at a price ≥ 0; every bad entry is named
/// (`prices[3].sku_id`) in one 400 `validation_failed`.
pub(crate) async fn replace_prices(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    prices: Vec<Price>,
) -> Result<Done, Error> {
    lock(conn, tenant_id, id).await?;
    let ids: Vec<Uuid> = prices.iter().map(|p| p.sku_id).collect();
    let known: std::collections::HashSet<Uuid> =
        sqlx::query_scalar("select id from skus where tenant_id = $1 and id = any($2)")
            .bind(tenant_id)
            .bind(&ids)
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .collect();
    let mut errors = Vec::new();
    let mut seen: HashMap<Uuid, usize> = HashMap::new();
    for (i, p) in prices.iter().enumerate() {
        if !known.contains(&p.sku_id) {
            errors.push(FieldError {
                field: format!("prices[{i}].sku_id"),
                message: "no such SKU".into(),
            });
        }
        if let Some(first) = seen.insert(p.sku_id, i) {
            errors.push(FieldError {
                field: format!("prices[{i}].sku_id"),
                message: format!("this SKU is already priced at prices[{first}]"),
            });
        }
        if p.price < 0 {
            errors.push(FieldError {
                field: format!("prices[{i}].price"),
                message: "must be ≥ 0 (cents)".into(),
            });
        }
    }
    if !errors.is_empty() {
        let detail = format!(
            "{} problem{} in the prices; nothing was applied",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" }
        );
        errors.truncate(super::MAX_LISTED_ERRORS);
        let problem = Problem::new(ProblemCode::ValidationFailed, detail).with("errors", errors);
        return Err(Error::Problem(Box::new(problem)));
    }
    replace_in_tx(conn, tenant_id, id, prices).await
}

const LAYOUT: Layout = Layout {
    required: &["code", "price"],
    optional: &[],
    expected: "code,price",
};

/// `PUT /v1/admin/price-lists/{id}/prices` as a CSV file `code,price`: the
/// codes are the SKUs' own. All or nothing, every bad row named by line
/// (422 `validation_failed`, as every file import).
pub(crate) async fn replace_prices_csv(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    csv: &[u8],
) -> Result<Done, Error> {
    lock(conn, tenant_id, id).await?;
    let file = sheet::read(csv, &LAYOUT).map_err(super::rejected_file)?;
    let codes: HashMap<String, Uuid> = sqlx::query_as::<_, (String, Uuid)>(
        "select code, id from skus where tenant_id = $1 and code is not null",
    )
    .bind(tenant_id)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();
    let (code, price) = (
        file.column("code").unwrap_or(0),
        file.column("price").unwrap_or(1),
    );
    let mut errors = Vec::new();
    let mut seen: HashMap<Uuid, u64> = HashMap::new();
    let mut prices = Vec::with_capacity(file.rows.len());
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
        let sku = match codes.get(cell(code)) {
            Some(sku) => Some(*sku),
            None if cell(code).is_empty() => {
                errors.push(error(line, "code", "is empty"));
                None
            }
            None => {
                errors.push(error(
                    line,
                    "code",
                    format!("no SKU has the code {:?}", cell(code)),
                ));
                None
            }
        };
        let amount = sheet::money(cell(price))
            .map_err(|m| errors.push(error(line, "price", m)))
            .ok();
        if let Some(sku) = sku {
            if let Some(first) = seen.insert(sku, line) {
                errors.push(error(
                    line,
                    "code",
                    format!("{:?} is already priced on line {first}", cell(code)),
                ));
            }
        }
        if let (Some(sku_id), Some(price)) = (sku, amount) {
            prices.push(Price { sku_id, price });
        }
    }
    if !errors.is_empty() {
        errors.truncate(super::MAX_LISTED_ERRORS);
        return Err(super::rejected_file(errors));
    }
    replace_in_tx(conn, tenant_id, id, prices).await
}

/// The list's row, locked so two replacements decide one after the other.
async fn lock(conn: &mut PgConnection, tenant_id: Uuid, id: Uuid) -> Result<(), Error> {
    let found: Option<i64> = sqlx::query_scalar(
        "select version from price_lists where tenant_id = $1 and id = $2 for no key update",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    found
        .map(|_| ())
        .ok_or_else(|| Error::not_found("price list"))
}

/// Replaces a locked list's entries with `prices` (checked already). The same
/// entries again write nothing.
async fn replace_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    prices: Vec<Price>,
) -> Result<Done, Error> {
    let before: BTreeMap<Uuid, i64> = sqlx::query_as::<_, (Uuid, i64)>(
        "select sku_id, price from price_list_entries where tenant_id = $1 and price_list_id = $2",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();
    let after: BTreeMap<Uuid, i64> = prices.iter().map(|p| (p.sku_id, p.price)).collect();
    let entries = PriceListEntries {
        entries: after.len() as u64,
    };
    if before == after {
        return Done::ok(entries);
    }
    let added = after.keys().filter(|k| !before.contains_key(k)).count();
    let removed = before.keys().filter(|k| !after.contains_key(k)).count();
    let repriced = after
        .iter()
        .filter(|(k, v)| before.get(k).is_some_and(|b| b != *v))
        .count();

    sqlx::query("delete from price_list_entries where tenant_id = $1 and price_list_id = $2")
        .bind(tenant_id)
        .bind(id)
        .execute(&mut *conn)
        .await?;
    let (skus, amounts): (Vec<Uuid>, Vec<i64>) = after.into_iter().unzip();
    sqlx::query(
        "insert into price_list_entries (tenant_id, price_list_id, sku_id, price)
         select $1, $2, * from unnest($3::uuid[], $4::int8[])",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(&skus)
    .bind(&amounts)
    .execute(&mut *conn)
    .await?;
    let (name, version, sequence): (String, i64, i64) = sqlx::query_as(
        "update price_lists set version = version + 1, event_seq = event_seq + 1, updated_at = now()
          where tenant_id = $1 and id = $2
         returning name, version, event_seq",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_one(&mut *conn)
    .await?;
    record_in_tx(conn, tenant_id, DocKind::PriceList, id, version).await?;
    enqueue_in_tx(
        conn,
        tenant_id,
        EventType::PriceListUpdated,
        Aggregate::PriceList(id),
        sequence,
        version,
        json!({"change": "prices_replaced", "name": name, "entries": entries.entries,
               "added": added, "removed": removed, "repriced": repriced}),
    )
    .await?;
    Done::ok(entries)
}
