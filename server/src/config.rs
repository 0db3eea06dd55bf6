//! Command line and environment: one struct per subcommand, validated at start.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "holdfast-server",
    version,
    about = "The Holdfast sync server: applies desks' queued edits exactly once against Postgres \
             and relays signed webhooks to partners."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP API (prints `listening on http://ADDR` once it accepts
    /// requests). Settings come from flags, then HOLDFAST_* environment
    /// variables, then the config file (/etc/holdfast/server.toml if it
    /// exists, or --config FILE), then the defaults shown here.
    Serve(ServeConfig),
    /// Print the configuration `serve` would run with, given the same flags,
    /// environment and config file: every setting, its value and where it came
    /// from (flag, env, file, default), secrets redacted. Exit status 1, naming
    /// the key, when the file has an unknown key or any setting a bad value.
    CheckConfig(ServeConfig),
    /// Manage a private Postgres cluster by hand (used by `make test`).
    #[command(subcommand)]
    Postgres(PostgresCommand),
    /// Import a 3PL inventory snapshot (CSV), report where it differs from
    /// on_hand, and with --apply book the differences. Resumable; a re-run of
    /// the same file changes nothing. Exit status 2: rows were rejected or
    /// SKUs refused (see the report).
    Reconcile(ReconcileConfig),
    /// The catalog from the server host (see `catalog import --help`).
    #[command(subcommand)]
    Catalog(CatalogCommand),
    /// Tenants, made on the server host (never over HTTP; see `tenant create --help`).
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Apply this build's missing schema migrations and exit (prints what it
    /// applied, or that the schema is current). With several instances on one
    /// database: run this once per upgrade, start them with `serve --no-migrate`.
    Migrate(crate::schema::MigrateConfig),
    /// Write a consistent backup of the running database (the embedded
    /// cluster or DATABASE_URL's) to a file, without stopping anything.
    #[command(
        after_help = "The file is pg_dump's custom format, written as FILE.part and \
                            renamed when complete; it holds password and token hashes, so it is \
                            created readable by its owner only. Restore it with `holdfast-server \
                            restore --from FILE --data-dir EMPTY_DIR`."
    )]
    Backup(crate::backup::BackupConfig),
    /// Make a new embedded cluster (or fill an empty database) from a backup,
    /// ready for `serve`. Desks that synced with the old server notice, pull
    /// everything again and re-send their acts the backup lacks.
    #[command(
        after_help = "Example:\n  holdfast-server restore --from /backups/holdfast.dump \
                            --data-dir /var/lib/holdfast-restored\n  holdfast-server serve \
                            --data-dir /var/lib/holdfast-restored\n\nThe target must be new or \
                            empty; nothing existing is ever overwritten."
    )]
    Restore(crate::backup::RestoreConfig),
}

#[derive(Debug, Subcommand)]
pub enum CatalogCommand {
    /// Upsert a tenant's SKUs from a CSV file (header
    /// `code,style,color,size,wholesale_price,msrp[,active]`, money in cents):
    /// by code, else by style/colour/size. The whole file is checked first and
    /// nothing is applied if any row is bad (every bad row is listed, exit
    /// status 1). Then it is applied page by page, each page committed with its
    /// checkpoint: a killed import resumes where it stopped when run again with
    /// the same file, and a finished one changes nothing.
    Import(CatalogImportConfig),
}

#[derive(Clone, Args)]
pub struct CatalogImportConfig {
    /// The tenant (slug) whose catalog this is.
    #[arg(long)]
    pub tenant: String,

    /// The catalog file (CSV, up to 100,000 rows).
    pub file: PathBuf,

    /// Rows per transaction (and checkpoint).
    #[arg(long, default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub page_size: u32,

    /// Where the embedded Postgres cluster lives when DATABASE_URL is not set
    /// (the same as `serve`'s).
    #[arg(long, env = "HOLDFAST_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Use this Postgres instead of the embedded cluster.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Tests only: stop inside the uncommitted transaction of page N+1 and
    /// wait to be killed.
    #[arg(long, env = "HOLDFAST_CATALOG_TEST_HOLD", hide = true)]
    pub test_hold_after_pages: Option<u64>,
}

impl std::fmt::Debug for CatalogImportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("CatalogImportConfig")
            .field("tenant", &self.tenant)
            .field("file", &self.file)
            .field("page_size", &self.page_size)
            .field("data_dir", &self.data_dir)
            .field(
                "database_url",
                &self.database_url.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl CatalogImportConfig {
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }
}

#[derive(Debug, Subcommand)]
pub enum PostgresCommand {
    /// Create (if new) and start a private cluster; prints `DATABASE_URL=…` for its
    /// `postgres` database.
    Start {
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Stop a private cluster started with `postgres start` (fast shutdown).
    Stop {
        #[arg(long)]
        data_dir: PathBuf,
    },
}

/// Configuration of `serve`. Every flag also reads `HOLDFAST_<NAME>` and the
/// config file's `<name>` key (see `config_file`).
#[derive(Clone, Args)]
pub struct ServeConfig {
    /// The config file (TOML): every setting below as a top-level
    /// `snake_case` key, e.g. `db_pool_size = 16`. Flags and environment
    /// variables override it. Without this flag /etc/holdfast/server.toml is
    /// read if it exists; named here, it must exist.
    #[arg(long, env = "HOLDFAST_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address to listen on; port 0 picks a free one (printed in the `listening on` line).
    #[arg(long, env = "HOLDFAST_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Where the embedded Postgres cluster lives when DATABASE_URL is not set.
    /// Default: $STATE_DIRECTORY under systemd (/var/lib/holdfast for the
    /// packaged unit), else /var/lib/holdfast when run as root (so the
    /// `postgres` user can reach it) or as the user owning it (the package's
    /// `holdfast`), else $XDG_DATA_HOME/holdfast.
    #[arg(long, env = "HOLDFAST_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Use this Postgres instead of the embedded cluster
    /// (postgres://USER:PASSWORD@HOST:PORT/DATABASE).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// A streaming replica (hot standby) of the database, for desks' reads:
    /// the pull feed and GET of orders, SKUs, customers, invoices and price
    /// lists. Each such read waits (up to 500 ms) for the replica to replay
    /// the primary's WAL as of the request's arrival, else runs on the
    /// primary; writes, sign-in and token checks always use the primary.
    #[arg(long, env = "HOLDFAST_READ_DATABASE_URL", hide_env_values = true)]
    pub read_database_url: Option<String>,

    /// Seed the demo tenants, users, customers and SKUs (once; a second run changes nothing).
    #[arg(long, env = "HOLDFAST_DEMO")]
    pub demo: bool,

    /// Do not touch the schema: with several instances on one database, run
    /// `holdfast-server migrate` once per upgrade and start every instance
    /// with this. Refuses to start (one line naming both versions) while the
    /// schema is older than this build needs; serves a newer one (as during a
    /// rolling upgrade) with a warning.
    #[arg(long, env = "HOLDFAST_NO_MIGRATE")]
    pub no_migrate: bool,

    /// Database connections in the pool.
    #[arg(long, env = "HOLDFAST_DB_POOL_SIZE", default_value_t = 32)]
    pub db_pool_size: u32,

    /// How long a request waits for a database connection (including
    /// reconnecting while Postgres restarts) before it answers 503 (ms).
    #[arg(long, env = "HOLDFAST_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 3000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub db_acquire_timeout_ms: u64,

    /// How long an idempotency key's stored answer is replayed (hours). Past
    /// it, allocations are still protected by their ledger rows.
    #[arg(long, env = "HOLDFAST_IDEMPOTENCY_RETENTION_HOURS", default_value_t = 72,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub idempotency_retention_hours: u32,

    /// How long delivered webhooks (and events with nothing left to deliver)
    /// are kept for operators before the reaper deletes them (hours).
    #[arg(long, env = "HOLDFAST_OUTBOX_RETENTION_HOURS", default_value_t = 168)]
    pub outbox_retention_hours: u32,

    /// How long inbound webhook records are kept: providers' redeliveries
    /// within this window are recognised as duplicates (hours).
    #[arg(long, env = "HOLDFAST_INBOX_RETENTION_HOURS", default_value_t = 720)]
    pub inbox_retention_hours: u32,

    /// A client must send each request head (and, on a kept-alive
    /// connection, the next one) within this, or its connection is closed:
    /// connections that never finish their headers hold nothing for long.
    #[arg(long, env = "HOLDFAST_HTTP_HEADER_TIMEOUT_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub http_header_timeout_secs: u64,

    /// Connections served at once; past it new ones wait in the kernel's
    /// accept backlog until one closes.
    #[arg(long, env = "HOLDFAST_HTTP_MAX_CONNECTIONS", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub http_max_connections: u64,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "HOLDFAST_LOG_JSON")]
    pub log_json: bool,

    #[command(flatten)]
    pub relay: RelayConfig,
}

/// The partner relay (API.md "Starting the server"). Every flag also reads
/// `HOLDFAST_` + its name in upper snake case.
#[derive(Debug, Clone, Args)]
pub struct RelayConfig {
    /// Attempts before a delivery is dead-lettered.
    #[arg(long, env = "HOLDFAST_RELAY_MAX_ATTEMPTS", default_value_t = 12,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub relay_max_attempts: u32,

    /// Backoff base: attempt k waits a random time in [0, min(base·2^k, cap)].
    #[arg(long, env = "HOLDFAST_RELAY_BACKOFF_BASE_MS", default_value_t = 1000)]
    pub relay_backoff_base_ms: u64,

    /// Backoff cap (one hour by default).
    #[arg(
        long,
        env = "HOLDFAST_RELAY_BACKOFF_CAP_MS",
        default_value_t = 3_600_000
    )]
    pub relay_backoff_cap_ms: u64,

    /// A partner that has not answered within this is retried later.
    #[arg(long, env = "HOLDFAST_RELAY_TIMEOUT_MS", default_value_t = 15_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub relay_timeout_ms: u64,

    /// Allow partner URLs that resolve to loopback, private or link-local
    /// addresses (refused by default, at registration and at delivery).
    #[arg(long, env = "HOLDFAST_RELAY_ALLOW_PRIVATE_TARGETS")]
    pub relay_allow_private_targets: bool,

    /// Relay workers in this process (0: this process only serves the API).
    #[arg(long, env = "HOLDFAST_RELAY_WORKERS", default_value_t = 1)]
    pub relay_workers: u32,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            relay_max_attempts: 12,
            relay_backoff_base_ms: 1000,
            relay_backoff_cap_ms: 3_600_000,
            relay_timeout_ms: 15_000,
            relay_allow_private_targets: false,
            relay_workers: 1,
        }
    }
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("ServeConfig")
            .field("config", &self.config)
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field(
                "database_url",
                &self.database_url.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "read_database_url",
                &self.read_database_url.as_ref().map(|_| "<redacted>"),
            )
            .field("demo", &self.demo)
            .field("no_migrate", &self.no_migrate)
            .field("db_pool_size", &self.db_pool_size)
            .field("db_acquire_timeout_ms", &self.db_acquire_timeout_ms)
            .field(
                "idempotency_retention_hours",
                &self.idempotency_retention_hours,
            )
            .field("outbox_retention_hours", &self.outbox_retention_hours)
            .field("inbox_retention_hours", &self.inbox_retention_hours)
            .field("http_header_timeout_secs", &self.http_header_timeout_secs)
            .field("http_max_connections", &self.http_max_connections)
            .field("log_json", &self.log_json)
            .field("relay", &self.relay)
            .finish()
    }
}

impl ServeConfig {
    /// The data dir, defaulted per platform: a root server keeps it where the
    /// `postgres` system user can reach it.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }
}

/// Configuration of `reconcile`.
#[derive(Clone, Args)]
pub struct ReconcileConfig {
    /// The tenant (slug) whose stock the snapshot counts.
    #[arg(long)]
    pub tenant: String,

    /// The snapshot: CSV with a header row, either `sku_id,qty` or
    /// `style,color,size,qty`; counts are whole numbers ≥ 0.
    pub snapshot: PathBuf,

    /// Set on_hand to the counted quantities through the inventory ledger
    /// (without it, only report).
    #[arg(long)]
    pub apply: bool,

    /// Snapshot rows per import transaction (and checkpoint).
    #[arg(long, env = "HOLDFAST_RECONCILE_PAGE_SIZE", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub page_size: u32,

    /// Where the embedded Postgres cluster lives when DATABASE_URL is not set
    /// (the same as `serve`'s).
    #[arg(long, env = "HOLDFAST_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Use this Postgres instead of the embedded cluster.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Tests only: `import:N` / `apply:N` stops inside the next transaction
    /// after N steps, uncommitted, so a test can kill the process there.
    #[arg(long, env = "HOLDFAST_RECONCILE_TEST_HOLD", hide = true)]
    pub test_hold: Option<String>,
}

impl std::fmt::Debug for ReconcileConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("ReconcileConfig")
            .field("tenant", &self.tenant)
            .field("snapshot", &self.snapshot)
            .field("apply", &self.apply)
            .field("page_size", &self.page_size)
            .field("data_dir", &self.data_dir)
            .field(
                "database_url",
                &self.database_url.as_ref().map(|_| "<redacted>"),
            )
            .field("test_hold", &self.test_hold)
            .finish()
    }
}

impl ReconcileConfig {
    /// The data dir, defaulted exactly as `serve` defaults it.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }
}

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant and its first operator, and print the operator's
    /// one-time password with the sign-in details. A slug that exists is
    /// refused (exit status 1, nothing created).
    #[command(
        after_help = "Example:\n  holdfast-server tenant create --slug initech --name Initech \
                            --operator-email bill@initech.test --operator-name 'Bill L.'\n\n\
                            The password is printed once and only its hash is stored: hand it \
                            over securely. Uses DATABASE_URL, or else the embedded cluster under \
                            --data-dir (started for the command when no server runs on it)."
    )]
    Create(TenantCreateConfig),
}

/// Configuration of `tenant create`.
#[derive(Clone, Args)]
pub struct TenantCreateConfig {
    /// The tenant's sign-in name, permanent: 1–63 of a-z, 0-9 and '-',
    /// starting with a letter or digit.
    #[arg(long, value_parser = crate::master::tenants::parse_slug)]
    pub slug: String,

    /// The tenant's display name (1–200 characters).
    #[arg(long)]
    pub name: String,

    /// The first operator's email: their sign-in name (stored lower-cased).
    #[arg(long)]
    pub operator_email: String,

    /// The first operator's display name [default: Operator].
    #[arg(long)]
    pub operator_name: Option<String>,

    /// Where the embedded Postgres cluster lives when DATABASE_URL is not set
    /// (the same as `serve`'s).
    #[arg(long, env = "HOLDFAST_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Use this Postgres instead of the embedded cluster.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

impl std::fmt::Debug for TenantCreateConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("TenantCreateConfig")
            .field("slug", &self.slug)
            .field("name", &self.name)
            .field("operator_email", &self.operator_email)
            .field("operator_name", &self.operator_name)
            .field("data_dir", &self.data_dir)
            .field(
                "database_url",
                &self.database_url.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl TenantCreateConfig {
    /// The data dir, defaulted exactly as `serve` defaults it.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }
}

/// The platform data dir: the one systemd made for the unit
/// (`StateDirectory=`), else, for a root server, where the `postgres` system
/// user can reach it; /var/lib/holdfast too for the user owning it, so host
/// commands run as the package's `holdfast` user find the service's cluster.
pub fn default_data_dir() -> PathBuf {
    // Several directories are separated by ':'; the unit names one.
    if let Some(state) = std::env::var_os("STATE_DIRECTORY") {
        if let Some(first) = std::env::split_paths(&state).next() {
            if first.is_absolute() {
                return first;
            }
        }
    }
    let system = PathBuf::from("/var/lib/holdfast");
    let euid = nix::unistd::geteuid();
    if euid.is_root() {
        return system;
    }
    {
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata(&system).is_ok_and(|m| m.uid() == euid.as_raw()) {
            return system;
        }
    }
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("holdfast")
}
