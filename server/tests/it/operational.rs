//! Operational faults against the real server and a real Postgres:
//!
//! - Postgres restarted under load: its postmaster SIGKILLed under the
//!   embedded supervisor (which starts it again), and an external database
//!   stopped and started by an operator. Every request answers — success or a
//!   prompt 503 `service_unavailable` with Retry-After — and none hangs;
//!   `/readyz` says 503 while the database is away and 200 after; the same
//!   process serves again; every acknowledged mutation is applied once.
//! - A read-only database: writes answer 503 and store nothing (not even the
//!   idempotency key), reads keep working, and a retry once it is writable
//!   again applies once.
//! - Graceful shutdown: SIGTERM with a mutation stuck behind a row lock and
//!   webhook deliveries held by a slow partner. New connections are refused,
//!   the mutation gets its real answer, the deliveries are recorded as
//!   delivered, and the process exits 0.
//!
//! Disk full cannot be produced here without a filesystem of our own; it
//! surfaces as SQLSTATE 53100, which `server/src/error.rs`'s unit tests map to
//! the same 503 the read-only database proves end to end.

use std::time::{Duration, Instant};

use holdfast_server::pg::EmbeddedPostgres;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection};
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use crate::support::http::{assert_unavailable, login, readyz, send, wait_ready};
use crate::support::load::{check_invariants, Desk, Load, Tally, WORKERS};
use crate::support::process::{
    database_url, postmaster_pid, reachable_tempdir, ClusterGuard, ServerProcess,
};
use crate::support::{TestServer, MIGRATIONS};

// ---------------------------------------------------------------------------
// 1. Postgres restarted under load.

/// The embedded cluster's postmaster is SIGKILLed while six desks write and
/// read. The supervisor starts it again (crash recovery), the pool
/// reconnects, and the same server process serves every desk again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_postgres_killed_under_load_is_restarted_and_served_again() {
    let tmp = reachable_tempdir();
    let cluster = tmp.path().join("data").join("postgres");
    let _cluster_guard = ClusterGuard(cluster.clone());
    let mut server = ServerProcess::start(None, tmp.path(), &[]);
    let http = reqwest::Client::new();
    assert_eq!(readyz(&http, &server.base).await, StatusCode::OK);

    let desk = Desk::new(&server.base).await;
    let mut load = Load::start(&desk);
    load.progress(12).await;

    let killed = postmaster_pid(&cluster).expect("postmaster running");
    kill(Pid::from_raw(killed), Signal::SIGKILL).expect("kill the postmaster");
    let down_at = Instant::now();

    // Probe readiness throughout: the restart can be quicker than a probe,
    // so a 503 is reported, not required (the external-database test below
    // requires it, with a downtime it controls).
    let mut saw_not_ready = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = readyz(&http, &server.base).await;
        saw_not_ready |= status == StatusCode::SERVICE_UNAVAILABLE;
        let restarted = postmaster_pid(&cluster).is_some_and(|pid| pid != killed);
        if status == StatusCode::OK && restarted {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the supervisor did not bring Postgres back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let downtime = down_at.elapsed();

    load.served_again().await;
    load.progress(WORKERS as u64).await;
    let tally = load.finish().await;
    eprintln!(
        "postmaster killed: back after {downtime:?} (readyz 503 seen: {saw_not_ready}); \
         {} acts, {} answers, {} × 503, {} × request_in_flight, slowest answer {:?}",
        tally.cycles, tally.answered, tally.unavailable, tally.in_flight, tally.slowest
    );
    assert!(
        server.child.try_wait().expect("try_wait").is_none(),
        "same process throughout"
    );

    let pg = EmbeddedPostgres::attach(&cluster).expect("attach");
    let mut db = PgConnection::connect_with(&pg.holdfast_options())
        .await
        .expect("connect");
    check_invariants(&mut db, &tally).await;
    db.close().await.expect("close");

    server.signal(Signal::SIGTERM);
    assert!(server.exited(Duration::from_secs(60)).await.success());
    assert_eq!(
        postmaster_pid(&cluster),
        None,
        "the server stopped its cluster"
    );
}

/// A database given by DATABASE_URL is stopped (fast shutdown, as an
/// operator's restart does) and started again while six desks work. While it
/// is down `/readyz` answers 503 and a mutation answers a prompt 503 that
/// stored nothing; once it is back the same process serves again, and the
/// retried mutation applies once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_postgres_restarted_under_load_503s_then_serves_again() {
    let tmp = reachable_tempdir();
    let cluster = tmp.path().join("pg");
    let _cluster_guard = ClusterGuard(cluster.clone());
    let pg = EmbeddedPostgres::start(&cluster)
        .await
        .expect("private cluster");
    let mut server = ServerProcess::start(Some(&pg.admin_url()), tmp.path(), &[]);
    let http = reqwest::Client::new();

    let desk = Desk::new(&server.base).await;
    let mut load = Load::start(&desk);
    load.progress(12).await;

    let stopping = pg.clone();
    tokio::task::spawn_blocking(move || stopping.stop())
        .await
        .expect("join")
        .expect("pg_ctl stop");

    wait_ready(
        &http,
        &server.base,
        StatusCode::SERVICE_UNAVAILABLE,
        Duration::from_secs(5),
    )
    .await;
    let order = Uuid::now_v7();
    let key = format!("{order}-probe");
    let create = json!({"id": order, "customer_id": desk.customer});
    let probe = |replay: bool| {
        let (desk, key, create) = (desk.clone(), key.clone(), create.clone());
        async move {
            let a = send(
                &desk.http,
                Method::POST,
                &format!("{}/v1/orders", desk.base),
                Some(&desk.token),
                Some(&key),
                Some(&create),
            )
            .await;
            if a.status.is_success() {
                assert_eq!(a.replayed, replay, "{}", a.body);
            }
            a
        }
    };
    let a = probe(false).await;
    assert_unavailable(&a, "a mutation while Postgres is down");

    let pg = EmbeddedPostgres::start(&cluster).await.expect("restart");
    wait_ready(&http, &server.base, StatusCode::OK, Duration::from_secs(30)).await;
    let a = probe(false).await;
    assert_eq!(
        a.status,
        StatusCode::CREATED,
        "the retry runs afresh: {}",
        a.body
    );
    let a = probe(true).await;
    assert_eq!(a.status, StatusCode::CREATED, "then replays: {}", a.body);

    load.served_again().await;
    load.progress(WORKERS as u64).await;
    let mut tally = load.finish().await;
    eprintln!(
        "postgres stopped and started: {} acts, {} answers, {} × 503, {} × request_in_flight, \
         slowest answer {:?}",
        tally.cycles, tally.answered, tally.unavailable, tally.in_flight, tally.slowest
    );
    assert!(tally.unavailable > 0, "the desks saw the outage as 503s");
    assert!(
        server.child.try_wait().expect("try_wait").is_none(),
        "same process throughout"
    );

    tally.orders.push((order, 1));
    let mut db = PgConnection::connect(&pg.admin_url())
        .await
        .expect("connect");
    check_invariants(&mut db, &tally).await;
    db.close().await.expect("close");

    server.signal(Signal::SIGTERM);
    assert!(server.exited(Duration::from_secs(60)).await.success());
}

// ---------------------------------------------------------------------------
// 2. A read-only database.

/// Row counts of everything a mutation writes.
async fn written_rows(db: &mut PgConnection) -> Vec<(String, i64)> {
    let mut counts = Vec::new();
    for table in [
        "orders",
        "order_lines",
        "idempotency_keys",
        "allocation_ledger",
        "changes",
        "outbox",
    ] {
        let n: i64 = sqlx::query_scalar(&format!("select count(*) from {table}"))
            .fetch_one(&mut *db)
            .await
            .expect("count");
        counts.push((table.to_owned(), n));
    }
    counts
}

/// Makes the database read-only (or writable again) for every session: the
/// setting applies to new sessions, so the server's are ended and its pool
/// reconnects under it — as after a failover to a standby.
async fn set_read_only(admin: &mut PgConnection, on: bool) {
    let db: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&mut *admin)
        .await
        .expect("db name");
    let sql = if on {
        format!("alter database \"{db}\" set default_transaction_read_only = on")
    } else {
        format!("alter database \"{db}\" reset default_transaction_read_only")
    };
    admin.execute(sql.as_str()).await.expect("alter database");
    crate::support::end_other_sessions(admin).await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_read_only_database_answers_503_and_writes_nothing(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let pool = holdfast_server::pool_options(8, Duration::from_secs(3))
        .connect_with(connect.clone())
        .await
        .expect("pool");
    let server = TestServer::start(pool).await;
    let mut admin = PgConnection::connect_with(&connect).await.expect("admin");
    let token = server.login("acme", "dana@acme.test").await;
    let (_, customers) = server.get("/v1/customers", &token).await;
    let customer = customers["customers"][0]["id"].clone();
    let (_, skus) = server.get("/v1/skus?limit=1", &token).await;
    let sku = skus["skus"][0]["id"].clone();
    let order = Uuid::now_v7();
    let created = server
        .post(
            &token,
            "/v1/orders",
            "ro-create",
            json!({"id": order, "customer_id": customer}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED);

    let before = written_rows(&mut admin).await;
    set_read_only(&mut admin, true).await;

    // Reads are served; readiness holds (reads work, and every server shares
    // the database, so taking one out of rotation would not help).
    let (status, body) = server.get(&format!("/v1/orders/{order}"), &token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = server.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(status, StatusCode::OK);

    // Writes: 503 with Retry-After, through either transport.
    let line = Uuid::now_v7();
    let add = json!({"id": line, "sku_id": sku, "qty_ordered": 3, "base_version": 1});
    let path = format!("/v1/orders/{order}/lines");
    let refused = server.post(&token, &path, "ro-line", add.clone()).await;
    let problem = refused.json();
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    assert_eq!(problem["code"], "service_unavailable");
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(refused.headers["content-type"], "application/problem+json");
    let second = Uuid::now_v7();
    let push = json!({"mutations": [{"idempotency_key": "ro-push", "method": "POST",
                                      "path": "/v1/orders",
                                      "body": {"id": second, "customer_id": customer}}]});
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/sync/push",
            Some(&token),
            Some(push.clone()),
        )
        .await;
    crate::support::assert_problem(status, &body, 503, "service_unavailable");

    // Nothing half-written, not even the keys.
    assert_eq!(written_rows(&mut admin).await, before);

    set_read_only(&mut admin, false).await;
    let applied = server.post(&token, &path, "ro-line", add.clone()).await;
    assert_eq!(applied.status, StatusCode::CREATED, "{}", applied.json());
    assert!(!applied.replayed(), "the retry ran afresh");
    assert_eq!(applied.json()["version"], 2);
    let again = server.post(&token, &path, "ro-line", add).await;
    assert!(again.replayed());
    assert_eq!(again.bytes, applied.bytes);
    let (status, body) = server
        .call(Method::POST, "/v1/sync/push", Some(&token), Some(push))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["results"][0]["status"], 201, "{body}");

    let after = written_rows(&mut admin).await;
    let delta = |table: &str| {
        let get = |rows: &[(String, i64)]| {
            rows.iter()
                .find(|(t, _)| t == table)
                .map(|(_, n)| *n)
                .unwrap_or_default()
        };
        get(&after) - get(&before)
    };
    assert_eq!(delta("orders"), 1, "the pushed order, once");
    assert_eq!(delta("order_lines"), 1, "the line, once");
    assert_eq!(delta("idempotency_keys"), 2);
    admin.close().await.expect("close");
}

// ---------------------------------------------------------------------------
// 3. Graceful shutdown.

/// A partner that records each delivery's webhook-id and holds its answer
/// until released.
struct SlowPartner {
    url: String,
    received: mpsc::UnboundedReceiver<String>,
    release: watch::Sender<bool>,
}

async fn slow_partner() -> SlowPartner {
    use axum::http::HeaderMap;
    let (tx, received) = mpsc::unbounded_channel();
    let (release, released) = watch::channel(false);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap| {
            let (tx, mut released) = (tx.clone(), released.clone());
            async move {
                let id = headers
                    .get("webhook-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let _ = tx.send(id);
                let _ = released.wait_for(|r| *r).await;
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind partner");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    SlowPartner {
        url,
        received,
        release,
    }
}

/// SIGTERM with a mutation waiting on a row lock and deliveries held by a
/// slow partner: the listener closes at once, the mutation gets its real
/// answer, every delivery in flight is recorded delivered, and the process
/// exits 0.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn sigterm_finishes_the_request_and_deliveries_in_flight(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let url = database_url(connect.get_database().expect("test database"));
    let tmp = reachable_tempdir();
    let mut server = ServerProcess::start(
        Some(&url),
        tmp.path(),
        &[
            "--relay-allow-private-targets",
            "--relay-timeout-ms",
            "30000",
        ],
    );
    let http = reqwest::Client::new();
    let mut partner = slow_partner().await;

    let ops = login(&http, &server.base, "ops@acme.test").await;
    let a = send(
        &http,
        Method::POST,
        &server.url("/v1/admin/partners"),
        Some(&ops),
        None,
        Some(&json!({"name": "slow", "url": partner.url, "event_types": ["order.*"]})),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    let partner_id: Uuid = a.body["id"].as_str().expect("id").parse().expect("uuid");

    let desk = Desk::new(&server.base).await;
    let order = Uuid::now_v7();
    let line = Uuid::now_v7();
    let sku: Uuid = desk.skus[0].parse().expect("uuid");
    let mut tally = Tally::default();
    let a = desk
        .until_answered(
            &mut tally,
            Method::POST,
            "/v1/orders",
            Some("gs-create"),
            Some(&json!({"id": order, "customer_id": desk.customer})),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    let a = desk
        .until_answered(
            &mut tally,
            Method::POST,
            &format!("/v1/orders/{order}/lines"),
            Some("gs-line"),
            Some(&json!({"id": line, "sku_id": sku, "qty_ordered": 2, "base_version": 1})),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    // The relay has a delivery in flight to the partner, who holds it.
    let first = tokio::time::timeout(Duration::from_secs(30), partner.received.recv())
        .await
        .expect("a delivery reached the partner")
        .expect("partner");
    assert!(first.starts_with("evt_"), "{first}");

    // Hold the SKU's position row so the allocation waits in the database.
    let mut locker = PgConnection::connect_with(&connect).await.expect("locker");
    let mut lock = locker.begin().await.expect("begin");
    sqlx::query("select 1 from sku_positions where sku_id = $1 for update")
        .bind(sku)
        .execute(&mut *lock)
        .await
        .expect("lock the position");
    let allocating = {
        let desk = desk.clone();
        tokio::spawn(async move {
            send(
                &desk.http,
                Method::POST,
                &format!("{}/v1/orders/{order}/lines/{line}/allocate", desk.base),
                Some(&desk.token),
                Some("gs-allocate"),
                Some(&json!({"qty": 1})),
            )
            .await
        })
    };
    let mut watcher = PgConnection::connect_with(&connect).await.expect("watcher");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
              where datname = current_database() and wait_event_type = 'Lock'",
        )
        .fetch_one(&mut watcher)
        .await
        .expect("pg_stat_activity");
        if waiting > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the allocation never reached the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    server.signal(Signal::SIGTERM);

    // New connections are refused once the signal is handled.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match std::net::TcpStream::connect_timeout(&server.addr, Duration::from_secs(1)) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
            _ => {
                assert!(Instant::now() < deadline, "still accepting after SIGTERM");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    // The request and the deliveries are still in flight; let them finish.
    // (The engine bounds a row-lock wait at ROW_LOCK_TIMEOUT, 5 s, far more
    // than the few milliseconds from the lock to here.)
    assert!(!allocating.is_finished(), "the allocation is still waiting");
    assert!(server.child.try_wait().expect("try_wait").is_none());
    partner.release.send_replace(true);
    lock.rollback().await.expect("release the row");

    let a = allocating.await.expect("allocation task");
    assert_eq!(a.status, StatusCode::OK, "its real answer: {}", a.body);
    assert_eq!(a.body["order"]["version"], 3, "{}", a.body);
    let status = server.exited(Duration::from_secs(60)).await;
    assert!(
        status.success(),
        "a graceful shutdown exits 0, got {status}"
    );

    // Every delivery the partner received was recorded delivered; none is
    // left leased.
    let mut received = vec![first];
    while let Ok(id) = partner.received.try_recv() {
        received.push(id);
    }
    let rows: Vec<(i64, String, bool, bool)> = sqlx::query_as(
        "select outbox_id, state, delivered_at is not null, lease_id is not null
           from deliveries where partner_id = $1",
    )
    .bind(partner_id)
    .fetch_all(&mut watcher)
    .await
    .expect("deliveries");
    for id in &received {
        let row = rows
            .iter()
            .find(|(outbox_id, ..)| format!("evt_{outbox_id}") == *id)
            .unwrap_or_else(|| panic!("no delivery row for {id}"));
        assert_eq!((row.1.as_str(), row.2), ("delivered", true), "{id}");
    }
    assert!(
        rows.iter().all(|r| !r.3),
        "no delivery left leased: {rows:?}"
    );
    let ledger: i64 = sqlx::query_scalar(
        "select count(*) from allocation_ledger where idempotency_key = 'gs-allocate'",
    )
    .fetch_one(&mut watcher)
    .await
    .expect("ledger");
    assert_eq!(ledger, 1, "the allocation committed once");
    watcher.close().await.expect("close");
}
