//! Inbound events our rules refuse are answered 4xx, never 5xx (a 5xx tells
//! the provider to redeliver for ever), and kept with their reason for
//! operators; payments are recorded one by one and pay an invoice only when
//! they cover it (issue 15 items 1, 2, 3).

use holdfast_server::demo;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use super::{inbound_secret, send_inbound, signed};
use crate::admin_page::{self, operator_session};
use crate::support::{key, order_with_line, TestServer, MIGRATIONS};

/// Everything an inbound event could move: positions, both ledgers'
/// lengths, invoices and payments.
async fn state(db: &PgPool) -> Value {
    let row: (Value,) = sqlx::query_as(
        "select json_build_object(
            'positions', (select json_agg(json_build_array(sku_id, on_hand, allocated, version) order by sku_id) from sku_positions),
            'inventory_ledger', (select count(*) from inventory_ledger),
            'invoices', (select json_agg(json_build_array(id, status, amount_paid, version) order by id) from invoices),
            'payments', (select count(*) from payments),
            'outbox', (select count(*) from outbox))",
    )
    .fetch_one(db)
    .await
    .expect("state");
    row.0
}

async fn send(
    s: &TestServer,
    secret: &str,
    provider: &str,
    id: &str,
    body: &str,
) -> (StatusCode, Value) {
    let now = chrono::Utc::now().timestamp();
    send_inbound(s, "acme", provider, signed(secret, id, now, body), body).await
}

/// Before: i64::MAX received answered 500 (`bigint out of range`), an
/// i64::MIN adjustment panicked on `-delta`, and every refusal rolled its
/// inbox row back, so nothing was kept and a redelivery ran again.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn refused_events_are_4xx_recorded_with_their_reason_and_listed(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let secret = inbound_secret(&s, &ops, "warehouse").await;
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let received = |qty: Value| {
        json!({"type": "inventory.received", "data": {"sku_id": sku, "qty": qty}}).to_string()
    };
    let adjusted = |qty: Value| {
        json!({"type": "inventory.adjusted", "data": {"sku_id": sku, "qty": qty}}).to_string()
    };
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (
            "huge_receipt",
            received(json!(i64::MAX)),
            400,
            "validation_failed",
        ),
        (
            "min_adjustment",
            adjusted(json!(i64::MIN)),
            400,
            "validation_failed",
        ),
        (
            "strands_stock",
            adjusted(json!(-7)),
            422,
            "insufficient_ats",
        ),
        (
            "unknown_sku",
            json!({"type": "inventory.received", "data": {"sku_id": Uuid::now_v7(), "qty": 1}})
                .to_string(),
            404,
            "not_found",
        ),
        (
            "bad_shape",
            received(json!("three")),
            400,
            "validation_failed",
        ),
        ("not_json", "{\"type\": ".to_owned(), 400, "malformed_json"),
    ];
    let before = state(&db).await;
    for (id, body, status, code) in &cases {
        for attempt in ["first", "redelivery"] {
            let (got, problem) = send(&s, &secret, "warehouse", id, body).await;
            assert_eq!(
                (got.as_u16(), problem["code"].as_str()),
                (*status, Some(*code)),
                "{id} {attempt}: {problem}"
            );
        }
    }
    assert_eq!(state(&db).await, before, "no refusal changed anything");

    let (status, list) = s
        .get("/v1/admin/inbound-events?outcome=refused", &ops)
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let events = list["events"].as_array().expect("events");
    assert_eq!(events.len(), cases.len(), "each refusal kept once: {list}");
    for e in events {
        assert_eq!(e["outcome"], "refused");
        assert!(
            e["refusal"]["detail"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{e}"
        );
        let case = cases
            .iter()
            .find(|c| c.0 == e["event_id"])
            .expect("a sent event");
        assert_eq!(e["body"], case.1.as_str(), "the raw body is kept");
        assert_eq!(e["refusal"]["code"], case.3);
    }
    let (_, one) = s
        .get("/v1/admin/inbound-events?event_id=strands_stock", &ops)
        .await;
    assert_eq!(one["events"].as_array().map(Vec::len), Some(1), "{one}");
    assert_eq!(one["events"][0]["event_type"], "inventory.adjusted");

    // A good event still processes, and is listed as processed.
    let (status, ack) = send(&s, &secret, "warehouse", "good", &received(json!(5))).await;
    assert_eq!(
        (status, ack["status"].as_str()),
        (StatusCode::OK, Some("processed")),
        "{ack}"
    );
    let (_, processed) = s
        .get(
            "/v1/admin/inbound-events?outcome=processed&provider=warehouse",
            &ops,
        )
        .await;
    assert_eq!(
        processed["events"].as_array().map(Vec::len),
        Some(1),
        "{processed}"
    );
    let (status, _) = s.get("/v1/admin/inbound-events?provider=bank", &ops).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let cookie = operator_session(&s).await;
    let page = admin_page::get(&s, "/admin", Some(&cookie)).await.body;
    assert!(page.contains("Refused inbound events (6)"), "{page}");
    assert!(
        page.contains("strands_stock") && page.contains("would leave less than"),
        "the reason, in words: {page}"
    );
}

/// Every numeric field of the inbound routes over the extremes: a correct
/// 2xx, or a 4xx that changed nothing; never a 5xx.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn inbound_numbers_at_their_extremes_are_answered_4xx_or_applied(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let warehouse = inbound_secret(&s, &ops, "warehouse").await;
    let payments = inbound_secret(&s, &ops, "payments").await;
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let invoice = confirmed_invoice(&s, sku, 1).await;
    let extremes = [
        "0",
        "1",
        "-1",
        "2147483647",
        "-2147483648",
        "2147483648",
        "-2147483649",
        "9223372036854775807",
        "-9223372036854775808",
        "9007199254740991",
        "9007199254740993",
        "-9007199254740993",
        "9223372036854775808",
        "-9223372036854775809",
        "1e300",
        "1.5",
        "-0",
        "1000000000",
        "1000000001",
    ];
    let mut n = 0;
    for (provider, secret, ty, field) in [
        ("warehouse", &warehouse, "inventory.received", "sku_id"),
        ("warehouse", &warehouse, "inventory.adjusted", "sku_id"),
        ("payments", &payments, "payment.succeeded", "invoice_id"),
    ] {
        for number in extremes {
            n += 1;
            let (id_value, qty_field) = if field == "sku_id" {
                (sku, "qty")
            } else {
                (invoice, "amount")
            };
            let body = format!(
                r#"{{"type": "{ty}", "data": {{"{field}": "{id_value}", "{qty_field}": {number}}}}}"#
            );
            let before = state(&db).await;
            let (status, answer) = send(&s, secret, provider, &format!("x{n}"), &body).await;
            assert!(
                status.is_success() || status.is_client_error(),
                "{ty} {number}: {status} {answer}"
            );
            if status.is_client_error() {
                assert_eq!(
                    state(&db).await,
                    before,
                    "{ty} {number} refused yet changed something"
                );
                assert!(
                    matches!(
                        answer["code"].as_str(),
                        Some("validation_failed" | "insufficient_ats")
                    ),
                    "{ty} {number}: {answer}"
                );
            } else {
                assert_ne!(
                    state(&db).await,
                    before,
                    "{ty} {number} processed yet changed nothing"
                );
            }
        }
    }
}

/// Confirms an order for `qty` of `sku` for Tokyo Distributor (no limit) and
/// returns its invoice.
async fn confirmed_invoice(s: &TestServer, sku: Uuid, qty: i64) -> Uuid {
    let dana = s.login("acme", "dana@acme.test").await;
    let (order, _) = order_with_line(s, &dana, sku, qty).await;
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/confirm"),
            &key(),
            json!({"base_version": 2}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    r.json()["invoice_id"]
        .as_str()
        .expect("invoice")
        .parse()
        .expect("uuid")
}

/// Before: a payment of 1 cent marked a $168 invoice paid.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_invoice_is_paid_when_its_payments_cover_it(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let dana = s.login("acme", "dana@acme.test").await;
    let secret = inbound_secret(&s, &ops, "payments").await;
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let invoice = confirmed_invoice(&s, sku, 4).await;
    let (_, inv) = s.get(&format!("/v1/invoices/{invoice}"), &dana).await;
    let amount = inv["amount"].as_i64().expect("amount");
    assert!(amount > 100, "{inv}");
    let pay = |amount: i64| {
        json!({"type": "payment.succeeded", "data": {"invoice_id": invoice, "amount": amount}})
            .to_string()
    };
    let paid_events = || async {
        sqlx::query_as::<_, (i64, Option<i64>)>(
            "select count(*), max((payload->'data'->>'sequence')::bigint) from outbox where event_type = 'invoice.paid'",
        )
        .fetch_one(&db)
        .await
        .expect("events")
    };

    let (status, ack) = send(&s, &secret, "payments", "part_1", &pay(amount - 100)).await;
    assert_eq!(
        (status, ack["status"].as_str()),
        (StatusCode::OK, Some("processed"))
    );
    let (_, inv) = s.get(&format!("/v1/invoices/{invoice}"), &dana).await;
    assert_eq!(
        (inv["status"].as_str(), inv["amount_paid"].as_i64()),
        (Some("awaiting_payment"), Some(amount - 100)),
        "{inv}"
    );
    assert!(inv["paid_at"].is_null());
    assert_eq!(
        paid_events().await.0,
        0,
        "no invoice.paid for a partial payment"
    );
    let (_, mismatches) = s.get("/v1/admin/payment-mismatches", &ops).await;
    assert_eq!(
        mismatches["invoices"][0]["amount_paid"],
        amount - 100,
        "{mismatches}"
    );

    send(&s, &secret, "payments", "part_2", &pay(100)).await;
    let (_, inv) = s.get(&format!("/v1/invoices/{invoice}"), &dana).await;
    assert_eq!(
        (inv["status"].as_str(), inv["amount_paid"].as_i64()),
        (Some("paid"), Some(amount)),
        "{inv}"
    );
    assert_eq!(
        paid_events().await,
        (1, Some(1)),
        "one invoice.paid, sequence 1 (gap-free)"
    );
    let (_, mismatches) = s.get("/v1/admin/payment-mismatches", &ops).await;
    assert_eq!(
        mismatches["invoices"].as_array().map(Vec::len),
        Some(0),
        "covered exactly: {mismatches}"
    );

    // An over-payment is kept and shown; the invoice stays paid once.
    send(&s, &secret, "payments", "extra", &pay(50)).await;
    let (_, inv) = s.get(&format!("/v1/invoices/{invoice}"), &dana).await;
    assert_eq!(inv["amount_paid"], amount + 50);
    assert_eq!(paid_events().await.0, 1);
    let (_, mismatches) = s.get("/v1/admin/payment-mismatches", &ops).await;
    assert_eq!(
        mismatches["invoices"][0]["amount_paid"],
        amount + 50,
        "{mismatches}"
    );
    let cookie = operator_session(&s).await;
    let page = admin_page::get(&s, "/admin", Some(&cookie)).await.body;
    assert!(
        page.contains("Payments that do not match their invoice (1)") && page.contains("over-paid"),
        "{page}"
    );

    // A payment for no invoice of ours is refused and kept, not "processed".
    let (status, problem) = send(
        &s,
        &secret,
        "payments",
        "stray",
        &json!({"type": "payment.succeeded", "data": {"invoice_id": Uuid::now_v7(), "amount": 5}})
            .to_string(),
    )
    .await;
    assert_eq!(
        (status.as_u16(), problem["code"].as_str()),
        (404, Some("not_found")),
        "{problem}"
    );
    let payments: i64 = sqlx::query_scalar("select count(*) from payments")
        .fetch_one(&db)
        .await
        .expect("n");
    assert_eq!(payments, 3);
}
