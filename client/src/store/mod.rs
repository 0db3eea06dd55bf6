//! The local store: one SQLite file per desk (WAL, versioned migrations), with
//! one module per table holding its migration and its queries.
//!
//! Durability: `synchronous = FULL` for every commit. In WAL mode that is one
//! fsync of the WAL per commit, so a user act that returned is on disk even
//! if the machine loses power a moment later (NORMAL would only survive an
//! application crash). Commits are per user act (human speed) and per pulled
//! page, so paying the fsync everywhere is cheaper to reason about than
//! switching the pragma for the pending table's commits only.
//!
//! Concurrency: the connection sits behind a mutex (every call is one short
//! transaction); another process on the same file is serialised by SQLite's
//! own locking with a busy timeout. Only *syncing* needs more than that: see
//! [`SyncLock`].

pub mod acked;
pub mod conflicts;
pub mod customers;
pub mod expected_prices;
pub mod invoices;
pub mod order_flags;
pub mod orders;
pub mod pending;
pub mod price_lists;
pub mod rejections;
pub mod skus;
pub mod sync_state;
pub mod unreadable;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, Transaction};

/// Errors of the local store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("local store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("local store holds unreadable data: {0}")]
    Corrupt(String),
    #[error(
        "the local store {path} was written by a newer holdfast (schema {found}, this build knows {known}); upgrade holdfast"
    )]
    TooNew {
        path: String,
        found: u32,
        known: u32,
    },
    #[error("cannot open the sync lock {path}: {source}")]
    Lock {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

impl From<crate::act::ActError> for StoreError {
    fn from(e: crate::act::ActError) -> Self {
        StoreError::Corrupt(e.to_string())
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Corrupt(e.to_string())
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A table's migration step: `(schema version, SQL)`. Steps of one version
/// from every table run in one transaction that also bumps `user_version`.
pub type Migration = (u32, &'static str);

fn migrations() -> Vec<Migration> {
    let mut all: Vec<Migration> = [
        sync_state::MIGRATIONS,
        customers::MIGRATIONS,
        skus::MIGRATIONS,
        orders::MIGRATIONS,
        invoices::MIGRATIONS,
        price_lists::MIGRATIONS,
        pending::MIGRATIONS,
        expected_prices::MIGRATIONS,
        conflicts::MIGRATIONS,
        rejections::MIGRATIONS,
        order_flags::MIGRATIONS,
        unreadable::MIGRATIONS,
        acked::MIGRATIONS,
    ]
    .concat();
    // Stable: steps of one version keep the table order above.
    all.sort_by_key(|(version, _)| *version);
    all
}

/// The newest schema this build knows.
pub fn schema_version() -> u32 {
    migrations().last().map(|(v, _)| *v).unwrap_or(0)
}

/// How long a statement waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Store {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (creating if needed) the store at `path` and brings its schema up
    /// to date.
    pub fn open(path: &Path) -> StoreResult<Store> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Invalid(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // A pull page or a push answer runs the same dozen statements
        // thousands of times: keep them all prepared.
        conn.set_prepared_statement_cache_capacity(64);
        // journal_mode answers with a row, so it is queried, not executed.
        let mode: String = conn.query_row("pragma journal_mode = wal", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Invalid(format!(
                "SQLite refused WAL mode (got {mode}) for {}",
                path.display()
            )));
        }
        conn.execute_batch("pragma synchronous = full; pragma foreign_keys = on;")?;
        migrate(&mut conn, path)?;
        Ok(Store {
            path: path.to_owned(),
            conn: Mutex::new(conn),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The connection, for one call's worth of work.
    pub fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (an open
        // transaction is rolled back when dropped), so poisoning is ignored.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` in one IMMEDIATE transaction (takes the write lock up front,
    /// so two processes never deadlock upgrading read locks) and commits.
    pub fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> StoreResult<T>) -> StoreResult<T> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// [`Store::write`] for a page of pulled documents: the mirror only, which
    /// the server can always send again. Committed with `synchronous =
    /// normal` (WAL: atomic and consistent, the fsync left to the next
    /// checkpoint or FULL commit, so a power cut may undo the last pages,
    /// cursor and documents together, and the next pull brings them again)
    /// and a page cache large enough (64 MiB at most) that a page of 1,000
    /// orders (17,000 rows and their indexes) never spills mid-transaction. Both are put
    /// back before the connection is released: every other write (acts,
    /// push answers) stays FULL, and the cache shrinks back to its size.
    pub fn write_mirror<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut conn = self.conn();
        let cache: i64 = conn.query_row("pragma cache_size", [], |r| r.get(0))?;
        conn.execute_batch("pragma synchronous = normal; pragma cache_size = -65536;")?;
        let out = (|| -> StoreResult<T> {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })();
        let restored = conn.execute_batch(&format!(
            "pragma synchronous = full; pragma cache_size = {cache};"
        ));
        let out = out?;
        restored?;
        Ok(out)
    }

    /// Runs `f` in one read transaction (a consistent snapshot).
    pub fn read<T>(&self, f: impl FnOnce(&Transaction<'_>) -> StoreResult<T>) -> StoreResult<T> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Deferred)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// SQLite's `data_version`: changes when another connection commits, so a
    /// watcher notices acts queued by another process.
    pub fn data_version(&self) -> StoreResult<i64> {
        Ok(self
            .conn()
            .query_row("pragma data_version", [], |r| r.get(0))?)
    }

    /// Takes the store's sync lock without waiting; `None` if another sync
    /// (in this or another process) holds it.
    pub fn try_sync_lock(&self) -> StoreResult<Option<SyncLock>> {
        let path = lock_path(&self.path);
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| StoreError::Lock {
                path: path.display().to_string(),
                source,
            })?;
        match file.try_lock() {
            Ok(()) => Ok(Some(SyncLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(source)) => Err(StoreError::Lock {
                path: path.display().to_string(),
                source,
            }),
        }
    }
}

/// One sync at a time per store, across processes: an OS file lock on
/// `<store>.sync-lock`, held for a whole push-and-pull pass.
///
/// Why a file lock and not a row in SQLite: the OS drops it the instant the
/// holder dies, even by `kill -9`, so there is no stale lease to expire or
/// steal; and it does not hold SQLite's write lock, so the user keeps queueing
/// acts while a sync runs. Why lock at all, when the server dedupes keys: two
/// processes sending the same rows would both record the outcome (two
/// conflict records, a resolution racing a late success), and a row could be
/// resent after the other process re-keyed it.
#[derive(Debug)]
pub struct SyncLock {
    // Dropping the file closes it, which releases the lock.
    _file: File,
}

fn lock_path(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".sync-lock");
    PathBuf::from(name)
}

fn migrate(conn: &mut Connection, path: &Path) -> StoreResult<()> {
    let steps = migrations();
    let known = schema_version();
    let current: u32 = conn.query_row("pragma user_version", [], |r| r.get(0))?;
    if current > known {
        return Err(StoreError::TooNew {
            path: path.display().to_string(),
            found: current,
            known,
        });
    }
    let mut version = current;
    while version < known {
        let next = version + 1;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
        // Another process may have migrated while we waited for the lock.
        let now: u32 = tx.query_row("pragma user_version", [], |r| r.get(0))?;
        if now >= next {
            version = now;
            continue;
        }
        for (_, sql) in steps.iter().filter(|(v, _)| *v == next) {
            tx.execute_batch(sql)?;
        }
        tx.execute_batch(&format!("pragma user_version = {next}"))?;
        tx.commit()?;
        version = next;
    }
    Ok(())
}

/// Forgets every mirrored document (another server or tenant signed in:
/// what we hold is not theirs to see; or the server was restored from a
/// backup: what we hold may be newer than it). The next pull starts from
/// scratch.
pub fn reset_mirrors(tx: &Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(
        "delete from order_lines; delete from orders; delete from skus; delete from customers;
         delete from invoices; delete from price_lists; delete from order_flags;
         delete from unreadable_docs;
         update sync_state set cursor = null, history = null, restore_started_at = null;",
    )?;
    Ok(())
}

/// Drops every queued act and its conflict or rejection (an explicit choice
/// of the user: `login --discard-pending`).
pub fn reset_queue(tx: &Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(
        "delete from pending; delete from conflicts; delete from rejections;
         delete from expected_prices
          where line_id not in (select id from order_lines);",
    )?;
    Ok(())
}

/// Milliseconds since the Unix epoch: how the store keeps times it compares.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Reads a JSON column.
pub(crate) fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> StoreResult<T> {
    Ok(serde_json::from_str(text)?)
}

/// Writes a JSON column.
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> StoreResult<String> {
    Ok(serde_json::to_string(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_migrates_and_reopens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("desk.db");
        let store = Store::open(&path).expect("open");
        let v: u32 = store
            .conn()
            .query_row("pragma user_version", [], |r| r.get(0))
            .expect("version");
        assert_eq!(v, schema_version());
        let sync: i64 = store
            .conn()
            .query_row("pragma synchronous", [], |r| r.get(0))
            .expect("sync");
        assert_eq!(sync, 2, "synchronous = FULL");
        drop(store);
        Store::open(&path).expect("reopen");
    }

    #[test]
    fn refuses_a_store_from_a_newer_build() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("desk.db");
        drop(Store::open(&path).expect("open"));
        let conn = Connection::open(&path).expect("raw open");
        conn.execute_batch("pragma user_version = 999")
            .expect("bump");
        drop(conn);
        match Store::open(&path) {
            Err(StoreError::TooNew { found: 999, .. }) => {}
            other => panic!("expected TooNew, got {other:?}"),
        }
    }

    #[test]
    fn sync_lock_is_exclusive_until_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("desk.db");
        let a = Store::open(&path).expect("open a");
        let b = Store::open(&path).expect("open b");
        let held = a.try_sync_lock().expect("lock").expect("free");
        assert!(b.try_sync_lock().expect("lock").is_none());
        drop(held);
        assert!(b.try_sync_lock().expect("lock").is_some());
    }
}
