//! `holdfast-server catalog import --tenant T file.csv`: the catalog import
//! of `POST /v1/admin/skus/import`, run on the server host for files an
//! operator would rather not upload, resumable like `reconcile`.
//!
//! The whole file is parsed and planned first, so a bad row still applies
//! nothing. Then the plan is applied page by page; each page commits with its
//! checkpoint (`catalog_imports.applied_records` and the running counts), so
//! a killed import resumes at the first unapplied row when run again with the
//! same file (a run is the tenant plus the file's SHA-256), and a finished
//! run is reported, not repeated. A resumed run plans afresh against the
//! catalog as it is then: rows a previous attempt applied plan as unchanged
//! and are skipped by the checkpoint anyway.

use std::path::Path;

use anyhow::Context;
use holdfast_protocol::admin::ImportSummary;
use holdfast_protocol::problem::FieldError;
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use super::catalog;
use crate::config::CatalogImportConfig;
use crate::db::begin_for_tenant;
use crate::error::Error;
use crate::reconcile::progress::Progress;

/// How a `catalog import` ended.
#[derive(Debug)]
pub enum Outcome {
    /// Applied (now, or by earlier attempts of the same run).
    Done {
        summary: ImportSummary,
        rows: u64,
        /// Rows this invocation applied (less than `rows` on a resume; 0 when
        /// the run had finished before).
        applied_now: u64,
    },
    /// The file did not validate; nothing was applied.
    Rejected(Vec<FieldError>),
}

impl Outcome {
    pub fn render(&self, file: &Path) -> String {
        match self {
            Outcome::Done {
                summary,
                rows,
                applied_now,
            } => {
                let resumed = if *applied_now == *rows {
                    String::new()
                } else if *applied_now == 0 {
                    " (this file was imported before; nothing to do)".into()
                } else {
                    format!(" (resumed: {applied_now} of them in this run)")
                };
                format!(
                    "{}: {rows} rows{resumed}\n  created {}, updated {}, unchanged {}\n",
                    file.display(),
                    summary.created,
                    summary.updated,
                    summary.unchanged
                )
            }
            Outcome::Rejected(errors) => {
                let mut out = format!(
                    "{}: {} problem{}; nothing was applied\n",
                    file.display(),
                    errors.len(),
                    if errors.len() == 1 { "" } else { "s" }
                );
                for e in errors {
                    out.push_str(&format!("  {}: {}\n", e.field, e.message));
                }
                out
            }
        }
    }
}

/// From the command line: opens the database as `serve` does, imports.
pub async fn run(config: CatalogImportConfig) -> anyhow::Result<Outcome> {
    let host =
        crate::host::HostDb::open(config.database_url.as_deref(), &config.data_dir()).await?;
    let outcome = import_file(
        &host.pool,
        &config.tenant,
        &config.file,
        config.page_size as usize,
        true,
        config.test_hold_after_pages,
    )
    .await;
    host.close().await;
    outcome
}

/// Imports `file` into `tenant`'s catalog (tests call this directly).
pub async fn import_file(
    db: &PgPool,
    tenant: &str,
    file: &Path,
    page_size: usize,
    progress: bool,
    test_hold_after_pages: Option<u64>,
) -> anyhow::Result<Outcome> {
    let bytes = tokio::fs::read(file)
        .await
        .with_context(|| format!("reading {}", file.display()))?;
    let sha: Vec<u8> = Sha256::digest(&bytes).to_vec();
    let rows = match catalog::parse(&bytes) {
        Ok(rows) => rows,
        Err(errors) => return Ok(Outcome::Rejected(errors)),
    };
    drop(bytes);
    let tenant_id: Uuid = sqlx::query_scalar("select id from tenants where slug = $1")
        .bind(tenant)
        .fetch_optional(db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("there is no tenant {tenant:?} on this server"))?;

    let run = open_run(db, tenant_id, &sha, &file.display().to_string(), rows.len()).await?;
    tracing::info!(run = %run.id, tenant, rows = rows.len(), resume_at = run.applied, "catalog import");
    if run.finished {
        return Ok(Outcome::Done {
            summary: run.summary,
            rows: rows.len() as u64,
            applied_now: 0,
        });
    }

    let plan = {
        let mut conn = db.acquire().await?;
        match catalog::plan(&mut conn, tenant_id, &rows, |_| Uuid::now_v7()).await {
            Ok(plan) => plan,
            Err(Error::Problem(p)) => return Ok(Outcome::Rejected(field_errors(&p))),
            Err(e) => return Err(e.into()),
        }
    };
    let total = rows.len();
    let mut bar = Progress::new("catalog", total as u64, progress);
    let mut applied = run.applied as usize;
    bar.set(applied as u64);
    let first = applied;
    let mut pages = 0u64;
    while applied < total {
        let end = (applied + page_size.max(1)).min(total);
        let page = plan.slice(applied..end);
        let mut tx = begin_for_tenant(db, tenant_id).await?;
        let at: i64 = sqlx::query_scalar(
            "select applied_records from catalog_imports
              where tenant_id = $1 and id = $2 for update",
        )
        .bind(tenant_id)
        .bind(run.id)
        .fetch_one(&mut *tx)
        .await?;
        if at != applied as i64 {
            anyhow::bail!(
                "another `catalog import` of this file is running (it is at row {at}); let it finish"
            );
        }
        let summary = catalog::apply_in_tx(&mut tx, tenant_id, &page)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        sqlx::query(
            "update catalog_imports
                set applied_records = $3, created = created + $4, updated = updated + $5,
                    unchanged = unchanged + $6,
                    finished_at = case when $3 = records then now() end
              where tenant_id = $1 and id = $2",
        )
        .bind(tenant_id)
        .bind(run.id)
        .bind(end as i64)
        .bind(summary.created as i64)
        .bind(summary.updated as i64)
        .bind(summary.unchanged as i64)
        .execute(&mut *tx)
        .await?;
        if test_hold_after_pages == Some(pages) {
            eprintln!(
                "catalog import: test hold: inside the uncommitted transaction of page {}; \
                 waiting to be killed",
                pages + 1
            );
            std::future::pending::<()>().await;
        }
        tx.commit().await?;
        pages += 1;
        applied = end;
        bar.set(applied as u64);
    }
    bar.finish();
    let run = open_run(db, tenant_id, &sha, &file.display().to_string(), total).await?;
    Ok(Outcome::Done {
        summary: run.summary,
        rows: total as u64,
        applied_now: (total - first) as u64,
    })
}

struct Run {
    id: Uuid,
    applied: i64,
    finished: bool,
    summary: ImportSummary,
}

/// The run of this file for this tenant: found, or registered now.
async fn open_run(
    db: &PgPool,
    tenant_id: Uuid,
    sha: &[u8],
    file_name: &str,
    records: usize,
) -> anyhow::Result<Run> {
    let mut tx = begin_for_tenant(db, tenant_id).await?;
    sqlx::query(
        "insert into catalog_imports (tenant_id, id, file_sha256, file_name, records)
         values ($1, $2, $3, $4, $5) on conflict (tenant_id, file_sha256) do nothing",
    )
    .bind(tenant_id)
    .bind(Uuid::now_v7())
    .bind(sha)
    .bind(file_name)
    .bind(records as i64)
    .execute(&mut *tx)
    .await?;
    let row: (Uuid, i64, i64, bool, i64, i64, i64) = sqlx::query_as(
        "select id, records, applied_records, finished_at is not null, created, updated, unchanged
           from catalog_imports where tenant_id = $1 and file_sha256 = $2",
    )
    .bind(tenant_id)
    .bind(sha)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    let (id, stored_records, applied, finished, created, updated, unchanged) = row;
    if stored_records != records as i64 {
        anyhow::bail!(
            "this file was registered with {stored_records} rows and now reads as {records}: \
             the importer changed under it; import a copy with a different name and content"
        );
    }
    Ok(Run {
        id,
        applied,
        finished,
        summary: ImportSummary {
            created: created as u64,
            updated: updated as u64,
            unchanged: unchanged as u64,
        },
    })
}

fn field_errors(p: &holdfast_protocol::problem::Problem) -> Vec<FieldError> {
    p.extension("errors")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_else(|| {
            vec![FieldError {
                field: "file".into(),
                message: p.detail.clone().unwrap_or_default(),
            }]
        })
}
