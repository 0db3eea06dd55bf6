//! Upgrading a real store: `tests/fixtures/store-v5-acts-schema2.db` is a
//! desk's SQLite file as the app of commit 2dba3cf left it — store schema
//! (`user_version`) 5, every pending act in envelope schema 2, one act
//! held by a conflict, one by a rejection, and acts of every kind queued
//! while the server was down. The test opens a copy with this build (its
//! migrations and upcasters run on open) and checks that everything pending
//! lands on the server exactly once.
//!
//! `write_the_fixture` is how the file was made, kept so it can be read and
//! reproduced; it never overwrites a fixture (see `tests/fixtures/README.md`:
//! the file's point is to be an *old* app's file).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use holdfast_client::act::{self, Act};
use holdfast_client::store::{self, pending};
use holdfast_client::token::MemoryTokens;
use holdfast_client::{Choice, Engine, NewOrder, RejectionChoice, Resolution};
use holdfast_protocol::model::{Order, OrderHeaderSet, OrderStatus};
use holdfast_server::demo;
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;
use support::*;
use uuid::Uuid;

/// The committed fixture and the shape it must have before this build
/// touches it.
const FIXTURE: &str = "store-v5-acts-schema2.db";
const FIXTURE_USER_VERSION: u32 = 5;
const FIXTURE_ACT_SCHEMA: u32 = 2;
/// Its pending rows: the conflicting act, the rejected one, and 16 queued
/// (one blocked behind the conflict while online, 15 made offline).
const FIXTURE_CONFLICTS: usize = 1;
const FIXTURE_REJECTED: usize = 1;
const FIXTURE_QUEUED: usize = 16;

/// Set to 1 to (re)write a fixture that does not exist yet.
const WRITE_ENV: &str = "HOLDFAST_WRITE_STORE_FIXTURE";

/// The desk's user.
const DANA: &str = "dana@acme.test";
/// The colleague whose orders and change the server holds.
const PRIYA: &str = "priya@acme.test";

// Orders the server held before the desk's queue was written, with fixed
// ids and keys so a fresh server can be given the same history.
/// Priya's order that Dana's desk edited from an old version: the conflict.
const ORDER_C: Uuid = Uuid::from_u128(0x01955e00_0000_7000_8000_00000000c001);
const LINE_C: Uuid = Uuid::from_u128(0x01955e00_0000_7000_8000_00000000c011);
/// Priya's order on which the desk asked for more stock than there was.
const ORDER_R: Uuid = Uuid::from_u128(0x01955e00_0000_7000_8000_00000000e001);
const LINE_R: Uuid = Uuid::from_u128(0x01955e00_0000_7000_8000_00000000e011);
/// The keys Priya's requests were made under, in the order made.
const KEYS_C: [&str; 3] = [
    "store-fixture/c/create",
    "store-fixture/c/line",
    "store-fixture/c/notes",
];
const KEYS_R: [&str; 2] = ["store-fixture/r/create", "store-fixture/r/line"];

const DANAS_NOTES: &str = "dana: deliver to the back door";
const PRIYAS_NOTES: &str = "priya: ship by sea";

fn sku(style: &str, color: &str, size: &str) -> Uuid {
    demo::sku_id("acme", style, color, size)
}

/// The SKU on order C's line (every demo SKU has at least 5 on hand).
fn swift_ecru_m() -> Uuid {
    sku("Swift Tee", "Ecru", "M")
}

fn notes(text: &str) -> OrderHeaderSet {
    OrderHeaderSet {
        notes: Some(Some(text.to_owned())),
        ..Default::default()
    }
}

fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
        .join(FIXTURE)
}

/// One of Priya's requests over the REST API under a fixed key; the order
/// it answers.
async fn as_priya(
    server: &Server,
    token: &str,
    method: Method,
    path: &str,
    key: &str,
    body: Value,
) -> Order {
    let resp = reqwest::Client::new()
        .request(method.clone(), format!("{}{path}", server.url()))
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .json(&body)
        .send()
        .await
        .expect("priya's request");
    let status = resp.status();
    let text = resp.text().await.expect("answer");
    assert!(status.is_success(), "{method} {path}: {status} {text}");
    serde_json::from_str(&text).expect("an order")
}

// The server-side history the fixture's acts were made against. The
// generator runs the two steps with the desk's edits between them; the test
// runs both before the desk syncs. Same ids, same keys, same changes, so the
// fresh server holds what the old one did at the same versions.

/// Step 1: Priya enters orders C (one line of 4 Swift Tees) and R (one
/// line of 10 Kestrel Overshirts, of which 6 exist). Both at version 2.
async fn priyas_orders(server: &Server) {
    let token = server.token(PRIYA).await;
    for (order, line, sku, qty, po, keys) in [
        (ORDER_C, LINE_C, swift_ecru_m(), 4, "FX-C", &KEYS_C[..2]),
        (ORDER_R, LINE_R, kestrel_m(), 10, "FX-R", &KEYS_R[..]),
    ] {
        let created = as_priya(
            server,
            &token,
            Method::POST,
            "/v1/orders",
            keys[0],
            json!({"id": order, "customer_id": tokyo(), "customer_po": po}),
        )
        .await;
        assert_eq!(created.version, 1);
        let lined = as_priya(
            server,
            &token,
            Method::POST,
            &format!("/v1/orders/{order}/lines"),
            keys[1],
            json!({"id": line, "sku_id": sku, "qty_ordered": qty, "base_version": 1}),
        )
        .await;
        assert_eq!(lined.version, 2);
    }
}

/// Step 2: while Dana's desk edits C from version 2, Priya changes its
/// notes (version 3).
async fn priyas_change(server: &Server) {
    let token = server.token(PRIYA).await;
    let changed = as_priya(
        server,
        &token,
        Method::PATCH,
        &format!("/v1/orders/{ORDER_C}"),
        KEYS_C[2],
        json!({"base_version": 2, "set": {"notes": PRIYAS_NOTES}}),
    )
    .await;
    assert_eq!(changed.version, 3);
}

/// Writes the fixture with this build. Run it only to make a fixture for a
/// store or envelope schema that has none yet:
/// `HOLDFAST_WRITE_STORE_FIXTURE=1 cargo test -p holdfast-client --test
/// store_upgrade -- --ignored write_the_fixture`.
#[sqlx::test(migrations = "../migrations")]
#[ignore = "writes tests/fixtures/store-v<N>-acts-schema<M>.db; set HOLDFAST_WRITE_STORE_FIXTURE=1 and run with --ignored"]
async fn write_the_fixture(db: PgPool) {
    if std::env::var(WRITE_ENV).as_deref() != Ok("1") {
        eprintln!("write_the_fixture: skipped, {WRITE_ENV}=1 is not set; no fixture written");
        return;
    }
    let dir_out = fixture_path().parent().expect("fixtures dir").to_path_buf();
    let target = dir_out.join(format!(
        "store-v{}-acts-schema{}.db",
        store::schema_version(),
        act::SCHEMA
    ));
    assert!(
        !target.exists(),
        "{} exists: a fixture is an older app's file and is never rewritten by a later one",
        target.display()
    );

    let mut server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("desk.db");
    let desk =
        Engine::open(&path, Arc::new(MemoryTokens::default()), fast_config()).expect("open store");
    login(&desk, &server.url(), DANA).await;
    let reader = server.token(DANA).await;
    let mut pokes = server.pokes(&reader).await;

    // Online: the desk sees Priya's orders at version 2, then edits C from
    // there while Priya changes it, and asks for more Kestrels than exist.
    priyas_orders(&server).await;
    pull_until(&desk, &mut pokes, |d| {
        mirrored_version(d, ORDER_C) == 2 && mirrored_version(d, ORDER_R) == 2
    })
    .await;
    desk.edit_order(ORDER_C, notes(DANAS_NOTES))
        .expect("edit C");
    desk.allocate(ORDER_C, LINE_C, 2).expect("allocate on C");
    desk.allocate(ORDER_R, LINE_R, 8).expect("allocate on R");
    priyas_change(&server).await;
    let report = desk.sync_once().await.expect("sync");
    assert_eq!(
        (report.applied, report.conflicts, report.rejections),
        (0, 1, 1)
    );
    let statuses: Vec<(Uuid, pending::Status)> = desk
        .pending_rows()
        .expect("rows")
        .iter()
        .map(|r| (r.order_id, r.status))
        .collect();
    assert_eq!(
        statuses,
        [
            (ORDER_C, pending::Status::Conflict),
            (ORDER_C, pending::Status::Queued),
            (ORDER_R, pending::Status::Rejected),
        ],
        "the edit met Priya's change; the allocation behind it waits; R's was refused"
    );

    // Offline: acts of every kind on two new orders, and one more behind the
    // conflict and behind the rejection each.
    server.stop().await;
    let a = desk
        .create_order(NewOrder {
            customer_id: tokyo(),
            customer_po: Some("FX-A".into()),
            ..Default::default()
        })
        .expect("create A");
    let a1 = desk
        .add_line(a, sku("Osprey Crewneck", "Olive Drab", "L"), 5)
        .expect("line A1");
    let a2 = desk
        .add_line(a, sku("Plover Chino", "Charcoal", "S"), 3)
        .expect("line A2");
    desk.change_line(a, a1, 4).expect("change A1");
    desk.allocate(a, a1, 3).expect("allocate A1");
    desk.release(a, a1, 1).expect("release A1");
    desk.remove_line(a, a2).expect("remove A2");
    desk.edit_order(
        a,
        OrderHeaderSet {
            customer_po: Some(Some("FX-A-2".into())),
            notes: Some(Some("dana: confirmed by phone".into())),
            ..Default::default()
        },
    )
    .expect("edit A");
    desk.confirm(a).expect("confirm A");
    let b = desk
        .create_order(NewOrder {
            customer_id: tokyo(),
            customer_po: Some("FX-B".into()),
            ..Default::default()
        })
        .expect("create B");
    let b1 = desk
        .add_line(b, sku("Heron Work Pant", "Rust", "XL"), 2)
        .expect("line B1");
    desk.allocate(b, b1, 2).expect("allocate B1");
    desk.cancel(b).expect("cancel B");
    desk.edit_order(
        ORDER_C,
        OrderHeaderSet {
            customer_po: Some(Some("FX-C-DANA".into())),
            ..Default::default()
        },
    )
    .expect("edit C behind the conflict");
    desk.edit_order(ORDER_R, notes("dana: 6 now, rest later"))
        .expect("edit R behind the rejection");
    // The desk tried to sync and found the server gone, as it would.
    let offline = desk.sync_once().await.expect_err("the server is down");
    assert!(offline.is_offline(), "{offline}");
    let status = desk.status().expect("status");
    assert_eq!(
        (status.pending, status.conflicts, status.rejections),
        (
            (FIXTURE_CONFLICTS + FIXTURE_REJECTED + FIXTURE_QUEUED) as i64,
            FIXTURE_CONFLICTS,
            FIXTURE_REJECTED
        )
    );
    drop(desk);

    // One self-contained file: the WAL folded in, free pages dropped.
    let conn = rusqlite::Connection::open(&path).expect("reopen raw");
    conn.execute_batch("vacuum").expect("vacuum");
    conn.query_row("pragma wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    drop(conn);
    std::fs::create_dir_all(&dir_out).expect("fixtures dir");
    std::fs::copy(&path, &target).expect("write the fixture");
    let size = std::fs::metadata(&target).expect("fixture").len();
    eprintln!("wrote {} ({size} bytes)", target.display());
}

/// A pending row as the old app stored it, read without this build's code.
#[derive(Debug, Clone, PartialEq)]
struct RawRow {
    seq: i64,
    key: String,
    order_id: Uuid,
    schema: u32,
    method: String,
    path: String,
    body: Value,
    status: String,
}

fn raw_rows(conn: &rusqlite::Connection) -> Vec<RawRow> {
    let mut stmt = conn
        .prepare(
            "select seq, idempotency_key, order_id, schema_version, method, path, body, status
               from pending order by seq",
        )
        .expect("pending as the old app made it");
    stmt.query_map([], |r| {
        Ok(RawRow {
            seq: r.get(0)?,
            key: r.get(1)?,
            order_id: r.get::<_, String>(2)?.parse().expect("order id"),
            schema: r.get(3)?,
            method: r.get(4)?,
            path: r.get(5)?,
            body: serde_json::from_str(&r.get::<_, String>(6)?).expect("body"),
            status: r.get(7)?,
        })
    })
    .expect("rows")
    .collect::<Result<_, _>>()
    .expect("rows")
}

fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).expect(sql)
}

/// Sends `rows` to the server as the old app's push did, under their keys:
/// the server ran them, but the answers never reached the desk.
async fn lands_with_the_answer_lost(server: &Server, rows: &[&RawRow]) {
    let token = server.token(DANA).await;
    let mutations: Vec<Value> = rows
        .iter()
        .map(|r| json!({"idempotency_key": r.key, "method": r.method, "path": r.path, "body": r.body}))
        .collect();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/sync/push", server.url()))
        .bearer_auth(token)
        .json(&json!({ "mutations": mutations }))
        .send()
        .await
        .expect("push");
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.expect("results");
    let statuses: Vec<u64> = answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["status"].as_u64().expect("status"))
        .collect();
    assert!(statuses.iter().all(|s| (200..300).contains(s)), "{answer}");
}

/// Must show: a store written by an older app (its store schema and
/// envelope schema, with a conflict, a rejection and acts of every kind
/// queued offline) opens in this build, and once the user resolves what
/// needs a person, every act lands on the server exactly once and in order:
/// nothing lost, nothing doubled, nothing left, and a further sync sends
/// nothing.
#[sqlx::test(migrations = "../migrations")]
async fn an_old_apps_store_upgrades_and_everything_pending_lands_exactly_once(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("desk.db");
    // A copy: the committed file stays an old app's file.
    std::fs::copy(fixture_path(), &path).expect("copy the fixture");

    // Before this build opens it: the old shape, as generated.
    let conn = rusqlite::Connection::open(&path).expect("raw open");
    let version: u32 = conn
        .query_row("pragma user_version", [], |r| r.get(0))
        .expect("user_version");
    assert_eq!(version, FIXTURE_USER_VERSION);
    let raw = raw_rows(&conn);
    assert!(
        raw.iter().all(|r| r.schema == FIXTURE_ACT_SCHEMA),
        "every act in envelope schema {FIXTURE_ACT_SCHEMA}"
    );
    let with = |s: &str| raw.iter().filter(|r| r.status == s).count();
    assert_eq!(
        (with("conflict"), with("rejected"), with("queued")),
        (FIXTURE_CONFLICTS, FIXTURE_REJECTED, FIXTURE_QUEUED)
    );
    let conflicted = raw.iter().find(|r| r.status == "conflict").expect("one");
    let rejected = raw.iter().find(|r| r.status == "rejected").expect("one");
    assert_eq!((conflicted.order_id, rejected.order_id), (ORDER_C, ORDER_R));
    assert_eq!(
        count(&conn, "select count(*) from conflicts"),
        FIXTURE_CONFLICTS as i64
    );
    assert_eq!(
        count(&conn, "select count(*) from rejections"),
        FIXTURE_REJECTED as i64
    );
    // The desk simply moved to the server's new address: the old app kept
    // it in sync_state (this store's shape), and the test server listens on
    // a port of its own. The fresh database behind it has the same documents
    // but not the same feed positions (a cursor names transaction ids of the
    // cluster it came from), so the desk's next pull starts over, as after
    // any change of server; its mirrors and queue stay.
    conn.execute(
        "update sync_state set server_url = ?1, cursor = null where id = 1",
        [server.url()],
    )
    .expect("move the desk");
    drop(conn);

    // The server as it was: Priya's orders and her change to C.
    priyas_orders(&server).await;
    priyas_change(&server).await;
    // And the old app's first three acts on a new order reached it, though
    // the desk never heard: after the upgrade they must be sent with the
    // same keys and bytes, and be answered by replay, not run twice.
    let first_order = raw
        .iter()
        .find(|r| r.method == "POST" && r.path == "/v1/orders")
        .expect("a created order")
        .order_id;
    let landed: Vec<&RawRow> = raw
        .iter()
        .filter(|r| r.order_id == first_order)
        .take(3)
        .collect();
    lands_with_the_answer_lost(&server, &landed).await;

    // This build opens it: migrations and upcasters run.
    let desk = Engine::open(&path, Arc::new(MemoryTokens::default()), fast_config())
        .expect("an old store opens");
    let version: u32 = desk
        .store()
        .conn()
        .query_row("pragma user_version", [], |r| r.get(0))
        .expect("user_version");
    assert_eq!(version, store::schema_version(), "migrated to this build's");
    assert!(
        version > 5 && holdfast_client::act::SCHEMA > 2,
        "this build has a newer store and act schema than the fixture's, or the test proves nothing"
    );
    assert!(
        desk.held().expect("held").is_empty(),
        "no old row or document is left unread"
    );
    let upgraded = desk.pending_rows().expect("every old row reads");
    assert!(
        upgraded.iter().all(|r| r.queued_by.is_none()),
        "schema 2 never named the app that queued an act"
    );
    assert_eq!(
        upgraded
            .iter()
            .map(|r| (r.seq, r.key.clone(), r.order_id))
            .collect::<Vec<_>>(),
        raw.iter()
            .map(|r| (r.seq, r.key.clone(), r.order_id))
            .collect::<Vec<_>>(),
        "the same acts, same keys, same order"
    );
    for (row, old) in upgraded.iter().zip(&raw) {
        let frozen = (old.method.as_str(), old.path.as_str(), &old.body);
        let request = &row.request;
        assert_eq!(
            (
                request.method.as_str(),
                request.path.as_str(),
                &request.body
            ),
            frozen,
            "row {}: the request bound to its key is unchanged",
            row.seq
        );
        let asks = row.act.request();
        assert_eq!(
            (asks.method.as_str(), asks.path.as_str(), &asks.body),
            frozen,
            "row {}: the upcast act is what the frozen request asks",
            row.seq
        );
    }
    let kinds: std::collections::BTreeSet<&str> = upgraded.iter().map(|r| r.act.kind()).collect();
    assert_eq!(kinds.len(), 9, "acts of every kind: {kinds:?}");

    // The orders the desk created offline, with their acts (keys) in order.
    let created: Vec<Uuid> = upgraded
        .iter()
        .filter(|r| matches!(r.act, Act::CreateOrder { .. }))
        .map(|r| r.order_id)
        .collect();
    assert_eq!(created.len(), 2);
    let mut want: BTreeMap<Uuid, Vec<String>> = created
        .iter()
        .map(|o| {
            let keys = upgraded
                .iter()
                .filter(|r| r.order_id == *o)
                .map(|r| r.key.clone())
                .collect();
            (*o, keys)
        })
        .collect();

    // The same user signs in again (on the desk's server, so the queue stays).
    desk.login(
        &server.url(),
        "acme",
        DANA,
        demo::DEMO_PASSWORD,
        "test desk",
        false,
    )
    .await
    .expect("login");
    let report = desk.sync_once().await.expect("first sync");
    assert_eq!(
        (report.applied, report.conflicts, report.rejections),
        (want.values().map(Vec::len).sum(), 0, 0),
        "the new orders go; C and R wait for Dana"
    );
    assert_eq!(report.replayed, landed.len(), "what had landed is replayed");
    let status = desk.status().expect("status");
    assert_eq!((status.conflicts, status.rejections), (1, 1));

    // Dana keeps her notes on C; on R she takes the 6 that exist.
    let conflict = desk.conflict(ORDER_C).expect("conflict").expect("open");
    assert_eq!(conflict.changed_by, "Priya Raman");
    assert_eq!(
        (conflict.your_base_version, conflict.current_version),
        (2, 3)
    );
    let collides: Vec<&str> = conflict
        .fields
        .iter()
        .filter(|f| f.collides)
        .map(|f| f.field.as_str())
        .collect();
    assert_eq!(collides, ["notes"]);
    desk.resolve_conflict(
        ORDER_C,
        &Resolution::Choose(BTreeMap::from([("notes".to_owned(), Choice::Mine)])),
    )
    .expect("keep mine");
    let rejection = desk
        .rejections()
        .expect("rejections")
        .into_iter()
        .next()
        .expect("one");
    assert_eq!(rejection.order_id, ORDER_R);
    let reduce = rejection
        .choices
        .iter()
        .find(|c| matches!(c, RejectionChoice::ReduceToAts { .. }))
        .expect("reduce is offered")
        .clone();
    assert_eq!(reduce, RejectionChoice::ReduceToAts { qty: 6 });
    desk.resolve_rejection(rejection.id, &reduce)
        .expect("reduce");

    // What must land on C and R now: Priya's history, then the desk's
    // re-queued acts (new keys where resolving changed the request).
    let requeued = desk.pending_rows().expect("rows");
    assert!(requeued
        .iter()
        .all(|r| r.status == pending::Status::Queued && [ORDER_C, ORDER_R].contains(&r.order_id)));
    for (order, setup) in [(ORDER_C, &KEYS_C[..]), (ORDER_R, &KEYS_R[..])] {
        let mut keys: Vec<String> = setup.iter().map(|k| (*k).to_owned()).collect();
        keys.extend(
            requeued
                .iter()
                .filter(|r| r.order_id == order)
                .map(|r| r.key.clone()),
        );
        want.insert(order, keys);
    }
    sync_until_settled(&desk, 10).await;

    // Exactly once: each order's history on the server is, version by
    // version, the keys that should have made it — no act missing, none
    // twice, none out of order.
    let token = server.token(DANA).await;
    let mut versions = BTreeMap::new();
    for (order, keys) in &want {
        let history = desk.order_history(*order).await.expect("history");
        let made: Vec<(i64, Option<&str>)> = history
            .entries
            .iter()
            .map(|e| (e.version, e.idempotency_key.as_deref()))
            .collect();
        let expected: Vec<(i64, Option<&str>)> = keys
            .iter()
            .zip(1..)
            .map(|(k, v)| (v, Some(k.as_str())))
            .collect();
        assert_eq!(made, expected, "order {order}: one version per act");
        let doc = server.order(&token, *order).await;
        assert_eq!(doc.version, keys.len() as i64, "order {order}");
        let view = desk.order(*order).expect("view").expect("local");
        assert!(view.pending.is_empty(), "order {order}: nothing pending");
        assert_eq!(
            view.order, doc,
            "order {order}: the desk shows the server's"
        );
        versions.insert(*order, doc.version);
    }
    // Every allocation and release sent (the fixture's acts on A and B, the
    // re-queued ones on C and R) is one ledger row; positions = ledger.
    let sent = upgraded
        .iter()
        .filter(|r| created.contains(&r.order_id))
        .map(|r| (&r.key, &r.act))
        .chain(requeued.iter().map(|r| (&r.key, &r.act)));
    for (key, _) in
        sent.filter(|(_, act)| matches!(act, Act::Allocate { .. } | Act::Release { .. }))
    {
        let n: i64 =
            sqlx::query_scalar("select count(*) from allocation_ledger where idempotency_key = $1")
                .bind(key)
                .fetch_one(&server.db)
                .await
                .expect("ledger");
        assert_eq!(n, 1, "allocation {key} in the ledger exactly once");
    }
    let drift = holdfast_server::db::audit::ledger_mismatches(&server.db, None)
        .await
        .expect("positions");
    assert!(drift.is_empty(), "ledger sums equal positions: {drift:?}");

    // What the acts asked for, as the server has it.
    let (a, b) = (created[0], created[1]);
    let a_doc = server.order(&token, a).await;
    assert_eq!(a_doc.status, OrderStatus::Confirmed);
    assert!(a_doc.invoice_id.is_some(), "confirming invoiced A once");
    assert_eq!(
        a_doc
            .lines
            .iter()
            .map(|l| (l.qty_ordered, l.qty_allocated))
            .collect::<Vec<_>>(),
        [(4, 2)],
        "A: one line, 4 ordered, 3 allocated less 1 released"
    );
    let b_doc = server.order(&token, b).await;
    assert_eq!(b_doc.status, OrderStatus::Cancelled);
    assert_eq!(b_doc.lines.iter().map(|l| l.qty_allocated).sum::<i64>(), 0);
    let c_doc = server.order(&token, ORDER_C).await;
    assert_eq!(c_doc.notes.as_deref(), Some(DANAS_NOTES));
    assert_eq!(c_doc.customer_po.as_deref(), Some("FX-C-DANA"));
    assert_eq!(
        c_doc
            .lines
            .iter()
            .map(|l| (l.id, l.qty_allocated))
            .collect::<Vec<_>>(),
        [(LINE_C, 2)]
    );
    let r_doc = server.order(&token, ORDER_R).await;
    assert_eq!(
        r_doc
            .lines
            .iter()
            .map(|l| (l.id, l.qty_allocated))
            .collect::<Vec<_>>(),
        [(LINE_R, 6)]
    );
    assert_eq!(server.sku(&token, kestrel_m()).await.ats, 0);

    // Nothing left, and a further pass sends nothing and moves nothing.
    let status = desk.status().expect("status");
    assert_eq!(
        (status.pending, status.conflicts, status.rejections),
        (0, 0, 0)
    );
    let again = desk.sync_once().await.expect("sync again");
    assert_eq!((again.pushes, again.applied), (0, 0), "nothing to send");
    for (order, version) in &versions {
        assert_eq!(server.order(&token, *order).await.version, *version);
    }
}
