//! `holdfast-server reconcile --tenant T <snapshot.csv> [--apply]`: imports a
//! 3PL inventory snapshot, reports where its counts differ from our on_hand,
//! and with `--apply` books the differences through the inventory ledger.
//!
//! A run is the tenant plus the SHA-256 of the file's bytes, so running the
//! same file again continues (or, when finished, repeats nothing of) the same
//! run. The import commits a page of rows and its checkpoint per transaction
//! (`import.rs`); the apply books one SKU per transaction and records its
//! outcome in it (`apply.rs`). Both can be killed at any point and re-run.
//!
//! Test-only: `HOLDFAST_RECONCILE_TEST_HOLD=import:N` (or `apply:N`) makes the
//! process stop inside the transaction of its N+1st page (or booking), after
//! the writes and before the commit, print a line to stderr and wait forever,
//! so a test can SIGKILL it at exactly that point. It changes nothing else.

mod apply;
mod import;
pub(crate) mod progress;
mod report;
pub mod snapshot;

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::Context;
use sqlx::PgPool;
use uuid::Uuid;

pub use apply::Applied;
pub use import::Imported;
pub use report::{Counted, Reject, Report};

use crate::config::ReconcileConfig;
use progress::Progress;

/// What to reconcile, once the database is open.
#[derive(Debug, Clone)]
pub struct Options {
    /// Tenant slug.
    pub tenant: String,
    pub snapshot: PathBuf,
    pub apply: bool,
    /// Rows per import transaction.
    pub page_size: usize,
    /// Draw progress bars (only ever on a terminal).
    pub progress: bool,
    pub test_hold: Option<TestHold>,
}

/// `reconcile` from the command line: opens the database the way `serve`
/// does (DATABASE_URL, or the embedded cluster under the data dir), applies
/// migrations, reconciles.
pub async fn run(config: ReconcileConfig) -> anyhow::Result<Report> {
    let test_hold = config
        .test_hold
        .as_deref()
        .map(TestHold::from_str)
        .transpose()?;
    let options = Options {
        tenant: config.tenant.clone(),
        snapshot: config.snapshot.clone(),
        apply: config.apply,
        page_size: config.page_size as usize,
        progress: true,
        test_hold,
    };
    let host =
        crate::host::HostDb::open(config.database_url.as_deref(), &config.data_dir()).await?;
    let report = run_on(&host.pool, &options).await;
    host.close().await;
    report
}

/// Reconciles against an open database (tests call this directly).
pub async fn run_on(db: &PgPool, options: &Options) -> anyhow::Result<Report> {
    let path = &options.snapshot;
    let bytes = tokio::fs::read(path)
        .await
        .with_context(|| format!("reading {}", path.display()))?;
    let snapshot =
        snapshot::parse(&bytes).with_context(|| format!("reading {}", path.display()))?;
    drop(bytes);
    let tenant_id: Uuid = sqlx::query_scalar("select id from tenants where slug = $1")
        .bind(&options.tenant)
        .fetch_optional(db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no tenant {:?}", options.tenant))?;
    let run = import::open_run(db, tenant_id, &snapshot, &path.display().to_string()).await?;
    tracing::info!(run = %run.id, tenant = %options.tenant, rows = run.records, "reconcile run");

    let mut bar = Progress::new("import", run.records as u64, options.progress);
    let imported = import::import(
        db,
        &run,
        &snapshot,
        options.page_size.max(1),
        &mut bar,
        options.test_hold,
    )
    .await?;
    bar.finish();

    let applied = if options.apply {
        let todo = apply::remaining(db, &run).await?;
        let mut bar = Progress::new("apply", todo as u64, options.progress);
        let applied = apply::apply(db, &run, &mut bar, options.test_hold).await?;
        bar.finish();
        Some(applied)
    } else {
        None
    };
    Ok(Report::load(db, &run, &options.tenant, imported, applied).await?)
}

/// Which step a test hold stops in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    Import,
    Apply,
}

/// `import:N` / `apply:N`: hold inside the N+1st page / booking (see the
/// module docs). For tests only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestHold {
    pub step: Hold,
    pub after: u64,
}

impl FromStr for TestHold {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (step, n) = s
            .split_once(':')
            .ok_or_else(|| anyhow::anyhow!("test hold {s:?}: expected import:N or apply:N"))?;
        let step = match step {
            "import" => Hold::Import,
            "apply" => Hold::Apply,
            _ => anyhow::bail!("test hold {s:?}: expected import:N or apply:N"),
        };
        let after = n
            .parse()
            .with_context(|| format!("test hold {s:?}: N must be a whole number"))?;
        Ok(TestHold { step, after })
    }
}

impl TestHold {
    /// Never returns when this is the step and `done` steps are behind us.
    async fn maybe_hold(self, step: Hold, done: u64) {
        if self.step == step && self.after == done {
            eprintln!(
                "reconcile: test hold: inside the uncommitted transaction of {step:?} step {}; \
                 waiting to be killed",
                done + 1
            );
            std::future::pending::<()>().await;
        }
    }
}
