//! Load: desks creating orders, adding lines, allocating and reading while
//! the database goes away, retrying as a desk does; then the check that every
//! acknowledged act was applied exactly once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgConnection;
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use super::audit::{assert_ledgers_match_positions, assert_one_history_entry_per_version};
use super::http::{assert_unavailable, login, send, Answer};

/// Desks hammering the server while Postgres goes away.
pub const WORKERS: usize = 6;

/// One desk signed in as dana@acme.test, with the customer it sells to and
/// the SKUs it picks from.
#[derive(Clone)]
pub struct Desk {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
    pub customer: String,
    pub skus: Arc<Vec<String>>,
}

impl Desk {
    pub async fn new(base: &str) -> Desk {
        let http = reqwest::Client::new();
        let token = login(&http, base, "dana@acme.test").await;
        let get = |path: String| {
            let (http, token) = (http.clone(), token.clone());
            async move {
                let a = send(&http, Method::GET, &path, Some(&token), None, None).await;
                assert_eq!(a.status, StatusCode::OK, "{path}: {}", a.body);
                a.body
            }
        };
        let customers = get(format!("{base}/v1/customers")).await;
        let customer = customers["customers"]
            .as_array()
            .expect("customers")
            .iter()
            .find(|c| c["name"] == "Tokyo Distributor")
            .expect("Tokyo Distributor")["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let skus = get(format!("{base}/v1/skus?limit=100")).await;
        let skus: Vec<String> = skus["skus"]
            .as_array()
            .expect("skus")
            .iter()
            .map(|s| s["id"].as_str().expect("sku id").to_owned())
            .collect();
        assert!(skus.len() >= 50);
        Desk {
            http,
            base: base.to_owned(),
            token,
            customer,
            skus: Arc::new(skus),
        }
    }

    /// Sends until there is a real answer: a 503 (the database is away) or
    /// 409 `request_in_flight` is retried with the same key, as a desk does.
    /// Retries faster than Retry-After asks, to keep the pressure on.
    pub async fn until_answered(
        &self,
        tally: &mut Tally,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            let started = Instant::now();
            let a = send(
                &self.http,
                method.clone(),
                &format!("{}{path}", self.base),
                Some(&self.token),
                key,
                body,
            )
            .await;
            tally.slowest = tally.slowest.max(started.elapsed());
            let retry = match (a.status.as_u16(), a.body["code"].as_str()) {
                (503, _) => {
                    assert_unavailable(&a, path);
                    tally.unavailable += 1;
                    true
                }
                (409, Some("request_in_flight")) => {
                    tally.in_flight += 1;
                    true
                }
                _ => false,
            };
            if !retry {
                tally.answered += 1;
                return a;
            }
            assert!(
                Instant::now() < give_up,
                "{path}: still unavailable after a minute"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// One desk's act: create an order, add a line, allocate one, read back.
    pub async fn cycle(&self, tally: &mut Tally, worker: usize, n: usize) {
        let order = Uuid::now_v7();
        let line = Uuid::now_v7();
        let sku = &self.skus[(worker * 17 + n) % self.skus.len()];
        let create = json!({"id": order, "customer_id": self.customer});
        let a = self
            .until_answered(
                tally,
                Method::POST,
                "/v1/orders",
                Some(&format!("{order}-create")),
                Some(&create),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "create: {}", a.body);
        let add = json!({"id": line, "sku_id": sku, "qty_ordered": 2, "base_version": 1});
        let a = self
            .until_answered(
                tally,
                Method::POST,
                &format!("/v1/orders/{order}/lines"),
                Some(&format!("{order}-line")),
                Some(&add),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "add line: {}", a.body);
        let alloc_key = format!("{order}-allocate");
        let a = self
            .until_answered(
                tally,
                Method::POST,
                &format!("/v1/orders/{order}/lines/{line}/allocate"),
                Some(&alloc_key),
                Some(&json!({"qty": 1})),
            )
            .await;
        let version = match (a.status.as_u16(), a.body["code"].as_str()) {
            (200, _) => {
                tally.allocations.push(alloc_key);
                3
            }
            // The SKU ran out: a business answer, stored, nothing changed.
            (422, Some("insufficient_ats")) => 2,
            _ => panic!("allocate: {} {}", a.status, a.body),
        };
        tally.orders.push((order, version));
        tally.finished_at.push(Instant::now());
        let a = self
            .until_answered(
                tally,
                Method::GET,
                &format!("/v1/orders/{order}"),
                None,
                None,
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "read order: {}", a.body);
        assert_eq!(a.body["version"], version, "read order: {}", a.body);
        let a = self
            .until_answered(tally, Method::GET, &format!("/v1/skus/{sku}"), None, None)
            .await;
        assert_eq!(a.status, StatusCode::OK, "read sku: {}", a.body);
    }
}

/// What one desk saw.
#[derive(Default, Debug)]
pub struct Tally {
    pub cycles: u64,
    pub answered: u64,
    pub unavailable: u64,
    pub in_flight: u64,
    pub slowest: Duration,
    /// Orders every step of which was acknowledged, with their version.
    pub orders: Vec<(Uuid, i64)>,
    /// When each of `orders` had its last step acknowledged.
    pub finished_at: Vec<Instant>,
    /// Allocation keys answered 200.
    pub allocations: Vec<String>,
}

impl Tally {
    pub fn merge(&mut self, other: Tally) {
        self.cycles += other.cycles;
        self.answered += other.answered;
        self.unavailable += other.unavailable;
        self.in_flight += other.in_flight;
        self.slowest = self.slowest.max(other.slowest);
        self.orders.extend(other.orders);
        self.finished_at.extend(other.finished_at);
        self.allocations.extend(other.allocations);
    }
}

/// [`WORKERS`] desks cycling until told to stop.
pub struct Load {
    stop: watch::Sender<bool>,
    recovered: watch::Sender<bool>,
    cycles: watch::Receiver<u64>,
    served_after: mpsc::UnboundedReceiver<usize>,
    workers: Vec<tokio::task::JoinHandle<Tally>>,
}

impl Load {
    pub fn start(desk: &Desk) -> Load {
        let (stop, stopped) = watch::channel(false);
        let (recovered, recovered_rx) = watch::channel(false);
        let (cycles_tx, cycles) = watch::channel(0u64);
        let cycles_tx = Arc::new(cycles_tx);
        let (served_tx, served_after) = mpsc::unbounded_channel();
        let workers = (0..WORKERS)
            .map(|w| {
                let (desk, stopped, recovered) =
                    (desk.clone(), stopped.clone(), recovered_rx.clone());
                let (cycles_tx, served_tx) = (cycles_tx.clone(), served_tx.clone());
                tokio::spawn(async move {
                    let mut tally = Tally::default();
                    let mut reported = false;
                    for n in 0.. {
                        if *stopped.borrow() {
                            break;
                        }
                        let after_recovery = *recovered.borrow();
                        desk.cycle(&mut tally, w, n).await;
                        tally.cycles += 1;
                        cycles_tx.send_modify(|c| *c += 1);
                        if after_recovery && !reported {
                            reported = true;
                            let _ = served_tx.send(w);
                        }
                    }
                    tally
                })
            })
            .collect();
        Load {
            stop,
            recovered,
            cycles,
            served_after,
            workers,
        }
    }

    /// Waits until the desks completed `n` more acts.
    pub async fn progress(&mut self, n: u64) {
        let target = *self.cycles.borrow() + n;
        tokio::time::timeout(
            Duration::from_secs(60),
            self.cycles.wait_for(|c| *c >= target),
        )
        .await
        .expect("the load made no progress")
        .expect("cycles");
    }

    /// Marks the database as back and waits until every desk completed an
    /// act begun after that.
    pub async fn served_again(&mut self) {
        self.recovered.send_replace(true);
        for _ in 0..WORKERS {
            tokio::time::timeout(Duration::from_secs(60), self.served_after.recv())
                .await
                .expect("every desk is served again after the restart")
                .expect("a worker ended early");
        }
    }

    pub async fn finish(self) -> Tally {
        self.stop.send_replace(true);
        let mut tally = Tally::default();
        for w in self.workers {
            tally.merge(w.await.expect("a desk failed"));
        }
        tally
    }
}

/// Every acknowledged act applied exactly once, ledger = positions, and one
/// history entry per order version.
pub async fn check_invariants(db: &mut PgConnection, tally: &Tally) {
    for (order, version) in &tally.orders {
        let stored: i64 = sqlx::query_scalar("select version from orders where id = $1")
            .bind(order)
            .fetch_one(&mut *db)
            .await
            .expect("acknowledged order exists");
        assert_eq!(stored, *version, "order {order}: each act applied once");
    }
    for key in &tally.allocations {
        let rows: i64 =
            sqlx::query_scalar("select count(*) from allocation_ledger where idempotency_key = $1")
                .bind(key)
                .fetch_one(&mut *db)
                .await
                .expect("ledger");
        assert_eq!(rows, 1, "allocation {key}: one ledger row");
    }
    assert_ledgers_match_positions(&mut *db).await;
    assert_one_history_entry_per_version(&mut *db).await;
}
