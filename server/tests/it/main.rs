//! The server's integration tests, one binary: the real server over real
//! HTTP and a fresh Postgres database per test (`#[sqlx::test]`), or the real
//! `holdfast-server` binary as a child process. One module per area; the
//! harness they share is [`support`].
//!
//! One process runs them all, so whatever is process-global is shared: the
//! Prometheus recorder (tests assert a metric is present, or a gauge at least
//! their own count, never an exact total), and nothing sets an environment
//! variable in this process; a child process gets its own with
//! `Command::env`.

mod support;

mod admin_page;
mod admin_page_catalog;
mod admin_page_customers;
mod admin_page_inbound;
mod admin_page_partners;
mod admin_page_relay_health;
mod admin_page_users;
mod admin_partners;
mod backup_restore;
mod config_file;
mod connections;
mod dead_letters;
mod embedded_postgres;
mod history;
mod hostile;
mod hostile_input;
mod installed_package;
mod ledger_audit;
mod master_catalog;
mod master_customers;
mod master_users;
mod migrate;
mod monitoring;
mod mutations;
mod numeric_extremes;
mod onboarding;
mod operational;
mod reconcile;
mod replica;
mod rolling_upgrade;
mod sessions_and_reads;
mod standards;
mod sync_feed;
mod tenancy_rls;
mod webhooks;
