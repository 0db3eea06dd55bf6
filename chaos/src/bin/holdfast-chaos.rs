//! `holdfast-chaos`: runs the chaos suite for one seed (or several) and
//! prints each report; exits 1 if any promise was broken.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use holdfast_chaos::{Config, Keep};

#[derive(Debug, Parser)]
#[command(
    name = "holdfast-chaos",
    version,
    about = "Attacks a running Holdfast the way the real world does (SIGKILLed server, aborted \
             relays, crashed desks, lossy and black-holed networks, failing partners, redelivered \
             warehouse events) and then checks every promise as an invariant."
)]
struct Cli {
    /// The seed: fixes every random choice of the run. Print it, keep it: a
    /// failing seed reproduces the same storm.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Run this many seeds in a row, starting at --seed.
    #[arg(long, default_value_t = 1)]
    seeds: u64,

    /// How long the storm lasts (the finish and the checks come after).
    #[arg(long)]
    minutes: Option<f64>,

    /// Stop the storm after this many acts by the desks (default 700 when no
    /// --minutes is given); re-issues after conflicts come on top.
    #[arg(long)]
    mutations: Option<u64>,

    /// Simulated desks (client engines), each behind its own faulty proxy.
    #[arg(long, default_value_t = 4)]
    desks: usize,

    /// Draft orders the desks share and keep around.
    #[arg(long, default_value_t = 8)]
    orders: usize,

    /// Server SIGKILLs spread over a --mutations budget (with --minutes
    /// alone, one every 150–350 mutations).
    #[arg(long, default_value_t = 3)]
    kills: u32,

    /// A Postgres the run may create (and drop) its database in.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,

    /// The `holdfast-server` binary to run (default: `holdfast-chaos-server`
    /// next to this one, built from the server's own main.rs).
    #[arg(long)]
    server_bin: Option<PathBuf>,

    /// Keep the database and the work directory (desk stores, server log):
    /// always, on failure (the default), or never.
    #[arg(long, value_enum, default_value_t = KeepArg::Failure)]
    keep: KeepArg,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum KeepArg {
    Always,
    Failure,
    Never,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOLDFAST_CHAOS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let server_bin = match cli.server_bin {
        Some(p) => p,
        None => std::env::current_exe()
            .context("where is this binary")?
            .with_file_name("holdfast-chaos-server"),
    };
    if !server_bin.exists() {
        anyhow::bail!(
            "{} does not exist: build it with `cargo build -p holdfast-chaos --bins`, or pass --server-bin",
            server_bin.display()
        );
    }
    let mutations = match (cli.mutations, cli.minutes) {
        (Some(m), _) => Some(m),
        (None, Some(_)) => None,
        (None, None) => Some(700),
    };
    let mut failed = Vec::new();
    for seed in cli.seed..cli.seed + cli.seeds.max(1) {
        println!("== seed {seed}: starting");
        let config = Config {
            seed,
            desks: cli.desks.max(1),
            orders: cli.orders.max(1),
            mutations,
            minutes: cli.minutes,
            kills: cli.kills,
            database_url: cli.database_url.clone(),
            server_bin: server_bin.clone(),
            keep: match cli.keep {
                KeepArg::Always => Keep::Always,
                KeepArg::Failure => Keep::OnFailure,
                KeepArg::Never => Keep::Never,
            },
        };
        let report = holdfast_chaos::run(config).await?;
        print!("{report}");
        if !report.ok() {
            failed.push(seed);
        }
    }
    if !failed.is_empty() {
        eprintln!("broken promises with seed(s) {failed:?}");
        std::process::exit(1);
    }
    Ok(())
}
