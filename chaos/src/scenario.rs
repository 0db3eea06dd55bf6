//! One chaos run: set the stage (`setup`), let the desks work while seeded
//! fault schedules kill and break things (`storm`), then settle everything
//! and check every promise (`finish`).
//!
//! Fault schedules are counted in acts, not seconds, so a seed puts each
//! kill at the same point of the storm on a fast or a slow machine. Each
//! schedule and each desk has its own RNG derived from the seed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use holdfast_server::relay::{RelayHandle, Settings};
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::desk::Catalog;
use crate::invariants::Audit;
use crate::partner::Partner;
use crate::proxy::Proxy;
use crate::report::Report;
use crate::server::{Database, RelayFlags, ServerProcess};
use crate::warehouse::Warehouse;
use crate::Progress;

/// One run's knobs.
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    pub desks: usize,
    /// Draft orders the desks keep around (they create more as orders are
    /// confirmed or cancelled).
    pub orders: usize,
    /// Stop after this many acts (None: only `minutes` ends the run).
    pub mutations: Option<u64>,
    /// Stop after this long.
    pub minutes: Option<f64>,
    /// Server kills spread over an act budget (at least this many); with
    /// only a time limit, one about every 150–350 acts.
    pub kills: u32,
    /// An admin URL of the Postgres to create the run's database in.
    pub database_url: String,
    /// The `holdfast-server` binary to run (see Cargo.toml).
    pub server_bin: PathBuf,
    /// What to keep afterwards for inspection.
    pub keep: Keep,
}

/// Whether the run's database and work directory (desk stores, server log)
/// outlive it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    Always,
    /// Only when a promise was broken: that is when someone will look.
    OnFailure,
    Never,
}

impl Keep {
    /// From `HOLDFAST_CHAOS_KEEP` (`always`, `failure`, `never`); default
    /// `failure`.
    pub fn from_env() -> Keep {
        match std::env::var("HOLDFAST_CHAOS_KEEP").as_deref() {
            Ok("always") => Keep::Always,
            Ok("never") => Keep::Never,
            _ => Keep::OnFailure,
        }
    }

    fn keeps(self, ok: bool) -> bool {
        match self {
            Keep::Always => true,
            Keep::OnFailure => !ok,
            Keep::Never => false,
        }
    }
}

impl Config {
    /// The command line that runs this configuration again.
    pub fn reproduce(&self) -> String {
        let mut cmd = format!(
            "holdfast-chaos --seed {} --desks {} --orders {} --kills {}",
            self.seed, self.desks, self.orders, self.kills
        );
        if let Some(m) = self.mutations {
            cmd.push_str(&format!(" --mutations {m}"));
        }
        if let Some(m) = self.minutes {
            cmd.push_str(&format!(" --minutes {m}"));
        }
        cmd
    }
}

/// The relay's pace for a run measured in seconds: retries within
/// milliseconds, a timeout a stalling partner exceeds, and enough attempts
/// that a partner's outage of a few seconds never dead-letters it.
pub fn relay_flags() -> RelayFlags {
    RelayFlags {
        backoff_base_ms: 20,
        backoff_cap_ms: 300,
        timeout_ms: 1000,
        max_attempts: 40,
    }
}

fn relay_settings() -> Settings {
    let f = relay_flags();
    Settings {
        max_attempts: f.max_attempts,
        backoff_base_ms: f.backoff_base_ms,
        backoff_cap_ms: f.backoff_cap_ms,
        timeout: Duration::from_millis(f.timeout_ms),
        allow_private_targets: true,
        max_in_flight: 16,
        per_partner_in_flight: 4,
        poll: Duration::from_millis(250),
    }
}

/// A sub-seed for stream `k` of this run.
fn sub(seed: u64, k: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(k.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        ^ k
}

/// Everything a run holds while it runs.
pub(crate) struct Stage {
    pub config: Config,
    pub db: PgPool,
    pub server: ServerProcess,
    pub http: reqwest::Client,
    pub ops: String,
    pub inbound_secret: String,
    pub desk_proxies: Vec<Arc<Proxy>>,
    pub warehouse_proxy: Arc<Proxy>,
    pub partners: Vec<(Partner, Vec<String>, bool)>,
    pub relays: Vec<RelayHandle>,
    pub catalog: Catalog,
    pub warehouse: Option<Warehouse>,
    pub report: Report,
    pub audit: Audit,
}

impl Stage {
    pub fn base(&self) -> anyhow::Result<String> {
        match self.server.addr() {
            Some(a) => Ok(format!("http://{a}")),
            None => bail!("the server is not running"),
        }
    }

    /// An operator call straight to the server (no proxy).
    pub async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base()?))
            .bearer_auth(&self.ops);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            bail!("{path}: {status}: {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// Runs one seed end to end and reports; `Err` only when the run itself
/// could not be carried out (a broken promise is a failed report, not an
/// error).
pub async fn run(config: Config) -> anyhow::Result<Report> {
    let started = Instant::now();
    let work = tempfile::Builder::new()
        .prefix(&format!("holdfast-chaos-{}-", config.seed))
        .tempdir()?;
    let db_name = format!("holdfast_chaos_{}_{}", config.seed, std::process::id());
    let database = Database::create(&config.database_url, &db_name).await?;
    let log = work.path().join("server.log");
    let result = async {
        let mut server = ServerProcess::new(&config.server_bin, &database.url, relay_flags(), &log);
        let addr = server.start().await?;
        let db = PgPoolOptions::new()
            .max_connections(6)
            .connect_with(database.options()?)
            .await?;
        let mut stage = setup(config.clone(), db, server, addr).await?;
        let progress = Progress::new(
            config.mutations,
            config
                .minutes
                .map(|m| Instant::now() + Duration::from_secs_f64(m * 60.0)),
        );
        let progress = Arc::new(progress);
        let t = Instant::now();
        let desks = storm(&mut stage, progress, work.path()).await?;
        stage.report.storm = t.elapsed();
        let t = Instant::now();
        finish(&mut stage, desks).await?;
        stage.report.finish = t.elapsed();
        // SIGKILL at the end too: nothing graceful is owed to a test server.
        stage.server.kill().await?;
        for r in stage.relays.drain(..) {
            r.abort();
        }
        stage.db.close().await;
        Ok::<Report, anyhow::Error>(stage.report)
    }
    .await;
    let mut report = match result {
        Ok(r) => r,
        Err(e) if config.keep == Keep::Never => {
            let _ = database.drop_it().await;
            bail!(
                "seed {}: the run could not be carried out: {e:#}",
                config.seed
            );
        }
        Err(e) => {
            // Keep what is needed to look into it.
            let kept = work.keep();
            bail!(
                "seed {}: the run could not be carried out: {e:#} (server log and stores in {}, database {db_name})",
                config.seed,
                kept.display()
            );
        }
    };
    report.duration = started.elapsed();
    report.server_log = log.display().to_string();
    let keep = config.keep.keeps(report.ok());
    if keep {
        let kept = work.keep();
        report.server_log = kept.join("server.log").display().to_string();
        // A broken promise is looked into in the database it broke in.
        report.anomalies.push(format!(
            "database {db_name} kept for inspection (drop database \"{db_name}\" when done)"
        ));
    } else {
        database.drop_it().await?;
    }
    Ok(report)
}

mod finish;
mod setup;
mod storm;

use finish::finish;
use setup::setup;
use storm::storm;
