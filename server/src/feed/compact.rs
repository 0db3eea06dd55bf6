//! Keeps the feed bounded by compaction: a change row is deleted once a later
//! row (in feed order) of the same document exists. The feed then holds about
//! one row per document, so it grows with the documents, not with the edits
//! (a hot SKU allocated a thousand times keeps one row).
//!
//! Why no cursor ever misses anything, so no cursor ever goes "too old" and a
//! desk never has to resync: pulls carry current documents, not the change
//! rows' versions, so a row only says "look at this document". Row `o` is
//! deleted only while a committed row `n` of the same document follows it in
//! `(xid, id)` order. A cursor before `o` is also before `n`, and the pull that
//! would have served `o` serves `n` (it is committed, so it is below the
//! fence now or will be) with a document at least as new. A cursor past `o`
//! has no use for it.
//!
//! The compactor walks each tenant's feed in `(xid, id)` order below the fence,
//! like a pull, and for each row it passes deletes the rows of the same
//! document before it. Its bookmark is `feed_compaction`; it never waits on
//! or skips a row in flight, and every row is eventually passed, so every
//! superseded row is eventually deleted.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use uuid::Uuid;

/// How often the compactor wakes.
const INTERVAL: Duration = Duration::from_secs(10);
/// Feed rows examined per transaction: short transactions, short locks.
pub const BATCH: i64 = 1000;

/// What one compaction step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Feed rows the bookmark moved over.
    pub examined: i64,
    /// Superseded rows deleted.
    pub deleted: i64,
}

/// Compacts the next `batch` feed rows of one tenant. `None`: another process
/// is compacting this tenant right now.
pub async fn step(db: &PgPool, tenant_id: Uuid, batch: i64) -> Result<Option<Step>, sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query("insert into feed_compaction (tenant_id) values ($1) on conflict do nothing")
        .bind(tenant_id)
        .execute(&mut *tx)
        .await?;
    let bookmark: Option<(i64, i64)> = sqlx::query_as(
        "select xid::text::bigint, id from feed_compaction
          where tenant_id = $1 for update skip locked",
    )
    .bind(tenant_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((xid, id)) = bookmark else {
        return Ok(None);
    };
    // One statement, so the fence and the rows it admits share a snapshot.
    let (examined, deleted, last_xid, last_id): (i64, i64, Option<i64>, Option<i64>) =
        sqlx::query_as(
            "with batch as (
                 select kind, doc_id, xid, id from changes
                  where tenant_id = $1
                    and (xid, id) > ($2::bigint::text::xid8, $3)
                    and xid < pg_snapshot_xmin(pg_current_snapshot())
                  order by xid, id
                  limit $4
             ), superseded as (
                 delete from changes o using batch n
                  where o.tenant_id = $1 and o.kind = n.kind and o.doc_id = n.doc_id
                    and (o.xid, o.id) < (n.xid, n.id)
                 returning 1
             ), last as (
                 select xid, id from batch order by xid desc, id desc limit 1
             )
             select (select count(*) from batch),
                    (select count(*) from superseded),
                    (select xid::text::bigint from last),
                    (select id from last)",
        )
        .bind(tenant_id)
        .bind(xid)
        .bind(id)
        .bind(batch)
        .fetch_one(&mut *tx)
        .await?;
    if let (Some(last_xid), Some(last_id)) = (last_xid, last_id) {
        sqlx::query(
            "update feed_compaction set xid = $2::bigint::text::xid8, id = $3 where tenant_id = $1",
        )
        .bind(tenant_id)
        .bind(last_xid)
        .bind(last_id)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(Some(Step { examined, deleted }))
}

/// Compacts every tenant as far as the fence allows; returns the rows deleted.
pub async fn all(db: &PgPool) -> Result<i64, sqlx::Error> {
    let tenants: Vec<Uuid> = sqlx::query_scalar("select id from tenants order by id")
        .fetch_all(db)
        .await?;
    let mut deleted = 0;
    for tenant_id in tenants {
        while let Some(done) = step(db, tenant_id, BATCH).await? {
            deleted += done.deleted;
            if done.examined < BATCH {
                break;
            }
        }
    }
    Ok(deleted)
}

/// Runs until `closed` turns true.
pub(super) async fn run(db: PgPool, mut closed: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate; let the server settle first.
    tick.tick().await;
    loop {
        tokio::select! {
            _ = super::until_closed(&mut closed) => return,
            _ = tick.tick() => {}
        }
        match all(&db).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(deleted = n, "compacted the change feed"),
            Err(sqlx::Error::PoolClosed) => return,
            Err(e) => tracing::warn!(error = %e, "compacting the change feed failed; will retry"),
        }
    }
}
