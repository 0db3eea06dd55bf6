//! `holdfast-server backup --to FILE`: one consistent snapshot of the whole
//! database while it serves.
//!
//! Consistent: we open a REPEATABLE READ transaction, export its snapshot,
//! count what it holds, and hand the snapshot to `pg_dump --snapshot`, so the
//! file and the report describe the same instant. Every transaction committed
//! before it is in the file whole, none after is in it at all: positions equal
//! their ledgers in the file because they do in every committed state, and an
//! acknowledged act (committed with its idempotency key) is there exactly
//! once or, if acknowledged after the snapshot, not at all.
//!
//! Online: pg_dump takes only ACCESS SHARE locks; requests keep running. A
//! migration (which needs stronger locks) waits for the backup, and the
//! backup gives up after `--lock-wait-secs` rather than queue behind one.
//!
//! Never a file that looks whole unless it is: pg_dump writes FILE.part
//! (mode 0600: it holds password hashes and tokens' hashes), which is fsynced
//! and renamed to FILE only after pg_dump succeeded; any failure removes it.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Utc};

use super::{human_size, libpq_env, run_tool, BackupConfig, Contents};
use crate::host::HostDb;
use crate::pg::find_client_tool;

/// What `backup` wrote.
#[derive(Debug, Clone)]
pub struct BackupReport {
    pub file: PathBuf,
    pub bytes: u64,
    /// When the snapshot was taken (the server's clock).
    pub taken_at: DateTime<Utc>,
    pub contents: Contents,
}

impl BackupReport {
    /// What `backup` prints.
    pub fn render(&self) -> String {
        let history = self
            .contents
            .history
            .map(|h| format!("; feed history {h}"))
            .unwrap_or_default();
        format!(
            "backup written: {} ({}, pg_dump custom format)\n\
             snapshot of {}; schema {}{history}\n\
             holds: {}\n\
             restore it with: holdfast-server restore --from {} --data-dir EMPTY_DIR\n",
            self.file.display(),
            human_size(self.bytes),
            self.taken_at.format("%Y-%m-%d %H:%M:%S%.3f UTC"),
            self.contents.schema,
            self.contents.summary(),
            self.file.display(),
        )
    }
}

/// `holdfast-server backup`.
pub async fn run(config: BackupConfig) -> anyhow::Result<BackupReport> {
    let target = config.to.clone();
    if target.is_dir() {
        anyhow::bail!(
            "--to {} is a directory; name the file to write",
            target.display()
        );
    }
    let part = part_path(&target);
    let pg_dump = find_client_tool("pg_dump")?;
    let data_dir = config
        .data_dir
        .clone()
        .unwrap_or_else(crate::config::default_data_dir);
    let host = HostDb::open_unmigrated(config.database_url.as_deref(), &data_dir).await?;
    let result = dump(
        &host,
        config.database_url.as_deref(),
        &pg_dump,
        &target,
        &part,
        config.lock_wait_secs,
    )
    .await;
    host.close().await;
    if result.is_err() {
        // Whatever pg_dump left is not a backup.
        match std::fs::remove_file(&part) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(file = %part.display(), error = %e,
                "could not remove the partial backup; delete it by hand"),
        }
    }
    result
}

async fn dump(
    host: &HostDb,
    url: Option<&str>,
    pg_dump: &Path,
    target: &Path,
    part: &Path,
    lock_wait_secs: u64,
) -> anyhow::Result<BackupReport> {
    let lock_wait = format!("{lock_wait_secs}s");
    let mut tx = host.pool.begin().await.context("connecting to Postgres")?;
    sqlx::query("set transaction isolation level repeatable read, read only")
        .execute(&mut *tx)
        .await?;
    // Our counts read the tables too: the same bound as pg_dump's.
    sqlx::query("select set_config('lock_timeout', $1, true)")
        .bind(&lock_wait)
        .execute(&mut *tx)
        .await?;
    let (snapshot, taken_at): (String, DateTime<Utc>) =
        sqlx::query_as("select pg_export_snapshot(), now()")
            .fetch_one(&mut *tx)
            .await
            .context("exporting a snapshot for pg_dump")?;
    let contents = Contents::read(&mut tx)
        .await
        .context("reading what the backup holds")?;
    if contents.schema == 0 {
        anyhow::bail!(
            "the database has no Holdfast schema (no applied migrations): nothing to back up; \
             is DATABASE_URL / --data-dir the right one?"
        );
    }
    // Ours alone from the first byte; pg_dump truncates and keeps the mode.
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(part)
        .with_context(|| format!("creating {}", part.display()))?;
    let mut file_arg = OsString::from("--file=");
    file_arg.push(part.as_os_str());
    let args: Vec<OsString> = vec![
        "--format=custom".into(),
        format!("--snapshot={snapshot}").into(),
        format!("--lock-wait-timeout={lock_wait}").into(),
        "--no-password".into(),
        file_arg,
    ];
    tracing::info!(file = %target.display(), snapshot, "pg_dump started");
    run_tool(pg_dump, &args, &libpq_env(&host.connect, url)).await?;
    // The snapshot was needed until pg_dump had it; it is done now.
    tx.rollback().await?;
    sync_file(part)?;
    std::fs::rename(part, target)
        .with_context(|| format!("renaming {} to {}", part.display(), target.display()))?;
    sync_parent(target)?;
    let bytes = std::fs::metadata(target)
        .with_context(|| format!("reading {}", target.display()))?
        .len();
    let report = BackupReport {
        file: target.to_owned(),
        bytes,
        taken_at,
        contents,
    };
    tracing::info!(file = %target.display(), bytes, "backup written");
    Ok(report)
}

/// `FILE.part` beside `FILE`.
fn part_path(target: &Path) -> PathBuf {
    let mut name = target.as_os_str().to_owned();
    name.push(".part");
    PathBuf::from(name)
}

fn sync_file(path: &Path) -> anyhow::Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("flushing {} to disk", path.display()))
}

/// The rename is durable once the directory is.
fn sync_parent(path: &Path) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    std::fs::File::open(&dir)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("flushing {} to disk", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partial_file_sits_beside_the_target() {
        assert_eq!(
            part_path(Path::new("/backups/holdfast.dump")),
            PathBuf::from("/backups/holdfast.dump.part")
        );
    }
}
