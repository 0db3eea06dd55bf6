//! Live pokes for `GET /v1/sync/stream`: ONE LISTEN connection per server
//! process hears every committed change and fans it out to the streams of
//! that change's tenant, never holding a database connection per desk.
//!
//! The trigger on `changes` notifies `tenant:xid` at commit. A poke goes out
//! only once a pull can see the change, i.e. once the feed fence has passed
//! its xid (see `pull.rs`): a desk poked earlier would pull, find nothing, and
//! hear nothing more until the tenant's next commit. So the dispatcher keeps
//! each tenant's newest unannounced xid and re-reads the fence (one tiny query
//! per process, not per desk) until it has passed.
//!
//! A commit nobody of its tenant was listening to is remembered too, until the
//! fence passes it: a desk that opens its stream meanwhile pulls right after,
//! cannot see that commit yet (the fence holds it back), and must still hear
//! of it. So opening a stream ([`Hub::open`]) reads the fence once and tells
//! the dispatcher, which adopts whatever of that tenant is still at or above
//! it.
//!
//! Each tenant has a small broadcast channel. Sending never waits, so a slow
//! or dead desk cannot hold up anyone: its receiver lags, and a lagging
//! receiver skips to the newest poke (pokes carry no data; one is as good as
//! many).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use uuid::Uuid;

use super::Position;

/// The NOTIFY channel the `changes` trigger sends on (migration
/// 20261201000100_feed.sql).
pub const CHANNEL: &str = "holdfast_changes";

/// Pokes buffered per tenant before a slow stream starts skipping.
const PER_TENANT_BUFFER: usize = 16;
/// The fence is read at most once per this: the first commit after a quiet
/// spell is read at once, a burst behind it costs one more query, not one
/// each.
const GATHER: Duration = Duration::from_millis(5);
/// While a change waits behind an older transaction still in flight, the
/// fence is re-read after this, doubling up to `RECHECK_MAX`: most writers
/// commit within milliseconds, and a desk should hear of the change as soon
/// as a pull can see it, not up to one fixed period later.
const RECHECK_MIN: Duration = Duration::from_millis(2);
const RECHECK_MAX: Duration = Duration::from_millis(50);
/// Back-off after the database refused a fence query or a reconnect.
const RETRY: Duration = Duration::from_secs(1);

/// Connected streams, by tenant. Created without I/O (`AppState::new`); the
/// listener that feeds it is started by [`super::start`].
pub struct Hub {
    tenants: Mutex<HashMap<Uuid, broadcast::Sender<Position>>>,
    closed: watch::Sender<bool>,
    /// The dispatcher's inbox, once [`super::start`] has started it.
    dispatcher: OnceLock<mpsc::UnboundedSender<Heard>>,
}

impl Hub {
    pub fn new() -> Arc<Hub> {
        Arc::new(Hub {
            tenants: Mutex::new(HashMap::new()),
            closed: watch::Sender::new(false),
            dispatcher: OnceLock::new(),
        })
    }

    /// A desk's stream of pokes for its tenant, which also hears of every
    /// commit a pull made after this returns cannot see yet: the fence is read
    /// once here, after subscribing, and the dispatcher adopts the tenant's
    /// unannounced commits at or above it. One query per stream opened, none
    /// per commit.
    pub async fn open(self: &Arc<Self>, db: &PgPool, tenant_id: Uuid) -> Subscription {
        let subscription = self.subscribe(tenant_id);
        let since = match fence(db).await {
            Ok((xmin, _)) => xmin,
            Err(e) => {
                // Then every unannounced commit of the tenant is adopted: at
                // worst one poke the desk did not need.
                tracing::warn!(error = %e, "reading the feed fence for a new stream failed");
                0
            }
        };
        if let Some(dispatcher) = self.dispatcher.get() {
            // Err only means the dispatcher has stopped (shutting down).
            let _ = dispatcher.send(Heard::Opened { tenant_id, since });
        }
        subscription
    }

    /// A desk's stream of pokes for its tenant. Counted in the
    /// `holdfast_sync_streams` gauge until dropped. It hears of commits the
    /// dispatcher learns of from now on; [`Hub::open`] also covers the ones
    /// already heard but not yet visible.
    pub fn subscribe(self: &Arc<Self>, tenant_id: Uuid) -> Subscription {
        let rx = if *self.closed.borrow() {
            None
        } else {
            let mut tenants = self.lock();
            Some(
                tenants
                    .entry(tenant_id)
                    .or_insert_with(|| broadcast::channel(PER_TENANT_BUFFER).0)
                    .subscribe(),
            )
        };
        metrics::gauge!("holdfast_sync_streams").increment(1.0);
        Subscription {
            rx,
            hub: self.clone(),
            tenant_id,
        }
    }

    /// Ends every stream (so a graceful shutdown is not held open by desks
    /// that never hang up) and stops the listener. New subscriptions end at
    /// once.
    pub fn close(&self) {
        self.closed.send_replace(true);
        self.lock().clear();
    }

    /// Turns true when the hub is closed.
    pub fn closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, broadcast::Sender<Position>>> {
        // The map stays consistent whatever panicked while holding it.
        self.tenants.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_watched(&self, tenant_id: Uuid) -> bool {
        self.lock().contains_key(&tenant_id)
    }

    fn watched(&self) -> Vec<Uuid> {
        self.lock().keys().copied().collect()
    }

    fn poke(&self, tenant_id: Uuid, position: Position) {
        if let Some(tx) = self.lock().get(&tenant_id) {
            // Err only means every receiver just went away.
            let _ = tx.send(position);
        }
    }
}

/// One connected stream's pokes.
pub struct Subscription {
    rx: Option<broadcast::Receiver<Position>>,
    hub: Arc<Hub>,
    tenant_id: Uuid,
}

impl Subscription {
    /// The newest poke once there is one, skipping any this stream fell
    /// behind on; `None` once the server is shutting down.
    pub async fn next(&mut self) -> Option<Position> {
        let rx = self.rx.as_mut()?;
        let mut newest = loop {
            match rx.recv().await {
                Ok(position) => break position,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    metrics::counter!("holdfast_sync_stream_lagged_total").increment(1);
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        };
        // Coalesce whatever else is already queued.
        loop {
            match rx.try_recv() {
                Ok(position) => newest = position,
                Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                Err(_) => return Some(newest),
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        metrics::gauge!("holdfast_sync_streams").decrement(1.0);
        if self.rx.take().is_some() {
            let mut tenants = self.hub.lock();
            // Under the lock, so a concurrent subscribe cannot lose its channel.
            if tenants
                .get(&self.tenant_id)
                .is_some_and(|tx| tx.receiver_count() == 0)
            {
                tenants.remove(&self.tenant_id);
            }
        }
    }
}

/// What the LISTEN connection heard.
enum Heard {
    /// A transaction with this xid committed changes of this tenant.
    Commit { tenant_id: Uuid, xid: i64 },
    /// The connection was lost and re-established: anything may have
    /// committed in between.
    Lost,
    /// A stream of this tenant opened when the fence was `since`
    /// ([`Hub::open`]).
    Opened { tenant_id: Uuid, since: i64 },
}

/// Opens the LISTEN connection and starts the tasks that serve it; returns
/// once LISTEN is in effect.
pub(super) async fn start(db: PgPool, hub: Arc<Hub>) -> Result<Vec<JoinHandle<()>>, sqlx::Error> {
    let mut listener = PgListener::connect_with(&db).await?;
    listener.listen(CHANNEL).await?;
    // Receiving and dispatching are separate tasks because the dispatcher
    // waits on timers too, and `PgListener::try_recv` is not documented as
    // safe to cancel; the receiver only ever cancels it to shut down.
    let (tx, rx) = mpsc::unbounded_channel();
    // A second start on the same hub (never in the server) keeps the first.
    let _ = hub.dispatcher.set(tx.clone());
    Ok(vec![
        tokio::spawn(receive(listener, tx, hub.closed())),
        tokio::spawn(dispatch(db, hub, rx)),
    ])
}

async fn receive(
    mut listener: PgListener,
    tx: mpsc::UnboundedSender<Heard>,
    mut closed: watch::Receiver<bool>,
) {
    loop {
        let received = tokio::select! {
            _ = super::until_closed(&mut closed) => return,
            received = listener.try_recv() => received,
        };
        let heard = match received {
            Ok(Some(notification)) => match parse_payload(notification.payload()) {
                Some(heard) => heard,
                None => {
                    tracing::warn!(
                        payload = notification.payload(),
                        "ignoring a malformed change notification"
                    );
                    continue;
                }
            },
            Ok(None) => {
                tracing::warn!("the LISTEN connection was lost and re-established");
                Heard::Lost
            }
            Err(sqlx::Error::PoolClosed) => return,
            Err(e) => {
                tracing::warn!(error = %e, "the LISTEN connection failed; retrying");
                tokio::select! {
                    _ = super::until_closed(&mut closed) => return,
                    _ = tokio::time::sleep(RETRY) => {}
                }
                // The next try_recv reconnects and LISTENs again; whatever
                // committed meanwhile is unheard, so treat it as a loss.
                Heard::Lost
            }
        };
        if tx.send(heard).is_err() {
            return;
        }
    }
}

/// `<tenant uuid>:<xid>`, as the trigger writes it.
fn parse_payload(payload: &str) -> Option<Heard> {
    let (tenant, xid) = payload.split_once(':')?;
    Some(Heard::Commit {
        tenant_id: tenant.parse().ok()?,
        xid: xid.parse().ok()?,
    })
}

async fn dispatch(db: PgPool, hub: Arc<Hub>, mut rx: mpsc::UnboundedReceiver<Heard>) {
    let mut closed = hub.closed();
    // Tenant → newest xid heard but not yet poked.
    let mut pending: HashMap<Uuid, i64> = HashMap::new();
    // The same for tenants nobody was watching, kept until the fence passes
    // it for a stream that opens before then (`Heard::Opened`).
    let mut unwatched: HashMap<Uuid, i64> = HashMap::new();
    let mut lost = false;
    let mut check_at: Option<Instant> = None;
    // When the fence was last read, and the wait before re-reading it while
    // something is still held back.
    let mut checked_at: Option<Instant> = None;
    let mut recheck = RECHECK_MIN;
    loop {
        let wake = check_at.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = super::until_closed(&mut closed) => return,
            heard = rx.recv() => {
                match heard {
                    None => return,
                    Some(Heard::Commit { tenant_id, xid }) => {
                        // Nobody of that tenant is connected: nothing to poke
                        // yet, but a stream may open before a pull can see it.
                        let book = if hub.is_watched(tenant_id) {
                            &mut pending
                        } else {
                            &mut unwatched
                        };
                        raise(book, tenant_id, xid);
                    }
                    Some(Heard::Opened { tenant_id, since }) => {
                        // Below `since`, every pull the new stream's desk makes
                        // sees it; at or above, only a poke will tell it.
                        if let Some(xid) = unwatched.remove(&tenant_id) {
                            if xid >= since {
                                raise(&mut pending, tenant_id, xid);
                            }
                        }
                    }
                    Some(Heard::Lost) => lost = true,
                }
                if !pending.is_empty() || lost {
                    let soon = checked_at.map_or_else(Instant::now, |at| at + GATHER);
                    check_at = Some(check_at.map_or(soon, |at| at.min(soon)));
                }
            }
            _ = tokio::time::sleep_until(wake), if check_at.is_some() => {
                checked_at = Some(Instant::now());
                check_at = match fence(&db).await {
                    Ok((xmin, xmax)) => {
                        if std::mem::take(&mut lost) {
                            // Whatever committed while we were deaf has an xid
                            // below today's xmax: poke everyone once the fence
                            // has passed all of it.
                            for tenant_id in hub.watched() {
                                let newest = pending.entry(tenant_id).or_insert(xmax - 1);
                                *newest = (*newest).max(xmax - 1);
                            }
                        }
                        unwatched.retain(|_, xid| *xid >= xmin);
                        let cursor = Position::Feed { xid: xmin, id: 0 };
                        pending.retain(|tenant_id, xid| {
                            if *xid < xmin {
                                hub.poke(*tenant_id, cursor);
                                false
                            } else {
                                true
                            }
                        });
                        if pending.is_empty() {
                            recheck = RECHECK_MIN;
                            None
                        } else {
                            let at = Instant::now() + recheck;
                            recheck = (recheck * 2).min(RECHECK_MAX);
                            Some(at)
                        }
                    }
                    Err(sqlx::Error::PoolClosed) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the feed fence failed; retrying");
                        Some(Instant::now() + RETRY)
                    }
                };
            }
        }
    }
}

/// Keeps the newest xid heard for `tenant_id`.
fn raise(book: &mut HashMap<Uuid, i64>, tenant_id: Uuid, xid: i64) {
    let newest = book.entry(tenant_id).or_insert(xid);
    *newest = (*newest).max(xid);
}

/// The current fence (oldest xid in flight) and the next xid to be assigned.
async fn fence(db: &PgPool) -> Result<(i64, i64), sqlx::Error> {
    sqlx::query_as(
        "select pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint
           from pg_current_snapshot() as s",
    )
    .fetch_one(db)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse() {
        let tenant = Uuid::now_v7();
        match parse_payload(&format!("{tenant}:1234")) {
            Some(Heard::Commit { tenant_id, xid }) => assert_eq!((tenant_id, xid), (tenant, 1234)),
            _ => panic!("did not parse"),
        }
        assert!(parse_payload("nonsense").is_none());
        assert!(parse_payload(&format!("{tenant}:")).is_none());
    }

    /// After the LISTEN connection was lost, notifications may have been
    /// missed: every connected tenant is poked anyway.
    #[sqlx::test(migrator = "crate::db::MIGRATOR")]
    async fn a_lost_connection_pokes_every_stream(db: PgPool) {
        let hub = Hub::new();
        let mut desk = hub.subscribe(Uuid::now_v7());
        let (tx, rx) = mpsc::unbounded_channel();
        let dispatcher = tokio::spawn(dispatch(db, hub.clone(), rx));
        tx.send(Heard::Lost).expect("send");
        let poke = tokio::time::timeout(Duration::from_secs(30), desk.next())
            .await
            .expect("a poke after the loss");
        assert!(matches!(poke, Some(Position::Feed { id: 0, .. })));
        hub.close();
        assert_eq!(desk.next().await, None, "closing the hub ends streams");
        dispatcher.await.expect("dispatcher");
    }

    /// A slow stream skips to the newest poke instead of holding anyone up.
    #[tokio::test]
    async fn a_lagging_stream_gets_the_newest_poke() {
        let hub = Hub::new();
        let tenant = Uuid::now_v7();
        let mut slow = hub.subscribe(tenant);
        let mut other = hub.subscribe(Uuid::now_v7());
        for xid in 0..(PER_TENANT_BUFFER as i64 * 3) {
            hub.poke(tenant, Position::Feed { xid, id: 0 });
        }
        let newest = PER_TENANT_BUFFER as i64 * 3 - 1;
        assert_eq!(
            slow.next().await,
            Some(Position::Feed { xid: newest, id: 0 })
        );
        hub.poke(tenant, Position::Feed { xid: 1, id: 1 });
        assert_eq!(slow.next().await, Some(Position::Feed { xid: 1, id: 1 }));
        // The other tenant heard none of it.
        hub.close();
        assert_eq!(other.next().await, None);
    }
}
