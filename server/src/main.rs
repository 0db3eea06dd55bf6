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
        Command::Reconcile(config) => {
            holdfast_server::telemetry::init(false);
            let report = holdfast_server::reconcile::run(config).await?;
            print!("{}", report.render());
            std::io::Write::flush(&mut std::io::stdout())?;
            if report.has_problems() {
                // Done, but the operator has rows or SKUs to look at; scripts
                // must be able to tell (the report says which).
                std::process::exit(2);
            }
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
