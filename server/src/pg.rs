//! The embedded Postgres supervisor: a private cluster under the server's data
//! directory, made and run with the machine's own `initdb` and `pg_ctl`.
//!
//! The cluster listens only on a unix socket inside its own directory (no TCP
//! port to collide with, no other local user can reach it). It is started with
//! `pg_ctl`, which detaches the postmaster: if the server is SIGKILLed the
//! cluster keeps running, and the next start finds it by its `postmaster.pid`
//! and reuses it. A clean exit stops it with a fast shutdown.
//!
//! While the server runs, [`EmbeddedPostgres::supervise`] keeps the cluster
//! up: the server owns it, so if its postmaster dies (killed, OOM-killed,
//! crashed, or stopped by hand) the supervisor starts it again — Postgres runs
//! crash recovery — and the server's pool reconnects by itself. In between,
//! `/readyz` answers 503 and requests answer 503 `service_unavailable`.
//! A database given by `DATABASE_URL` is not ours to restart: the server only
//! reports it unavailable until it is back.
//!
//! Postgres refuses to run as root. When we are root we run its binaries as the
//! `postgres` system user (Debian's package creates it) and hand it the
//! cluster directory.

use std::ffi::OsStr;
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

/// The port number only names the socket file (`.s.PGSQL.5432`); no TCP.
const SOCKET_PORT: u16 = 5432;
/// Linux's `sun_path` holds 108 bytes including the terminator.
const MAX_SOCKET_PATH: usize = 107;
const DATABASE: &str = "holdfast";
const SUPERUSER: &str = "postgres";

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error(
        "no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH or under \
         /usr/lib/postgresql/*/bin; install Debian's `postgresql` package \
         (apt-get install postgresql) or set DATABASE_URL to use an existing database"
    )]
    BinariesMissing,
    #[error(
        "no `{tool}` beside the PostgreSQL server binaries or on PATH; install Debian's \
         `postgresql-client` package (apt-get install postgresql-client)"
    )]
    ToolMissing { tool: String },
    #[error(
        "running as root, but Postgres refuses to run as root and there is no `postgres` \
         system user to run it as; install Debian's `postgresql` package (it creates the \
         user), run as an ordinary user, or set DATABASE_URL"
    )]
    NoPostgresUser,
    #[error(
        "the `postgres` user cannot reach {path}: a parent directory is not searchable by \
         others (e.g. /root is 0700); pick a --data-dir it can reach, such as /var/lib/holdfast"
    )]
    Unreachable { path: PathBuf },
    #[error("socket path {path} is longer than {MAX_SOCKET_PATH} bytes; use a shorter --data-dir")]
    SocketPathTooLong { path: PathBuf },
    #[error("{dir} exists, is not empty and is not a Postgres cluster; refusing to touch it")]
    NotACluster { dir: PathBuf },
    #[error("`{command}` failed ({status}): {stderr}")]
    CommandFailed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("creating the `{DATABASE}` database: {0}")]
    CreateDatabase(#[from] sqlx::Error),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PgError + '_ {
    move |source| PgError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Who runs the Postgres binaries: ourselves, or the `postgres` user when we are root.
#[derive(Debug, Clone, Copy)]
enum RunAs {
    Myself,
    User { uid: u32, gid: u32 },
}

/// How often the supervisor looks at the postmaster.
const SUPERVISE_EVERY: Duration = Duration::from_secs(1);
/// The longest the supervisor waits between failed restarts.
const SUPERVISE_MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A running private cluster. Dropping it does not stop the cluster: call
/// [`EmbeddedPostgres::stop`] on the way out, so a crash leaves it running for
/// the next start to reuse rather than half-stopped.
#[derive(Debug, Clone)]
pub struct EmbeddedPostgres {
    cluster_dir: PathBuf,
    bin_dir: PathBuf,
    run_as: RunAs,
}

impl EmbeddedPostgres {
    /// Creates the cluster under `cluster_dir` if it is new, starts it unless it
    /// is already running (an orphan from a killed server), and makes sure the
    /// `holdfast` database exists.
    pub async fn start(cluster_dir: &Path) -> Result<Self, PgError> {
        let bin_dir = find_binaries()?;
        let run_as = run_as()?;
        let cluster_dir = absolute(cluster_dir)?;
        let socket = cluster_dir.join(format!(".s.PGSQL.{SOCKET_PORT}"));
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(PgError::SocketPathTooLong { path: socket });
        }
        let pg = EmbeddedPostgres {
            cluster_dir,
            bin_dir,
            run_as,
        };
        pg.init_if_new()?;
        if pg.is_running()? {
            tracing::info!(dir = %pg.cluster_dir.display(), "reusing running Postgres cluster (left by an earlier run)");
        } else {
            pg.start_cluster()?;
        }
        pg.ensure_database().await?;
        Ok(pg)
    }

    /// A handle on an existing cluster without starting it (for `stop`).
    pub fn attach(cluster_dir: &Path) -> Result<Self, PgError> {
        Ok(EmbeddedPostgres {
            cluster_dir: absolute(cluster_dir)?,
            bin_dir: find_binaries()?,
            run_as: run_as()?,
        })
    }

    /// Connection options for a database in this cluster, over its socket.
    pub fn connect_options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new()
            .socket(&self.cluster_dir)
            .port(SOCKET_PORT)
            .username(SUPERUSER)
            .database(database)
    }

    /// The options for the server's own database.
    pub fn holdfast_options(&self) -> PgConnectOptions {
        self.connect_options(DATABASE)
    }

    /// A libpq/sqlx URL for the cluster's `postgres` database (what `make test`
    /// hands to `sqlx::test`, which creates a fresh database per test).
    pub fn admin_url(&self) -> String {
        format!(
            "postgres://{SUPERUSER}@localhost:{SOCKET_PORT}/postgres?host={}",
            self.cluster_dir.display()
        )
    }

    pub fn cluster_dir(&self) -> &Path {
        &self.cluster_dir
    }

    /// Fast shutdown: open sessions are ended, the cluster is consistent on disk.
    pub fn stop(&self) -> Result<(), PgError> {
        if !self.is_running()? {
            return Ok(());
        }
        let dir = self.cluster_dir.clone();
        self.run_checked(
            "pg_ctl",
            [
                OsStr::new("stop"),
                OsStr::new("-D"),
                dir.as_os_str(),
                OsStr::new("-m"),
                OsStr::new("fast"),
                OsStr::new("-w"),
            ],
        )?;
        tracing::info!(dir = %self.cluster_dir.display(), "Postgres cluster stopped");
        Ok(())
    }

    /// Keeps the cluster running until `stop` turns true (or its sender is
    /// dropped): every second it checks the postmaster and, if it is gone,
    /// starts the cluster again, backing off while that fails (e.g. old
    /// backends still hold the shared memory, or the disk is full). Stop the
    /// supervisor before [`EmbeddedPostgres::stop`], or it restarts the cluster.
    pub fn supervise(
        &self,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let pg = self.clone();
        tokio::spawn(async move {
            let mut wait = SUPERVISE_EVERY;
            loop {
                tokio::select! {
                    changed = stop.changed() => if changed.is_err() || *stop.borrow() { return },
                    _ = tokio::time::sleep(wait) => {}
                }
                let check = pg.clone();
                let restarted = tokio::task::spawn_blocking(move || check.restart_if_down()).await;
                wait = match restarted {
                    Ok(Ok(false)) => SUPERVISE_EVERY,
                    Ok(Ok(true)) => {
                        tracing::warn!(dir = %pg.cluster_dir.display(), "embedded Postgres restarted");
                        SUPERVISE_EVERY
                    }
                    Ok(Err(e)) => {
                        let next = (wait * 2).min(SUPERVISE_MAX_BACKOFF);
                        tracing::error!(error = %e, retry_in = ?next, "restarting the embedded Postgres failed");
                        next
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the embedded Postgres check panicked");
                        SUPERVISE_MAX_BACKOFF
                    }
                };
            }
        })
    }

    /// Starts the cluster if its postmaster is gone; true if it did.
    fn restart_if_down(&self) -> Result<bool, PgError> {
        if self.postmaster_alive() {
            return Ok(false);
        }
        tracing::warn!(dir = %self.cluster_dir.display(), "the embedded Postgres is not running; starting it");
        // The lock files of a dead postmaster (data directory and socket) can
        // name a zombie (see `postmaster_alive`), which Postgres' own check
        // takes for a live server. Removing them is safe once the postmaster
        // is dead: backends it left behind still hold the shared memory, and a
        // new postmaster refuses to start until they are gone (we retry).
        for name in [
            "postmaster.pid".to_owned(),
            format!(".s.PGSQL.{SOCKET_PORT}.lock"),
        ] {
            let lock = self.cluster_dir.join(name);
            match std::fs::remove_file(&lock) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&lock)(e)),
            }
        }
        self.start_cluster()?;
        Ok(true)
    }

    /// Whether the postmaster named in `postmaster.pid` is running. A killed
    /// postmaster whose parent never reaps it (pg_ctl has exited, so its
    /// parent is init, and not every init reaps) stays a zombie that
    /// `kill(pid, 0)` — and `pg_ctl status` — report as alive; /proc tells.
    fn postmaster_alive(&self) -> bool {
        let pid_file = self.cluster_dir.join("postmaster.pid");
        let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<i32>().ok())
        else {
            return false;
        };
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // `pid (comm) S …`: the state follows the last ')'.
            Ok(stat) => stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X"),
            Err(_) if Path::new("/proc/self/stat").exists() => false,
            // No /proc: the best we can do.
            Err(_) => !matches!(
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
                Err(nix::errno::Errno::ESRCH)
            ),
        }
    }

    fn init_if_new(&self) -> Result<(), PgError> {
        let dir = &self.cluster_dir;
        if dir.join("PG_VERSION").exists() {
            return Ok(());
        }
        if dir.exists() {
            let mut entries = std::fs::read_dir(dir).map_err(io_err(dir))?;
            if entries.next().is_some() {
                return Err(PgError::NotACluster { dir: dir.clone() });
            }
        } else {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io_err(dir))?;
        if let RunAs::User { uid, gid } = self.run_as {
            chown(dir, Some(uid), Some(gid)).map_err(io_err(dir))?;
            check_reachable(dir, uid, gid)?;
        }
        tracing::info!(dir = %dir.display(), "creating a private Postgres cluster (initdb)");
        self.run_checked(
            "initdb",
            [
                OsStr::new("-D"),
                dir.as_os_str(),
                OsStr::new("-U"),
                OsStr::new(SUPERUSER),
                // Only the socket in this 0700 directory reaches the cluster.
                OsStr::new("--auth=trust"),
                OsStr::new("--encoding=UTF8"),
                OsStr::new("--locale=C.UTF-8"),
            ],
        )?;
        // Settings live in the cluster's own config so an orphan restarted by
        // hand (pg_ctl start -D …) comes back exactly as we run it.
        let conf = dir.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).map_err(io_err(&conf))?;
        text.push_str(&format!(
            "\n# holdfast: private cluster, unix socket only\n\
             listen_addresses = ''\n\
             unix_socket_directories = '{}'\n\
             port = {SOCKET_PORT}\n\
             max_connections = 200\n",
            dir.display()
        ));
        std::fs::write(&conf, text).map_err(io_err(&conf))?;
        Ok(())
    }

    fn is_running(&self) -> Result<bool, PgError> {
        // pg_ctl status: 0 = running, 3 = not running, 4 = no data dir.
        let out = self.run(
            "pg_ctl",
            [
                OsStr::new("status"),
                OsStr::new("-D"),
                self.cluster_dir.as_os_str(),
            ],
        )?;
        Ok(out.status.success())
    }

    fn start_cluster(&self) -> Result<(), PgError> {
        let log = self.cluster_dir.join("postgres.log");
        let args = [
            OsStr::new("start"),
            OsStr::new("-D"),
            self.cluster_dir.as_os_str(),
            OsStr::new("-l"),
            log.as_os_str(),
            OsStr::new("-w"),
            OsStr::new("-t"),
            OsStr::new("60"),
        ];
        match self.run_checked("pg_ctl", args) {
            Ok(_) => Ok(()),
            Err(first) => {
                // A postmaster.pid whose process is gone (a reboot, a kill of
                // both) can block the start when its pid was reused. pg_ctl just
                // told us no server runs here, so the lock file is stale.
                let pid_file = self.cluster_dir.join("postmaster.pid");
                if pid_file.exists() && !self.is_running()? {
                    tracing::warn!(file = %pid_file.display(), "removing stale postmaster.pid and retrying");
                    std::fs::remove_file(&pid_file).map_err(io_err(&pid_file))?;
                    self.run_checked("pg_ctl", args).map(|_| ())
                } else {
                    Err(first)
                }
            }
        }
    }

    async fn ensure_database(&self) -> Result<(), PgError> {
        let mut conn = self.connect_options("postgres").connect().await?;
        let exists: bool =
            sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
                .bind(DATABASE)
                .fetch_one(&mut conn)
                .await?;
        if !exists {
            sqlx::query(&format!("create database {DATABASE}"))
                .execute(&mut conn)
                .await?;
        }
        conn.close().await?;
        Ok(())
    }

    fn run<I, S>(&self, program: &str, args: I) -> Result<Output, PgError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let path = self.bin_dir.join(program);
        let mut cmd = Command::new(&path);
        // Debian's Postgres speaks sd_notify too: the unit's readiness is ours.
        cmd.args(args)
            .current_dir("/")
            .env("LC_ALL", "C.UTF-8")
            .env_remove("NOTIFY_SOCKET");
        if let RunAs::User { uid, gid } = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        cmd.output().map_err(io_err(&path))
    }

    fn run_checked<I, S>(&self, program: &str, args: I) -> Result<Output, PgError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let out = self.run(program, args)?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(PgError::CommandFailed {
                command: program.to_owned(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            })
        }
    }
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`: PATH first (so an
/// operator's choice wins), then the newest Debian cluster version.
pub fn find_binaries() -> Result<PathBuf, PgError> {
    let has_all = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|b| dir.join(b).is_file())
    };
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_all(&dir) {
                return Ok(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, bin)| has_all(bin))
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or(PgError::BinariesMissing)
}

/// A Postgres client tool (`pg_dump`, `pg_restore`): beside the server
/// binaries [`find_binaries`] picks (the same major version, so a dump of the
/// embedded cluster is never refused as from a newer server), else on PATH.
pub fn find_client_tool(name: &str) -> Result<PathBuf, PgError> {
    if let Ok(dir) = find_binaries() {
        let tool = dir.join(name);
        if tool.is_file() {
            return Ok(tool);
        }
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|tool| tool.is_file())
        .ok_or_else(|| PgError::ToolMissing {
            tool: name.to_owned(),
        })
}

fn run_as() -> Result<RunAs, PgError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(RunAs::Myself);
    }
    match nix::unistd::User::from_name(SUPERUSER) {
        Ok(Some(user)) => Ok(RunAs::User {
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        }),
        _ => Err(PgError::NoPostgresUser),
    }
}

fn absolute(dir: &Path) -> Result<PathBuf, PgError> {
    if dir.is_absolute() {
        return Ok(dir.to_owned());
    }
    let cwd = std::env::current_dir().map_err(io_err(dir))?;
    Ok(cwd.join(dir))
}

/// Every ancestor must be searchable by the postgres user, or initdb fails
/// with a message that does not say which directory is at fault.
fn check_reachable(dir: &Path, uid: u32, gid: u32) -> Result<(), PgError> {
    use std::os::unix::fs::MetadataExt;
    for ancestor in dir.ancestors().skip(1) {
        let meta = std::fs::metadata(ancestor).map_err(io_err(ancestor))?;
        let mode = meta.mode();
        let searchable = if meta.uid() == uid {
            mode & 0o100 != 0
        } else if meta.gid() == gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !searchable {
            return Err(PgError::Unreachable {
                path: ancestor.to_owned(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_machine_binaries() {
        let dir = find_binaries().expect("this machine has Postgres");
        assert!(dir.join("initdb").is_file());
    }

    #[test]
    fn refuses_a_directory_that_is_not_a_cluster() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::write(tmp.path().join("precious.txt"), "keep me").expect("write");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let err = rt
            .block_on(EmbeddedPostgres::start(tmp.path()))
            .expect_err("must refuse");
        assert!(matches!(err, PgError::NotACluster { .. }), "{err}");
        assert!(tmp.path().join("precious.txt").exists());
    }
}
