//! Exactly-once keys: one key sent ten times at once is one effect, success
//! and business rejections are stored and replayed byte for byte, client and
//! server errors leave the key free, keys fingerprint canonically and belong
//! to a tenant, and an expired key still cannot allocate twice.

use std::sync::Arc;

use holdfast_server::demo;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use super::{allocate_path, order_with_line, position};
use crate::support::audit::assert_ledgers_match_positions;
use crate::support::{assert_problem, kestrel_m, key, Raw, TestServer, MIGRATIONS};

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
    first: &Raw,
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
    let (status, problem) = crate::support::read(r).await;
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
