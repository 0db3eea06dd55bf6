//! Holdfast's sync server as a library: `main.rs` parses flags and calls
//! [`serve`]; tests build [`http::router`] over their own database.

pub mod auth;
pub mod backup;
pub mod config;
pub mod config_file;
pub mod db;
pub mod demo;
pub mod engine;
mod error;
pub mod feed;
pub mod host;
pub mod housekeeping;
pub mod http;
mod inbox;
pub mod master;
mod metrics;
mod openapi;
pub mod pg;
pub mod ratelimit;
pub mod reconcile;
pub mod relay;
pub mod schema;
pub mod systemd;
pub mod telemetry;
pub mod testing;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tokio::net::TcpListener;

use crate::config::ServeConfig;
use crate::pg::EmbeddedPostgres;

/// What every request handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The primary: every write, and every read not listed in `db/reads.rs`.
    pub db: PgPool,
    /// Where desks' document reads run: the primary, or a streaming replica
    /// that has caught up (`--read-database-url`, `db/reads.rs`).
    pub reads: db::reads::Reads,
    pub metrics: Arc<metrics::Metrics>,
    /// Live pokes for `/v1/sync/stream`, fed by the process's one LISTEN
    /// connection (started in [`run`]).
    pub hub: Arc<feed::Hub>,
    /// `--relay-allow-private-targets`: partner URLs may be internal.
    pub allow_private_targets: bool,
    /// `--relay-timeout-ms`: how long an operator's test event waits for
    /// the partner, as long as a relay's delivery does.
    pub relay_timeout: Duration,
    /// Sign-in throttling (per account and per client address).
    pub login_limiter: Arc<ratelimit::LoginLimiter>,
    /// Header-read timeout and connection cap of the accept loop.
    pub connection_limits: http::serve::ConnectionLimits,
    /// The orders whose last REST edit this process answered: an
    /// allocation on one of them is one round trip (`engine::known`).
    #[cfg(not(feature = "broken-allocation"))]
    pub known: Arc<engine::known::KnownOrders>,
    /// The connections that allocation runs on (`db/warm.rs`).
    #[cfg(not(feature = "broken-allocation"))]
    pub warm: Arc<db::warm::Warm>,
}

impl AppState {
    pub fn new(db: PgPool) -> Self {
        #[cfg(not(feature = "broken-allocation"))]
        let warm = Arc::new(db::warm::Warm::new(db.clone()));
        AppState {
            reads: db::reads::Reads::primary_only(db.clone()),
            db,
            metrics: metrics::Metrics::global(),
            hub: feed::Hub::new(),
            allow_private_targets: false,
            relay_timeout: Duration::from_millis(config::RelayConfig::default().relay_timeout_ms),
            login_limiter: Arc::default(),
            connection_limits: Default::default(),
            #[cfg(not(feature = "broken-allocation"))]
            known: Arc::default(),
            #[cfg(not(feature = "broken-allocation"))]
            warm,
        }
    }

    /// Other connection bounds than the defaults (config flags, tests).
    pub fn with_connection_limits(mut self, limits: http::serve::ConnectionLimits) -> Self {
        self.connection_limits = limits;
        self
    }

    /// Desks' document reads on this streaming replica of `db` whenever it
    /// has caught up within `max_wait` (`db/reads.rs`).
    pub fn with_read_replica(mut self, replica: PgPool, max_wait: Duration) -> Self {
        self.reads = db::reads::Reads::with_replica(self.db.clone(), replica, max_wait);
        self
    }

    /// Lets partners register loopback/private URLs (tests, on-prem setups).
    pub fn allowing_private_targets(mut self, allow: bool) -> Self {
        self.allow_private_targets = allow;
        self
    }

    /// How long a test event waits for the partner's answer.
    pub fn with_relay_timeout(mut self, timeout: Duration) -> Self {
        self.relay_timeout = timeout;
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
    // The cluster is ours: keep it running while we serve (see `pg.rs`).
    let (stop_supervisor, supervisor_stopped) = tokio::sync::watch::channel(false);
    let supervisor = embedded.as_ref().map(|pg| pg.supervise(supervisor_stopped));
    let result = serve_on(&config, options, shutdown).await;
    let _ = stop_supervisor.send(true);
    if let Some(supervisor) = supervisor {
        let _ = supervisor.await;
    }
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
    let db = pool_options(
        config.db_pool_size,
        Duration::from_millis(config.db_acquire_timeout_ms),
    )
    .connect_lazy_with(options);
    wait_for_database(&db, STARTUP_DATABASE_WAIT)
        .await
        .context("connecting to Postgres")?;
    if config.no_migrate {
        // Another instance (or `holdfast-server migrate`) owns the schema.
        let schema = schema::check_for_serving(&db).await?;
        tracing::info!(
            schema = schema.database_version(),
            "--no-migrate: serving the schema as it is"
        );
    } else {
        db::migrate(&db).await.context("applying migrations")?;
    }
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
    let mut state = AppState::new(db.clone());
    if let Some(url) = &config.read_database_url {
        let options: PgConnectOptions = url
            .parse()
            .context("HOLDFAST_READ_DATABASE_URL is not a valid Postgres URL")?;
        // Lazy: a replica that is down at start only sends reads to the
        // primary until it is back.
        let replica = pool_options(
            config.db_pool_size,
            Duration::from_millis(config.db_acquire_timeout_ms),
        )
        .connect_lazy_with(options);
        tracing::info!("desks' reads go to the read replica whenever it has caught up");
        state = state.with_read_replica(replica, db::reads::DEFAULT_MAX_WAIT);
    }
    let reads = state.reads.clone();
    #[cfg(not(feature = "broken-allocation"))]
    let warm = state.warm.clone();
    let state = state
        .allowing_private_targets(config.relay.relay_allow_private_targets)
        .with_relay_timeout(Duration::from_millis(config.relay.relay_timeout_ms))
        .with_connection_limits(http::serve::ConnectionLimits {
            header_read_timeout: Duration::from_secs(config.http_header_timeout_secs),
            max_connections: usize::try_from(config.http_max_connections).unwrap_or(usize::MAX),
        });
    // On the signal the relays stop claiming at once and finish their
    // deliveries in flight (each bounded by --relay-timeout-ms, its outcome
    // recorded) while the HTTP side finishes its requests.
    let (signalled, mut on_signal) = tokio::sync::watch::channel(false);
    let http = run(state, listener, async move {
        shutdown.await;
        let _ = signalled.send(true);
    });
    let relays_done = async move {
        // Err: the server stopped without the signal (it failed); stop too.
        let _ = on_signal.wait_for(|signalled| *signalled).await;
        let stopping: Vec<_> = relays
            .into_iter()
            .map(|relay| tokio::spawn(relay.shutdown()))
            .collect();
        for relay in stopping {
            let _ = relay.await;
        }
    };
    let (served, ()) = tokio::join!(http, relays_done);
    tracing::info!("deliveries in flight finished");
    let _ = stop.send(true);
    let _ = reaper.await;
    reads.close_replica().await;
    #[cfg(not(feature = "broken-allocation"))]
    warm.close();
    db.close().await;
    served?;
    Ok(())
}

/// How long a starting server waits for its database to come up.
const STARTUP_DATABASE_WAIT: Duration = Duration::from_secs(60);

/// The server's pool. Waits are bounded (`acquire_timeout`), so an
/// unavailable database answers 503 promptly instead of holding requests, and
/// connections are pinged before use, so those a Postgres restart broke are
/// replaced rather than handed to a request: after a restart the pool
/// reconnects by itself.
pub fn pool_options(max_connections: u32, acquire_timeout: Duration) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .test_before_acquire(true)
}

/// Waits until the database accepts a connection (it may still be starting
/// when we are), for at most `within`.
async fn wait_for_database(db: &PgPool, within: Duration) -> Result<(), sqlx::Error> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match db.acquire().await {
            Ok(_) => return Ok(()),
            Err(e) if error::is_unavailable(&e) && tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "waiting for Postgres");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
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
    let limits = state.connection_limits;
    let probe = tokio::spawn(metrics::db::probe_forever(state.db.clone()));
    let app = http::router(state);
    println!("listening on http://{addr}");
    tracing::info!(%addr, "accepting requests");
    systemd::notify(&format!("READY=1\nSTATUS=listening on http://{addr}"));
    http::serve::serve(listener, app, limits, {
        let hub = hub.clone();
        async move {
            shutdown.await;
            systemd::notify("STOPPING=1\nSTATUS=finishing requests in flight");
            // Open streams never finish by themselves; end them so the
            // graceful shutdown can.
            hub.close();
        }
    })
    .await;
    hub.close();
    probe.abort();
    feed_tasks.join().await;
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
