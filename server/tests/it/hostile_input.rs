//! What schemathesis (scripts/schemathesis.sh) found, kept as regressions:
//! input the database cannot hold or compute must be a 4xx, never a 500.

use holdfast_server::{demo, AppState};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{assert_problem, key, order_with_line, TestServer, MIGRATIONS};

fn field(body: &Value) -> &str {
    body["errors"][0]["field"].as_str().unwrap_or_default()
}

/// Postgres text cannot hold U+0000: every way in answers 400 (or 404 for a
/// path), naming the field, and nothing reaches the database.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn nul_characters_are_refused_not_a_500(db: PgPool) {
    let s = TestServer::start_with(AppState::new(db).allowing_private_targets(true)).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let ops = s.login("acme", "ops@acme.test").await;
    let customer = demo::customer_id("acme", "Tokyo Distributor");

    let (status, body) = s
        .call(
            Method::POST,
            "/v1/sessions",
            None,
            Some(json!({"tenant": "ac\u{0}me", "email": "dana@acme.test",
                         "password": demo::DEMO_PASSWORD, "device_name": "desk"})),
        )
        .await;
    assert_problem(status, &body, 400, "validation_failed");
    assert_eq!(field(&body), "tenant");

    let order = Uuid::now_v7();
    let r = s
        .post(
            &dana,
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": customer, "customer_po": "PO\u{0}1"}),
        )
        .await;
    assert_problem(r.status, &r.json(), 400, "validation_failed");
    assert_eq!(field(&r.json()), "customer_po");
    let r = s
        .post(
            &dana,
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": customer}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &format!("/v1/orders/{order}"),
            &key(),
            &json!({"base_version": 1, "set": {"notes": "a\u{0}b"}}),
        )
        .await;
    assert_problem(r.status, &r.json(), 400, "validation_failed");
    assert_eq!(field(&r.json()), "set.notes");

    let (status, body) = s
        .call(
            Method::POST,
            "/v1/admin/partners",
            Some(&ops),
            Some(json!({"name": "p\u{0}", "url": "http://127.0.0.1:9/", "event_types": ["*"]})),
        )
        .await;
    assert_problem(status, &body, 400, "validation_failed");
    assert_eq!(field(&body), "name");

    let (status, body) = s.get("/v1/skus?q=a%00b", &dana).await;
    assert_problem(status, &body, 400, "validation_failed");
    assert_eq!(field(&body), "q");
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/webhooks/ac%00me/warehouse",
            None,
            Some(json!({})),
        )
        .await;
    assert_problem(status, &body, 404, "not_found");

    // In a batch each item is judged alone: the NUL items get their own 400,
    // the good one (on an order they do not touch) runs.
    let good = key();
    let (other, another) = (Uuid::now_v7(), Uuid::now_v7());
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/sync/push",
            Some(&dana),
            Some(json!({"mutations": [
                {"idempotency_key": "k\u{0}", "method": "POST",
                 "path": format!("/v1/orders/{other}/cancel"), "body": {"base_version": 1}},
                {"idempotency_key": key(), "method": "PATCH", "path": format!("/v1/orders/{another}"),
                 "body": {"base_version": 1, "set": {"notes": "\u{0}"}}},
                {"idempotency_key": good, "method": "PATCH", "path": format!("/v1/orders/{order}"),
                 "body": {"base_version": 1, "set": {"notes": "fine"}}},
            ]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let results = body["results"].as_array().expect("results");
    assert_eq!(results[0]["status"], 400, "{body}");
    assert_eq!(results[0]["body"]["code"], "idempotency_key_invalid");
    assert_eq!(results[1]["status"], 400, "{body}");
    assert_eq!(results[1]["body"]["errors"][0]["field"], "set.notes");
    assert_eq!(results[2]["status"], 200, "{body}");
}

/// Σ qty_ordered × unit_price past what bigint holds: the line that would
/// take the order's total there answers 400 naming `qty_ordered` (never an
/// overflow, a 500), and an order whose total fits still confirms — or is
/// refused by the credit check — without one.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_order_total_past_bigint_cannot_overflow_confirm(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", "dana@acme.test").await;
    // On no price list: both customers pay its wholesale price.
    let sku = demo::sku_id("acme", "Merlin Oxford Shirt", "Washed Indigo", "M");
    let most = i64::MAX / 3600;
    for (customer, confirmed) in [("Tokyo Distributor", 200), ("Austin Boutique", 422)] {
        let order = Uuid::now_v7();
        let r = s
            .post(
                &dana,
                "/v1/orders",
                &key(),
                json!({"id": order, "customer_id": demo::customer_id("acme", customer)}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
        let line = |qty: i64| json!({"id": Uuid::now_v7(), "sku_id": sku, "qty_ordered": qty, "base_version": 1});
        for qty in [i64::MAX, most + 1] {
            let r = s
                .post(
                    &dana,
                    &format!("/v1/orders/{order}/lines"),
                    &key(),
                    line(qty),
                )
                .await;
            assert_problem(r.status, &r.json(), 400, "validation_failed");
            assert_eq!(field(&r.json()), "qty_ordered");
        }
        let r = s
            .post(
                &dana,
                &format!("/v1/orders/{order}/lines"),
                &key(),
                line(most),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
        assert_eq!(r.json()["total"], most * 3600);
        let r = s
            .post(
                &dana,
                &format!("/v1/orders/{order}/confirm"),
                &key(),
                json!({"base_version": 2}),
            )
            .await;
        assert_eq!(r.status.as_u16(), confirmed, "{}", r.json());
    }
}

/// Sends `body` as it is, bytes and all (a `Value` could not hold a
/// duplicate member).
async fn raw_post(
    s: &TestServer,
    token: Option<&str>,
    path: &str,
    key: Option<&str>,
    body: &str,
) -> (StatusCode, Value) {
    let mut req = s
        .http
        .post(s.url(path))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(key) = key {
        req = req.header("idempotency-key", key);
    }
    crate::support::read(req.send().await.expect("send")).await
}

/// Before: `{"qty": 1, "qty": 5}` allocated 5 (serde_json keeps the last
/// member; another parser on the way would have read 1). Now every transport
/// answers 400 malformed_json, nothing changes, and the key stays free.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_member_named_twice_is_refused_on_every_transport(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let (order, line) = order_with_line(&s, &dana, sku, 5).await;
    let allocate = format!("/v1/orders/{order}/lines/{line}/allocate");

    let k = key();
    let (status, body) = raw_post(
        &s,
        Some(&dana),
        &allocate,
        Some(&k),
        r#"{"qty": 1, "qty": 5}"#,
    )
    .await;
    assert_problem(status, &body, 400, "malformed_json");
    let push = format!(
        r#"{{"mutations": [{{"idempotency_key": "{}", "method": "POST", "path": "{allocate}", "body": {{"qty": 5, "qty": 1}}}}]}}"#,
        key()
    );
    let (status, body) = raw_post(&s, Some(&dana), "/v1/sync/push", None, &push).await;
    assert_problem(status, &body, 400, "malformed_json");
    let (status, body) = raw_post(
        &s,
        None,
        "/v1/sessions",
        None,
        r#"{"tenant": "acme", "tenant": "globex", "email": "dana@acme.test", "password": "holdfast-demo", "device_name": "d"}"#,
    )
    .await;
    assert_problem(status, &body, 400, "malformed_json");

    let (_, current) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(current["version"], 2, "nothing applied: {current}");
    assert_eq!(current["lines"][0]["qty_allocated"], 0);
    // The refused request stored nothing under its key: the same key with an
    // unambiguous body runs (not a replay, not idempotency_key_reused).
    let (status, body) = raw_post(&s, Some(&dana), &allocate, Some(&k), r#"{"qty": 1}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["order"]["lines"][0]["qty_allocated"], 1);
}
