//! `holdfast-bench`: Holdfast's benchmark harness. Starts Holdfast's server in
//! this process against a fresh database in the given Postgres, drives it and
//! a raw-SQL (or bare-HTTP) baseline with the same Rust client at the same
//! concurrency, interleaved, and prints one table of ratios. `make bench`
//! runs it on a private Postgres; see docs/BENCHMARKS.md.

mod alloc;
mod catalog;
mod desk;
mod desktop;
mod idle;
mod items;
mod load;
mod pgbench;
mod progress;
mod push;
mod push_ceiling;
mod relay;
mod report;
mod rls;
mod server;
mod setup;
mod stream;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;

use crate::items::{Ctx, Plan};
use crate::report::{Machine, Report};
use crate::server::Server;
use crate::setup::BenchDb;

#[derive(Debug, Parser)]
#[command(
    name = "holdfast-bench",
    version,
    about = "Measures Holdfast against baselines run in the same process, on the same Postgres, \
             at the same concurrency, and prints a table of ratios.",
    long_about = "Measures Holdfast against baselines run in the same process, on the same \
        Postgres, at the same concurrency, and prints a table of ratios (items 1-9 of docs/BENCHMARKS.md).\n\n\
        It creates a database holdfast_bench_<pid> in the cluster DATABASE_URL points at \
        (dropped afterwards), starts the server library on 127.0.0.1:0 on its own runtime, \
        and for each item alternates Holdfast and its baseline in rounds, so a burst of \
        someone else's work on the machine hits both. Progress goes to stderr, the table to \
        stdout. Benchmarks are not tests: nothing here asserts a timing; a request that \
        fails fails the run.\n\n\
        `make bench` (full) and `make bench QUICK=1` start a private Postgres and run this."
)]
struct Cli {
    /// The short run: one round of 2 s windows, 2,000 pushed mutations, 5,000 relay
    /// events. Without it: four rounds, 10,000 mutations, 20,000 events.
    #[arg(long)]
    quick: bool,

    /// The Postgres cluster to measure on (any database in it; the bench makes its own).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,

    /// Also write the report into this Markdown file, between its
    /// `<!-- bench:begin … -->` / `<!-- bench:end -->` markers.
    #[arg(long, value_name = "FILE")]
    write: Option<PathBuf>,

    /// Only these items (1-9; 1, 2 and 3 always run together; 8: first and
    /// incremental pull into the client store; 9: the desk's enqueue, flush
    /// and memory; 10: the cost of row-level security; 11: the 100,000-row catalog import), e.g. `--only 4,6`.
    #[arg(long, value_delimiter = ',', value_name = "ITEMS")]
    only: Vec<u8>,

    /// Concurrent clients for items 1-3.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
    clients: Vec<usize>,

    /// Also run the diagnostic SQL variants at this client count (0: none).
    #[arg(long, default_value_t = 32)]
    diagnose_at: usize,

    /// Seconds measured per run of items 1-3 (after a quarter as much warm-up).
    #[arg(long, value_name = "SECS")]
    seconds: Option<f64>,

    /// Interleaved rounds of Holdfast and baseline per measurement.
    #[arg(long)]
    rounds: Option<u32>,

    /// Items 1-3: only these variants (pgbench, http, one, three, engine, folded), e.g. for a profile.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    variants: Vec<String>,

    /// Items 1-3: only these workloads (hot, spread).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    workloads: Vec<String>,

    /// Relay workers running during items 1-5 (default: `serve`'s, one). Each
    /// commit that writes outbox rows wakes them; 0 shows what that costs.
    #[arg(long, value_name = "N")]
    relay_workers: Option<usize>,

    /// Where the in-process server's log goes.
    #[arg(long, value_name = "FILE", default_value = "target/bench/server.log")]
    server_log: PathBuf,

    /// Keep the bench database afterwards, to look inside it.
    #[arg(long)]
    keep_db: bool,
}

fn main() -> anyhow::Result<()> {
    if let Some(spec) = std::env::var_os(desk::CHILD_ENV) {
        return desk::child(spec);
    }
    let cli = Cli::parse();
    progress::start();
    init_server_log(&cli.server_log)?;
    // Two runtimes, two sets of worker threads: the server's and the load
    // generator's, as if they were two processes.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("holdfast-server")
        .enable_all()
        .build()?;
    let bench_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("holdfast-bench")
        .enable_all()
        .build()?;
    let result = bench_rt.block_on(run(cli, server_rt.handle().clone()));
    bench_rt.shutdown_timeout(Duration::from_secs(5));
    server_rt.shutdown_timeout(Duration::from_secs(5));
    result
}

/// The server logs as `holdfast-server serve` does (same filter), into a
/// file so stderr stays readable.
fn init_server_log(path: &PathBuf) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn,tower_http=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .try_init()
        .map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))
}

fn plan_from(cli: &Cli) -> Plan {
    let mut plan = Plan::new(cli.quick);
    plan.clients = cli.clients.iter().copied().filter(|c| *c > 0).collect();
    plan.diagnose_at = cli.diagnose_at;
    if let Some(secs) = cli.seconds.filter(|s| *s > 0.0) {
        plan.window.measure = Duration::from_secs_f64(secs);
        plan.window.warmup = plan.window.measure / 4;
    }
    if let Some(rounds) = cli.rounds {
        plan.rounds = rounds.max(1);
    }
    plan.only = cli.only.clone();
    plan.variants = cli.variants.clone();
    plan.workloads = cli.workloads.clone();
    plan
}

async fn run(cli: Cli, server_rt: tokio::runtime::Handle) -> anyhow::Result<()> {
    let started = Instant::now();
    let plan = plan_from(&cli);
    let mut machine = Machine::read();
    progress::step(format_args!(
        "holdfast-bench ({} run): {} cores, load {}",
        if plan.quick { "quick" } else { "full" },
        machine.nproc,
        machine.load_before
    ));
    let db = BenchDb::create(&cli.database_url).await?;
    progress::step(format_args!(
        "database {} created; starting the server",
        db.name
    ));
    let outcome = async {
        let server = Server::start(server_rt, db.options.clone(), cli.relay_workers).await?;
        let ctx = Ctx::new(plan, server, &db).await?;
        measure(ctx, &mut machine).await
    }
    .await;
    if cli.keep_db {
        progress::step(format_args!("keeping database {}", db.name));
    } else if let Err(e) = db.drop_database().await {
        progress::step(format_args!("could not drop database {}: {e:#}", db.name));
    }
    let report = outcome?;
    let text = report.render();
    println!("\n{text}");
    if let Some(path) = &cli.write {
        report::write_doc(path, &text)?;
        progress::step(format_args!("written to {}", path.display()));
    }
    progress::step(format_args!(
        "done in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

async fn measure(mut ctx: Ctx, machine: &mut Machine) -> anyhow::Result<Report> {
    let (version, settings): (String, String) = sqlx::query_as(
        "select current_setting('server_version'),
                format('synchronous_commit=%s, fsync=%s, shared_buffers=%s',
                       current_setting('synchronous_commit'), current_setting('fsync'),
                       current_setting('shared_buffers'))",
    )
    .fetch_one(&ctx.pool)
    .await?;
    machine.postgres = format!("PostgreSQL {version}");
    machine.postgres_settings = settings;
    let result = match items::all(&mut ctx).await {
        Ok(mut t) => match desk::run(&ctx, &mut t.0).await {
            Ok(()) => match rls::run(&ctx, &mut t.0, &mut t.1).await {
                Ok(()) => catalog::run(&ctx, &mut t.0, &mut t.2).await.map(|()| t),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    machine.load_after = report::loadavg();
    let plan = ctx.plan.clone();
    let pool_size = ctx.server.pool_size;
    ctx.shutdown().await?;
    let (rows, diagnostics, notes) = result?;
    Ok(Report {
        title: format!(
            "{} run",
            if plan.quick {
                "Quick (`make bench QUICK=1`)"
            } else {
                "Full (`make bench`)"
            }
        ),
        machine: machine.clone(),
        settings: format!(
            "{} The server runs with `serve`'s defaults: a pool of {} connections, one relay \
             worker (no reaper); the raw baselines get one connection per client.",
            plan.describe(),
            pool_size
        ),
        rows,
        diagnostics,
        notes,
    })
}

/// Shared by the items: the bearer header value of a token.
pub fn bearer(token: &str) -> Arc<str> {
    Arc::from(format!("Bearer {token}"))
}
