//! `acked`: the journal of recently acknowledged acts. A pending row the
//! server applied moves here, whole, in the transaction that records the
//! answer, with the order version the answer reported; it is kept for
//! `SyncConfig::journal_retention` (a week by default) and then forgotten.
//!
//! Why keep what the server has: the server can lose it. Restored from a
//! backup, it is back where the backup was taken, and every act it had
//! acknowledged since is gone from it — while the desk, which deleted each
//! row when it was acknowledged, believes them delivered. After a restore
//! (see `crate::sync`) the desk pulls everything again and, comparing
//! versions, re-queues exactly the journaled acts the restored server lacks.
//!
//! How the desk tells which acts the restored server has: every act on an
//! order raises its version by exactly one, in one transaction with the act,
//! and a backup is one consistent snapshot. So the backup holds version `v`
//! of an order if and only if it holds the act that produced `v`: an act
//! whose answer said `v` is in the restored server exactly when the restored
//! order's version is at least `v`. That needs no idempotency key to have
//! survived (the server reaps them after 72 hours), and it re-sends nothing
//! the server has, so every re-sent act is applied afresh under its own key.

use rusqlite::{params, Transaction};
use uuid::Uuid;

use super::{Migration, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[(
    7,
    "create table acked (
        -- The pending row's seq: its place in the user's order, which a
        -- re-queued act takes again.
        seq             integer primary key,
        idempotency_key text not null unique,
        order_id        text not null,
        schema_version  integer not null,
        act             text,
        method          text not null,
        path            text not null,
        body            text not null,
        base_version    integer not null,
        base_doc        text,
        created_at      integer not null,
        -- The order version the server's answer reported (null: the answer
        -- could not be read; such an act is re-sent after a restore).
        version         integer,
        acked_at        integer not null
    );
    create index acked_by_age on acked (acked_at);
    create index acked_by_order on acked (order_id, seq);",
)];

/// Moves the pending row `seq` into the journal (the server applied it and
/// answered with `version` of its order) and forgets journal entries older
/// than `keep_ms`.
pub fn record(
    tx: &Transaction<'_>,
    seq: i64,
    version: Option<i64>,
    now: i64,
    keep_ms: i64,
) -> StoreResult<()> {
    tx.prepare_cached(
        "insert or replace into acked (seq, idempotency_key, order_id, schema_version, act, method,
                                       path, body, base_version, base_doc, created_at, version,
                                       acked_at)
         select seq, idempotency_key, order_id, schema_version, act, method, path, body,
                base_version, base_doc, created_at, ?2, ?3
           from pending where seq = ?1",
    )?
    .execute(params![seq, version, now])?;
    tx.prepare_cached("delete from pending where seq = ?1")?
        .execute([seq])?;
    tx.prepare_cached("delete from acked where acked_at < ?1")?
        .execute([now.saturating_sub(keep_ms)])?;
    Ok(())
}

/// What [`requeue_missing`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requeued {
    /// Journaled acts the server lacks, queued again in their old places.
    pub requeued: usize,
    /// Journaled acts the server has (left in the journal).
    pub present: usize,
}

/// After a restore, once the mirror holds the restored server's documents:
/// every journaled act whose order is not mirrored at the version its answer
/// reported goes back into the queue, in its old place (seq), to be sent
/// again with its own key. The others stay journaled (a restore from an
/// older backup still finds them).
pub fn requeue_missing(tx: &Transaction<'_>, now: i64, why: &str) -> StoreResult<Requeued> {
    let rows: Vec<(i64, bool)> = tx
        .prepare_cached(
            "select a.seq, a.version is not null and o.version is not null
                         and o.version >= a.version
               from acked a left join orders o on o.id = a.order_id
              order by a.seq",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut done = Requeued::default();
    for (seq, present) in rows {
        if present {
            done.present += 1;
            continue;
        }
        tx.prepare_cached(
            "insert into pending (seq, idempotency_key, order_id, schema_version, act, method,
                                  path, body, base_version, base_doc, created_at, attempts,
                                  next_attempt_at, last_error, status)
             select seq, idempotency_key, order_id, schema_version, act, method, path, body,
                    base_version, base_doc, created_at, 0, ?2, ?3, 'queued'
               from acked where seq = ?1",
        )?
        .execute(params![seq, now, why])?;
        tx.prepare_cached("delete from acked where seq = ?1")?
            .execute([seq])?;
        done.requeued += 1;
    }
    Ok(done)
}

/// Forgets the journal (another user, server or tenant signed in: their
/// acts are not this user's to send again).
pub fn clear(tx: &Transaction<'_>) -> StoreResult<()> {
    tx.prepare_cached("delete from acked")?.execute([])?;
    Ok(())
}

/// The journaled acts' keys per order, oldest first (tests, diagnostics).
pub fn keys(tx: &Transaction<'_>) -> StoreResult<Vec<(Uuid, String)>> {
    let rows: Vec<(String, String)> = tx
        .prepare_cached("select order_id, idempotency_key from acked order by seq")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(order, key)| {
            let order = order
                .parse()
                .map_err(|_| super::StoreError::Corrupt(format!("acked order id {order:?}")))?;
            Ok((order, key))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::act::Act;
    use crate::store::pending::{self, New, Status};
    use crate::store::Store;

    /// Three acts on one order (versions 2, 3, 4 when acknowledged) and a
    /// fourth still pending; the restored server has the order at version 2.
    #[test]
    fn a_restore_requeues_exactly_the_acts_past_the_restored_version_in_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("desk.db")).expect("open");
        let order = Uuid::now_v7();
        let seqs = store
            .write(|tx| {
                let mut seqs = Vec::new();
                for base in 1..=4 {
                    let act = Act::Cancel {
                        order_id: order,
                        base_version: base,
                    };
                    let key = format!("k{base}");
                    seqs.push(pending::insert(
                        tx,
                        &New {
                            key: &key,
                            act: &act,
                            base_version: base,
                            base_doc: None,
                            now: 0,
                        },
                    )?);
                }
                for (i, seq) in seqs.iter().take(3).enumerate() {
                    record(tx, *seq, Some(i as i64 + 2), 1_000, 1_000_000)?;
                }
                tx.execute(
                    "insert into orders (id, customer_id, status, version, updated_at, updated_by,
                                         updated_by_name, created_at)
                     values (?1, ?1, 'draft', 2, '', '', '', '')",
                    [order.to_string()],
                )?;
                Ok(seqs)
            })
            .expect("queue and acknowledge");
        assert_eq!(store.read(pending::all).expect("pending").len(), 1);

        let done = store
            .write(|tx| requeue_missing(tx, 2_000, "restored"))
            .expect("requeue");
        assert_eq!(
            done,
            Requeued {
                requeued: 2,
                present: 1
            }
        );
        let rows = store.read(pending::all).expect("pending");
        let queued: Vec<(i64, &str, Status)> = rows
            .iter()
            .map(|r| (r.seq, r.key.as_str(), r.status))
            .collect();
        assert_eq!(
            queued,
            vec![
                (seqs[1], "k2", Status::Queued),
                (seqs[2], "k3", Status::Queued),
                (seqs[3], "k4", Status::Queued),
            ],
            "the lost acts are back in their places, before the pending one"
        );
        assert_eq!(rows[0].last_error.as_deref(), Some("restored"));
        let kept = store.read(keys).expect("journal");
        assert_eq!(
            kept,
            vec![(order, "k1".to_owned())],
            "the present act stays"
        );
    }

    #[test]
    fn the_journal_forgets_acts_past_its_retention() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("desk.db")).expect("open");
        let order = Uuid::now_v7();
        store
            .write(|tx| {
                for (i, now) in [0_i64, 5_000].into_iter().enumerate() {
                    let act = Act::Cancel {
                        order_id: order,
                        base_version: 1,
                    };
                    let key = format!("k{i}");
                    let seq = pending::insert(
                        tx,
                        &New {
                            key: &key,
                            act: &act,
                            base_version: 1,
                            base_doc: None,
                            now,
                        },
                    )?;
                    record(tx, seq, Some(2), now, 1_000)?;
                }
                Ok(())
            })
            .expect("acknowledge");
        let kept = store.read(keys).expect("journal");
        assert_eq!(kept, vec![(order, "k1".to_owned())]);
    }
}
