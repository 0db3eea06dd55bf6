//! The partner relay: fans outbox events out to deliveries and delivers them,
//! signed, retried with backoff, dead-lettered when hopeless.
//!
//! Several relays (tasks or processes) share the work safely: claims use
//! `for update skip locked` plus a lease whose id fences every later write
//! (see `claim.rs`). A relay wakes on `NOTIFY holdfast_outbox` (sent at commit
//! by the outbox trigger) and also polls, which covers a lost listener
//! connection and retries coming due.
//!
//! Throughput comes from doing the database work in bulk, never per
//! delivery. A fan-out hands the first attempts of its events straight to
//! the relay that ran it (`claim::fan_out_handing`, under one lease per
//! partner and batch in `relay_sending`), so an event that is delivered at
//! the first try costs one write after the call, its delivery row, instead
//! of a pending row, a lease and a mark. Retries, held deliveries and
//! whatever a relay had no room for are rows, claimed in batches: a claim
//! takes up to several times a partner's sending slots (the spare ones wait
//! here, under the same lease, for a slot). The next pass comes when a
//! partner is down to half of what it may hold. Outcomes are recorded by
//! one task, as many per statement as have finished meanwhile. Every relay write
//! commits with `synchronous_commit = off`: each is bookkeeping a crash may
//! lose safely (a lost fan-out is redone, a lost lease or mark means a
//! redelivery, which at-least-once delivery already allows), so none waits
//! for a WAL flush.

pub mod claim;
pub mod deliver;
pub mod egress;
mod holdings;
mod recorder;
pub mod test_event;

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use uuid::Uuid;

use crate::config::RelayConfig;
use claim::{AfterFailure, FirstOutcome};
use deliver::Attempt;
use holdings::{Claim, Held, Holdings};
use recorder::{record, sending_of, started, Record};

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
    /// Deliveries of one partner a relay holds at once: its sending slots,
    /// and `CLAIM_AHEAD - 1` times as many waiting for one, so the next
    /// claim (made when half of that is left) runs while the waiting ones go
    /// out.
    fn per_partner_held(&self) -> usize {
        self.per_partner_in_flight * CLAIM_AHEAD
    }

    /// A lease outlives a delivery's wait for a slot (at most
    /// `CLAIM_AHEAD - 1` rounds of attempts ahead of it) and its own attempt,
    /// with room to record the outcome, so a healthy worker never loses its
    /// lease mid-call.
    fn lease(&self) -> Duration {
        self.timeout * (CLAIM_AHEAD as u32 + 1) + Duration::from_secs(1)
    }

    /// First attempts a relay may hold of one partner: many more than
    /// claimed rows, since their lease is renewed while the relay lives
    /// (`record`), so no formula of waiting time bounds it; enough that a
    /// healthy partner's slots never empty while the next fan-out runs.
    fn per_partner_first(&self) -> usize {
        self.per_partner_in_flight * FIRST_AHEAD
    }

    /// …and in all.
    fn total_first(&self) -> usize {
        self.per_partner_first()
            .max(self.max_in_flight * FIRST_AHEAD / 4)
    }
}

/// How many sending slots' worth of a partner's deliveries a relay claims
/// ahead (see `Settings::per_partner_held`).
const CLAIM_AHEAD: usize = 8;

/// How many sending slots' worth of a partner's first attempts a relay
/// holds (see `Settings::per_partner_first`).
const FIRST_AHEAD: usize = 128;

/// A notification starts a pass no sooner than this after the last pass
/// began. Under a stream of commits (hundreds a second at one client, each
/// notifying) one pass then takes the events of several, instead of a pass,
/// six statements on the relay's connection, per commit; a notification
/// after a quiet spell (events 10 ms apart, item 6c of the bench) passes at
/// once. A full fan-out's next batch and the poll are not held back.
const WAKE_GAP: Duration = Duration::from_millis(5);

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
    let client = deliver::client(settings.timeout, settings.allow_private_targets)?;
    // The relay's own few connections, committing without a flush wait
    // (see the module doc); the server's pool is left as it is.
    let options = (*db.connect_options())
        .clone()
        .options([("synchronous_commit", "off")]);
    let relay_db = crate::pool_options(4, Duration::from_secs(5)).connect_lazy_with(options);
    let (stop, stopped) = watch::channel(false);
    let join = tokio::spawn(run(relay_db, settings, client, stopped));
    Ok(RelayHandle { stop, join })
}

async fn run(
    db: PgPool,
    settings: Settings,
    client: reqwest::Client,
    mut stop: watch::Receiver<bool>,
) {
    let mut listener = listen(&db).await;
    let (outcomes, recorded) = mpsc::unbounded_channel();
    let recorder = tokio::spawn(record(db.clone(), recorded, settings.lease()));
    let settings = Arc::new(settings);
    let mut holdings = Holdings::default();
    let mut tasks: JoinSet<Uuid> = JoinSet::new();
    // A deadline, not a sleep restarted every turn: a busy relay (a delivery
    // finishing every few ms) still polls, so without a listener new events
    // are still fanned out and retries still come due.
    let mut next_poll = tokio::time::Instant::now() + settings.poll;
    // Whether to pass on this turn: after a wake-up (a notification or the
    // poll), or when a partner is down to half its share and the last pass
    // was cut short by the caps (more was due than it could take). The pass
    // runs beside the deliveries, never holding them up.
    let mut may_claim = true;
    let mut woken = true;
    // A notification not yet passed on, waiting out `WAKE_GAP`.
    let mut notified = false;
    let mut last_pass = tokio::time::Instant::now();
    let mut cut_short = false;
    let mut claiming: Option<JoinHandle<Result<Claim, sqlx::Error>>> = None;
    loop {
        if *stop.borrow() {
            break;
        }
        if notified && last_pass.elapsed() >= WAKE_GAP {
            notified = false;
            may_claim = true;
            woken = true;
        }
        if may_claim && claiming.is_none() {
            may_claim = false;
            let room = (settings.max_in_flight * 2).saturating_sub(holdings.total());
            let fan_out = if woken {
                holdings.fan_out_limit(&settings)
            } else {
                0
            };
            if room == 0 && fan_out == 0 {
                cut_short = true;
            } else {
                let pass = Pass {
                    room,
                    partners: holdings.room(settings.per_partner_held()),
                    fan_out,
                    first_room: holdings.room(settings.per_partner_first()),
                    woken: std::mem::take(&mut woken),
                };
                claiming = Some(tokio::spawn(pump(db.clone(), settings.clone(), pass)));
                last_pass = tokio::time::Instant::now();
            }
        }
        for held in holdings.next_to_send(&settings) {
            let (db, settings, client, outcomes) = (
                db.clone(),
                settings.clone(),
                client.clone(),
                outcomes.clone(),
            );
            tasks.spawn(async move {
                let partner = held.delivery.partner_id;
                deliver_one(&db, &settings, &client, held, &outcomes).await;
                partner
            });
        }
        tokio::select! {
            _ = stop.changed() => {}
            _ = tokio::time::sleep_until(next_poll) => {
                next_poll = tokio::time::Instant::now() + settings.poll;
                may_claim = true;
                woken = true;
            }
            claimed = async { claiming.as_mut().expect("guarded").await }, if claiming.is_some() => {
                claiming = None;
                cut_short = match claimed {
                    Ok(Ok(claim)) => {
                        if claim.fan_out_full {
                            may_claim = true;
                            woken = true;
                        }
                        started(&outcomes, &claim.first, claim.lease_id);
                        // Rows still due stay due while a partner they may
                        // belong to had no room in this claim: it holds
                        // first attempts enough, and takes them later.
                        let skipped = claim.partners.iter().any(|(_, room)| *room <= 0);
                        let more_due = holdings.take(claim, settings.per_partner_held())
                            || (cut_short && skipped);
                        // A top-up waits for a delivery to finish; holding
                        // none, nothing would finish before the poll.
                        may_claim |= more_due && holdings.total() == 0;
                        more_due
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "relay pass failed; retrying after the poll interval");
                        false
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "relay claim task failed; retrying after the poll interval");
                        false
                    }
                };
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => match done {
                Ok(partner) => {
                    holdings.finished(partner);
                    // Half of a partner's share left: top it up, if the last
                    // pass suggested more is due (a wake-up says so anyway).
                    may_claim |= cut_short && holdings.held(&partner) * 2 <= settings.per_partner_first();
                }
                Err(e) => tracing::error!(error = %e, "a delivery task failed; its lease will expire"),
            },
            woke = wait_notification(&mut listener) => {
                if !woke {
                    // The listener broke; fall back to polling and reconnect later.
                    listener = None;
                }
                notified = true;
            }
            _ = tokio::time::sleep_until(last_pass + WAKE_GAP), if notified => {}
        }
        if listener.is_none() && !*stop.borrow() {
            listener = listen(&db).await;
        }
    }
    if let Some(pending) = claiming {
        if let Ok(Ok(claim)) = pending.await {
            started(&outcomes, &claim.first, claim.lease_id);
            holdings.take(claim, settings.per_partner_held());
        }
    }
    let mut unsent: Vec<(Uuid, i64, Uuid)> = Vec::new();
    let mut first_unsent = 0;
    for held in holdings.drain_waiting() {
        let d = held.delivery;
        match d.id {
            Some(id) => unsent.push((d.tenant_id, id, held.lease_id)),
            None => {
                // Given back as a pending row, unattempted.
                first_unsent += 1;
                let _ = outcomes.send(Record::First(FirstOutcome {
                    sending: sending_of(&d, held.lease_id),
                    outbox_id: d.outbox_id,
                    state: "pending",
                    attempts: 0,
                    status: None,
                    error: None,
                    delay: Duration::ZERO,
                }));
            }
        }
    }
    tracing::info!(
        in_flight = tasks.len(),
        released = unsent.len() + first_unsent,
        "relay stopping; finishing deliveries in flight, giving back the rest"
    );
    if !unsent.is_empty() {
        if let Err(e) = claim::release(&db, &unsent).await {
            tracing::warn!(error = %e, "could not give back claimed deliveries; their leases will expire");
        }
    }
    while tasks.join_next().await.is_some() {}
    drop(outcomes);
    let _ = recorder.await;
    // The listener holds one of the pool's connections, and `close` waits
    // for every connection to come back.
    drop(listener);
    db.close().await;
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

/// What a pass may take.
struct Pass {
    /// Claimed rows in all…
    room: usize,
    /// …and per partner (absent: a whole share).
    partners: Vec<(Uuid, i64)>,
    /// Events to fan out (0: none).
    fan_out: usize,
    /// First attempts per partner (absent: a whole share).
    first_room: Vec<(Uuid, i64)>,
    /// After a notification, the poll, or the last pass's full fan-out: the
    /// only times there can be anything new, or a lease expired.
    woken: bool,
}

/// One pass: when woken, take over what dead relays were sending; fan out
/// a batch of new events, keeping the first attempts it may hold; then
/// claim up to `room` due rows, no more of a partner than its share allows.
async fn pump(db: PgPool, settings: Arc<Settings>, pass: Pass) -> Result<Claim, sqlx::Error> {
    if pass.woken {
        claim::take_over_expired(&db).await?;
    }
    let lease_id = Uuid::new_v4();
    // One batch per pass, then claim: a backlog of new events starts going
    // out after its first batch is fanned out, not after all of it (20,000
    // events took 1.5 s to fan out before the first delivery). A full batch
    // means more may be waiting: the caller passes again.
    let fanned = if pass.fan_out > 0 {
        claim::fan_out_handing(
            &db,
            pass.fan_out as i64,
            Some(claim::Handout {
                lease_id,
                lease: settings.lease(),
                total: pass.fan_out,
                room: claim::Room {
                    per_partner: settings.per_partner_first() as i64,
                    partners: &pass.first_room,
                },
            }),
        )
        .await?
    } else {
        claim::FannedOut::default()
    };
    let fan_out_full = pass.fan_out > 0 && fanned.events >= pass.fan_out as u64;
    let room = pass.room.saturating_sub(fanned.first.len());
    let claimed = if room > 0 {
        claim::claim(
            &db,
            lease_id,
            settings.lease(),
            room as i64,
            claim::Room {
                per_partner: settings.per_partner_held() as i64,
                partners: &pass.partners,
            },
        )
        .await?
    } else {
        Vec::new()
    };
    Ok(Claim {
        lease_id,
        asked: room,
        partners: pass.partners,
        claimed,
        first: fanned.first,
        fan_out_full,
        overflow: fanned.overflow,
    })
}

async fn deliver_one(
    db: &PgPool,
    settings: &Settings,
    client: &reqwest::Client,
    held: Held,
    outcomes: &mpsc::UnboundedSender<Record>,
) {
    let Held {
        delivery: d,
        lease_id,
    } = held;
    let sent_at = chrono::Utc::now();
    if d.first_attempt {
        let lag = (sent_at - d.event_created_at).to_std().unwrap_or_default();
        metrics::histogram!("holdfast_relay_lag_seconds").record(lag.as_secs_f64());
    }
    let outcome = deliver::attempt(client, &d, settings.allow_private_targets).await;
    let sending = sending_of(&d, lease_id);
    // A first attempt's outcome becomes its delivery row, written in a batch
    // by `record` (if the relay dies first, its lease expires and another
    // relay sends the event again).
    let first = |state, status, error, delay| {
        let _ = outcomes.send(Record::First(FirstOutcome {
            sending,
            outbox_id: d.outbox_id,
            state,
            attempts: 1,
            status,
            error,
            delay,
        }));
    };
    let recorded = match outcome {
        Attempt::Delivered(status) => {
            metrics::counter!("holdfast_delivery_attempts_total", "outcome" => "delivered")
                .increment(1);
            let latency = (chrono::Utc::now() - d.event_created_at)
                .to_std()
                .unwrap_or_default();
            metrics::histogram!("holdfast_delivery_latency_seconds").record(latency.as_secs_f64());
            match d.id {
                None => first("delivered", Some(status), None, Duration::ZERO),
                // Recorded in a batch by `record`; if the relay dies first,
                // the lease expires and the event is sent again.
                Some(id) => {
                    let _ = outcomes.send(Record::Delivered(claim::Delivered {
                        tenant_id: d.tenant_id,
                        id,
                        lease_id,
                        status,
                    }));
                }
            }
            Ok(())
        }
        Attempt::Gone => {
            metrics::counter!("holdfast_delivery_attempts_total", "outcome" => "gone").increment(1);
            tracing::warn!(partner = %d.partner_id, "partner answered 410 Gone; pausing it");
            match d.id {
                None => {
                    let written = claim::first_gone(db, &d, sending, sent_at).await;
                    if matches!(written, Ok(true)) {
                        let _ = outcomes.send(Record::Written(sending));
                    }
                    written.map(|_| ())
                }
                Some(_) => claim::mark_gone(db, &d, lease_id, sent_at).await,
            }
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
            let dead_lettered = || {
                metrics::counter!("holdfast_dead_letters_total").increment(1);
                tracing::warn!(event = d.outbox_id, partner = %d.partner_id, error = %error, "delivery dead-lettered");
            };
            match d.id {
                None => {
                    let dead = settings.max_attempts <= 1;
                    if dead {
                        dead_lettered();
                    }
                    let state = if dead { "dead" } else { "pending" };
                    first(state, status, Some(error.clone()), delay);
                    Ok(())
                }
                Some(_) => claim::mark_failed(
                    db,
                    &d,
                    lease_id,
                    status,
                    &error,
                    delay,
                    settings.max_attempts,
                )
                .await
                .map(|after| {
                    if after == AfterFailure::DeadLettered {
                        dead_lettered();
                    }
                }),
            }
        }
    };
    if let Err(e) = recorded {
        // The lease will expire and the delivery will be tried again.
        tracing::error!(event = d.outbox_id, partner = %d.partner_id, error = %e, "could not record a delivery attempt");
    }
}
