//! `pending`: the local outbox. One row per user act that has not reached the
//! server yet, in the order the user made them (`seq`).
//!
//! A row keeps its idempotency key (minted once, reused on every retry), the
//! exact request, the base version the user was looking at and a snapshot of
//! that document (the "base" of a conflict), and its retry state. A row that
//! met a conflict or a rejection stays in place with that status: it holds the
//! later rows of its order until the user resolves it, and its resolution
//! takes its place in the order.

use holdfast_protocol::model::Order;
use rusqlite::{params, OptionalExtension, Transaction};
use serde::Serialize;
use uuid::Uuid;

use super::{from_json, to_json, Migration, StoreError, StoreResult};
use crate::act::{self, Act, WireRequest};

pub(super) const MIGRATIONS: &[Migration] = &[
    (
        1,
        "create table pending (
        -- The order of the user's acts; a resolution keeps its row's place.
        seq             integer primary key autoincrement,
        idempotency_key text not null unique,
        order_id        text not null,
        -- Envelope schema of `act` (see act.rs): older rows are upcast.
        schema_version  integer not null,
        act             text,
        -- The request exactly as sent: frozen, its fingerprint is the key's.
        method          text not null,
        path            text not null,
        body            text not null,
        -- The order version the user was looking at (0: the order is new).
        base_version    integer not null,
        -- That document (with the user's earlier pending acts applied).
        base_doc        text,
        created_at      integer not null,
        attempts        integer not null default 0,
        next_attempt_at integer not null,
        last_error      text,
        status          text not null default 'queued'
                        check (status in ('queued', 'conflict', 'rejected'))
    );
    create index pending_order on pending (order_id, seq);",
    ),
    (
        6,
        // A row this build cannot read (written by a newer app, or damaged)
        // is quarantined rather than failing the whole queue: kept, with why,
        // holding its order's later rows, until an app that reads it sends it.
        "alter table pending add column quarantined text;
    alter table pending add column quarantined_at integer;",
    ),
];

#[derive(ts_rs::TS)]
#[ts(rename = "PendingStatus")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Waiting to be sent (or to be retried).
    Queued,
    /// The server answered version_conflict; see `conflicts`.
    Conflict,
    /// The server refused it; see `rejections`.
    Rejected,
    /// This build cannot read it (see [`quarantine`]): kept, not sent.
    Quarantined,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Conflict => "conflict",
            Status::Rejected => "rejected",
            // Never stored in `status`: a quarantined row keeps the status
            // it had and carries its reason in `quarantined`.
            Status::Quarantined => "quarantined",
        }
    }

    fn parse(s: &str) -> StoreResult<Self> {
        match s {
            "queued" => Ok(Status::Queued),
            "conflict" => Ok(Status::Conflict),
            "rejected" => Ok(Status::Rejected),
            "quarantined" => Ok(Status::Quarantined),
            other => Err(StoreError::Corrupt(format!("pending status {other:?}"))),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub seq: i64,
    pub key: String,
    pub order_id: Uuid,
    pub act: Act,
    pub request: WireRequest,
    pub base_version: i64,
    #[serde(skip)]
    pub base_doc: Option<Order>,
    pub created_at: i64,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub last_error: Option<String>,
    pub status: Status,
    /// The app version that queued the act (None: before act schema 3).
    pub queued_by: Option<String>,
}

/// A new act for the queue.
#[derive(Debug, Clone)]
pub struct New<'a> {
    pub key: &'a str,
    pub act: &'a Act,
    pub base_version: i64,
    pub base_doc: Option<&'a Order>,
    pub now: i64,
}

pub fn insert(tx: &Transaction<'_>, new: &New<'_>) -> StoreResult<i64> {
    let req = new.act.request();
    tx.prepare_cached(
        "insert into pending (idempotency_key, order_id, schema_version, act, method, path, body,
                              base_version, base_doc, created_at, next_attempt_at)
         values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)",
    )?
    .execute(params![
        new.key,
        new.act.order_id().to_string(),
        act::SCHEMA,
        to_json(&act::Envelope::new(new.act))?,
        req.method,
        req.path,
        to_json(&req.body)?,
        new.base_version,
        new.base_doc.map(to_json).transpose()?,
        new.now,
    ])?;
    Ok(tx.last_insert_rowid())
}

const COLUMNS: &str = "seq, idempotency_key, order_id, schema_version, act, method, path, body,
    base_version, base_doc, created_at, attempts, next_attempt_at, last_error, status";

struct Raw {
    seq: i64,
    key: String,
    order_id: String,
    schema: i64,
    act: Option<String>,
    method: String,
    path: String,
    body: String,
    base_version: i64,
    base_doc: Option<String>,
    created_at: i64,
    attempts: i64,
    next_attempt_at: i64,
    last_error: Option<String>,
    status: String,
}

fn raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<Raw> {
    Ok(Raw {
        seq: r.get(0)?,
        key: r.get(1)?,
        order_id: r.get(2)?,
        schema: r.get(3)?,
        act: r.get(4)?,
        method: r.get(5)?,
        path: r.get(6)?,
        body: r.get(7)?,
        base_version: r.get(8)?,
        base_doc: r.get(9)?,
        created_at: r.get(10)?,
        attempts: r.get(11)?,
        next_attempt_at: r.get(12)?,
        last_error: r.get(13)?,
        status: r.get(14)?,
    })
}

fn row(r: Raw) -> StoreResult<Row> {
    let request = WireRequest {
        method: r.method,
        path: r.path,
        body: from_json(&r.body)?,
    };
    let envelope = envelope(r.schema, r.act.as_deref(), || Ok(request.clone()))?;
    Ok(Row {
        seq: r.seq,
        key: r.key,
        order_id: r
            .order_id
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("pending order id {:?}", r.order_id)))?,
        act: envelope.mutation,
        queued_by: envelope.app,
        request,
        base_version: r.base_version,
        base_doc: r.base_doc.as_deref().map(from_json).transpose()?,
        created_at: r.created_at,
        attempts: r.attempts,
        next_attempt_at: r.next_attempt_at,
        last_error: r.last_error,
        status: Status::parse(&r.status)?,
    })
}

/// A row's envelope (see [`act::read_envelope`]); `request` is asked for
/// only by a row of an older schema.
fn envelope(
    schema: i64,
    text: Option<&str>,
    request: impl FnOnce() -> StoreResult<WireRequest>,
) -> StoreResult<act::Envelope> {
    let schema = u32::try_from(schema)
        .map_err(|_| StoreError::Corrupt(format!("pending act schema {schema}")))?;
    act::read_envelope(schema, text, request)
}

/// Reads a row the way [`row`] does; a row this build cannot read is left
/// out with a warning (it is quarantined by the next [`scan`] or
/// [`quarantine_unreadable`]), so one bad row never hides the others.
fn readable(r: Raw) -> Option<Row> {
    let seq = r.seq;
    left_out_if_unreadable(seq, row(r))
}

/// `read` of row `seq`, or `None` with a warning when it failed.
fn left_out_if_unreadable<T>(seq: i64, read: StoreResult<T>) -> Option<T> {
    read.map_err(
        |e| tracing::warn!(seq, error = %e, "leaving out a pending act this build cannot read"),
    )
    .ok()
}

/// Every readable pending row not in quarantine, in the user's order.
pub fn all(tx: &Transaction<'_>) -> StoreResult<Vec<Row>> {
    let mut stmt = tx.prepare_cached(&format!(
        "select {COLUMNS} from pending where quarantined is null order by seq"
    ))?;
    let rows = stmt.query_map([], raw)?.collect::<Result<Vec<_>, _>>()?;
    Ok(rows.into_iter().filter_map(readable).collect())
}

/// What [`scan`] sees of a row before deciding: the cheap columns only.
#[derive(Debug, Clone, Copy)]
pub struct Head {
    pub order_id: Uuid,
    /// [`Status::Quarantined`] for a quarantined row, whatever it was.
    pub status: Status,
    pub next_attempt_at: i64,
    /// Bytes of the request as sent (path and body).
    pub request_bytes: usize,
}

/// What [`scan`] does with the row it showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    Take,
    Skip,
    Stop,
}

/// What [`scan`] found.
#[derive(Debug, Default)]
pub struct Scanned {
    /// The rows taken, decoded, in the user's order.
    pub taken: Vec<Row>,
    /// Rows this build cannot read, with why: quarantine them
    /// ([`quarantine`]) and scan again, since each holds its order.
    pub unreadable: Vec<(i64, String)>,
}

/// Walks the rows in the user's order and decodes only those `visit`
/// takes, stopping when it says so. Picking the next push batch is then
/// proportional to the batch (plus any held rows ahead of it), not to the
/// whole queue: a 10,000-act flush reads each row once instead of decoding
/// every remaining row (act and base document) for every batch.
pub fn scan(tx: &Transaction<'_>, mut visit: impl FnMut(&Head) -> Visit) -> StoreResult<Scanned> {
    let mut heads = tx.prepare_cached(
        "select seq, order_id, case when quarantined is null then status else 'quarantined' end,
                next_attempt_at, octet_length(path) + octet_length(body)
           from pending order by seq",
    )?;
    let mut whole = tx.prepare_cached(&format!("select {COLUMNS} from pending where seq = ?1"))?;
    let mut rows = heads.query([])?;
    let mut found = Scanned::default();
    while let Some(r) = rows.next()? {
        let seq: i64 = r.get(0)?;
        let order_id: String = r.get(1)?;
        let status = r
            .get::<_, String>(2)
            .map_err(StoreError::from)
            .and_then(|s| Status::parse(&s));
        let head = match (order_id.parse::<Uuid>(), status) {
            (Ok(order_id), Ok(status)) => Head {
                order_id,
                status,
                next_attempt_at: r.get(3)?,
                request_bytes: r.get::<_, i64>(4)?.try_into().unwrap_or(usize::MAX),
            },
            // In quarantine already, and for no order this build can name:
            // there is nothing for it to hold.
            (Err(_), Ok(Status::Quarantined)) => continue,
            (Err(_), _) => {
                let why = format!("its order id {order_id:?} is not a UUID");
                found.unreadable.push((seq, why));
                continue;
            }
            (Ok(_), Err(e)) => {
                found.unreadable.push((seq, e.to_string()));
                continue;
            }
        };
        match visit(&head) {
            Visit::Take => match whole
                .query_row([seq], raw)
                .map_err(StoreError::from)
                .and_then(row)
            {
                Ok(row) => found.taken.push(row),
                Err(e) => found.unreadable.push((seq, e.to_string())),
            },
            Visit::Skip => {}
            Visit::Stop => break,
        }
    }
    Ok(found)
}

/// The readable pending rows of one order not in quarantine, in the
/// user's order.
pub fn for_order(tx: &Transaction<'_>, order_id: Uuid) -> StoreResult<Vec<Row>> {
    let mut stmt = tx.prepare_cached(&format!(
        "select {COLUMNS} from pending where order_id = ?1 and quarantined is null order by seq"
    ))?;
    let rows = stmt
        .query_map([order_id.to_string()], raw)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows.into_iter().filter_map(readable).collect())
}

/// What queuing an act reads of an order's earlier ones: each act, whether
/// it shows in the view, and its base version.
#[derive(Debug, Clone)]
pub struct Queued {
    pub act: Act,
    pub base_version: i64,
    pub status: Status,
}

/// [`for_order`]'s rows as [`Queued`]: the same rows, left out the same way,
/// without decoding each one's request and base document. An act queued on
/// an order is made on the view of every earlier one, so the last acts of a
/// long order read dozens of rows; their base documents (~2 kB of JSON
/// each) were two thirds of an act's time.
pub fn queued_for_order(tx: &Transaction<'_>, order_id: Uuid) -> StoreResult<Vec<Queued>> {
    let mut stmt = tx.prepare_cached(
        "select seq, schema_version, act, method, path, body, base_version, status
           from pending where order_id = ?1 and quarantined is null order by seq",
    )?;
    let mut rows = stmt.query([order_id.to_string()])?;
    let mut found = Vec::new();
    while let Some(r) = rows.next()? {
        let seq: i64 = r.get(0)?;
        let read = (|| {
            let act: Option<String> = r.get(2)?;
            let request = || {
                Ok(WireRequest {
                    method: r.get(3)?,
                    path: r.get(4)?,
                    body: from_json(&r.get::<_, String>(5)?)?,
                })
            };
            let envelope = envelope(r.get(1)?, act.as_deref(), request)?;
            Ok::<_, StoreError>(Queued {
                act: envelope.mutation,
                base_version: r.get(6)?,
                status: Status::parse(&r.get::<_, String>(7)?)?,
            })
        })();
        found.extend(left_out_if_unreadable(seq, read));
    }
    Ok(found)
}

/// One row, if it is readable and not in quarantine.
pub fn get(tx: &Transaction<'_>, seq: i64) -> StoreResult<Option<Row>> {
    Ok(tx
        .query_row(
            &format!("select {COLUMNS} from pending where seq = ?1 and quarantined is null"),
            [seq],
            raw,
        )
        .optional()?
        .and_then(readable))
}

/// Puts a row this build cannot read in quarantine: it stays in its place
/// with `why`, is never sent by this build, and holds its order's later
/// rows (as a conflict does) until an app that reads it takes it out.
pub fn quarantine(tx: &Transaction<'_>, seq: i64, why: &str, now: i64) -> StoreResult<()> {
    tx.prepare_cached(
        "update pending set quarantined = ?2, quarantined_at = ?3
          where seq = ?1 and quarantined is null",
    )?
    .execute(params![seq, why, now])?;
    Ok(())
}

/// Reads every row once (when the store opens): rows this build cannot
/// read go into quarantine, and rows in quarantine that it can read now
/// (the app was upgraded) come out, in their place. Returns how many rows
/// are in quarantine.
pub fn review_quarantine(tx: &Transaction<'_>, now: i64) -> StoreResult<usize> {
    let seqs = tx
        .prepare_cached("select seq, quarantined is not null from pending order by seq")?
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, bool>(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    let mut whole = tx.prepare_cached(&format!("select {COLUMNS} from pending where seq = ?1"))?;
    let mut held = 0;
    for (seq, was_held) in seqs {
        let read = whole
            .query_row([seq], raw)
            .map_err(StoreError::from)
            .and_then(row);
        match (read, was_held) {
            (Ok(_), true) => {
                tx.prepare_cached(
                    "update pending set quarantined = null, quarantined_at = null where seq = ?1",
                )?
                .execute([seq])?;
                tracing::info!(seq, "a pending act in quarantine is readable now: it goes");
            }
            (Ok(_), false) => {}
            (Err(e), was_held) => {
                if !was_held {
                    tracing::warn!(seq, error = %e, "quarantining a pending act this build cannot read");
                    quarantine(tx, seq, &e.to_string(), now)?;
                }
                held += 1;
            }
        }
    }
    Ok(held)
}

/// A row in quarantine, as stored (nothing of it is decoded).
#[derive(Debug, Clone, Serialize)]
pub struct Quarantined {
    pub seq: i64,
    pub idempotency_key: String,
    /// As stored (a UUID when the row is sound enough to say).
    pub order_id: String,
    pub schema_version: i64,
    pub act: Option<String>,
    pub method: String,
    pub path: String,
    pub body: String,
    pub base_version: i64,
    pub created_at: i64,
    /// Why this build cannot read it.
    pub reason: String,
    pub quarantined_at: i64,
}

/// How many rows are in quarantine.
pub fn quarantined_count(tx: &Transaction<'_>) -> StoreResult<usize> {
    let n: i64 = tx
        .prepare_cached("select count(*) from pending where quarantined is not null")?
        .query_row([], |r| r.get(0))?;
    Ok(n as usize)
}

/// Every row in quarantine, in the user's order.
pub fn quarantined(tx: &Transaction<'_>) -> StoreResult<Vec<Quarantined>> {
    let mut stmt = tx.prepare_cached(
        "select seq, idempotency_key, order_id, schema_version, act, method, path, body,
                base_version, created_at, quarantined, quarantined_at
           from pending where quarantined is not null order by seq",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(Quarantined {
                seq: r.get(0)?,
                idempotency_key: r.get(1)?,
                order_id: r.get(2)?,
                schema_version: r.get(3)?,
                act: r.get(4)?,
                method: r.get(5)?,
                path: r.get(6)?,
                body: r.get(7)?,
                base_version: r.get(8)?,
                created_at: r.get(9)?,
                reason: r.get(10)?,
                quarantined_at: r.get(11)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// The act reached the server (or is dropped by the user).
pub fn delete(tx: &Transaction<'_>, seq: i64) -> StoreResult<()> {
    tx.prepare_cached("delete from pending where seq = ?1")?
        .execute([seq])?;
    Ok(())
}

pub fn set_status(tx: &Transaction<'_>, seq: i64, status: Status, error: &str) -> StoreResult<()> {
    tx.prepare_cached(
        "update pending set status = ?2, attempts = attempts + 1, last_error = ?3 where seq = ?1",
    )?
    .execute(params![seq, status.as_str(), error])?;
    Ok(())
}

/// One attempt that must be retried: not before `next_attempt_at`.
pub fn retry_later(
    tx: &Transaction<'_>,
    seq: i64,
    error: &str,
    next_attempt_at: i64,
) -> StoreResult<()> {
    tx.prepare_cached(
        "update pending set attempts = attempts + 1, last_error = ?2, next_attempt_at = ?3
          where seq = ?1",
    )?
    .execute(params![seq, error, next_attempt_at])?;
    Ok(())
}

/// Replaces a row's act in place (same `seq`, so the same place in the
/// order) with a new key and request, queued to go now. Used by conflict and
/// rejection resolutions: a changed request is a new intention, so it gets a
/// new key (API.md: "mint a new one for a new act").
pub fn replace(
    tx: &Transaction<'_>,
    seq: i64,
    key: &str,
    act: &Act,
    base_version: i64,
    base_doc: Option<&Order>,
    now: i64,
) -> StoreResult<()> {
    let req = act.request();
    tx.prepare_cached(
        "update pending set idempotency_key = ?2, schema_version = ?3, act = ?4, method = ?5,
                path = ?6, body = ?7, base_version = ?8, base_doc = ?9, attempts = 0,
                next_attempt_at = ?10, last_error = null, status = 'queued'
          where seq = ?1",
    )?
    .execute(params![
        seq,
        key,
        act::SCHEMA,
        to_json(&act::Envelope::new(act))?,
        req.method,
        req.path,
        to_json(&req.body)?,
        base_version,
        base_doc.map(to_json).transpose()?,
        now
    ])?;
    Ok(())
}

/// When the earliest queued row may next be sent (None: nothing queued).
pub fn next_attempt(tx: &Transaction<'_>) -> StoreResult<Option<i64>> {
    Ok(tx
        .prepare_cached("select min(next_attempt_at) from pending where status = 'queued'")?
        .query_row([], |r| r.get(0))?)
}

/// Number of rows and the oldest row's creation time.
pub fn summary(tx: &Transaction<'_>) -> StoreResult<(i64, Option<i64>)> {
    Ok(tx
        .prepare_cached("select count(*), min(created_at) from pending")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?)
}

/// Acts queued at or before `cutoff` (ms) that are still here.
pub fn queued_before(tx: &Transaction<'_>, cutoff: i64) -> StoreResult<i64> {
    Ok(tx
        .prepare_cached("select count(*) from pending where created_at <= ?1")?
        .query_row([cutoff], |r| r.get(0))?)
}

/// Writes a row in the shape an older app wrote it (tests of upcasting).
#[doc(hidden)]
pub fn insert_raw_v1(
    tx: &Transaction<'_>,
    key: &str,
    request: &WireRequest,
    order_id: Uuid,
    base_version: i64,
    now: i64,
) -> StoreResult<i64> {
    tx.prepare_cached(
        "insert into pending (idempotency_key, order_id, schema_version, act, method, path, body,
                              base_version, created_at, next_attempt_at)
         values (?1, ?2, 1, null, ?3, ?4, ?5, ?6, ?7, ?7)",
    )?
    .execute(params![
        key,
        order_id.to_string(),
        request.method,
        request.path,
        to_json(&request.body)?,
        base_version,
        now
    ])?;
    Ok(tx.last_insert_rowid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn cancel(order_id: Uuid) -> Act {
        Act::Cancel {
            order_id,
            base_version: 1,
        }
    }

    #[test]
    fn scan_decodes_only_what_it_takes_in_the_users_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("desk.db")).expect("open");
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let seqs = store
            .write(|tx| {
                let mut seqs = Vec::new();
                for (i, order) in [a, b, a, b, b].into_iter().enumerate() {
                    let act = cancel(order);
                    let key = format!("k{i}");
                    let new = New {
                        key: &key,
                        act: &act,
                        base_version: 1,
                        base_doc: None,
                        now: 0,
                    };
                    seqs.push(insert(tx, &new)?);
                }
                // Order a's first act is held (a conflict).
                set_status(tx, seqs[0], Status::Conflict, "version conflict")?;
                Ok(seqs)
            })
            .expect("queue");
        let mut seen = Vec::new();
        let taken = store
            .read(|tx| {
                scan(tx, |head| {
                    seen.push((head.order_id, head.status));
                    if head.status != Status::Queued || head.order_id == a {
                        Visit::Skip
                    } else if seen.len() == 4 {
                        Visit::Stop
                    } else {
                        Visit::Take
                    }
                })
            })
            .expect("scan");
        assert_eq!(
            seen,
            vec![
                (a, Status::Conflict),
                (b, Status::Queued),
                (a, Status::Queued),
                (b, Status::Queued),
            ],
            "rows are shown in seq order and the walk stops when told"
        );
        assert!(taken.unreadable.is_empty());
        let taken: Vec<i64> = taken.taken.iter().map(|r| r.seq).collect();
        assert_eq!(taken, vec![seqs[1]], "only the taken row is decoded");
        assert_eq!(
            store.read(next_attempt).expect("next"),
            Some(0),
            "queued rows are due at once"
        );
    }

    #[test]
    fn queued_for_order_reads_the_acts_for_order_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("desk.db")).expect("open");
        let (a, b, line) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let allocate = |order_id, qty| Act::Allocate {
            order_id,
            line_id: line,
            qty,
        };
        let acts = [
            cancel(a),
            allocate(a, 2),
            allocate(b, 3),
            allocate(a, 4),
            allocate(a, 5),
        ];
        store
            .write(|tx| {
                let mut seqs = Vec::new();
                for (i, act) in acts.iter().enumerate() {
                    let key = format!("k{i}");
                    let new = New {
                        key: &key,
                        act,
                        base_version: 10 + i as i64,
                        base_doc: None,
                        now: 0,
                    };
                    seqs.push(insert(tx, &new)?);
                }
                set_status(tx, seqs[1], Status::Rejected, "no stock")?;
                // Queued by the first app, which kept only the request.
                tx.execute(
                    "update pending set schema_version = 1, act = null where seq = ?1",
                    [seqs[3]],
                )?;
                // Written by a newer app than this one.
                tx.execute(
                    "update pending set schema_version = 99 where seq = ?1",
                    [seqs[4]],
                )?;
                Ok(())
            })
            .expect("queue");
        let (full, narrow) = store
            .read(|tx| Ok((for_order(tx, a)?, queued_for_order(tx, a)?)))
            .expect("read");
        let full: Vec<_> = full
            .into_iter()
            .map(|r| (r.act, r.base_version, r.status))
            .collect();
        let narrow: Vec<_> = narrow
            .into_iter()
            .map(|q| (q.act, q.base_version, q.status))
            .collect();
        assert_eq!(
            narrow,
            vec![
                (acts[0].clone(), 10, Status::Queued),
                (acts[1].clone(), 11, Status::Rejected),
                (acts[3].clone(), 13, Status::Queued),
            ],
            "order a's readable acts in seq order, the schema-1 row upcast from its request, \
             the newer app's row left out"
        );
        assert_eq!(narrow, full, "the same rows as for_order");
    }
}
