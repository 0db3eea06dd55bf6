//! Holdfast's server, in this process but on its own tokio runtime (its own
//! worker threads), so the load generator and the server share the machine
//! the way two processes would without sharing a scheduler. Built from the
//! same library pieces `holdfast-server serve` assembles, with the defaults
//! of its flags; the reaper is left out (nothing expires during a run).

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use holdfast_server::config::{Cli, Command, ServeConfig};
use holdfast_server::relay::{self, RelayHandle};
use holdfast_server::AppState;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct Server {
    rt: Handle,
    pub base: String,
    /// The server's own pool (`--db-pool-size`, default 32).
    pub db: PgPool,
    pub pool_size: u32,
    relay_settings: relay::Settings,
    relays: Vec<RelayHandle>,
    stop: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<anyhow::Result<()>>>,
}

/// `holdfast-server serve` with no flags: the defaults an operator gets.
pub fn default_config() -> anyhow::Result<ServeConfig> {
    match Cli::try_parse_from(["holdfast-server", "serve"])? {
        Cli {
            command: Command::Serve(config),
            ..
        } => Ok(config),
        _ => anyhow::bail!("`holdfast-server serve` did not parse as serve"),
    }
}

impl Server {
    /// Migrates and seeds the demo data, then serves on 127.0.0.1:0.
    /// `relays`: relay workers during items 1–5 (None: `serve`'s default).
    pub async fn start(
        rt: Handle,
        options: PgConnectOptions,
        relays: Option<usize>,
    ) -> anyhow::Result<Server> {
        let config = default_config()?;
        let pool_size = config.db_pool_size;
        let mut relay_settings = relay::Settings::from(&config.relay);
        // The partner of item 6 listens on loopback.
        relay_settings.allow_private_targets = true;
        let db = rt
            .spawn(async move {
                let db = PgPoolOptions::new()
                    .max_connections(pool_size)
                    .connect_with(options)
                    .await
                    .context("connecting the server's pool")?;
                holdfast_server::db::migrate(&db)
                    .await
                    .context("applying migrations")?;
                holdfast_server::demo::seed(&db)
                    .await
                    .context("seeding demo data")?;
                Ok::<_, anyhow::Error>(db)
            })
            .await??;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = AppState::new(db.clone()).allowing_private_targets(true);
        let (stop, stopped) = oneshot::channel::<()>();
        let served = rt.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            holdfast_server::run(state, listener, async {
                let _ = stopped.await;
            })
            .await
        });
        let mut server = Server {
            rt,
            base: format!("http://{addr}"),
            db,
            pool_size,
            relay_settings,
            relays: Vec::new(),
            stop: Some(stop),
            served: Some(served),
        };
        server.wait_ready().await?;
        // `serve` runs one relay by default; so do we (item 6 restarts them).
        server
            .start_relays(relays.unwrap_or(config.relay.relay_workers as usize))
            .await?;
        Ok(server)
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let url = format!("{}/readyz", self.base);
        for _ in 0..200 {
            if let Ok(r) = http.get(&url).send().await {
                if r.status().is_success() {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("the in-process server did not become ready at {url}")
    }

    /// The server's runtime, for baselines that should get the same threads.
    pub fn runtime(&self) -> &Handle {
        &self.rt
    }

    pub fn relay_settings(&self) -> &relay::Settings {
        &self.relay_settings
    }

    pub async fn start_relays(&mut self, n: usize) -> anyhow::Result<()> {
        for _ in 0..n {
            let (db, settings) = (self.db.clone(), self.relay_settings.clone());
            let handle = self
                .rt
                .spawn(async move { relay::spawn(db, settings) })
                .await??;
            self.relays.push(handle);
        }
        Ok(())
    }

    /// Graceful: the relays finish the deliveries they have in flight.
    pub async fn stop_relays(&mut self) -> anyhow::Result<()> {
        for relay in self.relays.drain(..) {
            self.rt.spawn(relay.shutdown()).await?;
        }
        Ok(())
    }

    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        self.stop_relays().await?;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            served.await??;
        }
        self.db.close().await;
        Ok(())
    }
}
