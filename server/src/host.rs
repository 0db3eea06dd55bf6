//! The database of a command run on the server host (`reconcile`,
//! `catalog import`, `tenant create`, `migrate`, `backup`): opened the way
//! `serve` opens it — DATABASE_URL, or the embedded cluster under the data
//! dir — and, for the commands that write, migrated.

use std::path::Path;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

use crate::pg::EmbeddedPostgres;

/// An open, migrated database; [`HostDb::close`] stops the embedded cluster
/// if this command started it.
pub struct HostDb {
    pub pool: PgPool,
    /// What the pool connects with (for a client tool such as pg_dump).
    pub connect: PgConnectOptions,
    /// The embedded cluster, started by this command when `started`.
    embedded: Option<EmbeddedPostgres>,
    started: bool,
}

impl HostDb {
    /// Opens and migrates (see [`crate::db::migrate`]).
    pub async fn open(database_url: Option<&str>, data_dir: &Path) -> anyhow::Result<HostDb> {
        let host = Self::open_unmigrated(database_url, data_dir).await?;
        if let Err(e) = crate::db::migrate(&host.pool).await {
            host.close().await;
            return Err(e.context("applying migrations"));
        }
        Ok(host)
    }

    /// Opens without touching the schema (`migrate`, `backup`, `restore`).
    pub async fn open_unmigrated(
        database_url: Option<&str>,
        data_dir: &Path,
    ) -> anyhow::Result<HostDb> {
        let (connect, embedded, started): (PgConnectOptions, _, _) = match database_url {
            Some(url) => (
                url.parse()
                    .context("DATABASE_URL is not a valid Postgres URL")?,
                None,
                false,
            ),
            None => {
                let dir = data_dir.join("postgres");
                // A server may be running on this cluster: then it is its to
                // stop, not ours. Only a cluster we started is stopped on exit.
                let was_running = cluster_is_up(&dir).await;
                let pg = EmbeddedPostgres::start(&dir).await?;
                (pg.holdfast_options(), Some(pg), !was_running)
            }
        };
        // Host commands use one connection at a time; the second spares a
        // reconnect when a statement outside a transaction runs meanwhile.
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(connect.clone())
            .await
            .context("connecting to Postgres")?;
        Ok(HostDb {
            pool,
            connect,
            embedded,
            started,
        })
    }

    /// The embedded cluster, when the database is not DATABASE_URL's.
    pub fn embedded(&self) -> Option<&EmbeddedPostgres> {
        self.embedded.as_ref()
    }

    pub async fn close(self) {
        self.pool.close().await;
        if let Some(pg) = self.embedded.filter(|_| self.started) {
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
