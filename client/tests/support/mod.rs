//! Test support: the real server in-process over a fresh database (stoppable
//! and restartable on the same port), desks (engines) logged in to it, a
//! fault-injecting TCP proxy, and the invariant checks run after each storm.
#![allow(dead_code)]

pub mod proxy;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use holdfast_client::act::Act;
use holdfast_client::token::{MemoryTokens, TokenStore};
use holdfast_client::{Engine, SyncConfig};
use holdfast_protocol::model::{Order, Sku};
use holdfast_server::{demo, AppState};
use sqlx::PgPool;
use tokio::net::TcpListener;

// Without DATABASE_URL the binary says how to run it, once, and exits.
holdfast_server::require_database_url!();
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use uuid::Uuid;

/// How long any wait in these tests may take before it fails the test. Not a
/// timing assertion: a generous bound so a hang is a failure, not a stall.
pub const DEADLINE: Duration = Duration::from_secs(90);

pub struct Server {
    pub addr: SocketAddr,
    pub db: PgPool,
    /// Partners may be registered at loopback URLs (in-process receivers).
    allow_private_targets: bool,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    /// Seeds the demo fixture and serves on a free loopback port.
    pub async fn start(db: PgPool) -> Server {
        Self::start_with(db, false).await
    }

    /// [`Server::start`], letting operators register partners at loopback
    /// URLs, as a test's in-process partner is.
    pub async fn start_for_partners(db: PgPool) -> Server {
        Self::start_with(db, true).await
    }

    async fn start_with(db: PgPool, allow_private_targets: bool) -> Server {
        demo::seed(&db).await.expect("seed demo data");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        Self::serve(db, listener, allow_private_targets)
    }

    fn serve(db: PgPool, listener: TcpListener, allow_private_targets: bool) -> Server {
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let state = AppState::new(db.clone()).allowing_private_targets(allow_private_targets);
        let task = tokio::spawn(async move {
            holdfast_server::run(state, listener, async {
                let _ = stopped.await;
            })
            .await
            .expect("server run");
        });
        Server {
            addr,
            db,
            allow_private_targets,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, finishes in-flight requests, closes every connection.
    /// Afterwards the port refuses connections.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(DEADLINE, task)
                .await
                .expect("server stops")
                .expect("server task");
        }
    }

    /// Serves again on the same port (same database).
    pub async fn restart(&mut self) {
        self.stop().await;
        let listener = TcpListener::bind(self.addr)
            .await
            .expect("rebind the same port");
        let mut again = Self::serve(self.db.clone(), listener, self.allow_private_targets);
        self.stop = again.stop.take();
        self.task = again.task.take();
    }

    /// Serves `db` instead, on the same port: the server restored from a
    /// backup where the old one was (desks keep their URL).
    pub async fn replace_database(&mut self, db: PgPool) {
        self.stop().await;
        let listener = TcpListener::bind(self.addr)
            .await
            .expect("rebind the same port");
        let mut again = Self::serve(db.clone(), listener, self.allow_private_targets);
        self.db = db;
        self.stop = again.stop.take();
        self.task = again.task.take();
    }

    /// A bearer token for direct reads (not through any desk).
    pub async fn token(&self, email: &str) -> String {
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/sessions", self.url()))
            .json(&serde_json::json!({
                "tenant": "acme", "email": email, "password": demo::DEMO_PASSWORD,
                "device_name": "test reader"
            }))
            .send()
            .await
            .expect("login");
        assert_eq!(resp.status(), 201);
        let body: serde_json::Value = resp.json().await.expect("json");
        body["token"].as_str().expect("token").to_owned()
    }

    /// The server's current order, over HTTP.
    pub async fn order(&self, token: &str, id: Uuid) -> Order {
        let resp = reqwest::Client::new()
            .get(format!("{}/v1/orders/{id}", self.url()))
            .bearer_auth(token)
            .send()
            .await
            .expect("get order");
        assert_eq!(resp.status(), 200, "order {id}");
        resp.json().await.expect("order json")
    }

    pub async fn sku(&self, token: &str, id: Uuid) -> Sku {
        let resp = reqwest::Client::new()
            .get(format!("{}/v1/skus/{id}", self.url()))
            .bearer_auth(token)
            .send()
            .await
            .expect("get sku");
        assert_eq!(resp.status(), 200);
        resp.json().await.expect("sku json")
    }
}

/// The tenant's `/v1/sync/stream`, read raw: each `changed` event says a
/// commit has become pullable. Open it before the commit you wait for.
pub struct Pokes {
    resp: reqwest::Response,
    parser: holdfast_client::api::SseParser,
    ready: usize,
}

impl Server {
    pub async fn pokes(&self, token: &str) -> Pokes {
        let resp = reqwest::Client::new()
            .get(format!("{}/v1/sync/stream", self.url()))
            .bearer_auth(token)
            .send()
            .await
            .expect("open stream");
        assert_eq!(resp.status(), 200);
        Pokes {
            resp,
            parser: Default::default(),
            ready: 0,
        }
    }
}

impl Pokes {
    /// The next poke (one already received counts).
    pub async fn next(&mut self) {
        while self.ready == 0 {
            let chunk = self
                .resp
                .chunk()
                .await
                .expect("read stream")
                .expect("stream stays open");
            self.ready += self
                .parser
                .feed(&chunk)
                .iter()
                .filter(|e| e.event == "changed")
                .count();
        }
        self.ready -= 1;
    }
}

/// Pulls until `done` holds, waiting for a poke between pulls. The feed
/// serves a commit only once every older transaction in the cluster ended,
/// so a colleague's change can become pullable a moment after it commits.
pub async fn pull_until(engine: &Engine, pokes: &mut Pokes, done: impl Fn(&Engine) -> bool) {
    tokio::time::timeout(DEADLINE, async {
        loop {
            engine.pull().await.expect("pull");
            if done(engine) {
                return;
            }
            pokes.next().await;
        }
    })
    .await
    .expect("the change became pullable before the deadline");
}

/// The mirrored (server) version of `order` on this desk.
pub fn mirrored_version(engine: &Engine, order: Uuid) -> i64 {
    engine
        .server_order(order)
        .expect("mirror")
        .map(|o| o.version)
        .unwrap_or(0)
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Short backoffs so storms settle quickly; everything else as shipped.
pub fn fast_config() -> SyncConfig {
    SyncConfig {
        backoff_base_ms: 5,
        backoff_cap_ms: 100,
        local_poll: Duration::from_millis(200),
        ..SyncConfig::default()
    }
}

pub fn open(dir: &Path, name: &str, config: SyncConfig) -> Engine {
    open_with(dir, name, config, Arc::new(MemoryTokens::default()))
}

pub fn open_with(
    dir: &Path,
    name: &str,
    config: SyncConfig,
    tokens: Arc<dyn TokenStore>,
) -> Engine {
    Engine::open(&dir.join(format!("{name}.db")), tokens, config).expect("open store")
}

/// Logs `email` in on `engine` and pulls the initial state.
pub async fn login(engine: &Engine, url: &str, email: &str) {
    engine
        .login(url, "acme", email, demo::DEMO_PASSWORD, "test desk", false)
        .await
        .expect("login");
    engine.sync_once().await.expect("initial sync");
}

pub fn austin() -> Uuid {
    demo::customer_id("acme", "Austin Boutique")
}

pub fn tokyo() -> Uuid {
    demo::customer_id("acme", "Tokyo Distributor")
}

pub fn kestrel_m() -> Uuid {
    demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M")
}

/// SKUs with at least `min_ats` available, from the desk's mirror.
pub fn roomy_skus(engine: &Engine, min_ats: i64, n: usize) -> Vec<Uuid> {
    let skus: Vec<Uuid> = engine
        .skus("", 1000)
        .expect("skus")
        .into_iter()
        .filter(|s| s.sku.ats >= min_ats)
        .map(|s| s.sku.id)
        .take(n)
        .collect();
    assert_eq!(skus.len(), n, "the demo has {n} SKUs with ATS ≥ {min_ats}");
    skus
}

/// Compares documents the way a screen would: everything but the
/// timestamps and author the server stamps.
pub fn same_content(a: &Order, b: &Order) -> bool {
    a.id == b.id
        && a.customer_id == b.customer_id
        && a.customer_po == b.customer_po
        && a.ship_window_start == b.ship_window_start
        && a.ship_window_end == b.ship_window_end
        && a.notes == b.notes
        && a.status == b.status
        && a.version == b.version
        && a.lines == b.lines
}

/// The outbox event an act announces (API.md's event types).
pub fn event_of(act: &Act) -> &'static str {
    match act {
        Act::CreateOrder { .. } => "order.created",
        Act::PatchOrder { .. }
        | Act::AddLine { .. }
        | Act::ChangeLine { .. }
        | Act::RemoveLine { .. } => "order.updated",
        Act::Allocate { .. } => "order.line_allocated",
        Act::Release { .. } => "order.line_released",
        Act::Confirm { .. } => "order.confirmed",
        Act::Cancel { .. } => "order.cancelled",
    }
}

/// The acts a test made, per order, in the order made, with their keys.
#[derive(Debug, Default)]
pub struct Ledger {
    pub acts: HashMap<Uuid, Vec<(String, Act)>>,
    pub order_ids: Vec<Uuid>,
}

impl Ledger {
    /// Adds another ledger's acts (on other orders).
    pub fn merge(&mut self, other: Ledger) {
        for order in other.order_ids {
            if !self.order_ids.contains(&order) {
                self.order_ids.push(order);
            }
        }
        for (order, acts) in other.acts {
            self.acts.entry(order).or_default().extend(acts);
        }
    }

    /// Every key, in no particular order.
    pub fn keys(&self) -> Vec<&str> {
        self.acts
            .values()
            .flatten()
            .map(|(key, _)| key.as_str())
            .collect()
    }

    /// Records the most recent pending row of `order` (the act just made).
    pub fn record(&mut self, engine: &Engine, order: Uuid) {
        let row = engine
            .pending_rows()
            .expect("pending")
            .into_iter()
            .rev()
            .find(|r| r.order_id == order)
            .expect("the act is pending");
        if !self.order_ids.contains(&order) {
            self.order_ids.push(order);
        }
        self.acts
            .entry(order)
            .or_default()
            .push((row.key.clone(), row.act.clone()));
    }

    pub fn total(&self) -> usize {
        self.acts.values().map(Vec::len).sum()
    }

    /// Every act applied exactly once and in the order made:
    /// - each order's version is 1 + its acts (each success adds exactly 1);
    /// - its outbox events, by sequence, are its acts' events in order;
    /// - every allocation and release has exactly one ledger row;
    /// - ledger sums equal positions for every SKU (allocated, on_hand and
    ///   on_order; no oversell hidden).
    pub async fn check_exactly_once(&self, server: &Server, token: &str) {
        for order in &self.order_ids {
            let acts = &self.acts[order];
            let doc = server.order(token, *order).await;
            assert_eq!(
                doc.version,
                acts.len() as i64,
                "order {order}: version = number of acts"
            );
            let events: Vec<(String, i64)> = sqlx::query_as(
                "select event_type, (payload -> 'data' ->> 'version')::bigint
                   from outbox where aggregate_kind = 'order' and aggregate_id = $1
                  order by sequence",
            )
            .bind(order)
            .fetch_all(&server.db)
            .await
            .expect("outbox");
            let want: Vec<&str> = acts.iter().map(|(_, a)| event_of(a)).collect();
            let got: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
            assert_eq!(got, want, "order {order}: events in the order of the acts");
            for (i, (_, version)) in events.iter().enumerate() {
                assert_eq!(*version, i as i64 + 1, "order {order}: event {i} version");
            }
            for (key, act) in acts {
                if matches!(act, Act::Allocate { .. } | Act::Release { .. }) {
                    let n: i64 = sqlx::query_scalar(
                        "select count(*) from allocation_ledger where idempotency_key = $1",
                    )
                    .bind(key)
                    .fetch_one(&server.db)
                    .await
                    .expect("ledger");
                    assert_eq!(n, 1, "allocation {key} in the ledger exactly once");
                }
            }
        }
        let drift = holdfast_server::db::audit::ledger_mismatches(&server.db, None)
            .await
            .expect("positions");
        let shown: Vec<String> = drift.iter().map(ToString::to_string).collect();
        assert!(
            drift.is_empty(),
            "ledger sums equal positions:\n{}",
            shown.join("\n")
        );
    }

    /// After everything synced, each order as the desk shows it is the
    /// server's document.
    pub async fn check_local_equals_server(&self, engine: &Engine, server: &Server, token: &str) {
        for order in &self.order_ids {
            let server_doc = server.order(token, *order).await;
            let view = engine.order(*order).expect("view").expect("order is local");
            assert!(view.pending.is_empty(), "order {order}: nothing pending");
            assert_eq!(view.order, server_doc, "order {order}: local = server");
        }
    }
}

/// Syncs `engine` until `done` (a commit can reach the feed a moment after
/// its answer: the pull's fence waits for older transactions), for
/// [`DEADLINE`] at the most.
pub async fn sync_until(engine: &Engine, done: impl Fn(&Engine) -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        engine.sync_once().await.expect("sync");
        if done(engine) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "never synced");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// Runs `sync_once` until nothing is pending; returns (failed passes, acts
/// answered by replay). Each pass is bounded by the HTTP timeouts, and the
/// number of passes by `max`.
pub async fn sync_until_settled(engine: &Engine, max: usize) -> (usize, usize) {
    let mut events = engine.subscribe();
    let mut failures = 0;
    let mut replayed = 0;
    let mut count =
        |events: &mut tokio::sync::broadcast::Receiver<holdfast_client::EngineEvent>| {
            while let Ok(e) = events.try_recv() {
                if let holdfast_client::EngineEvent::Pushed { replayed: r, .. } = e {
                    replayed += r;
                }
            }
        };
    for _ in 0..max {
        let result = engine.sync_once().await;
        count(&mut events);
        match result {
            Ok(_) if engine.status().expect("status").pending == 0 => return (failures, replayed),
            Ok(_) => {}
            Err(e) if e.is_offline() => failures += 1,
            Err(e) => panic!("sync failed: {e}"),
        }
    }
    panic!(
        "still {} pending after {max} passes",
        engine.status().expect("status").pending
    );
}

/// What a generated order looks like so far (to keep its acts valid).
struct Draft {
    id: Uuid,
    lines: Vec<(Uuid, Uuid, i64, i64)>, // line, sku, ordered, allocated
}

/// Makes `total` random but valid acts over `orders` new orders for Tokyo
/// Distributor (no credit limit), on `skus` (never allocating past what the
/// mirror says is available), interleaving the orders. Every act is one row
/// in the ledger. The last act of every third order confirms it.
pub fn random_acts(
    engine: &Engine,
    rng: &mut impl rand::Rng,
    orders: usize,
    total: usize,
    skus: &[Uuid],
) -> Ledger {
    let mut ledger = Ledger::default();
    let mut room: HashMap<Uuid, i64> = skus
        .iter()
        .map(|s| (*s, engine.sku(*s).expect("sku").expect("mirrored").sku.ats))
        .collect();
    let mut drafts = Vec::new();
    for i in 0..orders {
        let id = engine
            .create_order(holdfast_client::NewOrder {
                customer_id: tokyo(),
                customer_po: Some(format!("PO-{i}")),
                ..Default::default()
            })
            .expect("create");
        ledger.record(engine, id);
        drafts.push(Draft {
            id,
            lines: Vec::new(),
        });
    }
    let confirms = orders / 3;
    while ledger.total() + confirms < total {
        let d = &mut drafts[rng.random_range(0..orders)];
        let pick = rng.random_range(0..10);
        let order = d.id;
        match pick {
            0..=1 if d.lines.len() < 4 => {
                let sku = skus[rng.random_range(0..skus.len())];
                let qty = rng.random_range(3..9);
                let line = engine.add_line(order, sku, qty).expect("add line");
                d.lines.push((line, sku, qty, 0));
            }
            2..=4 if !d.lines.is_empty() => {
                let i = rng.random_range(0..d.lines.len());
                let (line, sku, ordered, allocated) = d.lines[i];
                let free = room[&sku];
                let qty = (ordered - allocated).min(2).min(free);
                if qty < 1 {
                    continue;
                }
                engine.allocate(order, line, qty).expect("allocate");
                d.lines[i].3 += qty;
                *room.entry(sku).or_default() -= qty;
            }
            5 if d.lines.iter().any(|l| l.3 > 0) => {
                let i = d
                    .lines
                    .iter()
                    .position(|l| l.3 > 0)
                    .expect("allocated line");
                let (line, sku, ..) = d.lines[i];
                engine.release(order, line, 1).expect("release");
                d.lines[i].3 -= 1;
                *room.entry(sku).or_default() += 1;
            }
            6 if !d.lines.is_empty() => {
                let i = rng.random_range(0..d.lines.len());
                let (line, _, _, allocated) = d.lines[i];
                let qty = (allocated + rng.random_range(0..4)).max(1);
                engine.change_line(order, line, qty).expect("set qty");
                d.lines[i].2 = qty;
            }
            _ => {
                let n: u32 = rng.random();
                let set = match n % 3 {
                    0 => holdfast_protocol::model::OrderHeaderSet {
                        notes: Some(Some(format!("note {n}"))),
                        ..Default::default()
                    },
                    1 => holdfast_protocol::model::OrderHeaderSet {
                        customer_po: Some(Some(format!("PO-{n}"))),
                        ..Default::default()
                    },
                    _ => holdfast_protocol::model::OrderHeaderSet {
                        ship_window_start: Some(chrono::NaiveDate::from_ymd_opt(
                            2026,
                            5,
                            1 + n % 20,
                        )),
                        ..Default::default()
                    },
                };
                engine.edit_order(order, set).expect("edit");
            }
        }
        ledger.record(engine, order);
    }
    for d in drafts.iter().step_by(3).take(confirms) {
        engine.confirm(d.id).expect("confirm");
        ledger.record(engine, d.id);
    }
    ledger
}

/// An operator over the real admin API (API.md v1.1), each write under a
/// fresh `Idempotency-Key`.
pub struct Admin {
    url: String,
    token: String,
    http: reqwest::Client,
}

impl Admin {
    /// Signs in as the demo operator.
    pub async fn new(server: &Server) -> Admin {
        Admin {
            url: server.url(),
            token: server.token("ops@acme.test").await,
            http: reqwest::Client::new(),
        }
    }

    /// `method path` with a JSON body; asserts a 2xx and returns the body.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: serde_json::Value,
    ) -> serde_json::Value {
        let resp = self
            .http
            .request(method.clone(), format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .header("Idempotency-Key", Uuid::now_v7().to_string())
            .json(&body)
            .send()
            .await
            .expect("admin request");
        let status = resp.status();
        let text = resp.text().await.expect("admin answer");
        assert!(status.is_success(), "{method} {path}: {status} {text}");
        if text.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&text).expect("admin json")
        }
    }

    /// Creates an account manager; their id and one-time password.
    pub async fn create_user(&self, email: &str, name: &str) -> (Uuid, String) {
        let body = self
            .send(
                reqwest::Method::POST,
                "/v1/admin/users",
                serde_json::json!({"email": email, "display_name": name, "role": "account_manager"}),
            )
            .await;
        let id = body["user"]["id"]
            .as_str()
            .expect("user id")
            .parse()
            .expect("uuid");
        (id, body["password"].as_str().expect("password").to_owned())
    }

    pub async fn set_user_active(&self, id: Uuid, active: bool) {
        self.send(
            reqwest::Method::PATCH,
            &format!("/v1/admin/users/{id}"),
            serde_json::json!({ "active": active }),
        )
        .await;
    }

    /// Resets the user's password (their tokens are revoked); the new one.
    pub async fn reset_password(&self, id: Uuid) -> String {
        let body = self
            .send(
                reqwest::Method::POST,
                &format!("/v1/admin/users/{id}/reset-password"),
                serde_json::json!({}),
            )
            .await;
        body["password"].as_str().expect("new password").to_owned()
    }

    /// A new price list with these entries (SKU, price in cents).
    pub async fn price_list(&self, prices: &[(Uuid, i64)]) -> Uuid {
        let id = Uuid::now_v7();
        self.send(
            reqwest::Method::POST,
            "/v1/admin/price-lists",
            serde_json::json!({"id": id, "name": format!("Test list {id}")}),
        )
        .await;
        self.set_prices(id, prices).await;
        id
    }

    /// Replaces the list's entries.
    pub async fn set_prices(&self, list: Uuid, prices: &[(Uuid, i64)]) {
        let prices: Vec<serde_json::Value> = prices
            .iter()
            .map(|(sku, price)| serde_json::json!({"sku_id": sku, "price": price}))
            .collect();
        self.send(
            reqwest::Method::PUT,
            &format!("/v1/admin/price-lists/{list}/prices"),
            serde_json::json!({ "prices": prices }),
        )
        .await;
    }

    /// A new customer (no credit limit) on `price_list`.
    pub async fn customer(&self, price_list: Option<Uuid>) -> Uuid {
        let id = Uuid::now_v7();
        self.send(
            reqwest::Method::POST,
            "/v1/admin/customers",
            serde_json::json!({"id": id, "name": format!("Test customer {id}"),
                               "price_list_id": price_list}),
        )
        .await;
        id
    }

    pub async fn patch_customer(&self, id: Uuid, patch: serde_json::Value) {
        self.send(
            reqwest::Method::PATCH,
            &format!("/v1/admin/customers/{id}"),
            patch,
        )
        .await;
    }

    pub async fn patch_sku(&self, id: Uuid, patch: serde_json::Value) {
        self.send(
            reqwest::Method::PATCH,
            &format!("/v1/admin/skus/{id}"),
            patch,
        )
        .await;
    }
}
