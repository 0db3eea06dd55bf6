//! `rejections`: acts the server refused for a business reason (not enough
//! stock, more than the line ordered, the order's state, the credit limit) or
//! as malformed (a 400 is a bug: surfaced, never silently dropped). The
//! pending row stays in place, holding its order's later acts, until the user
//! picks a choice.

use holdfast_protocol::problem::Problem;
use rusqlite::{params, OptionalExtension, Transaction};
use uuid::Uuid;

use super::{from_json, to_json, Migration, StoreError, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[(
    1,
    "create table rejections (
        id              integer primary key autoincrement,
        pending_seq     integer not null unique,
        order_id        text not null,
        idempotency_key text not null,
        -- The problem document exactly as the server sent it.
        problem         text not null,
        created_at      integer not null
    );",
)];

#[derive(Debug, Clone)]
pub struct Record {
    pub id: i64,
    pub pending_seq: i64,
    pub order_id: Uuid,
    pub key: String,
    pub problem: Problem,
    pub created_at: i64,
}

pub fn open(
    tx: &Transaction<'_>,
    pending_seq: i64,
    order_id: Uuid,
    key: &str,
    problem: &Problem,
    now: i64,
) -> StoreResult<i64> {
    tx.prepare_cached(
        "insert or replace into rejections (pending_seq, order_id, idempotency_key, problem,
                created_at)
         values (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        pending_seq,
        order_id.to_string(),
        key,
        to_json(problem)?,
        now
    ])?;
    Ok(tx.last_insert_rowid())
}

pub fn close(tx: &Transaction<'_>, id: i64) -> StoreResult<()> {
    tx.prepare_cached("delete from rejections where id = ?1")?
        .execute([id])?;
    Ok(())
}

type RawRow = (i64, i64, String, String, String, i64);

fn raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

fn record((id, pending_seq, order_id, key, problem, created_at): RawRow) -> StoreResult<Record> {
    Ok(Record {
        id,
        pending_seq,
        order_id: order_id
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("rejection order id {order_id:?}")))?,
        key,
        problem: from_json(&problem)?,
        created_at,
    })
}

const COLUMNS: &str = "id, pending_seq, order_id, idempotency_key, problem, created_at";

pub fn get(tx: &Transaction<'_>, id: i64) -> StoreResult<Option<Record>> {
    tx.query_row(
        &format!("select {COLUMNS} from rejections where id = ?1"),
        [id],
        raw,
    )
    .optional()?
    .map(record)
    .transpose()
}

pub fn list(tx: &Transaction<'_>) -> StoreResult<Vec<Record>> {
    let mut stmt = tx.prepare(&format!("select {COLUMNS} from rejections order by id"))?;
    let rows = stmt.query_map([], raw)?.collect::<Result<Vec<_>, _>>()?;
    rows.into_iter().map(record).collect()
}
