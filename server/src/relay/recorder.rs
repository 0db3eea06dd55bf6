//! The relay's recorder: one task writes what every attempt of its relay
//! came to, as many outcomes per statement as finished meanwhile, and keeps
//! the relay's `relay_sending` rows (how many first attempts each still
//! holds, deleted with the last one's delivery row, leases renewed).

use std::collections::HashMap;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::claim::{self, Claimed, FirstOutcome, Sending};

pub(super) fn sending_of(d: &Claimed, lease_id: Uuid) -> Sending {
    Sending {
        tenant_id: d.tenant_id,
        partner_id: d.partner_id,
        lease_id,
    }
}

/// Tells the recorder how many first attempts each `relay_sending` row of a
/// pass holds, before any of their outcomes can reach it.
pub(super) fn started(outcomes: &mpsc::UnboundedSender<Record>, first: &[Claimed], lease_id: Uuid) {
    let mut counts: HashMap<Sending, usize> = HashMap::new();
    for d in first {
        *counts.entry(sending_of(d, lease_id)).or_default() += 1;
    }
    for (sending, n) in counts {
        let _ = outcomes.send(Record::Started(sending, n));
    }
}

/// What the recorder is told.
pub(super) enum Record {
    /// A fan-out handed this relay `n` first attempts under one row.
    Started(Sending, usize),
    /// A claimed row's 2xx.
    Delivered(claim::Delivered),
    /// A first attempt's outcome, for its delivery row.
    First(FirstOutcome),
    /// A first attempt whose row was written already (a 410's).
    Written(Sending),
}

/// Records outcomes: whatever finished while the previous statement ran,
/// or within `LINGER` of the first outcome, goes in the next one, so a busy
/// relay writes in batches (in bench item 6, ~48 rows a statement against
/// ~13 without the wait) and an idle one within a few ms. It also keeps
/// this relay's `relay_sending` rows: it counts each row's first attempts
/// down, deletes the row with its last delivery row, and renews the leases
/// of the live ones every quarter lease. Returns when every sender is gone
/// and the queue is drained; a row it could not write for is left to
/// expire (another relay then sends its events again).
pub(super) async fn record(
    db: PgPool,
    mut outcomes: mpsc::UnboundedReceiver<Record>,
    lease: Duration,
) {
    const MAX_BATCH: usize = 1000;
    const LINGER: Duration = Duration::from_millis(2);
    let mut live: HashMap<Sending, usize> = HashMap::new();
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut renewal = tokio::time::interval(lease / 4);
    renewal.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            n = outcomes.recv_many(&mut batch, MAX_BATCH) => {
                if n == 0 {
                    break;
                }
                // A busy relay finishes an attempt every few tens of µs:
                // waiting a moment for more puts dozens of outcomes in one
                // statement instead of a handful, so far fewer statements.
                if n < MAX_BATCH {
                    tokio::time::sleep(LINGER).await;
                    while batch.len() < MAX_BATCH {
                        match outcomes.try_recv() {
                            Ok(record) => batch.push(record),
                            Err(_) => break,
                        }
                    }
                }
            }
            _ = renewal.tick() => {
                let leases: Vec<Uuid> = live.keys().map(|s| s.lease_id).collect();
                if !leases.is_empty() {
                    if let Err(e) = claim::renew(&db, &leases, lease).await {
                        tracing::warn!(error = %e, "could not renew the leases of first attempts being sent; if they expire, another relay sends them again");
                    }
                }
                continue;
            }
        }
        let mut delivered = Vec::new();
        let mut first = Vec::new();
        let mut finished = Vec::new();
        let mut count_down = |sending: Sending, live: &mut HashMap<Sending, usize>| {
            if let Some(n) = live.get_mut(&sending) {
                *n -= 1;
                if *n == 0 {
                    live.remove(&sending);
                    finished.push(sending);
                }
            }
        };
        for record in batch.drain(..) {
            match record {
                Record::Started(sending, n) => *live.entry(sending).or_default() += n,
                Record::Delivered(d) => delivered.push(d),
                Record::First(o) => {
                    count_down(o.sending, &mut live);
                    first.push(o);
                }
                Record::Written(sending) => count_down(sending, &mut live),
            }
        }
        if !delivered.is_empty() {
            match claim::mark_delivered(&db, &delivered).await {
                Ok(lost) => {
                    for id in lost {
                        tracing::warn!(
                            delivery = id,
                            "delivered, but the lease had passed to another relay"
                        );
                    }
                }
                // The leases will expire and the deliveries be sent again.
                Err(e) => tracing::error!(error = %e, deliveries = delivered.len(),
                    "could not record delivered attempts; they will be redelivered"),
            }
        }
        if first.is_empty() && finished.is_empty() {
            continue;
        }
        match claim::record_first(&db, &first, &finished).await {
            Ok(lost) => {
                for event in lost {
                    tracing::warn!(
                        event,
                        "attempted, but the lease had passed to another relay; it will be sent again"
                    );
                }
            }
            Err(e) => {
                // Stop renewing what this statement was for: the rows
                // expire and another pass makes their events pending again.
                for o in &first {
                    live.remove(&o.sending);
                }
                tracing::error!(error = %e, attempts = first.len(),
                    "could not record first attempts; their events will be sent again");
            }
        }
    }
}
