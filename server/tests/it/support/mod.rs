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

/// Ends every session of `admin`'s database but its own, as a Postgres
/// restart or a failover does, and waits until they are gone; returns how
/// many it ended.
pub async fn end_other_sessions(admin: &mut sqlx::PgConnection) -> usize {
    let pids: Vec<i32> = sqlx::query_scalar(
        "select pid from pg_stat_activity
          where datname = current_database() and pid <> pg_backend_pid()",
    )
    .fetch_all(&mut *admin)
    .await
    .expect("sessions");
    sqlx::query("select pg_terminate_backend(pid) from unnest($1::int[]) as pid")
        .bind(&pids)
        .execute(&mut *admin)
        .await
        .expect("terminate");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: i64 =
            sqlx::query_scalar("select count(*) from pg_stat_activity where pid = any($1)")
                .bind(&pids)
                .fetch_one(&mut *admin)
                .await
                .expect("sessions");
        if left == 0 {
            return pids.len();
        }
        assert!(std::time::Instant::now() < deadline, "sessions did not end");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
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
