//! The mutation engine over real HTTP and real Postgres: exactly-once keys,
//! compare-and-swap, atomic allocation, the credit check, batch push.

mod common;

use std::sync::Arc;

use common::{assert_problem, TestServer};
use holdfast_server::demo;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

const MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

fn kestrel_m() -> Uuid {
    demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M")
}

fn key() -> String {
    Uuid::now_v7().to_string()
}

/// Creates an order with one line of `qty` of `sku`; returns (order, line, version).
async fn order_with_line(
    s: &TestServer,
    token: &str,
    customer: &str,
    sku: Uuid,
    qty: i64,
) -> (Uuid, Uuid, i64) {
    let order = Uuid::now_v7();
    let line = Uuid::now_v7();
    let r = s
        .post(
            token,
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": demo::customer_id("acme", customer)}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let r = s
        .post(
            token,
            &format!("/v1/orders/{order}/lines"),
            &key(),
            json!({"id": line, "sku_id": sku, "qty_ordered": qty, "base_version": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    (order, line, r.json()["version"].as_i64().expect("version"))
}

fn allocate_path(order: Uuid, line: Uuid) -> String {
    format!("/v1/orders/{order}/lines/{line}/allocate")
}

async fn position(db: &PgPool, sku: Uuid) -> (i64, i64, i64) {
    sqlx::query_as("select on_hand, on_order, allocated from sku_positions where sku_id = $1")
        .bind(sku)
        .fetch_one(db)
        .await
        .expect("position")
}

/// The audit the whole design leans on: every position equals its ledgers.
async fn assert_ledgers_match_positions(db: &PgPool) {
    let bad: i64 = sqlx::query_scalar(
        "select count(*) from sku_positions p
          where p.allocated <> coalesce((select sum(delta) from allocation_ledger l
                                          where l.tenant_id = p.tenant_id and l.sku_id = p.sku_id), 0)
             or p.on_hand <> coalesce((select sum(on_hand_delta) from inventory_ledger l
                                        where l.tenant_id = p.tenant_id and l.sku_id = p.sku_id), 0)
             or p.allocated > p.on_hand + p.on_order",
    )
    .fetch_one(db)
    .await
    .expect("audit");
    assert_eq!(bad, 0, "positions disagree with their ledgers");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn two_desks_race_for_the_last_six(db: PgPool) {
    let s = Arc::new(TestServer::start(db.clone()).await);
    let dana = s.login("acme", "dana@acme.test").await;
    let priya = s.login("acme", "priya@acme.test").await;
    let (o1, l1, _) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 6).await;
    let (o2, l2, _) = order_with_line(&s, &priya, "Tokyo Distributor", kestrel_m(), 6).await;

    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let race = |token: String, order: Uuid, line: Uuid| {
        let s = s.clone();
        let barrier = barrier.clone();
        tokio::spawn(async move {
            barrier.wait().await;
            s.post(
                &token,
                &allocate_path(order, line),
                &key(),
                json!({"qty": 6}),
            )
            .await
        })
    };
    let a = race(dana, o1, l1);
    let b = race(priya, o2, l2);
    let (a, b) = (a.await.expect("a"), b.await.expect("b"));
    let mut statuses = [a.status.as_u16(), b.status.as_u16()];
    statuses.sort();
    assert_eq!(statuses, [200, 422]);
    let loser = if a.status == StatusCode::OK {
        b.json()
    } else {
        a.json()
    };
    assert_problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        &loser,
        422,
        "insufficient_ats",
    );
    assert_eq!(loser["ats_available"], 0);
    assert_eq!(loser["requested"], 6);
    let winner = if a.status == StatusCode::OK {
        a.json()
    } else {
        b.json()
    };
    assert_eq!(winner["ats_after"], 0);
    assert_eq!(position(&db, kestrel_m()).await, (6, 0, 6));
    assert_ledgers_match_positions(&db).await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn thirty_two_allocators_never_oversell(db: PgPool) {
    let s = Arc::new(TestServer::start(db.clone()).await);
    // The acme SKU with the most stock, so the storm lasts.
    let sku: Uuid = sqlx::query_scalar(
        "select p.sku_id from sku_positions p where p.tenant_id = $1
          order by p.on_hand + p.on_order - p.allocated desc limit 1",
    )
    .bind(demo::tenant_id("acme"))
    .fetch_one(&db)
    .await
    .expect("sku");
    let (on_hand, on_order, allocated) = position(&db, sku).await;
    let start_ats = on_hand + on_order - allocated;
    assert!(
        start_ats > 32,
        "fixture SKU should have stock for the storm, has {start_ats}"
    );
    let token = s.login("acme", "dana@acme.test").await;

    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (order, line, _) = order_with_line(&s, &token, "Tokyo Distributor", sku, 1000).await;
        let s = s.clone();
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = 0;
            loop {
                let r = s
                    .post(
                        &token,
                        &allocate_path(order, line),
                        &key(),
                        json!({"qty": 1}),
                    )
                    .await;
                match r.status.as_u16() {
                    200 => got += 1,
                    422 => {
                        assert_eq!(r.json()["code"], "insufficient_ats");
                        return got;
                    }
                    other => panic!("unexpected {other}: {}", r.json()),
                }
            }
        }));
    }
    let mut successes = 0;
    for t in tasks {
        successes += t.await.expect("task");
    }
    assert_eq!(successes, start_ats, "every unit sold exactly once");
    let (on_hand, on_order, allocated) = position(&db, sku).await;
    assert_eq!(allocated, on_hand + on_order);
    assert_ledgers_match_positions(&db).await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn one_key_ten_times_at_once_is_one_effect(db: PgPool) {
    let s = Arc::new(TestServer::start(db.clone()).await);
    let token = s.login("acme", "dana@acme.test").await;
    let (order, line, _) = order_with_line(&s, &token, "Austin Boutique", kestrel_m(), 6).await;
    let k = key();
    let barrier = Arc::new(tokio::sync::Barrier::new(10));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (s, token, k, barrier) = (s.clone(), token.clone(), k.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            s.post(&token, &allocate_path(order, line), &k, json!({"qty": 2}))
                .await
        }));
    }
    let mut bodies = Vec::new();
    for t in tasks {
        let r = t.await.expect("task");
        match r.status.as_u16() {
            200 => bodies.push(r.bytes),
            409 => {
                assert_eq!(r.json()["code"], "request_in_flight");
                assert!(r.headers.get("retry-after").is_some());
            }
            other => panic!("unexpected {other}: {}", r.json()),
        }
    }
    assert!(!bodies.is_empty());
    assert!(
        bodies.windows(2).all(|w| w[0] == w[1]),
        "every 200 is byte-identical"
    );
    assert_eq!(position(&db, kestrel_m()).await.2, 2, "allocated once");
    let ledger: i64 = sqlx::query_scalar("select count(*) from allocation_ledger")
        .fetch_one(&db)
        .await
        .expect("n");
    assert_eq!(ledger, 1);
}

/// Stored outcomes replay byte-for-byte, even after the world changed.
async fn assert_stored(
    s: &TestServer,
    token: &str,
    method: Method,
    path: &str,
    k: &str,
    body: &Value,
    first: &common::Raw,
) {
    let again = s.mutate(token, method, path, k, body).await;
    assert_eq!(again.status, first.status);
    assert_eq!(again.bytes, first.bytes, "replay must be the stored bytes");
    assert!(again.replayed(), "Idempotent-Replayed: true");
    assert!(!first.replayed());
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn success_and_business_rejections_are_stored(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let priya = s.login("acme", "priya@acme.test").await;
    let (order, line, v) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 4).await;

    // 2xx: a patch, replayed after someone else moved the order on.
    let patch = json!({"base_version": v, "set": {"notes": "call before delivery"}});
    let path = format!("/v1/orders/{order}");
    let k = key();
    let first = s.mutate(&dana, Method::PATCH, &path, &k, &patch).await;
    assert_eq!(first.status, StatusCode::OK);
    let v = first.json()["version"].as_i64().expect("v");
    let r = s
        .mutate(
            &priya,
            Method::PATCH,
            &path,
            &key(),
            &json!({"base_version": v, "set": {"customer_po": "PO-9"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_stored(&s, &dana, Method::PATCH, &path, &k, &patch, &first).await;

    // version_conflict: stale base.
    let stale = json!({"base_version": 1, "set": {"notes": "x"}});
    let k = key();
    let first = s.mutate(&dana, Method::PATCH, &path, &k, &stale).await;
    assert_problem(first.status, &first.json(), 409, "version_conflict");
    assert_stored(&s, &dana, Method::PATCH, &path, &k, &stale, &first).await;

    // over_allocation: more than the line ordered.
    let too_many = json!({"qty": 5});
    let k = key();
    let first = s
        .post(&dana, &allocate_path(order, line), &k, too_many.clone())
        .await;
    assert_problem(first.status, &first.json(), 422, "over_allocation");
    assert_eq!(first.json()["qty_ordered"], 4);
    assert_stored(
        &s,
        &dana,
        Method::POST,
        &allocate_path(order, line),
        &k,
        &too_many,
        &first,
    )
    .await;

    // insufficient_ats: stored even once stock would be there.
    sqlx::query("update sku_positions set allocated = 5 where sku_id = $1")
        .bind(kestrel_m())
        .execute(&db)
        .await
        .expect("squeeze");
    let k = key();
    let first = s
        .post(&dana, &allocate_path(order, line), &k, json!({"qty": 2}))
        .await;
    assert_problem(first.status, &first.json(), 422, "insufficient_ats");
    assert_eq!(first.json()["ats_available"], 1);
    sqlx::query("update sku_positions set allocated = 0 where sku_id = $1")
        .bind(kestrel_m())
        .execute(&db)
        .await
        .expect("free");
    assert_stored(
        &s,
        &dana,
        Method::POST,
        &allocate_path(order, line),
        &k,
        &json!({"qty": 2}),
        &first,
    )
    .await;
    assert_eq!(
        position(&db, kestrel_m()).await.2,
        0,
        "the replay did not allocate"
    );

    // credit_limit_exceeded: 4 × $42 = $168 fits $5,000; make the line huge.
    let current = s.get(&path, &dana).await.1;
    let v = current["version"].as_i64().expect("v");
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &format!("{path}/lines/{line}"),
            &key(),
            &json!({"base_version": v, "qty_ordered": 200}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let v = r.json()["version"].as_i64().expect("v");
    let confirm = json!({"base_version": v});
    let k = key();
    let first = s
        .post(&dana, &format!("{path}/confirm"), &k, confirm.clone())
        .await;
    assert_problem(first.status, &first.json(), 422, "credit_limit_exceeded");
    assert_eq!(first.json()["credit_limit"], 500_000);
    assert_eq!(first.json()["order_amount"], 200 * 4200);
    assert_stored(
        &s,
        &dana,
        Method::POST,
        &format!("{path}/confirm"),
        &k,
        &confirm,
        &first,
    )
    .await;

    // invalid_state: cancel, then try to patch at the right version.
    let r = s
        .post(
            &dana,
            &format!("{path}/cancel"),
            &key(),
            json!({"base_version": v}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let v = r.json()["version"].as_i64().expect("v");
    let edit = json!({"base_version": v, "set": {"notes": "too late"}});
    let k = key();
    let first = s.mutate(&dana, Method::PATCH, &path, &k, &edit).await;
    assert_problem(first.status, &first.json(), 422, "invalid_state");
    assert_eq!(first.json()["order_status"], "cancelled");
    assert_stored(&s, &dana, Method::PATCH, &path, &k, &edit, &first).await;

    let metrics = s
        .http
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    for name in [
        "holdfast_idempotent_replays_total",
        "holdfast_version_conflicts_total",
        "holdfast_ats_rejections_total",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(name)),
            "{name} missing from /metrics"
        );
    }
}

/// A rejected attempt that is not stored leaves the key free: the same key,
/// once the cause is fixed, runs for real.
async fn assert_key_free(s: &TestServer, token: &str, path: &str, k: &str, body: Value) {
    let r = s.post(token, path, k, body).await;
    assert!(
        r.status.is_success(),
        "retry with the same key should run: {} {}",
        r.status,
        r.json()
    );
    assert!(!r.replayed());
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn client_errors_are_not_stored(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let ops = s.login("acme", "ops@acme.test").await;
    let customer = demo::customer_id("acme", "Austin Boutique");

    // 400: a bad body, then the right one under the same key.
    let (order, k) = (Uuid::now_v7(), key());
    let r = s
        .post(
            &dana,
            "/v1/orders",
            &k,
            json!({"id": order, "customer_id": customer, "notez": "typo"}),
        )
        .await;
    assert_problem(r.status, &r.json(), 400, "validation_failed");
    assert_eq!(r.json()["errors"][0]["field"], "notez");
    assert_key_free(
        &s,
        &dana,
        "/v1/orders",
        &k,
        json!({"id": order, "customer_id": customer}),
    )
    .await;

    // 401: no token.
    let (order, k) = (Uuid::now_v7(), key());
    let body = json!({"id": order, "customer_id": customer});
    let r = s
        .http
        .post(s.url("/v1/orders"))
        .header("idempotency-key", &k)
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // 403: an operator may not take orders.
    let r = s.post(&ops, "/v1/orders", &k, body.clone()).await;
    assert_problem(r.status, &r.json(), 403, "forbidden");
    // 404: an unknown customer.
    let r = s
        .post(
            &dana,
            "/v1/orders",
            &k,
            json!({"id": order, "customer_id": Uuid::now_v7()}),
        )
        .await;
    assert_problem(r.status, &r.json(), 404, "not_found");
    // 415: not JSON.
    let r = s
        .http
        .post(s.url("/v1/orders"))
        .bearer_auth(&dana)
        .header("idempotency-key", &k)
        .header("content-type", "text/plain")
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // 413: too large.
    let big = json!({"id": order, "customer_id": customer, "notes": "x".repeat(1_100_000)});
    let r = s.post(&dana, "/v1/orders", &k, big).await;
    assert_problem(r.status, &r.json(), 413, "payload_too_large");
    assert_key_free(&s, &dana, "/v1/orders", &k, body).await;

    // Missing and invalid keys.
    let r = s
        .http
        .post(s.url("/v1/orders"))
        .bearer_auth(&dana)
        .json(&json!({}))
        .send()
        .await
        .expect("send");
    let (status, problem) = common::read(r).await;
    assert_problem(status, &problem, 400, "idempotency_key_missing");
    let r = s
        .post(
            &dana,
            "/v1/orders",
            &"k".repeat(256),
            json!({"id": Uuid::now_v7(), "customer_id": customer}),
        )
        .await;
    assert_problem(r.status, &r.json(), 400, "idempotency_key_invalid");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn server_errors_are_not_stored(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    // An outage in the middle of the work: a trigger that fails the line insert.
    sqlx::raw_sql(
        "create function fail_line() returns trigger language plpgsql as
         $$ begin raise exception 'disk on fire'; end $$;
         create trigger fail_line before insert on order_lines for each row execute function fail_line();",
    )
    .execute(&db)
    .await
    .expect("trigger");
    let order = Uuid::now_v7();
    let r = s
        .post(
            &dana,
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": demo::customer_id("acme", "Austin Boutique")}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let k = key();
    let body =
        json!({"id": Uuid::now_v7(), "sku_id": kestrel_m(), "qty_ordered": 2, "base_version": 1});
    let path = format!("/v1/orders/{order}/lines");
    let r = s.post(&dana, &path, &k, body.clone()).await;
    assert_problem(r.status, &r.json(), 500, "internal");
    assert!(
        !String::from_utf8_lossy(&r.bytes).contains("disk on fire"),
        "nothing leaked"
    );
    let (_, o) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(o["version"], 1, "rolled back whole");
    sqlx::query("drop trigger fail_line on order_lines")
        .execute(&db)
        .await
        .expect("drop");
    assert_key_free(&s, &dana, &path, &k, body).await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn keys_fingerprint_canonically_and_belong_to_a_tenant(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let gina = s.login("globex", "gina@globex.test").await;
    let order = Uuid::now_v7();
    let customer = demo::customer_id("acme", "Austin Boutique");
    let k = key();
    let first = s
        .post(
            &dana,
            "/v1/orders",
            &k,
            json!({"id": order, "customer_id": customer, "notes": "a"}),
        )
        .await;
    assert_eq!(first.status, StatusCode::CREATED);

    // Same request, keys reordered and spaced differently: a replay.
    let resp = s
        .http
        .post(s.url("/v1/orders"))
        .bearer_auth(&dana)
        .header("idempotency-key", &k)
        .header("content-type", "application/json")
        .body(format!(
            "{{ \"notes\" : \"a\",\n \"customer_id\": \"{customer}\", \"id\": \"{order}\" }}"
        ))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    assert_eq!(resp.bytes().await.expect("bytes").to_vec(), first.bytes);

    // Same key, different request.
    let r = s
        .post(
            &dana,
            "/v1/orders",
            &k,
            json!({"id": order, "customer_id": customer, "notes": "b"}),
        )
        .await;
    assert_problem(r.status, &r.json(), 422, "idempotency_key_reused");

    // Another tenant's identical key is its own.
    let globex_order = Uuid::now_v7();
    let r = s.post(&gina, "/v1/orders", &k, json!({"id": globex_order, "customer_id": demo::customer_id("globex", "Globex Retail West")})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    assert!(!r.replayed());
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_allocation_retried_after_its_key_expired_does_not_double(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let (order, line, _) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 6).await;
    let k = key();
    let first = s
        .post(&dana, &allocate_path(order, line), &k, json!({"qty": 4}))
        .await;
    assert_eq!(first.status, StatusCode::OK);

    // Age every key past the retention and let the reaper take them.
    sqlx::query("update idempotency_keys set created_at = now() - interval '73 hours'")
        .execute(&db)
        .await
        .expect("age");
    let reaped = holdfast_server::engine::idempotency::reap_expired(&db, 72, 2)
        .await
        .expect("reap");
    assert!(
        reaped >= 3,
        "create, line, allocate keys reaped in small batches"
    );

    let late = s
        .post(&dana, &allocate_path(order, line), &k, json!({"qty": 4}))
        .await;
    assert_eq!(late.status, StatusCode::OK, "{}", late.json());
    assert!(late.replayed());
    assert_eq!(late.json()["order"]["lines"][0]["qty_allocated"], 4);
    assert_eq!(late.json()["ats_after"], 2);
    assert_eq!(position(&db, kestrel_m()).await.2, 4, "not allocated twice");
    assert_ledgers_match_positions(&db).await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn stale_base_version_gets_the_whole_current_document(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let priya = s.login("acme", "priya@acme.test").await;
    let (order, _, v) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 2).await;
    let path = format!("/v1/orders/{order}");
    let r = s
        .mutate(
            &priya,
            Method::PATCH,
            &path,
            &key(),
            &json!({"base_version": v, "set": {"customer_po": "PRIYA-1"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let theirs = r.json();

    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &path,
            &key(),
            &json!({"base_version": v, "set": {"customer_po": "DANA-1"}}),
        )
        .await;
    let problem = r.json();
    assert_problem(r.status, &problem, 409, "version_conflict");
    assert_eq!(problem["your_base_version"], v);
    assert_eq!(problem["current"], theirs, "the whole current order");
    assert_eq!(problem["current"]["updated_by_name"], "Priya Raman");
    let (_, now) = s.get(&path, &dana).await;
    assert_eq!(now, theirs, "the rejected change bumped nothing");

    // A create whose id exists under another key: never a second order.
    let r = s
        .post(
            &dana,
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": demo::customer_id("acme", "Tokyo Distributor")}),
        )
        .await;
    assert_problem(r.status, &r.json(), 409, "version_conflict");
    assert_eq!(r.json()["your_base_version"], 0);
    assert_eq!(
        r.json()["current"]["customer_id"],
        demo::customer_id("acme", "Austin Boutique").to_string()
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn concurrent_confirms_never_exceed_the_credit_limit(db: PgPool) {
    let s = Arc::new(TestServer::start(db.clone()).await);
    let dana = s.login("acme", "dana@acme.test").await;
    let priya = s.login("acme", "priya@acme.test").await;
    // Two orders of $3,000 each for a $5,000 customer: either fits, not both.
    let sku = demo::sku_id("acme", "Tern Rain Shell", "Ecru", "S"); // $96 wholesale
    let (o1, _, v1) = order_with_line(&s, &dana, "Austin Boutique", sku, 31).await;
    let (o2, _, v2) = order_with_line(&s, &priya, "Austin Boutique", sku, 31).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let go = |token: String, order: Uuid, v: i64| {
        let (s, barrier) = (s.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            s.post(
                &token,
                &format!("/v1/orders/{order}/confirm"),
                &key(),
                json!({"base_version": v}),
            )
            .await
        })
    };
    let (a, b) = (go(dana.clone(), o1, v1), go(priya, o2, v2));
    let (a, b) = (a.await.expect("a"), b.await.expect("b"));
    let mut statuses = [a.status.as_u16(), b.status.as_u16()];
    statuses.sort();
    assert_eq!(statuses, [200, 422], "{} / {}", a.json(), b.json());
    let (winner, loser) = if a.status == StatusCode::OK {
        (a.json(), b.json())
    } else {
        (b.json(), a.json())
    };
    assert_eq!(loser["code"], "credit_limit_exceeded");
    assert_eq!(loser["open_amount"], 31 * 9600);
    assert_eq!(winner["status"], "confirmed");
    let invoice = winner["invoice_id"].as_str().expect("invoice id");
    let (status, inv) = s.get(&format!("/v1/invoices/{invoice}"), &dana).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(inv["amount"], 31 * 9600);
    assert_eq!(inv["status"], "awaiting_payment");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn cancel_releases_everything_and_events_are_gap_free(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let (order, line, _) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 5).await;
    let r = s
        .post(
            &dana,
            &allocate_path(order, line),
            &key(),
            json!({"qty": 3}),
        )
        .await;
    let v = r.json()["order"]["version"].as_i64().expect("v");
    assert_eq!(v, 3, "create 1, line 2, allocate 3");
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/lines/{line}/release"),
            &key(),
            json!({"qty": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["ats_after"], 4);
    let v = r.json()["order"]["version"].as_i64().expect("v");
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/cancel"),
            &key(),
            json!({"base_version": v}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["status"], "cancelled");
    assert_eq!(r.json()["lines"][0]["qty_allocated"], 0);
    assert_eq!(position(&db, kestrel_m()).await.2, 0);
    assert_ledgers_match_positions(&db).await;

    let events: Vec<(String, i64, Value)> = sqlx::query_as(
        "select event_type, sequence, payload from outbox where aggregate_id = $1 order by sequence",
    )
    .bind(order)
    .fetch_all(&db)
    .await
    .expect("events");
    let types: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        types,
        [
            "order.created",
            "order.updated",
            "order.line_allocated",
            "order.line_released",
            "order.cancelled"
        ]
    );
    for (i, (_, seq, payload)) in events.iter().enumerate() {
        assert_eq!(*seq, i as i64 + 1, "gap-free from 1");
        assert_eq!(payload["data"]["sequence"], *seq);
        assert_eq!(payload["data"]["order_id"], order.to_string());
        assert_eq!(
            payload["data"]["version"], *seq,
            "one event per version here"
        );
    }
    let changes: i64 = sqlx::query_scalar("select count(*) from changes where doc_id = $1")
        .bind(order)
        .fetch_one(&db)
        .await
        .expect("n");
    assert_eq!(changes, 5, "one change row per committed order change");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn batch_push_matches_rest_and_replays(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let order = Uuid::now_v7();
    let line = Uuid::now_v7();
    let items = json!([
        {"idempotency_key": "b-create", "method": "POST", "path": "/v1/orders",
         "body": {"id": order, "customer_id": demo::customer_id("acme", "Austin Boutique")}},
        {"idempotency_key": "b-line", "method": "POST", "path": format!("/v1/orders/{order}/lines"),
         "body": {"id": line, "sku_id": kestrel_m(), "qty_ordered": 4, "base_version": 1}},
        {"idempotency_key": "b-alloc", "method": "POST", "path": allocate_path(order, line), "body": {"qty": 4}},
        {"idempotency_key": "b-patch", "method": "PATCH", "path": format!("/v1/orders/{order}"),
         "body": {"base_version": 3, "set": {"customer_po": "FAX-0412"}}},
    ]);
    let push = |items: Value| s.push(&dana, items);
    let (status, first) = push(items.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let results = first["results"].as_array().expect("results");
    let statuses: Vec<i64> = results
        .iter()
        .map(|r| r["status"].as_i64().expect("s"))
        .collect();
    assert_eq!(statuses, [201, 201, 200, 200], "{first}");
    assert!(results.iter().all(|r| r["replayed"] == false));
    assert_eq!(results[3]["body"]["customer_po"], "FAX-0412");
    assert_eq!(results[3]["body"]["version"], 4);

    let (_, second) = push(items.clone()).await;
    for (a, b) in results
        .iter()
        .zip(second["results"].as_array().expect("results"))
    {
        assert_eq!(b["replayed"], true);
        assert_eq!((&a["status"], &a["body"]), (&b["status"], &b["body"]));
    }
    assert_eq!(position(&db, kestrel_m()).await.2, 4, "allocated once");

    // The same key through REST replays the batch's answer.
    let r = s
        .post(
            &dana,
            &allocate_path(order, line),
            "b-alloc",
            json!({"qty": 4}),
        )
        .await;
    assert!(r.replayed());
    assert_eq!(r.json(), results[2]["body"]);

    // A failing item blocks later items on its order only; a malformed item
    // gets its own 400.
    let other = Uuid::now_v7();
    let items = json!([
        {"idempotency_key": "c-stale", "method": "PATCH", "path": format!("/v1/orders/{order}"),
         "body": {"base_version": 1, "set": {"notes": "stale"}}},
        {"idempotency_key": "c-after", "method": "PATCH", "path": format!("/v1/orders/{order}"),
         "body": {"base_version": 4, "set": {"notes": "would work"}}},
        {"idempotency_key": "c-bad", "method": "POST", "path": "/v1/orders", "body": {"id": other, "customer": "?"}},
        {"idempotency_key": "c-other", "method": "POST", "path": "/v1/orders",
         "body": {"id": Uuid::now_v7(), "customer_id": demo::customer_id("acme", "Tokyo Distributor")}},
    ]);
    let (status, out) = push(items).await;
    assert_eq!(status, StatusCode::OK);
    let r = out["results"].as_array().expect("results");
    assert_eq!(r[0]["status"], 409);
    assert_eq!(r[0]["body"]["code"], "version_conflict");
    assert_eq!(r[1]["status"], 424);
    assert_eq!(r[1]["body"]["code"], "blocked_by_earlier");
    assert_eq!(r[1]["body"]["blocked_by"], "c-stale");
    assert_eq!(r[2]["status"], 400);
    assert_eq!(r[2]["body"]["code"], "validation_failed");
    assert_eq!(r[3]["status"], 201, "other orders run as usual");

    // 424 is not stored: the blocked item, sent alone, runs.
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &format!("/v1/orders/{order}"),
            "c-after",
            &json!({"base_version": 4, "set": {"notes": "would work"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert!(!r.replayed());

    // Bounds: 0 and 501 items.
    let (status, p) = push(json!([])).await;
    assert_problem(status, &p, 400, "validation_failed");
    let many: Vec<Value> = (0..501).map(|i| json!({"idempotency_key": format!("m{i}"), "method": "POST", "path": "/v1/orders", "body": {}})).collect();
    let (status, p) = push(Value::Array(many)).await;
    assert_problem(status, &p, 400, "validation_failed");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_duplicate_of_a_stuck_request_answers_in_flight(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let (order, line, _) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 6).await;
    let k = key();
    // Another request holding the key, not yet committed.
    let mut held = db.begin().await.expect("begin");
    sqlx::query("insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body) values ($1, $2, 'x', 0, '')")
        .bind(demo::tenant_id("acme"))
        .bind(&k)
        .execute(&mut *held)
        .await
        .expect("hold key");
    let r = s
        .post(&dana, &allocate_path(order, line), &k, json!({"qty": 1}))
        .await;
    assert_problem(r.status, &r.json(), 409, "request_in_flight");
    assert_eq!(r.headers["retry-after"], "1");
    held.rollback().await.expect("rollback");
    // The first one died: the key is free and the retry runs.
    let r = s
        .post(&dana, &allocate_path(order, line), &k, json!({"qty": 1}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert!(!r.replayed());

    let metrics = s
        .http
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("holdfast_request_in_flight_total"),
        "{metrics}"
    );
}

/// Allocation answers with a document it builds from the statements it ran
/// (no re-read): it must be exactly what a read returns afterwards, down to
/// who changed it last, and its events must be the ones `enqueue_in_tx`
/// builds. A shortfall writes nothing at all.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn allocation_answers_the_document_a_read_returns(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let priya = s.login("acme", "priya@acme.test").await;
    let other_sku = demo::sku_id("acme", "Tern Rain Shell", "Ecru", "S");
    let (order, line, v) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 5).await;
    let second = Uuid::now_v7();
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/lines"),
            &key(),
            json!({"id": second, "sku_id": other_sku, "qty_ordered": 3, "base_version": v}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &format!("/v1/orders/{order}"),
            &key(),
            &json!({"base_version": v + 1, "set": {"customer_po": "PO-7", "notes": "rush",
                    "ship_window_start": "2027-01-04", "ship_window_end": "2027-01-08"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());

    let (_, _, allocated_before) = position(&db, kestrel_m()).await;
    let r = s
        .post(
            &priya,
            &allocate_path(order, line),
            &key(),
            json!({"qty": 2}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let (status, read) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        r.json()["order"],
        read,
        "the answer is the document as read"
    );
    assert_eq!(read["updated_by_name"], "Priya Raman");
    assert_eq!(read["version"], v + 3);
    assert_eq!(read["lines"][0]["qty_allocated"], 2);
    assert_eq!(read["lines"][1]["qty_allocated"], 0);
    let (on_hand, on_order, allocated) = position(&db, kestrel_m()).await;
    assert_eq!(allocated, allocated_before + 2);
    assert_eq!(r.json()["ats_after"], on_hand + on_order - allocated);

    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/lines/{line}/release"),
            &key(),
            json!({"qty": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let (_, read) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(r.json()["order"], read);
    assert_eq!(read["updated_by_name"], "Dana Whitfield");
    assert_eq!(read["lines"][0]["qty_allocated"], 1);
    assert_ledgers_match_positions(&db).await;

    // The events, as enqueue_in_tx would have written them.
    let events: Vec<(String, String, i64, Value)> = sqlx::query_as(
        "select event_type, aggregate_kind, sequence, payload from outbox
          where aggregate_id = any($1) and event_type in
                ('order.line_allocated', 'order.line_released', 'sku.ats_changed')
          order by id",
    )
    .bind(vec![order, kestrel_m()])
    .fetch_all(&db)
    .await
    .expect("events");
    let tenant = demo::tenant_id("acme").to_string();
    let mine: Vec<&(String, String, i64, Value)> = events
        .iter()
        .filter(|e| e.1 == "order" || e.3["data"]["sku_id"] == kestrel_m().to_string())
        .collect();
    let types: Vec<&str> = mine.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        types[types.len() - 4..],
        [
            "sku.ats_changed",
            "order.line_allocated",
            "sku.ats_changed",
            "order.line_released"
        ]
    );
    for (event_type, kind, seq, payload) in &mine[mine.len() - 4..] {
        assert_eq!(payload["type"], event_type.as_str());
        let stamp = payload["timestamp"].as_str().expect("timestamp");
        assert!(
            chrono::DateTime::parse_from_rfc3339(stamp).is_ok() && stamp.len() == 24,
            "{stamp}"
        );
        let data = payload["data"].as_object().expect("data");
        assert_eq!(data["tenant_id"], tenant.as_str());
        assert_eq!(data["sequence"], *seq);
        let mut keys: Vec<&str> = data.keys().map(String::as_str).collect();
        keys.sort_unstable();
        if kind == "order" {
            assert_eq!(
                keys,
                [
                    "ats_after",
                    "line_id",
                    "order_id",
                    "qty",
                    "sequence",
                    "sku_id",
                    "tenant_id",
                    "version"
                ]
            );
            assert_eq!(data["line_id"], line.to_string());
            assert_eq!(data["order_id"], order.to_string());
        } else {
            assert_eq!(keys, ["ats", "sequence", "sku_id", "tenant_id", "version"]);
        }
    }
    let released = &mine[mine.len() - 1].3["data"];
    assert_eq!(
        released["qty"], 1,
        "the event reports the quantity, not the delta"
    );
    assert_eq!(released["version"], v + 4);

    // Not enough stock: 422 with the ATS now, and nothing else written.
    let counts = |db: PgPool| async move {
        sqlx::query_as::<_, (i64, i64, i64, i64)>(
            "select (select count(*) from outbox), (select count(*) from changes),
                    (select count(*) from allocation_ledger), (select version from orders where id = $1)",
        )
        .bind(order)
        .fetch_one(&db)
        .await
        .expect("counts")
    };
    let before = counts(db.clone()).await;
    let (on_hand, on_order, allocated) = position(&db, other_sku).await;
    let ats = on_hand + on_order - allocated;
    sqlx::query("update sku_positions set on_hand = allocated, on_order = 0 where sku_id = $1")
        .bind(other_sku)
        .execute(&db)
        .await
        .expect("drain");
    let r = s
        .post(
            &dana,
            &allocate_path(order, second),
            &key(),
            json!({"qty": 1}),
        )
        .await;
    assert_problem(r.status, &r.json(), 422, "insufficient_ats");
    assert_eq!(r.json()["ats_available"], 0);
    assert_eq!(
        counts(db.clone()).await,
        before,
        "a shortfall writes nothing"
    );
    assert!(ats > 0, "the SKU had stock before it was drained");
}

/// Push applies a chunk without savepoints and falls back to one per item
/// when an item's effects must be undone alone: the answers, the order of
/// items and blocked_by_earlier are the same either way, and a key whose
/// answer is not stored stays free.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn push_falls_back_to_savepoints_without_changing_answers(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let austin = demo::customer_id("acme", "Austin Boutique");
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let line = Uuid::now_v7();
    let missing_line = Uuid::now_v7();
    let push = |items: Value| s.push(&dana, items);
    let statuses = |out: &Value| -> Vec<i64> {
        out["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| r["status"].as_i64().expect("status"))
            .collect()
    };
    let keys_stored = |keys: Vec<&'static str>| {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "select key from idempotency_keys where key = any($1) order by key",
            )
            .bind(keys)
            .fetch_all(&db)
            .await
            .expect("keys")
        }
    };

    // A 404 the handler finds after claiming its key (no such line).
    let (status, out) = push(json!([
        {"idempotency_key": "f-a", "method": "POST", "path": "/v1/orders",
         "body": {"id": a, "customer_id": austin}},
        {"idempotency_key": "f-line", "method": "POST", "path": format!("/v1/orders/{a}/lines"),
         "body": {"id": line, "sku_id": kestrel_m(), "qty_ordered": 4, "base_version": 1}},
        {"idempotency_key": "f-404", "method": "POST", "path": allocate_path(a, missing_line),
         "body": {"qty": 1}},
        {"idempotency_key": "f-blocked", "method": "POST", "path": allocate_path(a, line),
         "body": {"qty": 1}},
        {"idempotency_key": "f-b", "method": "POST", "path": "/v1/orders",
         "body": {"id": b, "customer_id": austin}},
    ]))
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(statuses(&out), [201, 201, 404, 424, 201], "{out}");
    assert_eq!(out["results"][3]["body"]["blocked_by"], "f-404");
    assert_eq!(
        keys_stored(vec!["f-a", "f-line", "f-404", "f-blocked", "f-b"]).await,
        ["f-a", "f-b", "f-line"],
        "unstored answers leave their keys free"
    );
    let (_, doc) = s.get(&format!("/v1/orders/{a}"), &dana).await;
    assert_eq!(doc["version"], 2, "create and line, each once");
    assert_eq!(position(&db, kestrel_m()).await.2, 0, "nothing allocated");

    // A key held by a running request: request_in_flight after the bounded
    // wait, the others run.
    let k = "f-held";
    let mut held = db.begin().await.expect("begin");
    sqlx::query("insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body) values ($1, $2, 'x', 0, '')")
        .bind(demo::tenant_id("acme"))
        .bind(k)
        .execute(&mut *held)
        .await
        .expect("hold key");
    let (c, d) = (Uuid::now_v7(), Uuid::now_v7());
    let (status, out) = push(json!([
        {"idempotency_key": "f-c", "method": "POST", "path": "/v1/orders",
         "body": {"id": c, "customer_id": austin}},
        {"idempotency_key": k, "method": "POST", "path": allocate_path(a, line), "body": {"qty": 1}},
        {"idempotency_key": "f-d", "method": "POST", "path": "/v1/orders",
         "body": {"id": d, "customer_id": austin}},
    ]))
    .await;
    held.rollback().await.expect("rollback");
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(statuses(&out), [201, 409, 201], "{out}");
    assert_eq!(out["results"][1]["body"]["code"], "request_in_flight");

    // One key twice in one push: the second replays the first (whose answer
    // is not yet on its key row), a different request under it is refused.
    let e = Uuid::now_v7();
    let create_e = json!({"idempotency_key": "f-dup", "method": "POST", "path": "/v1/orders",
                          "body": {"id": e, "customer_id": austin}});
    let (status, out) = push(json!([
        create_e,
        create_e,
        {"idempotency_key": "f-dup", "method": "POST", "path": "/v1/orders",
         "body": {"id": Uuid::now_v7(), "customer_id": austin}},
    ]))
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(statuses(&out), [201, 201, 422], "{out}");
    let r = &out["results"];
    assert_eq!(
        (&r[0]["replayed"], &r[1]["replayed"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(r[0]["body"], r[1]["body"]);
    assert_eq!(r[2]["body"]["code"], "idempotency_key_reused");
    let replay = s
        .post(
            &dana,
            "/v1/orders",
            "f-dup",
            json!({"id": e, "customer_id": austin}),
        )
        .await;
    assert!(replay.replayed());
    assert_eq!(replay.json(), r[0]["body"], "the answer was stored");

    // More than one transaction's worth, with a 404 (no such customer) in the
    // second chunk: each chunk commits its own items, in order.
    let ids: Vec<Uuid> = (0..150).map(|_| Uuid::now_v7()).collect();
    let items: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let customer = if i == 120 { Uuid::now_v7() } else { austin };
            json!({"idempotency_key": format!("many-{i}"), "method": "POST", "path": "/v1/orders",
                   "body": {"id": id, "customer_id": customer}})
        })
        .collect();
    let (status, out) = push(Value::Array(items.clone())).await;
    assert_eq!(status, StatusCode::OK);
    let got = statuses(&out);
    assert_eq!(got.len(), 150);
    for (i, st) in got.iter().enumerate() {
        assert_eq!(*st, if i == 120 { 404 } else { 201 }, "item {i}");
        assert_eq!(out["results"][i]["idempotency_key"], format!("many-{i}"));
    }
    let created: i64 = sqlx::query_scalar("select count(*) from orders where id = any($1)")
        .bind(&ids)
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(created, 149);
    // The same push again: every stored answer replays, the 404 runs again.
    let (_, again) = push(Value::Array(items)).await;
    for (i, r) in again["results"]
        .as_array()
        .expect("results")
        .iter()
        .enumerate()
    {
        assert_eq!(r["replayed"], i != 120, "item {i}");
        assert_eq!(r["body"], out["results"][i]["body"], "item {i}");
    }
    assert_ledgers_match_positions(&db).await;
}
