//! `holdfast-server`: parses flags and hands over to the library.

use holdfast_server::config::{CatalogCommand, Command, PostgresCommand, TenantCommand};
use holdfast_server::config_file::{self, ConfigError};
use holdfast_server::pg::EmbeddedPostgres;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Flags, then env, then the config file (serve and check-config), then defaults.
    let (cli, effective) = match config_file::parse_cli(std::env::args_os()) {
        Ok(parsed) => parsed,
        Err(ConfigError::Cli(e)) => e.exit(),
        Err(e) => {
            eprintln!("holdfast-server: {e}");
            std::process::exit(1);
        }
    };
    match cli.command {
        Command::CheckConfig(_) => {
            if let Some(effective) = effective {
                print!("{}", effective.render());
            }
            std::io::Write::flush(&mut std::io::stdout())?;
            Ok(())
        }
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
        Command::Catalog(CatalogCommand::Import(config)) => {
            holdfast_server::telemetry::init(false);
            let file = config.file.clone();
            let outcome = holdfast_server::master::catalog_cli::run(config).await?;
            print!("{}", outcome.render(&file));
            std::io::Write::flush(&mut std::io::stdout())?;
            if matches!(
                outcome,
                holdfast_server::master::catalog_cli::Outcome::Rejected(_)
            ) {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Tenant(TenantCommand::Create(config)) => {
            holdfast_server::telemetry::init(false);
            let created = holdfast_server::master::tenants::run(config).await?;
            print!("{}", created.render());
            std::io::Write::flush(&mut std::io::stdout())?;
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
        Command::Migrate(config) => {
            holdfast_server::telemetry::init(false);
            let report = holdfast_server::schema::run(config).await?;
            print!("{}", report.render());
            std::io::Write::flush(&mut std::io::stdout())?;
            Ok(())
        }
        Command::Backup(config) => {
            holdfast_server::telemetry::init(false);
            let report = holdfast_server::backup::dump::run(config).await?;
            print!("{}", report.render());
            std::io::Write::flush(&mut std::io::stdout())?;
            Ok(())
        }
        Command::Restore(config) => {
            holdfast_server::telemetry::init(false);
            let report = holdfast_server::backup::restore::run(config).await?;
            print!("{}", report.render());
            std::io::Write::flush(&mut std::io::stdout())?;
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
