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

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestServer;
use holdfast_server::pg::EmbeddedPostgres;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection};
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

/// A request that has not answered within this is hung and fails the test.
/// A hang check, not a speed requirement: with the server's 3 s pool
/// acquire timeout an answer comes well within it.
const HANG_BOUND: Duration = Duration::from_secs(10);
/// Desks hammering the server while Postgres goes away.
const WORKERS: usize = 6;

// ---------------------------------------------------------------------------
// The server process and private clusters.

/// `holdfast-server serve` as a child process; killed (and its log shown if
/// the test failed) when dropped.
struct ServerProcess {
    child: Child,
    base: String,
    addr: SocketAddr,
    log: PathBuf,
}

impl ServerProcess {
    /// Starts the binary and waits for its `listening on` line.
    fn start(database_url: Option<&str>, data_dir: &Path, extra: &[&str]) -> ServerProcess {
        let log = data_dir.join("server.log");
        let log_file = File::create(&log).expect("server log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_holdfast-server"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--demo", "--data-dir"])
            .arg(data_dir.join("data"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file));
        match database_url {
            Some(url) => cmd.env("DATABASE_URL", url),
            None => cmd.env_remove("DATABASE_URL"),
        };
        let mut child = cmd.spawn().expect("spawn holdfast-server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("listening on ") {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("server did not start; log:\n{}", tail(&log)));
        let addr = base
            .trim_start_matches("http://")
            .parse()
            .expect("listening address");
        ServerProcess {
            child,
            base,
            addr,
            log,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).expect("signal the server");
    }

    /// Waits for the process to exit, failing past `within`.
    async fn exited(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit within {within:?}; log:\n{}",
                tail(&self.log)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- server log (tail) ---\n{}", tail(&self.log));
        }
    }
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

/// A temporary directory the `postgres` user can reach when we are root.
fn reachable_tempdir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    tmp
}

/// Stops a private cluster when dropped, so a failing test leaves nothing
/// running.
struct ClusterGuard(PathBuf);

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if let Ok(pg) = EmbeddedPostgres::attach(&self.0) {
            let _ = pg.stop();
        }
    }
}

/// The live postmaster's pid, if one runs for this cluster.
fn postmaster_pid(cluster: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(cluster.join("postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .to_owned();
    (state != "Z").then_some(pid)
}

/// `url` with its database (the path) replaced; the query (`?host=…`) kept.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let authority = base.find("://").expect("scheme") + 3;
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    let mut out = format!("{}/{name}", &base[..path]);
    if !query.is_empty() {
        out.push('?');
        out.push_str(query);
    }
    out
}

// ---------------------------------------------------------------------------
// HTTP with a hang check.

struct Answer {
    status: StatusCode,
    retry_after: Option<String>,
    replayed: bool,
    body: Value,
}

/// One request; fails the test if it does not answer within [`HANG_BOUND`]
/// or if the connection fails (the server must stay up and answer).
async fn send(
    http: &reqwest::Client,
    method: Method,
    url: &str,
    token: Option<&str>,
    key: Option<&str>,
    body: Option<&Value>,
) -> Answer {
    let mut req = http.request(method.clone(), url);
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(key) = key {
        req = req.header("idempotency-key", key);
    }
    if let Some(body) = body {
        req = req.json(body);
    }
    let started = Instant::now();
    let answered = tokio::time::timeout(HANG_BOUND, async {
        let resp = req.send().await?;
        let status = resp.status();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let retry_after = header("retry-after");
        let replayed = header("idempotent-replayed").as_deref() == Some("true");
        let bytes = resp.bytes().await?;
        Ok::<_, reqwest::Error>(Answer {
            status,
            retry_after,
            replayed,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        })
    })
    .await;
    match answered {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => panic!("{method} {url}: the server did not answer: {e}"),
        Err(_) => panic!(
            "{method} {url}: hung for {:?} (bound {HANG_BOUND:?})",
            started.elapsed()
        ),
    }
}

/// A 503 must be the API's problem, with a Retry-After to honour.
fn assert_unavailable(a: &Answer, what: &str) {
    assert_eq!(
        a.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{what}: {}",
        a.body
    );
    assert_eq!(a.body["code"], "service_unavailable", "{what}: {}", a.body);
    assert_eq!(a.body["status"], 503, "{what}");
    assert!(a.retry_after.is_some(), "{what}: 503 without Retry-After");
}

async fn readyz(http: &reqwest::Client, base: &str) -> StatusCode {
    send(
        http,
        Method::GET,
        &format!("{base}/readyz"),
        None,
        None,
        None,
    )
    .await
    .status
}

/// Polls `/readyz` until it answers `want`, failing past `within`.
async fn wait_ready(http: &reqwest::Client, base: &str, want: StatusCode, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if readyz(http, base).await == want {
            return;
        }
        assert!(Instant::now() < deadline, "/readyz never answered {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn login(http: &reqwest::Client, base: &str, email: &str) -> String {
    let body = json!({"tenant": "acme", "email": email,
                      "password": holdfast_server::demo::DEMO_PASSWORD, "device_name": "ops test"});
    let a = send(
        http,
        Method::POST,
        &format!("{base}/v1/sessions"),
        None,
        None,
        Some(&body),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "login: {}", a.body);
    a.body["token"].as_str().expect("token").to_owned()
}

// ---------------------------------------------------------------------------
// Load: desks creating orders, adding lines, allocating and reading.

#[derive(Clone)]
struct Desk {
    http: reqwest::Client,
    base: String,
    token: String,
    customer: String,
    skus: Arc<Vec<String>>,
}

impl Desk {
    async fn new(base: &str) -> Desk {
        let http = reqwest::Client::new();
        let token = login(&http, base, "dana@acme.test").await;
        let get = |path: String| {
            let (http, token) = (http.clone(), token.clone());
            async move {
                let a = send(&http, Method::GET, &path, Some(&token), None, None).await;
                assert_eq!(a.status, StatusCode::OK, "{path}: {}", a.body);
                a.body
            }
        };
        let customers = get(format!("{base}/v1/customers")).await;
        let customer = customers["customers"]
            .as_array()
            .expect("customers")
            .iter()
            .find(|c| c["name"] == "Tokyo Distributor")
            .expect("Tokyo Distributor")["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let skus = get(format!("{base}/v1/skus?limit=100")).await;
        let skus: Vec<String> = skus["skus"]
            .as_array()
            .expect("skus")
            .iter()
            .map(|s| s["id"].as_str().expect("sku id").to_owned())
            .collect();
        assert!(skus.len() >= 50);
        Desk {
            http,
            base: base.to_owned(),
            token,
            customer,
            skus: Arc::new(skus),
        }
    }

    /// Sends until there is a real answer: a 503 (the database is away) or
    /// 409 `request_in_flight` is retried with the same key, as a desk does.
    /// Retries faster than Retry-After asks, to keep the pressure on.
    async fn until_answered(
        &self,
        tally: &mut Tally,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            let started = Instant::now();
            let a = send(
                &self.http,
                method.clone(),
                &format!("{}{path}", self.base),
                Some(&self.token),
                key,
                body,
            )
            .await;
            tally.slowest = tally.slowest.max(started.elapsed());
            let retry = match (a.status.as_u16(), a.body["code"].as_str()) {
                (503, _) => {
                    assert_unavailable(&a, path);
                    tally.unavailable += 1;
                    true
                }
                (409, Some("request_in_flight")) => {
                    tally.in_flight += 1;
                    true
                }
                _ => false,
            };
            if !retry {
                tally.answered += 1;
                return a;
            }
            assert!(
                Instant::now() < give_up,
                "{path}: still unavailable after a minute"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// One desk's act: create an order, add a line, allocate one, read back.
    async fn cycle(&self, tally: &mut Tally, worker: usize, n: usize) {
        let order = Uuid::now_v7();
        let line = Uuid::now_v7();
        let sku = &self.skus[(worker * 17 + n) % self.skus.len()];
        let create = json!({"id": order, "customer_id": self.customer});
        let a = self
            .until_answered(
                tally,
                Method::POST,
                "/v1/orders",
                Some(&format!("{order}-create")),
                Some(&create),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "create: {}", a.body);
        let add = json!({"id": line, "sku_id": sku, "qty_ordered": 2, "base_version": 1});
        let a = self
            .until_answered(
                tally,
                Method::POST,
                &format!("/v1/orders/{order}/lines"),
                Some(&format!("{order}-line")),
                Some(&add),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "add line: {}", a.body);
        let alloc_key = format!("{order}-allocate");
        let a = self
            .until_answered(
                tally,
                Method::POST,
                &format!("/v1/orders/{order}/lines/{line}/allocate"),
                Some(&alloc_key),
                Some(&json!({"qty": 1})),
            )
            .await;
        let version = match (a.status.as_u16(), a.body["code"].as_str()) {
            (200, _) => {
                tally.allocations.push(alloc_key);
                3
            }
            // The SKU ran out: a business answer, stored, nothing changed.
            (422, Some("insufficient_ats")) => 2,
            _ => panic!("allocate: {} {}", a.status, a.body),
        };
        tally.orders.push((order, version));
        let a = self
            .until_answered(
                tally,
                Method::GET,
                &format!("/v1/orders/{order}"),
                None,
                None,
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "read order: {}", a.body);
        assert_eq!(a.body["version"], version, "read order: {}", a.body);
        let a = self
            .until_answered(tally, Method::GET, &format!("/v1/skus/{sku}"), None, None)
            .await;
        assert_eq!(a.status, StatusCode::OK, "read sku: {}", a.body);
    }
}

/// What one desk saw.
#[derive(Default, Debug)]
struct Tally {
    cycles: u64,
    answered: u64,
    unavailable: u64,
    in_flight: u64,
    slowest: Duration,
    /// Orders every step of which was acknowledged, with their version.
    orders: Vec<(Uuid, i64)>,
    /// Allocation keys answered 200.
    allocations: Vec<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.cycles += other.cycles;
        self.answered += other.answered;
        self.unavailable += other.unavailable;
        self.in_flight += other.in_flight;
        self.slowest = self.slowest.max(other.slowest);
        self.orders.extend(other.orders);
        self.allocations.extend(other.allocations);
    }
}

struct Load {
    stop: watch::Sender<bool>,
    recovered: watch::Sender<bool>,
    cycles: watch::Receiver<u64>,
    served_after: mpsc::UnboundedReceiver<usize>,
    workers: Vec<tokio::task::JoinHandle<Tally>>,
}

impl Load {
    fn start(desk: &Desk) -> Load {
        let (stop, stopped) = watch::channel(false);
        let (recovered, recovered_rx) = watch::channel(false);
        let (cycles_tx, cycles) = watch::channel(0u64);
        let cycles_tx = Arc::new(cycles_tx);
        let (served_tx, served_after) = mpsc::unbounded_channel();
        let workers = (0..WORKERS)
            .map(|w| {
                let (desk, stopped, recovered) =
                    (desk.clone(), stopped.clone(), recovered_rx.clone());
                let (cycles_tx, served_tx) = (cycles_tx.clone(), served_tx.clone());
                tokio::spawn(async move {
                    let mut tally = Tally::default();
                    let mut reported = false;
                    for n in 0.. {
                        if *stopped.borrow() {
                            break;
                        }
                        let after_recovery = *recovered.borrow();
                        desk.cycle(&mut tally, w, n).await;
                        tally.cycles += 1;
                        cycles_tx.send_modify(|c| *c += 1);
                        if after_recovery && !reported {
                            reported = true;
                            let _ = served_tx.send(w);
                        }
                    }
                    tally
                })
            })
            .collect();
        Load {
            stop,
            recovered,
            cycles,
            served_after,
            workers,
        }
    }

    /// Waits until the desks completed `n` more acts.
    async fn progress(&mut self, n: u64) {
        let target = *self.cycles.borrow() + n;
        tokio::time::timeout(
            Duration::from_secs(60),
            self.cycles.wait_for(|c| *c >= target),
        )
        .await
        .expect("the load made no progress")
        .expect("cycles");
    }

    /// Marks the database as back and waits until every desk completed an
    /// act begun after that.
    async fn served_again(&mut self) {
        self.recovered.send_replace(true);
        for _ in 0..WORKERS {
            tokio::time::timeout(Duration::from_secs(60), self.served_after.recv())
                .await
                .expect("every desk is served again after the restart")
                .expect("a worker ended early");
        }
    }

    async fn finish(self) -> Tally {
        self.stop.send_replace(true);
        let mut tally = Tally::default();
        for w in self.workers {
            tally.merge(w.await.expect("a desk failed"));
        }
        tally
    }
}

/// Every acknowledged act applied exactly once, and ledger = positions.
async fn check_invariants(db: &mut PgConnection, tally: &Tally) {
    for (order, version) in &tally.orders {
        let stored: i64 = sqlx::query_scalar("select version from orders where id = $1")
            .bind(order)
            .fetch_one(&mut *db)
            .await
            .expect("acknowledged order exists");
        assert_eq!(stored, *version, "order {order}: each act applied once");
    }
    for key in &tally.allocations {
        let rows: i64 =
            sqlx::query_scalar("select count(*) from allocation_ledger where idempotency_key = $1")
                .bind(key)
                .fetch_one(&mut *db)
                .await
                .expect("ledger");
        assert_eq!(rows, 1, "allocation {key}: one ledger row");
    }
    let drifted: i64 = sqlx::query_scalar(
        "select count(*) from sku_positions p
          where p.allocated <> coalesce((select sum(delta) from allocation_ledger l
                                          where l.tenant_id = p.tenant_id and l.sku_id = p.sku_id), 0)",
    )
    .fetch_one(&mut *db)
    .await
    .expect("positions");
    assert_eq!(drifted, 0, "allocation ledger sums = positions");
}

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
    let pids: Vec<i32> = sqlx::query_scalar(
        "select pid from pg_stat_activity
          where datname = current_database() and pid <> pg_backend_pid()",
    )
    .fetch_all(&mut *admin)
    .await
    .expect("sessions");
    sqlx::query("select pg_terminate_backend(pid) from unnest($1::int[]) as pid")
        .bind(&pids)
        .execute(&mut *admin)
        .await
        .expect("terminate");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: i64 =
            sqlx::query_scalar("select count(*) from pg_stat_activity where pid = any($1)")
                .bind(&pids)
                .fetch_one(&mut *admin)
                .await
                .expect("sessions");
        if left == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "sessions did not end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[sqlx::test(migrations = "../migrations")]
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
    common::assert_problem(status, &body, 503, "service_unavailable");

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
#[sqlx::test(migrations = "../migrations")]
async fn sigterm_finishes_the_request_and_deliveries_in_flight(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let admin_url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let url = with_database(&admin_url, connect.get_database().expect("test database"));
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
