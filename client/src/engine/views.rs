//! What the screens read: order views and desk summaries, SKUs with local
//! ATS, customers, invoices, the pending queue and the sync status line.
//! Every read is the optimistic view: the mirror with pending acts applied.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use holdfast_protocol::model::{Customer, Order, Sku};
use rusqlite::Transaction;
use serde::Serialize;
use uuid::Uuid;

use super::{Engine, Result};
use crate::store::sync_state::{self, Profile, SyncState};
use crate::store::{
    conflicts, customers, expected_prices, invoices, now_ms, order_flags, orders, pending,
    price_lists, rejections, skus, unreadable, StoreError,
};
use crate::view::{self, DeskQuery, OrderPage, OrderSummary, OrderView, PendingMark, SkuView};

/// The sync status line.
#[derive(ts_rs::TS, Debug, Clone, Serialize)]
#[ts(rename = "SyncStatus")]
pub struct Status {
    pub store: String,
    pub signed_in: Option<Profile>,
    pub token_store: String,
    /// Whether the last pass reached the server (None: no pass yet).
    pub online: Option<bool>,
    pub pending: i64,
    pub oldest_pending_at: Option<DateTime<Utc>>,
    pub oldest_pending_age_secs: Option<i64>,
    pub last_synced_at: Option<DateTime<Utc>>,
    pub conflicts: usize,
    pub rejections: usize,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// Not signed in, after an earlier sign-in: who was, for the sign-in
    /// form, and why the server ended it if it did.
    pub signed_out: Option<SignedOut>,
    /// Acts pending for `STUCK_AFTER` or more while the desk was online:
    /// the network is not the reason they have not landed.
    pub stuck: i64,
    /// How many orders have a partner delivery dead-lettered on the server
    /// (a partner was never told about a change; an operator must requeue
    /// it): the orders whose `dead_lettered` is true. As of the desk's last
    /// ask, at most a minute old while online.
    pub dead_lettered_orders: i64,
    /// Things this build holds without being able to read them (see
    /// `Engine::held`): kept documents and the user's acts in quarantine.
    pub held: usize,
}

/// Orders part of which this build cannot read: the server's latest
/// version is kept unread, or one of the user's acts on it is in quarantine.
fn needs_newer_app(tx: &Transaction<'_>) -> Result<std::collections::HashSet<Uuid>, StoreError> {
    let mut ids = unreadable::orders(tx)?;
    ids.extend(held_acts(tx)?);
    Ok(ids)
}

/// Orders with an act of the user's in quarantine: not on the server, so
/// never "synced", whatever their readable acts say.
fn held_acts(tx: &Transaction<'_>) -> Result<std::collections::HashSet<Uuid>, StoreError> {
    Ok(pending::quarantined(tx)?
        .iter()
        .filter_map(|r| r.order_id.parse::<Uuid>().ok())
        .collect())
}

/// Marks `v` as [`needs_newer_app`] says, and as pending while one of its
/// acts is in quarantine.
fn mark_held(
    v: &mut OrderView,
    newer: &std::collections::HashSet<Uuid>,
    held: &std::collections::HashSet<Uuid>,
) {
    v.needs_newer_app = newer.contains(&v.order.id);
    if held.contains(&v.order.id) && v.badge == view::Badge::Synced {
        v.badge = view::Badge::Pending;
    }
}

/// How long an act may wait, online, before the desk calls it stuck.
pub const STUCK_AFTER: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Acts queued at or before the returned time (ms) are stuck: both they and
/// the desk's current online stretch are at least [`STUCK_AFTER`] old. None
/// while offline, or online for less than that.
fn stuck_cutoff(state: &SyncState, now: i64) -> Option<i64> {
    let cutoff = now - STUCK_AFTER.as_millis() as i64;
    (state.online == Some(true) && state.online_since.is_some_and(|t| t <= cutoff))
        .then_some(cutoff)
}

/// The desk's order: the newest change first, ties by id.
fn desk_order(
    a_at: DateTime<Utc>,
    a_id: Uuid,
    b_at: DateTime<Utc>,
    b_id: Uuid,
) -> std::cmp::Ordering {
    b_at.cmp(&a_at).then(a_id.cmp(&b_id))
}

/// A row of the desk's window: built already, or a mirrored order to build.
enum Slot {
    Built(Box<OrderSummary>),
    Mirror(Uuid),
}

/// Counts the filtered list as it goes by and keeps only the window's rows.
struct Placer {
    offset: usize,
    limit: usize,
    selected: Option<Uuid>,
    total: usize,
    selected_index: Option<usize>,
    window: Vec<Slot>,
}

impl Placer {
    fn new(offset: usize, limit: usize, selected: Option<Uuid>) -> Self {
        Placer {
            offset,
            limit,
            selected,
            total: 0,
            selected_index: None,
            window: Vec::new(),
        }
    }

    fn place(&mut self, id: Uuid, slot: Slot) {
        if self.selected == Some(id) {
            self.selected_index = Some(self.total);
        }
        if self.total >= self.offset && self.total - self.offset < self.limit {
            self.window.push(slot);
        }
        self.total += 1;
    }
}

/// The last sign-in of a desk that is signed out now.
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignedOut {
    /// Human words for why the server ended the session (its token was
    /// refused: an administrator deactivated the user or reset their
    /// password); None when the user signed out themselves.
    pub reason: Option<String>,
    pub server_url: String,
    pub tenant_slug: String,
    pub user_email: String,
}

impl Engine {
    /// Every order the user can see, oldest first, pending acts applied.
    pub fn orders(&self) -> Result<Vec<OrderView>> {
        let mut out = Vec::new();
        self.each_order_view(|v| out.push(v))?;
        Ok(out)
    }

    /// Every order's view, handed to `f` one at a time (mirrored orders,
    /// then those only this desk knows), so a caller that keeps less than
    /// the whole view never holds them all.
    fn each_order_view(&self, mut f: impl FnMut(OrderView)) -> Result<()> {
        Ok(self.inner.store.read(|tx| {
            let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
            let mirrors = orders::list(tx)?;
            let mirrored: HashSet<Uuid> = mirrors.iter().map(|m| m.id).collect();
            let flagged = order_flags::dead_lettered(tx)?;
            let newer = needs_newer_app(tx)?;
            let held = held_acts(tx)?;
            let mut by_order: HashMap<Uuid, Vec<pending::Row>> = HashMap::new();
            let mut local_only = Vec::new();
            for row in pending::all(tx)? {
                if !by_order.contains_key(&row.order_id) && !mirrored.contains(&row.order_id) {
                    local_only.push(row.order_id);
                }
                by_order.entry(row.order_id).or_default().push(row);
            }
            let mut emit = |v: Option<OrderView>| {
                if let Some(mut v) = v {
                    mark_held(&mut v, &newer, &held);
                    f(v);
                }
            };
            for m in mirrors {
                let rows = by_order.remove(&m.id).unwrap_or_default();
                let expected = expected_prices::for_order(tx, m.id)?;
                let dead = flagged.contains(&m.id);
                emit(view::order_view(Some(m), &rows, &expected, dead, &me));
            }
            for id in local_only {
                let rows = by_order.remove(&id).unwrap_or_default();
                let expected = expected_prices::for_order(tx, id)?;
                // Not on the server yet (to the desk's knowledge), so no
                // partner has been told anything; a flag says otherwise
                // only if the order was sent and the mirror is behind.
                let dead = flagged.contains(&id);
                emit(view::order_view(None, &rows, &expected, dead, &me));
            }
            Ok(())
        })?)
    }

    /// [`Engine::orders`] as desk rows: headers, badges and counts only,
    /// each view summarized as it is built.
    pub fn order_summaries(&self) -> Result<Vec<OrderSummary>> {
        let state = self.inner.store.read(sync_state::get)?;
        let cutoff = stuck_cutoff(&state, now_ms());
        let mut out = Vec::new();
        self.each_order_view(|v| out.push(OrderSummary::of(v, cutoff)))?;
        Ok(out)
    }

    /// One window of the desk's list (see [`DeskQuery`]): the orders that
    /// pass its filters and search, newest change first (ties by id), rows
    /// `offset..offset + limit` of them, and how many there are.
    ///
    /// An order with acts of the user's (pending, or held) or a part this
    /// build cannot read is built as its whole optimistic view, as
    /// [`Engine::order_summaries`] does; every other order's row is its
    /// mirror, so the store filters and sorts those and only the window's
    /// rows are built. Nothing here holds more than the window and the
    /// orders with acts.
    pub fn order_page(&self, query: &DeskQuery) -> Result<OrderPage> {
        let state = self.inner.store.read(sync_state::get)?;
        let cutoff = stuck_cutoff(&state, now_ms());
        let words = query.words();
        let (offset, limit) = (query.offset, query.limit.min(DeskQuery::MAX_LIMIT));
        Ok(self.inner.store.read(|tx| {
            let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
            let flagged = order_flags::dead_lettered(tx)?;
            let newer = needs_newer_app(tx)?;
            let held = held_acts(tx)?;
            let mut by_order: HashMap<Uuid, Vec<pending::Row>> = HashMap::new();
            // The orders whose row the mirror alone does not give, in a
            // fixed order (a view's acts are stamped with the time it is
            // built, so the order they are built in is the order the list
            // shows them in, and it must not change from page to page):
            // those with acts by their first act, then the rest by id.
            let mut build = Vec::new();
            for row in pending::all(tx)? {
                if !by_order.contains_key(&row.order_id) {
                    build.push(row.order_id);
                }
                by_order.entry(row.order_id).or_default().push(row);
            }
            let mut rest: Vec<Uuid> = newer
                .iter()
                .chain(held.iter())
                .filter(|id| !by_order.contains_key(id))
                .copied()
                .collect();
            rest.sort();
            rest.dedup();
            build.extend(rest);
            let built: HashSet<Uuid> = build.iter().copied().collect();
            let mut views = Vec::new();
            for &id in &build {
                let rows = by_order.remove(&id).unwrap_or_default();
                let expected = expected_prices::for_order(tx, id)?;
                let dead = flagged.contains(&id);
                let Some(mut v) =
                    view::order_view(orders::get(tx, id)?, &rows, &expected, dead, &me)
                else {
                    continue;
                };
                mark_held(&mut v, &newer, &held);
                let s = OrderSummary::of(v, cutoff);
                if !query.keeps(s.badge, s.order.status) {
                    continue;
                }
                if !words.is_empty() {
                    let name = customers::get(tx, s.order.customer_id)?.map(|c| c.name);
                    let o = &s.order;
                    let po = o.customer_po.as_deref();
                    if !view::desk_search_hits(
                        &words,
                        name.as_deref(),
                        po,
                        o.notes.as_deref(),
                        o.id,
                    ) {
                        continue;
                    }
                }
                views.push(s);
            }
            views.sort_by(|a, b| {
                desk_order(
                    a.order.updated_at,
                    a.order.id,
                    b.order.updated_at,
                    b.order.id,
                )
            });
            let mut views = views.into_iter().peekable();

            let mut page = Placer::new(offset, limit, query.selected);
            // Mirror-only orders are synced (no acts): none passes another badge.
            if query.badge.is_none_or(|b| b == view::Badge::Synced) {
                orders::each_desk_head(tx, query.status, |h| {
                    if built.contains(&h.id) {
                        return Ok(());
                    }
                    if !view::desk_search_hits(
                        &words,
                        h.customer_name.as_deref(),
                        h.customer_po.as_deref(),
                        h.notes.as_deref(),
                        h.id,
                    ) {
                        return Ok(());
                    }
                    while let Some(v) = views.next_if(|v| {
                        desk_order(v.order.updated_at, v.order.id, h.updated_at, h.id).is_lt()
                    }) {
                        page.place(v.order.id, Slot::Built(Box::new(v)));
                    }
                    page.place(h.id, Slot::Mirror(h.id));
                    Ok(())
                })?;
            }
            for v in views {
                page.place(v.order.id, Slot::Built(Box::new(v)));
            }
            let mut rows = Vec::with_capacity(page.window.len());
            for slot in page.window {
                match slot {
                    Slot::Built(s) => rows.push(*s),
                    Slot::Mirror(id) => {
                        let dead = flagged.contains(&id);
                        let v =
                            view::order_view(orders::get(tx, id)?, &[], &HashMap::new(), dead, &me);
                        rows.extend(v.map(|v| OrderSummary::of(v, cutoff)));
                    }
                }
            }
            Ok(OrderPage {
                total: page.total,
                offset,
                rows,
                selected_index: page.selected_index,
            })
        })?)
    }

    pub fn order(&self, order_id: Uuid) -> Result<Option<OrderView>> {
        Ok(self.inner.store.read(|tx| {
            let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
            let rows = pending::for_order(tx, order_id)?;
            let expected = expected_prices::for_order(tx, order_id)?;
            let dead = order_flags::dead_lettered(tx)?.contains(&order_id);
            let (newer, held) = (needs_newer_app(tx)?, held_acts(tx)?);
            Ok(
                view::order_view(orders::get(tx, order_id)?, &rows, &expected, dead, &me).map(
                    |mut v| {
                        mark_held(&mut v, &newer, &held);
                        v
                    },
                ),
            )
        })?)
    }

    /// The server's document as last synced (no pending acts applied).
    pub fn server_order(&self, order_id: Uuid) -> Result<Option<Order>> {
        Ok(self.inner.store.read(|tx| orders::get(tx, order_id))?)
    }

    /// Net units the pending acts allocate, per SKU.
    fn pending_allocation(tx: &Transaction<'_>) -> Result<HashMap<Uuid, i64>, StoreError> {
        let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let mut by_order: BTreeMap<Uuid, Vec<pending::Row>> = BTreeMap::new();
        for row in pending::all(tx)? {
            by_order.entry(row.order_id).or_default().push(row);
        }
        let mut net: HashMap<Uuid, i64> = HashMap::new();
        for (order_id, rows) in by_order {
            let mirror = orders::get(tx, order_id)?;
            let Some(v) = view::order_view(mirror.clone(), &rows, &HashMap::new(), false, &me)
            else {
                continue;
            };
            for l in &v.order.lines {
                *net.entry(l.sku_id).or_default() += l.qty_allocated;
            }
            for l in mirror.iter().flat_map(|m| m.lines.iter()) {
                *net.entry(l.sku_id).or_default() -= l.qty_allocated;
            }
        }
        Ok(net)
    }

    /// SKUs matching `q` (words in code, style, colour, size), with local ATS.
    pub fn skus(&self, q: &str, limit: i64) -> Result<Vec<SkuView>> {
        self.skus_for(q, limit, None)
    }

    /// [`Engine::skus`], each priced for `customer` when one is given (what
    /// a line added now is expected to cost them).
    pub fn skus_for(&self, q: &str, limit: i64, customer: Option<Uuid>) -> Result<Vec<SkuView>> {
        Ok(self.inner.store.read(|tx| {
            let net = Self::pending_allocation(tx)?;
            let mut out = Vec::new();
            for s in skus::search(tx, q, limit)? {
                let n = net.get(&s.id).copied().unwrap_or(0);
                let price = match customer {
                    Some(c) => price_lists::expected_price(tx, c, s.id)?,
                    None => None,
                };
                let mut v = view::sku_view(s, n);
                v.customer_price = price;
                out.push(v);
            }
            Ok(out)
        })?)
    }

    pub fn sku(&self, id: Uuid) -> Result<Option<SkuView>> {
        Ok(self.inner.store.read(|tx| {
            let net = Self::pending_allocation(tx)?;
            Ok(skus::get(tx, id)?.map(|s| {
                let n = net.get(&s.id).copied().unwrap_or(0);
                view::sku_view(s, n)
            }))
        })?)
    }

    pub fn find_sku(&self, style: &str, color: &str, size: &str) -> Result<Option<Sku>> {
        Ok(self
            .inner
            .store
            .read(|tx| skus::find_exact(tx, style, color, size))?)
    }

    pub fn customers(&self) -> Result<Vec<Customer>> {
        Ok(self.inner.store.read(customers::list)?)
    }

    /// The customer named exactly `name`, or the one customer whose name
    /// contains it.
    pub fn find_customer(&self, name: &str) -> Result<Option<Customer>> {
        Ok(self.inner.store.read(|tx| {
            let found = customers::find(tx, name)?;
            Ok(found
                .iter()
                .find(|c| c.name.eq_ignore_ascii_case(name))
                .cloned()
                .or_else(|| (found.len() == 1).then(|| found[0].clone())))
        })?)
    }

    pub fn invoice(&self, id: Uuid) -> Result<Option<holdfast_protocol::model::Invoice>> {
        Ok(self.inner.store.read(|tx| invoices::get(tx, id))?)
    }

    /// Everything not yet on the server, in order: the paper fallback.
    pub fn pending(&self) -> Result<Vec<(Uuid, PendingMark)>> {
        Ok(self.inner.store.read(|tx| {
            Ok(pending::all(tx)?
                .iter()
                .map(|r| (r.order_id, PendingMark::of(r)))
                .collect())
        })?)
    }

    /// The raw pending rows (request, key, base) for scripts and tests.
    pub fn pending_rows(&self) -> Result<Vec<pending::Row>> {
        Ok(self.inner.store.read(pending::all)?)
    }

    pub fn status(&self) -> Result<Status> {
        let now = now_ms();
        let (state, last, (count, oldest), n_conflicts, n_rejections, stuck, dead_lettered, held) =
            self.inner.store.read(|tx| {
                let state = sync_state::get(tx)?;
                let stuck = match stuck_cutoff(&state, now) {
                    Some(cutoff) => pending::queued_before(tx, cutoff)?,
                    None => 0,
                };
                Ok((
                    state,
                    sync_state::last_identity(tx)?,
                    pending::summary(tx)?,
                    conflicts::list(tx)?.len(),
                    rejections::list(tx)?.len(),
                    stuck,
                    order_flags::count(tx)?,
                    unreadable::count(tx)? + pending::quarantined_count(tx)?,
                ))
            })?;
        let signed_out = match (&state.profile, last) {
            (None, Some((server_url, tenant_slug, user_email))) => Some(SignedOut {
                reason: state.signed_out_reason.clone(),
                server_url,
                tenant_slug,
                user_email,
            }),
            _ => None,
        };
        let time = |ms: Option<i64>| ms.and_then(DateTime::<Utc>::from_timestamp_millis);
        Ok(Status {
            store: self.inner.store.path().display().to_string(),
            signed_in: state.profile,
            token_store: self.inner.tokens.describe(),
            online: state.online,
            pending: count,
            oldest_pending_at: time(oldest),
            oldest_pending_age_secs: oldest.map(|o| ((now - o) / 1000).max(0)),
            last_synced_at: time(state.last_synced_at),
            conflicts: n_conflicts,
            rejections: n_rejections,
            next_attempt_at: time(state.next_attempt_at),
            last_error: state.last_error,
            signed_out,
            stuck,
            dead_lettered_orders: dead_lettered,
            held,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(online: Option<bool>, online_since: Option<i64>) -> SyncState {
        SyncState {
            store_id: "s".into(),
            profile: None,
            cursor: None,
            last_push_at: None,
            last_pull_at: None,
            last_synced_at: None,
            failures: 0,
            next_attempt_at: None,
            last_error: None,
            online,
            signed_out_reason: None,
            online_since,
            history: None,
            restore_started_at: None,
        }
    }

    #[test]
    fn only_time_spent_online_makes_an_act_stuck() {
        let after = STUCK_AFTER.as_millis() as i64;
        let now = 10 * after;
        // Offline, or back online only a minute ago: nothing is stuck yet,
        // however old the acts.
        assert_eq!(stuck_cutoff(&state(Some(false), None), now), None);
        assert_eq!(stuck_cutoff(&state(None, None), now), None);
        assert_eq!(
            stuck_cutoff(&state(Some(true), Some(now - 60_000)), now),
            None
        );
        // Online for the whole window: acts queued before it are stuck.
        assert_eq!(
            stuck_cutoff(&state(Some(true), Some(now - after)), now),
            Some(now - after)
        );
    }
}
