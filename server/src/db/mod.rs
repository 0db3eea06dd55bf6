//! Database access, one module per aggregate, SQL next to the function that runs it.

pub mod audit;
pub mod changes;
pub mod customers;
pub mod deliveries;
pub mod inbound_events;
pub mod invoices;
pub mod order_history;
pub mod orders;
pub mod outbox;
pub mod partners;
pub mod price_lists;
pub mod reads;
pub mod relay_health;
pub mod sessions;
pub mod skus;
pub mod tenancy;
pub mod warm;

use sqlx::migrate::Migrator;
use sqlx::PgPool;

pub use tenancy::{
    begin_for_tenant, begin_for_tenant_on, begin_snapshot_for_tenant, begin_snapshot_for_tenant_on,
};

/// The schema, embedded at compile time from `migrations/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Brings the schema up to this build's; see [`crate::schema`] for what
/// happens when the database is newer or damaged.
pub async fn migrate(db: &PgPool) -> anyhow::Result<()> {
    let report = crate::schema::migrate(db).await?;
    for (version, description) in &report.applied {
        tracing::info!(version, %description, "applied migration");
    }
    Ok(())
}

/// True when every embedded migration is applied successfully (for /readyz).
pub async fn migrations_applied(db: &PgPool) -> Result<bool, sqlx::Error> {
    let applied: i64 = sqlx::query_scalar("select count(*) from _sqlx_migrations where success")
        .fetch_one(db)
        .await?;
    Ok(applied as usize >= MIGRATOR.iter().count())
}
