//! Matching a file's rows against the tenant's catalog: what each row
//! creates, updates or leaves as it is, and every collision, all decided
//! before the first write.

use std::collections::HashMap;

use holdfast_protocol::problem::FieldError;
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Plan, Row, Step, Stored};
use crate::error::Error;
use crate::master::sheet::error;

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
    plan_against(&stored, rows, mint).map_err(crate::master::rejected_file)
}

pub(super) fn plan_against(
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
