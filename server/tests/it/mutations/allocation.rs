//! Allocation, compare-and-swap and the credit check: racing desks never
//! oversell or overspend, a stale base version gets the current document,
//! cancel releases everything, and an allocation answers what a read returns.

use std::sync::Arc;

use holdfast_server::demo;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use super::{allocate_path, order_with_line, position};
use crate::support::audit::{assert_ledgers_match_positions, assert_one_history_entry_per_version};
use crate::support::{assert_problem, kestrel_m, key, TestServer, MIGRATIONS};

#[sqlx::test(migrator = "MIGRATIONS")]
async fn two_desks_race_for_the_last_six(db: PgPool) {
    let s = Arc::new(TestServer::start(db.clone()).await);
    let dana = s.login("acme", "dana@acme.test").await;
    let priya = s.login("acme", "priya@acme.test").await;
    let (o1, l1, _) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 6).await;
    let (o2, l2, _) = order_with_line(&s, &priya, "Tokyo Distributor", kestrel_m(), 6).await;

    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let race = |token: String, order: Uuid, line: Uuid| {
        let s = s.clone();
        let barrier = barrier.clone();
        tokio::spawn(async move {
            barrier.wait().await;
            s.post(
                &token,
                &allocate_path(order, line),
                &key(),
                json!({"qty": 6}),
            )
            .await
        })
    };
    let a = race(dana, o1, l1);
    let b = race(priya, o2, l2);
    let (a, b) = (a.await.expect("a"), b.await.expect("b"));
    let mut statuses = [a.status.as_u16(), b.status.as_u16()];
    statuses.sort();
    assert_eq!(statuses, [200, 422]);
    let loser = if a.status == StatusCode::OK {
        b.json()
    } else {
        a.json()
    };
    assert_problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        &loser,
        422,
        "insufficient_ats",
    );
    assert_eq!(loser["ats_available"], 0);
    assert_eq!(loser["requested"], 6);
    let winner = if a.status == StatusCode::OK {
        a.json()
    } else {
        b.json()
    };
    assert_eq!(winner["ats_after"], 0);
    assert_eq!(position(&db, kestrel_m()).await, (6, 0, 6));
    assert_ledgers_match_positions(&db).await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn thirty_two_allocators_never_oversell(db: PgPool) {
    let s = Arc::new(TestServer::start(db.clone()).await);
    // The acme SKU with the most stock, so the storm lasts.
    let sku: Uuid = sqlx::query_scalar(
        "select p.sku_id from sku_positions p where p.tenant_id = $1
          order by p.on_hand + p.on_order - p.allocated desc limit 1",
    )
    .bind(demo::tenant_id("acme"))
    .fetch_one(&db)
    .await
    .expect("sku");
    let (on_hand, on_order, allocated) = position(&db, sku).await;
    let start_ats = on_hand + on_order - allocated;
    assert!(
        start_ats > 32,
        "fixture SKU should have stock for the storm, has {start_ats}"
    );
    let token = s.login("acme", "dana@acme.test").await;

    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (order, line, _) = order_with_line(&s, &token, "Tokyo Distributor", sku, 1000).await;
        let s = s.clone();
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = 0;
            loop {
                let r = s
                    .post(
                        &token,
                        &allocate_path(order, line),
                        &key(),
                        json!({"qty": 1}),
                    )
                    .await;
                match r.status.as_u16() {
                    200 => got += 1,
                    422 => {
                        assert_eq!(r.json()["code"], "insufficient_ats");
                        return got;
                    }
                    other => panic!("unexpected {other}: {}", r.json()),
                }
            }
        }));
    }
    let mut successes = 0;
    for t in tasks {
        successes += t.await.expect("task");
    }
    assert_eq!(successes, start_ats, "every unit sold exactly once");
    let (on_hand, on_order, allocated) = position(&db, sku).await;
    assert_eq!(allocated, on_hand + on_order);
    assert_ledgers_match_positions(&db).await;
    assert_one_history_entry_per_version(&db).await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn stale_base_version_gets_the_whole_current_document(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let priya = s.login("acme", "priya@acme.test").await;
    let (order, _, v) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 2).await;
    let path = format!("/v1/orders/{order}");
    let r = s
        .mutate(
            &priya,
            Method::PATCH,
            &path,
            &key(),
            &json!({"base_version": v, "set": {"customer_po": "PRIYA-1"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let theirs = r.json();

    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &path,
            &key(),
            &json!({"base_version": v, "set": {"customer_po": "DANA-1"}}),
        )
        .await;
    let problem = r.json();
    assert_problem(r.status, &problem, 409, "version_conflict");
    assert_eq!(problem["your_base_version"], v);
    assert_eq!(problem["current"], theirs, "the whole current order");
    assert_eq!(problem["current"]["updated_by_name"], "Priya Raman");
    let (_, now) = s.get(&path, &dana).await;
    assert_eq!(now, theirs, "the rejected change bumped nothing");

    // A create whose id exists under another key: never a second order.
    let r = s
        .post(
            &dana,
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": demo::customer_id("acme", "Tokyo Distributor")}),
        )
        .await;
    assert_problem(r.status, &r.json(), 409, "version_conflict");
    assert_eq!(r.json()["your_base_version"], 0);
    assert_eq!(
        r.json()["current"]["customer_id"],
        demo::customer_id("acme", "Austin Boutique").to_string()
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn concurrent_confirms_never_exceed_the_credit_limit(db: PgPool) {
    let s = Arc::new(TestServer::start(db.clone()).await);
    let dana = s.login("acme", "dana@acme.test").await;
    let priya = s.login("acme", "priya@acme.test").await;
    // Two orders of $3,000 each for a $5,000 customer: either fits, not both.
    let sku = demo::sku_id("acme", "Tern Rain Shell", "Ecru", "S"); // $96 wholesale
    let (o1, _, v1) = order_with_line(&s, &dana, "Austin Boutique", sku, 31).await;
    let (o2, _, v2) = order_with_line(&s, &priya, "Austin Boutique", sku, 31).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let go = |token: String, order: Uuid, v: i64| {
        let (s, barrier) = (s.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            s.post(
                &token,
                &format!("/v1/orders/{order}/confirm"),
                &key(),
                json!({"base_version": v}),
            )
            .await
        })
    };
    let (a, b) = (go(dana.clone(), o1, v1), go(priya, o2, v2));
    let (a, b) = (a.await.expect("a"), b.await.expect("b"));
    let mut statuses = [a.status.as_u16(), b.status.as_u16()];
    statuses.sort();
    assert_eq!(statuses, [200, 422], "{} / {}", a.json(), b.json());
    let (winner, loser) = if a.status == StatusCode::OK {
        (a.json(), b.json())
    } else {
        (b.json(), a.json())
    };
    assert_eq!(loser["code"], "credit_limit_exceeded");
    assert_eq!(loser["open_amount"], 31 * 9600);
    assert_eq!(winner["status"], "confirmed");
    let invoice = winner["invoice_id"].as_str().expect("invoice id");
    let (status, inv) = s.get(&format!("/v1/invoices/{invoice}"), &dana).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(inv["amount"], 31 * 9600);
    assert_eq!(inv["status"], "awaiting_payment");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn cancel_releases_everything_and_events_are_gap_free(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let (order, line, _) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 5).await;
    let r = s
        .post(
            &dana,
            &allocate_path(order, line),
            &key(),
            json!({"qty": 3}),
        )
        .await;
    let v = r.json()["order"]["version"].as_i64().expect("v");
    assert_eq!(v, 3, "create 1, line 2, allocate 3");
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/lines/{line}/release"),
            &key(),
            json!({"qty": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["ats_after"], 4);
    let v = r.json()["order"]["version"].as_i64().expect("v");
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/cancel"),
            &key(),
            json!({"base_version": v}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["status"], "cancelled");
    assert_eq!(r.json()["lines"][0]["qty_allocated"], 0);
    assert_eq!(position(&db, kestrel_m()).await.2, 0);
    assert_ledgers_match_positions(&db).await;

    let events: Vec<(String, i64, Value)> = sqlx::query_as(
        "select event_type, sequence, payload from outbox where aggregate_id = $1 order by sequence",
    )
    .bind(order)
    .fetch_all(&db)
    .await
    .expect("events");
    let types: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        types,
        [
            "order.created",
            "order.updated",
            "order.line_allocated",
            "order.line_released",
            "order.cancelled"
        ]
    );
    for (i, (_, seq, payload)) in events.iter().enumerate() {
        assert_eq!(*seq, i as i64 + 1, "gap-free from 1");
        assert_eq!(payload["data"]["sequence"], *seq);
        assert_eq!(payload["data"]["order_id"], order.to_string());
        assert_eq!(
            payload["data"]["version"], *seq,
            "one event per version here"
        );
    }
    let changes: i64 = sqlx::query_scalar("select count(*) from changes where doc_id = $1")
        .bind(order)
        .fetch_one(&db)
        .await
        .expect("n");
    assert_eq!(changes, 5, "one change row per committed order change");
}

/// Allocation answers with a document it builds from the statements it ran
/// (no re-read): it must be exactly what a read returns afterwards, down to
/// who changed it last, and its events must be the ones `enqueue_in_tx`
/// builds. A shortfall writes nothing at all.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn allocation_answers_the_document_a_read_returns(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let priya = s.login("acme", "priya@acme.test").await;
    let other_sku = demo::sku_id("acme", "Tern Rain Shell", "Ecru", "S");
    let (order, line, v) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 5).await;
    let second = Uuid::now_v7();
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/lines"),
            &key(),
            json!({"id": second, "sku_id": other_sku, "qty_ordered": 3, "base_version": v}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &format!("/v1/orders/{order}"),
            &key(),
            &json!({"base_version": v + 1, "set": {"customer_po": "PO-7", "notes": "rush",
                    "ship_window_start": "2027-01-04", "ship_window_end": "2027-01-08"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());

    let (_, _, allocated_before) = position(&db, kestrel_m()).await;
    let r = s
        .post(
            &priya,
            &allocate_path(order, line),
            &key(),
            json!({"qty": 2}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let (status, read) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        r.json()["order"],
        read,
        "the answer is the document as read"
    );
    assert_eq!(read["updated_by_name"], "Priya Raman");
    assert_eq!(read["version"], v + 3);
    assert_eq!(read["lines"][0]["qty_allocated"], 2);
    assert_eq!(read["lines"][1]["qty_allocated"], 0);
    let (on_hand, on_order, allocated) = position(&db, kestrel_m()).await;
    assert_eq!(allocated, allocated_before + 2);
    assert_eq!(r.json()["ats_after"], on_hand + on_order - allocated);

    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/lines/{line}/release"),
            &key(),
            json!({"qty": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let (_, read) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(r.json()["order"], read);
    assert_eq!(read["updated_by_name"], "Dana Whitfield");
    assert_eq!(read["lines"][0]["qty_allocated"], 1);
    assert_ledgers_match_positions(&db).await;

    // The events, as enqueue_in_tx would have written them.
    let events: Vec<(String, String, i64, Value)> = sqlx::query_as(
        "select event_type, aggregate_kind, sequence, payload from outbox
          where aggregate_id = any($1) and event_type in
                ('order.line_allocated', 'order.line_released', 'sku.ats_changed')
          order by id",
    )
    .bind(vec![order, kestrel_m()])
    .fetch_all(&db)
    .await
    .expect("events");
    let tenant = demo::tenant_id("acme").to_string();
    let mine: Vec<&(String, String, i64, Value)> = events
        .iter()
        .filter(|e| e.1 == "order" || e.3["data"]["sku_id"] == kestrel_m().to_string())
        .collect();
    let types: Vec<&str> = mine.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        types[types.len() - 4..],
        [
            "sku.ats_changed",
            "order.line_allocated",
            "sku.ats_changed",
            "order.line_released"
        ]
    );
    for (event_type, kind, seq, payload) in &mine[mine.len() - 4..] {
        assert_eq!(payload["type"], event_type.as_str());
        let stamp = payload["timestamp"].as_str().expect("timestamp");
        assert!(
            chrono::DateTime::parse_from_rfc3339(stamp).is_ok() && stamp.len() == 24,
            "{stamp}"
        );
        let data = payload["data"].as_object().expect("data");
        assert_eq!(data["tenant_id"], tenant.as_str());
        assert_eq!(data["sequence"], *seq);
        let mut keys: Vec<&str> = data.keys().map(String::as_str).collect();
        keys.sort_unstable();
        if kind == "order" {
            assert_eq!(
                keys,
                [
                    "ats_after",
                    "line_id",
                    "order_id",
                    "qty",
                    "sequence",
                    "sku_id",
                    "tenant_id",
                    "version"
                ]
            );
            assert_eq!(data["line_id"], line.to_string());
            assert_eq!(data["order_id"], order.to_string());
        } else {
            assert_eq!(keys, ["ats", "sequence", "sku_id", "tenant_id", "version"]);
        }
    }
    let released = &mine[mine.len() - 1].3["data"];
    assert_eq!(
        released["qty"], 1,
        "the event reports the quantity, not the delta"
    );
    assert_eq!(released["version"], v + 4);

    // Not enough stock: 422 with the ATS now, and nothing else written.
    let counts = |db: PgPool| async move {
        sqlx::query_as::<_, (i64, i64, i64, i64)>(
            "select (select count(*) from outbox), (select count(*) from changes),
                    (select count(*) from allocation_ledger), (select version from orders where id = $1)",
        )
        .bind(order)
        .fetch_one(&db)
        .await
        .expect("counts")
    };
    let before = counts(db.clone()).await;
    let (on_hand, on_order, allocated) = position(&db, other_sku).await;
    let ats = on_hand + on_order - allocated;
    sqlx::query("update sku_positions set on_hand = allocated, on_order = 0 where sku_id = $1")
        .bind(other_sku)
        .execute(&db)
        .await
        .expect("drain");
    let r = s
        .post(
            &dana,
            &allocate_path(order, second),
            &key(),
            json!({"qty": 1}),
        )
        .await;
    assert_problem(r.status, &r.json(), 422, "insufficient_ats");
    assert_eq!(r.json()["ats_available"], 0);
    assert_eq!(
        counts(db.clone()).await,
        before,
        "a shortfall writes nothing"
    );
    assert!(ats > 0, "the SKU had stock before it was drained");
}

/// Issue 15, item 1: a quantity near i64::MAX on a line that already holds
/// some overflowed `qty_allocated + qty` (a debug build panicked and dropped
/// the connection). Now a clear 422 over_allocation, and nothing moved.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_huge_allocation_on_a_line_that_holds_some_is_refused_in_words(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let (order, line, _) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 4).await;
    let first = s
        .post(
            &dana,
            &allocate_path(order, line),
            &key(),
            json!({"qty": 1}),
        )
        .await;
    assert_eq!(first.status, StatusCode::OK);
    let before = position(&db, kestrel_m()).await;
    for qty in [i64::MAX, i64::MAX - 1, (1i64 << 53) + 1] {
        let r = s
            .post(
                &dana,
                &allocate_path(order, line),
                &key(),
                json!({"qty": qty}),
            )
            .await;
        assert_problem(r.status, &r.json(), 422, "over_allocation");
        assert_eq!(r.json()["qty_allocated"], 1, "{qty}");
    }
    assert_eq!(position(&db, kestrel_m()).await, before, "nothing moved");
    assert_ledgers_match_positions(&db).await;
}
