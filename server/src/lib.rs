//! Holdfast's sync server as a library: `main.rs` parses flags and calls
//! [`serve`]; tests build [`http::router`] over their own database.

pub mod auth;
pub mod config;
pub mod db;
pub mod demo;
pub mod engine;
pub mod error;
pub mod feed;
pub mod housekeeping;
pub mod http;
pub mod inbox;
pub mod metrics;
pub mod openapi;
pub mod pg;
pub mod ratelimit;
pub mod reconcile;
pub mod relay;
pub mod telemetry;

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tokio::net::TcpListener;

use crate::config::ServeConfig;
use crate::pg::EmbeddedPostgres;

/// What every request handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub db: PgPool,
    pub metrics: Arc<metrics::Metrics>,
    /// Live pokes for `/v1/sync/stream`, fed by the process's one LISTEN
    /// connection (started in [`run`]).
    pub hub: Arc<feed::Hub>,
    /// `--relay-allow-private-targets`: partner URLs may be internal.
    pub allow_private_targets: bool,
    /// Sign-in throttling (per account and per client address).
    pub login_limiter: Arc<ratelimit::LoginLimiter>,
}

impl AppState {
    pub fn new(db: PgPool) -> Self {
        AppState {
            db,
            metrics: metrics::Metrics::global(),
            hub: feed::Hub::new(),
            allow_private_targets: false,
            login_limiter: Arc::default(),
        }
    }

    /// Lets partners register loopback/private URLs (tests, on-prem setups).
    pub fn allowing_private_targets(mut self, allow: bool) -> Self {
        self.allow_private_targets = allow;
        self
    }
}

/// `holdfast-server serve`: database (embedded or given), migrations, demo
/// data, then the HTTP API until `shutdown` resolves; the embedded cluster is
/// stopped last, after in-flight requests finished.
pub async fn serve(
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    tracing::info!(?config, "starting");
    let (options, embedded) = match &config.database_url {
        Some(url) => {
            let options: PgConnectOptions = url
                .parse()
                .context("DATABASE_URL is not a valid Postgres URL")?;
            (options, None)
        }
        None => {
            let dir = config.data_dir().join("postgres");
            let pg = EmbeddedPostgres::start(&dir).await?;
            (pg.holdfast_options(), Some(pg))
        }
    };
    let result = serve_on(&config, options, shutdown).await;
    if let Some(pg) = embedded {
        if let Err(e) = pg.stop() {
            tracing::error!(error = %e, "stopping the embedded Postgres failed");
        }
    }
    result
}

async fn serve_on(
    config: &ServeConfig,
    options: PgConnectOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let db = PgPoolOptions::new()
        .max_connections(config.db_pool_size)
        .connect_with(options)
        .await
        .context("connecting to Postgres")?;
    db::migrate(&db).await.context("applying migrations")?;
    if config.demo {
        demo::seed(&db).await.context("seeding demo data")?;
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let retention = housekeeping::Retention {
        idempotency_hours: config.idempotency_retention_hours,
        outbox_hours: config.outbox_retention_hours,
        inbox_hours: config.inbox_retention_hours,
    };
    let reaper = tokio::spawn(housekeeping::run(db.clone(), retention, stopped));
    let mut relays = Vec::new();
    for _ in 0..config.relay.relay_workers {
        relays.push(relay::spawn(
            db.clone(),
            relay::Settings::from(&config.relay),
        )?);
    }
    let state = AppState::new(db.clone())
        .allowing_private_targets(config.relay.relay_allow_private_targets);
    let served = run(state, listener, shutdown).await;
    // Requests are finished; let deliveries in flight finish too.
    for relay in relays {
        relay.shutdown().await;
    }
    let _ = stop.send(true);
    let _ = reaper.await;
    db.close().await;
    served?;
    Ok(())
}

/// Serves the API on `listener` until `shutdown` resolves, then finishes the
/// requests in flight. Prints the one `listening on` line harnesses wait for.
pub async fn run(
    state: AppState,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    // LISTEN before accepting: every commit after the first request is heard.
    let feed_tasks = feed::start(&state.db, &state.hub)
        .await
        .context("starting the change feed listener")?;
    let hub = state.hub.clone();
    let app = http::router(state);
    println!("listening on http://{addr}");
    tracing::info!(%addr, "accepting requests");
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown({
        let hub = hub.clone();
        async move {
            shutdown.await;
            // Open streams never finish by themselves; end them so the
            // graceful shutdown can.
            hub.close();
        }
    })
    .await
    .context("HTTP server");
    hub.close();
    feed_tasks.join().await;
    served?;
    tracing::info!("stopped accepting; in-flight requests finished");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let wait = async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        Ok::<(), std::io::Error>(())
    };
    if let Err(e) = wait.await {
        tracing::error!(error = %e, "cannot listen for signals; running until killed");
        std::future::pending::<()>().await;
    }
}
