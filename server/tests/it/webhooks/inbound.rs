//! The inbox for providers: a redelivered event applies once, payments mark
//! invoices paid once, and adjustments respect allocations.

use std::collections::HashMap;
use std::sync::Arc;

use holdfast_server::demo;
use reqwest::StatusCode;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use super::{inbound_secret, send_inbound, signed};
use crate::support::{assert_problem, key, TestServer, MIGRATIONS};

async fn on_hand(db: &PgPool, sku: Uuid) -> i64 {
    sqlx::query_scalar("select on_hand from sku_positions where sku_id = $1")
        .bind(sku)
        .fetch_one(db)
        .await
        .expect("on_hand")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_redelivered_inbound_event_applies_once(db: PgPool) {
    let s = Arc::new(TestServer::start(db.clone()).await);
    let ops = s.login("acme", "ops@acme.test").await;
    let secret = inbound_secret(&s, &ops, "warehouse").await;
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let before = on_hand(&db, sku).await;
    let body =
        json!({"type": "inventory.received", "data": {"sku_id": sku, "qty": 12}}).to_string();
    let now = chrono::Utc::now().timestamp();

    let barrier = Arc::new(tokio::sync::Barrier::new(5));
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let (s, barrier, headers, body) = (
            s.clone(),
            barrier.clone(),
            signed(&secret, "wh_evt_1", now, &body),
            body.clone(),
        );
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            send_inbound(&s, "acme", "warehouse", headers, &body).await
        }));
    }
    let mut outcomes = HashMap::new();
    for t in tasks {
        let (status, body) = t.await.expect("task");
        assert_eq!(status, StatusCode::OK, "{body}");
        *outcomes
            .entry(body["status"].as_str().expect("status").to_owned())
            .or_insert(0) += 1;
    }
    assert_eq!(outcomes.get("processed"), Some(&1));
    assert_eq!(outcomes.get("duplicate"), Some(&4));
    assert_eq!(on_hand(&db, sku).await, before + 12);
    let ledger: i64 = sqlx::query_scalar(
        "select count(*) from inventory_ledger where source = 'warehouse:wh_evt_1'",
    )
    .fetch_one(&db)
    .await
    .expect("ledger");
    assert_eq!(ledger, 1);
    let announced: i64 = sqlx::query_scalar(
        "select count(*) from outbox where event_type = 'sku.ats_changed' and aggregate_id = $1",
    )
    .bind(sku)
    .fetch_one(&db)
    .await
    .expect("outbox");
    assert_eq!(announced, 1);

    // Forged, stale, and signed with another tenant's secret: 401, no effect.
    let globex_ops = {
        sqlx::query("update users set role = 'operator' where email = 'gina@globex.test'")
            .execute(&db)
            .await
            .expect("promote");
        s.login("globex", "gina@globex.test").await
    };
    let globex_secret = inbound_secret(&s, &globex_ops, "warehouse").await;
    let forged = signed(
        "whsec_Zm9yZ2VkLXNlY3JldC1mb3JnZWQtc2VjcmV0LTEyMw==",
        "wh_evt_2",
        now,
        &body,
    );
    let stale = signed(&secret, "wh_evt_3", now - 600, &body);
    let foreign = signed(&globex_secret, "wh_evt_4", now, &body);
    let mut tampered = signed(&secret, "wh_evt_5", now, &body);
    tampered.retain(|(n, _)| *n != "webhook-signature");
    for headers in [forged, stale, foreign, tampered] {
        let (status, problem) = send_inbound(&s, "acme", "warehouse", headers, &body).await;
        assert_problem(status, &problem, 401, "unauthorized");
    }
    assert_eq!(on_hand(&db, sku).await, before + 12, "nothing applied");
    let inbox: i64 = sqlx::query_scalar("select count(*) from inbox")
        .fetch_one(&db)
        .await
        .expect("inbox");
    assert_eq!(inbox, 1);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn payments_mark_invoices_paid_once_and_adjustments_respect_allocations(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let dana = s.login("acme", "dana@acme.test").await;
    let pay_secret = inbound_secret(&s, &ops, "payments").await;
    let wh_secret = inbound_secret(&s, &ops, "warehouse").await;
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");

    // An order for 4 of the 6, allocated and confirmed: an invoice awaits.
    let order = Uuid::now_v7();
    let line = Uuid::now_v7();
    s.post(
        &dana,
        "/v1/orders",
        &key(),
        json!({"id": order, "customer_id": demo::customer_id("acme", "Tokyo Distributor")}),
    )
    .await;
    s.post(
        &dana,
        &format!("/v1/orders/{order}/lines"),
        &key(),
        json!({"id": line, "sku_id": sku, "qty_ordered": 4, "base_version": 1}),
    )
    .await;
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/lines/{line}/allocate"),
            &key(),
            json!({"qty": 4}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/confirm"),
            &key(),
            json!({"base_version": 3}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let invoice = r.json()["invoice_id"].as_str().expect("invoice").to_owned();

    let now = chrono::Utc::now().timestamp();
    let body =
        json!({"type": "payment.succeeded", "data": {"invoice_id": invoice, "amount": 4 * 4200}})
            .to_string();
    let (status, out) = send_inbound(
        &s,
        "acme",
        "payments",
        signed(&pay_secret, "pay_1", now, &body),
        &body,
    )
    .await;
    assert_eq!(
        (status, out["status"].as_str()),
        (StatusCode::OK, Some("processed"))
    );
    let (_, inv) = s.get(&format!("/v1/invoices/{invoice}"), &dana).await;
    assert_eq!(inv["status"], "paid");
    let paid_at = inv["paid_at"].clone();
    // A second, different event for the same invoice pays it no more (it is
    // kept as an over-payment: webhooks/refusals.rs).
    let (status, _) = send_inbound(
        &s,
        "acme",
        "payments",
        signed(&pay_secret, "pay_2", now, &body),
        &body,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, inv) = s.get(&format!("/v1/invoices/{invoice}"), &dana).await;
    assert_eq!(inv["paid_at"], paid_at);
    let paid_events: i64 =
        sqlx::query_scalar("select count(*) from outbox where event_type = 'invoice.paid'")
            .fetch_one(&db)
            .await
            .expect("n");
    assert_eq!(paid_events, 1);

    // 6 on hand, 4 allocated: adjusting by -3 would strand an allocation.
    let body =
        json!({"type": "inventory.adjusted", "data": {"sku_id": sku, "qty": -3}}).to_string();
    let (status, problem) = send_inbound(
        &s,
        "acme",
        "warehouse",
        signed(&wh_secret, "adj_1", now, &body),
        &body,
    )
    .await;
    assert_eq!(status.as_u16(), 422, "{problem}");
    assert_eq!(on_hand(&db, sku).await, 6);
    let body =
        json!({"type": "inventory.adjusted", "data": {"sku_id": sku, "qty": -2}}).to_string();
    let (status, _) = send_inbound(
        &s,
        "acme",
        "warehouse",
        signed(&wh_secret, "adj_2", now, &body),
        &body,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(on_hand(&db, sku).await, 4);
}
