//! `holdfast-server`: parses flags and hands over to the library.

use clap::Parser;
use holdfast_server::config::{Cli, Command, PostgresCommand};
use holdfast_server::pg::EmbeddedPostgres;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(config) => {
            holdfast_server::telemetry::init(config.log_json);
            holdfast_server::serve(config, holdfast_server::shutdown_signal()).await
        }
        Command::Postgres(PostgresCommand::Start { data_dir }) => {
            holdfast_server::telemetry::init(false);
            let pg = EmbeddedPostgres::start(&data_dir).await?;
            println!("DATABASE_URL={}", pg.admin_url());
            Ok(())
        }
        Command::Postgres(PostgresCommand::Stop { data_dir }) => {
            holdfast_server::telemetry::init(false);
            let pg = EmbeddedPostgres::attach(&data_dir)?;
            pg.stop()?;
            Ok(())
        }
    }
}
