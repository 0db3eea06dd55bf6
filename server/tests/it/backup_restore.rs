//! Backups (issue 17 item 4), server side, with the real binary on its own
//! embedded cluster: `backup` while desks hammer the REST API, `restore` into
//! an empty data dir (a non-empty one refused by name), `serve --data-dir` on
//! the result. The restored server's ledgers equal its positions, every act
//! acknowledged before the backup started is there exactly once, and a
//! cursor or push from before the restore is answered 410 `server_restored`.
//! What desks do about that is client/tests/restore.rs.

use std::path::Path;
use std::time::{Duration, Instant};

use holdfast_server::pg::EmbeddedPostgres;
use reqwest::{Method, StatusCode};
use sqlx::{Connection, PgConnection};

use crate::migrate::run;
use crate::support::http::send;
use crate::support::load::{check_invariants, Desk, Load, Tally};
use crate::support::process::{reachable_tempdir, ClusterGuard, ServerProcess};

/// The binary, without DATABASE_URL (the embedded cluster), to its end.
async fn run_embedded(args: &[&str]) -> (i32, String, String) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_holdfast-server"))
        .args(args)
        .env_remove("DATABASE_URL")
        .env("RUST_BACKTRACE", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn holdfast-server");
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("holdfast-server {args:?} did not finish in time"))
        .expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A connection to the `holdfast` database of the cluster under `data_dir`.
async fn connect(data_dir: &Path) -> PgConnection {
    let pg = EmbeddedPostgres::attach(&data_dir.join("postgres")).expect("cluster");
    PgConnection::connect_with(&pg.holdfast_options())
        .await
        .expect("connect to the restored cluster")
}

/// What the desks had acknowledged, whole, by `at`.
fn acknowledged_by(tally: &Tally, at: Instant) -> Tally {
    let mut before = Tally::default();
    for ((order, version), finished) in tally.orders.iter().zip(&tally.finished_at) {
        if *finished <= at {
            before.orders.push((*order, *version));
            before.finished_at.push(*finished);
            let key = format!("{order}-allocate");
            if tally.allocations.contains(&key) {
                before.allocations.push(key);
            }
        }
    }
    before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_load_restores_into_an_empty_data_dir_and_serves() {
    let tmp = reachable_tempdir();
    let started = Instant::now();
    let server = tokio::task::spawn_blocking({
        let dir = tmp.path().to_owned();
        move || ServerProcess::start(None, &dir, &[])
    })
    .await
    .expect("start");
    let data = tmp.path().join("data");
    let _cluster = ClusterGuard(data.join("postgres"));
    let desk = Desk::new(&server.base).await;
    let http = reqwest::Client::new();
    // A cursor from before the backup, to try on the restored server.
    let old_pull = send(
        &http,
        Method::GET,
        &server.url("/v1/sync/pull?limit=1"),
        Some(&desk.token),
        None,
        None,
    )
    .await;
    assert_eq!(old_pull.status, StatusCode::OK);
    let old_cursor = old_pull.body["cursor"].as_str().expect("cursor").to_owned();
    let old_history = old_pull.body["history"]
        .as_str()
        .expect("history")
        .to_owned();

    let mut load = Load::start(&desk);
    load.progress(12).await;
    let file = tmp.path().join("holdfast.dump");
    let backup_started = Instant::now();
    let (code, stdout, stderr) = run_embedded(&[
        "backup",
        "--to",
        file.to_str().expect("path"),
        "--data-dir",
        data.to_str().expect("path"),
    ])
    .await;
    let backup_took = backup_started.elapsed();
    assert_eq!(code, 0, "backup failed:\n{stderr}");
    // The desks kept going while it ran, and after.
    load.progress(12).await;
    let tally = load.finish().await;
    let before = acknowledged_by(&tally, backup_started);
    eprintln!(
        "backup of a serving cluster in {backup_took:?} under load: {} cycles done, {} before it \
         started\n{stdout}",
        tally.cycles,
        before.orders.len()
    );
    assert!(
        before.orders.len() >= 12,
        "acts acknowledged before the backup"
    );
    assert!(
        stdout.starts_with(&format!("backup written: {}", file.display())),
        "{stdout}"
    );
    assert!(stdout.contains("holds: 2 tenants"), "{stdout}");
    assert!(file.is_file());
    assert!(
        !tmp.path().join("holdfast.dump.part").exists(),
        "no partial file left"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&file).expect("meta").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the backup is its owner's alone");
    drop(server);

    // Into a directory that holds something: refused, by name, untouched.
    let busy = tmp.path().join("busy");
    std::fs::create_dir(&busy).expect("mkdir");
    std::fs::write(busy.join("keep.txt"), "mine").expect("write");
    let (code, _, stderr) = run_embedded(&[
        "restore",
        "--from",
        file.to_str().expect("path"),
        "--data-dir",
        busy.to_str().expect("path"),
    ])
    .await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&format!("refusing to restore into {}", busy.display()))
            && stderr.contains("keep.txt"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&busy).expect("ls").count(),
        1,
        "nothing added"
    );

    // Into a new one.
    let restored_root = tmp.path().join("restored");
    let restored = restored_root.join("data");
    let restore_started = Instant::now();
    let (code, stdout, stderr) = run_embedded(&[
        "restore",
        "--from",
        file.to_str().expect("path"),
        "--data-dir",
        restored.to_str().expect("path"),
    ])
    .await;
    assert_eq!(code, 0, "restore failed:\n{stderr}");
    eprintln!("restore in {:?}\n{stdout}", restore_started.elapsed());
    assert!(stdout.contains("new feed history"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "holdfast-server serve --data-dir {}",
            restored.display()
        )),
        "{stdout}"
    );
    let _restored_cluster = ClusterGuard(restored.join("postgres"));

    // `serve --data-dir` runs on it, without migrating anything.
    let server = tokio::task::spawn_blocking({
        let dir = restored_root.clone();
        move || ServerProcess::start(None, &dir, &["--no-migrate"])
    })
    .await
    .expect("start on the restored data dir");
    let mut db = connect(&restored).await;
    check_invariants(&mut db, &before).await;
    // Nothing acknowledged before the backup is missing or doubled; what
    // came after is there whole or not at all (the invariants above hold
    // for every order, and each key has at most one ledger row).
    let doubled: i64 = sqlx::query_scalar(
        "select count(*) from (select idempotency_key from allocation_ledger
                                group by idempotency_key having count(*) > 1) d",
    )
    .fetch_one(&mut db)
    .await
    .expect("ledger");
    assert_eq!(doubled, 0);

    // The old history's cursor and pushes are refused, not misread.
    let token = crate::support::http::login(&http, &server.base, "dana@acme.test").await;
    let stale = send(
        &http,
        Method::GET,
        &server.url(&format!("/v1/sync/pull?cursor={old_cursor}")),
        Some(&token),
        None,
        None,
    )
    .await;
    assert_eq!(stale.status, StatusCode::GONE, "{}", stale.body);
    assert_eq!(stale.body["code"], "server_restored");
    let push = http
        .post(server.url("/v1/sync/push"))
        .bearer_auth(&token)
        .header("holdfast-history", &old_history)
        .json(
            &serde_json::json!({"mutations": [{"idempotency_key": "k", "method": "POST",
            "path": "/v1/orders", "body": {}}]}),
        )
        .send()
        .await
        .expect("push");
    assert_eq!(push.status(), StatusCode::GONE);
    let fresh = send(
        &http,
        Method::GET,
        &server.url("/v1/sync/pull?limit=1"),
        Some(&token),
        None,
        None,
    )
    .await;
    assert_eq!(fresh.status, StatusCode::OK);
    assert_ne!(fresh.body["history"].as_str(), Some(old_history.as_str()));
    eprintln!("whole test {:?}", started.elapsed());
}

#[sqlx::test(migrator = "crate::support::MIGRATIONS")]
async fn a_failed_backup_leaves_no_file_that_looks_whole(db: sqlx::PgPool) {
    let tmp = reachable_tempdir();
    let file = tmp.path().join("b.dump");
    // A database with no Holdfast schema: refused before pg_dump writes.
    let empty = format!("backup_nothing_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("create database {empty}"))
        .execute(&db)
        .await
        .expect("create an empty database");
    let url = crate::support::process::database_url(&empty);
    let (code, _, stderr) = run(&url, &["backup", "--to", file.to_str().expect("path")]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("no Holdfast schema"), "{stderr}");
    assert!(!file.exists() && !tmp.path().join("b.dump.part").exists());
    sqlx::query(&format!("drop database {empty}"))
        .execute(&db)
        .await
        .expect("drop");
    // A lock it cannot get within its wait (a migration holding a table)
    // fails it, and leaves nothing behind either.
    let url = crate::support::process::database_url(&crate::support::process::db_name(&db));
    let mut holder = PgConnection::connect(&url).await.expect("connect");
    sqlx::query("begin")
        .execute(&mut holder)
        .await
        .expect("begin");
    sqlx::query("lock table orders in access exclusive mode")
        .execute(&mut holder)
        .await
        .expect("lock");
    let (code, _, stderr) = run_with_lock_wait(&url, &file).await;
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("lock timeout"), "{stderr}");
    assert!(!file.exists(), "no file");
    assert!(!tmp.path().join("b.dump.part").exists(), "no partial file");
    sqlx::query("rollback")
        .execute(&mut holder)
        .await
        .expect("rollback");
}

/// `backup` with a one-second lock wait, so a held lock fails it quickly.
async fn run_with_lock_wait(url: &str, file: &Path) -> (i32, String, String) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_holdfast-server"))
        .args(["backup", "--to", file.to_str().expect("path")])
        .env("DATABASE_URL", url)
        .env("HOLDFAST_BACKUP_LOCK_WAIT_SECS", "1")
        .env("RUST_BACKTRACE", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("in time")
        .expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
