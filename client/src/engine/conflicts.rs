//! Conflict listing and resolution: base, mine and theirs per field for an
//! order the server changed under the user's queued acts, and re-queuing
//! the surviving acts on the server's current version once the user chooses.

use rusqlite::Transaction;
use uuid::Uuid;

use super::acts::rechain;
use super::{Engine, Error, Result};
use crate::act::Act;
use crate::conflict::{self, fields_of, ConflictView, Resolution, ResolveError};
use crate::store::{conflicts, orders, pending, StoreError};
use crate::view;

impl Engine {
    fn conflict_view_in(
        tx: &Transaction<'_>,
        record: &conflicts::Record,
    ) -> Result<ConflictView, StoreError> {
        let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let rows = pending::for_order(tx, record.order_id)?;
        // Theirs: the newest server document we know.
        let mut theirs = record.theirs.clone();
        if let Some(m) = orders::get(tx, record.order_id)? {
            if m.version > theirs.version {
                theirs = m;
            }
        }
        let base = record.base_doc.clone().unwrap_or_else(|| theirs.clone());
        let mut mine = Some(base.clone());
        let mut touched = Vec::new();
        for row in rows.iter().filter(|r| view::shows(r.status)) {
            mine = view::apply(mine, &row.act, &me);
            for f in fields_of(&row.act) {
                if !touched.contains(&f) {
                    touched.push(f);
                }
            }
        }
        let mine = mine.unwrap_or_else(|| base.clone());
        let fields = conflict::diff(&base, &mine, &theirs, &touched);
        Ok(ConflictView {
            order_id: record.order_id,
            changed_by: theirs.updated_by_name.clone(),
            changed_at: theirs.updated_at,
            your_base_version: record.your_base_version,
            current_version: theirs.version,
            can_rebase: fields.iter().all(|f| !f.collides),
            held: rows.len(),
            fields,
            base,
            mine,
            theirs,
        })
    }

    pub fn conflicts(&self) -> Result<Vec<ConflictView>> {
        Ok(self.inner.store.read(|tx| {
            conflicts::list(tx)?
                .iter()
                .map(|r| Self::conflict_view_in(tx, r))
                .collect()
        })?)
    }

    pub fn conflict(&self, order_id: Uuid) -> Result<Option<ConflictView>> {
        Ok(self.inner.store.read(|tx| {
            conflicts::get(tx, order_id)?
                .map(|r| Self::conflict_view_in(tx, &r))
                .transpose()
        })?)
    }

    /// Resolves the order's conflict: re-queues the user's surviving acts on
    /// the server's current version (new keys for changed requests, bases
    /// chained from there) and releases the order's held acts.
    pub fn resolve_conflict(&self, order_id: Uuid, resolution: &Resolution) -> Result<()> {
        let mut failure: Option<Error> = None;
        self.inner.store.write(|tx| {
            let Some(record) = conflicts::get(tx, order_id)? else {
                failure = Some(Error::NotFound(format!(
                    "no open conflict on order {order_id}"
                )));
                return Ok(());
            };
            let view = Self::conflict_view_in(tx, &record)?;
            let rows: Vec<pending::Row> = pending::for_order(tx, order_id)?
                .into_iter()
                .filter(|r| view::shows(r.status))
                .collect();
            let acts: Vec<Act> = rows.iter().map(|r| r.act.clone()).collect();
            let planned = match conflict::plan(&acts, &view.fields, resolution) {
                Ok(p) => p,
                Err(e) => {
                    failure = Some(e.into());
                    return Ok(());
                }
            };
            let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
            // Choosing per field can pair one side's ship-window start with
            // the other's end; the server would refuse that edit (400) and it
            // would come back as a rejection. Say so while the user chooses.
            let mut result = Some(view.theirs.clone());
            for act in planned.iter().flatten() {
                result = view::apply(result, act, &me);
            }
            if let Some((start, end)) = result
                .and_then(|o| o.ship_window_start.zip(o.ship_window_end))
                .filter(|(start, end)| end < start)
            {
                failure = Some(ResolveError::ReversedShipWindow { start, end }.into());
                return Ok(());
            }
            let kept: Vec<(pending::Row, Option<Act>)> = rows.into_iter().zip(planned).collect();
            rechain(
                tx,
                &me,
                kept,
                view.theirs.version,
                Some(view.theirs.clone()),
                Some(record.pending_seq),
            )?;
            conflicts::close(tx, order_id)?;
            Ok(())
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        self.changed_locally();
        self.sync_soon();
        Ok(())
    }
}
