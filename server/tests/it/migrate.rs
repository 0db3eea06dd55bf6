//! Migrations for several instances (issue 17 item 3), with the real binary:
//! `migrate` applies the schema alone and says what it did; `serve
//! --no-migrate` never touches the schema and refuses, in one line naming
//! both versions and the fix, a schema older than it needs; a newer schema is
//! served with a warning; concurrent `migrate`s apply each migration once.

use std::process::Stdio;
use std::time::Duration;

use holdfast_server::schema::SchemaState;
use sqlx::PgPool;

use crate::support::process::{database_url, db_name, reachable_tempdir, ServerProcess};

/// Runs the binary to its end (within a minute); returns its exit code,
/// stdout and stderr.
pub async fn run(url: &str, args: &[&str]) -> (i32, String, String) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_holdfast-server"))
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn holdfast-server");
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("holdfast-server {args:?} did not finish within a minute"))
        .expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `Error: …` line a refused start ends with.
fn error_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("Error: "))
        .unwrap_or_else(|| panic!("no `Error:` line in:\n{stderr}"))
}

fn get(url: &str) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        reqwest::get(url)
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    })
}

#[sqlx::test(migrations = false)]
async fn no_migrate_refuses_an_empty_database_until_migrate_ran(db: PgPool) {
    let url = database_url(&db_name(&db));
    let build = SchemaState::build_version().to_string();

    let (code, _, stderr) = run(&url, &["serve", "--no-migrate", "--listen", "127.0.0.1:0"]).await;
    assert_ne!(code, 0, "refused: {stderr}");
    let line = error_line(&stderr);
    assert!(line.contains("no Holdfast schema"), "{line}");
    assert!(line.contains(&build), "names the version it needs: {line}");
    assert!(
        line.contains("run `holdfast-server migrate`"),
        "names the fix: {line}"
    );
    let tables: i64 =
        sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'public'")
            .fetch_one(&db)
            .await
            .expect("count");
    assert_eq!(tables, 0, "--no-migrate created nothing");

    let (code, stdout, stderr) = run(&url, &["migrate"]).await;
    assert_eq!(code, 0, "{stderr}");
    let n = holdfast_server::db::MIGRATOR.iter().count();
    assert!(
        stdout.starts_with(&format!("applied {n} migration(s); schema is now {build}")),
        "{stdout}"
    );
    assert!(stdout.contains("feed history"), "lists each: {stdout}");

    let (code, stdout, stderr) = run(&url, &["migrate"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        format!("schema is current ({build}); nothing to apply\n")
    );

    // Now an instance starts without touching the schema, and serves.
    let tmp = reachable_tempdir();
    let server = tokio::task::spawn_blocking({
        let (url, dir) = (url.clone(), tmp.path().to_owned());
        move || ServerProcess::start(Some(&url), &dir, &["--no-migrate"])
    })
    .await
    .expect("start");
    let ready = tokio::task::spawn_blocking({
        let url = server.url("/readyz");
        move || get(&url)
    })
    .await
    .expect("readyz");
    assert_eq!(ready, 200);
}

#[sqlx::test(migrator = "crate::support::MIGRATIONS")]
async fn no_migrate_names_both_versions_of_an_older_schema(db: PgPool) {
    let url = database_url(&db_name(&db));
    let build = SchemaState::build_version();
    // The database as the build before this one left it (the last
    // migration undone).
    for undo in ["drop view relay_sending_events", "drop table relay_sending"] {
        sqlx::query(undo).execute(&db).await.expect(undo);
    }
    sqlx::query("delete from _sqlx_migrations where version = $1")
        .bind(build)
        .execute(&db)
        .await
        .expect("forget");
    let older: i64 = sqlx::query_scalar("select max(version) from _sqlx_migrations")
        .fetch_one(&db)
        .await
        .expect("max");

    let (code, _, stderr) = run(&url, &["serve", "--no-migrate", "--listen", "127.0.0.1:0"]).await;
    assert_ne!(code, 0);
    let line = error_line(&stderr);
    assert!(
        line.contains(&format!(
            "schema ({older}) is older than this build needs ({build};"
        )),
        "{line}"
    );
    assert!(line.contains("run `holdfast-server migrate`"), "{line}");

    let (code, stdout, stderr) = run(&url, &["migrate"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        format!("applied 1 migration(s); schema is now {build}\n  {build} relay first attempts in memory\n")
    );
}

#[sqlx::test(migrator = "crate::support::MIGRATIONS")]
async fn a_newer_schema_is_served_as_it_is(db: PgPool) {
    let url = database_url(&db_name(&db));
    // A later build migrated (a rolling upgrade is under way).
    let newer = 29991231000000_i64;
    sqlx::query(
        "insert into _sqlx_migrations (version, description, success, checksum, execution_time)
         values ($1, 'from a newer build', true, '\\x00', 1)",
    )
    .bind(newer)
    .execute(&db)
    .await
    .expect("newer");

    let (code, stdout, stderr) = run(&url, &["migrate"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(&format!("schema is current ({newer}); nothing to apply\n")),
        "{stdout}"
    );
    assert!(
        stdout.contains("the database is newer than this build"),
        "{stdout}"
    );

    // Both ways of serving start on it (the migrating one too: an older
    // instance restarted mid-upgrade must come back).
    for extra in [&["--no-migrate"][..], &[][..]] {
        let tmp = reachable_tempdir();
        let server = tokio::task::spawn_blocking({
            let (url, dir) = (url.clone(), tmp.path().to_owned());
            let extra: Vec<&'static str> = extra.to_vec();
            move || ServerProcess::start(Some(&url), &dir, &extra)
        })
        .await
        .expect("start");
        let ready = tokio::task::spawn_blocking({
            let url = server.url("/readyz");
            move || get(&url)
        })
        .await
        .expect("readyz");
        assert_eq!(ready, 200, "{extra:?}");
        let log = std::fs::read_to_string(&server.log).expect("log");
        assert!(
            log.contains("newer than this build"),
            "{extra:?} warns:\n{log}"
        );
    }
}

#[sqlx::test(migrations = false)]
async fn concurrent_migrates_apply_each_migration_once(db: PgPool) {
    let url = database_url(&db_name(&db));
    let runs: Vec<_> = (0..3).map(|_| run(&url, &["migrate"])).collect();
    let results = futures_util::future::join_all(runs).await;
    let mut applied = 0;
    for (code, stdout, stderr) in &results {
        assert_eq!(*code, 0, "{stderr}");
        if stdout.starts_with("applied ") {
            applied += 1;
        }
    }
    assert!(applied >= 1, "one of them applied the schema: {results:?}");
    let (rows, versions): (i64, i64) =
        sqlx::query_as("select count(*), count(distinct version) from _sqlx_migrations")
            .fetch_one(&db)
            .await
            .expect("count");
    assert_eq!(rows, versions, "no migration recorded twice");
    assert_eq!(rows as usize, holdfast_server::db::MIGRATOR.iter().count());
}
