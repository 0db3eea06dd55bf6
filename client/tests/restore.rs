//! Issue 17 item 4, the part that matters: a backup taken while desks and
//! REST clients work, restored after the desks carried on past it, and the
//! desks coming back to the restored server.
//!
//! The story, and what is asserted at each step:
//!
//! 1. Three desks (engines, each on its own orders and SKUs) and two REST
//!    clients make acts through the real HTTP server without pause.
//! 2. `backup` runs in the middle of it (the library function the binary
//!    calls, against the test database). The desks keep acting and syncing
//!    after it; every act is then acknowledged by the old server, so every
//!    desk's queue is empty and the acts that landed after the backup exist
//!    only in the desks' journals of acknowledged acts.
//! 3. The old server goes down; each desk makes one more act, pending, on
//!    top of what the backup lacks. `restore` makes a new database from the
//!    file, and a server serves it on the same address.
//! 4. Before any desk talks to it, the restored server's ledgers equal its
//!    positions and every act acknowledged before the backup started (desk
//!    or REST) is in it exactly once.
//! 5. The desks sync. Each push names the old history and is refused (410,
//!    nothing run); each desk pulls everything again, queues again exactly
//!    the journaled acts the restored server lacks (its documents' versions
//!    tell), and sends them, then its pending act. Proven: what each desk
//!    re-queued is exactly what was missing, none of it was a replay (clean
//!    re-applies under the original keys), and afterwards every act of
//!    every desk is applied exactly once and in order (versions, events,
//!    ledger rows), ledgers equal positions, and each desk shows what the
//!    server holds.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use holdfast_client::act::Act;
use holdfast_client::Engine;
use holdfast_protocol::model::OrderHeaderSet;
use holdfast_server::backup::{BackupConfig, RestoreConfig};
use rand::rngs::StdRng;
use rand::SeedableRng;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use support::*;
use tokio::sync::watch;
use uuid::Uuid;

const DESKS: [&str; 3] = ["dana@acme.test", "priya@acme.test", "dana@acme.test"];
const REST_CLIENTS: usize = 2;

/// `DATABASE_URL` with its database replaced by `name`.
fn database_url(name: &str) -> String {
    let admin = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let (base, query) = admin.split_once('?').unwrap_or((&admin, ""));
    let authority = base.find("://").expect("scheme") + 3;
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    let mut url = format!("{}/{name}", &base[..path]);
    if !query.is_empty() {
        url.push('?');
        url.push_str(query);
    }
    url
}

fn db_name(db: &PgPool) -> String {
    db.connect_options()
        .get_database()
        .expect("test database name")
        .to_owned()
}

/// One desk at work: a round is a few random acts on two new orders of its
/// own, then a sync.
struct DeskRun {
    engine: Engine,
    ledger: Arc<Mutex<Ledger>>,
    rounds: Arc<AtomicU64>,
}

fn start_desk(
    engine: Engine,
    skus: Vec<Uuid>,
    seed: u64,
    stop: watch::Receiver<bool>,
) -> (DeskRun, tokio::task::JoinHandle<()>) {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let rounds = Arc::new(AtomicU64::new(0));
    let task = tokio::spawn({
        let (engine, ledger, rounds) = (engine.clone(), ledger.clone(), rounds.clone());
        async move {
            let mut rng = StdRng::seed_from_u64(seed);
            while !*stop.borrow() {
                {
                    let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
                    let acts = random_acts(&engine, &mut rng, 2, 8, &skus);
                    ledger.merge(acts);
                }
                engine.sync_once().await.expect("sync with the old server");
                rounds.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (
        DeskRun {
            engine,
            ledger,
            rounds,
        },
        task,
    )
}

/// What a REST client had acknowledged, and when.
#[derive(Default)]
struct RestTally {
    keys: Vec<(String, Instant)>,
}

/// A REST client: creates orders for Tokyo Distributor with one line each,
/// each request under its own key, until told to stop.
fn start_rest(
    url: String,
    token: String,
    sku: Uuid,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<RestTally> {
    tokio::spawn(async move {
        let http = reqwest::Client::new();
        let mut tally = RestTally::default();
        while !*stop.borrow() {
            let order = Uuid::now_v7();
            let steps = [
                (
                    format!("{url}/v1/orders"),
                    serde_json::json!({"id": order, "customer_id": tokyo()}),
                ),
                (
                    format!("{url}/v1/orders/{order}/lines"),
                    serde_json::json!({"id": Uuid::now_v7(), "sku_id": sku, "qty_ordered": 1,
                                       "base_version": 1}),
                ),
            ];
            for (path, body) in steps {
                let key = Uuid::now_v7().to_string();
                let resp = http
                    .post(path)
                    .bearer_auth(&token)
                    .header("Idempotency-Key", &key)
                    .json(&body)
                    .send()
                    .await
                    .expect("REST request");
                assert_eq!(resp.status(), 201, "REST act");
                tally.keys.push((key, Instant::now()));
            }
        }
        tally
    })
}

async fn key_count(db: &PgPool, key: &str) -> i64 {
    sqlx::query_scalar("select count(*) from idempotency_keys where key = $1")
        .bind(key)
        .fetch_one(db)
        .await
        .expect("idempotency keys")
}

#[sqlx::test(migrations = "../migrations")]
async fn desks_resume_after_a_restore_from_a_backup_taken_under_load(db: PgPool) {
    let started = Instant::now();
    let mut server = Server::start(db.clone()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut engines = Vec::new();
    for (i, email) in DESKS.iter().enumerate() {
        let engine = open(dir.path(), &format!("desk{i}"), fast_config());
        login(&engine, &server.url(), email).await;
        engines.push(engine);
    }
    // Disjoint SKUs: each desk's allocations are its own business, so every
    // act it re-sends after the restore meets the stock it met the first time.
    let skus = roomy_skus(&engines[0], 30, 3 * 4 + REST_CLIENTS);
    let (stop, stopped) = watch::channel(false);
    let mut desks = Vec::new();
    let mut tasks = Vec::new();
    for (i, engine) in engines.iter().enumerate() {
        let (run, task) = start_desk(
            engine.clone(),
            skus[i * 4..i * 4 + 4].to_vec(),
            17 + i as u64,
            stopped.clone(),
        );
        desks.push(run);
        tasks.push(task);
    }
    let rest_token = server.token("priya@acme.test").await;
    let rest: Vec<_> = (0..REST_CLIENTS)
        .map(|i| {
            start_rest(
                server.url(),
                rest_token.clone(),
                skus[12 + i],
                stopped.clone(),
            )
        })
        .collect();
    let wait_rounds = |desks: &[DeskRun], n: u64| {
        let targets: Vec<(Arc<AtomicU64>, u64)> = desks
            .iter()
            .map(|d| (d.rounds.clone(), d.rounds.load(Ordering::SeqCst) + n))
            .collect();
        async move {
            tokio::time::timeout(DEADLINE, async {
                for (rounds, target) in targets {
                    while rounds.load(Ordering::SeqCst) < target {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            })
            .await
            .expect("the desks keep working");
        }
    };
    wait_rounds(&desks, 2).await;

    // What every desk had acknowledged before the backup started.
    let acked_before: Vec<HashSet<String>> = desks
        .iter()
        .map(|d| {
            let ledger = d.ledger.lock().unwrap_or_else(|p| p.into_inner());
            let pending: HashSet<String> = d
                .engine
                .pending_rows()
                .expect("pending")
                .into_iter()
                .map(|r| r.key)
                .collect();
            ledger
                .keys()
                .into_iter()
                .filter(|k| !pending.contains(*k))
                .map(str::to_owned)
                .collect()
        })
        .collect();
    let backup_started = Instant::now();
    let file = dir.path().join("holdfast.dump");
    let report = holdfast_server::backup::dump::run(BackupConfig {
        to: file.clone(),
        data_dir: None,
        database_url: Some(database_url(&db_name(&db))),
        lock_wait_secs: 60,
    })
    .await
    .expect("backup under load");
    let backup_took = backup_started.elapsed();
    // The desks carry on past the backup, then everything is acknowledged.
    wait_rounds(&desks, 2).await;
    stop.send_replace(true);
    for task in tasks {
        task.await.expect("a desk failed");
    }
    let mut rest_keys = Vec::new();
    for r in rest {
        rest_keys.extend(r.await.expect("a REST client failed").keys);
    }
    for d in &desks {
        sync_until_settled(&d.engine, 20).await;
    }
    // The desks' tasks are done: their ledgers are the test's now.
    let mut ledgers: Vec<Ledger> = desks
        .iter()
        .map(|d| std::mem::take(&mut *d.ledger.lock().unwrap_or_else(|p| p.into_inner())))
        .collect();
    let made: usize = ledgers.iter().map(Ledger::total).sum();
    eprintln!(
        "backup in {backup_took:?} under load ({made} desk acts in all, {} REST acts): {}",
        rest_keys.len(),
        report.render()
    );

    // The old server is lost. Its desks, offline, make one more act each on
    // their newest order: pending, on top of what the backup lacks.
    server.stop().await;
    for (d, ledger) in desks.iter().zip(&mut ledgers) {
        let newest = *ledger.order_ids.last().expect("orders");
        d.engine
            .edit_order(
                newest,
                OrderHeaderSet {
                    notes: Some(Some("made while the server was being restored".into())),
                    ..Default::default()
                },
            )
            .expect("act while offline");
        ledger.record(&d.engine, newest);
    }

    let restored_name = format!("restored_{}", Uuid::new_v4().simple());
    sqlx::query(&format!("create database {restored_name}"))
        .execute(&db)
        .await
        .expect("create the database to restore into");
    let restore_started = Instant::now();
    let restored_report = holdfast_server::backup::restore::run(RestoreConfig {
        from: file.clone(),
        data_dir: None,
        database_url: Some(database_url(&restored_name)),
    })
    .await
    .expect("restore");
    let restore_took = restore_started.elapsed();
    let restored = PgPoolOptions::new()
        .max_connections(8)
        .connect(&database_url(&restored_name))
        .await
        .expect("connect to the restored database");
    server.replace_database(restored.clone()).await;

    // The restored server, before any desk talks to it.
    let drift = holdfast_server::db::audit::ledger_mismatches(&restored, None)
        .await
        .expect("audit");
    assert!(
        drift.is_empty(),
        "restored ledgers equal positions: {drift:?}"
    );
    for (i, keys) in acked_before.iter().enumerate() {
        assert!(
            !keys.is_empty(),
            "desk {i} had acts acknowledged before the backup"
        );
        for key in keys {
            assert_eq!(
                key_count(&restored, key).await,
                1,
                "desk {i}: {key} restored once"
            );
        }
    }
    let mut rest_before = 0;
    for (key, at) in &rest_keys {
        if *at <= backup_started {
            rest_before += 1;
            assert_eq!(
                key_count(&restored, key).await,
                1,
                "REST act {key} restored once"
            );
        }
    }
    assert!(rest_before > 0, "REST acts acknowledged before the backup");
    // What each desk's acts left behind: acknowledged after the snapshot.
    let mut lost = Vec::new();
    for (d, ledger) in desks.iter().zip(&ledgers) {
        let pending: HashSet<String> = d
            .engine
            .pending_rows()
            .expect("pending")
            .into_iter()
            .map(|r| r.key)
            .collect();
        let mut missing = HashSet::new();
        for key in ledger.keys() {
            if !pending.contains(key) && key_count(&restored, key).await == 0 {
                missing.insert(key.to_owned());
            }
        }
        lost.push(missing);
    }
    let lost_total: usize = lost.iter().map(HashSet::len).sum();
    assert!(lost_total > 0, "some acts landed after the backup");

    // The desks come back.
    let resumed = Instant::now();
    for (i, d) in desks.iter().enumerate() {
        let (mut requeued, mut replayed, mut applied) = (0, 0, 0);
        for _ in 0..5 {
            let report = d
                .engine
                .sync_once()
                .await
                .expect("sync with the restored server");
            requeued += report.requeued;
            replayed += report.replayed;
            applied += report.applied;
            if d.engine.status().expect("status").pending == 0 {
                break;
            }
        }
        assert_eq!(
            d.engine.status().expect("status").pending,
            0,
            "desk {i} settled"
        );
        assert_eq!(
            applied,
            lost[i].len() + 1,
            "desk {i}: the lost acts and the pending one"
        );
        assert_eq!(
            requeued,
            lost[i].len(),
            "desk {i} queued again exactly what the restored server lacked"
        );
        assert_eq!(replayed, 0, "desk {i}: clean re-applies, not replays");
        for key in &lost[i] {
            assert_eq!(
                key_count(&restored, key).await,
                1,
                "desk {i}: {key} re-applied once"
            );
        }
        let status = d.engine.status().expect("status");
        assert_eq!((status.conflicts, status.rejections), (0, 0), "desk {i}");
    }
    let token = server.token("priya@acme.test").await;
    let mut allocations = 0;
    for (d, ledger) in desks.iter().zip(&ledgers) {
        ledger.check_exactly_once(&server, &token).await;
        ledger
            .check_local_equals_server(&d.engine, &server, &token)
            .await;
        allocations += ledger
            .acts
            .values()
            .flatten()
            .filter(|(_, a)| matches!(a, Act::Allocate { .. } | Act::Release { .. }))
            .count();
    }
    assert!(allocations > 0, "the desks moved stock");
    eprintln!(
        "restore in {restore_took:?}: {} acts were lost to it and re-applied by {} desks in {:?}; \
         whole test {:?}\n{}",
        lost_total,
        desks.len(),
        resumed.elapsed(),
        started.elapsed(),
        restored_report.render()
    );
    server.stop().await;
    restored.close().await;
    sqlx::query(&format!("drop database {restored_name} with (force)"))
        .execute(&db)
        .await
        .expect("drop the restored database");
}
