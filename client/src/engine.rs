//! The engine: what the CLI and the desktop shell call. Every act lands in the
//! local store at once (one transaction, fsynced) and reaches the server
//! later through [`crate::sync`]; every read is the optimistic view.
//!
//! # Base versions
//!
//! A pending edit carries the version of the order the user was looking at.
//! The user's own acts advance it predictably: each success adds exactly 1 on
//! the server (API.md), so an act queued behind others on the same order gets
//! the previous act's base + 1, whether or not the earlier ones have been sent
//! yet. Allocation and release carry no base on the wire but still count,
//! since they bump the version too.
//!
//! A pull never rewrites a pending act's base. Example:
//!
//! ```text
//! server: order v5.  Dana, offline: notes := "rush"   (base 5)
//!                                   PO    := "A-17"   (base 6)
//!                                   allocate 2        (base 7, not sent)
//! Priya changes the ship window → server v6.
//! Dana's pull brings v6: her mirror says v6, the three acts still say 5/6/7.
//! Dana's push: notes (base 5) → 409 version_conflict. A conflict opens for
//!   this order and holds the PO edit and the allocation; her other orders
//!   keep syncing.
//! Had the pull moved the bases to 6/7/8, the notes edit would have gone
//!   through on top of Priya's change without either of them seeing it.
//! Dana resolves (rebase: the fields are disjoint): notes is re-issued with
//!   base 6 and a new key, the PO edit gets base 7, the allocation 8.
//! ```
//!
//! The only things that change a pending act's base are the user's own
//! decisions: resolving a conflict (re-chained from the server's current
//! version) or dismissing a rejected act (the acts after it lose the +1 it
//! would have made).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use holdfast_protocol::model::{Customer, LoginRequest, Order, OrderHeaderSet, OrderStatus, Sku};
use holdfast_protocol::problem::{Problem, ProblemCode};
use rusqlite::Transaction;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::{broadcast, Notify};
use uuid::Uuid;

use crate::act::Act;
use crate::api::{Api, ApiError, Timeouts};
use crate::conflict::{self, fields_of, ConflictView, Field, Resolution, ResolveError};
use crate::store::sync_state::{self, Profile};
use crate::store::{
    self, conflicts, customers, invoices, now_ms, orders, pending, rejections, skus, Store,
    StoreError,
};
use crate::token::{TokenError, TokenStore};
use crate::view::{self, Me, OrderSummary, OrderView, PendingMark, SkuView};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("not logged in: run `holdfast login` first")]
    NotSignedIn,
    #[error(
        "the server refused this device's token (revoked or expired): log in again; nothing queued is lost"
    )]
    Unauthorized,
    #[error("another holdfast process is syncing this store right now; it will send your changes")]
    Busy,
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
}

impl Error {
    /// The server could not be reached (the act is safe in the queue).
    pub fn is_offline(&self) -> bool {
        matches!(self, Error::Api(e) if e.is_transient())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Knobs of the sync loop. The defaults suit a desk; tests shrink them.
#[derive(Debug, Clone)]
pub struct SyncConfig {
    /// Mutations per push (API.md allows 1–500).
    pub batch_size: usize,
    /// Upper bound of a push body, well under the server's 1 MiB.
    pub batch_bytes: usize,
    /// Documents per pull page (API.md allows ≤ 1000).
    pub pull_limit: u32,
    /// Backoff after failed passes: attempt k waits a random time in
    /// [0, min(base·2^k, cap)] (full jitter).
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
    /// Reconnecting the stream: full jitter from this base up to the cap.
    /// Kept short and separate from the pass backoff: an idle GET is cheap,
    /// and its success is how a backing-off desk learns the network is back.
    pub stream_retry_base_ms: u64,
    pub stream_retry_cap_ms: u64,
    /// How often a watching loop looks for acts queued by another process.
    pub local_poll: Duration,
    /// A watching loop syncs at least this often, in case a poke was missed
    /// while the stream was reconnecting.
    pub poll_interval: Duration,
    pub timeouts: Timeouts,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            batch_size: 100,
            batch_bytes: 512 * 1024,
            pull_limit: 1000,
            backoff_base_ms: 500,
            // A desk should never wait long once the network is back; the
            // stream reconnecting also retries at once.
            backoff_cap_ms: 30_000,
            stream_retry_base_ms: 250,
            stream_retry_cap_ms: 5_000,
            local_poll: Duration::from_secs(1),
            poll_interval: Duration::from_secs(60),
            timeouts: Timeouts::default(),
        }
    }
}

/// What happened, for the shell to show.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EngineEvent {
    /// The local data changed (an act, a resolution, a sync result).
    Changed,
    SyncFinished(crate::sync::SyncReport),
    /// One push was answered and recorded (`replayed`: acts whose earlier
    /// answer was lost, confirmed by the server's stored answer).
    Pushed {
        applied: usize,
        conflicts: usize,
        rejections: usize,
        replayed: usize,
    },
    SyncFailed {
        error: String,
        offline: bool,
        next_attempt_at: Option<i64>,
    },
    StreamConnected,
    StreamLost {
        error: String,
    },
}

pub(crate) struct Inner {
    pub(crate) store: Store,
    pub(crate) tokens: Arc<dyn TokenStore>,
    pub(crate) config: SyncConfig,
    /// Sync now, backoff or not (a poke, connectivity back, "Sync now").
    pub(crate) wake_now: Notify,
    /// The user queued something: sync when the backoff allows.
    pub(crate) wake_local: Notify,
    pub(crate) events: broadcast::Sender<EngineEvent>,
    /// One pass at a time within this process (the file lock covers others).
    pub(crate) sync_gate: tokio::sync::Mutex<()>,
    token: Mutex<Option<String>>,
}

/// The local-first engine over one store. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.inner.store)
            .finish()
    }
}

/// A new order's header.
#[derive(Debug, Clone, Default)]
pub struct NewOrder {
    pub customer_id: Uuid,
    pub customer_po: Option<String>,
    pub ship_window_start: Option<NaiveDate>,
    pub ship_window_end: Option<NaiveDate>,
    pub notes: Option<String>,
}

/// The sync status line.
#[derive(Debug, Clone, Serialize)]
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
}

/// What the user may do about a rejected act.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "choice", rename_all = "snake_case")]
pub enum RejectionChoice {
    /// Allocate what is there instead (a new act).
    ReduceToAts { qty: i64 },
    /// Remove the line instead (releases what it holds).
    RemoveLine,
    /// Send the same act again as a new intention (new key).
    TryAgain,
    /// Drop it.
    Dismiss,
}

impl RejectionChoice {
    pub fn name(&self) -> &'static str {
        match self {
            RejectionChoice::ReduceToAts { .. } => "reduce",
            RejectionChoice::RemoveLine => "remove-line",
            RejectionChoice::TryAgain => "retry",
            RejectionChoice::Dismiss => "dismiss",
        }
    }
}

/// A rejected act with its facts and choices.
#[derive(Debug, Clone, Serialize)]
pub struct RejectionView {
    pub id: i64,
    pub order_id: Uuid,
    pub idempotency_key: String,
    pub act: String,
    pub kind: &'static str,
    pub http_status: u16,
    pub code: ProblemCode,
    pub detail: Option<String>,
    /// The problem's extension members (e.g. `ats_available`, `requested`),
    /// plus `ats_now` (the freshest ATS this desk knows: the rejection's, or
    /// a position learned after it) where it applies.
    pub facts: Map<String, Value>,
    pub choices: Vec<RejectionChoice>,
    pub created_at: i64,
}

fn new_key() -> String {
    Uuid::now_v7().to_string()
}

impl Engine {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path, tokens: Arc<dyn TokenStore>, config: SyncConfig) -> Result<Engine> {
        let store = Store::open(path)?;
        let (events, _) = broadcast::channel(256);
        Ok(Engine {
            inner: Arc::new(Inner {
                store,
                tokens,
                config,
                wake_now: Notify::new(),
                wake_local: Notify::new(),
                events,
                sync_gate: tokio::sync::Mutex::new(()),
                token: Mutex::new(None),
            }),
        })
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn config(&self) -> &SyncConfig {
        &self.inner.config
    }

    /// Engine events (sync results, stream state, local changes).
    pub fn subscribe(&self) -> broadcast::Receiver<EngineEvent> {
        self.inner.events.subscribe()
    }

    pub(crate) fn emit(&self, event: EngineEvent) {
        // No subscriber is fine.
        let _ = self.inner.events.send(event);
    }

    /// Asks a running [`Engine::run`] loop to sync now, backoff or not.
    pub fn sync_soon(&self) {
        self.inner.wake_now.notify_one();
    }

    fn changed_locally(&self) {
        self.inner.wake_local.notify_one();
        self.emit(EngineEvent::Changed);
    }

    // ------------------------------------------------------------ identity

    pub fn profile(&self) -> Result<Option<Profile>> {
        Ok(self.inner.store.read(sync_state::get)?.profile)
    }

    fn me(tx: &Transaction<'_>) -> Result<Me> {
        let state = sync_state::get(tx)?;
        Ok(match state.profile {
            Some(p) => Me {
                user_id: p.user_id,
                name: p.user_name,
            },
            None => Me {
                user_id: Uuid::nil(),
                name: "you".to_owned(),
            },
        })
    }

    /// The API client for the signed-in user.
    pub(crate) fn api(&self) -> Result<Api> {
        let state = self.inner.store.read(sync_state::get)?;
        let profile = state.profile.ok_or(Error::NotSignedIn)?;
        let token = {
            let cached = self
                .inner
                .token
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            match cached {
                Some(t) => t,
                None => {
                    let t = self
                        .inner
                        .tokens
                        .load(&state.store_id)?
                        .ok_or(Error::NotSignedIn)?;
                    *self.inner.token.lock().unwrap_or_else(|p| p.into_inner()) = Some(t.clone());
                    t
                }
            }
        };
        Ok(Api::new(
            &profile.server_url,
            Some(token),
            self.inner.config.timeouts,
        )?)
    }

    /// Signs in and keeps the device token in the token store. Refuses to
    /// switch user or server while acts of the previous one are still queued
    /// (they would be sent in the new user's name) unless `discard_pending`.
    pub async fn login(
        &self,
        server_url: &str,
        tenant: &str,
        email: &str,
        password: &str,
        device_name: &str,
        discard_pending: bool,
    ) -> Result<Profile> {
        let state = self.inner.store.read(sync_state::get)?;
        let last = self.inner.store.read(sync_state::last_identity)?;
        let queued = self.inner.store.read(pending::summary)?.0;
        let server_url = server_url.trim_end_matches('/');
        if let Some((last_server, last_tenant, last_email)) = &last {
            let same = last_server == server_url
                && last_tenant == tenant
                && last_email.eq_ignore_ascii_case(email);
            if !same && queued > 0 && !discard_pending {
                return Err(Error::Invalid(format!(
                    "{queued} act(s) by {last_email} are not on the server yet; sync them first, or log in with --discard-pending to drop them"
                )));
            }
        }
        let api = Api::new(server_url, None, self.inner.config.timeouts)?;
        let resp = api
            .login(&LoginRequest {
                tenant: tenant.to_owned(),
                email: email.to_owned(),
                password: password.to_owned(),
                device_name: device_name.to_owned(),
            })
            .await?;
        if let Err(e) = self.inner.tokens.save(&state.store_id, &resp.token) {
            // Nowhere to keep it: do not leave a live token behind.
            let fresh = Api::new(server_url, Some(resp.token), self.inner.config.timeouts)?;
            let _ = fresh.logout().await;
            return Err(e.into());
        }
        *self.inner.token.lock().unwrap_or_else(|p| p.into_inner()) = Some(resp.token);
        let profile = Profile {
            server_url: server_url.to_owned(),
            tenant_slug: resp.tenant.slug,
            tenant_name: resp.tenant.name,
            user_id: resp.user.id,
            user_email: resp.user.email,
            user_name: resp.user.display_name,
            device_name: device_name.to_owned(),
        };
        self.inner.store.write(|tx| {
            let same_feed = sync_state::last_identity(tx)?.is_some_and(|(server, tenant, _)| {
                server == profile.server_url && tenant == profile.tenant_slug
            });
            if !same_feed {
                // Another server or tenant: what we mirrored is not theirs.
                store::reset_mirrors(tx)?;
            }
            if discard_pending {
                store::reset_queue(tx)?;
            }
            sync_state::set_profile(tx, &profile)?;
            Ok(())
        })?;
        self.changed_locally();
        self.sync_soon();
        Ok(profile)
    }

    /// Revokes the token on the server (if reachable) and forgets it here.
    /// Queued acts stay and go after the next login (of the same user).
    /// Returns whether the server confirmed the revocation.
    pub async fn logout(&self) -> Result<bool> {
        let state = self.inner.store.read(sync_state::get)?;
        let revoked = match self.api() {
            Ok(api) => api.logout().await.is_ok(),
            Err(_) => false,
        };
        self.inner.tokens.delete(&state.store_id)?;
        *self.inner.token.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.inner.store.write(sync_state::clear_profile)?;
        Ok(revoked)
    }

    // ------------------------------------------------------------ acts

    /// Queues one act on `order_id`: computes its base version (see the
    /// module docs), lets `make` build the act from the current view, and
    /// stores it with a fresh idempotency key. Returns the key.
    fn queue(
        &self,
        order_id: Uuid,
        make: impl FnOnce(Option<&Order>, i64) -> Result<Act>,
    ) -> Result<String> {
        let key = new_key();
        let mut failure: Option<Error> = None;
        self.inner.store.write(|tx| {
            let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
            let mirror = orders::get(tx, order_id)?;
            let rows = pending::for_order(tx, order_id)?;
            let mut doc = mirror.clone();
            for row in rows.iter().filter(|r| view::shows(r)) {
                doc = view::apply(doc, &row.act, &me);
            }
            let base = match (rows.last(), &mirror) {
                // Behind the user's own acts: the previous one's base + 1.
                (Some(last), _) => last.base_version + 1,
                (None, Some(m)) => m.version,
                (None, None) => 0,
            };
            let act = match make(doc.as_ref(), base) {
                Ok(act) => act,
                Err(e) => {
                    failure = Some(e);
                    return Ok(());
                }
            };
            pending::insert(
                tx,
                &pending::New {
                    key: &key,
                    act: &act,
                    base_version: base,
                    base_doc: doc.as_ref(),
                    now: now_ms(),
                },
            )?;
            Ok(())
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        self.changed_locally();
        Ok(key)
    }

    pub fn create_order(&self, new: NewOrder) -> Result<Uuid> {
        if let (Some(s), Some(e)) = (new.ship_window_start, new.ship_window_end) {
            if e < s {
                return Err(Error::Invalid(
                    "the ship window ends before it starts".into(),
                ));
            }
        }
        let order_id = Uuid::now_v7();
        self.queue(order_id, |doc, _| {
            if doc.is_some() {
                return Err(Error::Invalid(format!("order {order_id} exists")));
            }
            Ok(Act::CreateOrder {
                order_id,
                customer_id: new.customer_id,
                customer_po: new.customer_po,
                ship_window_start: new.ship_window_start,
                ship_window_end: new.ship_window_end,
                notes: new.notes,
            })
        })?;
        Ok(order_id)
    }

    pub fn edit_order(&self, order_id: Uuid, set: OrderHeaderSet) -> Result<String> {
        if crate::act::header_changes(&set).is_empty() {
            return Err(Error::Invalid("nothing to change".into()));
        }
        self.queue(order_id, |doc, base| {
            editable(doc, order_id)?;
            Ok(Act::PatchOrder {
                order_id,
                base_version: base,
                set,
            })
        })
    }

    /// Adds a line; returns its (client-minted) id.
    pub fn add_line(&self, order_id: Uuid, sku_id: Uuid, qty_ordered: i64) -> Result<Uuid> {
        positive("quantity", qty_ordered)?;
        let line_id = Uuid::now_v7();
        self.queue(order_id, |doc, base| {
            editable(doc, order_id)?;
            Ok(Act::AddLine {
                order_id,
                line_id,
                sku_id,
                qty_ordered,
                base_version: base,
            })
        })?;
        Ok(line_id)
    }

    pub fn change_line(&self, order_id: Uuid, line_id: Uuid, qty_ordered: i64) -> Result<String> {
        positive("quantity", qty_ordered)?;
        self.queue(order_id, |doc, base| {
            has_line(editable(doc, order_id)?, line_id)?;
            Ok(Act::ChangeLine {
                order_id,
                line_id,
                qty_ordered,
                base_version: base,
            })
        })
    }

    pub fn remove_line(&self, order_id: Uuid, line_id: Uuid) -> Result<String> {
        self.queue(order_id, |doc, base| {
            has_line(editable(doc, order_id)?, line_id)?;
            Ok(Act::RemoveLine {
                order_id,
                line_id,
                base_version: base,
            })
        })
    }

    /// Allocates stock to a line. Whether the stock is there is decided by
    /// the server; offline we cannot know, so this only queues.
    pub fn allocate(&self, order_id: Uuid, line_id: Uuid, qty: i64) -> Result<String> {
        positive("quantity", qty)?;
        self.queue(order_id, |doc, _| {
            has_line(allocatable(doc, order_id)?, line_id)?;
            Ok(Act::Allocate {
                order_id,
                line_id,
                qty,
            })
        })
    }

    pub fn release(&self, order_id: Uuid, line_id: Uuid, qty: i64) -> Result<String> {
        positive("quantity", qty)?;
        self.queue(order_id, |doc, _| {
            has_line(allocatable(doc, order_id)?, line_id)?;
            Ok(Act::Release {
                order_id,
                line_id,
                qty,
            })
        })
    }

    pub fn confirm(&self, order_id: Uuid) -> Result<String> {
        self.queue(order_id, |doc, base| {
            editable(doc, order_id)?;
            Ok(Act::Confirm {
                order_id,
                base_version: base,
            })
        })
    }

    pub fn cancel(&self, order_id: Uuid) -> Result<String> {
        self.queue(order_id, |doc, base| {
            let o = found(doc, order_id)?;
            if o.status == OrderStatus::Cancelled {
                return Err(Error::Invalid("the order is already cancelled".into()));
            }
            Ok(Act::Cancel {
                order_id,
                base_version: base,
            })
        })
    }

    // ------------------------------------------------------------ views

    /// Every order the user can see, oldest first, pending acts applied.
    pub fn orders(&self) -> Result<Vec<OrderView>> {
        Ok(self.inner.store.read(|tx| {
            let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
            let mirrors = orders::list(tx)?;
            let mut by_order: HashMap<Uuid, Vec<pending::Row>> = HashMap::new();
            let mut local_only = Vec::new();
            for row in pending::all(tx)? {
                if !by_order.contains_key(&row.order_id)
                    && !mirrors.iter().any(|m| m.id == row.order_id)
                {
                    local_only.push(row.order_id);
                }
                by_order.entry(row.order_id).or_default().push(row);
            }
            let mut out = Vec::new();
            for m in mirrors {
                let rows = by_order.remove(&m.id).unwrap_or_default();
                out.extend(view::order_view(Some(m), &rows, &me));
            }
            for id in local_only {
                let rows = by_order.remove(&id).unwrap_or_default();
                out.extend(view::order_view(None, &rows, &me));
            }
            Ok(out)
        })?)
    }

    /// [`Engine::orders`] as desk rows: headers, badges and counts only.
    pub fn order_summaries(&self) -> Result<Vec<OrderSummary>> {
        Ok(self.orders()?.into_iter().map(OrderSummary::of).collect())
    }

    pub fn order(&self, order_id: Uuid) -> Result<Option<OrderView>> {
        Ok(self.inner.store.read(|tx| {
            let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
            let rows = pending::for_order(tx, order_id)?;
            Ok(view::order_view(orders::get(tx, order_id)?, &rows, &me))
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
            let Some(v) = view::order_view(mirror.clone(), &rows, &me) else {
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

    /// SKUs matching `q` (words in style, colour, size), with local ATS.
    pub fn skus(&self, q: &str, limit: i64) -> Result<Vec<SkuView>> {
        Ok(self.inner.store.read(|tx| {
            let net = Self::pending_allocation(tx)?;
            Ok(skus::search(tx, q, limit)?
                .into_iter()
                .map(|s| {
                    let n = net.get(&s.id).copied().unwrap_or(0);
                    view::sku_view(s, n)
                })
                .collect())
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
        let (state, (count, oldest), n_conflicts, n_rejections) = self.inner.store.read(|tx| {
            Ok((
                sync_state::get(tx)?,
                pending::summary(tx)?,
                conflicts::list(tx)?.len(),
                rejections::list(tx)?.len(),
            ))
        })?;
        let time = |ms: Option<i64>| ms.and_then(DateTime::<Utc>::from_timestamp_millis);
        Ok(Status {
            store: self.inner.store.path().display().to_string(),
            signed_in: state.profile,
            token_store: self.inner.tokens.describe(),
            online: state.online,
            pending: count,
            oldest_pending_at: time(oldest),
            oldest_pending_age_secs: oldest.map(|o| ((now_ms() - o) / 1000).max(0)),
            last_synced_at: time(state.last_synced_at),
            conflicts: n_conflicts,
            rejections: n_rejections,
            next_attempt_at: time(state.next_attempt_at),
            last_error: state.last_error,
        })
    }

    // ------------------------------------------------------------ conflicts

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
        for row in rows.iter().filter(|r| view::shows(r)) {
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
                .filter(view::shows)
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

    // ------------------------------------------------------------ rejections

    fn rejection_view_in(
        tx: &Transaction<'_>,
        record: &rejections::Record,
    ) -> Result<Option<RejectionView>, StoreError> {
        let Some(row) = pending::get(tx, record.pending_seq)? else {
            return Ok(None);
        };
        let p = &record.problem;
        let mut facts = p.extensions.clone();
        let mut choices = Vec::new();
        let line_sku = |line_id: Uuid| -> Result<Option<Uuid>, StoreError> {
            let from_doc = |o: &Order| o.lines.iter().find(|l| l.id == line_id).map(|l| l.sku_id);
            Ok(row
                .base_doc
                .as_ref()
                .and_then(from_doc)
                .or(orders::get(tx, row.order_id)?.as_ref().and_then(from_doc)))
        };
        let int = |name: &str| p.extension(name).and_then(Value::as_i64);
        if let Act::Allocate { line_id, qty, .. } = &row.act {
            match p.code {
                ProblemCode::InsufficientAts => {
                    let sku = line_sku(*line_id)?;
                    // "Now": the server's number at the rejection, unless a
                    // later pull or answer told us the position since.
                    let learned = match sku {
                        Some(s) => skus::ats_learned(tx, s)?,
                        None => None,
                    };
                    let ats_now = match (learned, int("ats_available")) {
                        (Some((ats, at)), _) if at > record.created_at => ats,
                        (_, Some(ats)) => ats,
                        (Some((ats, _)), None) => ats,
                        (None, None) => 0,
                    };
                    facts.insert("ats_now".into(), ats_now.into());
                    if let Some(s) = sku {
                        facts.insert("sku_id".into(), s.to_string().into());
                    }
                    let reduce = ats_now.min(*qty);
                    if reduce >= 1 {
                        choices.push(RejectionChoice::ReduceToAts { qty: reduce });
                    }
                }
                ProblemCode::OverAllocation => {
                    if let (Some(ordered), Some(allocated)) =
                        (int("qty_ordered"), int("qty_allocated"))
                    {
                        let room = (ordered - allocated).min(*qty);
                        if room >= 1 {
                            choices.push(RejectionChoice::ReduceToAts { qty: room });
                        }
                    }
                }
                _ => {}
            }
        }
        if matches!(
            row.act,
            Act::Allocate { .. } | Act::Release { .. } | Act::ChangeLine { .. }
        ) && p.code != ProblemCode::NotFound
        {
            choices.push(RejectionChoice::RemoveLine);
        }
        choices.push(RejectionChoice::TryAgain);
        choices.push(RejectionChoice::Dismiss);
        Ok(Some(RejectionView {
            id: record.id,
            order_id: record.order_id,
            idempotency_key: record.key.clone(),
            act: row.act.describe(),
            kind: row.act.kind(),
            http_status: p.status,
            code: p.code,
            detail: p.detail.clone(),
            facts,
            choices,
            created_at: record.created_at,
        }))
    }

    pub fn rejections(&self) -> Result<Vec<RejectionView>> {
        Ok(self.inner.store.read(|tx| {
            let mut out = Vec::new();
            for r in rejections::list(tx)? {
                out.extend(Self::rejection_view_in(tx, &r)?);
            }
            Ok(out)
        })?)
    }

    /// Acts on a rejection with one of its offered choices.
    pub fn resolve_rejection(&self, id: i64, choice: &RejectionChoice) -> Result<()> {
        let mut failure: Option<Error> = None;
        self.inner.store.write(|tx| {
            let fail =
                |e: Error| -> Result<(), StoreError> { Err(StoreError::Invalid(e.to_string())) };
            let Some(record) = rejections::get(tx, id)? else {
                failure = Some(Error::NotFound(format!("no open rejection {id}")));
                return Ok(());
            };
            let Some(view) = Self::rejection_view_in(tx, &record)? else {
                return fail(Error::NotFound(format!(
                    "rejection {id} has no pending act"
                )));
            };
            let offered = view.choices.iter().any(|c| match (c, choice) {
                (RejectionChoice::ReduceToAts { .. }, RejectionChoice::ReduceToAts { .. }) => true,
                (a, b) => a == b,
            });
            if !offered {
                failure = Some(Error::Invalid(format!(
                    "`{}` is not a choice for this rejection; choose one of: {}",
                    choice.name(),
                    view.choices
                        .iter()
                        .map(|c| c.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
                return Ok(());
            }
            let Some(row) = pending::get(tx, record.pending_seq)? else {
                return Ok(());
            };
            let now = now_ms();
            let replace = |act: &Act| {
                pending::replace(
                    tx,
                    row.seq,
                    &new_key(),
                    act,
                    row.base_version,
                    row.base_doc.as_ref(),
                    now,
                )
            };
            match (choice, &row.act) {
                (
                    RejectionChoice::ReduceToAts { qty },
                    Act::Allocate {
                        order_id, line_id, ..
                    },
                ) => {
                    if *qty < 1 {
                        failure = Some(Error::Invalid("nothing to allocate".into()));
                        return Ok(());
                    }
                    replace(&Act::Allocate {
                        order_id: *order_id,
                        line_id: *line_id,
                        qty: *qty,
                    })?;
                }
                (RejectionChoice::RemoveLine, act) => {
                    let line_id = act.line_id().ok_or_else(|| {
                        StoreError::Invalid("this act is not about a line".into())
                    })?;
                    // Removing bumps the version by 1 like the act it
                    // replaces, so the acts after it keep their bases.
                    replace(&Act::RemoveLine {
                        order_id: row.order_id,
                        line_id,
                        base_version: row.base_version,
                    })?;
                }
                (RejectionChoice::TryAgain, act) => replace(act)?,
                (RejectionChoice::Dismiss, _) => {
                    let me = Self::me(tx).map_err(|e| StoreError::Invalid(e.to_string()))?;
                    pending::delete(tx, row.seq)?;
                    // The acts after it were counted on its +1; they lose it.
                    let later: Vec<(pending::Row, Option<Act>)> =
                        pending::for_order(tx, row.order_id)?
                            .into_iter()
                            .filter(|r| r.seq > row.seq)
                            .map(|r| {
                                let act = r.act.clone();
                                (r, Some(act))
                            })
                            .collect();
                    rechain(tx, &me, later, row.base_version, row.base_doc.clone(), None)?;
                }
                (RejectionChoice::ReduceToAts { .. }, _) => {
                    failure = Some(Error::Invalid("only an allocation can be reduced".into()));
                    return Ok(());
                }
            }
            rejections::close(tx, id)?;
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

/// Re-queues `rows` (in order) on a new chain of bases starting at `base`
/// over the document `doc`: a `None` act drops its row; a kept act gets the
/// chained base, and a new key whenever its request changed (or it is the
/// row the server already refused, `refused_seq`).
fn rechain(
    tx: &Transaction<'_>,
    me: &Me,
    rows: Vec<(pending::Row, Option<Act>)>,
    mut base: i64,
    mut doc: Option<Order>,
    refused_seq: Option<i64>,
) -> Result<(), StoreError> {
    let now = now_ms();
    for (row, act) in rows {
        let Some(act) = act else {
            pending::delete(tx, row.seq)?;
            continue;
        };
        let act = act.with_base(base);
        let key = if act.request() == row.request && Some(row.seq) != refused_seq {
            row.key.clone()
        } else {
            new_key()
        };
        pending::replace(tx, row.seq, &key, &act, base, doc.as_ref(), now)?;
        doc = view::apply(doc, &act, me);
        base += 1;
    }
    Ok(())
}

fn found(doc: Option<&Order>, order_id: Uuid) -> Result<&Order> {
    doc.ok_or_else(|| Error::NotFound(format!("no order {order_id} on this desk")))
}

fn editable(doc: Option<&Order>, order_id: Uuid) -> Result<&Order> {
    let o = found(doc, order_id)?;
    if o.status != OrderStatus::Draft {
        return Err(Error::Invalid(format!(
            "the order is {}; only a draft can be edited",
            o.status.as_str()
        )));
    }
    Ok(o)
}

fn allocatable(doc: Option<&Order>, order_id: Uuid) -> Result<&Order> {
    let o = found(doc, order_id)?;
    if o.status == OrderStatus::Cancelled {
        return Err(Error::Invalid("the order is cancelled".into()));
    }
    Ok(o)
}

fn has_line(o: &Order, line_id: Uuid) -> Result<()> {
    if o.lines.iter().any(|l| l.id == line_id) {
        Ok(())
    } else {
        Err(Error::NotFound(format!(
            "no line {line_id} on order {}",
            o.id
        )))
    }
}

fn positive(what: &str, n: i64) -> Result<()> {
    if n < 1 {
        return Err(Error::Invalid(format!("{what} must be at least 1")));
    }
    Ok(())
}

/// The problem in a push result, or a stand-in when the body is not one.
pub(crate) fn problem_of(status: u16, body: &Value) -> Problem {
    serde_json::from_value(body.clone()).unwrap_or_else(|_| {
        let mut p = Problem::new(ProblemCode::Internal, format!("unreadable answer: {body}"));
        p.status = status;
        p
    })
}

/// Reads a field name given on the command line or by the shell.
pub fn parse_field(name: &str) -> Option<Field> {
    Field::parse(name)
}
