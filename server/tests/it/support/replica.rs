//! A primary and a real hot standby of it, for the read-replica tests: the
//! primary is a private cluster (`EmbeddedPostgres`, unix socket only), the
//! standby is made from it with `pg_basebackup -R -X stream` into a second
//! data directory and started on its own socket, where it streams the
//! primary's WAL (walsender → walreceiver over the primary's socket: a local
//! connection, no TCP port to collide with) and serves reads as a hot
//! standby.

use std::ffi::OsStr;
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use holdfast_server::db::reads::WalPosition;
use holdfast_server::pg::{find_binaries, EmbeddedPostgres};
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;

use super::process::{reachable_tempdir, ClusterGuard};

/// A failure deadline for replication to do something it does at once.
const PATIENCE: Duration = Duration::from_secs(60);

/// The primary, its standby, and pools on both (the `holdfast` database,
/// migrated and seeded with the demo fixture).
pub struct Pair {
    pub primary: PgPool,
    pub standby: PgPool,
    standby_options: PgConnectOptions,
    // Dropped in this order: the standby's cluster stops before the primary's.
    _standby_guard: ClusterGuard,
    _primary_guard: ClusterGuard,
    _tmp: tempfile::TempDir,
}

impl Pair {
    pub async fn start() -> Pair {
        let tmp = reachable_tempdir();
        let primary_dir = tmp.path().join("p");
        let standby_dir = tmp.path().join("s");
        let primary_guard = ClusterGuard(primary_dir.clone());
        let primary = EmbeddedPostgres::start(&primary_dir)
            .await
            .expect("primary cluster");
        let primary_pool = holdfast_server::pool_options(16, Duration::from_secs(5))
            .connect_with(primary.holdfast_options())
            .await
            .expect("primary pool");
        holdfast_server::db::migrate(&primary_pool)
            .await
            .expect("migrate the primary");
        holdfast_server::demo::seed(&primary_pool)
            .await
            .expect("seed the primary");

        // Test clusters: nothing here must survive a power cut, and fsyncs
        // are most of the time a base backup and a standby's start take on
        // a busy machine (ALTER SYSTEM: the standby inherits it).
        for sql in ["alter system set fsync = off", "select pg_reload_conf()"] {
            sqlx::query(sql)
                .execute(&primary_pool)
                .await
                .expect("fsync off");
        }
        base_backup(&primary_dir, &standby_dir);
        let standby_guard = ClusterGuard(standby_dir.clone());
        // Its own socket: the copied configuration names the primary's.
        let conf = standby_dir.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("standby config");
        text.push_str(&format!(
            "\n# holdfast tests: the standby\n\
             unix_socket_directories = '{}'\n\
             hot_standby = on\n\
             wal_retrieve_retry_interval = '100ms'\n",
            standby_dir.display()
        ));
        std::fs::write(&conf, text).expect("write standby config");
        let standby = EmbeddedPostgres::start(&standby_dir)
            .await
            .expect("standby cluster");
        let standby_options = standby.holdfast_options();
        let standby_pool = holdfast_server::pool_options(16, Duration::from_secs(5))
            .connect_with(standby_options.clone())
            .await
            .expect("standby pool");
        let pair = Pair {
            primary: primary_pool,
            standby: standby_pool,
            standby_options,
            _standby_guard: standby_guard,
            _primary_guard: primary_guard,
            _tmp: tmp,
        };
        pair.wait_streaming().await;
        pair.wait_replayed().await;
        pair
    }

    /// Connection options for the standby's `holdfast` database.
    pub fn standby_options(&self) -> PgConnectOptions {
        self.standby_options.clone()
    }

    /// Until the standby's WAL receiver streams from the primary and the
    /// primary's WAL sender says so too.
    async fn wait_streaming(&self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let receiving: Option<String> =
                sqlx::query_scalar("select status from pg_stat_wal_receiver")
                    .fetch_optional(&self.standby)
                    .await
                    .expect("pg_stat_wal_receiver");
            let sending: Option<String> =
                sqlx::query_scalar("select state from pg_stat_replication")
                    .fetch_optional(&self.primary)
                    .await
                    .expect("pg_stat_replication");
            let in_recovery: bool = sqlx::query_scalar("select pg_is_in_recovery()")
                .fetch_one(&self.standby)
                .await
                .expect("pg_is_in_recovery");
            if in_recovery
                && receiving.as_deref() == Some("streaming")
                && sending.as_deref() == Some("streaming")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the standby never streamed (receiver {receiving:?}, sender {sending:?})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The end of the primary's WAL now (as the server reads it).
    pub async fn primary_wal(&self) -> i64 {
        let (insert, block): (i64, i64) = sqlx::query_as(
            "select (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint,
                    current_setting('wal_block_size')::bigint",
        )
        .fetch_one(&self.primary)
        .await
        .expect("primary WAL position");
        WalPosition::from_insert(insert, block).0
    }

    /// The standby's replay position now.
    pub async fn standby_replayed(&self) -> i64 {
        sqlx::query_scalar("select (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint")
            .fetch_one(&self.standby)
            .await
            .expect("standby replay position")
    }

    /// Until the standby has replayed everything the primary had written
    /// when this was called.
    pub async fn wait_replayed(&self) {
        let target = self.primary_wal().await;
        let deadline = Instant::now() + PATIENCE;
        while self.standby_replayed().await < target {
            assert!(
                Instant::now() < deadline,
                "the standby never replayed up to {target}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops applying WAL on the standby (it keeps receiving it): from now
    /// on it lags, by as much as the primary writes.
    pub async fn pause_replay(&self) {
        sqlx::query("select pg_wal_replay_pause()")
            .execute(&self.standby)
            .await
            .expect("pg_wal_replay_pause");
        let deadline = Instant::now() + PATIENCE;
        loop {
            let state: String = sqlx::query_scalar("select pg_get_wal_replay_pause_state()")
                .fetch_one(&self.standby)
                .await
                .expect("pause state");
            if state == "paused" {
                return;
            }
            assert!(Instant::now() < deadline, "replay never paused ({state})");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub async fn resume_replay(&self) {
        sqlx::query("select pg_wal_replay_resume()")
            .execute(&self.standby)
            .await
            .expect("pg_wal_replay_resume");
    }
}

/// Who runs the Postgres binaries: ourselves, or `postgres` when we are root
/// (as `holdfast_server::pg` does).
fn run_as_postgres(cmd: &mut Command) -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = nix::unistd::User::from_name("postgres")
        .expect("look up the postgres user")
        .expect("a postgres user (root cannot run Postgres)");
    let (uid, gid) = (user.uid.as_raw(), user.gid.as_raw());
    cmd.uid(uid).gid(gid);
    Some((uid, gid))
}

/// `pg_basebackup` of the same major version as the cluster.
fn pg_basebackup(cluster: &Path) -> PathBuf {
    let version = std::fs::read_to_string(cluster.join("PG_VERSION")).expect("PG_VERSION");
    let debian = PathBuf::from(format!(
        "/usr/lib/postgresql/{}/bin/pg_basebackup",
        version.trim()
    ));
    if debian.is_file() {
        return debian;
    }
    let beside = find_binaries()
        .expect("Postgres binaries")
        .join("pg_basebackup");
    if beside.is_file() {
        return beside;
    }
    PathBuf::from("pg_basebackup")
}

/// `pg_basebackup -R -X stream` of the primary into `standby_dir`: a copy
/// taken with a fast checkpoint, the WAL streamed alongside, and the
/// standby's `standby.signal` and `primary_conninfo` written.
fn base_backup(primary_dir: &Path, standby_dir: &Path) {
    std::fs::create_dir(standby_dir).expect("standby dir");
    std::fs::set_permissions(standby_dir, std::fs::Permissions::from_mode(0o700))
        .expect("chmod standby dir");
    let mut cmd = Command::new(pg_basebackup(primary_dir));
    cmd.args([
        OsStr::new("-D"),
        standby_dir.as_os_str(),
        OsStr::new("-h"),
        primary_dir.as_os_str(),
        OsStr::new("-p"),
        OsStr::new("5432"),
        OsStr::new("-U"),
        OsStr::new("postgres"),
        OsStr::new("-R"),
        OsStr::new("-X"),
        OsStr::new("stream"),
        OsStr::new("-c"),
        OsStr::new("fast"),
        OsStr::new("--no-sync"),
    ])
    .current_dir("/")
    .env("LC_ALL", "C.UTF-8");
    if let Some((uid, gid)) = run_as_postgres(&mut cmd) {
        chown(standby_dir, Some(uid), Some(gid)).expect("chown standby dir");
    }
    let out = cmd.output().expect("run pg_basebackup");
    assert!(
        out.status.success(),
        "pg_basebackup failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The primary keeps its socket in its data directory, so the copy holds
    // the primary's socket lock file (naming the primary's live postmaster,
    // which would stop the standby from starting) and its server log.
    for name in [".s.PGSQL.5432.lock", "postgres.log"] {
        match std::fs::remove_file(standby_dir.join(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("removing the copied {name}: {e}"),
        }
    }
}
