//! A rolling upgrade: three `holdfast-server` processes on one Postgres,
//! restarted one at a time — SIGTERM, wait for the graceful stop, start
//! again on the same address — while desks work through all three and a
//! partner receives every event. The restarted process is "the new version":
//! the same binary, which is what this test can build; what it proves is
//! the procedure (drain one, the others carry the load, the newcomer joins),
//! not a schema change between versions.
//!
//! The desks reach the instances as a load balancer would send them: each
//! request to the next instance in turn, an instance that refuses the
//! connection (stopped, or not yet listening again) skipped for the next.
//! Every request opens its own connection: a kept-alive connection that the
//! stopping server closes just as a request goes out on it is a lost answer,
//! which a desk retries with the same key (promise 3) — a load balancer's
//! business, not the server's.
//!
//! Afterwards: no desk saw a 5xx other than 503 with Retry-After, nor any
//! status but 200, 201, 409 and 422; every acknowledged act was applied
//! exactly once and every read showed the desk's own writes (whichever
//! instance served it); ledgers equal positions; every event was delivered
//! to the partner, signed; each process exited 0.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxStatus};
use holdfast_protocol::webhook;
use nix::sys::signal::Signal;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};
use tokio::sync::watch;
use uuid::Uuid;

use crate::support::http::{login, readyz, wait_ready, Answer, HANG_BOUND};
use crate::support::load::{check_invariants, Tally};
use crate::support::process::{database_url, reachable_tempdir, ServerProcess};
use crate::support::MIGRATIONS;

const INSTANCES: usize = 3;
const DESKS: usize = 4;
/// How long the partner takes to answer each delivery.
const PARTNER_DELAY: Duration = Duration::from_millis(20);
/// Desks' acts before each restart, while an instance is down, and after it
/// is back.
const ACTS_PER_PHASE: u64 = 12;
/// Relay pacing for a test measured in seconds (as the chaos suite runs it).
const RELAY_FLAGS: &[&str] = &[
    "--relay-allow-private-targets",
    "--relay-backoff-base-ms",
    "20",
    "--relay-backoff-cap-ms",
    "300",
    "--relay-timeout-ms",
    "2000",
    "--relay-max-attempts",
    "40",
    "--db-pool-size",
    "8",
];

/// The instances as a load balancer sees them.
#[derive(Clone)]
struct Front {
    bases: Arc<Vec<String>>,
    next: Arc<AtomicUsize>,
    /// No idle connections kept: each request connects afresh.
    http: reqwest::Client,
}

/// What a request got: an answer, or none (the connection broke after the
/// request may have gone out).
enum Sent {
    Answer(Answer),
    Lost(String),
}

impl Front {
    fn new(bases: Vec<String>) -> Front {
        Front {
            bases: Arc::new(bases),
            next: Arc::default(),
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .timeout(HANG_BOUND)
                .build()
                .expect("client"),
        }
    }

    /// One request, to the next instance that accepts the connection.
    async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Sent {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % self.bases.len();
            let mut req = self
                .http
                .request(method.clone(), format!("{}{path}", self.bases[i]));
            if let Some(token) = token {
                req = req.bearer_auth(token);
            }
            if let Some(key) = key {
                req = req.header("idempotency-key", key);
            }
            if let Some(body) = body {
                req = req.json(body);
            }
            match req.send().await {
                Ok(resp) => {
                    let status = resp.status();
                    let header = |name: &str| {
                        resp.headers()
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned)
                    };
                    let retry_after = header("retry-after");
                    let replayed = header("idempotent-replayed").as_deref() == Some("true");
                    return match resp.bytes().await {
                        Ok(bytes) => Sent::Answer(Answer {
                            status,
                            retry_after,
                            replayed,
                            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                        }),
                        Err(e) => Sent::Lost(format!("{method} {path}: body cut: {e}")),
                    };
                }
                // Nothing was sent: the balancer tries the next instance.
                Err(e) if e.is_connect() => {
                    assert!(
                        Instant::now() < give_up,
                        "{path}: no instance accepted a connection for a minute"
                    );
                }
                Err(e) if e.is_timeout() => panic!("{method} {path}: hung past {HANG_BOUND:?}"),
                Err(e) => return Sent::Lost(format!("{method} {path}: {e}")),
            }
        }
    }
}

/// What the desks saw, beyond the acts [`Tally`] counts.
#[derive(Default, Debug)]
struct Seen {
    /// Every status answered, by code (push items included).
    statuses: BTreeMap<u16, u64>,
    /// Requests whose answer was lost (retried with the same key).
    lost: Vec<String>,
}

impl Seen {
    fn merge(&mut self, other: Seen) {
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        self.lost.extend(other.lost);
    }
}

/// A desk: signed in as dana@acme.test through the front.
#[derive(Clone)]
struct Desk {
    front: Front,
    token: String,
    customer: String,
    skus: Arc<Vec<String>>,
}

/// A status a desk may see during the upgrade; anything else fails the
/// test. A 503 must carry Retry-After and the API's problem.
fn check_status(path: &str, status: u16, retry_after: Option<&str>, body: &Value) {
    match status {
        200 | 201 | 409 | 422 => {}
        503 => {
            assert_eq!(body["code"], "service_unavailable", "{path}: {body}");
            assert!(retry_after.is_some(), "{path}: 503 without Retry-After");
        }
        _ => panic!("{path}: a desk saw {status} during the rolling upgrade: {body}"),
    }
}

impl Desk {
    /// Sends until there is a real answer, as a desk does: a 503 or a 409
    /// `request_in_flight` is retried with the same key, so is a lost answer.
    async fn until_answered(
        &self,
        tally: &mut Tally,
        seen: &mut Seen,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            let started = Instant::now();
            let sent = self
                .front
                .send(method.clone(), path, Some(&self.token), key, body)
                .await;
            tally.slowest = tally.slowest.max(started.elapsed());
            let retry = match &sent {
                Sent::Lost(why) => {
                    seen.lost.push(why.clone());
                    true
                }
                Sent::Answer(a) => {
                    *seen.statuses.entry(a.status.as_u16()).or_default() += 1;
                    check_status(path, a.status.as_u16(), a.retry_after.as_deref(), &a.body);
                    match (a.status.as_u16(), a.body["code"].as_str()) {
                        (503, _) => {
                            tally.unavailable += 1;
                            true
                        }
                        (409, Some("request_in_flight")) => {
                            tally.in_flight += 1;
                            true
                        }
                        _ => false,
                    }
                }
            };
            match sent {
                Sent::Answer(a) if !retry => {
                    tally.answered += 1;
                    return a;
                }
                _ => {
                    assert!(Instant::now() < give_up, "{path}: no answer for a minute");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// One act: create an order (REST), add a line (batch push), allocate
    /// one (REST), read the order back (its version must be the desk's own
    /// last write, whichever instance answers) and the SKU.
    async fn cycle(&self, tally: &mut Tally, seen: &mut Seen, worker: usize, n: usize) {
        let order = Uuid::now_v7();
        let line = Uuid::now_v7();
        let sku = &self.skus[(worker * 17 + n) % self.skus.len()];
        let create = json!({"id": order, "customer_id": self.customer});
        let a = self
            .until_answered(
                tally,
                seen,
                Method::POST,
                "/v1/orders",
                Some(&format!("{order}-create")),
                Some(&create),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "create: {}", a.body);

        let push = json!({"mutations": [{
            "idempotency_key": format!("{order}-line"),
            "method": "POST",
            "path": format!("/v1/orders/{order}/lines"),
            "body": {"id": line, "sku_id": sku, "qty_ordered": 2, "base_version": 1},
        }]});
        loop {
            let a = self
                .until_answered(
                    tally,
                    seen,
                    Method::POST,
                    "/v1/sync/push",
                    None,
                    Some(&push),
                )
                .await;
            assert_eq!(a.status, StatusCode::OK, "push: {}", a.body);
            let item = &a.body["results"][0];
            let status = item["status"].as_u64().expect("item status") as u16;
            *seen.statuses.entry(status).or_default() += 1;
            let retry_after = item["body"]["retry_after"].as_u64().map(|s| s.to_string());
            check_status("push item", status, retry_after.as_deref(), &item["body"]);
            match (status, item["body"]["code"].as_str()) {
                (201, _) => break,
                (503, _) | (409, Some("request_in_flight")) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => panic!("push item: {item}"),
            }
        }

        let alloc_key = format!("{order}-allocate");
        let a = self
            .until_answered(
                tally,
                seen,
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
            (422, Some("insufficient_ats")) => 2,
            _ => panic!("allocate: {} {}", a.status, a.body),
        };
        tally.orders.push((order, version));
        let a = self
            .until_answered(
                tally,
                seen,
                Method::GET,
                &format!("/v1/orders/{order}"),
                None,
                None,
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "read order: {}", a.body);
        assert_eq!(a.body["version"], version, "read order: {}", a.body);
        let a = self
            .until_answered(
                tally,
                seen,
                Method::GET,
                &format!("/v1/skus/{sku}"),
                None,
                None,
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "read sku: {}", a.body);
    }
}

/// The desks, cycling until told to stop.
struct Load {
    stop: watch::Sender<bool>,
    cycles: watch::Receiver<u64>,
    workers: Vec<tokio::task::JoinHandle<(Tally, Seen)>>,
}

impl Load {
    fn start(desk: &Desk) -> Load {
        let (stop, stopped) = watch::channel(false);
        let (cycles_tx, cycles) = watch::channel(0u64);
        let cycles_tx = Arc::new(cycles_tx);
        let workers = (0..DESKS)
            .map(|w| {
                let (desk, stopped, cycles_tx) = (desk.clone(), stopped.clone(), cycles_tx.clone());
                tokio::spawn(async move {
                    let (mut tally, mut seen) = (Tally::default(), Seen::default());
                    for n in 0.. {
                        if *stopped.borrow() {
                            break;
                        }
                        desk.cycle(&mut tally, &mut seen, w, n).await;
                        tally.cycles += 1;
                        cycles_tx.send_modify(|c| *c += 1);
                    }
                    (tally, seen)
                })
            })
            .collect();
        Load {
            stop,
            cycles,
            workers,
        }
    }

    /// Waits until the desks completed `n` more acts.
    async fn progress(&mut self, n: u64) {
        let target = *self.cycles.borrow() + n;
        tokio::time::timeout(
            Duration::from_secs(60),
            self.cycles.wait_for(|c| *c >= target),
        )
        .await
        .expect("the load made no progress")
        .expect("cycles");
    }

    async fn finish(self) -> (Tally, Seen) {
        self.stop.send_replace(true);
        let (mut tally, mut seen) = (Tally::default(), Seen::default());
        for w in self.workers {
            let (t, s) = w.await.expect("a desk failed");
            tally.merge(t);
            seen.merge(s);
        }
        (tally, seen)
    }
}

/// A partner that verifies every delivery's signature and accepts it.
#[derive(Clone, Default)]
struct Partner {
    secret: Arc<Mutex<Option<Vec<u8>>>>,
    /// webhook-id → times received.
    received: Arc<Mutex<HashMap<String, u32>>>,
    unverified: Arc<Mutex<Vec<String>>>,
}

impl Partner {
    async fn start() -> (Partner, String) {
        let partner = Partner::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind partner");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(partner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (partner, url)
    }

    fn received(&self) -> HashMap<String, u32> {
        self.received.lock().expect("lock").clone()
    }
}

async fn receive(State(p): State<Partner>, headers: HeaderMap, body: Bytes) -> AxStatus {
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let id = h("webhook-id");
    let secret = p.secret.lock().expect("lock").clone().unwrap_or_default();
    let verified = webhook::verify(
        &[&secret],
        &id,
        &h("webhook-timestamp"),
        &h("webhook-signature"),
        &body,
        chrono::Utc::now().timestamp(),
        300,
    )
    .is_ok();
    if !verified {
        p.unverified.lock().expect("lock").push(id);
        return AxStatus::UNAUTHORIZED;
    }
    // A partner that takes a moment: a stopping instance's relay has
    // deliveries in flight to finish.
    tokio::time::sleep(PARTNER_DELAY).await;
    *p.received.lock().expect("lock").entry(id).or_default() += 1;
    AxStatus::OK
}

async fn signed_in_desk(front: &Front) -> Desk {
    let token = login(&front.http, &front.bases[0], "dana@acme.test").await;
    let get = |path: &str| {
        let (front, token, path) = (front.clone(), token.clone(), path.to_owned());
        async move {
            match front
                .send(Method::GET, &path, Some(&token), None, None)
                .await
            {
                Sent::Answer(a) if a.status == StatusCode::OK => a.body,
                Sent::Answer(a) => panic!("{path}: {} {}", a.status, a.body),
                Sent::Lost(why) => panic!("{why}"),
            }
        }
    };
    let customers = get("/v1/customers").await;
    let customer = customers["customers"]
        .as_array()
        .expect("customers")
        .iter()
        .find(|c| c["name"] == "Tokyo Distributor")
        .expect("Tokyo Distributor")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let skus = get("/v1/skus?limit=100").await;
    let skus: Vec<String> = skus["skus"]
        .as_array()
        .expect("skus")
        .iter()
        .map(|s| s["id"].as_str().expect("sku id").to_owned())
        .collect();
    Desk {
        front: front.clone(),
        token,
        customer,
        skus: Arc::new(skus),
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn three_instances_restarted_one_at_a_time_under_load_lose_and_double_nothing(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let started = Instant::now();
    let url = database_url(connect.get_database().expect("test database"));
    let tmp = reachable_tempdir();
    let dir = |i: usize, generation: u32| {
        let dir = tmp.path().join(format!("instance-{i}-{generation}"));
        std::fs::create_dir_all(&dir).expect("instance dir");
        dir
    };
    // One after the other: the first migrates and seeds, the others find
    // both done.
    let mut instances: Vec<ServerProcess> = (0..INSTANCES)
        .map(|i| ServerProcess::start(Some(&url), &dir(i, 0), RELAY_FLAGS))
        .collect();
    let front = Front::new(instances.iter().map(|s| s.base.clone()).collect());

    let (partner, partner_url) = Partner::start().await;
    let ops = login(&front.http, &front.bases[0], "ops@acme.test").await;
    let registered = match front
        .send(
            Method::POST,
            "/v1/admin/partners",
            Some(&ops),
            None,
            Some(&json!({"name": "rolling partner", "url": partner_url, "event_types": ["*"]})),
        )
        .await
    {
        Sent::Answer(a) if a.status == StatusCode::CREATED => a.body,
        Sent::Answer(a) => panic!("register partner: {} {}", a.status, a.body),
        Sent::Lost(why) => panic!("{why}"),
    };
    *partner.secret.lock().expect("lock") = Some(
        webhook::parse_secret(registered["secret"].as_str().expect("secret")).expect("secret"),
    );
    let partner_id: Uuid = registered["id"]
        .as_str()
        .expect("id")
        .parse()
        .expect("uuid");

    let desk = signed_in_desk(&front).await;
    let mut load = Load::start(&desk);
    load.progress(ACTS_PER_PHASE).await;

    for (i, instance) in instances.iter_mut().enumerate() {
        let addr = instance.addr;
        instance.signal(Signal::SIGTERM);
        let status = instance.exited(Duration::from_secs(60)).await;
        assert!(
            status.success(),
            "instance {i}: graceful stop exits 0, got {status}"
        );
        // The other two carry the desks meanwhile.
        load.progress(ACTS_PER_PHASE).await;
        // Off the runtime's thread: the desks keep working while it starts
        // (migrations and the demo seed find nothing to do).
        let (url, data) = (url.clone(), dir(i, 1));
        *instance = tokio::task::spawn_blocking(move || {
            ServerProcess::start_at(Some(&url), &data, addr, RELAY_FLAGS)
        })
        .await
        .expect("start the instance again");
        wait_ready(
            &front.http,
            &instance.base,
            StatusCode::OK,
            Duration::from_secs(30),
        )
        .await;
        load.progress(ACTS_PER_PHASE).await;
    }
    let (tally, seen) = load.finish().await;

    // Every event the partner is subscribed to (all of them since it was
    // registered) delivered to it, signed.
    let mut db = PgConnection::connect_with(&connect).await.expect("connect");
    let deadline = Instant::now() + Duration::from_secs(60);
    let events: Vec<i64> = loop {
        let (events, undelivered): (Vec<i64>, i64) = sqlx::query_as(
            "select coalesce(array_agg(o.id order by o.id), '{}'),
                    count(*) filter (where d.state is distinct from 'delivered')
               from outbox o
               join partners p on p.tenant_id = o.tenant_id and p.id = $1
               left join deliveries d on d.tenant_id = o.tenant_id and d.outbox_id = o.id
                                     and d.partner_id = p.id
              where o.created_at >= p.created_at",
        )
        .bind(partner_id)
        .fetch_one(&mut db)
        .await
        .expect("deliveries");
        let received = partner.received();
        if undelivered == 0
            && events
                .iter()
                .all(|id| received.contains_key(&format!("evt_{id}")))
        {
            break events;
        }
        assert!(
            Instant::now() < deadline,
            "{undelivered} of {} events not delivered after the upgrade",
            events.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        partner.unverified.lock().expect("lock").is_empty(),
        "every delivery carries a valid signature"
    );
    let received = partner.received();
    let ours: HashSet<String> = events.iter().map(|id| format!("evt_{id}")).collect();
    assert!(
        received.keys().all(|id| ours.contains(id)),
        "the partner received only committed events"
    );
    let redelivered = received.values().filter(|n| **n > 1).count();

    check_invariants(&mut db, &tally).await;
    db.close().await.expect("close");

    // The only non-2xx answers: 409, 422, and 503 with Retry-After (each
    // checked as it came).
    assert!(
        seen.statuses
            .keys()
            .all(|s| matches!(s, 200 | 201 | 409 | 422 | 503)),
        "{:?}",
        seen.statuses
    );
    for (i, instance) in instances.iter_mut().enumerate() {
        assert_eq!(readyz(&front.http, &instance.base).await, StatusCode::OK);
        instance.signal(Signal::SIGTERM);
        let status = instance.exited(Duration::from_secs(60)).await;
        assert!(status.success(), "instance {i}: exits 0, got {status}");
    }
    eprintln!(
        "rolling upgrade of {INSTANCES} instances in {:?}: {} acts, statuses {:?}, \
         {} lost answers retried ({:?}), {} × 503, {} × request_in_flight, slowest {:?}; \
         {} events delivered ({} more than once)",
        started.elapsed(),
        tally.cycles,
        seen.statuses,
        seen.lost.len(),
        seen.lost.iter().take(3).collect::<Vec<_>>(),
        tally.unavailable,
        tally.in_flight,
        tally.slowest,
        events.len(),
        redelivered
    );
}
