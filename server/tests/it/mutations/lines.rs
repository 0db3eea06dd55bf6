//! Line edits (add, change): each answers with the document it stored,
//! built from what one locked read returned, and a refusal decided on that
//! read writes nothing.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use super::order_with_line;
use crate::support::{assert_problem, key, TestServer, MIGRATIONS};
use holdfast_server::demo;

fn lines_path(order: Uuid) -> String {
    format!("/v1/orders/{order}/lines")
}

fn line_path(order: Uuid, line: Uuid) -> String {
    format!("/v1/orders/{order}/lines/{line}")
}

/// The order as a fresh read shows it.
async fn current(s: &TestServer, token: &str, order: Uuid) -> Value {
    let (status, body) = s.get(&format!("/v1/orders/{order}"), token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// How many history entries the order has (one per version written).
async fn history_len(db: &PgPool, order: Uuid) -> i64 {
    sqlx::query_scalar("select count(*) from order_history where order_id = $1")
        .bind(order)
        .fetch_one(db)
        .await
        .expect("history")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_line_edit_answers_with_the_document_it_stored(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", "dana@acme.test").await;
    // Tokyo Distributor pays its price list for the Kestrel Overshirt and
    // wholesale for the Merlin shirt: both prices must reach the answer.
    let listed = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "L");
    let wholesale = demo::sku_id("acme", "Merlin Oxford Shirt", "Washed Indigo", "M");
    let (order, first, version) = order_with_line(&s, &dana, "Tokyo Distributor", listed, 3).await;
    let r = s
        .post(
            &dana,
            &format!("{}/{first}/allocate", lines_path(order)),
            &key(),
            json!({"qty": 2}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let version = version + 1;

    let second = Uuid::now_v7();
    let r = s
        .post(
            &dana,
            &lines_path(order),
            &key(),
            json!({"id": second, "sku_id": wholesale, "qty_ordered": 5, "base_version": version}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let added = r.json();
    assert_eq!(added, current(&s, &dana, order).await);
    assert_eq!(added["version"], version + 1);
    let lines = added["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (&lines[0]["id"], &lines[0]["unit_price"]),
        (&json!(first), &json!(3_800))
    );
    assert_eq!(lines[0]["qty_allocated"], 2);
    assert_eq!(lines[1]["id"], json!(second));
    assert_eq!(
        added["total"],
        3 * 3_800 + 5 * lines[1]["unit_price"].as_i64().expect("price")
    );

    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &line_path(order, first),
            &key(),
            &json!({"qty_ordered": 7, "base_version": version + 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let changed = r.json();
    assert_eq!(changed, current(&s, &dana, order).await);
    assert_eq!(changed["version"], version + 2);
    assert_eq!(changed["lines"][0]["qty_ordered"], 7);
    assert_eq!(changed["lines"][0]["qty_allocated"], 2);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_refused_line_edit_writes_nothing(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let sku = demo::sku_id("acme", "Merlin Oxford Shirt", "Washed Indigo", "M");
    let (order, line, version) = order_with_line(&s, &dana, "Tokyo Distributor", sku, 4).await;
    let (other, other_line, _) = order_with_line(&s, &dana, "Austin Boutique", sku, 1).await;
    let r = s
        .post(
            &dana,
            &format!("{}/{line}/allocate", lines_path(order)),
            &key(),
            json!({"qty": 3}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let version = version + 1;
    let before = current(&s, &dana, order).await;
    let entries = history_len(&db, order).await;

    let add = |id: Uuid, sku: Uuid, qty: i64| json!({"id": id, "sku_id": sku, "qty_ordered": qty, "base_version": version});
    // A line id another order's line already has.
    let r = s
        .post(&dana, &lines_path(order), &key(), add(other_line, sku, 1))
        .await;
    assert_problem(r.status, &r.json(), 400, "validation_failed");
    assert_eq!(r.json()["errors"][0]["field"], "id");
    // A SKU that is not in the catalog.
    let r = s
        .post(
            &dana,
            &lines_path(order),
            &key(),
            add(Uuid::now_v7(), Uuid::now_v7(), 1),
        )
        .await;
    assert_problem(r.status, &r.json(), 404, "not_found");
    // A line that is not on this order.
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &line_path(order, other_line),
            &key(),
            &json!({"qty_ordered": 2, "base_version": version}),
        )
        .await;
    assert_problem(r.status, &r.json(), 404, "not_found");
    // Fewer ordered than allocated.
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &line_path(order, line),
            &key(),
            &json!({"qty_ordered": 2, "base_version": version}),
        )
        .await;
    assert_problem(r.status, &r.json(), 422, "over_allocation");
    // A stale base version: the conflict carries the document.
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &line_path(order, line),
            &key(),
            &json!({"qty_ordered": 9, "base_version": version - 1}),
        )
        .await;
    assert_problem(r.status, &r.json(), 409, "version_conflict");
    assert_eq!(r.json()["current"], before);

    assert_eq!(current(&s, &dana, order).await, before);
    assert_eq!(history_len(&db, order).await, entries);
    let (status, body) = s.get(&format!("/v1/orders/{other}"), &dana).await;
    assert_eq!(
        (status, body["version"].as_i64()),
        (StatusCode::OK, Some(2))
    );
}

/// The changed line's own quantity is left out of the total it is checked
/// against: a line at the most an order can hold may be set to that again,
/// and not one more.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_changed_line_is_checked_against_the_total_without_itself(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let sku = demo::sku_id("acme", "Merlin Oxford Shirt", "Washed Indigo", "M");
    let price = 3_600; // the Merlin shirt's wholesale price, as hostile_input.rs relies on
    let most = i64::MAX / price;
    let (order, line, version) = order_with_line(&s, &dana, "Austin Boutique", sku, most).await;
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &line_path(order, line),
            &key(),
            &json!({"qty_ordered": most, "base_version": version}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["total"], most * price);
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &line_path(order, line),
            &key(),
            &json!({"qty_ordered": most + 1, "base_version": version + 1}),
        )
        .await;
    assert_problem(r.status, &r.json(), 400, "validation_failed");
    assert_eq!(r.json()["errors"][0]["field"], "qty_ordered");
}
