//! The pull: pages of the server's changes into the mirrors (in bulk into a
//! store that mirrors nothing), catching up with a server restored from a
//! backup, and documents this build cannot read kept for a newer app.

use holdfast_protocol::model::{Customer, Invoice, Order, PriceList, Sku};
use rusqlite::Transaction;
use serde::Deserialize;

use super::SyncReport;
use crate::api::{Api, ApiError, PullPage};
use crate::engine::{Engine, EngineEvent, Error, Result};
use crate::store::{
    acked, conflicts, customers, invoices, now_ms, orders, price_lists, skus, sync_state,
    unreadable, StoreError,
};

/// A pull that stored at least this many changes gives the heap it freed
/// back to the system when it is done (see [`crate::heap`]): a catch-up or
/// a first pull, not the one order a `changed` event brings.
const RELEASE_HEAP_AFTER: usize = 100;

impl Engine {
    /// Pulls until caught up. Returns true when this caught up with a server
    /// restored from a backup and queued again the journaled acts it lacks
    /// (the caller pushes them).
    pub(super) async fn pull_locked(&self, api: &Api, report: &mut SyncReport) -> Result<bool> {
        let limit = self.config().pull_limit;
        // A store that mirrors nothing yet (a first pull, or one after a
        // restore cleared the mirrors) is written in bulk: see `Bulk`.
        let mut bulk = self.inner.store.read(Bulk::begin)?;
        // The next page, fetched (by the stored page's cursor, exactly the
        // request the next turn would make) while this one is stored.
        let mut prefetched: Option<std::result::Result<PullPage, ApiError>> = None;
        loop {
            let started = std::time::Instant::now();
            // Whether the request named a cursor (a prefetch always does).
            let (fetched_page, with_cursor) = match prefetched.take() {
                Some(page) => (page, true),
                None => {
                    let cursor = self.inner.store.read(sync_state::get)?.cursor;
                    (api.pull(cursor.as_deref(), limit).await, cursor.is_some())
                }
            };
            let page: PullPage = match fetched_page {
                Ok(page) => page,
                // Only a cursor can be of another history: without one the
                // answer is not ours to act on (and would loop).
                Err(e) if e.is_server_restored() && with_cursor => {
                    self.server_restored()?;
                    bulk = self.inner.store.read(Bulk::begin)?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let fetched = started.elapsed();
            let now = now_ms();
            let has_more = page.has_more;
            let next_cursor = page.cursor.clone();
            let changes = page.changes.len();
            // `report` is this pass's, and a pass pulls once: it counts
            // what this pull stored before this page.
            let release_heap = !has_more && report.pulled + changes >= RELEASE_HEAP_AFTER;
            let engine = self.clone();
            let store = tokio::task::spawn_blocking(move || {
                let kept = engine.inner.store.write_mirror(|tx| {
                    let mut kept = bulk;
                    for change in &page.changes {
                        apply_change_in(tx, change, &mut kept)?;
                    }
                    sync_state::set_cursor(tx, &page.cursor, page.history.as_deref(), now)?;
                    Ok(kept)
                });
                drop(page);
                if release_heap {
                    crate::heap::release_freed();
                }
                (kept, started.elapsed())
            });
            let next = async {
                if has_more {
                    Some(api.pull(Some(&next_cursor), limit).await)
                } else {
                    None
                }
            };
            let (stored, next) = tokio::join!(store, next);
            let (kept, stored_at) = stored
                .map_err(|e| Error::Store(StoreError::Invalid(format!("store task: {e}"))))?;
            bulk = kept?;
            prefetched = next;
            report.pulled += changes;
            tracing::info!(
                changes,
                fetch_ms = fetched.as_secs_f64() * 1e3,
                store_ms = (stored_at - fetched).as_secs_f64() * 1e3,
                "pulled a page"
            );
            if !has_more {
                return self.catch_up_with_restore(report);
            }
        }
    }

    /// The server answered 410 `server_restored`: it was restored from a
    /// backup and is back where the backup was taken. What the desk mirrors
    /// may be newer than it (the mirror only moves forward, so it is
    /// cleared), its cursor is of the old history, and the acts it
    /// acknowledged after the backup are gone from the server (they are in
    /// the journal, `store::acked`). Pull everything from the start; once
    /// caught up, [`Engine::catch_up_with_restore`] queues those acts again.
    /// Until then nothing is pushed: the queue was made on top of them.
    pub(super) fn server_restored(&self) -> Result<()> {
        let now = now_ms();
        self.inner.store.write(|tx| {
            crate::store::reset_mirrors(tx)?;
            sync_state::restore_began(tx, now)
        })?;
        tracing::warn!(
            "the server was restored from a backup: pulling everything again; acts it lost \
             will be sent again"
        );
        self.emit(EngineEvent::Changed);
        Ok(())
    }

    /// After a pull that caught up: if the desk was catching up with a
    /// restored server, every journaled act the server's documents do not
    /// show goes back into the queue, in its old place, to be applied afresh
    /// under its own key (see `store::acked` for how the versions tell).
    /// True if that happened.
    fn catch_up_with_restore(&self, report: &mut SyncReport) -> Result<bool> {
        let state = self.inner.store.read(sync_state::get)?;
        if state.restore_started_at.is_none() {
            return Ok(false);
        }
        let now = now_ms();
        let done = self.inner.store.write(|tx| {
            let done = acked::requeue_missing(
                tx,
                now,
                "the server was restored from a backup taken before this act landed: sent again",
            )?;
            sync_state::restore_caught_up(tx)?;
            Ok(done)
        })?;
        report.requeued += done.requeued;
        tracing::warn!(
            requeued = done.requeued,
            present = done.present,
            "caught up with the restored server: acknowledged acts it lacked are queued again"
        );
        self.emit(EngineEvent::Changed);
        Ok(true)
    }
}

/// One change of the pull feed into the mirrors. Pending acts are untouched:
/// their bases stay what the user saw (see [`crate::engine`]).
///
/// A document this build cannot read (a newer server's status or field, a
/// kind it does not know) neither fails the page (a stuck feed would stop
/// every other document) nor is dropped (the cursor moves past it): it is
/// kept whole in [`unreadable`], shown as needing a newer app, and applied
/// when a build that reads it opens the store ([`reapply_unreadable`]).
/// Returns whether the document was read (false: kept for a newer app).
fn apply_change(tx: &Transaction<'_>, change: &crate::api::RawChange) -> Result<bool, StoreError> {
    apply_change_in(tx, change, &mut Bulk(false))
}

/// A pull into a store that mirrors nothing (checked when the pull starts:
/// no document, no conflict, nothing kept for a newer app) writes it in
/// bulk. There is nothing to compare a pulled document with, so an order is
/// inserted with its lines without first reading its version and deleting
/// its old lines, and no conflict or kept document is looked up for it.
/// Each shortcut checks its assumption as it goes: an order already stored
/// (it came twice, changed while the snapshot was paged) takes the ordinary
/// path, and the first document kept for a newer app ends bulk mode for
/// the rest of the pull. Only the pull writes mirrors and keeps documents,
/// and it holds the sync lock, so nothing else invalidates them meanwhile.
#[derive(Debug, Clone, Copy)]
struct Bulk(bool);

impl Bulk {
    fn begin(tx: &Transaction<'_>) -> Result<Bulk, StoreError> {
        let empty: bool = tx
            .prepare_cached(
                "select not exists (select 1 from orders) and not exists (select 1 from skus)
                    and not exists (select 1 from conflicts)
                    and not exists (select 1 from unreadable_docs)",
            )?
            .query_row([], |r| r.get(0))?;
        Ok(Bulk(empty))
    }
}

fn apply_change_in(
    tx: &Transaction<'_>,
    change: &crate::api::RawChange,
    bulk: &mut Bulk,
) -> Result<bool, StoreError> {
    let Some(data) = &change.data else {
        match change.kind.as_str() {
            "order" => orders::delete(tx, change.id)?,
            "sku" => skus::delete(tx, change.id)?,
            "customer" => customers::delete(tx, change.id)?,
            "invoice" => invoices::delete(tx, change.id)?,
            "price_list" => price_lists::delete(tx, change.id)?,
            _ => {}
        }
        unreadable::forget(tx, &change.kind, change.id, change.version)?;
        return Ok(true);
    };
    let applied = match change.kind.as_str() {
        "order" => Order::deserialize(data).map(|o| -> Result<(), StoreError> {
            if bulk.0 && orders::insert_new(tx, &o)? {
                return Ok(());
            }
            orders::upsert(tx, &o)?;
            conflicts::refresh_theirs(tx, &o)
        }),
        "sku" => Sku::deserialize(data).map(|s| skus::upsert(tx, &s, change.version)),
        "customer" => {
            Customer::deserialize(data).map(|c| customers::upsert(tx, &c, change.version))
        }
        "invoice" => Invoice::deserialize(data).map(|i| invoices::upsert(tx, &i, change.version)),
        "price_list" => PriceList::deserialize(data)
            .map(|p| price_lists::upsert(tx, &p, change.version).map(|_| ())),
        other => Err(serde::de::Error::custom(format!(
            "this build does not know documents of kind {other:?}"
        ))),
    };
    match applied {
        Ok(stored) => {
            stored?;
            if !bulk.0 {
                unreadable::forget(tx, &change.kind, change.id, change.version)?;
            }
            Ok(true)
        }
        Err(e) => {
            tracing::warn!(kind = %change.kind, id = %change.id, version = change.version, error = %e,
                "keeping a pulled document this build cannot read; it needs a newer app");
            let reason = e.to_string();
            *bulk = Bulk(false);
            unreadable::keep(
                tx,
                &change.kind,
                change.id,
                change.version,
                data,
                &reason,
                now_ms(),
            )?;
            Ok(false)
        }
    }
}

/// Applies every kept document this build can read now (the app was
/// upgraded since it was pulled), as the pull would have; the rest stay.
/// Returns how many were applied.
pub(crate) fn reapply_unreadable(tx: &Transaction<'_>) -> Result<usize, StoreError> {
    let mut applied = 0;
    for doc in unreadable::all(tx)? {
        let change = crate::api::RawChange {
            kind: doc.kind,
            id: doc.id,
            version: doc.version,
            data: Some(doc.doc),
        };
        if apply_change(tx, &change)? {
            applied += 1;
        }
    }
    Ok(applied)
}
