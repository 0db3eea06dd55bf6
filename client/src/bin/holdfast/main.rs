//! `holdfast`: the order desk on the command line, driving the same engine as
//! the desktop app. Every act lands in the local store at once; unless
//! `--no-sync` is given, the command then tries one sync pass and reports
//! whether the act reached the server (offline is not an error: it waits).
//!
//! [`args`] is the command line (and its `--help`), [`dispatch`] what each
//! subcommand does, [`render`] what it prints.

mod args;
mod dispatch;
mod render;

use std::process::ExitCode;

use clap::Parser;

use crate::args::Cli;
use crate::dispatch::run;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOLDFAST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("holdfast: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("holdfast: {e:#}");
            ExitCode::FAILURE
        }
    }
}
