//! What a desk cannot read is kept, shown and never lost (issue 15 items
//! 12 and 13): a document a newer server sends in a shape this build does
//! not know, and a pending act this build cannot read. Real server, real
//! HTTP; the newer server is today's server behind a relay that gives one
//! order a status this build has never heard of.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use holdfast_client::engine::HeldKind;
use holdfast_client::token::MemoryTokens;
use holdfast_client::{Engine, NewOrder};
use holdfast_protocol::model::OrderHeaderSet;
use serde_json::Value;
use sqlx::PgPool;
use support::*;
use uuid::Uuid;

/// A newer server: today's, with one order's status in its pull answers
/// rewritten to one this build does not know ("on_hold"), while `newer` is
/// set. Everything else passes through unchanged.
#[derive(Clone)]
struct Newer {
    upstream: String,
    order: Arc<std::sync::Mutex<Option<Uuid>>>,
    newer: Arc<AtomicBool>,
    http: reqwest::Client,
}

async fn relay(
    State(n): State<Newer>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let url = format!("{}{}", n.upstream, uri);
    let mut req = n.http.request(method, &url).body(body);
    for (name, value) in &headers {
        if name != "host" && name != "content-length" {
            req = req.header(name, value);
        }
    }
    let Ok(resp) = req.send().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let status = resp.status();
    let content_type = resp.headers().get("content-type").cloned();
    let Ok(bytes) = resp.bytes().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let target = *n.order.lock().expect("lock");
    let bytes = match (uri.path(), target) {
        ("/v1/sync/pull", Some(order)) if n.newer.load(Ordering::SeqCst) => {
            let mut page: Value = serde_json::from_slice(&bytes).expect("a pull page");
            for change in page["changes"].as_array_mut().expect("changes") {
                if change["kind"] == "order" && change["id"] == order.to_string() {
                    change["data"]["status"] = "on_hold".into();
                }
            }
            serde_json::to_vec(&page).expect("json").into()
        }
        _ => bytes,
    };
    let mut out = (status, bytes).into_response();
    if let Some(ct) = content_type {
        out.headers_mut().insert("content-type", ct);
    }
    out
}

async fn newer_server(upstream: &str) -> (String, Newer) {
    let n = Newer {
        upstream: upstream.to_owned(),
        order: Arc::default(),
        newer: Arc::default(),
        http: reqwest::Client::new(),
    };
    let app = axum::Router::new().fallback(relay).with_state(n.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("relay") });
    (url, n)
}

/// Opens `name`'s store with `tokens`, so a reopened desk stays signed in
/// (the app keeps its token in the keychain, not in the store).
fn reopen(dir: &std::path::Path, name: &str, tokens: &Arc<MemoryTokens>) -> Engine {
    open_with(dir, name, fast_config(), tokens.clone())
}

/// Queues two new orders on `desk`: `a` for Austin Boutique with PO `po`,
/// `b` for Tokyo Distributor.
fn two_orders(desk: &Engine, po: &str) -> (Uuid, Uuid) {
    let a = desk
        .create_order(NewOrder {
            customer_id: austin(),
            customer_po: Some(po.into()),
            ..Default::default()
        })
        .expect("create a");
    let b = desk
        .create_order(NewOrder {
            customer_id: tokyo(),
            ..Default::default()
        })
        .expect("create b");
    (a, b)
}

fn notes(text: &str) -> OrderHeaderSet {
    OrderHeaderSet {
        notes: Some(Some(text.to_owned())),
        ..Default::default()
    }
}

/// Item 12. Before: the desk skipped the document with a warning while
/// its cursor moved on, so the order silently stayed at its old version
/// until it changed again.
#[sqlx::test(migrations = "../migrations")]
async fn a_document_a_newer_server_sends_is_kept_shown_and_never_lost(db: PgPool) {
    let server = Server::start(db).await;
    let (url, newer) = newer_server(&server.url()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = Arc::new(MemoryTokens::default());
    let dana = reopen(dir.path(), "dana", &tokens);
    let priya = open(dir.path(), "priya", fast_config());
    login(&dana, &url, "dana@acme.test").await;
    login(&priya, &server.url(), "priya@acme.test").await;
    let (a, b) = two_orders(&dana, "PO-4471");
    dana.sync_once().await.expect("sync");
    sync_until(&priya, |p| {
        mirrored_version(p, a) == 1 && mirrored_version(p, b) == 1
    })
    .await;

    // A colleague changes both; the newer server shows `a` as on hold.
    *newer.order.lock().expect("lock") = Some(a);
    newer.newer.store(true, Ordering::SeqCst);
    priya.edit_order(a, notes("call first")).expect("edit a");
    priya.edit_order(b, notes("dock 4")).expect("edit b");
    priya.sync_once().await.expect("priya sends");
    // A document it cannot read does not fail the pull.
    sync_until(&dana, |d| {
        mirrored_version(d, b) == 2 && d.held().expect("held").len() == 1
    })
    .await;

    let view_b = dana.order(b).expect("view").expect("b");
    assert_eq!(
        (view_b.order.version, view_b.order.notes.as_deref()),
        (2, Some("dock 4")),
        "the feed moved on: the other order arrived"
    );
    let view_a = dana.order(a).expect("view").expect("a");
    assert_eq!(
        view_a.order.version, 1,
        "the desk shows the last version it could read"
    );
    assert!(
        view_a.needs_newer_app,
        "and says the order needs a newer app"
    );
    let held = dana.held().expect("held");
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].kind, HeldKind::Document);
    assert_eq!(held[0].what, "Order for Austin Boutique, PO PO-4471");
    assert!(held[0].why.contains("Update Holdfast"), "{}", held[0].why);
    assert_eq!(held[0].order_id, Some(a));
    assert_eq!(dana.status().expect("status").held, 1);

    // Kept across a restart of the app, and whole: the export holds the
    // server's document as sent, unknown status and all.
    drop(dana);
    let dana = reopen(dir.path(), "dana", &tokens);
    assert_eq!(
        dana.held().expect("held").len(),
        1,
        "still kept after a restart"
    );
    let file = dir.path().join("held.json");
    assert_eq!(dana.export_held(&file).expect("export"), 1);
    let export: Value =
        serde_json::from_slice(&std::fs::read(&file).expect("read export")).expect("json");
    assert_eq!(export["documents"][0]["doc"]["status"], "on_hold");
    assert_eq!(export["documents"][0]["doc"]["notes"], "call first");
    assert_eq!(export["documents"][0]["version"], 2);

    // A later version this build can read replaces the kept one.
    newer.newer.store(false, Ordering::SeqCst);
    priya
        .edit_order(a, notes("call first, then ship"))
        .expect("edit a again");
    priya.sync_once().await.expect("priya sends");
    sync_until(&dana, |d| mirrored_version(d, a) == 3).await;
    let view_a = dana.order(a).expect("view").expect("a");
    assert_eq!(
        (view_a.order.version, view_a.order.notes.as_deref()),
        (3, Some("call first, then ship"))
    );
    assert!(!view_a.needs_newer_app);
    assert!(dana.held().expect("held").is_empty());
    assert_eq!(dana.status().expect("status").held, 0);
}

/// A build that reads a kept document applies it when it opens the store,
/// without waiting for the document to change again.
#[sqlx::test(migrations = "../migrations")]
async fn a_kept_document_is_applied_by_the_first_build_that_reads_it(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = Arc::new(MemoryTokens::default());
    let dana = reopen(dir.path(), "dana", &tokens);
    let priya = open(dir.path(), "priya", fast_config());
    login(&dana, &server.url(), "dana@acme.test").await;
    login(&priya, &server.url(), "priya@acme.test").await;
    let a = dana
        .create_order(NewOrder {
            customer_id: austin(),
            ..Default::default()
        })
        .expect("create");
    dana.sync_once().await.expect("sync");
    sync_until(&priya, |p| mirrored_version(p, a) == 1).await;
    priya.edit_order(a, notes("call first")).expect("edit");
    priya.sync_once().await.expect("priya sends");
    let token = server.token("priya@acme.test").await;
    let v2 = server.order(&token, a).await;

    // What an older build kept of version 2 (it did not know a field this
    // build reads): the document as the server sent it.
    dana.store()
        .write(|tx| {
            holdfast_client::store::unreadable::keep(
                tx,
                "order",
                a,
                2,
                &serde_json::to_value(&v2).expect("json"),
                "unknown field `total`",
                0,
            )
        })
        .expect("keep");
    drop(dana);
    let dana = reopen(dir.path(), "dana", &tokens);
    let view = dana.order(a).expect("view").expect("a");
    assert_eq!(
        (view.order.version, view.order.notes.as_deref()),
        (2, Some("call first")),
        "opening the store applied it"
    );
    assert!(dana.held().expect("held").is_empty());
}

/// Item 13. Before: one pending row that failed to upcast made every read
/// of the queue fail (`Corrupt`), so nothing synced at all.
#[sqlx::test(migrations = "../migrations")]
async fn an_act_this_build_cannot_read_is_quarantined_and_every_other_order_syncs(db: PgPool) {
    let server = Server::start(db).await;
    let token = server.token("dana@acme.test").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = Arc::new(MemoryTokens::default());
    let dana = reopen(dir.path(), "dana", &tokens);
    login(&dana, &server.url(), "dana@acme.test").await;
    let (a, b) = two_orders(&dana, "PO-9");
    dana.sync_once().await.expect("sync");

    let first_on_a = dana.edit_order(a, notes("first")).expect("edit a");
    dana.edit_order(b, notes("dock 4")).expect("edit b");
    dana.edit_order(a, notes("second")).expect("edit a again");
    // The first act on `a` as a newer app would have written it.
    let newer_schema = holdfast_client::act::SCHEMA + 1;
    let changed = dana
        .store()
        .conn()
        .execute(
            "update pending set schema_version = ?2, act = '{\"SetRush\":{}}'
              where idempotency_key = ?1",
            rusqlite::params![first_on_a, newer_schema],
        )
        .expect("rewrite");
    assert_eq!(changed, 1);

    let report = dana
        .sync_once()
        .await
        .expect("one unreadable act does not stop the queue");
    assert_eq!(report.applied, 1, "b's act went");
    assert_eq!(
        server.order(&token, b).await.notes.as_deref(),
        Some("dock 4")
    );
    let on_server = server.order(&token, a).await;
    assert_eq!(
        (on_server.version, on_server.notes),
        (1, None),
        "a's acts wait: the held one first, then the one behind it"
    );
    let held = dana.held().expect("held");
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].kind, HeldKind::Act);
    assert_eq!(
        held[0].what,
        "A change to order for Austin Boutique, PO PO-9"
    );
    assert!(
        held[0].why.contains("newer version of Holdfast"),
        "{}",
        held[0].why
    );
    let view_a = dana.order(a).expect("view").expect("a");
    assert!(view_a.needs_newer_app);
    assert_eq!(
        view_a.badge,
        holdfast_client::view::Badge::Pending,
        "an order with a held act is not synced"
    );
    let status = dana.status().expect("status");
    assert_eq!(
        (status.held, status.pending),
        (1, 2),
        "both of a's acts are still here"
    );

    // Exportable, whole: key, request and why.
    let file = dir.path().join("held.json");
    assert_eq!(dana.export_held(&file).expect("export"), 1);
    let export: Value =
        serde_json::from_slice(&std::fs::read(&file).expect("read export")).expect("json");
    let act = &export["acts"][0];
    assert_eq!(act["idempotency_key"], first_on_a.as_str());
    assert_eq!(act["schema_version"], newer_schema);
    assert_eq!(act["path"], format!("/v1/orders/{a}"));
    assert!(act["reason"]
        .as_str()
        .expect("reason")
        .contains(&format!("schema {newer_schema}")));

    // A build that reads it again (here: the row as this build wrote it)
    // takes it out of quarantine when it opens the store, and both acts
    // land once, in the user's order.
    dana.store()
        .conn()
        .execute(
            "update pending set schema_version = ?2, act = null where idempotency_key = ?1",
            rusqlite::params![first_on_a, holdfast_client::act::SCHEMA],
        )
        .expect("restore");
    drop(dana);
    let dana = reopen(dir.path(), "dana", &tokens);
    assert_eq!(
        dana.status().expect("status").held,
        1,
        "a current-schema row without its act is damaged"
    );
    dana.store()
        .conn()
        .execute(
            "update pending set schema_version = 1 where idempotency_key = ?1",
            [&first_on_a],
        )
        .expect("as an old app wrote it");
    drop(dana);
    let dana = reopen(dir.path(), "dana", &tokens);
    assert_eq!(dana.status().expect("status").held, 0, "readable now");
    dana.sync_once().await.expect("sync");
    dana.sync_once().await.expect("and again: nothing doubles");
    let on_server = server.order(&token, a).await;
    assert_eq!(
        (on_server.version, on_server.notes.as_deref()),
        (3, Some("second")),
        "each act once, the first before the second"
    );
    assert_eq!(dana.status().expect("status").pending, 0);

    // An order whose only change not on the server is held is not "synced".
    let held_on_b = dana.edit_order(b, notes("dock 5")).expect("edit b");
    dana.store()
        .conn()
        .execute(
            "update pending set schema_version = ?2 where idempotency_key = ?1",
            rusqlite::params![held_on_b, newer_schema],
        )
        .expect("as a newer app wrote it");
    dana.sync_once().await.expect("sync");
    let view_b = dana.order(b).expect("view").expect("b");
    assert!(view_b.needs_newer_app);
    assert_eq!(view_b.badge, holdfast_client::view::Badge::Pending);
    let row_b = dana
        .order_summaries()
        .expect("desk")
        .into_iter()
        .find(|s| s.order.id == b)
        .expect("b on the desk");
    assert_eq!(row_b.badge, holdfast_client::view::Badge::Pending);
}
