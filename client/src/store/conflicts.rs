//! `conflicts`: one open conflict per order — the server answered
//! version_conflict to one of the user's acts. It records what the user saw
//! (base), and the server's current document (theirs: who changed it, when);
//! "mine" is the user's pending acts on that order, read from `pending`.
//! While it is open, that order's later acts are held; other orders sync.

use chrono::{DateTime, Utc};
use holdfast_protocol::model::Order;
use rusqlite::{params, OptionalExtension, Transaction};
use uuid::Uuid;

use super::{from_json, to_json, Migration, StoreError, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[(
    1,
    "create table conflicts (
        order_id          text primary key,
        -- The pending row the server refused (it stays in `pending`).
        pending_seq       integer not null,
        idempotency_key   text not null,
        your_base_version integer not null,
        -- The document the user was looking at when they acted.
        base_doc          text,
        -- The server's current document; pulls keep it fresh.
        theirs            text not null,
        detected_at       integer not null
    );",
)];

#[derive(Debug, Clone)]
pub struct Record {
    pub order_id: Uuid,
    pub pending_seq: i64,
    pub key: String,
    pub your_base_version: i64,
    pub base_doc: Option<Order>,
    pub theirs: Order,
    pub detected_at: i64,
}

impl Record {
    pub fn changed_by(&self) -> &str {
        &self.theirs.updated_by_name
    }

    pub fn changed_at(&self) -> DateTime<Utc> {
        self.theirs.updated_at
    }
}

/// Opens the order's conflict (replacing an older record for it).
pub fn open(tx: &Transaction<'_>, r: &Record) -> StoreResult<()> {
    tx.prepare_cached(
        "insert or replace into conflicts (order_id, pending_seq, idempotency_key,
                your_base_version, base_doc, theirs, detected_at)
         values (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        r.order_id.to_string(),
        r.pending_seq,
        r.key,
        r.your_base_version,
        r.base_doc.as_ref().map(to_json).transpose()?,
        to_json(&r.theirs)?,
        r.detected_at
    ])?;
    Ok(())
}

/// A pull brought a newer server document: the user decides against it.
pub fn refresh_theirs(tx: &Transaction<'_>, theirs: &Order) -> StoreResult<()> {
    // Every pulled order passes here and almost none is in conflict: ask
    // that first, cheaply, before decoding a record.
    let open: bool = tx
        .prepare_cached("select exists (select 1 from conflicts where order_id = ?1)")?
        .query_row([theirs.id.to_string()], |r| r.get(0))?;
    if !open {
        return Ok(());
    }
    let Some(current) = get(tx, theirs.id)? else {
        return Ok(());
    };
    if current.theirs.version < theirs.version {
        tx.prepare_cached("update conflicts set theirs = ?2 where order_id = ?1")?
            .execute(params![theirs.id.to_string(), to_json(theirs)?])?;
    }
    Ok(())
}

pub fn close(tx: &Transaction<'_>, order_id: Uuid) -> StoreResult<()> {
    tx.prepare_cached("delete from conflicts where order_id = ?1")?
        .execute([order_id.to_string()])?;
    Ok(())
}

type RawRow = (String, i64, String, i64, Option<String>, String, i64);

fn raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
    ))
}

fn record(
    (order_id, pending_seq, key, your_base_version, base_doc, theirs, detected_at): RawRow,
) -> StoreResult<Record> {
    Ok(Record {
        order_id: order_id
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("conflict order id {order_id:?}")))?,
        pending_seq,
        key,
        your_base_version,
        base_doc: base_doc.as_deref().map(from_json).transpose()?,
        theirs: from_json(&theirs)?,
        detected_at,
    })
}

const COLUMNS: &str =
    "order_id, pending_seq, idempotency_key, your_base_version, base_doc, theirs, detected_at";

pub fn get(tx: &Transaction<'_>, order_id: Uuid) -> StoreResult<Option<Record>> {
    tx.query_row(
        &format!("select {COLUMNS} from conflicts where order_id = ?1"),
        [order_id.to_string()],
        raw,
    )
    .optional()?
    .map(record)
    .transpose()
}

pub fn list(tx: &Transaction<'_>) -> StoreResult<Vec<Record>> {
    let mut stmt = tx.prepare(&format!(
        "select {COLUMNS} from conflicts order by detected_at, order_id"
    ))?;
    let rows = stmt.query_map([], raw)?.collect::<Result<Vec<_>, _>>()?;
    rows.into_iter().map(record).collect()
}
