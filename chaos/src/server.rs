//! The server under test as a real process: the `holdfast-server` binary
//! (its own `main.rs`, see Cargo.toml) over one throwaway database, started,
//! killed with SIGKILL, and started again.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, Executor, PgConnection};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a start may take before the run fails (migrations on a busy
/// 2-core machine included). A bound against a hang, not a timing claim.
const START_DEADLINE: Duration = Duration::from_secs(120);

/// A database created for one run and dropped after it.
pub struct Database {
    admin_url: String,
    pub name: String,
    pub url: String,
}

impl Database {
    /// Creates a fresh database next to the one `admin_url` names.
    pub async fn create(admin_url: &str, name: &str) -> anyhow::Result<Database> {
        let url = with_database(admin_url, name)?;
        let mut admin = PgConnection::connect(admin_url)
            .await
            .context("connecting to DATABASE_URL")?;
        admin
            .execute(format!("drop database if exists \"{name}\" with (force)").as_str())
            .await?;
        admin
            .execute(format!("create database \"{name}\"").as_str())
            .await
            .with_context(|| format!("creating database {name}"))?;
        admin.close().await?;
        Ok(Database {
            admin_url: admin_url.to_owned(),
            name: name.to_owned(),
            url,
        })
    }

    pub fn options(&self) -> anyhow::Result<PgConnectOptions> {
        self.url
            .parse()
            .context("the run's database URL does not parse")
    }

    /// Drops it (every connection still open is terminated).
    pub async fn drop_it(self) -> anyhow::Result<()> {
        let mut admin = PgConnection::connect(&self.admin_url).await?;
        admin
            .execute(format!("drop database if exists \"{}\" with (force)", self.name).as_str())
            .await?;
        admin.close().await?;
        Ok(())
    }
}

/// `url` with its database (the path) replaced by `name`; the query string
/// (e.g. `?host=/socket/dir`) is kept.
pub fn with_database(url: &str, name: &str) -> anyhow::Result<String> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base
        .find("://")
        .ok_or_else(|| anyhow!("DATABASE_URL has no scheme"))?
        + 3;
    let authority_end = base[scheme_end..]
        .find('/')
        .map(|i| scheme_end + i)
        .unwrap_or(base.len());
    let mut out = format!("{}/{}", &base[..authority_end], name);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    Ok(out)
}

/// Relay tuning passed to the server process: fast retries so a run of a
/// minute sees many of them, a short timeout so a stalling partner costs
/// little, and loopback partners allowed.
#[derive(Debug, Clone)]
pub struct RelayFlags {
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
    pub timeout_ms: u64,
    pub max_attempts: u32,
}

/// The server process and how to start it again.
pub struct ServerProcess {
    bin: PathBuf,
    database_url: String,
    relay: RelayFlags,
    log: PathBuf,
    child: Option<Child>,
    addr: Option<SocketAddr>,
    starts: u32,
}

impl ServerProcess {
    pub fn new(bin: &Path, database_url: &str, relay: RelayFlags, log: &Path) -> ServerProcess {
        ServerProcess {
            bin: bin.to_owned(),
            database_url: database_url.to_owned(),
            relay,
            log: log.to_owned(),
            child: None,
            addr: None,
            starts: 0,
        }
    }

    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the process and waits for its `listening on` line.
    pub async fn start(&mut self) -> anyhow::Result<SocketAddr> {
        if self.child.is_some() {
            bail!("the server is already running");
        }
        self.starts += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let r = &self.relay;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0", "--demo"])
            .args(["--db-pool-size", "10"])
            .args(["--relay-workers", "1"])
            .arg("--relay-allow-private-targets")
            .args(["--relay-backoff-base-ms", &r.backoff_base_ms.to_string()])
            .args(["--relay-backoff-cap-ms", &r.backoff_cap_ms.to_string()])
            .args(["--relay-timeout-ms", &r.timeout_ms.to_string()])
            .args(["--relay-max-attempts", &r.max_attempts.to_string()])
            .env("DATABASE_URL", &self.database_url)
            // Warnings and errors only: a request log per act would cost
            // more CPU than the server itself on two cores.
            .env(
                "RUST_LOG",
                std::env::var("HOLDFAST_CHAOS_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout from the server"))?;
        let mut lines = BufReader::new(stdout).lines();
        let addr = tokio::time::timeout(START_DEADLINE, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(rest) = line.strip_prefix("listening on http://") {
                    return rest
                        .trim()
                        .parse::<SocketAddr>()
                        .context("the listening line names no address");
                }
            }
            bail!(
                "the server exited before listening (see {})",
                self.log.display()
            )
        })
        .await
        .map_err(|_| anyhow!("the server did not listen within {START_DEADLINE:?}"))??;
        // Keep reading stdout so the process never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.child = Some(child);
        self.addr = Some(addr);
        Ok(addr)
    }

    /// `kill -9`: no graceful anything; in-flight transactions roll back
    /// when Postgres sees their connections die.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.start_kill().context("SIGKILL the server")?;
            child.wait().await.context("reaping the server")?;
        }
        self.addr = None;
        Ok(())
    }

    pub fn log(&self) -> &Path {
        &self.log
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_only_the_database() -> anyhow::Result<()> {
        assert_eq!(
            with_database(
                "postgres://postgres@localhost:5432/postgres?host=/tmp/pg",
                "x"
            )?,
            "postgres://postgres@localhost:5432/x?host=/tmp/pg"
        );
        assert_eq!(
            with_database("postgres://u:p@h/db", "chaos_1")?,
            "postgres://u:p@h/chaos_1"
        );
        assert_eq!(with_database("postgres://h:1", "y")?, "postgres://h:1/y");
        Ok(())
    }
}
