//! The partner relay: fans outbox events out to deliveries and delivers them,
//! signed, retried with backoff, dead-lettered when hopeless.
//!
//! Several relays (tasks or processes) share the work safely: claims use
//! `for update skip locked` plus a lease whose id fences every later write
//! (see `claim.rs`). A relay wakes on `NOTIFY holdfast_outbox` (sent at commit
//! by the outbox trigger) and also polls, which covers a lost listener
//! connection and retries coming due.

pub mod claim;
pub mod deliver;
pub mod egress;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::config::RelayConfig;
use claim::{AfterFailure, Claimed};
use deliver::Attempt;

/// The relay's knobs, from `RelayConfig` (API.md's flags) plus internal caps.
#[derive(Debug, Clone)]
pub struct Settings {
    pub max_attempts: u32,
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
    pub timeout: Duration,
    pub allow_private_targets: bool,
    /// Deliveries in flight at once in this relay.
    pub max_in_flight: usize,
    /// …and per partner, so a slow partner cannot occupy every slot.
    pub per_partner_in_flight: usize,
    /// Wake this often even without a notification.
    pub poll: Duration,
}

impl From<&RelayConfig> for Settings {
    fn from(c: &RelayConfig) -> Self {
        Settings {
            max_attempts: c.relay_max_attempts,
            backoff_base_ms: c.relay_backoff_base_ms,
            backoff_cap_ms: c.relay_backoff_cap_ms,
            timeout: Duration::from_millis(c.relay_timeout_ms),
            allow_private_targets: c.relay_allow_private_targets,
            max_in_flight: 64,
            per_partner_in_flight: 8,
            poll: Duration::from_millis(500),
        }
    }
}

impl Settings {
    /// A lease outlives the longest attempt with room to record its outcome,
    /// so a healthy worker never loses its lease mid-call.
    fn lease(&self) -> Duration {
        self.timeout * 2 + Duration::from_secs(1)
    }
}

/// A running relay.
pub struct RelayHandle {
    stop: watch::Sender<bool>,
    join: tokio::task::JoinHandle<()>,
}

impl RelayHandle {
    /// Graceful: stop claiming, finish the deliveries in flight.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.join.await;
    }

    /// A crash, for tests: in-flight work is dropped mid-call; its leases
    /// expire and another relay takes the deliveries over.
    pub fn abort(self) {
        self.join.abort();
    }
}

pub fn spawn(db: PgPool, settings: Settings) -> anyhow::Result<RelayHandle> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(settings.timeout)
        .no_proxy()
        .dns_resolver(Arc::new(egress::SafeResolver {
            allow_private: settings.allow_private_targets,
        }))
        .user_agent(concat!("holdfast-relay/", env!("CARGO_PKG_VERSION")))
        .build()?;
    let (stop, stopped) = watch::channel(false);
    let join = tokio::spawn(run(db, settings, client, stopped));
    Ok(RelayHandle { stop, join })
}

type InFlight = Arc<Mutex<HashMap<Uuid, usize>>>;

async fn run(
    db: PgPool,
    settings: Settings,
    client: reqwest::Client,
    mut stop: watch::Receiver<bool>,
) {
    let mut listener = listen(&db).await;
    let in_flight: InFlight = Arc::default();
    let mut tasks = JoinSet::new();
    let settings = Arc::new(settings);
    loop {
        if *stop.borrow() {
            break;
        }
        if let Err(e) = pump(&db, &settings, &client, &in_flight, &mut tasks).await {
            tracing::warn!(error = %e, "relay pass failed; retrying after the poll interval");
        }
        tokio::select! {
            _ = stop.changed() => {}
            _ = tokio::time::sleep(settings.poll) => {}
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            woke = wait_notification(&mut listener) => {
                if !woke {
                    // The listener broke; fall back to polling and reconnect later.
                    listener = None;
                }
            }
        }
        if listener.is_none() && !*stop.borrow() {
            listener = listen(&db).await;
        }
    }
    tracing::info!(
        in_flight = tasks.len(),
        "relay stopping; finishing deliveries in flight"
    );
    while tasks.join_next().await.is_some() {}
}

async fn listen(db: &PgPool) -> Option<PgListener> {
    let attempt = async {
        let mut l = PgListener::connect_with(db).await?;
        l.listen("holdfast_outbox").await?;
        Ok::<_, sqlx::Error>(l)
    };
    match attempt.await {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(error = %e, "relay cannot LISTEN; polling only for now");
            None
        }
    }
}

/// True on a notification; false when the listener broke. Pending forever
/// without a listener, so the select falls to the poll timer.
async fn wait_notification(listener: &mut Option<PgListener>) -> bool {
    match listener {
        Some(l) => l.recv().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// One pass: fan out everything new, then claim as much as there is room for.
async fn pump(
    db: &PgPool,
    settings: &Arc<Settings>,
    client: &reqwest::Client,
    in_flight: &InFlight,
    tasks: &mut JoinSet<()>,
) -> Result<(), sqlx::Error> {
    while claim::fan_out(db).await? > 0 {}
    loop {
        let (room, saturated) = {
            let map = in_flight.lock().unwrap_or_else(|e| e.into_inner());
            let total: usize = map.values().sum();
            let saturated: Vec<Uuid> = map
                .iter()
                .filter(|(_, n)| **n >= settings.per_partner_in_flight)
                .map(|(id, _)| *id)
                .collect();
            (settings.max_in_flight.saturating_sub(total), saturated)
        };
        if room == 0 {
            return Ok(());
        }
        // Claim a partner's share at most, so the cap holds within a batch too.
        let limit = room.min(settings.per_partner_in_flight) as i64;
        let lease_id = Uuid::new_v4();
        let claimed = claim::claim(db, lease_id, settings.lease(), limit, &saturated).await?;
        if claimed.is_empty() {
            return Ok(());
        }
        let full = claimed.len() as i64 == limit;
        for d in claimed {
            *in_flight
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(d.partner_id)
                .or_default() += 1;
            let (db, settings, client, in_flight) = (
                db.clone(),
                settings.clone(),
                client.clone(),
                in_flight.clone(),
            );
            tasks.spawn(async move {
                let partner = d.partner_id;
                deliver_one(&db, &settings, &client, d, lease_id).await;
                let mut map = in_flight.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(n) = map.get_mut(&partner) {
                    *n -= 1;
                    if *n == 0 {
                        map.remove(&partner);
                    }
                }
            });
        }
        if !full {
            return Ok(());
        }
    }
}

async fn deliver_one(
    db: &PgPool,
    settings: &Settings,
    client: &reqwest::Client,
    d: Claimed,
    lease_id: Uuid,
) {
    let sent_at = chrono::Utc::now();
    let outcome = deliver::attempt(client, &d, settings.allow_private_targets).await;
    let recorded = match outcome {
        Attempt::Delivered(status) => {
            metrics::counter!("holdfast_delivery_attempts_total", "outcome" => "delivered")
                .increment(1);
            let latency = (chrono::Utc::now() - d.event_created_at)
                .to_std()
                .unwrap_or_default();
            metrics::histogram!("holdfast_delivery_latency_seconds").record(latency.as_secs_f64());
            claim::mark_delivered(db, &d, lease_id, status)
                .await
                .map(|kept| {
                    if !kept {
                        tracing::warn!(
                            delivery = d.id,
                            "delivered, but the lease had passed to another relay"
                        );
                    }
                })
        }
        Attempt::Gone => {
            metrics::counter!("holdfast_delivery_attempts_total", "outcome" => "gone").increment(1);
            tracing::warn!(partner = %d.partner_id, "partner answered 410 Gone; pausing it");
            claim::mark_gone(db, &d, lease_id, sent_at).await
        }
        Attempt::Failed {
            status,
            error,
            retry_after,
        } => {
            metrics::counter!("holdfast_delivery_attempts_total", "outcome" => "failed")
                .increment(1);
            let jitter = holdfast_protocol::backoff::full_jitter_ms(
                d.attempts.max(0) as u32,
                settings.backoff_base_ms,
                settings.backoff_cap_ms,
                rand::random::<f64>(),
            );
            let delay = Duration::from_millis(jitter)
                .max(retry_after.unwrap_or_default())
                .min(Duration::from_millis(settings.backoff_cap_ms));
            claim::mark_failed(db, &d, lease_id, status, &error, delay, settings.max_attempts)
                .await
                .map(|after| {
                    if after == AfterFailure::DeadLettered {
                        metrics::counter!("holdfast_dead_letters_total").increment(1);
                        tracing::warn!(delivery = d.id, partner = %d.partner_id, error = %error, "delivery dead-lettered");
                    }
                })
        }
    };
    if let Err(e) = recorded {
        // The lease will expire and the delivery will be tried again.
        tracing::error!(delivery = d.id, error = %e, "could not record a delivery attempt");
    }
}
