//! Partners managed by operators (issue 18), over real HTTP, Postgres and
//! in-process receivers: the test event (to its partner only, signed like
//! every event, with both secrets while a rotation overlaps, outside the
//! outbox, its failures in words) and deleting a partner through the API.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxStatus};
use axum::routing::post;
use holdfast_protocol::webhook;
use holdfast_server::relay::{self, Settings};
use holdfast_server::AppState;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{acme, assert_problem, kestrel_m, order_with_line, TestServer, MIGRATIONS};

/// One request a receiver got.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Request {
    pub(crate) fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// Whether the Standard Webhooks signature verifies with any of `secrets`.
    pub(crate) fn verifies_with(&self, secrets: &[&str]) -> bool {
        let keys: Vec<Vec<u8>> = secrets
            .iter()
            .map(|s| webhook::parse_secret(s).expect("secret"))
            .collect();
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        webhook::verify(
            &keys,
            &self.header("webhook-id"),
            &self.header("webhook-timestamp"),
            &self.header("webhook-signature"),
            &self.body,
            chrono::Utc::now().timestamp(),
            300,
        )
        .is_ok()
    }
}

/// A partner's endpoint on 127.0.0.1: records every request, answers
/// `status` with `body`, after `delay`.
#[derive(Clone)]
pub(crate) struct Receiver {
    pub(crate) url: String,
    requests: Arc<Mutex<Vec<Request>>>,
    answer: Arc<Mutex<(u16, String, Duration)>>,
}

impl Receiver {
    pub(crate) async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let r = Receiver {
            url: format!("http://{}/hook", listener.local_addr().expect("addr")),
            requests: Arc::default(),
            answer: Arc::new(Mutex::new((200, String::new(), Duration::ZERO))),
        };
        let app = axum::Router::new()
            .route("/hook", post(receive))
            .with_state(r.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.expect("receiver") });
        r
    }

    pub(crate) fn answer(&self, status: u16, body: &str) {
        let mut a = self.answer.lock().expect("lock");
        a.0 = status;
        a.1 = body.to_owned();
    }

    fn delay(&self, d: Duration) {
        self.answer.lock().expect("lock").2 = d;
    }

    pub(crate) fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("lock").clone()
    }

    /// Waits, with a deadline, until `n` requests have come.
    async fn wait_for(&self, n: usize) -> Vec<Request> {
        let start = Instant::now();
        loop {
            let got = self.requests();
            if got.len() >= n {
                return got;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "timed out waiting for {n} requests, got {}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> (AxStatus, String) {
    r.requests
        .lock()
        .expect("lock")
        .push(Request { headers, body });
    let (status, body, delay) = r.answer.lock().expect("lock").clone();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    (AxStatus::from_u16(status).expect("status"), body)
}

/// The server, allowing loopback partners (the receivers live there).
pub(crate) async fn server(db: &PgPool) -> TestServer {
    TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await
}

/// Registers a partner through the API; returns its id and secret.
pub(crate) async fn register(
    s: &TestServer,
    ops: &str,
    name: &str,
    url: &str,
    types: &[&str],
) -> (Uuid, String) {
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/admin/partners",
            Some(ops),
            Some(json!({"name": name, "url": url, "event_types": types})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().expect("id").parse().expect("uuid");
    (id, body["secret"].as_str().expect("secret").to_owned())
}

async fn test_event(s: &TestServer, token: &str, partner: Uuid) -> (StatusCode, Value) {
    s.call(
        Method::POST,
        &format!("/v1/admin/partners/{partner}/test-event"),
        Some(token),
        None,
    )
    .await
}

async fn count(db: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar(&format!("select count(*) from {table}"))
        .fetch_one(db)
        .await
        .expect("count")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_test_event_reaches_its_partner_only_signed_and_outside_the_outbox(db: PgPool) {
    let s = server(&db).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let (a, b) = (Receiver::start().await, Receiver::start().await);
    a.answer(200, "thanks from A");
    // A subscribes to something no test event is; B to every order event.
    let (a_id, a_secret) = register(&s, &ops, "Partner A", &a.url, &["invoice.paid"]).await;
    let (_, b_secret) = register(&s, &ops, "Partner B", &b.url, &["order.*"]).await;
    let (outbox, deliveries) = (count(&db, "outbox").await, count(&db, "deliveries").await);

    let (status, result) = test_event(&s, &ops, a_id).await;
    assert_eq!(status, StatusCode::OK, "{result}");
    let webhook_id = result["webhook_id"].as_str().expect("webhook_id");
    assert!(webhook_id.starts_with("evt_test_"), "{result}");
    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["body"], "thanks from A", "{result}");
    assert!(result["latency_ms"].is_u64(), "{result}");
    assert!(result.get("error").is_none(), "{result}");

    // A got exactly one request: the test event, signed with A's secret.
    let got = a.requests();
    assert_eq!(got.len(), 1, "{got:?}");
    let request = &got[0];
    assert!(request.verifies_with(&[&a_secret]), "{request:?}");
    assert!(!request.verifies_with(&[&b_secret]));
    assert_eq!(request.header("webhook-id"), webhook_id);
    assert_eq!(request.header("idempotency-key"), webhook_id);
    assert_eq!(
        request.header("webhook-signature").split(' ').count(),
        1,
        "never rotated: one signature"
    );
    let body = request.json();
    assert_eq!(body["type"], "holdfast.test", "{body}");
    assert!(body["timestamp"].is_string(), "{body}");
    assert_eq!(body["data"]["partner"], "Partner A", "{body}");
    assert_eq!(body["data"]["sent_by"], "Olu Operator", "{body}");
    assert_eq!(body["data"]["tenant_id"], acme().to_string(), "{body}");

    // B got nothing (the test event is sent before its answer comes back),
    // and nothing was written for the relay to send later.
    assert!(b.requests().is_empty(), "{:?}", b.requests());
    assert_eq!(count(&db, "outbox").await, outbox);
    assert_eq!(count(&db, "deliveries").await, deliveries);

    // The fence: a real order event reaches B through the relay, so B was
    // listening all along; still no test event there, and A (subscribed to
    // invoices only) got nothing more.
    let relay = relay::spawn(db.clone(), fast_relay()).expect("relay");
    let dana = s.login("acme", "dana@acme.test").await;
    order_with_line(&s, &dana, kestrel_m(), 1).await;
    let at_b = b.wait_for(2).await;
    assert!(
        at_b.iter().all(|r| r.json()["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("order."))),
        "{at_b:?}"
    );
    assert!(at_b.iter().all(|r| r.verifies_with(&[&b_secret])));
    assert!(at_b
        .iter()
        .all(|r| !r.header("webhook-id").starts_with("evt_test_")));
    relay.shutdown().await;
    assert_eq!(a.requests().len(), 1, "{:?}", a.requests());
}

fn fast_relay() -> Settings {
    Settings {
        max_attempts: 4,
        backoff_base_ms: 5,
        backoff_cap_ms: 50,
        timeout: Duration::from_secs(5),
        allow_private_targets: true,
        max_in_flight: 16,
        per_partner_in_flight: 4,
        poll: Duration::from_millis(50),
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn after_a_rotation_the_test_event_verifies_with_either_secret(db: PgPool) {
    let s = server(&db).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let a = Receiver::start().await;
    let (id, old) = register(&s, &ops, "Partner A", &a.url, &["order.*"]).await;
    let (status, rotated) = s
        .call(
            Method::POST,
            &format!("/v1/admin/partners/{id}/rotate-secret"),
            Some(&ops),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let new = rotated["secret"].as_str().expect("secret").to_owned();
    assert_ne!(new, old);
    let until: chrono::DateTime<chrono::Utc> = rotated["previous_secret_expires_at"]
        .as_str()
        .expect("overlap end")
        .parse()
        .expect("time");
    assert!(until > chrono::Utc::now() + chrono::Duration::hours(23));

    let (status, result) = test_event(&s, &ops, id).await;
    assert_eq!(status, StatusCode::OK, "{result}");
    let got = a.requests();
    assert_eq!(got.len(), 1);
    let request = &got[0];
    assert_eq!(
        request.header("webhook-signature").split(' ').count(),
        2,
        "both secrets sign while the rotation overlaps"
    );
    assert!(request.verifies_with(&[&old]), "the partner's old secret");
    assert!(request.verifies_with(&[&new]), "the new one");
    let stranger = holdfast_server::auth::new_webhook_secret();
    assert!(!request.verifies_with(&[&stranger]));
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_test_event_says_what_went_wrong(db: PgPool) {
    let state = AppState::new(db.clone())
        .allowing_private_targets(true)
        .with_relay_timeout(Duration::from_millis(300));
    let s = TestServer::start_with(state).await;
    let ops = s.login("acme", "ops@acme.test").await;

    // A partner answering 401 with a long body: the status and its first
    // 200 characters.
    let r = Receiver::start().await;
    r.answer(401, &"no such key; ".repeat(100));
    let (id, _) = register(&s, &ops, "Strict", &r.url, &["order.*"]).await;
    let (status, result) = test_event(&s, &ops, id).await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert_eq!(result["status"], 401);
    assert_eq!(
        result["body"].as_str().expect("body").chars().count(),
        200,
        "{result}"
    );
    assert!(result.get("error").is_none());

    // Nobody listening: no status, the refused connection in words.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let gone = format!("http://{}/hook", closed.local_addr().expect("addr"));
    drop(closed);
    let (id, _) = register(&s, &ops, "Nobody", &gone, &["order.*"]).await;
    let (_, result) = test_event(&s, &ops, id).await;
    assert!(result.get("status").is_none(), "{result}");
    let error = result["error"].as_str().expect("error");
    assert!(error.starts_with("no connection"), "{error}");

    // Too slow: timed out, in words.
    let slow = Receiver::start().await;
    slow.delay(Duration::from_secs(10));
    let (id, _) = register(&s, &ops, "Slow", &slow.url, &["order.*"]).await;
    let (_, result) = test_event(&s, &ops, id).await;
    assert!(result.get("status").is_none(), "{result}");
    let error = result["error"].as_str().expect("error");
    assert!(error.contains("timed out"), "{error}");

    // Not a partner of this tenant, not an operator.
    let (status, body) = test_event(&s, &ops, Uuid::now_v7()).await;
    assert_problem(status, &body, 404, "not_found");
    let dana = s.login("acme", "dana@acme.test").await;
    let (status, body) = test_event(&s, &dana, id).await;
    assert_problem(status, &body, 403, "forbidden");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_egress_check_refuses_a_test_event_to_an_internal_address(db: PgPool) {
    // This server refuses private targets; the partner was registered
    // while they were allowed (or the name resolved elsewhere then).
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let r = Receiver::start().await;
    let id = Uuid::now_v7();
    sqlx::query(
        "insert into partners (tenant_id, id, name, url, event_types, secret)
         values ($1, $2, 'Inside', $3, '{order.*}', $4)",
    )
    .bind(acme())
    .bind(id)
    .bind(&r.url)
    .bind(holdfast_server::auth::new_webhook_secret())
    .execute(&db)
    .await
    .expect("partner");
    let (status, result) = test_event(&s, &ops, id).await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert!(result.get("status").is_none(), "{result}");
    let error = result["error"].as_str().expect("error");
    assert!(error.contains("internal address"), "{error}");
    assert!(r.requests().is_empty(), "nothing was sent");
}

/// Inserts a delivery of a fresh event to `partner` in `state`.
pub(crate) async fn delivery(db: &PgPool, partner: Uuid, state: &str) -> i64 {
    let seq: i64 = sqlx::query_scalar("select count(*) + 1 from outbox")
        .fetch_one(db)
        .await
        .expect("seq");
    let outbox: i64 = sqlx::query_scalar(
        "insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence,
                             payload, fanned_out_at)
         values ($1, 'order.created', 'order', $2, $3, '{}', now()) returning id",
    )
    .bind(acme())
    .bind(Uuid::from_u128(7))
    .bind(seq)
    .fetch_one(db)
    .await
    .expect("outbox");
    sqlx::query_scalar(
        "insert into deliveries (tenant_id, outbox_id, partner_id, state, delivered_at,
                                 dead_lettered_at)
         values ($1, $2, $3, $4, case when $4 = 'delivered' then now() end,
                 case when $4 = 'dead' then now() end)
         returning id",
    )
    .bind(acme())
    .bind(outbox)
    .bind(partner)
    .bind(state)
    .fetch_one(db)
    .await
    .expect("delivery")
}

pub(crate) async fn partner_exists(db: &PgPool, id: Uuid) -> bool {
    sqlx::query_scalar("select exists (select 1 from partners where id = $1)")
        .bind(id)
        .fetch_one(db)
        .await
        .expect("exists")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn delete_is_refused_while_deliveries_wait_and_takes_the_records_with_it(db: PgPool) {
    let s = server(&db).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let r = Receiver::start().await;
    let (id, _) = register(&s, &ops, "Leaving", &r.url, &["order.*"]).await;
    let (other, _) = register(&s, &ops, "Staying", &r.url, &["order.*"]).await;
    let waiting = delivery(&db, id, "pending").await;
    delivery(&db, id, "delivered").await;
    delivery(&db, id, "dead").await;
    let kept = delivery(&db, other, "pending").await;
    let path = format!("/v1/admin/partners/{id}");

    let (status, body) = s.call(Method::DELETE, &path, Some(&ops), None).await;
    assert_problem(status, &body, 422, "invalid_state");
    assert_eq!(body["pending_deliveries"], 1, "{body}");
    let detail = body["detail"].as_str().expect("detail");
    assert!(
        detail.contains("Leaving still has 1 delivery waiting"),
        "{detail}"
    );
    assert!(partner_exists(&db, id).await);

    // A leased delivery is still pending: refused too.
    sqlx::query(
        "update deliveries set lease_id = gen_random_uuid(),
                lease_expires_at = now() + interval '1 minute' where id = $1",
    )
    .bind(waiting)
    .execute(&db)
    .await
    .expect("lease");
    let (status, body) = s.call(Method::DELETE, &path, Some(&ops), None).await;
    assert_problem(status, &body, 422, "invalid_state");

    let dana = s.login("acme", "dana@acme.test").await;
    let (status, body) = s.call(Method::DELETE, &path, Some(&dana), None).await;
    assert_problem(status, &body, 403, "forbidden");

    // Once nothing waits: gone, with its delivery records; the other
    // partner's untouched.
    sqlx::query("update deliveries set state = 'delivered', delivered_at = now(), lease_id = null where id = $1")
        .bind(waiting)
        .execute(&db)
        .await
        .expect("delivered");
    let (status, body) = s.call(Method::DELETE, &path, Some(&ops), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert!(!partner_exists(&db, id).await);
    let left: i64 = sqlx::query_scalar("select count(*) from deliveries where partner_id = $1")
        .bind(id)
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(left, 0);
    let still: i64 = sqlx::query_scalar("select count(*) from deliveries where id = $1")
        .bind(kept)
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(still, 1);
    let (status, body) = s.call(Method::DELETE, &path, Some(&ops), None).await;
    assert_problem(status, &body, 404, "not_found");
    let (_, list) = s.get("/v1/admin/partners", &ops).await;
    assert_eq!(list["partners"].as_array().map(Vec::len), Some(1), "{list}");
}
