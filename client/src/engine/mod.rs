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
//!
//! # Where things are
//!
//! This file is the engine itself: opening a store, its events, who is
//! signed in. `acts` queues acts under the rule above, `views` is what the
//! screens read, `conflicts` and `rejections` carry out the user's answers to
//! a 409 and to a refused act, `history` fetches an order's history from the
//! server (online only). The sync loop is [`crate::sync`].

mod acts;
mod conflicts;
mod held;
mod history;
mod rejections;
mod views;

pub use held::{HeldItem, HeldKind};

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast_protocol::model::LoginRequest;
use holdfast_protocol::problem::{Problem, ProblemCode};
use rusqlite::Transaction;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{broadcast, Notify};
use uuid::Uuid;

use crate::api::{Api, ApiError, Reachability, Timeouts, Transport};
use crate::conflict::ResolveError;
use crate::store::sync_state::{self, Profile};
use crate::store::{self, now_ms, order_flags, pending, Store, StoreError};
use crate::token::{TokenError, TokenStore};
use crate::view::Me;

pub use acts::{NewOrder, Reorder};
pub use rejections::{RejectionChoice, RejectionView};
pub use views::{SignedOut, Status};

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
        "signed out by an administrator (the server no longer accepts this desk's sign-in): log in again; nothing queued is lost"
    )]
    Unauthorized,
    #[error("another holdfast process is syncing this store right now; it will send your changes")]
    Busy,
    #[error("{0}")]
    NotFound(String),
    /// A read only the server can answer (the order's history: the desk
    /// keeps no copy) could not reach it.
    #[error("{what} is kept on the server, which cannot be reached now; try again when online ({cause})")]
    OnlineOnly { what: &'static str, cause: String },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
}

impl Error {
    /// The server could not be reached (the act is safe in the queue; an
    /// online-only read has nothing to show).
    pub fn is_offline(&self) -> bool {
        matches!(self, Error::Api(e) if e.is_transient())
            || matches!(self, Error::OnlineOnly { .. })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Knobs of the sync loop. The defaults suit a desk; tests shrink them.
#[derive(Debug, Clone)]
pub struct SyncConfig {
    /// Mutations per push (API.md allows 1–500).
    pub batch_size: usize,
    /// Push batches sent at once, each on orders none of the others touch.
    /// One by default: two batches on disjoint orders can still allocate
    /// the same SKUs in opposite orders, and Postgres then aborts one of
    /// them as a deadlock (a retry, but a server error in the operator's
    /// log) — and no same-run measurement showed two to be faster.
    pub push_in_flight: usize,
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
    /// A pass asks the server which orders have a dead-lettered partner
    /// delivery at most this often (and at once after a sign-in).
    pub flags_interval: Duration,
    /// How long a pass waits for that answer before keeping the last one.
    pub flags_timeout: Duration,
    /// How long an acknowledged act is kept in the journal (`store::acked`),
    /// to be sent again if the server is restored from a backup taken before
    /// it landed. A restore loses what desks acknowledged longer ago than
    /// this after the backup: back the server up more often than this.
    pub journal_retention: Duration,
    pub timeouts: Timeouts,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            batch_size: 100,
            push_in_flight: 1,
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
            // A dead letter waits for an operator: a minute late is nothing
            // to the desk, and a fleet of desks asks the server little.
            flags_interval: Duration::from_secs(60),
            // The server just answered the pass's pull, so a healthy one
            // answers this indexed read at once; past this, try next time.
            flags_timeout: Duration::from_secs(5),
            journal_retention: Duration::from_secs(7 * 24 * 3600),
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
    /// The server refused the desk's token: it is signed out (see
    /// [`Engine::status`]'s `signed_out`), its queue kept.
    SignedOut {
        reason: String,
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
    /// The server's latest answer against the stream's latest loss.
    pub(crate) reachability: Arc<Reachability>,
    token: Mutex<Option<String>>,
    /// Built on first use and shared by every API client this engine makes
    /// (its connection pool and root certificates; see [`Transport`]).
    transport: Mutex<Option<Transport>>,
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

/// Why the desk is signed out when the server refused its token: an
/// operator deactivated the user or reset their password (API.md v1.1
/// Users), which revokes every token of theirs at once.
pub const SIGNED_OUT_BY_ADMIN: &str = "Signed out by an administrator.";

fn new_key() -> String {
    Uuid::now_v7().to_string()
}

impl Engine {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path, tokens: Arc<dyn TokenStore>, config: SyncConfig) -> Result<Engine> {
        let store = Store::open(path)?;
        // What an older (or newer) build left this one: pending acts it
        // cannot read go into quarantine (those it can read now come out),
        // and kept documents it can read now are applied.
        store.write(|tx| {
            let held = pending::review_quarantine(tx, now_ms())?;
            let applied = crate::sync::reapply_unreadable(tx)?;
            if held > 0 || applied > 0 {
                tracing::info!(held, applied, "reviewed what an earlier app could not read");
            }
            Ok(())
        })?;
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
                reachability: Arc::default(),
                token: Mutex::new(None),
                transport: Mutex::new(None),
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
    /// The engine's shared [`Transport`], built on first use.
    fn transport(&self) -> Result<Transport> {
        let mut slot = self
            .inner
            .transport
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(transport) = &*slot {
            return Ok(transport.clone());
        }
        let transport = Transport::new(self.inner.config.timeouts)?;
        *slot = Some(transport.clone());
        Ok(transport)
    }

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
        Ok(
            Api::over(self.transport()?, &profile.server_url, Some(token))
                .reporting_to(self.inner.reachability.clone()),
        )
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
        let api = Api::over(self.transport()?, server_url, None);
        let resp = api
            .login(&LoginRequest {
                tenant: tenant.to_owned(),
                email: email.to_owned(),
                password: password.to_owned(),
                device_name: device_name.to_owned(),
            })
            .await?;
        let saved = {
            // Under the token lock: a late 401 of the previous token
            // (`session_ended`) cannot delete this one.
            let mut cached = self.inner.token.lock().unwrap_or_else(|p| p.into_inner());
            let saved = self.inner.tokens.save(&state.store_id, &resp.token);
            if saved.is_ok() {
                *cached = Some(resp.token.clone());
            }
            saved
        };
        if let Err(e) = saved {
            // Nowhere to keep it: do not leave a live token behind.
            let fresh = Api::over(self.transport()?, server_url, Some(resp.token));
            let _ = fresh.logout().await;
            return Err(e.into());
        }
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
            let same_user =
                sync_state::last_identity(tx)?.is_some_and(|(server, tenant, email)| {
                    server == profile.server_url
                        && tenant == profile.tenant_slug
                        && email.eq_ignore_ascii_case(&profile.user_email)
                });
            if !same_user {
                // Acts the last user had acknowledged are not this one's to
                // send again after a restore.
                store::acked::clear(tx)?;
            }
            if discard_pending {
                store::reset_queue(tx)?;
            }
            sync_state::set_profile(tx, &profile)?;
            // The flags are the tenant's and may be a minute old: the first
            // pass after a sign-in asks again.
            order_flags::ask_soon(tx)?;
            Ok(())
        })?;
        self.changed_locally();
        self.sync_soon();
        Ok(profile)
    }

    /// The server answered 401 to a request made with `api`'s token: the
    /// token is dead (an operator deactivated the user or reset their
    /// password). Unless a sign-in replaced it meanwhile, forget it and sign
    /// the desk out with [`SIGNED_OUT_BY_ADMIN`]; every queued act stays and
    /// goes after the next sign-in of the same user.
    pub(crate) fn session_ended(&self, api: &Api) -> Result<()> {
        let state = self.inner.store.read(sync_state::get)?;
        {
            let mut cached = self.inner.token.lock().unwrap_or_else(|p| p.into_inner());
            let current = match cached.clone() {
                Some(t) => Some(t),
                None => self.inner.tokens.load(&state.store_id)?,
            };
            if current.is_none() || current.as_deref() != api.token() {
                return Ok(());
            }
            self.inner.tokens.delete(&state.store_id)?;
            *cached = None;
            self.inner
                .store
                .write(|tx| sync_state::session_ended(tx, SIGNED_OUT_BY_ADMIN))?;
        }
        tracing::warn!("the server refused this desk's token: signed out, queue kept");
        self.emit(EngineEvent::SignedOut {
            reason: SIGNED_OUT_BY_ADMIN.to_owned(),
        });
        Ok(())
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
}

/// The problem in a push result, or a stand-in when the body is not one.
pub(crate) fn problem_of(status: u16, body: &Value) -> Problem {
    serde_json::from_value(body.clone()).unwrap_or_else(|_| {
        let mut p = Problem::new(ProblemCode::Internal, format!("unreadable answer: {body}"));
        p.status = status;
        p
    })
}
