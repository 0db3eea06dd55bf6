//! The relay, delivering to in-process partners that verify every
//! signature: flaky, dead, slow and gone partners, killed and stopping
//! relays, partner admin, and the reaper.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxStatus};
use axum::routing::post;
use holdfast_protocol::webhook;
use holdfast_server::relay::{self, Settings};
use holdfast_server::{demo, AppState};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use super::{count, inbound_secret, send_inbound, signed};
use crate::support::{assert_problem, key, TestServer, MIGRATIONS};

/// How a test partner answers each attempt.
#[derive(Clone, Copy)]
enum Behaviour {
    Healthy,
    /// Fail the first N attempts of every event with 503, then accept.
    FailFirst(usize),
    /// Answer this status forever.
    Always(u16),
    /// Accept, but only after holding the request this long.
    Slow(Duration),
}

#[derive(Clone, Debug)]
struct Received {
    id: String,
    verified: bool,
    body: Value,
}

#[derive(Clone)]
struct Partner {
    secret: Arc<Mutex<Option<Vec<u8>>>>,
    behaviour: Arc<Mutex<Behaviour>>,
    attempts: Arc<Mutex<Vec<Received>>>,
    url: String,
}

impl Partner {
    async fn start(behaviour: Behaviour) -> Partner {
        let partner = Partner {
            secret: Arc::default(),
            behaviour: Arc::new(Mutex::new(behaviour)),
            attempts: Arc::default(),
            url: String::new(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let app = axum::Router::new()
            .route("/hook", post(receive))
            .with_state(partner.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.expect("partner") });
        Partner { url, ..partner }
    }

    fn set_secret(&self, secret: &str) {
        *self.secret.lock().expect("lock") = Some(webhook::parse_secret(secret).expect("secret"));
    }

    fn behave(&self, b: Behaviour) {
        *self.behaviour.lock().expect("lock") = b;
    }

    fn attempts(&self) -> Vec<Received> {
        self.attempts.lock().expect("lock").clone()
    }

    /// Distinct events accepted (2xx), by webhook-id.
    fn accepted(&self) -> HashMap<String, Value> {
        self.attempts()
            .into_iter()
            .filter(|a| a.verified && a.body["accepted"] != false)
            .map(|a| (a.id, a.body))
            .collect()
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
    .is_ok()
        && h("idempotency-key") == id;
    let mut parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let behaviour = *p.behaviour.lock().expect("lock");
    let seen = p
        .attempts
        .lock()
        .expect("lock")
        .iter()
        .filter(|a| a.id == id)
        .count();
    let status = match behaviour {
        Behaviour::Healthy => AxStatus::OK,
        Behaviour::FailFirst(n) if seen < n => AxStatus::SERVICE_UNAVAILABLE,
        Behaviour::FailFirst(_) => AxStatus::OK,
        Behaviour::Always(code) => AxStatus::from_u16(code).expect("status"),
        Behaviour::Slow(d) => {
            tokio::time::sleep(d).await;
            AxStatus::OK
        }
    };
    if !status.is_success() {
        parsed["accepted"] = json!(false);
    }
    p.attempts.lock().expect("lock").push(Received {
        id,
        verified,
        body: parsed,
    });
    if !verified {
        return AxStatus::UNAUTHORIZED;
    }
    status
}

fn fast_relay() -> Settings {
    Settings {
        max_attempts: 4,
        backoff_base_ms: 5,
        backoff_cap_ms: 50,
        timeout: Duration::from_millis(800),
        allow_private_targets: true,
        max_in_flight: 16,
        per_partner_in_flight: 4,
        poll: Duration::from_millis(50),
    }
}

async fn register(s: &TestServer, ops: &str, partner: &Partner, types: Value) -> Uuid {
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/admin/partners",
            Some(ops),
            Some(json!({"name": "EDI gateway", "url": partner.url, "event_types": types})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    partner.set_secret(body["secret"].as_str().expect("secret"));
    body["id"].as_str().expect("id").parse().expect("uuid")
}

/// Every event a partner should get: those recorded after the first partner
/// registered (the demo seed's were announced before any partner existed,
/// to nobody: `demo.rs`).
async fn activity_events(db: &PgPool) -> i64 {
    sqlx::query_scalar(
        "select count(*) from outbox where created_at > (select min(created_at) from partners)",
    )
    .fetch_one(db)
    .await
    .expect("n")
}

/// Waits (with a deadline, never a fixed sleep) until `done` holds.
async fn eventually(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Drives a few orders through create, lines, allocations (one rejected), edits.
async fn make_activity(s: &TestServer, token: &str, orders: usize) -> Vec<Uuid> {
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let mut ids = Vec::new();
    for i in 0..orders {
        let order = Uuid::now_v7();
        let line = Uuid::now_v7();
        ids.push(order);
        s.post(
            token,
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": demo::customer_id("acme", "Tokyo Distributor")}),
        )
        .await;
        s.post(
            token,
            &format!("/v1/orders/{order}/lines"),
            &key(),
            json!({"id": line, "sku_id": sku, "qty_ordered": 6, "base_version": 1}),
        )
        .await;
        let r = s
            .post(
                token,
                &format!("/v1/orders/{order}/lines/{line}/allocate"),
                &key(),
                json!({"qty": 4}),
            )
            .await;
        let v = if r.status == StatusCode::OK {
            r.json()["order"]["version"].as_i64().expect("v")
        } else {
            assert_eq!(
                r.json()["code"],
                "insufficient_ats",
                "only the second order runs dry"
            );
            2
        };
        s.mutate(
            token,
            Method::PATCH,
            &format!("/v1/orders/{order}"),
            &key(),
            &json!({"base_version": v, "set": {"notes": format!("call #{i}")}}),
        )
        .await;
    }
    ids
}

/// Every order event the outbox holds, by webhook-id.
async fn committed_events(db: &PgPool) -> HashMap<String, Value> {
    let rows: Vec<(i64, Value)> =
        sqlx::query_as("select id, payload from outbox where event_type like 'order.%'")
            .fetch_all(db)
            .await
            .expect("outbox");
    rows.into_iter()
        .map(|(id, p)| (format!("evt_{id}"), p))
        .collect()
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_flaky_partner_gets_every_event_signed_and_in_sequence(db: PgPool) {
    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let dana = s.login("acme", "dana@acme.test").await;
    let partner = Partner::start(Behaviour::FailFirst(2)).await;
    register(&s, &ops, &partner, json!(["order.*"])).await;
    let relay = relay::spawn(db.clone(), fast_relay()).expect("relay");

    let orders = make_activity(&s, &dana, 3).await;
    let committed = committed_events(&db).await;
    eventually("every event accepted", Duration::from_secs(30), || {
        partner.accepted().len() == committed.len()
    })
    .await;
    relay.shutdown().await;

    let attempts = partner.attempts();
    assert!(
        attempts.iter().all(|a| a.verified),
        "every attempt carries a valid signature"
    );
    let accepted = partner.accepted();
    for (id, payload) in &committed {
        assert_eq!(
            accepted.get(id).map(|b| &b["data"]),
            Some(&payload["data"]),
            "event {id} delivered as recorded"
        );
        assert_eq!(
            attempts.iter().filter(|a| &a.id == id).count(),
            3,
            "two failures then success, same webhook-id"
        );
    }
    // Per order: sequences 1..n with no gap; the rejected allocation is absent.
    for order in orders {
        let mut events: Vec<&Value> = accepted
            .values()
            .filter(|b| b["data"]["order_id"] == order.to_string())
            .collect();
        events.sort_by_key(|b| b["data"]["sequence"].as_i64());
        let seqs: Vec<i64> = events
            .iter()
            .filter_map(|b| b["data"]["sequence"].as_i64())
            .collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as i64).collect::<Vec<_>>(),
            "gap-free"
        );
    }
    let allocated: Vec<&Value> = accepted
        .values()
        .filter(|b| b["type"] == "order.line_allocated")
        .collect();
    assert_eq!(
        allocated.len(),
        1,
        "6 on hand, 4 each: only the first allocation happened and was announced"
    );
    assert_eq!(allocated[0]["data"]["ats_after"], 2);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_dead_partner_is_dead_lettered_without_delaying_a_healthy_one(db: PgPool) {
    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let dana = s.login("acme", "dana@acme.test").await;
    let broken = Partner::start(Behaviour::Always(400)).await;
    let healthy = Partner::start(Behaviour::Healthy).await;
    register(&s, &ops, &broken, json!(["order.created"])).await;
    register(&s, &ops, &healthy, json!(["*"])).await;
    let relay = relay::spawn(db.clone(), fast_relay()).expect("relay");

    make_activity(&s, &dana, 2).await;
    let all = activity_events(&db).await;
    eventually(
        "healthy partner has everything",
        Duration::from_secs(30),
        || healthy.accepted().len() as i64 == all,
    )
    .await;
    let dead_count = || {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, i64>("select count(*) from deliveries where state = 'dead'")
                .fetch_one(&db)
                .await
                .expect("n")
        }
    };
    let start = Instant::now();
    while dead_count().await < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "broken partner's deliveries dead-lettered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(broken.attempts().len() >= 2 * 4, "max attempts each");

    let (_, dead) = s.get("/v1/admin/deliveries?state=dead", &ops).await;
    let dead = dead["deliveries"].as_array().expect("list").clone();
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0]["attempts"], 4);
    assert_eq!(dead[0]["last_status"], 400);
    assert!(dead[0]["last_error"]
        .as_str()
        .expect("error")
        .contains("HTTP 400"));
    let (_, stats) = s.get("/v1/admin/stats", &ops).await;
    assert_eq!(stats["dead_letters"], 2, "{stats}");

    // The partner fixes its endpoint; the operator requeues; delivered once.
    broken.behave(Behaviour::Healthy);
    for d in &dead {
        let (status, _) = s
            .call(
                Method::POST,
                &format!("/v1/admin/deliveries/{}/requeue", d["id"]),
                Some(&ops),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    eventually(
        "requeued deliveries arrive",
        Duration::from_secs(30),
        || broken.accepted().len() == 2,
    )
    .await;
    relay.shutdown().await;
    let (status, _) = s
        .call(
            Method::POST,
            &format!("/v1/admin/deliveries/{}/requeue", dead[0]["id"]),
            Some(&ops),
            None,
        )
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "a delivered one cannot be requeued"
    );
}

/// A server, a partner answering after `delay` subscribed to everything,
/// and a few orders' worth of events for it: how many.
async fn slow_partner_with_events(db: &PgPool, delay: Duration) -> (TestServer, Partner, i64) {
    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let dana = s.login("acme", "dana@acme.test").await;
    let partner = Partner::start(Behaviour::Slow(delay)).await;
    register(&s, &ops, &partner, json!(["*"])).await;
    make_activity(&s, &dana, 3).await;
    let all = activity_events(db).await;
    (s, partner, all)
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_killed_relay_loses_nothing(db: PgPool) {
    let (_s, partner, all) = slow_partner_with_events(&db, Duration::from_millis(300)).await;

    // Kill it while calls are in flight.
    let first = relay::spawn(db.clone(), fast_relay()).expect("relay");
    eventually("calls in flight", Duration::from_secs(10), || {
        !partner.attempts().is_empty()
    })
    .await;
    first.abort();
    let after_kill = partner.attempts().len();
    assert!((after_kill as i64) < all, "killed before finishing");

    // Two relays take over together once the dead one's leases expire.
    partner.behave(Behaviour::Healthy);
    let a = relay::spawn(db.clone(), fast_relay()).expect("relay");
    let b = relay::spawn(db.clone(), fast_relay()).expect("relay");
    // The dead relay's calls may still have reached the partner, unrecorded:
    // wait for the database to say delivered, not for the partner.
    let delivered = || {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "select count(*) from deliveries where state = 'delivered'",
            )
            .fetch_one(&db)
            .await
            .expect("n")
        }
    };
    let start = Instant::now();
    while delivered().await < all {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "everything delivered after the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
    assert_eq!(delivered().await, all);
    assert_eq!(partner.accepted().len() as i64, all);
    // Redeliveries, if any, repeat a webhook-id: partners dedupe on it.
    let ids: std::collections::HashSet<String> =
        partner.attempts().into_iter().map(|a| a.id).collect();
    assert_eq!(ids.len() as i64, all);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_stopping_relay_gives_back_what_it_has_not_sent(db: PgPool) {
    let (_s, partner, all) = slow_partner_with_events(&db, Duration::from_millis(500)).await;
    // One slot for the partner, so most of what the relay claims ahead
    // waits; a lease of 9 × 3 s + 1 s, far longer than the test allows.
    let one_at_a_time = Settings {
        timeout: Duration::from_secs(3),
        per_partner_in_flight: 1,
        ..fast_relay()
    };
    let relay = relay::spawn(db.clone(), one_at_a_time.clone()).expect("relay");
    eventually("a call in flight", Duration::from_secs(10), || {
        !partner.attempts().is_empty()
    })
    .await;
    relay.shutdown().await;

    assert_eq!(
        count(
            &db,
            "select count(*) from deliveries where lease_id is not null"
        )
        .await,
        0,
        "nothing is left leased by a relay that stopped"
    );
    assert!(
        count(
            &db,
            "select count(*) from deliveries where state = 'delivered'"
        )
        .await
            >= 1,
        "the call in flight finished and was recorded"
    );
    assert!(
        count(
            &db,
            "select count(*) from deliveries where state = 'pending' and attempts = 0"
        )
        .await
            >= 1,
        "claimed-ahead deliveries went back unattempted"
    );

    // Another relay sends them at once, not after the lease would have run out.
    partner.behave(Behaviour::Healthy);
    let started = Instant::now();
    let next = relay::spawn(db.clone(), one_at_a_time).expect("relay");
    while count(
        &db,
        "select count(*) from deliveries where state = 'delivered'",
    )
    .await
        < all
    {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "given-back deliveries wait for no lease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    next.shutdown().await;
    assert_eq!(partner.accepted().len() as i64, all);
}

/// A first attempt a relay holds in memory (no delivery row until its
/// outcome) reads as pending wherever the operator or the desk looks.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn first_attempts_held_in_memory_read_as_pending_everywhere(db: PgPool) {
    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let dana = s.login("acme", "dana@acme.test").await;
    // Slow enough that nothing is answered while the reads below run.
    let partner = Partner::start(Behaviour::Slow(Duration::from_secs(4))).await;
    let partner_id = register(&s, &ops, &partner, json!(["*"])).await;
    let orders = make_activity(&s, &dana, 1).await;
    let all = activity_events(&db).await;
    let holding = Settings {
        timeout: Duration::from_secs(8),
        ..fast_relay()
    };
    let relay = relay::spawn(db.clone(), holding).expect("relay");
    let start = Instant::now();
    while count(&db, "select count(*) from relay_sending").await == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "a fan-out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        count(&db, "select count(*) from deliveries").await,
        0,
        "every first attempt is in memory, none has its row"
    );
    assert_eq!(
        count(&db, "select count(*) from relay_sending_events").await,
        all
    );

    let (status, stats) = s.get("/v1/admin/stats", &ops).await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    assert_eq!(stats["backlog"], all, "{stats}");
    assert!(stats["oldest_pending_age_seconds"].is_number(), "{stats}");

    let (status, history) = s
        .get(&format!("/v1/orders/{}/history", orders[0]), &dana)
        .await;
    assert_eq!(status, StatusCode::OK, "{history}");
    let states: Vec<&Value> = history["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .flat_map(|e| e["deliveries"].as_array().expect("deliveries"))
        .map(|d| &d["state"])
        .collect();
    assert!(!states.is_empty(), "{history}");
    assert!(states.iter().all(|s| *s == "pending"), "{history}");

    let (status, body) = s
        .call(
            Method::DELETE,
            &format!("/v1/admin/partners/{partner_id}"),
            Some(&ops),
            None,
        )
        .await;
    assert_problem(status, &body, 422, "invalid_state");
    assert_eq!(body["pending_deliveries"], all, "{body}");

    // Stopping gives what it holds back as rows: nothing is left in memory.
    relay.shutdown().await;
    assert_eq!(count(&db, "select count(*) from relay_sending").await, 0);
    assert_eq!(count(&db, "select count(*) from deliveries").await, all);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn partner_admin_refuses_internal_urls_pauses_on_410_and_rotates(db: PgPool) {
    // Default policy: loopback and private targets refused at registration.
    let strict = TestServer::start(db.clone()).await;
    let ops = strict.login("acme", "ops@acme.test").await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://10.0.0.8/hook",
        "http://169.254.169.254/latest",
        "ftp://example.com/x",
    ] {
        let (status, p) = strict
            .call(
                Method::POST,
                "/v1/admin/partners",
                Some(&ops),
                Some(json!({"name": "x", "url": url, "event_types": ["*"]})),
            )
            .await;
        assert_problem(status, &p, 400, "validation_failed");
        assert_eq!(p["errors"][0]["field"], "url");
    }
    let dana = strict.login("acme", "dana@acme.test").await;
    let (status, p) = strict.get("/v1/admin/partners", &dana).await;
    assert_problem(status, &p, 403, "forbidden");
    drop(strict);

    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let gone = Partner::start(Behaviour::Always(410)).await;
    let id = register(&s, &ops, &gone, json!(["order.*"])).await;
    let relay = relay::spawn(db.clone(), fast_relay()).expect("relay");
    make_activity(&s, &dana, 1).await;
    eventually("410 seen", Duration::from_secs(10), || {
        !gone.attempts().is_empty()
    })
    .await;
    let paused = || {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, bool>("select not enabled from partners where id = $1")
                .bind(id)
                .fetch_one(&db)
                .await
                .expect("p")
        }
    };
    let start = Instant::now();
    while !paused().await {
        assert!(start.elapsed() < Duration::from_secs(10), "partner paused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, list) = s.get("/v1/admin/partners", &ops).await;
    assert_eq!(
        list["partners"][0]["paused_reason"],
        "endpoint answered 410 Gone"
    );
    // Only what was already in flight when the 410 came (the per-partner cap).
    assert!(gone.attempts().len() <= 4, "no new attempts once paused");

    // Rotation: the old and the new secret both sign during the grace period.
    gone.behave(Behaviour::Healthy);
    let (status, rotated) = s
        .call(
            Method::POST,
            &format!("/v1/admin/partners/{id}/rotate-secret"),
            Some(&ops),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = s
        .call(
            Method::PATCH,
            &format!("/v1/admin/partners/{id}"),
            Some(&ops),
            Some(json!({"enabled": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // The partner still verifies with its old secret: accepted.
    eventually(
        "deliveries resume after re-enable",
        Duration::from_secs(10),
        || gone.accepted().len() >= 4,
    )
    .await;
    gone.set_secret(rotated["secret"].as_str().expect("secret"));
    make_activity(&s, &dana, 1).await;
    let before = gone.accepted().len();
    eventually("new secret verifies too", Duration::from_secs(10), || {
        gone.accepted().len() > before
    })
    .await;
    relay.shutdown().await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_reaper_bounds_outbox_deliveries_and_inbox(db: PgPool) {
    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let dana = s.login("acme", "dana@acme.test").await;
    let healthy = Partner::start(Behaviour::Healthy).await;
    let broken = Partner::start(Behaviour::Always(500)).await;
    register(&s, &ops, &healthy, json!(["order.created"])).await;
    register(&s, &ops, &broken, json!(["order.created"])).await;
    let secret = inbound_secret(&s, &ops, "warehouse").await;
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let body = json!({"type": "inventory.received", "data": {"sku_id": sku, "qty": 1}}).to_string();
    let now = chrono::Utc::now().timestamp();
    send_inbound(
        &s,
        "acme",
        "warehouse",
        signed(&secret, "old_evt", now, &body),
        &body,
    )
    .await;
    let relay = relay::spawn(db.clone(), fast_relay()).expect("relay");
    make_activity(&s, &dana, 2).await;
    eventually(
        "healthy partner has both creates",
        Duration::from_secs(20),
        || healthy.accepted().len() == 2,
    )
    .await;
    relay.shutdown().await;

    // Everything is old now.
    sqlx::raw_sql(
        "update deliveries set delivered_at = now() - interval '200 hours' where state = 'delivered';
         update outbox set fanned_out_at = now() - interval '200 hours';
         update inbox set received_at = now() - interval '800 hours';",
    )
    .execute(&db)
    .await
    .expect("age");
    let retention = holdfast_server::housekeeping::Retention {
        idempotency_hours: 72,
        outbox_hours: 168,
        inbox_hours: 720,
    };
    let [_, deliveries, events, inbox] = holdfast_server::housekeeping::reap_all(&db, &retention)
        .await
        .expect("reap");
    assert_eq!(deliveries, 2, "the two delivered to the healthy partner");
    assert_eq!(inbox, 1);
    let left: Vec<(String, i64)> =
        sqlx::query_as("select state, count(*) from deliveries group by state order by state")
            .fetch_all(&db)
            .await
            .expect("left");
    assert!(
        left.iter().all(|(state, _)| state != "delivered"),
        "{left:?}"
    );
    assert!(
        left.iter().map(|(_, n)| n).sum::<i64>() == 2,
        "undelivered ones stay: {left:?}"
    );
    // Events still owed to the broken partner stay; the rest are gone.
    let remaining: i64 = sqlx::query_scalar("select count(*) from outbox")
        .fetch_one(&db)
        .await
        .expect("n");
    assert_eq!(remaining, 2);
    assert!(events > 0);
}

/// Catalog changes reach partners as `sku.updated`, signed, in sequence per
/// SKU, continuing the sequence `sku.ats_changed` uses for the same SKU.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn partners_receive_sku_updated_signed_and_in_sequence(db: PgPool) {
    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let partner = Partner::start(Behaviour::FailFirst(1)).await;
    register(&s, &ops, &partner, json!(["sku.*"])).await;
    let relay = relay::spawn(db.clone(), fast_relay()).expect("relay");

    for price in [3100, 3000, 2900] {
        let csv = format!(
            "code,style,color,size,wholesale_price,msrp\nLN-1,Linnet Vest,Sand,M,{price},6200\n"
        );
        let resp = s
            .http
            .post(s.url("/v1/admin/skus/import"))
            .bearer_auth(&ops)
            .header("idempotency-key", key())
            .header("content-type", "text/csv")
            .body(csv)
            .send()
            .await
            .expect("import");
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let id: Uuid = sqlx::query_scalar("select id from skus where code = 'LN-1'")
        .fetch_one(&db)
        .await
        .expect("imported");
    let (status, body) = s
        .call(
            Method::PATCH,
            &format!("/v1/admin/skus/{id}"),
            Some(&ops),
            Some(json!({"active": false})),
        )
        .await;
    assert_problem(status, &body, 400, "idempotency_key_missing");
    let resp = s
        .http
        .patch(s.url(&format!("/v1/admin/skus/{id}")))
        .bearer_auth(&ops)
        .header("idempotency-key", key())
        .json(&json!({"active": false}))
        .send()
        .await
        .expect("patch");
    assert_eq!(resp.status(), StatusCode::OK);

    eventually(
        "four sku.updated events accepted",
        Duration::from_secs(30),
        || partner.accepted().len() == 4,
    )
    .await;
    relay.shutdown().await;
    assert!(
        partner.attempts().iter().all(|a| a.verified),
        "every attempt verifies with the partner's secret"
    );
    let mut events: Vec<Value> = partner.accepted().into_values().collect();
    events.sort_by_key(|b| b["data"]["sequence"].as_i64());
    let seen: Vec<(i64, Value, Value)> = events
        .iter()
        .map(|b| {
            assert_eq!(b["type"], "sku.updated");
            assert_eq!(b["data"]["sku_id"], id.to_string());
            (
                b["data"]["sequence"].as_i64().expect("sequence"),
                b["data"]["wholesale_price"].clone(),
                b["data"]["active"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (1, json!(3100), json!(true)),
            (2, json!(3000), json!(true)),
            (3, json!(2900), json!(true)),
            (4, json!(2900), json!(false)),
        ]
    );
}
