//! Importing a snapshot into the staging tables, a page per transaction: the
//! page's counts and rejects and its checkpoint row commit together, so a
//! killed import resumes exactly after the last committed page and a
//! finished one is never imported twice.

use std::collections::{HashMap, HashSet};

use anyhow::Context;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::progress::Progress;
use super::snapshot::{Row, SkuKey, Snapshot};
use super::{Hold, TestHold};

/// A reconcile run: one per tenant and file contents.
#[derive(Debug, Clone)]
pub(super) struct Run {
    pub tenant_id: Uuid,
    pub id: Uuid,
    pub records: i64,
}

/// What this invocation's import did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    /// Records already committed by earlier invocations when we started.
    pub resumed_from: i64,
    /// Pages this invocation committed.
    pub pages: u64,
}

/// Finds the run for these bytes, or starts one.
pub(super) async fn open_run(
    db: &PgPool,
    tenant_id: Uuid,
    snapshot: &Snapshot,
    file_name: &str,
) -> anyhow::Result<Run> {
    let records = snapshot.rows.len() as i64;
    // Two invocations racing here both end up with the one row.
    sqlx::query(
        "insert into reconcile_runs (tenant_id, id, file_sha256, file_name, records)
         values ($1, $2, $3, $4, $5)
         on conflict (tenant_id, file_sha256) do nothing",
    )
    .bind(tenant_id)
    .bind(Uuid::now_v7())
    .bind(&snapshot.sha256[..])
    .bind(file_name)
    .bind(records)
    .execute(db)
    .await?;
    let (id, stored): (Uuid, i64) = sqlx::query_as(
        "select id, records from reconcile_runs where tenant_id = $1 and file_sha256 = $2",
    )
    .bind(tenant_id)
    .bind(&snapshot.sha256[..])
    .fetch_one(db)
    .await?;
    if stored != records {
        anyhow::bail!(
            "run {id} of this file counted {stored} rows, this reading counts {records}: \
             the snapshot reader changed between versions; refusing to mix the two"
        );
    }
    Ok(Run {
        tenant_id,
        id,
        records,
    })
}

/// Imports every record not yet committed, `page_size` per transaction.
pub(super) async fn import(
    db: &PgPool,
    run: &Run,
    snapshot: &Snapshot,
    page_size: usize,
    progress: &mut Progress,
    hold: Option<TestHold>,
) -> anyhow::Result<Imported> {
    let mut done = Imported {
        resumed_from: 0,
        pages: 0,
    };
    let mut first = true;
    loop {
        let mut tx = crate::db::begin_for_tenant(db, run.tenant_id).await?;
        // The run row lock serialises importers of one run: each page reads
        // the checkpoint and writes the next one under it, so two processes
        // importing the same file share the pages instead of doubling them.
        let imported: Option<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
            "select imported_at from reconcile_runs where tenant_id = $1 and id = $2 for update",
        )
        .bind(run.tenant_id)
        .bind(run.id)
        .fetch_one(&mut *tx)
        .await?;
        let cursor: i64 = sqlx::query_scalar(
            "select coalesce(max(end_record), 0) from reconcile_pages
              where tenant_id = $1 and run_id = $2",
        )
        .bind(run.tenant_id)
        .bind(run.id)
        .fetch_one(&mut *tx)
        .await?;
        if first {
            done.resumed_from = cursor;
            first = false;
        }
        progress.set(cursor as u64);
        if cursor >= run.records {
            if imported.is_none() {
                // Only an empty file gets here with the flag unset.
                mark_imported_in_tx(&mut tx, run).await?;
            }
            tx.commit().await?;
            return Ok(done);
        }
        let start = cursor as usize;
        let end = (start + page_size).min(snapshot.rows.len());
        let rows = &snapshot.rows[start..end];
        let (counted, rejected) = stage_page_in_tx(&mut tx, run, rows)
            .await
            .with_context(|| format!("importing rows {}–{} of the snapshot", start + 1, end))?;
        if let Some(h) = hold {
            h.maybe_hold(Hold::Import, done.pages).await;
        }
        let last_line = rows.last().map_or(0, |r| r.line) as i64;
        sqlx::query(
            "insert into reconcile_pages
                (tenant_id, run_id, first_record, end_record, last_line, counted_rows, rejected_rows)
             values ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(run.tenant_id)
        .bind(run.id)
        .bind(start as i64)
        .bind(end as i64)
        .bind(last_line)
        .bind(counted as i32)
        .bind(rejected as i32)
        .execute(&mut *tx)
        .await?;
        if end as i64 == run.records {
            mark_imported_in_tx(&mut tx, run).await?;
        }
        tx.commit().await?;
        done.pages += 1;
    }
}

async fn mark_imported_in_tx(conn: &mut PgConnection, run: &Run) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update reconcile_runs set imported_at = now()
          where tenant_id = $1 and id = $2 and imported_at is null",
    )
    .bind(run.tenant_id)
    .bind(run.id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Stages one page: known SKUs into `reconcile_counts`, everything else into
/// `reconcile_rejects` with its line. Returns (counted, rejected).
async fn stage_page_in_tx(
    conn: &mut PgConnection,
    run: &Run,
    rows: &[Row],
) -> anyhow::Result<(usize, usize)> {
    let known = resolve_in_tx(conn, run.tenant_id, rows).await?;

    // SKUs this page names that earlier pages already counted.
    let ids: Vec<Uuid> = known.values().copied().collect();
    let earlier: HashMap<Uuid, i64> = sqlx::query_as::<_, (Uuid, i64)>(
        "select sku_id, line_no from reconcile_counts
          where tenant_id = $1 and run_id = $2 and sku_id = any($3)",
    )
    .bind(run.tenant_id)
    .bind(run.id)
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();

    let mut seen: HashMap<Uuid, u64> = HashMap::new();
    let (mut sku_ids, mut lines, mut counts) = (Vec::new(), Vec::new(), Vec::new());
    let (mut reject_lines, mut reasons, mut raws) = (Vec::new(), Vec::new(), Vec::new());
    for row in rows {
        let outcome = match &row.parsed {
            Err(why) => Err(why.clone()),
            Ok((key, qty)) => match known.get(key) {
                None => Err(format!("unknown SKU: {key}")),
                Some(id) => match earlier.get(id).copied().or(seen.get(id).map(|l| *l as i64)) {
                    Some(line) => Err(format!(
                        "SKU {id} was already counted on line {line}; \
                         a SKU may appear once per snapshot"
                    )),
                    None => Ok((*id, *qty)),
                },
            },
        };
        match outcome {
            Ok((id, qty)) => {
                seen.insert(id, row.line);
                sku_ids.push(id);
                lines.push(row.line as i64);
                counts.push(qty);
            }
            Err(why) => {
                reject_lines.push(row.line as i64);
                reasons.push(why);
                raws.push(row.raw.clone());
            }
        }
    }
    // `do nothing`: the checkpoint under the run lock means a page is staged
    // once; should that ever fail, a second staging must not overwrite.
    sqlx::query(
        "insert into reconcile_counts (tenant_id, run_id, sku_id, line_no, counted)
         select $1, $2, r.sku_id, r.line_no, r.counted
           from unnest($3::uuid[], $4::int8[], $5::int8[]) as r(sku_id, line_no, counted)
         on conflict (tenant_id, run_id, sku_id) do nothing",
    )
    .bind(run.tenant_id)
    .bind(run.id)
    .bind(&sku_ids)
    .bind(&lines)
    .bind(&counts)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "insert into reconcile_rejects (tenant_id, run_id, line_no, reason, raw)
         select $1, $2, r.line_no, r.reason, r.raw
           from unnest($3::int8[], $4::text[], $5::text[]) as r(line_no, reason, raw)
         on conflict (tenant_id, run_id, line_no) do nothing",
    )
    .bind(run.tenant_id)
    .bind(run.id)
    .bind(&reject_lines)
    .bind(&reasons)
    .bind(&raws)
    .execute(&mut *conn)
    .await?;
    Ok((sku_ids.len(), reject_lines.len()))
}

/// Maps each parsed row's key to the tenant's SKU id, for the keys that name
/// one (two queries per page, whatever its size).
async fn resolve_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rows: &[Row],
) -> Result<HashMap<SkuKey, Uuid>, sqlx::Error> {
    let keys: HashSet<&SkuKey> = rows
        .iter()
        .filter_map(|r| r.parsed.as_ref().ok().map(|(k, _)| k))
        .collect();
    let mut ids = Vec::new();
    let (mut styles, mut colors, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
    for key in keys {
        match key {
            SkuKey::Id(id) => ids.push(*id),
            SkuKey::Name { style, color, size } => {
                styles.push(style.as_str());
                colors.push(color.as_str());
                sizes.push(size.as_str());
            }
        }
    }
    let mut known = HashMap::new();
    if !ids.is_empty() {
        let found: Vec<Uuid> =
            sqlx::query_scalar("select id from skus where tenant_id = $1 and id = any($2)")
                .bind(tenant_id)
                .bind(&ids)
                .fetch_all(&mut *conn)
                .await?;
        known.extend(found.into_iter().map(|id| (SkuKey::Id(id), id)));
    }
    if !styles.is_empty() {
        // Exact match, as the unique key (tenant, style, color, size) is:
        // guessing at case or spacing could count the wrong SKU.
        let found: Vec<(String, String, String, Uuid)> = sqlx::query_as(
            "select s.style, s.color, s.size, s.id
               from unnest($2::text[], $3::text[], $4::text[]) as r(style, color, size)
               join skus s on s.tenant_id = $1 and s.style = r.style
                          and s.color = r.color and s.size = r.size",
        )
        .bind(tenant_id)
        .bind(&styles)
        .bind(&colors)
        .bind(&sizes)
        .fetch_all(&mut *conn)
        .await?;
        known.extend(
            found
                .into_iter()
                .map(|(style, color, size, id)| (SkuKey::Name { style, color, size }, id)),
        );
    }
    Ok(known)
}
