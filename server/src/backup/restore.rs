//! `holdfast-server restore --from FILE (--data-dir DIR | --database-url URL)`:
//! a backup brought back into a new embedded cluster (or an empty database),
//! ready for `serve`.
//!
//! Only into nothing: DIR must be new or empty, the database must hold no
//! tables. A restore never merges into, or overwrites, anything; a failed one
//! restores nothing (pg_restore runs in one transaction) and leaves DIR as
//! empty as it found it.
//!
//! The steps: the cluster is made as `serve` makes it ([`EmbeddedPostgres`]);
//! the cluster-wide role the row-level security policies name
//! (`holdfast_tenant`; roles are not in a database's dump) is created as the
//! migration creates it; `pg_restore --single-transaction --exit-on-error
//! --no-owner` (objects belong to whoever restores, as they would to whoever
//! migrated); this build's missing migrations are applied (a backup from an
//! older build comes up to date; one from a newer build is left as it is and
//! said so); then the database is marked restored, in one transaction:
//!
//! - a new feed history (migration `feed_history`): every cursor and push
//!   from before the restore is answered 410 `server_restored`, so desks pull
//!   again from the start and re-send what the backup lacks (client/src/sync/);
//! - the restored feed rows move to this cluster's transaction ids: their
//!   `xid`s came from the old cluster and may lie far above the ids this one
//!   hands out, where they would hold back compaction (its bookmark walks in
//!   xid order) until this cluster caught up. They are older than every
//!   pull the new history will serve (each starts from a snapshot), so they
//!   take the restoring transaction's id, and compaction starts over.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use uuid::Uuid;

use super::{human_size, libpq_env, run_tool, Contents, RestoreConfig};
use crate::pg::{find_client_tool, EmbeddedPostgres};
use crate::schema;

/// The role the policies name, made as the migration `rls` makes it (roles
/// belong to the cluster, so a dump does not carry them).
const ENSURE_TENANT_ROLE: &str = "
do $$
begin
    if not exists (select from pg_roles where rolname = 'holdfast_tenant') then
        begin
            create role holdfast_tenant nologin;
        exception
            when duplicate_object or unique_violation then null;
        end;
    end if;
    if not pg_has_role(current_user, 'holdfast_tenant', 'member') then
        begin
            execute format('grant holdfast_tenant to %I', current_user);
        exception
            when duplicate_object or unique_violation then null;
        end;
    end if;
end
$$";

/// What `restore` did.
#[derive(Debug, Clone)]
pub struct RestoreReport {
    pub from: PathBuf,
    /// Where: the data dir, or None for a database named by URL.
    pub data_dir: Option<PathBuf>,
    pub bytes: u64,
    /// The new feed history.
    pub history: Uuid,
    /// Migrations of this build applied on top of the backup.
    pub migrated: Vec<(i64, String)>,
    /// The backup's schema is newer than this build's (left as it was).
    pub newer_than_build: bool,
    pub contents: Contents,
}

impl RestoreReport {
    /// What `restore` prints.
    pub fn render(&self) -> String {
        let into = match &self.data_dir {
            Some(dir) => format!("{} (a new embedded cluster)", dir.display()),
            None => "the database named by --database-url".to_owned(),
        };
        let mut out = format!(
            "restored {} ({}) into {into}\n",
            self.from.display(),
            human_size(self.bytes)
        );
        if self.migrated.is_empty() {
            out.push_str(&format!("schema {}\n", self.contents.schema));
        } else {
            let versions: Vec<String> = self.migrated.iter().map(|(v, _)| v.to_string()).collect();
            out.push_str(&format!(
                "schema {} (this build applied {} to the backup's)\n",
                self.contents.schema,
                versions.join(", ")
            ));
        }
        if self.newer_than_build {
            out.push_str(&format!(
                "note: the backup's schema is newer than this build ({}); serve it with the \
                 build that wrote it, or a newer one\n",
                schema::SchemaState::build_version()
            ));
        }
        out.push_str(&format!("holds: {}\n", self.contents.summary()));
        out.push_str(&format!(
            "new feed history {}: desks that synced with the old server pull everything again \
             and re-send their acts this backup lacks\n",
            self.history
        ));
        if let Some(dir) = &self.data_dir {
            out.push_str(&format!(
                "serve it with: holdfast-server serve --data-dir {}\n",
                dir.display()
            ));
        }
        out
    }
}

/// `holdfast-server restore`.
pub async fn run(config: RestoreConfig) -> anyhow::Result<RestoreReport> {
    let from = config.from.clone();
    let bytes = std::fs::metadata(&from)
        .with_context(|| format!("reading the backup {}", from.display()))?
        .len();
    if !from.is_file() {
        anyhow::bail!("--from {} is not a file", from.display());
    }
    let pg_restore = find_client_tool("pg_restore")?;
    // Reads only its table of contents: a file that is not a backup (or was
    // cut short before its header) is refused before anything is made.
    run_tool(
        &pg_restore,
        &["--list".into(), from.clone().into_os_string()],
        &[],
    )
    .await
    .with_context(|| {
        format!(
            "{} is not a backup `holdfast-server backup` wrote",
            from.display()
        )
    })?;
    let restored = match (&config.data_dir, &config.database_url) {
        (Some(dir), None) => into_data_dir(dir, &from, &pg_restore).await?,
        (None, Some(url)) => {
            let options: PgConnectOptions = url
                .parse()
                .context("--database-url is not a valid Postgres URL")?;
            into_database(&options, Some(url), &from, &pg_restore).await?
        }
        _ => anyhow::bail!("name exactly one target: --data-dir DIR or --database-url URL"),
    };
    Ok(RestoreReport {
        from,
        data_dir: config.data_dir,
        bytes,
        history: restored.history,
        migrated: restored.migrated,
        newer_than_build: restored.newer_than_build,
        contents: restored.contents,
    })
}

struct Restored {
    history: Uuid,
    migrated: Vec<(i64, String)>,
    newer_than_build: bool,
    contents: Contents,
}

/// A new cluster under `dir`, as `serve --data-dir dir` makes it, with the
/// backup in it; stopped at the end. On failure `dir` is emptied again.
async fn into_data_dir(dir: &Path, from: &Path, pg_restore: &Path) -> anyhow::Result<Restored> {
    let created = prepare_empty_dir(dir)?;
    let cluster_dir = dir.join("postgres");
    let result = async {
        let pg = EmbeddedPostgres::start(&cluster_dir).await?;
        let restored = into_database(&pg.holdfast_options(), None, from, pg_restore).await;
        pg.stop().context("stopping the restored cluster")?;
        restored
    }
    .await;
    if result.is_err() {
        if let Ok(pg) = EmbeddedPostgres::attach(&cluster_dir) {
            if let Err(e) = pg.stop() {
                tracing::warn!(error = %e, "stopping the half-restored cluster failed");
            }
        }
        if let Err(e) = empty_again(dir, created) {
            tracing::warn!(dir = %dir.display(), error = %e,
                "could not remove the half-restored cluster; empty the directory by hand");
        }
    }
    result
}

/// Refuses a non-empty `dir`, naming it and one thing in it; creates it if
/// missing (reachable by the `postgres` user when we are root). True if made.
fn prepare_empty_dir(dir: &Path) -> anyhow::Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if let Some(entry) = entries.next() {
                let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
                anyhow::bail!(
                    "refusing to restore into {}: it is not empty (it holds {}); restore into a \
                     new or empty directory",
                    dir.display(),
                    entry.file_name().to_string_lossy()
                );
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            // The cluster inside is 0700 and the postgres user's; it must be
            // able to reach it through here (as serve's data dir).
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("setting the mode of {}", dir.display()))?;
            Ok(true)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", dir.display())),
    }
}

/// Undoes a failed restore: `dir` as it was (absent, or empty).
fn empty_again(dir: &Path, created: bool) -> std::io::Result<()> {
    if created {
        return std::fs::remove_dir_all(dir);
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// The backup into the empty database `options` names, brought up to this
/// build's schema and marked restored.
async fn into_database(
    options: &PgConnectOptions,
    url: Option<&str>,
    from: &Path,
    pg_restore: &Path,
) -> anyhow::Result<Restored> {
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options.clone())
        .await
        .context("connecting to Postgres")?;
    let result = restore_with(&pool, options, url, from, pg_restore).await;
    pool.close().await;
    result
}

async fn restore_with(
    pool: &PgPool,
    options: &PgConnectOptions,
    url: Option<&str>,
    from: &Path,
    pg_restore: &Path,
) -> anyhow::Result<Restored> {
    let database = options.get_database().unwrap_or(options.get_username());
    let tables: Vec<String> = sqlx::query_scalar(
        "select format('%I.%I', n.nspname, c.relname)
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where c.relkind in ('r', 'p', 'v', 'm', 'S', 'f')
            and n.nspname not in ('pg_catalog', 'information_schema')
            and n.nspname not like 'pg\\_toast%' and n.nspname not like 'pg\\_temp%'
          order by 1 limit 3",
    )
    .fetch_all(pool)
    .await?;
    if !tables.is_empty() {
        anyhow::bail!(
            "refusing to restore into the database {database:?}: it is not empty (it holds {}); \
             restore into a new, empty database",
            tables.join(", ")
        );
    }
    sqlx::query(ENSURE_TENANT_ROLE)
        .execute(pool)
        .await
        .context("creating the role holdfast_tenant")?;
    let args: Vec<OsString> = vec![
        "--no-owner".into(),
        "--single-transaction".into(),
        "--exit-on-error".into(),
        "--no-password".into(),
        format!("--dbname={database}").into(),
        from.as_os_str().to_owned(),
    ];
    tracing::info!(from = %from.display(), "pg_restore started");
    run_tool(pg_restore, &args, &libpq_env(options, url))
        .await
        .context("restoring (nothing was restored)")?;
    let state = schema::state(&mut *pool.acquire().await?).await?;
    let newer_than_build = !state.unknown.is_empty();
    let migrated = if newer_than_build {
        Vec::new()
    } else {
        schema::migrate(pool)
            .await
            .context("bringing the restored schema up to this build's")?
            .applied
    };
    let history = mark_restored(pool).await?;
    let mut conn = pool.acquire().await?;
    let contents = Contents::read(&mut conn).await?;
    tracing::info!(%history, schema = contents.schema, "restored");
    Ok(Restored {
        history,
        migrated,
        newer_than_build,
        contents,
    })
}

/// A new feed history, and the restored feed rows on this cluster's
/// transaction ids (see the module docs). One transaction.
async fn mark_restored(pool: &PgPool) -> anyhow::Result<Uuid> {
    let mut tx = pool.begin().await?;
    let history: Uuid = sqlx::query_scalar(
        "update feed_history set id = gen_random_uuid(), restored_at = now() returning id",
    )
    .fetch_one(&mut *tx)
    .await
    .context("starting a new feed history")?;
    sqlx::query("update changes set xid = pg_current_xact_id()")
        .execute(&mut *tx)
        .await
        .context("moving the restored feed to this cluster's transaction ids")?;
    sqlx::query("update feed_compaction set xid = '0', id = 0")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(history)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_empty_directory_is_refused_by_name() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::write(tmp.path().join("precious.txt"), "keep me").expect("write");
        let e = prepare_empty_dir(tmp.path()).expect_err("refused");
        let msg = e.to_string();
        assert!(msg.contains(&tmp.path().display().to_string()), "{msg}");
        assert!(msg.contains("precious.txt"), "{msg}");
        assert!(tmp.path().join("precious.txt").exists());
    }

    #[test]
    fn an_empty_or_missing_directory_is_taken_and_given_back() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert!(!prepare_empty_dir(tmp.path()).expect("empty is fine"));
        let new = tmp.path().join("new");
        assert!(prepare_empty_dir(&new).expect("missing is made"));
        std::fs::write(new.join("partial"), "x").expect("write");
        empty_again(&new, true).expect("undo");
        assert!(!new.exists());
    }
}
