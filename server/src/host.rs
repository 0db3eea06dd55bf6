//! The database of a command run on the server host (`reconcile`,
//! `catalog import`, `tenant create`): opened the way `serve` opens it —
//! DATABASE_URL, or the embedded cluster under the data dir — and migrated.

use std::path::Path;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

use crate::pg::EmbeddedPostgres;

/// An open, migrated database; [`HostDb::close`] stops the embedded cluster
/// if this command started it.
pub struct HostDb {
    pub pool: PgPool,
    embedded: Option<EmbeddedPostgres>,
}

impl HostDb {
    pub async fn open(database_url: Option<&str>, data_dir: &Path) -> anyhow::Result<HostDb> {
        let (connect, embedded): (PgConnectOptions, _) = match database_url {
            Some(url) => (
                url.parse()
                    .context("DATABASE_URL is not a valid Postgres URL")?,
                None,
            ),
            None => {
                let dir = data_dir.join("postgres");
                // A server may be running on this cluster: then it is its to
                // stop, not ours. Only a cluster we started is stopped on exit.
                let was_running = cluster_is_up(&dir).await;
                let pg = EmbeddedPostgres::start(&dir).await?;
                (pg.holdfast_options(), (!was_running).then_some(pg))
            }
        };
        // Host commands use one connection at a time; the second spares a
        // reconnect when a statement outside a transaction runs meanwhile.
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(connect)
            .await
            .context("connecting to Postgres")?;
        crate::db::migrate(&pool)
            .await
            .context("applying migrations")?;
        Ok(HostDb { pool, embedded })
    }

    pub async fn close(self) {
        self.pool.close().await;
        if let Some(pg) = self.embedded {
            if let Err(e) = pg.stop() {
                tracing::error!(error = %e, "stopping the embedded Postgres failed");
            }
        }
    }
}

async fn cluster_is_up(dir: &Path) -> bool {
    match EmbeddedPostgres::attach(dir) {
        Ok(pg) => pg.connect_options("postgres").connect().await.is_ok(),
        Err(_) => false,
    }
}
