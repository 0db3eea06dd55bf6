//! Reads from a real hot standby (`serve --read-database-url`): a primary
//! and a standby made from it by `pg_basebackup -R`, streaming
//! (`support::replica`).
//!
//! - The pull feed's fence holds on the standby by itself: with writers on
//!   the primary and a reader paging the standby directly (no waiting for
//!   it to catch up), a transaction that commits late is never skipped, and
//!   every committed change row is covered by exactly one page, which
//!   served its document at that version or newer.
//! - Read-your-writes through the server: with replay paused on the standby,
//!   a desk's GET right after its PATCH shows the PATCH, and its pull brings
//!   it; the cursor of a pull straight from the lagging standby never passes
//!   the write; a server that may wait long enough serves the read from the
//!   replica once replay resumes, not from the primary.

use std::collections::HashMap;
use std::time::Duration;

use holdfast_protocol::model::Change;
use holdfast_server::db::reads::DEFAULT_MAX_WAIT;
use holdfast_server::feed::{self, Cursor, Position};
use holdfast_server::AppState;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;
use tokio::time::Instant;
use uuid::Uuid;

use crate::support::replica::Pair;
use crate::support::{acme, key, TestServer};
use crate::sync_feed::{create_order, edit_in_open_tx, Mirror};

const PATIENCE: Duration = Duration::from_secs(60);

/// A desk reading the feed straight from one database (here: the standby,
/// without any wait for it to catch up), keeping documents as the desk's
/// store does (never an older version over a newer one) and logging what
/// each page covered.
#[derive(Default)]
struct FeedReader {
    docs: HashMap<(String, Uuid), i64>,
    at: Option<Cursor>,
    pages: Vec<PageLog>,
}

/// One feed page: every change row in `(from, to]` (feed order) is the
/// page's, and `served` is each document it carried, at its version.
struct PageLog {
    from: (i64, i64),
    to: (i64, i64),
    served: HashMap<(String, Uuid), i64>,
}

fn kind_name(c: &Change) -> String {
    serde_json::to_value(c.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .expect("kind")
}

fn feed_at(p: Option<&Cursor>) -> Option<(i64, i64)> {
    match p.map(|c| &c.position) {
        Some(Position::Feed { xid, id }) => Some((*xid, *id)),
        _ => None,
    }
}

impl FeedReader {
    async fn pull(&mut self, db: &PgPool, limit: usize) -> feed::pull::Page {
        let page = feed::pull::pull(db, acme(), self.at, limit)
            .await
            .expect("pull from the standby");
        let mut served = HashMap::new();
        for c in &page.changes {
            let key = (kind_name(c), c.id);
            served.insert(key.clone(), c.version);
            let kept = self.docs.entry(key).or_insert(c.version);
            *kept = (*kept).max(c.version);
        }
        if let (Some(from), Some(to)) = (feed_at(self.at.as_ref()), feed_at(Some(&page.next))) {
            assert!(to >= from, "the cursor went back from {from:?} to {to:?}");
            self.pages.push(PageLog { from, to, served });
        }
        self.at = Some(page.next);
        page
    }

    /// Pulls until there is nothing more right now.
    async fn catch_up(&mut self, db: &PgPool) {
        while self.pull(db, 1000).await.has_more {}
    }

    fn version(&self, kind: &str, id: Uuid) -> Option<i64> {
        self.docs.get(&(kind.to_owned(), id)).copied()
    }
}

/// The standby's feed fence now (`pull.rs`).
async fn fence(db: &PgPool) -> i64 {
    sqlx::query_scalar("select pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        .fetch_one(db)
        .await
        .expect("fence")
}

/// Two transactions on the primary; the one that started (and wrote its
/// change row) first commits last. The standby has replayed the second's
/// commit and shows its row, yet a pull from it serves neither and its
/// cursor stays below the first: the standby counts the first as running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_commit_is_never_skipped_by_pulls_from_a_hot_standby() {
    let pair = Pair::start().await;
    let s = TestServer::start(pair.primary.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let early = create_order(&s, &dana, "acme", "Austin Boutique").await;
    let late = create_order(&s, &dana, "acme", "Tokyo Distributor").await;
    pair.wait_replayed().await;
    let mut desk = FeedReader::default();
    desk.catch_up(&pair.standby).await;
    assert_eq!(desk.version("order", early), Some(1));

    let (t1, t1_xid, t1_version) =
        edit_in_open_tx(&pair.primary, acme(), early, "T1, committed last").await;
    let (t2, t2_xid, _) = edit_in_open_tx(&pair.primary, acme(), late, "T2, committed first").await;
    assert!(t2_xid > t1_xid);
    t2.commit().await.expect("commit T2");
    pair.wait_replayed().await;

    // The standby has T2: its row is there to see.
    let notes: String = sqlx::query_scalar("select notes from orders where id = $1")
        .bind(late)
        .fetch_one(&pair.standby)
        .await
        .expect("late order on the standby");
    assert_eq!(notes, "T2, committed first");
    // But it knows T1 runs on the primary: its fence holds below T1.
    assert!(fence(&pair.standby).await <= t1_xid);
    let page = desk.pull(&pair.standby, 1000).await;
    assert!(!page.has_more);
    for c in &page.changes {
        assert_ne!(c.id, early, "an uncommitted change served");
        assert_ne!(c.id, late, "a change above the standby's fence served");
    }
    let (xid, _) = feed_at(desk.at.as_ref()).expect("in the feed");
    assert!(xid <= t1_xid, "the cursor passed T1 ({xid} > {t1_xid})");

    t1.commit().await.expect("commit T1");
    pair.wait_replayed().await;
    let deadline = Instant::now() + PATIENCE;
    while desk.version("order", early) != Some(t1_version) || desk.version("order", late) != Some(2)
    {
        assert!(
            Instant::now() < deadline,
            "the standby never served T1 and T2"
        );
        desk.pull(&pair.standby, 1000).await;
    }
}

/// Every change row the primary commits, copied as it is written (the
/// compactor deletes superseded rows from `changes` itself).
async fn log_every_change_row(db: &PgPool) {
    for sql in [
        "create table test_change_log (tenant_id uuid, xid bigint, id bigint, kind text,
                                       doc_id uuid, version bigint)",
        "create function test_log_change() returns trigger language plpgsql
           security definer as $$
         begin
           insert into test_change_log
           values (new.tenant_id, new.xid::text::bigint, new.id, new.kind, new.doc_id, new.version);
           return new;
         end $$",
        "create trigger test_log_change after insert on changes
           for each row execute function test_log_change()",
    ] {
        sqlx::query(sql).execute(db).await.expect("change log");
    }
}

/// Six writers on the primary (header CAS edits and allocations over HTTP)
/// while a desk pages the standby's feed five documents at a time, never
/// waiting for the standby to catch up. Every change row committed is in
/// exactly one page's span, and that page carried its document at that
/// version or newer; the desk ends with the primary's documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_writers_on_the_primary_and_a_reader_paging_the_standby_agree() {
    let pair = Pair::start().await;
    log_every_change_row(&pair.primary).await;
    let s = std::sync::Arc::new(TestServer::start(pair.primary.clone()).await);
    let dana = s.login("acme", "dana@acme.test").await;
    let colours = ["Washed Indigo", "Ecru", "Olive Drab", "Charcoal"];
    let mut orders = Vec::new();
    let mut skus = Vec::new();
    for (i, colour) in colours.iter().cycle().take(12).enumerate() {
        let order = create_order(&s, &dana, "acme", "Tokyo Distributor").await;
        let sku = holdfast_server::demo::sku_id(
            "acme",
            "Harrier Chore Coat",
            colour,
            ["S", "M", "L"][i % 3],
        );
        let line = Uuid::now_v7();
        let r = s
            .post(
                &dana,
                &format!("/v1/orders/{order}/lines"),
                &key(),
                json!({"id": line, "sku_id": sku, "qty_ordered": 3, "base_version": 1}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
        orders.push((order, line));
        skus.push(sku);
    }
    pair.wait_replayed().await;
    let mut desk = FeedReader::default();
    desk.catch_up(&pair.standby).await;
    let start = feed_at(desk.at.as_ref()).expect("in the feed");

    let stop_at = Instant::now() + Duration::from_secs(4);
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..6usize {
        let s = s.clone();
        let token = s.login("acme", "priya@acme.test").await;
        let orders = orders.clone();
        writers.spawn(async move {
            let mut seen: HashMap<Uuid, Value> = HashMap::new();
            let mut applied = 0;
            let mut n = w;
            while Instant::now() < stop_at {
                n += 1;
                let (order, line) = orders[(n * 5 + w) % orders.len()];
                let r = if n % 3 == 0 {
                    let allocated = seen
                        .get(&order)
                        .and_then(|o| o["lines"][0]["qty_allocated"].as_i64())
                        .unwrap_or(0);
                    let action = if allocated < 2 { "allocate" } else { "release" };
                    s.post(
                        &token,
                        &format!("/v1/orders/{order}/lines/{line}/{action}"),
                        &key(),
                        json!({"qty": 1}),
                    )
                    .await
                } else {
                    let base = seen
                        .get(&order)
                        .and_then(|o| o["version"].as_i64())
                        .unwrap_or(2);
                    s.mutate(
                        &token,
                        Method::PATCH,
                        &format!("/v1/orders/{order}"),
                        &key(),
                        &json!({"base_version": base, "set": {"notes": format!("writer {w}, edit {n}")}}),
                    )
                    .await
                };
                let body = r.json();
                assert!(!r.status.is_server_error(), "{} {body}", r.status);
                let current = if r.status == StatusCode::CONFLICT {
                    &body["current"]
                } else if body["order"].is_object() {
                    &body["order"]
                } else {
                    &body
                };
                if current["version"].is_i64() {
                    seen.insert(order, current.clone());
                }
                if r.status.is_success() {
                    applied += 1;
                }
            }
            applied
        });
    }
    while !writers.is_empty() {
        desk.pull(&pair.standby, 5).await;
        while let Some(done) = writers.try_join_next() {
            assert!(done.expect("writer") > 0, "a writer never succeeded");
        }
    }

    // Everything committed; once the standby has replayed it, the desk
    // pages to the end of the feed.
    let rows: Vec<(i64, i64, String, Uuid, i64)> = sqlx::query_as(
        "select xid, id, kind, doc_id, version from test_change_log
          where tenant_id = $1 and (xid, id) > ($2, $3) order by xid, id",
    )
    .bind(acme())
    .bind(start.0)
    .bind(start.1)
    .fetch_all(&pair.primary)
    .await
    .expect("change log");
    assert!(rows.len() > 60, "the writers barely wrote: {}", rows.len());
    let last = rows.last().map(|r| (r.0, r.1)).expect("rows");
    pair.wait_replayed().await;
    let deadline = Instant::now() + PATIENCE;
    while feed_at(desk.at.as_ref()).is_none_or(|at| at < last) {
        assert!(Instant::now() < deadline, "the desk never reached {last:?}");
        desk.pull(&pair.standby, 5).await;
    }

    // The pages' spans tile the feed from where the desk started.
    assert_eq!(desk.pages.first().map(|p| p.from), Some(start));
    for pair in desk.pages.windows(2) {
        assert_eq!(pair[0].to, pair[1].from, "the spans must tile the feed");
    }
    // Each committed change row in exactly one span, whose page carried it.
    for (xid, id, kind, doc, version) in &rows {
        let at = (*xid, *id);
        let spans: Vec<&PageLog> = desk
            .pages
            .iter()
            .filter(|p| p.from < at && at <= p.to)
            .collect();
        assert_eq!(
            spans.len(),
            1,
            "change {at:?} ({kind} {doc} v{version}) in {} spans",
            spans.len()
        );
        let carried = spans[0].served.get(&(kind.clone(), *doc));
        assert!(
            carried.is_some_and(|v| v >= version),
            "change {at:?} ({kind} {doc} v{version}) skipped: its page ({:?}, {:?}] carried {carried:?}",
            spans[0].from,
            spans[0].to
        );
    }

    // And the desk holds the primary's documents.
    for (order, _) in &orders {
        let (_, want) = s.get(&format!("/v1/orders/{order}"), &dana).await;
        assert_eq!(
            desk.version("order", *order),
            want["version"].as_i64(),
            "order {order}"
        );
    }
    eprintln!(
        "standby reader: {} pages over {} change rows",
        desk.pages.len(),
        rows.len()
    );
}

/// `application_name` of the patient server's replica connections, to see
/// them wait in `pg_stat_activity`.
const PATIENT: &str = "holdfast-patient-reads";

/// Until one of the patient server's replica connections has asked the
/// standby for its replay position: the read is waiting for the replica.
async fn wait_until_polling(standby: &PgPool) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let polling: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
              where application_name = $1 and query like '%pg_last_wal_replay_lsn%'",
        )
        .bind(PATIENT)
        .fetch_one(standby)
        .await
        .expect("pg_stat_activity");
        if polling > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the read never asked the replica"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A desk PATCHes an order while the standby's replay is paused (it lags,
/// and keeps lagging). Its GET right after shows the PATCH, and its pull
/// brings it, through the server whose reads go to the replica; a pull
/// straight from the standby does not see it, and its cursor stops short of
/// it (so a later pull brings it); the desk's document never goes back.
/// Once replay resumes, the replica serves reads again. A second instance
/// (which never saw the desk's PATCH: the floor comes from the database, not
/// from memory) that may wait long enough holds the GET while replay is
/// paused and answers it from the replica once replay resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desk_never_sees_its_own_write_go_missing_while_the_replica_lags() {
    let pair = Pair::start().await;
    let state = AppState::new(pair.primary.clone())
        .with_read_replica(pair.standby.clone(), DEFAULT_MAX_WAIT);
    let stats = state.reads.stats();
    let s = TestServer::start_with(state).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let order = create_order(&s, &dana, "acme", "Austin Boutique").await;
    let path = format!("/v1/orders/{order}");

    // Caught up, the replica serves the desk's reads.
    let mut desk = Mirror::default();
    desk.catch_up(&s, &dana, 1000).await;
    let (status, body) = s.get(&path, &dana).await;
    assert_eq!(
        (status, body["version"].as_i64()),
        (StatusCode::OK, Some(1))
    );
    assert!(stats.replica() >= 2, "{stats:?}");
    assert_eq!(stats.primary(), 0, "{stats:?}");
    // A second desk reads the standby's feed directly, with no wait at all.
    pair.wait_replayed().await;
    let mut raw = FeedReader::default();
    raw.catch_up(&pair.standby).await;
    assert_eq!(raw.version("order", order), Some(1));

    pair.pause_replay().await;
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &path,
            &key(),
            &json!({"base_version": 1, "set": {"notes": "written while the replica lags"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["version"], 2);
    desk.upsert_answer("order", &r.json());
    let lagging: i64 = sqlx::query_scalar("select version from orders where id = $1")
        .bind(order)
        .fetch_one(&pair.standby)
        .await
        .expect("order on the standby");
    assert_eq!(lagging, 1, "the standby lags");

    // The GET right after the PATCH shows it: the replica did not catch up
    // within the wait, so the primary answered.
    let behind = stats.behind.load(std::sync::atomic::Ordering::Relaxed);
    let (status, body) = s.get(&path, &dana).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["version"], 2,
        "the desk's own write went missing: {body}"
    );
    assert_eq!(body["notes"], "written while the replica lags");
    assert_eq!(
        stats.behind.load(std::sync::atomic::Ordering::Relaxed),
        behind + 1,
        "{stats:?}"
    );
    // So does its pull (Mirror::pull fails on any document going back).
    desk.catch_up(&s, &dana, 1000).await;
    assert_eq!(desk.get("order", order).map(|d| d.0), Some(2));

    // Straight from the lagging standby: nothing new, and the cursor stops
    // short of the PATCH's change row.
    let (patch_xid, patch_id): (i64, i64) = sqlx::query_as(
        "select xid::text::bigint, id from changes where doc_id = $1 and version = 2",
    )
    .bind(order)
    .fetch_one(&pair.primary)
    .await
    .expect("the PATCH's change row");
    let page = raw.pull(&pair.standby, 1000).await;
    assert!(
        page.changes.iter().all(|c| c.id != order),
        "{:?}",
        page.changes
    );
    let at = feed_at(raw.at.as_ref()).expect("in the feed");
    assert!(
        at < (patch_xid, patch_id),
        "the cursor passed the write: {at:?}"
    );
    assert_eq!(raw.version("order", order), Some(1));

    pair.resume_replay().await;
    pair.wait_replayed().await;
    let deadline = Instant::now() + PATIENCE;
    while raw.version("order", order) != Some(2) {
        assert!(
            Instant::now() < deadline,
            "the standby's feed never brought the write"
        );
        raw.pull(&pair.standby, 1000).await;
    }
    // Back in step, the replica serves the reads again (after its rest).
    let served = stats.replica();
    let deadline = Instant::now() + PATIENCE;
    while stats.replica() == served {
        assert!(Instant::now() < deadline, "the replica never served again");
        let (status, body) = s.get(&path, &dana).await;
        assert_eq!(
            (status, body["version"].as_i64()),
            (StatusCode::OK, Some(2))
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Waiting rather than falling back, on another instance than the one
    // the desk wrote through: a server that may wait a minute holds the read
    // until the replica has the write, then answers from it.
    let patient_pool = holdfast_server::pool_options(4, Duration::from_secs(5))
        .connect_with(patient_options(pair.standby_options()))
        .await
        .expect("patient replica pool");
    let patient_state = AppState::new(pair.primary.clone())
        .with_read_replica(patient_pool, Duration::from_secs(60));
    let patient_stats = patient_state.reads.stats();
    let patient = TestServer::start_with(patient_state).await;
    pair.pause_replay().await;
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &path,
            &key(),
            &json!({"base_version": 2, "set": {"notes": "read from the replica"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let url = patient.url(&path);
    let http = patient.http.clone();
    let token = dana.clone();
    let reading = tokio::spawn(async move {
        let resp = http.get(url).bearer_auth(token).send().await.expect("GET");
        crate::support::read(resp).await
    });
    wait_until_polling(&pair.standby).await;
    assert!(
        !reading.is_finished(),
        "answered before the replica had the write"
    );
    pair.resume_replay().await;
    let (status, body) = reading.await.expect("GET task");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["version"], 3, "{body}");
    assert_eq!(body["notes"], "read from the replica");
    assert_eq!(patient_stats.replica(), 1, "{patient_stats:?}");
    assert_eq!(patient_stats.primary(), 0, "{patient_stats:?}");
}

fn patient_options(options: PgConnectOptions) -> PgConnectOptions {
    options.application_name(PATIENT)
}
