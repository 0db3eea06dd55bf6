//! A simulated desk: the real client engine over its own SQLite store,
//! talking to the server through its own fault proxy, driven by a seeded
//! RNG the way an account manager on the phone would drive it — edits, line
//! changes, allocations and releases on shared orders and hot SKUs, online
//! and offline, resolving what conflicts and rejections come back — and
//! now and then "crashed": the engine dropped in the middle of a sync, right
//! after a request went upstream, and the same store opened again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::NaiveDate;
use holdfast_client::api::Timeouts;
use holdfast_client::conflict::Choice;
use holdfast_client::store::pending::Status;
use holdfast_client::token::{MemoryTokens, TokenStore};
use holdfast_client::{
    Engine, EngineEvent, Error, NewOrder, RejectionChoice, Resolution, SyncConfig,
};
use holdfast_protocol::model::{Order, OrderHeaderSet, OrderStatus};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::keys::{pick_rejection_choice, Keys, Vanished};
use crate::proxy::Proxy;
use crate::Progress;

/// The fixture every desk acts on.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// A few SKUs with little stock, on which desks contend.
    pub hot: Vec<Uuid>,
    /// SKUs with room, for ordinary lines.
    pub cold: Vec<Uuid>,
    /// Customers without and with a credit limit.
    pub customers: Vec<Uuid>,
    /// Draft orders desks try to keep around.
    pub orders: usize,
}

/// Counters for the report.
#[derive(Debug, Default, Clone)]
pub struct DeskStats {
    pub acts: u64,
    pub local_refusals: u64,
    pub syncs: u64,
    pub sync_failures: u64,
    pub replayed: u64,
    pub crashes: u64,
    pub offline_spells: u64,
    pub conflicts_resolved: u64,
    pub rejections_resolved: u64,
    /// Time spent in each kind of step (for tuning the load).
    pub time_acting: Duration,
    pub time_syncing: Duration,
    pub time_other: Duration,
}

/// How many conflicts and rejections to resolve, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// A couple, as a user between calls would.
    Few,
    /// All, re-issuing the user's work where possible.
    AllKeep,
    /// All, dropping what the server refused.
    AllDrop,
}

/// Rejections a user meets in normal business (API.md's stored ones).
const BUSINESS: &[&str] = &[
    "insufficient_ats",
    "over_allocation",
    "invalid_state",
    "credit_limit_exceeded",
];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Edit,
    AddLine,
    ChangeLine,
    RemoveLine,
    Allocate,
    Release,
    Confirm,
    Cancel,
}

pub struct Desk {
    pub index: usize,
    pub email: String,
    engine: Engine,
    path: PathBuf,
    tokens: Arc<dyn TokenStore>,
    config: SyncConfig,
    pub proxy: Arc<Proxy>,
    rng: StdRng,
    pub keys: Keys,
    events: broadcast::Receiver<EngineEvent>,
    pub stats: DeskStats,
    /// Steps left before this desk is back online (0: online).
    offline_for: u32,
    /// The last rush (everyone syncs at once) this desk answered.
    rushes_seen: u64,
    catalog: Catalog,
    /// Things the engine did that it must not (an unexpected error kind).
    pub anomalies: Vec<String>,
    /// Lines the optimistic view showed with a negative allocation.
    pub negative_lines: std::collections::HashSet<Uuid>,
}

fn config(rng: &mut StdRng) -> SyncConfig {
    SyncConfig {
        // Small, varied batches: more pushes, more moments to be cut short.
        batch_size: rng.random_range(4..40),
        backoff_base_ms: 10,
        backoff_cap_ms: 200,
        timeouts: Timeouts {
            connect: Duration::from_secs(1),
            // Long enough for a batch on a loaded 2-core machine, short
            // enough that a black hole costs a desk seconds, not minutes.
            request: Duration::from_secs(4),
            stream_idle: Duration::from_secs(45),
        },
        ..SyncConfig::default()
    }
}

impl Desk {
    pub fn open(
        index: usize,
        email: &str,
        dir: &Path,
        proxy: Arc<Proxy>,
        seed: u64,
        catalog: Catalog,
    ) -> anyhow::Result<Desk> {
        let mut rng = StdRng::seed_from_u64(seed);
        let config = config(&mut rng);
        let path = dir.join(format!("desk-{index}.db"));
        let tokens: Arc<dyn TokenStore> = Arc::new(MemoryTokens::default());
        let engine = Engine::open(&path, tokens.clone(), config.clone())?;
        let events = engine.subscribe();
        Ok(Desk {
            index,
            email: email.to_owned(),
            engine,
            path,
            tokens,
            config,
            proxy,
            rng,
            keys: Keys::new(index),
            events,
            stats: DeskStats::default(),
            offline_for: 0,
            rushes_seen: 0,
            catalog,
            anomalies: Vec::new(),
            negative_lines: Default::default(),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Signs in through the proxy (faults off at this point) and pulls.
    pub async fn login(&mut self, password: &str) -> anyhow::Result<()> {
        let name = format!("chaos desk {}", self.index);
        self.engine
            .login(
                &self.proxy.url(),
                "acme",
                &self.email,
                password,
                &name,
                false,
            )
            .await
            .with_context(|| format!("desk {} login", self.index))?;
        self.engine.sync_once().await?;
        self.observe(Vanished::Acked)?;
        Ok(())
    }

    /// Creates one order (setup: every desk starts with its share).
    pub fn create_order(&mut self, progress: &Progress) -> anyhow::Result<()> {
        let n: u32 = self.rng.random();
        self.engine.create_order(NewOrder {
            customer_id: self.catalog.customers[0],
            customer_po: Some(format!("CHAOS-{}-{n}", self.index)),
            ..Default::default()
        })?;
        self.stats.acts += 1;
        progress.add_act();
        self.observe(Vanished::Acked)
    }

    /// Counts answers replayed from idempotency keys (duplicates prevented).
    fn drain_events(&mut self) {
        loop {
            match self.events.try_recv() {
                Ok(EngineEvent::Pushed { replayed, .. }) => self.stats.replayed += replayed as u64,
                Ok(_) => {}
                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                    self.anomalies.push(format!(
                        "desk {}: {n} engine events lost to lag",
                        self.index
                    ));
                }
                Err(_) => return,
            }
        }
    }

    /// Brings the key record up to date with the pending queue.
    pub fn observe(&mut self, vanished: Vanished) -> anyhow::Result<()> {
        let rows = self.engine.pending_rows()?;
        let mut codes: HashMap<String, String> = HashMap::new();
        for r in self.engine.rejections()? {
            let code = r.code.to_string();
            // The server refused the request itself (not a business rule):
            // the desk built something the contract does not allow, or it
            // names what a colleague removed. Worth a look either way.
            if !BUSINESS.contains(&code.as_str())
                && code != "not_found"
                && self
                    .keys
                    .get(&r.idempotency_key)
                    .is_none_or(|k| k.code.is_none())
            {
                self.anomalies.push(format!(
                    "desk {}: {} answered {} {}: {}",
                    self.index,
                    r.act,
                    r.http_status,
                    code,
                    r.detail.as_deref().unwrap_or("")
                ));
            }
            codes.insert(r.idempotency_key, code);
        }
        self.keys.observe(&rows, &codes, vanished);
        Ok(())
    }

    /// One random step of the chaos phase.
    pub async fn step(&mut self, progress: &Progress) -> anyhow::Result<()> {
        if progress.rushes() != self.rushes_seen {
            // Poked with everyone else: sync now, all at the same moment —
            // when concurrent allocations of the same hot SKU meet.
            self.rushes_seen = progress.rushes();
            self.sync().await?;
            return Ok(());
        }
        let roll = self.rng.random_range(0..1000);
        let t = std::time::Instant::now();
        match roll {
            0..=579 => {
                if self.act()? {
                    self.stats.acts += 1;
                    progress.add_act();
                    self.observe(Vanished::Acked)?;
                }
            }
            580..=899 => {
                self.sync().await?;
            }
            900..=939 => self.resolve_some(Resolve::Few)?,
            940..=969 => {
                if self.offline_for == 0 {
                    let _ = self.engine.pull().await;
                }
            }
            970..=984 => {
                if self.offline_for == 0 {
                    self.offline_for = self.rng.random_range(5..40);
                    self.stats.offline_spells += 1;
                }
            }
            _ => {
                if self.offline_for == 0 {
                    self.crash().await?;
                }
            }
        }
        let spent = t.elapsed();
        match roll {
            0..=579 => self.stats.time_acting += spent,
            580..=899 => self.stats.time_syncing += spent,
            _ => self.stats.time_other += spent,
        }
        self.offline_for = self.offline_for.saturating_sub(1);
        Ok(())
    }

    /// A pacing pause between steps (the load's own rhythm).
    pub fn pause(&mut self) -> Duration {
        Duration::from_millis(self.rng.random_range(1..12))
    }

    /// One sync pass, unless offline. Network faults are expected; anything
    /// else the engine reports is an anomaly.
    pub async fn sync(&mut self) -> anyhow::Result<bool> {
        if self.offline_for > 0 {
            return Ok(false);
        }
        self.stats.syncs += 1;
        let result = self.engine.sync_once().await;
        self.drain_events();
        self.observe(Vanished::Acked)?;
        match result {
            Ok(_) => Ok(true),
            Err(e) => {
                self.stats.sync_failures += 1;
                let expected = match &e {
                    Error::Api(a) => a.is_transient(),
                    _ => false,
                };
                if !expected {
                    self.anomalies.push(format!(
                        "desk {}: sync failed unexpectedly: {e}",
                        self.index
                    ));
                }
                Ok(false)
            }
        }
    }

    /// Drops the engine in the middle of a sync — right after its first
    /// request went upstream, so the server runs it and nobody hears the
    /// answer — and opens the same store again, like a process killed and
    /// restarted. Nothing in memory survives; the store must be enough.
    async fn crash(&mut self) -> anyhow::Result<()> {
        let proxy = self.proxy.clone();
        let forwarded = proxy.forwarded();
        tokio::select! {
            _ = self.engine.sync_once() => {}
            _ = forwarded => {}
        }
        // The sync is dropped mid-flight; now the engine itself goes, and a
        // fresh one starts from nothing but the store on disk.
        let fresh = Engine::open(&self.path, self.tokens.clone(), self.config.clone())?;
        drop(std::mem::replace(&mut self.engine, fresh));
        self.events = self.engine.subscribe();
        self.stats.crashes += 1;
        // A crash may have recorded answers before it died.
        self.observe(Vanished::Acked)?;
        Ok(())
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            Some(&items[self.rng.random_range(0..items.len())])
        }
    }

    /// Makes one act on the local view. Returns whether one was queued (the
    /// engine refusing it locally — a cancelled order, a missing line — is
    /// what a user sees as a greyed-out button, not a mutation).
    fn act(&mut self) -> anyhow::Result<bool> {
        // A user whose first idea does not apply (no line to allocate yet)
        // does something else.
        for _ in 0..6 {
            if self.try_act()? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn try_act(&mut self) -> anyhow::Result<bool> {
        let views = self.engine.orders()?;
        for v in &views {
            for l in v.order.lines.iter().filter(|l| l.qty_allocated < 0) {
                self.negative_lines.insert(l.id);
            }
        }
        let live: Vec<Order> = views
            .into_iter()
            .map(|v| v.order)
            .filter(|o| o.status != OrderStatus::Cancelled)
            .collect();
        let drafts = live
            .iter()
            .filter(|o| o.status == OrderStatus::Draft)
            .count();
        if drafts < self.catalog.orders / 2 && self.rng.random_bool(0.3) || live.is_empty() {
            let customer = if self.rng.random_bool(0.8) {
                self.catalog.customers[0]
            } else {
                self.catalog.customers[self.catalog.customers.len() - 1]
            };
            let n: u32 = self.rng.random();
            let made = self.engine.create_order(NewOrder {
                customer_id: customer,
                customer_po: Some(format!("CHAOS-{}-{n}", self.index)),
                ..Default::default()
            });
            return self.queued(made.map(|_| ()));
        }
        let Some(order) = self.pick(&live).cloned() else {
            return Ok(false);
        };
        let id = order.id;
        let roll = self.rng.random_range(0..100);
        // Allocation goes where the stock is short most of the time: that is
        // the race the ATS check exists for.
        let hot_lines: Vec<_> = order
            .lines
            .iter()
            .filter(|l| self.catalog.hot.contains(&l.sku_id))
            .cloned()
            .collect();
        let line = if !hot_lines.is_empty() && self.rng.random_bool(0.7) {
            self.pick(&hot_lines).cloned()
        } else {
            self.pick(&order.lines).cloned()
        };
        let kind = match (order.status, roll) {
            (OrderStatus::Draft, 0..=24) => Kind::Edit,
            (OrderStatus::Draft, 25..=39) if order.lines.len() < 5 => Kind::AddLine,
            (OrderStatus::Draft, 40..=49) => Kind::ChangeLine,
            (OrderStatus::Draft, 50..=54) => Kind::RemoveLine,
            (OrderStatus::Draft, 85..=94) => Kind::Release,
            (OrderStatus::Draft, 95..=96) => Kind::Confirm,
            (OrderStatus::Confirmed, 60..=98) => Kind::Release,
            (_, 99) => Kind::Cancel,
            _ => Kind::Allocate,
        };
        let result: Result<(), Error> = match (kind, line) {
            (Kind::Edit, _) => {
                let set = self.header_edit();
                self.engine.edit_order(id, set).map(|_| ())
            }
            (Kind::AddLine, _) => {
                let sku = self.sku();
                let qty = self.rng.random_range(1..7);
                self.engine.add_line(id, sku, qty).map(|_| ())
            }
            (Kind::ChangeLine, Some(l)) => {
                let qty = self
                    .rng
                    .random_range(l.qty_allocated.max(1)..=l.qty_allocated.max(0) + 4);
                self.engine.change_line(id, l.id, qty).map(|_| ())
            }
            (Kind::RemoveLine, Some(l)) => self.engine.remove_line(id, l.id).map(|_| ()),
            (Kind::Confirm, _) => self.engine.confirm(id).map(|_| ()),
            (Kind::Cancel, _) => self.engine.cancel(id).map(|_| ()),
            (Kind::Allocate, Some(l)) => {
                // Mostly what the line still needs; sometimes one more than
                // that, which the server must refuse.
                let room = l.qty_ordered - l.qty_allocated;
                let qty = if room < 1 || self.rng.random_bool(0.08) {
                    room.max(0) + 1
                } else {
                    self.rng.random_range(1..=room.min(3))
                };
                self.engine.allocate(id, l.id, qty).map(|_| ())
            }
            (Kind::Release, Some(l)) if l.qty_allocated > 0 => {
                let qty = self.rng.random_range(1..=l.qty_allocated);
                self.engine.release(id, l.id, qty).map(|_| ())
            }
            _ => return Ok(false),
        };
        self.queued(result)
    }

    /// A hot SKU most of the time: that is where desks contend.
    fn sku(&mut self) -> Uuid {
        let list = if self.rng.random_bool(0.6) {
            &self.catalog.hot
        } else {
            &self.catalog.cold
        };
        list[self.rng.random_range(0..list.len())]
    }

    fn queued(&mut self, result: Result<(), Error>) -> anyhow::Result<bool> {
        match result {
            Ok(()) => Ok(true),
            Err(Error::Invalid(_) | Error::NotFound(_)) => {
                self.stats.local_refusals += 1;
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn header_edit(&mut self) -> OrderHeaderSet {
        let n: u32 = self.rng.random_range(0..10_000);
        match self.rng.random_range(0..3) {
            0 => OrderHeaderSet {
                notes: Some(Some(format!("desk {} note {n}", self.index))),
                ..Default::default()
            },
            1 => OrderHeaderSet {
                customer_po: Some(Some(format!("PO-{}-{n}", self.index))),
                ..Default::default()
            },
            _ => {
                // Both ends at once, so the window is always valid.
                let start = NaiveDate::from_ymd_opt(2026, 5, 1 + n % 20);
                let end = start
                    .and_then(|s| s.checked_add_days(chrono::Days::new(7 + u64::from(n % 30))));
                OrderHeaderSet {
                    ship_window_start: Some(start),
                    ship_window_end: Some(end),
                    ..Default::default()
                }
            }
        }
    }

    /// Resolves open conflicts and rejections the way a user might: a few
    /// of them mid-storm, or (at the end) all of them, keeping the user's
    /// work where it can be kept, or dropping everything.
    pub fn resolve_some(&mut self, how: Resolve) -> anyhow::Result<()> {
        self.observe(Vanished::Acked)?;
        let conflicts = self.engine.conflicts()?;
        let take = if how == Resolve::Few {
            2
        } else {
            conflicts.len()
        };
        for c in conflicts.into_iter().take(take) {
            let roll: f64 = self.rng.random();
            let mine = how == Resolve::AllKeep;
            let resolution = if how == Resolve::AllDrop {
                Resolution::DiscardMine
            } else if c.can_rebase && (mine || roll < 0.6) {
                Resolution::Rebase
            } else if mine || roll < 0.8 {
                let mut pick = std::collections::BTreeMap::new();
                for f in c.fields.iter().filter(|f| f.collides) {
                    let side = if mine || self.rng.random_bool(0.5) {
                        Choice::Mine
                    } else {
                        Choice::Theirs
                    };
                    pick.insert(f.field.clone(), side);
                }
                Resolution::Choose(pick)
            } else {
                Resolution::DiscardMine
            };
            match self.engine.resolve_conflict(c.order_id, &resolution) {
                Ok(()) => {}
                Err(Error::Resolve(_)) => {
                    self.engine
                        .resolve_conflict(c.order_id, &Resolution::DiscardMine)?;
                }
                Err(e) => return Err(e.into()),
            }
            self.stats.conflicts_resolved += 1;
            self.observe(Vanished::Superseded)?;
        }
        let rejections = self.engine.rejections()?;
        let take = if how == Resolve::Few {
            3
        } else {
            rejections.len()
        };
        for r in rejections.into_iter().take(take) {
            let choice = if how == Resolve::AllDrop {
                RejectionChoice::Dismiss
            } else {
                let roll = self.rng.random();
                pick_rejection_choice(&r.choices, roll).unwrap_or(RejectionChoice::Dismiss)
            };
            match self.engine.resolve_rejection(r.id, &choice) {
                Ok(()) => {}
                // An earlier resolution in this loop may have changed what
                // this one offers (e.g. removed its line): dismiss instead.
                Err(Error::Invalid(_) | Error::NotFound(_) | Error::Store(_)) => {
                    let _ = self
                        .engine
                        .resolve_rejection(r.id, &RejectionChoice::Dismiss);
                }
                Err(e) => return Err(e.into()),
            }
            self.stats.rejections_resolved += 1;
            self.observe(Vanished::Superseded)?;
        }
        Ok(())
    }

    /// Online for good (the end of the run).
    pub fn go_online(&mut self) {
        self.offline_for = 0;
    }

    /// Rows the engine may still send: queued, and not held behind a
    /// conflict or rejection earlier on their order.
    pub fn queued_rows(&self) -> anyhow::Result<usize> {
        let mut held = std::collections::HashSet::new();
        let mut sendable = 0;
        for r in self.engine.pending_rows()? {
            if r.status != Status::Queued {
                held.insert(r.order_id);
            } else if !held.contains(&r.order_id) {
                sendable += 1;
            }
        }
        Ok(sendable)
    }

    /// Syncs until nothing is left to send (every row answered: gone, or a
    /// conflict or rejection held for the user), within `passes` passes and
    /// `within` (an act the server keeps answering 5xx would otherwise wait
    /// out its backoff, up to a second, on every pass). Faults are off by
    /// now; a pass that still fails is retried.
    pub async fn settle(&mut self, passes: usize, within: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        for _ in 0..passes {
            let sendable = self.queued_rows()?;
            if sendable == 0 {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "desk {}: {sendable} act(s) still sendable after {within:?}",
                    self.index
                );
            }
            if !self.sync().await? {
                // Faults are off by now, but a loaded machine may still time
                // a request out: try again after a moment.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            // A row told to retry later (a request still in flight, a 5xx)
            // waits for its own schedule: wait until then, at most a second.
            let now = chrono::Utc::now().timestamp_millis();
            let next = self
                .engine
                .pending_rows()?
                .iter()
                .filter(|r| r.status == Status::Queued && r.next_attempt_at > now)
                .map(|r| r.next_attempt_at - now)
                .min();
            if let Some(ms) = next {
                tokio::time::sleep(Duration::from_millis(ms.clamp(1, 1000) as u64)).await;
            }
        }
        anyhow::bail!(
            "desk {}: {} act(s) still sendable after {passes} passes",
            self.index,
            self.queued_rows()?
        )
    }
}
