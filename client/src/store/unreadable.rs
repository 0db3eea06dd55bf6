//! `unreadable_docs`: pulled documents this build cannot read (a status or
//! a field a newer server added, a kind it does not know), kept whole.
//!
//! The pull cursor moves past them, so without this table such a document
//! would be gone from the desk until it changed again. Here it waits, raw,
//! with why: the desk shows it as needing a newer app, and when a build
//! that reads it opens the store, it is applied like a fresh pull
//! (`crate::sync::reapply_unreadable`). A readable version of the same
//! document, or its deletion, replaces it.

use rusqlite::{params, Transaction};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::{from_json, to_json, Migration, StoreError, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[(
    6,
    "create table unreadable_docs (
        kind        text not null,
        id          text not null,
        version     integer not null,
        -- The document exactly as pulled.
        doc         text not null,
        -- Why this build could not read it (the decoder's words).
        reason      text not null,
        received_at integer not null,
        primary key (kind, id)
    );",
)];

/// One kept document.
#[derive(Debug, Clone, Serialize)]
pub struct Doc {
    pub kind: String,
    pub id: Uuid,
    pub version: i64,
    pub doc: Value,
    pub reason: String,
    pub received_at: i64,
}

/// Keeps `doc` (a newer version replaces an older; the same one is kept
/// as first received).
pub fn keep(
    tx: &Transaction<'_>,
    kind: &str,
    id: Uuid,
    version: i64,
    doc: &Value,
    reason: &str,
    now: i64,
) -> StoreResult<()> {
    tx.prepare_cached(
        "insert into unreadable_docs (kind, id, version, doc, reason, received_at)
         values (?1, ?2, ?3, ?4, ?5, ?6)
         on conflict (kind, id) do update set version = excluded.version, doc = excluded.doc,
                reason = excluded.reason, received_at = excluded.received_at
          where excluded.version > unreadable_docs.version",
    )?
    .execute(params![
        kind,
        id.to_string(),
        version,
        to_json(doc)?,
        reason,
        now
    ])?;
    Ok(())
}

/// Forgets the kept version of a document a later pull read (or deleted).
pub fn forget(tx: &Transaction<'_>, kind: &str, id: Uuid, version: i64) -> StoreResult<()> {
    tx.prepare_cached("delete from unreadable_docs where kind = ?1 and id = ?2 and version <= ?3")?
        .execute(params![kind, id.to_string(), version])?;
    Ok(())
}

/// Every kept document, oldest first.
pub fn all(tx: &Transaction<'_>) -> StoreResult<Vec<Doc>> {
    let mut stmt = tx.prepare_cached(
        "select kind, id, version, doc, reason, received_at from unreadable_docs
          order by received_at, kind, id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|(kind, id, version, doc, reason, received_at)| {
            Ok(Doc {
                id: id
                    .parse()
                    .map_err(|_| StoreError::Corrupt(format!("kept document id {id:?}")))?,
                kind,
                version,
                doc: from_json(&doc)?,
                reason,
                received_at,
            })
        })
        .collect()
}

/// The orders whose newest server version this build cannot read.
pub fn orders(tx: &Transaction<'_>) -> StoreResult<std::collections::HashSet<Uuid>> {
    let mut stmt = tx.prepare_cached("select id from unreadable_docs where kind = 'order'")?;
    let ids = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ids.iter().filter_map(|id| id.parse().ok()).collect())
}

/// How many documents are kept.
pub fn count(tx: &Transaction<'_>) -> StoreResult<usize> {
    let n: i64 = tx
        .prepare_cached("select count(*) from unreadable_docs")?
        .query_row([], |r| r.get(0))?;
    Ok(n as usize)
}
