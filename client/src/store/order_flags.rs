//! `order_flags`: the server's word on which of the tenant's orders have a
//! partner delivery dead-lettered now (`GET /v1/orders/dead-lettered`), for
//! the desk row and the status bar. The pull feed does not carry it (a
//! delivery is not a document), so the sync loop asks for it now and then
//! and each answer replaces the whole table. A failed ask changes nothing
//! here: the desk keeps showing the last answer it got.
//!
//! `order_flags_ask` is one row saying when the desk last asked, so that it
//! asks at most once a minute across every process on this store (the CLI
//! syncs in short-lived processes), and at once after a sign-in.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use holdfast_protocol::model::DeadLetteredOrder;
use rusqlite::{params, Transaction};
use uuid::Uuid;

use super::{Migration, StoreError, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[(
    4,
    "create table order_flags (
        order_id      text primary key,
        -- How many of the order's partner deliveries are dead-lettered.
        dead_lettered integer not null check (dead_lettered >= 1),
        -- RFC 3339, as the server sent it: since when.
        oldest_at     text not null
    );
    create table order_flags_ask (
        id        integer primary key check (id = 1),
        -- When the desk last asked (ms; null: ask at the next pass).
        asked_at  integer,
        -- When an answer last replaced order_flags (ms; null: never).
        answered_at integer
    );
    insert into order_flags_ask (id) values (1);",
)];

/// Claims the next ask if it is due: never asked, asked `interval_ms` or
/// more ago, or "later" than now (the clock went back; waiting for it to
/// catch up could take hours). One statement, so two processes never both
/// ask within the interval. True: ask now.
pub fn claim_ask(tx: &Transaction<'_>, now: i64, interval_ms: i64) -> StoreResult<bool> {
    let claimed = tx
        .prepare_cached(
            "update order_flags_ask set asked_at = ?1
              where id = 1 and (asked_at is null or asked_at <= ?1 - ?2 or asked_at > ?1)",
        )?
        .execute(params![now, interval_ms])?;
    Ok(claimed == 1)
}

/// Ask at the next pass, whenever the last ask was (a sign-in).
pub fn ask_soon(tx: &Transaction<'_>) -> StoreResult<()> {
    tx.prepare_cached("update order_flags_ask set asked_at = null where id = 1")?
        .execute([])?;
    Ok(())
}

/// Replaces every flag with the server's answer. Returns whether anything a
/// screen shows changed (an order flagged or unflagged, a count, a time).
pub fn replace(tx: &Transaction<'_>, orders: &[DeadLetteredOrder], now: i64) -> StoreResult<bool> {
    let before = all(tx)?;
    let mut after: Vec<DeadLetteredOrder> = orders.to_vec();
    after.sort_by_key(|o| o.order_id);
    // A server bug listing an order twice would otherwise fail the whole
    // answer on the primary key; the later row wins, as an upsert would.
    after.dedup_by(|later, earlier| {
        let same = later.order_id == earlier.order_id;
        if same {
            std::mem::swap(later, earlier);
        }
        same
    });
    tx.prepare_cached("delete from order_flags")?.execute([])?;
    let mut insert = tx.prepare_cached(
        "insert into order_flags (order_id, dead_lettered, oldest_at) values (?1, ?2, ?3)",
    )?;
    for o in &after {
        insert.execute(params![
            o.order_id.to_string(),
            // Listed means at least one (API.md): a 0 would be a server bug,
            // and the order is flagged either way.
            o.dead_lettered.max(1),
            o.oldest_at.to_rfc3339()
        ])?;
    }
    tx.prepare_cached("update order_flags_ask set answered_at = ?1 where id = 1")?
        .execute([now])?;
    Ok(before != after)
}

/// Every flag, by order id.
pub fn all(tx: &Transaction<'_>) -> StoreResult<Vec<DeadLetteredOrder>> {
    let mut stmt = tx.prepare_cached(
        "select order_id, dead_lettered, oldest_at from order_flags order by order_id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|(id, dead_lettered, oldest_at)| {
            let bad = |what: &str| StoreError::Corrupt(format!("order flag {id:?}: {what}"));
            Ok(DeadLetteredOrder {
                order_id: id.parse().map_err(|_| bad("order id"))?,
                dead_lettered,
                oldest_at: DateTime::parse_from_rfc3339(&oldest_at)
                    .map_err(|_| bad("oldest_at"))?
                    .with_timezone(&Utc),
            })
        })
        .collect()
}

/// The orders with a partner delivery dead-lettered, as of the last answer.
pub fn dead_lettered(tx: &Transaction<'_>) -> StoreResult<HashSet<Uuid>> {
    Ok(all(tx)?.into_iter().map(|o| o.order_id).collect())
}

/// How many orders are flagged.
pub fn count(tx: &Transaction<'_>) -> StoreResult<i64> {
    Ok(tx
        .prepare_cached("select count(*) from order_flags")?
        .query_row([], |r| r.get(0))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn flag(order_id: Uuid, dead_lettered: i64, secs: i64) -> DeadLetteredOrder {
        DeadLetteredOrder {
            order_id,
            dead_lettered,
            oldest_at: DateTime::from_timestamp(1_800_000_000 + secs, 0).expect("time"),
        }
    }

    #[test]
    fn asks_at_most_once_per_interval_and_at_once_when_told() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("desk.db")).expect("open");
        let claim = |now| store.write(|tx| claim_ask(tx, now, 60_000)).expect("claim");
        assert!(claim(1_000_000), "never asked: ask");
        assert!(!claim(1_000_001));
        assert!(!claim(1_059_999), "within the minute: not again");
        assert!(claim(1_060_000), "a minute on: ask");
        assert!(
            claim(10),
            "the clock went back: ask rather than wait for it"
        );
        assert!(!claim(11));
        store.write(ask_soon).expect("sign-in");
        assert!(claim(12), "after a sign-in: ask at once");
    }

    #[test]
    fn each_answer_replaces_the_last_wholesale() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("desk.db")).expect("open");
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let first = vec![flag(b, 1, 5), flag(a, 3, 0)];
        assert!(store.write(|tx| replace(tx, &first, 1)).expect("replace"));
        assert_eq!(
            store.read(dead_lettered).expect("read"),
            HashSet::from([a, b])
        );
        assert!(
            !store.write(|tx| replace(tx, &first, 2)).expect("replace"),
            "the same answer changes nothing shown"
        );
        let second = vec![flag(c, 2, 9), flag(a, 2, 1)];
        assert!(store.write(|tx| replace(tx, &second, 3)).expect("replace"));
        let mut want = second.clone();
        want.sort_by_key(|o| o.order_id);
        assert_eq!(store.read(all).expect("read"), want, "b is gone");
        assert_eq!(store.read(count).expect("count"), 2);
        assert!(store.write(|tx| replace(tx, &[], 4)).expect("replace"));
        assert_eq!(store.read(count).expect("count"), 0);
        // An order listed twice keeps its later row instead of failing.
        let twice = vec![flag(a, 1, 0), flag(a, 4, 2)];
        store.write(|tx| replace(tx, &twice, 5)).expect("replace");
        assert_eq!(store.read(all).expect("read"), vec![flag(a, 4, 2)]);
    }
}
