//! The database schema's state against this build's migrations, and the
//! `migrate` command: for several instances on one database, the schema is
//! moved by one `holdfast-server migrate` and every `serve --no-migrate`
//! only checks it.
//!
//! What sqlx's `_sqlx_migrations` table says, and what we do about it:
//!
//! - every migration this build knows is applied: current, serve;
//! - some are not: older. `serve` applies them (under sqlx's advisory lock,
//!   so instances starting at once apply each exactly once and the others
//!   wait); `serve --no-migrate` refuses to start, naming both versions and
//!   the command to run;
//! - it also holds migrations this build does not know: newer, as in a
//!   rolling upgrade when the first new instance (or `migrate` of the new
//!   build) has run and older instances still serve or restart. Migrations are
//!   append-only and additive (STYLE.md), so an older build serves a newer
//!   schema: with a warning, and without applying anything (sqlx would refuse
//!   the whole run over the unknown version). If the database is newer AND
//!   lacks one of ours, it was migrated by some other line of builds: refuse;
//! - a migration recorded as failed, or applied with different SQL than this
//!   build has (checksum): refuse, naming it.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use sqlx::{Connection, PgConnection, PgPool};

use crate::db::MIGRATOR;
use crate::host::HostDb;

/// Configuration of `migrate`.
#[derive(Clone, Args)]
pub struct MigrateConfig {
    /// Where the embedded Postgres cluster lives when DATABASE_URL is not set
    /// (the same as `serve`'s).
    #[arg(long, env = "HOLDFAST_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Use this Postgres instead of the embedded cluster.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

impl std::fmt::Debug for MigrateConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("MigrateConfig")
            .field("data_dir", &self.data_dir)
            .field(
                "database_url",
                &self.database_url.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// One row of `_sqlx_migrations`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Applied {
    version: i64,
    success: bool,
    checksum: Vec<u8>,
}

/// The schema of a database, compared with this build's migrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaState {
    /// Versions this build knows and the database has applied, ascending.
    pub applied: Vec<i64>,
    /// Versions this build knows and the database lacks, ascending.
    pub missing: Vec<i64>,
    /// Versions the database has applied that this build does not know.
    pub unknown: Vec<i64>,
    /// Versions recorded as failed (sqlx calls them dirty).
    pub failed: Vec<i64>,
    /// Versions applied from different SQL than this build's.
    pub changed: Vec<i64>,
}

impl SchemaState {
    /// The newest version this build knows.
    pub fn build_version() -> i64 {
        MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
    }

    /// The database's newest successfully applied version (0: none).
    pub fn database_version(&self) -> i64 {
        self.applied
            .iter()
            .chain(&self.unknown)
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Every migration this build knows is applied, as it has them.
    pub fn is_current(&self) -> bool {
        self.missing.is_empty() && self.failed.is_empty() && self.changed.is_empty()
    }

    /// Why a server may not serve this schema as it is (for `--no-migrate`),
    /// in one line naming both versions and the fix; None: it may.
    pub fn refusal(&self) -> Option<String> {
        let build = Self::build_version();
        let db = self.database_version();
        if let Some(v) = self.failed.first() {
            return Some(format!(
                "the database's migration {v} is recorded as failed (schema left half-applied); \
                 fix it by hand (see _sqlx_migrations) before serving; this build needs schema {build}"
            ));
        }
        if let Some(v) = self.changed.first() {
            return Some(format!(
                "the database's migration {v} was applied from different SQL than this build's \
                 (checksum differs); this build (schema {build}) was not made for this database"
            ));
        }
        if self.missing.is_empty() {
            return None;
        }
        if !self.unknown.is_empty() {
            return Some(format!(
                "the database's schema ({db}) has migrations this build does not know ({}) but lacks \
                 this build's {}: it was migrated by another line of builds; refusing to serve",
                list(&self.unknown),
                list(&self.missing)
            ));
        }
        if self.applied.is_empty() {
            return Some(format!(
                "the database has no Holdfast schema yet and this build needs schema {build}: \
                 run `holdfast-server migrate` (with the same DATABASE_URL or --data-dir), \
                 then start the server again"
            ));
        }
        Some(format!(
            "the database's schema ({db}) is older than this build needs ({build}; missing {}): \
             run `holdfast-server migrate` (with the same DATABASE_URL or --data-dir), then start \
             the server again",
            list(&self.missing)
        ))
    }
}

fn list(versions: &[i64]) -> String {
    versions
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads `_sqlx_migrations` (none yet: nothing applied) against this build.
pub async fn state(conn: &mut PgConnection) -> Result<SchemaState, sqlx::Error> {
    let exists: bool = sqlx::query_scalar("select to_regclass('_sqlx_migrations') is not null")
        .fetch_one(&mut *conn)
        .await?;
    let rows: Vec<(i64, bool, Vec<u8>)> = if exists {
        sqlx::query_as("select version, success, checksum from _sqlx_migrations order by version")
            .fetch_all(&mut *conn)
            .await?
    } else {
        Vec::new()
    };
    let recorded: HashMap<i64, Applied> = rows
        .into_iter()
        .map(|(version, success, checksum)| {
            (
                version,
                Applied {
                    version,
                    success,
                    checksum,
                },
            )
        })
        .collect();
    let mut state = SchemaState {
        applied: Vec::new(),
        missing: Vec::new(),
        unknown: Vec::new(),
        failed: Vec::new(),
        changed: Vec::new(),
    };
    for m in MIGRATOR.iter() {
        match recorded.get(&m.version) {
            None => state.missing.push(m.version),
            Some(a) if !a.success => state.failed.push(m.version),
            Some(a) if a.checksum != m.checksum.as_ref() => state.changed.push(m.version),
            Some(_) => state.applied.push(m.version),
        }
    }
    let mut unknown: Vec<&Applied> = recorded
        .values()
        .filter(|a| !MIGRATOR.version_exists(a.version))
        .collect();
    unknown.sort_by_key(|a| a.version);
    for a in unknown {
        if a.success {
            state.unknown.push(a.version);
        } else {
            state.failed.push(a.version);
        }
    }
    state.applied.sort_unstable();
    state.missing.sort_unstable();
    state.failed.sort_unstable();
    Ok(state)
}

/// What a migration run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    /// Versions applied by this run, with their descriptions.
    pub applied: Vec<(i64, String)>,
    /// The state afterwards.
    pub after: SchemaState,
}

impl MigrateReport {
    /// What `migrate` prints.
    pub fn render(&self) -> String {
        let build = SchemaState::build_version();
        let db = self.after.database_version();
        let mut out = String::new();
        if self.applied.is_empty() {
            out.push_str(&format!("schema is current ({db}); nothing to apply\n"));
        } else {
            out.push_str(&format!(
                "applied {} migration(s); schema is now {db}\n",
                self.applied.len()
            ));
            for (version, description) in &self.applied {
                out.push_str(&format!("  {version} {description}\n"));
            }
        }
        if !self.after.unknown.is_empty() {
            out.push_str(&format!(
                "note: the database is newer than this build (schema {db}, this build {build}; \
                 unknown to it: {}); this build serves it unchanged\n",
                list(&self.after.unknown)
            ));
        }
        out
    }
}

/// Serialises [`migrate`] across processes, so each one's report of what it
/// applied is exact ("Holdfast" in ASCII; sqlx's own migration lock, which
/// `run` also takes, is keyed by the database name and guards older builds).
const MIGRATE_LOCK: i64 = 0x486f_6c64_6661_7374;

/// Brings the schema up to this build's (the one place the server migrates):
/// applies what is missing, once however many instances start at once (the
/// others wait for the lock and find nothing to do). A newer schema (see the
/// module docs) is left as it is, with a warning.
pub async fn migrate(db: &PgPool) -> anyhow::Result<MigrateReport> {
    // Off the pool: a session lock must never go back to it held.
    let mut conn = db
        .acquire()
        .await
        .context("connecting to Postgres")?
        .detach();
    sqlx::query("select pg_advisory_lock($1)")
        .bind(MIGRATE_LOCK)
        .execute(&mut conn)
        .await
        .context("waiting for other instances' migrations")?;
    let report = migrate_locked(&mut conn, db).await;
    // Closing the session releases the lock whatever happened.
    if let Err(e) = conn.close().await {
        tracing::debug!(error = %e, "closing the migration connection");
    }
    report
}

async fn migrate_locked(conn: &mut PgConnection, db: &PgPool) -> anyhow::Result<MigrateReport> {
    let before = state(conn).await.context("reading _sqlx_migrations")?;
    if !before.unknown.is_empty() {
        if let Some(why) = before.refusal() {
            anyhow::bail!(why);
        }
        tracing::warn!(
            database = before.database_version(),
            build = SchemaState::build_version(),
            unknown = %list(&before.unknown),
            "the database's schema is newer than this build; serving it without migrating \
             (migrations are additive). Finish the upgrade: every instance should run the newer build"
        );
        return Ok(MigrateReport {
            applied: Vec::new(),
            after: before,
        });
    }
    // On a pooled connection of its own (sqlx takes its own lock there):
    // the future of `run` on a `&mut PgConnection` cannot be proven `Send`
    // for every lifetime, and callers spawn `migrate` (rust-lang/rust#102211).
    MIGRATOR.run(db).await.context("applying migrations")?;
    let after = state(conn).await.context("reading _sqlx_migrations")?;
    let applied = MIGRATOR
        .iter()
        .filter(|m| before.missing.contains(&m.version) && after.applied.contains(&m.version))
        .map(|m| (m.version, m.description.to_string()))
        .collect();
    Ok(MigrateReport { applied, after })
}

/// For `serve --no-migrate`: Ok when this build may serve the schema as it
/// is (a newer one is logged as such), else the one-line reason.
pub async fn check_for_serving(db: &PgPool) -> anyhow::Result<SchemaState> {
    let mut conn = db.acquire().await.context("connecting to Postgres")?;
    let state = state(&mut conn).await.context("reading _sqlx_migrations")?;
    if let Some(why) = state.refusal() {
        anyhow::bail!(why);
    }
    if !state.unknown.is_empty() {
        tracing::warn!(
            database = state.database_version(),
            build = SchemaState::build_version(),
            "the database's schema is newer than this build; serving it (migrations are additive)"
        );
    }
    Ok(state)
}

/// `holdfast-server migrate`: opens the database as `serve` would, applies
/// the missing migrations, says what it did.
pub async fn run(config: MigrateConfig) -> anyhow::Result<MigrateReport> {
    let data_dir = config
        .data_dir
        .clone()
        .unwrap_or_else(crate::config::default_data_dir);
    let host = HostDb::open_unmigrated(config.database_url.as_deref(), &data_dir).await?;
    let report = migrate(&host.pool).await;
    host.close().await;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(applied: &[i64], missing: &[i64], unknown: &[i64]) -> SchemaState {
        SchemaState {
            applied: applied.to_vec(),
            missing: missing.to_vec(),
            unknown: unknown.to_vec(),
            failed: Vec::new(),
            changed: Vec::new(),
        }
    }

    #[test]
    fn refusals_name_both_versions_and_the_fix() {
        let build = SchemaState::build_version();
        assert_eq!(state(&[1, 2], &[], &[]).refusal(), None);
        assert_eq!(state(&[1, 2], &[], &[9]).refusal(), None, "newer is served");
        let empty = state(&[], &[1, 2], &[]).refusal().expect("refused");
        assert!(empty.contains("no Holdfast schema"), "{empty}");
        assert!(empty.contains("run `holdfast-server migrate`"), "{empty}");
        let older = state(&[1], &[2], &[]).refusal().expect("refused");
        assert!(
            older.contains("(1)") && older.contains(&format!("({build};")),
            "{older}"
        );
        assert!(older.contains("run `holdfast-server migrate`"), "{older}");
        assert!(!older.contains('\n'), "one line: {older}");
        let foreign = state(&[1], &[2], &[9]).refusal().expect("refused");
        assert!(foreign.contains("another line of builds"), "{foreign}");
    }
}
