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
    /// Run the HTTP API (prints `listening on http://ADDR` once it accepts requests).
    Serve(ServeConfig),
    /// Manage a private Postgres cluster by hand (used by `make test`).
    #[command(subcommand)]
    Postgres(PostgresCommand),
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

/// Configuration of `serve`. Every flag also reads `HOLDFAST_<NAME>`.
#[derive(Clone, Args)]
pub struct ServeConfig {
    /// Address to listen on; port 0 picks a free one (printed in the `listening on` line).
    #[arg(long, env = "HOLDFAST_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Where the embedded Postgres cluster lives when DATABASE_URL is not set.
    /// Default: the platform data dir (/var/lib/holdfast when run as root, so the
    /// `postgres` user can reach it).
    #[arg(long, env = "HOLDFAST_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Use this Postgres instead of the embedded cluster.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Seed the demo tenants, users, customers and SKUs (once; a second run changes nothing).
    #[arg(long, env = "HOLDFAST_DEMO")]
    pub demo: bool,

    /// Database connections in the pool.
    #[arg(long, env = "HOLDFAST_DB_POOL_SIZE", default_value_t = 32)]
    pub db_pool_size: u32,

    /// How long an idempotency key's stored answer is replayed (hours). Past
    /// it, allocations are still protected by their ledger rows.
    #[arg(long, env = "HOLDFAST_IDEMPOTENCY_RETENTION_HOURS", default_value_t = 72,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub idempotency_retention_hours: u32,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "HOLDFAST_LOG_JSON")]
    pub log_json: bool,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("ServeConfig")
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field(
                "database_url",
                &self.database_url.as_ref().map(|_| "<redacted>"),
            )
            .field("demo", &self.demo)
            .field("db_pool_size", &self.db_pool_size)
            .field(
                "idempotency_retention_hours",
                &self.idempotency_retention_hours,
            )
            .field("log_json", &self.log_json)
            .finish()
    }
}

impl ServeConfig {
    /// The data dir, defaulted per platform: a root server keeps it where the
    /// `postgres` system user can reach it.
    pub fn data_dir(&self) -> PathBuf {
        if let Some(dir) = &self.data_dir {
            return dir.clone();
        }
        if nix::unistd::geteuid().is_root() {
            return PathBuf::from("/var/lib/holdfast");
        }
        let base = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(|| PathBuf::from("."));
        base.join("holdfast")
    }
}
