//! `holdfast-server` as a child process (the binary Cargo built for these
//! tests), the private Postgres clusters some tests run it on, and the
//! database URL a child is handed.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use holdfast_server::pg::EmbeddedPostgres;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

/// `holdfast-server serve` as a child process; killed (and its log shown if
/// the test failed) when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub base: String,
    pub addr: SocketAddr,
    /// Its stderr, `server.log` in the data directory given.
    pub log: PathBuf,
}

impl ServerProcess {
    /// Starts `serve --demo` on `data_dir/data` (its embedded cluster when
    /// there is no `database_url`) and waits for its `listening on` line.
    pub fn start(database_url: Option<&str>, data_dir: &Path, extra: &[&str]) -> ServerProcess {
        Self::start_with_env(database_url, data_dir, extra, &[])
    }

    /// [`ServerProcess::start`] with more environment variables.
    pub fn start_with_env(
        database_url: Option<&str>,
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> ServerProcess {
        Self::spawn(database_url, data_dir, "127.0.0.1:0", extra, env)
    }

    /// [`ServerProcess::start`] on a given address (an instance restarted
    /// where it listened before).
    pub fn start_at(
        database_url: Option<&str>,
        data_dir: &Path,
        listen: SocketAddr,
        extra: &[&str],
    ) -> ServerProcess {
        Self::spawn(database_url, data_dir, &listen.to_string(), extra, &[])
    }

    fn spawn(
        database_url: Option<&str>,
        data_dir: &Path,
        listen: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> ServerProcess {
        let log = data_dir.join("server.log");
        let log_file = File::create(&log).expect("server log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_holdfast-server"));
        cmd.args(["serve", "--listen", listen, "--demo", "--data-dir"])
            .arg(data_dir.join("data"))
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file));
        match database_url {
            Some(url) => cmd.env("DATABASE_URL", url),
            None => cmd.env_remove("DATABASE_URL"),
        };
        let mut child = cmd.spawn().expect("spawn holdfast-server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("listening on ") {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("server did not start; log:\n{}", tail(&log)));
        let addr = base
            .trim_start_matches("http://")
            .parse()
            .expect("listening address");
        ServerProcess {
            child,
            base,
            addr,
            log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).expect("signal the server");
    }

    /// Waits for the process to exit, failing past `within`.
    pub async fn exited(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit within {within:?}; log:\n{}",
                tail(&self.log)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- server log (tail) ---\n{}", tail(&self.log));
        }
    }
}

/// The last 80 lines of a log.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

/// A temporary directory the `postgres` user can reach when we are root.
pub fn reachable_tempdir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    tmp
}

/// Stops a private cluster when dropped, so a failing test leaves nothing
/// running.
pub struct ClusterGuard(pub PathBuf);

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if let Ok(pg) = EmbeddedPostgres::attach(&self.0) {
            let _ = pg.stop();
        }
    }
}

/// The live postmaster's pid, if one runs for this cluster.
pub fn postmaster_pid(cluster: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(cluster.join("postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .to_owned();
    (state != "Z").then_some(pid)
}

/// `url` with its database (the path) replaced; the query (`?host=…`) kept.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let authority = base.find("://").expect("scheme") + 3;
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    let mut out = format!("{}/{name}", &base[..path]);
    if !query.is_empty() {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// The URL of the database `name` on the cluster `DATABASE_URL` names (the
/// one `#[sqlx::test]` makes its databases on), for a child process.
pub fn database_url(name: &str) -> String {
    let admin = std::env::var("DATABASE_URL").expect("DATABASE_URL (sqlx::test needs it too)");
    with_database(&admin, name)
}

/// The name of a `#[sqlx::test]` database, to hand a child process its URL.
pub fn db_name(db: &sqlx::PgPool) -> String {
    db.connect_options()
        .get_database()
        .expect("test database name")
        .to_owned()
}

/// Waiting for a child to reach its hold point: a deadline, not a pace.
const HOLD_DEADLINE: Duration = Duration::from_secs(120);

/// Runs the binary with a test hold (`env`=`hold`), waits until it holds inside its
/// uncommitted transaction, and SIGKILLs it there.
pub async fn kill_at_hold(env: &str, mut cmd: tokio::process::Command, hold: &str) {
    let mut child = cmd
        .env(env, hold)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holdfast-server");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let reached = tokio::time::timeout(HOLD_DEADLINE, async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            if line.contains("test hold") {
                return true;
            }
            seen.push(line);
        }
        false
    })
    .await
    .expect("the child reached its hold point in time");
    assert!(reached, "the child exited before its hold point: {seen:?}");
    child.start_kill().expect("SIGKILL");
    let status = child.wait().await.expect("wait");
    assert_eq!(status.signal(), Some(9), "killed by SIGKILL");
}

/// Runs the binary to the end; returns its exit code and stdout.
pub async fn run_binary(mut cmd: tokio::process::Command) -> (i32, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = String::new();
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let mut errors = String::new();
    let (a, b) = tokio::join!(
        out.read_to_string(&mut stdout),
        err.read_to_string(&mut errors)
    );
    a.expect("stdout");
    b.expect("stderr");
    let status = child.wait().await.expect("wait");
    let code = status.code().unwrap_or(-1);
    assert!(code == 0 || code == 2, "exit {status}: {errors}");
    (code, stdout)
}
