//! The 3PL warehouse: signed inbound events (`inventory.received`, and now
//! and then an `inventory.adjusted` that takes stock away), sent through a
//! faulty proxy and redelivered the way providers do — again after a lost
//! answer, and again for no reason at all, sometimes two at once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use holdfast_protocol::webhook;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use uuid::Uuid;

/// A bound on delivering one event (the server may be down a while).
const EVENT_DEADLINE: Duration = Duration::from_secs(120);

/// Every answer the warehouse got for one event.
#[derive(Debug, Clone, Default)]
pub struct Sent {
    pub sku_id: Uuid,
    /// Signed change of on_hand.
    pub qty: i64,
    pub processed: u32,
    pub duplicate: u32,
    /// 422: refused (an adjustment that would undercut allocations).
    pub refused: u32,
    /// No answer (reset, cut, server down) or a 5xx.
    pub lost: u32,
    pub other: Vec<String>,
}

impl Sent {
    /// The server said it applied this event (now or on an earlier try).
    pub fn applied(&self) -> bool {
        self.processed + self.duplicate > 0
    }
}

pub struct Warehouse {
    url: String,
    secret: Vec<u8>,
    http: reqwest::Client,
    rng: StdRng,
    seed: u64,
    next: u64,
    pub sent: HashMap<String, Sent>,
}

/// One attempt's outcome.
enum Answer {
    Processed,
    Duplicate,
    Refused,
    Lost,
    Other(String),
}

impl Warehouse {
    /// `url` is the proxy in front of the server; `secret` the tenant's
    /// inbound secret for `warehouse`.
    pub fn new(url: &str, secret: &str, seed: u64) -> anyhow::Result<Warehouse> {
        Ok(Warehouse {
            url: format!("{url}/v1/webhooks/acme/warehouse"),
            secret: webhook::parse_secret(secret)?,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(4))
                .build()?,
            rng: StdRng::seed_from_u64(seed),
            seed,
            next: 0,
            sent: HashMap::new(),
        })
    }

    async fn attempt(&self, id: &str, body: &str) -> Answer {
        let ts = chrono::Utc::now().timestamp();
        let sig = webhook::sign(&self.secret, id, ts, body.as_bytes());
        let resp = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", sig)
            .body(body.to_owned())
            .send()
            .await;
        let Ok(resp) = resp else {
            return Answer::Lost;
        };
        let status = resp.status().as_u16();
        let Ok(text) = resp.text().await else {
            return Answer::Lost;
        };
        match status {
            200 => match serde_json::from_str::<Value>(&text) {
                Ok(v) if v["status"] == "processed" => Answer::Processed,
                Ok(v) if v["status"] == "duplicate" => Answer::Duplicate,
                // A cut body: we cannot tell, so it counts as unanswered.
                _ => Answer::Lost,
            },
            422 => Answer::Refused,
            s if s >= 500 => Answer::Lost,
            s => Answer::Other(format!("{s}: {text}")),
        }
    }

    fn record(&mut self, id: &str, answer: Answer) -> bool {
        let s = self.sent.entry(id.to_owned()).or_default();
        match answer {
            Answer::Processed => s.processed += 1,
            Answer::Duplicate => s.duplicate += 1,
            Answer::Refused => s.refused += 1,
            Answer::Lost => {
                s.lost += 1;
                return false;
            }
            Answer::Other(o) => s.other.push(o),
        }
        true
    }

    /// Sends one new event on one of `skus` until the server gave a
    /// definitive answer to the latest try, plus the redeliveries a provider
    /// makes anyway.
    pub async fn send_one(&mut self, skus: &[Uuid]) {
        self.next += 1;
        let id = format!("wh-{}-{}", self.seed, self.next);
        let sku = skus[self.rng.random_range(0..skus.len())];
        let (kind, qty) = if self.rng.random_bool(0.15) {
            ("inventory.adjusted", -self.rng.random_range(1..=3i64))
        } else {
            ("inventory.received", self.rng.random_range(1..=3i64))
        };
        let body = json!({"type": kind, "data": {"sku_id": sku, "qty": qty}}).to_string();
        self.sent.insert(
            id.clone(),
            Sent {
                sku_id: sku,
                qty,
                ..Sent::default()
            },
        );
        let extra = self.rng.random_range(0..=2u32);
        let twin = self.rng.random_bool(0.2);
        let started = Instant::now();
        let mut definitive = false;
        let mut extras_done = 0;
        while started.elapsed() < EVENT_DEADLINE {
            if twin && extras_done == 0 {
                // Two deliveries of one event at the same moment.
                let (a, b) = tokio::join!(self.attempt(&id, &body), self.attempt(&id, &body));
                let da = self.record(&id, a);
                let db = self.record(&id, b);
                // Both must be answered: a lost twin might have been the one that
                // ran, so only a later definitive try settles it.
                definitive = da && db;
                extras_done += 1;
            } else {
                let a = self.attempt(&id, &body).await;
                definitive = self.record(&id, a);
            }
            if definitive {
                if extras_done >= extra {
                    return;
                }
                extras_done += 1;
                continue;
            }
            // A provider's own retry schedule: part of the load, not a wait
            // for anything in particular.
            let pause = self.rng.random_range(20..200);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        if !definitive {
            self.sent
                .entry(id)
                .or_default()
                .other
                .push("no definitive answer within the deadline".into());
        }
    }

    /// (events, attempts, answered duplicate)
    pub fn counts(&self) -> (usize, u64, u64) {
        let attempts = self
            .sent
            .values()
            .map(|s| {
                u64::from(s.processed + s.duplicate + s.refused + s.lost) + s.other.len() as u64
            })
            .sum();
        let dups = self.sent.values().map(|s| u64::from(s.duplicate)).sum();
        (self.sent.len(), attempts, dups)
    }
}
