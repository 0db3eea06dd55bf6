//! The harness every integration test shares: the server in-process
//! ([`server`]) or as a child process over its own or a private cluster
//! ([`process`]), HTTP with a hang check ([`http`]), desks putting load on it
//! ([`load`]), the ledger audit ([`audit`]), and the demo fixture's names.

pub mod audit;
pub mod http;
pub mod load;
pub mod process;
pub mod server;

use holdfast_server::demo;
use uuid::Uuid;

pub use server::{assert_problem, read, Raw, TestServer};

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
