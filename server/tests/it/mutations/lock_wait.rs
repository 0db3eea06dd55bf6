//! A transaction that holds a SKU's row and does not finish (issue 15 item
//! 8): before, every allocation of that SKU waited behind it for ever. Now
//! the wait is bounded: the request answers 503 with Retry-After and stores
//! nothing, the same key applies exactly once when the row is free, and in a
//! batch push only that item waits it out.

use holdfast_server::demo;
use reqwest::StatusCode;
use serde_json::json;
use sqlx::{Connection, PgConnection, PgPool};

use crate::support::{assert_problem, key, order_with_line, TestServer, MIGRATIONS};

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_row_held_past_the_bound_is_a_503_that_stores_nothing(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let (order, line) = order_with_line(&s, &dana, sku, 3).await;
    let (other, _) = order_with_line(&s, &dana, sku, 1).await;
    let allocate = format!("/v1/orders/{order}/lines/{line}/allocate");

    // Someone holds the SKU's position row and does not let go.
    let mut holder = PgConnection::connect_with(&db.connect_options())
        .await
        .expect("connect");
    let mut held = holder.begin().await.expect("begin");
    sqlx::query("select 1 from sku_positions where sku_id = $1 for update")
        .bind(sku)
        .execute(&mut *held)
        .await
        .expect("lock the row");

    let k = key();
    let r = s.post(&dana, &allocate, &k, json!({"qty": 2})).await;
    assert_problem(r.status, &r.json(), 503, "service_unavailable");
    assert!(r.headers.get("retry-after").is_some(), "Retry-After");
    let stored: i64 = sqlx::query_scalar("select count(*) from idempotency_keys where key = $1")
        .bind(&k)
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(stored, 0, "nothing stored under the key");

    // In a batch, only the item that needs the row waits it out.
    let k2 = key();
    let (status, pushed) = s
        .push(
            &dana,
            json!([
                {"idempotency_key": k2, "method": "POST", "path": allocate, "body": {"qty": 1}},
                {"idempotency_key": key(), "method": "PATCH", "path": format!("/v1/orders/{other}"),
                 "body": {"base_version": 2, "set": {"notes": "call before delivery"}}},
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{pushed}");
    assert_eq!(pushed["results"][0]["status"], 503, "{pushed}");
    assert_eq!(pushed["results"][0]["body"]["code"], "service_unavailable");
    assert_eq!(
        pushed["results"][1]["status"], 200,
        "the other order went through: {pushed}"
    );

    let (_, doc) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(
        (
            doc["version"].as_i64(),
            doc["lines"][0]["qty_allocated"].as_i64()
        ),
        (Some(2), Some(0)),
        "{doc}"
    );

    held.rollback().await.expect("let go");
    let r = s.post(&dana, &allocate, &k, json!({"qty": 2})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert!(!r.replayed(), "the key was free: it ran now");
    let again = s.post(&dana, &allocate, &k, json!({"qty": 2})).await;
    assert!(again.replayed());
    let (_, doc) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(
        (
            doc["version"].as_i64(),
            doc["lines"][0]["qty_allocated"].as_i64()
        ),
        (Some(3), Some(2)),
        "applied once: {doc}"
    );
}
