//! Database access, one module per aggregate, SQL next to the function that runs it.

pub mod audit;
pub mod changes;
pub mod customers;
pub mod deliveries;
pub mod invoices;
pub mod order_history;
pub mod orders;
pub mod outbox;
pub mod partners;
pub mod price_lists;
pub mod sessions;
pub mod skus;
pub mod tenancy;

use sqlx::migrate::Migrator;
use sqlx::PgPool;

pub use tenancy::{begin_for_tenant, begin_snapshot_for_tenant};

/// The schema, embedded at compile time from `migrations/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

pub async fn migrate(db: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(db).await
}

/// True when every embedded migration is applied successfully (for /readyz).
pub async fn migrations_applied(db: &PgPool) -> Result<bool, sqlx::Error> {
    let applied: i64 = sqlx::query_scalar("select count(*) from _sqlx_migrations where success")
        .fetch_one(db)
        .await?;
    Ok(applied as usize >= MIGRATOR.iter().count())
}
