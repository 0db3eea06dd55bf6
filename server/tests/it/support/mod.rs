//! The harness every integration test shares: the server in-process
//! ([`server`]) or as a child process over its own or a private cluster
//! ([`process`]), HTTP with a hang check ([`http`]), desks putting load on it
//! ([`load`]), the ledger audit ([`audit`]), a primary with a hot standby
//! ([`replica`]), and the demo fixture's names.

pub mod audit;
pub mod http;
pub mod load;
pub mod process;
pub mod replica;
pub mod server;

use holdfast_server::demo;
use uuid::Uuid;

pub use server::{assert_problem, read, Raw, TestServer};

// Without DATABASE_URL the binary says how to run it, once, and exits.
holdfast_server::require_database_url!();

/// The schema, for `#[sqlx::test(migrator = "MIGRATIONS")]`: a fresh
/// database per test.
pub const MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// A fresh idempotency key.
pub fn key() -> String {
    Uuid::now_v7().to_string()
}

/// The demo SKU most tests allocate: Kestrel Overshirt, Washed Indigo, M.
pub fn kestrel_m() -> Uuid {
    demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M")
}

pub fn acme() -> Uuid {
    demo::tenant_id("acme")
}

pub fn globex() -> Uuid {
    demo::tenant_id("globex")
}

/// A draft order for Tokyo Distributor (no credit limit, no price list
/// of its own) with one line of `qty` of `sku`: at version 2. Returns the
/// order's and the line's ids.
pub async fn order_with_line(s: &TestServer, token: &str, sku: Uuid, qty: i64) -> (Uuid, Uuid) {
    let (order, line) = (Uuid::now_v7(), Uuid::now_v7());
    let customer = demo::customer_id("acme", "Tokyo Distributor");
    let r = s
        .post(
            token,
            "/v1/orders",
            &key(),
            serde_json::json!({"id": order, "customer_id": customer}),
        )
        .await;
    assert_eq!(r.status, reqwest::StatusCode::CREATED, "{}", r.json());
    let r = s
        .post(
            token,
            &format!("/v1/orders/{order}/lines"),
            &key(),
            serde_json::json!({"id": line, "sku_id": sku, "qty_ordered": qty, "base_version": 1}),
        )
        .await;
    assert_eq!(r.status, reqwest::StatusCode::CREATED, "{}", r.json());
    (order, line)
}
