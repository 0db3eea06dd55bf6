//! `GET /v1/orders/dead-lettered` over real HTTP and real Postgres: the
//! relay dead-letters what an in-process partner refuses, the route lists the
//! orders behind those deliveries (order events only, counted per order,
//! since the oldest), an operator's requeue takes an order off the list and a
//! successful delivery keeps it off; any role of the tenant reads it, another
//! tenant sees none of it; the static segment wins over `/v1/orders/{id}`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxStatus};
use axum::routing::post;
use chrono::{DateTime, Utc};
use holdfast_protocol::model::DeadLetteredOrders;
use holdfast_protocol::webhook;
use holdfast_server::relay::{self, Settings};
use holdfast_server::{demo, AppState};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{assert_problem, kestrel_m, key, TestServer, MIGRATIONS};

const PATH: &str = "/v1/orders/dead-lettered";

/// A partner that verifies every signature and refuses (500) the events of
/// the orders in `refuse`, and every event that is not about an order, so
/// their deliveries use up their attempts; it accepts the rest.
#[derive(Clone, Default)]
struct Partner {
    secret: Arc<Mutex<Vec<u8>>>,
    refuse: Arc<Mutex<HashSet<String>>>,
    accepted: Arc<Mutex<Vec<Value>>>,
}

impl Partner {
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let app = axum::Router::new()
            .route("/hook", post(receive))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.expect("partner") });
        url
    }

    fn refuse(&self, order: Uuid, refused: bool) {
        let mut set = self.refuse.lock().expect("lock");
        if refused {
            set.insert(order.to_string());
        } else {
            set.remove(&order.to_string());
        }
    }

    /// Events about `order` this partner accepted.
    fn accepted_for(&self, order: Uuid) -> usize {
        self.accepted
            .lock()
            .expect("lock")
            .iter()
            .filter(|e| e["data"]["order_id"] == order.to_string())
            .count()
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
    let secret = p.secret.lock().expect("lock").clone();
    let verified = webhook::verify(
        &[&secret],
        &h("webhook-id"),
        &h("webhook-timestamp"),
        &h("webhook-signature"),
        &body,
        Utc::now().timestamp(),
        300,
    )
    .is_ok();
    if !verified {
        return AxStatus::UNAUTHORIZED;
    }
    let event: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let refused = match event["data"]["order_id"].as_str() {
        Some(order) => p.refuse.lock().expect("lock").contains(order),
        None => true,
    };
    if refused {
        return AxStatus::INTERNAL_SERVER_ERROR;
    }
    p.accepted.lock().expect("lock").push(event);
    AxStatus::NO_CONTENT
}

/// Two attempts, milliseconds apart: a refused event is dead-lettered
/// within moments.
fn fast_relay() -> Settings {
    Settings {
        max_attempts: 2,
        backoff_base_ms: 5,
        backoff_cap_ms: 20,
        timeout: Duration::from_millis(2000),
        allow_private_targets: true,
        max_in_flight: 16,
        per_partner_in_flight: 4,
        poll: Duration::from_millis(50),
    }
}

async fn register(s: &TestServer, ops: &str, partner: &Partner, url: &str) {
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/admin/partners",
            Some(ops),
            Some(json!({"name": "EDI gateway", "url": url, "event_types": ["*"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    *partner.secret.lock().expect("lock") =
        webhook::parse_secret(body["secret"].as_str().expect("secret")).expect("secret");
}

/// The route's answer, checked against the protocol type the desk decodes
/// it with, as `(order, dead_lettered, oldest_at)`.
async fn listed(s: &TestServer, token: &str) -> Vec<(Uuid, i64, DateTime<Utc>)> {
    let (status, body) = s.get(PATH, token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let typed: DeadLetteredOrders = serde_json::from_value(body.clone()).expect("the wire type");
    for o in body["orders"].as_array().expect("orders") {
        let mut keys: Vec<&str> = o
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["dead_lettered", "oldest_at", "order_id"], "{o}");
    }
    typed
        .orders
        .into_iter()
        .map(|o| (o.order_id, o.dead_lettered, o.oldest_at))
        .collect()
}

/// Waits (with a deadline, never a fixed sleep) until `done` holds of a
/// count the connecting role reads across tenants.
async fn wait_for(db: &PgPool, what: &str, sql: &str, done: impl Fn(i64) -> bool) {
    let start = Instant::now();
    loop {
        let n: i64 = sqlx::query_scalar(sql).fetch_one(db).await.expect(what);
        if done(n) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what} (at {n})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The relay has nothing left to do: every event fanned out, no delivery
/// pending.
async fn wait_settled(db: &PgPool) {
    wait_for(
        db,
        "the relay to settle",
        "select (select count(*) from outbox where fanned_out_at is null)
              + (select count(*) from deliveries where state = 'pending')
              + (select count(*) from relay_sending)",
        |n| n == 0,
    )
    .await;
}

/// The dead deliveries of `order`'s events, oldest dead letter first.
async fn dead_of(db: &PgPool, order: Uuid) -> Vec<(i64, DateTime<Utc>)> {
    sqlx::query_as(
        "select d.id, d.dead_lettered_at from deliveries d
           join outbox o on o.tenant_id = d.tenant_id and o.id = d.outbox_id
          where o.aggregate_id = $1 and d.state = 'dead'
          order by d.dead_lettered_at, d.id",
    )
    .bind(order)
    .fetch_all(db)
    .await
    .expect("dead deliveries")
}

async fn requeue(s: &TestServer, ops: &str, delivery: i64) {
    let (status, body) = s
        .call(
            Method::POST,
            &format!("/v1/admin/deliveries/{delivery}/requeue"),
            Some(ops),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn create_order(s: &TestServer, token: &str, order: Uuid) {
    let raw = s
        .post(
            token,
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": demo::customer_id("acme", "Tokyo Distributor")}),
        )
        .await;
    assert_eq!(raw.status, StatusCode::CREATED, "{}", raw.json());
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn orders_with_a_dead_letter_are_listed_until_requeued_and_delivered(db: PgPool) {
    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let dana = s.login("acme", "dana@acme.test").await;
    let gina = s.login("globex", "gina@globex.test").await;
    let partner = Partner::default();
    let url = partner.start().await;
    register(&s, &ops, &partner, &url).await;
    assert_eq!(listed(&s, &dana).await, vec![], "nothing dead yet");

    // A: three order events refused (created, a line, its allocation) and
    // the allocation's sku.ats_changed, also refused but about a SKU.
    // B: one refused. C: accepted.
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    for refused in [a, b] {
        partner.refuse(refused, true);
    }
    let relay = relay::spawn(db.clone(), fast_relay()).expect("relay");
    create_order(&s, &dana, a).await;
    let line = Uuid::now_v7();
    let raw = s
        .post(
            &dana,
            &format!("/v1/orders/{a}/lines"),
            &key(),
            json!({"id": line, "sku_id": kestrel_m(), "qty_ordered": 2, "base_version": 1}),
        )
        .await;
    assert_eq!(raw.status, StatusCode::CREATED, "{}", raw.json());
    let raw = s
        .post(
            &dana,
            &format!("/v1/orders/{a}/lines/{line}/allocate"),
            &key(),
            json!({"qty": 1}),
        )
        .await;
    assert_eq!(raw.status, StatusCode::OK, "{}", raw.json());
    create_order(&s, &dana, b).await;
    create_order(&s, &dana, c).await;
    wait_settled(&db).await;
    assert_eq!(partner.accepted_for(c), 1, "C's event was delivered");
    let sku_dead: i64 = sqlx::query_scalar(
        "select count(*) from deliveries d join outbox o on o.tenant_id = d.tenant_id and o.id = d.outbox_id
          where d.state = 'dead' and o.aggregate_kind = 'sku'",
    )
    .fetch_one(&db)
    .await
    .expect("count");
    assert_eq!(
        sku_dead, 1,
        "the SKU's event is dead too, and is no order's"
    );

    // A and B, counted per order, since their oldest dead letter, in that
    // order; C (delivered) and the SKU's dead letter are not listed.
    let (dead_a, dead_b) = (dead_of(&db, a).await, dead_of(&db, b).await);
    assert_eq!((dead_a.len(), dead_b.len()), (3, 1));
    let mut want = vec![(a, 3, dead_a[0].1), (b, 1, dead_b[0].1)];
    want.sort_by_key(|(order, _, at)| (*at, *order));
    let got = listed(&s, &dana).await;
    assert_eq!(got, want, "account manager");
    assert_eq!(listed(&s, &ops).await, want, "operator: any role reads it");
    assert_eq!(
        listed(&s, &gina).await,
        vec![],
        "another tenant sees none of it"
    );

    // The operator requeues A's oldest dead letter while the partner still
    // refuses A: it is pending again, so it no longer counts, and A is
    // listed since its next oldest dead letter.
    relay.shutdown().await;
    requeue(&s, &ops, dead_a[0].0).await;
    let mut want = vec![(a, 2, dead_a[1].1), (b, 1, dead_b[0].1)];
    want.sort_by_key(|(order, _, at)| (*at, *order));
    assert_eq!(
        listed(&s, &dana).await,
        want,
        "a requeued delivery no longer counts"
    );

    // The partner fixes its endpoint for A; the operator requeues the rest
    // of A's; A is off the list at once, and stays off once delivered.
    partner.refuse(a, false);
    for (delivery, _) in &dead_a[1..] {
        requeue(&s, &ops, *delivery).await;
    }
    let only_b = vec![(b, 1, dead_b[0].1)];
    assert_eq!(
        listed(&s, &dana).await,
        only_b,
        "requeued: pending, not dead"
    );
    let relay = relay::spawn(db.clone(), fast_relay()).expect("relay");
    wait_settled(&db).await;
    relay.shutdown().await;
    assert_eq!(partner.accepted_for(a), 3, "A's three events delivered");
    assert!(dead_of(&db, a).await.is_empty());
    assert_eq!(
        listed(&s, &dana).await,
        only_b,
        "delivered: still not listed"
    );
    assert_eq!(listed(&s, &gina).await, vec![]);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_static_segment_wins_over_an_order_id(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let order = Uuid::now_v7();
    create_order(&s, &dana, order).await;

    // `/v1/orders/{id}` would answer 404 not_found for "dead-lettered".
    let (status, body) = s.get(PATH, &dana).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"orders": []}));
    // …and the order route still serves orders.
    let (status, body) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["id"], order.to_string());
    // Only GET is routed here; under it, "dead-lettered" is no order.
    let (status, body) = s
        .call(
            Method::PATCH,
            PATH,
            Some(&dana),
            Some(json!({"base_version": 1, "set": {}})),
        )
        .await;
    assert_problem(status, &body, 405, "method_not_allowed");
    let (status, body) = s.get(&format!("{PATH}/history"), &dana).await;
    assert_problem(status, &body, 404, "not_found");
    // A bearer token is required, as everywhere under /v1.
    let (status, body) = s.call(Method::GET, PATH, None, None).await;
    assert_problem(status, &body, 401, "unauthorized");

    let (_, doc) = s.call(Method::GET, "/openapi.json", None, None).await;
    let op = &doc["paths"][PATH]["get"];
    assert!(op.is_object(), "documented in /openapi.json");
    assert_eq!(
        op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/DeadLetteredOrders"
    );
    let item = &doc["components"]["schemas"]["DeadLetteredOrder"];
    let mut required: Vec<&str> = item["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    required.sort_unstable();
    assert_eq!(
        required,
        ["dead_lettered", "oldest_at", "order_id"],
        "{item}"
    );
}
