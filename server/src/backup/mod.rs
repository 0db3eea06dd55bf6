//! `holdfast-server backup` and `restore`: a consistent, online copy of the
//! database as a `pg_dump` custom-format file, and a new embedded cluster (or
//! an empty database) made from one.
//!
//! Both drive the machine's own `pg_dump` / `pg_restore` (found beside the
//! server binaries, as `pg.rs` finds `initdb`), run as ourselves: they are
//! clients, and the dump file is ours, not the `postgres` user's. They reach
//! the database the way `serve` does (DATABASE_URL, or the embedded cluster's
//! socket), with the connection handed to libpq through its environment
//! (`PGHOST`, `PGPASSWORD`, …), never on a command line other users can read.
//!
//! What a restore means for desks is in [`restore`] and the migration
//! `feed_history`.

pub mod dump;
pub mod restore;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Args;
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use sqlx::PgConnection;
use uuid::Uuid;

pub use dump::BackupReport;
pub use restore::RestoreReport;

/// Configuration of `backup`.
#[derive(Clone, Args)]
pub struct BackupConfig {
    /// The file to write (pg_dump's custom format). Written as FILE.part and
    /// renamed once complete and on disk, so a failed backup never leaves a
    /// file that looks whole; an existing FILE is replaced only then.
    #[arg(long, value_name = "FILE")]
    pub to: PathBuf,

    /// Where the embedded Postgres cluster lives when DATABASE_URL is not set
    /// (the same as `serve`'s). A running server's cluster is dumped while it
    /// serves; a stopped one is started for the backup and stopped after.
    #[arg(long, env = "HOLDFAST_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Back up this Postgres database instead of the embedded cluster.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// How long the backup waits for a table lock held by someone else (a
    /// migration, a manual ALTER) before it gives up, leaving no file.
    #[arg(long, env = "HOLDFAST_BACKUP_LOCK_WAIT_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub lock_wait_secs: u64,
}

impl std::fmt::Debug for BackupConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("BackupConfig")
            .field("to", &self.to)
            .field("data_dir", &self.data_dir)
            .field(
                "database_url",
                &self.database_url.as_ref().map(|_| "<redacted>"),
            )
            .field("lock_wait_secs", &self.lock_wait_secs)
            .finish()
    }
}

/// Configuration of `restore`. The target is named explicitly (no
/// environment): exactly one of --data-dir and --database-url.
#[derive(Clone, Args)]
#[command(group = clap::ArgGroup::new("target").required(true).multiple(false)
    .args(["data_dir", "database_url"]))]
pub struct RestoreConfig {
    /// A file written by `holdfast-server backup`.
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,

    /// Make a new embedded cluster here, for `serve --data-dir DIR`. DIR must
    /// not exist or be empty. Run restore as the user `serve` will run as: the
    /// cluster belongs to whoever creates it (the `postgres` system user when
    /// that is root).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Restore into this database instead; it must be empty (no tables).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
}

impl std::fmt::Debug for RestoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("RestoreConfig")
            .field("from", &self.from)
            .field("data_dir", &self.data_dir)
            .field(
                "database_url",
                &self.database_url.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// What a backup holds, read in its snapshot (so it describes exactly the
/// file), and again after a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contents {
    /// The newest migration applied (0: none).
    pub schema: i64,
    /// The database's feed history (None: a schema from before histories).
    pub history: Option<Uuid>,
    /// Rows per table, in the order they are shown.
    pub counts: Vec<(&'static str, i64)>,
}

/// The tables worth naming in a report, with the noun each row is.
const COUNTED: [(&str, &str); 9] = [
    ("tenants", "tenants"),
    ("users", "users"),
    ("skus", "SKUs"),
    ("customers", "customers"),
    ("orders", "orders"),
    ("order_lines", "order lines"),
    ("allocation_ledger", "allocation ledger rows"),
    ("idempotency_keys", "idempotency keys"),
    ("outbox", "outbox events"),
];

impl Contents {
    /// Reads the contents over `conn` (in its transaction's snapshot, if any).
    pub async fn read(conn: &mut PgConnection) -> Result<Contents, sqlx::Error> {
        let has_migrations: bool =
            sqlx::query_scalar("select to_regclass('_sqlx_migrations') is not null")
                .fetch_one(&mut *conn)
                .await?;
        let schema: i64 = if has_migrations {
            sqlx::query_scalar(
                "select coalesce(max(version), 0) from _sqlx_migrations where success",
            )
            .fetch_one(&mut *conn)
            .await?
        } else {
            0
        };
        let history: Option<Uuid> =
            if sqlx::query_scalar("select to_regclass('feed_history') is not null")
                .fetch_one(&mut *conn)
                .await?
            {
                sqlx::query_scalar("select id from feed_history")
                    .fetch_optional(&mut *conn)
                    .await?
            } else {
                None
            };
        let mut counts = Vec::new();
        for (table, noun) in COUNTED {
            let exists: bool = sqlx::query_scalar("select to_regclass($1) is not null")
                .bind(table)
                .fetch_one(&mut *conn)
                .await?;
            if exists {
                // The names are ours (COUNTED), never input.
                let n: i64 = sqlx::query_scalar(&format!("select count(*) from {table}"))
                    .fetch_one(&mut *conn)
                    .await?;
                counts.push((noun, n));
            }
        }
        Ok(Contents {
            schema,
            history,
            counts,
        })
    }

    /// `2 tenants, 340 SKUs, …`
    pub fn summary(&self) -> String {
        self.counts
            .iter()
            .map(|(noun, n)| format!("{n} {noun}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The row count of `noun` (tests, reports).
    pub fn count(&self, noun: &str) -> Option<i64> {
        self.counts
            .iter()
            .find(|(n, _)| *n == noun)
            .map(|(_, c)| *c)
    }
}

/// The libpq environment that reaches the database `options` (and `url`,
/// for its password, which sqlx does not give back) describe.
fn libpq_env(options: &PgConnectOptions, url: Option<&str>) -> Vec<(&'static str, OsString)> {
    let host: OsString = match options.get_socket() {
        Some(dir) => dir.clone().into_os_string(),
        None => options.get_host().into(),
    };
    let mut env = vec![
        ("PGHOST", host),
        ("PGPORT", options.get_port().to_string().into()),
        ("PGUSER", options.get_username().into()),
        (
            "PGDATABASE",
            options
                .get_database()
                .unwrap_or(options.get_username())
                .into(),
        ),
        (
            "PGSSLMODE",
            match options.get_ssl_mode() {
                PgSslMode::Disable => "disable",
                PgSslMode::Allow => "allow",
                PgSslMode::Prefer => "prefer",
                PgSslMode::Require => "require",
                PgSslMode::VerifyCa => "verify-ca",
                PgSslMode::VerifyFull => "verify-full",
            }
            .into(),
        ),
        ("PGAPPNAME", "holdfast-server".into()),
    ];
    if let Some(options) = options.get_options() {
        env.push(("PGOPTIONS", options.into()));
    }
    if let Some(password) = url.and_then(password_of) {
        env.push(("PGPASSWORD", password.into()));
    }
    env
}

/// The password in a `postgres://user:password@host/db` URL (or its
/// `?password=` parameter), percent-decoded.
fn password_of(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    if let Some((userinfo, _)) = authority.rsplit_once('@') {
        if let Some((_, password)) = userinfo.split_once(':') {
            return Some(percent_decode(password));
        }
    }
    let query = rest.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or(query);
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == "password")
        .map(|(_, v)| percent_decode(v))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let (h, l) = (hex(h).unwrap_or(0), hex(l).unwrap_or(0));
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A client tool run to its end: its stderr on failure, for the message.
async fn run_tool(
    tool: &Path,
    args: &[OsString],
    env: &[(&'static str, OsString)],
) -> anyhow::Result<()> {
    let name = tool
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| tool.display().to_string());
    let out = tokio::process::Command::new(tool)
        .args(args)
        // Only what we set: a PGSERVICE or PGPASSFILE of the operator's
        // shell must not send the tool elsewhere.
        .env_remove("PGSERVICE")
        .env_remove("PGSERVICEFILE")
        .env_remove("PGPASSFILE")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("LC_ALL", "C.UTF-8")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("running {}: {e}", tool.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stderr = stderr.trim();
    anyhow::bail!("{name} failed ({}): {stderr}", out.status)
}

/// `1.4 MiB`
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut size = bytes as f64 / 1024.0;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_come_from_the_url_decoded() {
        assert_eq!(
            password_of("postgres://app:s%40cr%3At@db.internal:5432/holdfast").as_deref(),
            Some("s@cr:t")
        );
        assert_eq!(
            password_of("postgres://app@db/holdfast?password=p%26w&sslmode=require").as_deref(),
            Some("p&w")
        );
        assert_eq!(password_of("postgres://app@db/holdfast"), None);
        assert_eq!(
            password_of("postgres://postgres@localhost:5432/postgres?host=/tmp/x"),
            None
        );
    }

    #[test]
    fn the_environment_names_the_socket_or_host() {
        let url = "postgres://postgres@localhost:5432/holdfast?host=/tmp/pg";
        let options: PgConnectOptions = url.parse().expect("url");
        let env = libpq_env(&options, Some(url));
        let get = |k: &str| {
            env.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("PGHOST").as_deref(), Some("/tmp/pg"));
        assert_eq!(get("PGDATABASE").as_deref(), Some("holdfast"));
        assert_eq!(get("PGPASSWORD"), None);
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_size(512), "512 bytes");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(3 * 1024 * 1024), "3.0 MiB");
    }
}
