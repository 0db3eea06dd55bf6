//! Numbers at their extremes on the routes that take them (issue 15 item 1):
//! every value JSON can carry — 0, ±1, the i32 and i64 bounds, 2^53±1, past
//! i64, fractions, exponents, -0 — and a few random i64s. Each case answers
//! below 500; a refusal is a problem with a clear code and changes nothing;
//! an in-range value does what it says.

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{kestrel_m, key, TestServer, MIGRATIONS};
use holdfast_server::demo;

/// The fixed extremes, as raw JSON literals (some do not fit in an i64).
const EXTREMES: &[&str] = &[
    "0",
    "1",
    "-1",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "9007199254740991",
    "9007199254740992",
    "9007199254740993",
    "-9007199254740993",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "-9223372036854775809",
    "1e300",
    "1.5",
    "-0",
    "1e2",
];

/// The extremes plus a few random i64s (deterministic, so a failure repeats).
fn cases() -> Vec<String> {
    let mut runner = TestRunner::deterministic();
    let mut all: Vec<String> = EXTREMES.iter().map(|s| (*s).to_owned()).collect();
    for _ in 0..4 {
        let v = proptest::num::i64::ANY
            .new_tree(&mut runner)
            .expect("tree")
            .current();
        all.push(v.to_string());
    }
    all
}

/// Sends a raw JSON body (so literals past i64 reach the server verbatim).
async fn raw(
    s: &TestServer,
    token: &str,
    method: Method,
    path: &str,
    body: String,
) -> (StatusCode, Value) {
    let resp = s
        .http
        .request(method, s.url(path))
        .bearer_auth(token)
        .header("idempotency-key", key())
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request");
    let status = resp.status();
    let bytes = resp.bytes().await.expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A refusal: a 4xx problem with a code that names the trouble; a
/// `validation_failed` names `field`.
fn assert_refused(lit: &str, status: StatusCode, body: &Value, codes: &[&str], field: &str) {
    assert!(
        status.is_client_error(),
        "{lit}: want a 4xx, got {status}: {body}"
    );
    let code = body["code"].as_str().unwrap_or_default();
    assert!(
        codes.contains(&code),
        "{lit}: code {code:?} not in {codes:?}: {body}"
    );
    if code == "validation_failed" {
        assert_eq!(body["errors"][0]["field"], field, "{lit}: {body}");
    }
}

async fn new_order(s: &TestServer, token: &str) -> Uuid {
    let id = Uuid::now_v7();
    let r = s
        .post(
            token,
            "/v1/orders",
            &key(),
            serde_json::json!({"id": id, "customer_id": demo::customer_id("acme", "Tokyo Distributor")}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    id
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn qty_ordered_and_base_version_on_add_line(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let token = s.login("acme", "dana@acme.test").await;
    for lit in cases() {
        for field in ["qty_ordered", "base_version"] {
            let order = new_order(&s, &token).await;
            let (qty, base) = if field == "qty_ordered" {
                (lit.as_str(), "1")
            } else {
                ("2", lit.as_str())
            };
            let body = format!(
                r#"{{"id":"{}","sku_id":"{}","qty_ordered":{qty},"base_version":{base}}}"#,
                Uuid::now_v7(),
                kestrel_m()
            );
            let path = format!("/v1/orders/{order}/lines");
            let (status, answer) = raw(&s, &token, Method::POST, &path, body).await;
            assert!(
                !status.is_server_error(),
                "{field}={lit}: {status}: {answer}"
            );
            let (_, doc) = s.get(&format!("/v1/orders/{order}"), &token).await;
            if status.is_success() {
                assert_eq!(doc["version"], 2, "{field}={lit}: {doc}");
                continue;
            }
            assert_refused(
                &lit,
                status,
                &answer,
                &["validation_failed", "version_conflict"],
                field,
            );
            assert_eq!(doc["version"], 1, "{field}={lit} changed the order: {doc}");
            assert_eq!(
                doc["lines"].as_array().map(Vec::len),
                Some(0),
                "{field}={lit}: {doc}"
            );
        }
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn limit_on_lists_and_pull(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let token = s.login("acme", "dana@acme.test").await;
    for lit in cases() {
        for path in [
            "/v1/orders?limit=",
            "/v1/skus?limit=",
            "/v1/sync/pull?limit=",
        ] {
            let (status, body) = s.get(&format!("{path}{lit}"), &token).await;
            assert!(!status.is_server_error(), "{path}{lit}: {status}: {body}");
            if !status.is_success() {
                assert_refused(&lit, status, &body, &["validation_failed"], "limit");
            }
        }
    }
}

/// The SKU's prices as stored: (wholesale_price, msrp).
async fn prices(db: &PgPool, sku: Uuid) -> (i64, i64) {
    sqlx::query_as("select wholesale_price, msrp from skus where id = $1")
        .bind(sku)
        .fetch_one(db)
        .await
        .expect("prices")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn sku_prices_and_credit_limit_on_admin_routes(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let sku = kestrel_m();
    let path = format!("/v1/admin/skus/{sku}");
    for lit in cases() {
        for field in ["wholesale_price", "msrp"] {
            let before = prices(&db, sku).await;
            let (status, answer) = raw(
                &s,
                &ops,
                Method::PATCH,
                &path,
                format!(r#"{{"{field}":{lit}}}"#),
            )
            .await;
            assert!(
                !status.is_server_error(),
                "{field}={lit}: {status}: {answer}"
            );
            let after = prices(&db, sku).await;
            if status.is_success() {
                let want: i64 = lit.parse().expect("only a whole number ≥ 0 is accepted");
                let got = if field == "msrp" { after.1 } else { after.0 };
                assert_eq!(got, want, "{field}={lit}");
                continue;
            }
            assert_refused(&lit, status, &answer, &["validation_failed"], field);
            assert_eq!(before, after, "{field}={lit} changed the SKU");
        }

        let id = Uuid::now_v7();
        let body = format!(r#"{{"id":"{id}","name":"Extreme {id}","credit_limit":{lit}}}"#);
        let (status, answer) = raw(&s, &ops, Method::POST, "/v1/admin/customers", body).await;
        assert!(
            !status.is_server_error(),
            "credit_limit={lit}: {status}: {answer}"
        );
        let stored: Option<Option<i64>> =
            sqlx::query_scalar("select credit_limit from customers where id = $1")
                .bind(id)
                .fetch_optional(&db)
                .await
                .expect("customer");
        if status.is_success() {
            let want: i64 = lit.parse().expect("only a whole number ≥ 0 is accepted");
            assert_eq!(stored, Some(Some(want)), "credit_limit={lit}");
        } else {
            assert_refused(
                &lit,
                status,
                &answer,
                &["validation_failed"],
                "credit_limit",
            );
            assert_eq!(stored, None, "credit_limit={lit} created a customer");
        }
    }
}

/// The SKU's allocated units.
async fn allocated(db: &PgPool, sku: Uuid) -> i64 {
    sqlx::query_scalar("select allocated from sku_positions where sku_id = $1")
        .bind(sku)
        .fetch_one(db)
        .await
        .expect("position")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn allocate_and_release_qty_through_the_batch_push(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let token = s.login("acme", "dana@acme.test").await;
    let sku = kestrel_m();
    for lit in cases() {
        for action in ["allocate", "release"] {
            let order = new_order(&s, &token).await;
            let line = Uuid::now_v7();
            let r = s
                .post(
                    &token,
                    &format!("/v1/orders/{order}/lines"),
                    &key(),
                    serde_json::json!({"id": line, "sku_id": sku, "qty_ordered": 4, "base_version": 1}),
                )
                .await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
            let before = allocated(&db, sku).await;
            let body = format!(
                r#"{{"mutations":[{{"idempotency_key":"{}","method":"POST","path":"/v1/orders/{order}/lines/{line}/{action}","body":{{"qty":{lit}}}}}]}}"#,
                key()
            );
            let (status, answer) = raw(&s, &token, Method::POST, "/v1/sync/push", body).await;
            assert!(
                !status.is_server_error(),
                "{action} {lit}: {status}: {answer}"
            );
            let (item_status, item) = if status.is_success() {
                let r = &answer["results"][0];
                let code = r["status"].as_u64().expect("item status");
                (
                    StatusCode::from_u16(code as u16).expect("status"),
                    r["body"].clone(),
                )
            } else {
                (status, answer.clone())
            };
            assert!(!item_status.is_server_error(), "{action} {lit}: {item}");
            let after = allocated(&db, sku).await;
            if item_status.is_success() {
                assert_eq!(
                    action, "allocate",
                    "nothing is allocated yet to release: {item}"
                );
                let want: i64 = lit.parse().expect("a whole number");
                assert_eq!(after - before, want, "{action} {lit}");
                continue;
            }
            assert_refused(
                &lit,
                item_status,
                &item,
                &[
                    "validation_failed",
                    "over_allocation",
                    "insufficient_ats",
                    "invalid_state",
                ],
                "qty",
            );
            assert_eq!(before, after, "{action} {lit} changed the position");
        }
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn price_list_prices_as_json(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let list = Uuid::now_v7();
    let body = format!(r#"{{"id":"{list}","name":"Extremes"}}"#);
    let (status, answer) = raw(&s, &ops, Method::POST, "/v1/admin/price-lists", body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let path = format!("/v1/admin/price-lists/{list}/prices");
    for lit in cases() {
        let before: Vec<i64> =
            sqlx::query_scalar("select price from price_list_entries where price_list_id = $1")
                .bind(list)
                .fetch_all(&db)
                .await
                .expect("entries");
        let body = format!(
            r#"{{"prices":[{{"sku_id":"{}","price":{lit}}}]}}"#,
            kestrel_m()
        );
        let (status, answer) = raw(&s, &ops, Method::PUT, &path, body).await;
        assert!(!status.is_server_error(), "price={lit}: {status}: {answer}");
        let after: Vec<i64> =
            sqlx::query_scalar("select price from price_list_entries where price_list_id = $1")
                .bind(list)
                .fetch_all(&db)
                .await
                .expect("entries");
        if status.is_success() {
            let want: i64 = lit.parse().expect("only a whole number ≥ 0 is accepted");
            assert_eq!(after, vec![want], "price={lit}");
        } else {
            assert_refused(
                &lit,
                status,
                &answer,
                &["validation_failed"],
                "prices[0].price",
            );
            assert_eq!(before, after, "price={lit} changed the list");
        }
    }
}

/// `base_version` on every other route that takes one, `qty_ordered` on a
/// line change, and `credit_limit` on a customer's PATCH.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn base_version_on_every_route_qty_on_a_change_and_credit_on_patch(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let token = s.login("acme", "dana@acme.test").await;
    for lit in cases() {
        for (method, route, field) in [
            (Method::PATCH, "", "base_version"),
            (Method::PATCH, "/lines/LINE", "qty_ordered"),
            (Method::PATCH, "/lines/LINE", "base_version"),
            (Method::POST, "/lines/LINE/remove", "base_version"),
            (Method::POST, "/confirm", "base_version"),
            (Method::POST, "/cancel", "base_version"),
        ] {
            let order = new_order(&s, &token).await;
            let line = Uuid::now_v7();
            let r = s
                .post(&token, &format!("/v1/orders/{order}/lines"), &key(),
                      serde_json::json!({"id": line, "sku_id": kestrel_m(), "qty_ordered": 2, "base_version": 1}))
                .await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
            let body = match (route, field) {
                ("", _) => format!(r#"{{"base_version":{lit},"set":{{"notes":"x"}}}}"#),
                (_, "qty_ordered") => format!(r#"{{"base_version":2,"qty_ordered":{lit}}}"#),
                ("/lines/LINE", _) => format!(r#"{{"base_version":{lit},"qty_ordered":3}}"#),
                _ => format!(r#"{{"base_version":{lit}}}"#),
            };
            let path = format!(
                "/v1/orders/{order}{}",
                route.replace("LINE", &line.to_string())
            );
            let (_, before) = s.get(&format!("/v1/orders/{order}"), &token).await;
            let (status, answer) = raw(&s, &token, method.clone(), &path, body).await;
            assert!(
                !status.is_server_error(),
                "{method} {route} {field}={lit}: {status}: {answer}"
            );
            let (_, after) = s.get(&format!("/v1/orders/{order}"), &token).await;
            if status.is_success() {
                assert_eq!(
                    after["version"], 3,
                    "{method} {route} {field}={lit}: {after}"
                );
                continue;
            }
            assert_refused(
                &lit,
                status,
                &answer,
                &["validation_failed", "version_conflict"],
                field,
            );
            assert_eq!(
                after, before,
                "{method} {route} {field}={lit} changed the order"
            );
        }
    }

    let ops = s.login("acme", "ops@acme.test").await;
    let customer = demo::customer_id("acme", "Austin Boutique");
    let limit = || async {
        sqlx::query_scalar::<_, Option<i64>>("select credit_limit from customers where id = $1")
            .bind(customer)
            .fetch_one(&db)
            .await
            .expect("limit")
    };
    for lit in cases() {
        let before = limit().await;
        let path = format!("/v1/admin/customers/{customer}");
        let (status, answer) = raw(
            &s,
            &ops,
            Method::PATCH,
            &path,
            format!(r#"{{"credit_limit":{lit}}}"#),
        )
        .await;
        assert!(
            !status.is_server_error(),
            "credit_limit={lit}: {status}: {answer}"
        );
        if status.is_success() {
            assert_eq!(
                limit().await.map(|v| v.to_string()),
                Some(lit.clone()),
                "credit_limit={lit}"
            );
        } else {
            assert_refused(
                &lit,
                status,
                &answer,
                &["validation_failed"],
                "credit_limit",
            );
            assert_eq!(
                limit().await,
                before,
                "credit_limit={lit} changed the customer"
            );
        }
    }
}
