//! The mutation engine over real HTTP and real Postgres: exactly-once keys,
//! compare-and-swap, atomic allocation, the credit check, batch push.

mod allocation;
mod idempotency;
mod known_orders;
mod lines;
mod lock_wait;
mod push;

use reqwest::StatusCode;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{key, TestServer};
use holdfast_server::demo;

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
