//! The pull feed and the live stream over real HTTP and real Postgres: no
//! change skipped when transactions commit out of order, a paging reader
//! converging under concurrent writers, pokes within a second for the right
//! tenant only, one LISTEN connection however many desks, compaction.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{assert_problem, TestServer};
use holdfast_server::db::changes::{record_in_tx, DocKind};
use holdfast_server::demo;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::{PgPool, Postgres, Transaction};
use tokio::sync::mpsc;
use tokio::time::Instant;
use uuid::Uuid;

const MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// How long a test waits for something that should happen at once before it
/// calls it a failure. Not a performance claim: a failure deadline.
const PATIENCE: Duration = Duration::from_secs(30);

fn key() -> String {
    Uuid::now_v7().to_string()
}

/// A desk's mirror: every document it has pulled, and its cursor.
#[derive(Default)]
struct Mirror {
    docs: HashMap<(String, String), (i64, Value)>,
    cursor: Option<String>,
    pulls: usize,
}

impl Mirror {
    /// One pull, applied. Asserts the page's shape and that no document ever
    /// goes back to an older version.
    async fn pull(&mut self, s: &TestServer, token: &str, limit: usize) -> Value {
        let path = match &self.cursor {
            Some(c) => format!("/v1/sync/pull?limit={limit}&cursor={c}"),
            None => format!("/v1/sync/pull?limit={limit}"),
        };
        let (status, page) = s.get(&path, token).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let changes = page["changes"].as_array().expect("changes");
        assert!(changes.len() <= limit, "page over its limit");
        for c in changes {
            let kind = c["kind"].as_str().expect("kind").to_owned();
            let id = c["id"].as_str().expect("id").to_owned();
            let version = c["version"].as_i64().expect("version");
            if let Some((seen, _)) = self.docs.get(&(kind.clone(), id.clone())) {
                assert!(
                    version >= *seen,
                    "{kind} {id} went back from {seen} to {version}"
                );
            }
            self.docs.insert((kind, id), (version, c["data"].clone()));
        }
        assert!(page["has_more"].is_boolean());
        self.cursor = Some(page["cursor"].as_str().expect("cursor").to_owned());
        self.pulls += 1;
        page
    }

    /// Pulls until the server says there is no more right now.
    async fn catch_up(&mut self, s: &TestServer, token: &str, limit: usize) {
        while self.pull(s, token, limit).await["has_more"] == json!(true) {}
    }

    fn get(&self, kind: &str, id: Uuid) -> Option<&(i64, Value)> {
        self.docs.get(&(kind.to_owned(), id.to_string()))
    }

    fn ids(&self, kind: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .docs
            .keys()
            .filter(|(k, _)| k == kind)
            .map(|(_, id)| id.clone())
            .collect();
        ids.sort();
        ids
    }
}

async fn create_order(s: &TestServer, token: &str, tenant: &str, customer: &str) -> Uuid {
    let id = Uuid::now_v7();
    let r = s
        .post(
            token,
            "/v1/orders",
            &key(),
            json!({"id": id, "customer_id": demo::customer_id(tenant, customer)}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    id
}

/// Edits an order's notes exactly as the engine would (version + 1 and its
/// change row, one transaction) and leaves the transaction open. Returns it
/// with its xid and the new version.
async fn edit_in_open_tx(
    db: &PgPool,
    tenant: Uuid,
    order: Uuid,
    notes: &str,
) -> (Transaction<'static, Postgres>, i64, i64) {
    let mut tx = db.begin().await.expect("begin");
    let version: i64 = sqlx::query_scalar(
        "update orders set notes = $3, version = version + 1, updated_at = now()
          where tenant_id = $1 and id = $2 returning version",
    )
    .bind(tenant)
    .bind(order)
    .bind(notes)
    .fetch_one(&mut *tx)
    .await
    .expect("update order");
    record_in_tx(&mut tx, tenant, DocKind::Order, order, version)
        .await
        .expect("change row");
    let xid: i64 = sqlx::query_scalar("select pg_current_xact_id()::text::bigint")
        .fetch_one(&mut *tx)
        .await
        .expect("xid");
    (tx, xid, version)
}

/// Waits until no transaction at or below `xid` is in flight anywhere in the
/// cluster, i.e. until a pull's fence has passed it. Other tests' databases
/// share the cluster, and their transactions hold the fence too.
async fn wait_for_fence_past(db: &PgPool, xid: i64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let fence: i64 =
            sqlx::query_scalar("select pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
                .fetch_one(db)
                .await
                .expect("fence");
        if fence > xid {
            return;
        }
        assert!(Instant::now() < deadline, "the fence never passed {xid}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn first_pull_is_the_whole_state_then_the_feed(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let tenant = demo::tenant_id("acme");
    let order = create_order(&s, &dana, "acme", "Austin Boutique").await;
    // An invoice exists once an order is confirmed.
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/lines"),
            &key(),
            json!({"id": Uuid::now_v7(), "sku_id": sku, "qty_ordered": 1, "base_version": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/confirm"),
            &key(),
            json!({"base_version": 2}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let invoice = r.json()["invoice_id"].as_str().expect("invoice").to_owned();

    let mut desk = Mirror::default();
    desk.catch_up(&s, &dana, 7).await;
    assert!(desk.pulls > 40, "paged, 7 at a time");

    let ids = |sql: &'static str| {
        let db = db.clone();
        async move {
            let mut ids: Vec<String> = sqlx::query_scalar::<_, Uuid>(sql)
                .bind(tenant)
                .fetch_all(&db)
                .await
                .expect("ids")
                .into_iter()
                .map(|id| id.to_string())
                .collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(
        desk.ids("sku"),
        ids("select sku_id from sku_positions where tenant_id = $1").await
    );
    assert_eq!(
        desk.ids("customer"),
        ids("select id from customers where tenant_id = $1").await
    );
    assert_eq!(desk.ids("order"), [order.to_string()]);
    assert_eq!(desk.ids("invoice"), std::slice::from_ref(&invoice));

    // Documents are exactly what the read routes answer.
    let (_, want) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(desk.get("order", order).expect("order").1, want);
    assert_eq!(desk.get("order", order).expect("order").0, 3);
    let (_, want) = s.get(&format!("/v1/skus/{sku}"), &dana).await;
    assert_eq!(desk.get("sku", sku).expect("sku").1, want);
    assert_eq!(want["allocated"], 0);
    let (_, want) = s.get(&format!("/v1/invoices/{invoice}"), &dana).await;
    let invoice_id: Uuid = invoice.parse().expect("uuid");
    assert_eq!(desk.get("invoice", invoice_id).expect("invoice").1, want);
    let (_, customers) = s.get("/v1/customers", &dana).await;
    for c in customers["customers"].as_array().expect("customers") {
        let id: Uuid = c["id"].as_str().expect("id").parse().expect("uuid");
        assert_eq!(&desk.get("customer", id).expect("customer").1, c);
    }

    // Caught up, the desk continues in the feed: a later order arrives, and
    // the SKU its allocation moved.
    let second = create_order(&s, &dana, "acme", "Tokyo Distributor").await;
    let line = Uuid::now_v7();
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{second}/lines"),
            &key(),
            json!({"id": line, "sku_id": sku, "qty_ordered": 2, "base_version": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{second}/lines/{line}/allocate"),
            &key(),
            json!({"qty": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let deadline = Instant::now() + PATIENCE;
    while desk.get("order", second).is_none_or(|(v, _)| *v < 3) {
        assert!(Instant::now() < deadline, "the allocation never arrived");
        desk.pull(&s, &dana, 7).await;
    }
    // The order may arrive at v3 through the line's earlier change row while
    // the allocation's own rows still wait behind the fence (another test's
    // transaction anywhere in the cluster holds it), and the same
    // transaction's SKU row may sit on a later page: late, never lost.
    while desk
        .get("sku", sku)
        .is_none_or(|(_, d)| d["allocated"] != 1)
    {
        assert!(Instant::now() < deadline, "the SKU change never arrived");
        desk.pull(&s, &dana, 7).await;
    }
    let sku_now = &desk.get("sku", sku).expect("sku").1;
    assert_eq!(sku_now["allocated"], 1);
    assert_eq!(sku_now["ats"], 5);
}

/// Two transactions; the one that started (and wrote its change row) first
/// commits last. A pull between the commits must not move its cursor past the
/// uncommitted change: it arrives in the next pull.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_transaction_committing_late_is_never_skipped(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let tenant = demo::tenant_id("acme");
    let early = create_order(&s, &dana, "acme", "Austin Boutique").await;
    let late = create_order(&s, &dana, "acme", "Tokyo Distributor").await;
    // Caught up for real: another test's transaction anywhere in the cluster
    // may hold the fence below the creations, and a creation served only
    // later would bring its order (at its current version) into the pull
    // between the commits below.
    let now: i64 = sqlx::query_scalar("select pg_current_xact_id()::text::bigint")
        .fetch_one(&db)
        .await
        .expect("xid");
    wait_for_fence_past(&db, now).await;
    let mut desk = Mirror::default();
    desk.catch_up(&s, &dana, 1000).await;

    // T1 starts first: its xid and its change row id are the lower ones.
    let (t1, t1_xid, t1_version) = edit_in_open_tx(&db, tenant, early, "T1, committed last").await;
    let (t2, t2_xid, _) = edit_in_open_tx(&db, tenant, late, "T2, committed first").await;
    assert!(t2_xid > t1_xid);
    t2.commit().await.expect("commit T2");

    // Between the commits: T1's change is not visible, and T2's, though
    // committed, is held back behind it (the fence is at most T1's xid), so
    // the cursor cannot pass T1's row.
    let page = desk.pull(&s, &dana, 1000).await;
    assert_eq!(page["has_more"], false);
    for c in page["changes"].as_array().expect("changes") {
        assert_ne!(c["id"], early.to_string(), "uncommitted change served");
        assert_ne!(c["id"], late.to_string(), "a change above the fence served");
    }
    assert_eq!(desk.get("order", early).expect("early").0, 1);

    t1.commit().await.expect("commit T1");
    wait_for_fence_past(&db, t1_xid.max(t2_xid)).await;

    // The very next pull brings both.
    let page = desk.pull(&s, &dana, 1000).await;
    assert_eq!(page["has_more"], false, "{page}");
    let (version, data) = desk.get("order", early).expect("early");
    assert_eq!(*version, t1_version);
    assert_eq!(data["notes"], "T1, committed last");
    let (version, data) = desk.get("order", late).expect("late");
    assert_eq!(*version, 2);
    assert_eq!(data["notes"], "T2, committed first");
}

/// 6 writers edit orders (header CAS edits and allocations, over HTTP) for a
/// few seconds while a desk pulls in pages of 5, starting with no cursor (so
/// the first-pull snapshot is paged while they write). Afterwards the desk's
/// view of every order, and of every SKU they allocated, equals the final one.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn six_writers_and_a_paging_reader_agree(db: PgPool) {
    let s = std::sync::Arc::new(TestServer::start(db.clone()).await);
    let dana = s.login("acme", "dana@acme.test").await;
    let colours = ["Washed Indigo", "Ecru", "Olive Drab", "Charcoal"];
    let mut orders = Vec::new();
    let mut skus = Vec::new();
    for (i, colour) in colours.iter().cycle().take(12).enumerate() {
        let order = create_order(&s, &dana, "acme", "Tokyo Distributor").await;
        let sku = demo::sku_id("acme", "Harrier Chore Coat", colour, ["S", "M", "L"][i % 3]);
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

    let stop_at = Instant::now() + Duration::from_secs(4);
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..6usize {
        let s = s.clone();
        let token = s.login("acme", "priya@acme.test").await;
        let orders = orders.clone();
        writers.spawn(async move {
            // What this writer last saw of each order: a desk edits on top of
            // that, and after a conflict on top of the `current` it was sent.
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

    let mut desk = Mirror::default();
    while !writers.is_empty() {
        desk.pull(&s, &dana, 5).await;
        while let Some(done) = writers.try_join_next() {
            assert!(done.expect("writer") > 0, "a writer never succeeded");
        }
    }

    // Everything has committed; the desk must converge on the final state.
    let mut want = HashMap::new();
    for (order, _) in &orders {
        want.insert(
            ("order", *order),
            s.get(&format!("/v1/orders/{order}"), &dana).await.1,
        );
    }
    for sku in &skus {
        want.insert(
            ("sku", *sku),
            s.get(&format!("/v1/skus/{sku}"), &dana).await.1,
        );
    }
    assert!(
        want.iter()
            .any(|((kind, _), doc)| *kind == "order" && doc["version"].as_i64() > Some(5)),
        "the writers barely wrote"
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        let behind: Vec<_> = want
            .iter()
            .filter(|((kind, id), doc)| desk.get(kind, *id).map(|d| &d.1) != Some(*doc))
            .map(|(k, _)| *k)
            .collect();
        if behind.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the desk never caught up with {behind:?}"
        );
        desk.pull(&s, &dana, 5).await;
    }
}

// ------------------------------------------------------------------ stream

enum SseItem {
    Comment(String),
    Changed(Value),
    Other(String),
}

/// An open `/v1/sync/stream`, parsed as it arrives.
struct EventStream {
    rx: mpsc::UnboundedReceiver<(Instant, SseItem)>,
}

impl EventStream {
    /// Opens a stream; returns once the response has started (the server
    /// subscribes before it answers).
    async fn open(s: &TestServer, token: &str) -> EventStream {
        let mut resp = s
            .http
            .get(s.url("/v1/sync/stream"))
            .bearer_auth(token)
            .send()
            .await
            .expect("stream");
        assert_eq!(resp.status(), StatusCode::OK);
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut buf = String::new();
            while let Ok(Some(chunk)) = resp.chunk().await {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buf.find("\n\n") {
                    let block: String = buf.drain(..end + 2).collect();
                    if tx.send((Instant::now(), parse_block(&block))).is_err() {
                        return;
                    }
                }
            }
        });
        EventStream { rx }
    }

    /// The next item, or None if none arrives by `deadline`.
    async fn next_by(&mut self, deadline: Instant) -> Option<(Instant, SseItem)> {
        tokio::time::timeout_at(deadline, self.rx.recv())
            .await
            .ok()
            .flatten()
    }

    /// The next `changed` event by `deadline`; panics otherwise.
    async fn changed_by(&mut self, deadline: Instant) -> (Instant, Value) {
        loop {
            match self.next_by(deadline).await {
                Some((at, SseItem::Changed(data))) => return (at, data),
                Some((_, SseItem::Other(block))) => panic!("unexpected event: {block}"),
                Some((_, SseItem::Comment(_))) => {}
                None => panic!("no `changed` event by the deadline"),
            }
        }
    }
}

fn parse_block(block: &str) -> SseItem {
    let mut event = None;
    let mut data = String::new();
    let mut comment = None;
    for line in block.lines() {
        if let Some(c) = line.strip_prefix(':') {
            comment = Some(c.trim().to_owned());
        } else if let Some(e) = line.strip_prefix("event:") {
            event = Some(e.trim().to_owned());
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push_str(d.trim());
        }
    }
    match (event.as_deref(), comment) {
        (Some("changed"), _) => {
            SseItem::Changed(serde_json::from_str(&data).expect("changed data is JSON"))
        }
        (None, Some(c)) if data.is_empty() => SseItem::Comment(c),
        _ => SseItem::Other(block.to_owned()),
    }
}

/// Pokes arrive within a second of the commit, and a pull right after one
/// shows the change. Another tenant's desk hears nothing of it.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn stream_pokes_within_a_second_and_only_its_tenant(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let gina = s.login("globex", "gina@globex.test").await;

    // Open the streams first, then write: every later commit is announced.
    // Each create's poke is awaited, so nothing sent before this point is
    // still on its way to either desk.
    let mut acme = EventStream::open(&s, &dana).await;
    let mut globex = EventStream::open(&s, &gina).await;
    let acme_order = create_order(&s, &dana, "acme", "Austin Boutique").await;
    acme.changed_by(Instant::now() + PATIENCE).await;
    let globex_order = create_order(&s, &gina, "globex", "Globex Retail West").await;
    globex.changed_by(Instant::now() + PATIENCE).await;
    let mut acme_desk = Mirror::default();
    acme_desk.catch_up(&s, &dana, 1000).await;
    let mut globex_desk = Mirror::default();
    globex_desk.catch_up(&s, &gina, 1000).await;

    // Acme commits: acme's desk is poked within a second, and the pull the
    // poke prompts shows the change.
    let (tx, _, version) = edit_in_open_tx(&db, demo::tenant_id("acme"), acme_order, "poke").await;
    tx.commit().await.expect("commit");
    let committed = Instant::now();
    let (at, data) = acme.changed_by(committed + PATIENCE).await;
    let waited = at.saturating_duration_since(committed);
    assert!(waited <= Duration::from_secs(1), "poked after {waited:?}");
    assert!(data["cursor"].is_string(), "{data}");
    acme_desk.pull(&s, &dana, 1000).await;
    assert_eq!(
        acme_desk.get("order", acme_order).expect("order").0,
        version
    );

    // Globex commits next. A stray poke from acme's commit would have been
    // sent to globex's desk before this commit began, so it would be the
    // first `changed` globex's desk sees now, and its cursor (the caught-up
    // cursor when it was sent) would still be before this commit. The first
    // one must already be past it.
    let (tx, _, version) =
        edit_in_open_tx(&db, demo::tenant_id("globex"), globex_order, "globex poke").await;
    tx.commit().await.expect("commit");
    let committed = Instant::now();
    let (at, data) = globex.changed_by(committed + PATIENCE).await;
    let waited = at.saturating_duration_since(committed);
    assert!(waited <= Duration::from_secs(1), "poked after {waited:?}");
    let mut probe = Mirror {
        cursor: Some(data["cursor"].as_str().expect("cursor").to_owned()),
        ..Mirror::default()
    };
    probe.catch_up(&s, &gina, 1000).await;
    assert!(
        probe.get("order", globex_order).is_none(),
        "globex's desk was poked for acme's commit"
    );
    globex_desk.pull(&s, &gina, 1000).await;
    assert_eq!(
        globex_desk.get("order", globex_order).expect("order").0,
        version
    );
    assert!(globex_desk.get("order", acme_order).is_none());

    // Without a token there is no stream.
    let resp = s
        .http
        .get(s.url("/v1/sync/stream"))
        .send()
        .await
        .expect("send");
    let (status, body) = common::read(resp).await;
    assert_problem(status, &body, 401, "unauthorized");
}

/// API.md: a comment line at least every 15 s, so proxies keep the stream
/// open and a desk notices a dead one.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn stream_sends_a_heartbeat_comment(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let mut stream = EventStream::open(&s, &dana).await;
    // The stream says it is live at once, then keeps saying so.
    let opened = match stream.next_by(Instant::now() + PATIENCE).await {
        Some((at, SseItem::Comment(text))) => {
            assert_eq!(text, "subscribed");
            at
        }
        _ => panic!("the stream did not open with a comment"),
    };
    match stream.next_by(opened + Duration::from_secs(15)).await {
        Some((_, SseItem::Comment(_))) => {}
        Some((_, SseItem::Changed(_) | SseItem::Other(_))) => panic!("unexpected event"),
        None => panic!("no comment within 15 s"),
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn two_hundred_idle_streams_share_one_listen_connection(db: PgPool) {
    let s = std::sync::Arc::new(TestServer::start(db.clone()).await);
    let dana = s.login("acme", "dana@acme.test").await;
    let order = create_order(&s, &dana, "acme", "Austin Boutique").await;

    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let s = s.clone();
        let dana = dana.clone();
        opening.spawn(async move { EventStream::open(&s, &dana).await });
    }
    let mut streams = Vec::new();
    while let Some(stream) = opening.join_next().await {
        streams.push(stream.expect("open"));
    }
    assert_eq!(streams.len(), 200);

    // This database's backends: the pool (at most 5 in tests) and exactly one
    // of them LISTENing for changes, not one per desk. (The last statement
    // of the listener's connection stays its LISTEN while it idles; after a
    // reconnect it is `LISTEN "holdfast_changes";`.)
    let (listening, total): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where query like 'LISTEN \"holdfast_changes\"%'), count(*)
           from pg_stat_activity where datname = current_database()",
    )
    .fetch_one(&db)
    .await
    .expect("pg_stat_activity");
    assert_eq!(listening, 1);
    assert!(total <= 5, "{total} connections for 200 streams");

    let metrics = s
        .http
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let gauge: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("holdfast_sync_streams "))
        .expect("the holdfast_sync_streams gauge")
        .trim()
        .parse()
        .expect("number");
    assert!(gauge >= 200.0, "gauge {gauge}");

    // All of them still hear a commit.
    let (tx, _, _) = edit_in_open_tx(&db, demo::tenant_id("acme"), order, "to all").await;
    tx.commit().await.expect("commit");
    let deadline = Instant::now() + PATIENCE;
    for stream in &mut streams {
        stream.changed_by(deadline).await;
    }
}

/// The one LISTEN connection dies (here: terminated by an operator). A commit
/// made while it is gone is still announced, and the listener comes back.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_lost_listen_connection_loses_no_poke(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let tenant = demo::tenant_id("acme");
    let mut stream = EventStream::open(&s, &dana).await;
    let order = create_order(&s, &dana, "acme", "Austin Boutique").await;
    stream.changed_by(Instant::now() + PATIENCE).await;
    let mut desk = Mirror::default();
    desk.catch_up(&s, &dana, 1000).await;

    let listener_pid = || {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, i32>(
                "select pid from pg_stat_activity
                  where datname = current_database() and query like 'LISTEN \"holdfast_changes\"%'",
            )
            .fetch_optional(&db)
            .await
            .expect("pg_stat_activity")
        }
    };
    let old = listener_pid().await.expect("a listener");
    let killed: bool = sqlx::query_scalar("select pg_terminate_backend($1)")
        .bind(old)
        .fetch_one(&db)
        .await
        .expect("terminate");
    assert!(killed);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let alive: bool =
            sqlx::query_scalar("select exists (select 1 from pg_stat_activity where pid = $1)")
                .bind(old)
                .fetch_one(&db)
                .await
                .expect("pg_stat_activity");
        if !alive {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the listener's backend never died"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Committed as the listener reconnects: either the new connection hears
    // it, or the catch-all poke after a reconnect covers it (that path alone
    // is pinned down by a unit test in feed/notify.rs). Either way the desk
    // must hear of it.
    let (tx, _, version) = edit_in_open_tx(&db, tenant, order, "unheard").await;
    tx.commit().await.expect("commit");
    while desk.get("order", order).expect("order").0 < version {
        stream.changed_by(deadline).await;
        desk.pull(&s, &dana, 1000).await;
    }

    // A new LISTEN connection, and it hears the next commit.
    loop {
        if listener_pid().await.is_some_and(|pid| pid != old) {
            break;
        }
        assert!(Instant::now() < deadline, "the listener never came back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (tx, _, version) = edit_in_open_tx(&db, tenant, order, "heard").await;
    tx.commit().await.expect("commit");
    while desk.get("order", order).expect("order").0 < version {
        stream.changed_by(deadline).await;
        desk.pull(&s, &dana, 1000).await;
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn pull_is_tenant_scoped_and_checks_its_input(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let gina = s.login("globex", "gina@globex.test").await;
    let acme_order = create_order(&s, &dana, "acme", "Austin Boutique").await;

    let mut globex = Mirror::default();
    globex.catch_up(&s, &gina, 1000).await;
    let globex_skus: Vec<String> = {
        let mut ids: Vec<String> =
            sqlx::query_scalar::<_, Uuid>("select id from skus where tenant_id = $1")
                .bind(demo::tenant_id("globex"))
                .fetch_all(&db)
                .await
                .expect("skus")
                .into_iter()
                .map(|id| id.to_string())
                .collect();
        ids.sort();
        ids
    };
    assert!(!globex_skus.is_empty());
    assert_eq!(globex.ids("sku"), globex_skus);
    assert_eq!(
        globex.ids("customer"),
        [demo::customer_id("globex", "Globex Retail West").to_string()]
    );
    assert!(globex.ids("order").is_empty(), "acme's order leaked");

    // Acme keeps changing; once acme's desk sees it, globex's pull is empty.
    let (tx, xid, _) = edit_in_open_tx(&db, demo::tenant_id("acme"), acme_order, "acme only").await;
    tx.commit().await.expect("commit");
    wait_for_fence_past(&db, xid).await;
    let mut acme = Mirror::default();
    acme.catch_up(&s, &dana, 1000).await;
    assert_eq!(acme.get("order", acme_order).expect("order").0, 2);
    let page = globex.pull(&s, &gina, 1000).await;
    assert_eq!(page["changes"], json!([]), "{page}");
    // Even acme's cursor shows globex only globex.
    let acme_cursor = acme.cursor.clone().expect("cursor");
    let mut borrowed = Mirror {
        cursor: Some(acme_cursor),
        ..Mirror::default()
    };
    let page = borrowed.pull(&s, &gina, 1000).await;
    assert_eq!(page["changes"], json!([]), "{page}");

    // Input checks.
    for path in [
        "/v1/sync/pull?limit=1001",
        "/v1/sync/pull?limit=0",
        "/v1/sync/pull?cursor=not-ours",
        "/v1/sync/pull?after=x",
    ] {
        let (status, body) = s.get(path, &dana).await;
        assert_problem(status, &body, 400, "validation_failed");
    }
    let (status, body) = s.get("/v1/sync/pull?limit=1000", &dana).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = s.call(Method::GET, "/v1/sync/pull", None, None).await;
    assert_problem(status, &body, 401, "unauthorized");

    let (_, doc) = s.call(Method::GET, "/openapi.json", None, None).await;
    for path in ["/v1/sync/pull", "/v1/sync/stream"] {
        assert!(
            doc["paths"][path]["get"].is_object(),
            "openapi lacks {path}"
        );
    }
}

/// Compaction deletes every superseded change row, and a cursor cut before it
/// ran still brings the desk to the final state: no cursor goes stale.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn compaction_keeps_one_row_per_document_and_old_cursors_work(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let tenant = demo::tenant_id("acme");
    let a = create_order(&s, &dana, "acme", "Austin Boutique").await;
    let b = create_order(&s, &dana, "acme", "Tokyo Distributor").await;
    let mut early = Mirror::default();
    early.catch_up(&s, &dana, 1000).await;

    // a: v2, v3; b: v2; a: v4, v5 — five rows on top of the two creations.
    let mut last_xid = 0;
    for (order, notes) in [(a, "a2"), (a, "a3"), (b, "b2"), (a, "a4"), (a, "a5")] {
        let (tx, xid, _) = edit_in_open_tx(&db, tenant, order, notes).await;
        tx.commit().await.expect("commit");
        last_xid = xid;
    }
    wait_for_fence_past(&db, last_xid).await;
    // A desk part-way: it has served a's v2 row and stops there.
    let mut midway = Mirror {
        cursor: early.cursor.clone(),
        ..Mirror::default()
    };
    let page = midway.pull(&s, &dana, 1).await;
    assert_eq!(page["has_more"], true);

    let rows = |db: PgPool| async move {
        sqlx::query_as::<_, (String, Uuid, i64)>(
            "select kind, doc_id, count(*) from changes where tenant_id = $1 group by 1, 2",
        )
        .bind(tenant)
        .fetch_all(&db)
        .await
        .expect("rows")
    };
    assert!(rows(db.clone()).await.iter().any(|(_, _, n)| *n > 1));

    // The server compacts in the background too; whichever gets there, every
    // document ends with one row.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let step = holdfast_server::feed::compact::step(&db, tenant, 1000)
            .await
            .expect("compact");
        if step.is_some_and(|st| st.examined == 0) {
            break;
        }
        assert!(Instant::now() < deadline, "compaction never finished");
    }
    let left = rows(db.clone()).await;
    assert!(left.iter().all(|(_, _, n)| *n == 1), "{left:?}");
    assert!(left.iter().any(|(_, id, _)| *id == a));

    // Both old cursors still work and end at the final versions.
    for desk in [&mut early, &mut midway] {
        desk.catch_up(&s, &dana, 1).await;
        assert_eq!(desk.get("order", a).expect("a").1["notes"], "a5");
        assert_eq!(desk.get("order", a).expect("a").0, 5);
        assert_eq!(desk.get("order", b).expect("b").1["notes"], "b2");
    }

    // And the feed goes on after compaction.
    let (tx, xid, _) = edit_in_open_tx(&db, tenant, b, "b3").await;
    tx.commit().await.expect("commit");
    wait_for_fence_past(&db, xid).await;
    early.catch_up(&s, &dana, 1000).await;
    assert_eq!(early.get("order", b).expect("b").1["notes"], "b3");
}
