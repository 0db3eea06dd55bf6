//! Where a desk's read runs: the primary, or a streaming replica
//! (`serve --read-database-url`) once that replica has caught up with the
//! primary as it was when the request arrived.
//!
//! # What reads the replica
//!
//! Only the desk's reads of documents: the pull feed (`GET /v1/sync/pull`)
//! and `GET` of orders (one, the list, an order's history, the
//! dead-lettered ones), SKUs, customers, invoices and price lists. Nothing
//! else:
//!
//! - mutations, batch pushes, inbound webhooks and every operator write need
//!   the primary (a standby refuses writes);
//! - the bearer-token lookup stays on the primary: a revoked token, a reset
//!   password or a deactivated user must stop working at once, and a replica
//!   that lags would still let them in. The lookup also reads the primary's
//!   WAL position in the same statement, which is what makes the replica safe
//!   to read (below), at no extra round trip;
//! - sign-in, sign-out and the admin page's session (they write);
//! - the operator routes' reads (partners, deliveries, stats, inbound events,
//!   users): operators act on what they read (requeue, deactivate) and are
//!   few; they stay on the primary;
//! - the stream's LISTEN (a standby cannot LISTEN), the relay, the reaper,
//!   compaction, `/readyz`.
//!
//! # Never older than the primary at the request's arrival
//!
//! A replica replays the primary's WAL some time after it was written: a
//! desk that PATCHed an order and then GETs it (or pulls) could be answered
//! by a replica that has not replayed the PATCH yet, and see its own
//! acknowledged write missing. So every replica read waits, bounded, for the
//! replica to pass a position of the primary's WAL, and goes to the primary
//! when it does not in time. The position is `pg_current_wal_insert_lsn()`
//! read by the token lookup, on the primary, when the request arrived:
//!
//! - it is at or after the commit record of every transaction that had
//!   finished on the primary by then — the caller's own acknowledged writes
//!   (on any instance: the position lives in the database, not in this
//!   process, and needs nothing from the client), but also every other
//!   desk's, so a read is as fresh as if it had run on the primary when it
//!   arrived;
//! - the *insert* position, not the flush position: it also covers commits
//!   made with `synchronous_commit = off` (the relay's) and aborts, which are
//!   not flushed when they finish. A replica that had not replayed them would
//!   still count those transactions as running and hold the pull's fence
//!   below changes the primary already serves, so a desk poked for a change
//!   (the poke waits for the primary's fence) would pull and not find it. At
//!   the insert position the replica's fence is at least the primary's at
//!   arrival;
//! - a replica that has replayed past it shows every commit up to it: a
//!   standby applies a commit when it replays its record, before the replay
//!   position moves on. The check runs on the very connection that then
//!   begins the read's transaction, so its snapshot is taken after the check
//!   on the same server (even if the URL names several replicas).
//!
//! Waiting, rather than sending "callers who wrote recently" to the primary,
//! needs no state shared between instances, no per-token memory that a
//! restart or another instance would not have, and no header the client
//! would have to echo (API.md is a contract): the floor travels in the
//! database's own WAL position. A replica that is behind by more than
//! [`DEFAULT_MAX_WAIT`] (or unreachable, or not a standby at all) costs one
//! bounded wait, then reads go to the primary for [`REST`] before the
//! replica is tried again, so a lagging replica slows no one for long.
//!
//! # The pull feed on a standby
//!
//! The feed's fence (`feed/pull.rs`) is `pg_snapshot_xmin` of the pull's
//! snapshot. On a hot standby that snapshot is built from the transactions
//! the standby knows to be running on the primary: every xid the WAL names
//! (and every lower one not yet seen to end, which the standby assumes
//! running), pruned only by the primary's running-transactions records, which
//! are logged after the transactions they drop had finished. So the standby's
//! fence never passes a transaction the primary still runs, and the rows
//! below it are final there too: the fence holds on a replica however far
//! behind it is (`server/tests/it/replica.rs`). The floor matters for a first
//! pull, whose pages walk the current state by id over several requests:
//! each page must see at least what the page before saw, which a page served
//! by a replica behind the previous page's source (the primary, after a
//! fallback) would not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use tokio::time::Instant;

use crate::auth::Caller;

/// How long a read waits for the replica to catch up before it goes to the
/// primary. Above Postgres' default `wal_writer_delay` (200 ms), which is how
/// long WAL of an asynchronous commit may wait to be flushed, and so sent.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_millis(500);
/// After the replica was behind past the wait, or unreachable, reads go to
/// the primary this long before the replica is tried again.
pub const REST: Duration = Duration::from_secs(1);
/// The first pause between looks at the replica's replay position; doubled
/// up to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(1);
const MAX_POLL: Duration = Duration::from_millis(16);

/// A position in the primary's WAL, in bytes (`pg_lsn - '0/0'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WalPosition(pub i64);

/// The largest WAL page header (a segment's first page has the long one).
const MAX_PAGE_HEADER: i64 = 40;

impl WalPosition {
    /// The end of the last record inserted, from `pg_current_wal_insert_lsn()`
    /// (`insert`) and `wal_block_size` (`block`).
    ///
    /// The insert position is where the *next* record will start: when the
    /// last one ended exactly at a page boundary (or a segment switch ended
    /// the segment) it points past the next page's header, 24 or 40 bytes
    /// into a page that holds nothing yet. A standby's replay position is
    /// the end of the last record it replayed, so it stops at the boundary
    /// and would never reach the insert position until someone writes again
    /// — on a quiet primary, up to the next running-transactions record,
    /// 15 s later. (Found by the replica tests: right after the base
    /// backup's segment switch every read waited its whole wait.) Rounding
    /// down to the page start when within the first 40 bytes is exact: no
    /// record ends strictly between a page's start and its first 40 bytes
    /// other than one ending at the insert position itself (a page starts
    /// with a 24- or 40-byte header, a record is at least 24 bytes), so a
    /// replay position at or past the page start has replayed every record
    /// that ends at or before `insert`.
    pub fn from_insert(insert: i64, block: i64) -> WalPosition {
        let into_page = if block > 0 { insert % block } else { 0 };
        if into_page <= MAX_PAGE_HEADER {
            WalPosition(insert - into_page)
        } else {
            WalPosition(insert)
        }
    }
}

/// The pools reads may use. Cheap to clone.
#[derive(Clone)]
pub struct Reads {
    primary: PgPool,
    replica: Option<Arc<Replica>>,
}

struct Replica {
    pool: PgPool,
    max_wait: Duration,
    /// Until when reads skip the replica.
    resting_until: Mutex<Option<Instant>>,
    stats: Arc<ReadStats>,
}

/// Where this instance's replica-eligible reads ran (also in the
/// `holdfast_replica_reads_total` metric, which every instance of a test
/// process shares).
#[derive(Debug, Default)]
pub struct ReadStats {
    /// Served by the replica.
    pub replica: AtomicU64,
    /// Sent to the primary: the replica did not catch up within the wait.
    pub behind: AtomicU64,
    /// Sent to the primary: the replica was unreachable, not a standby, or
    /// resting after one of these or a wait that ran out.
    pub unavailable: AtomicU64,
}

impl ReadStats {
    pub fn replica(&self) -> u64 {
        self.replica.load(Ordering::Relaxed)
    }

    /// Reads that went to the primary instead.
    pub fn primary(&self) -> u64 {
        self.behind.load(Ordering::Relaxed) + self.unavailable.load(Ordering::Relaxed)
    }
}

/// Why a read did not use the replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fallback {
    Behind,
    Unavailable,
}

impl Reads {
    /// Every read on the primary (no replica configured).
    pub fn primary_only(primary: PgPool) -> Reads {
        Reads {
            primary,
            replica: None,
        }
    }

    /// Desks' reads on `replica` when it has caught up within `max_wait`.
    pub fn with_replica(primary: PgPool, replica: PgPool, max_wait: Duration) -> Reads {
        Reads {
            primary,
            replica: Some(Arc::new(Replica {
                pool: replica,
                max_wait,
                resting_until: Mutex::new(None),
                stats: Arc::default(),
            })),
        }
    }

    /// This instance's counts (zero without a replica).
    pub fn stats(&self) -> Arc<ReadStats> {
        self.replica
            .as_ref()
            .map(|r| r.stats.clone())
            .unwrap_or_default()
    }

    /// Closes the replica's pool (the primary's belongs to the caller).
    pub async fn close_replica(&self) {
        if let Some(replica) = &self.replica {
            replica.pool.close().await;
        }
    }

    /// A connection for one of `caller`'s reads (see the module docs for
    /// which): on the replica once it has replayed past the primary's WAL
    /// position at the request's arrival, else on the primary. Begin the
    /// read's transaction on it (`begin_for_tenant_on`): its snapshot is
    /// then at least as new as the primary's was.
    pub async fn connection(
        &self,
        caller: &Caller,
    ) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        let (Some(replica), Some(floor)) = (&self.replica, caller.primary_wal) else {
            return self.primary.acquire().await;
        };
        if replica.resting() {
            replica.count(Fallback::Unavailable);
            return self.primary.acquire().await;
        }
        match replica.caught_up(floor).await {
            Ok(conn) => {
                replica.stats.replica.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("holdfast_replica_reads_total", "served_by" => "replica")
                    .increment(1);
                Ok(conn)
            }
            Err(why) => {
                replica.rest(why);
                self.primary.acquire().await
            }
        }
    }
}

impl Replica {
    fn resting(&self) -> bool {
        let mut until = self
            .resting_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match *until {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *until = None;
                false
            }
            None => false,
        }
    }

    fn rest(&self, why: Fallback) {
        self.count(why);
        let mut until = self
            .resting_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if until.is_none() {
            tracing::warn!(
                reason = ?why,
                rest = ?REST,
                "reads go to the primary: the replica is {}",
                match why {
                    Fallback::Behind => "behind",
                    Fallback::Unavailable => "unavailable or not a standby",
                }
            );
        }
        *until = Some(Instant::now() + REST);
    }

    fn count(&self, why: Fallback) {
        let (counter, label) = match why {
            Fallback::Behind => (&self.stats.behind, "primary_replica_behind"),
            Fallback::Unavailable => (&self.stats.unavailable, "primary_replica_unavailable"),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("holdfast_replica_reads_total", "served_by" => label).increment(1);
    }

    /// A replica connection whose server has replayed past `floor`, waiting
    /// for it at most `max_wait` (the connection's acquisition included).
    async fn caught_up(&self, floor: WalPosition) -> Result<PoolConnection<Postgres>, Fallback> {
        let deadline = Instant::now() + self.max_wait;
        let mut conn = match tokio::time::timeout_at(deadline, self.pool.acquire()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "replica connection failed");
                return Err(Fallback::Unavailable);
            }
            Err(_) => return Err(Fallback::Behind),
        };
        let mut pause = FIRST_POLL;
        loop {
            // NULL when the server is not a standby (a primary, or a promoted
            // replica): it cannot tell what it holds of our primary's WAL.
            let replayed: Option<i64> = match tokio::time::timeout_at(
                deadline,
                sqlx::query_scalar(
                    "select case when pg_is_in_recovery()
                                 then (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint end",
                )
                .fetch_one(&mut *conn),
            )
            .await
            {
                Ok(Ok(replayed)) => replayed,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "reading the replica's replay position failed");
                    return Err(Fallback::Unavailable);
                }
                Err(_) => return Err(Fallback::Behind),
            };
            match replayed {
                None => return Err(Fallback::Unavailable),
                Some(at) if WalPosition(at) >= floor => return Ok(conn),
                Some(_) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(Fallback::Behind);
                    }
                    tokio::time::sleep(pause.min(deadline - now)).await;
                    pause = (pause * 2).min(MAX_POLL);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_insert_position_past_a_page_header_means_the_page_start() {
        const SEGMENT: i64 = 16 * 1024 * 1024;
        // After a segment switch: past the long header of the new segment.
        assert_eq!(
            WalPosition::from_insert(3 * SEGMENT + 40, 8192),
            WalPosition(3 * SEGMENT)
        );
        // A record ended at a page boundary: past the short header.
        assert_eq!(
            WalPosition::from_insert(5 * 8192 + 24, 8192),
            WalPosition(5 * 8192)
        );
        // Elsewhere in a page: the position itself.
        assert_eq!(
            WalPosition::from_insert(5 * 8192 + 48, 8192),
            WalPosition(5 * 8192 + 48)
        );
        assert_eq!(
            WalPosition::from_insert(5 * 8192 + 8000, 8192),
            WalPosition(5 * 8192 + 8000)
        );
        // A larger WAL page: 40 bytes into an 8 KiB stretch is mid-page.
        assert_eq!(
            WalPosition::from_insert(8192 + 40, 32768),
            WalPosition(8192 + 40)
        );
    }
}
