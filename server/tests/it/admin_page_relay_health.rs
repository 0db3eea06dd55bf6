//! The dashboard's "Relay, last hour" section over real deliveries: a
//! partner that accepts, one that keeps failing and one an operator paused,
//! each an in-process receiver on 127.0.0.1:0 reached by the real relay.
//! The page's charts must count what was delivered, in words an assistive
//! reader gets too, and mark the troubled rows red with the reason.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode as AxStatus;
use axum::routing::post;
use holdfast_server::relay::{self, Settings};
use holdfast_server::{demo, AppState};
use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::admin_page::{get, operator_session};
use crate::support::{key, TestServer, MIGRATIONS};

/// A partner endpoint that answers every delivery with `status`, counting them.
async fn receiver(status: AxStatus) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let counted = hits.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                status
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.expect("receiver") });
    (url, hits)
}

async fn register(s: &TestServer, ops: &str, name: &str, url: &str) -> Uuid {
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/admin/partners",
            Some(ops),
            Some(json!({"name": name, "url": url, "event_types": ["order.*"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_str().expect("id").parse().expect("uuid")
}

/// Deliveries of `partner` in `state` with at least `min_attempts` made.
async fn deliveries(db: &PgPool, partner: Uuid, state: &str, min_attempts: i32) -> i64 {
    sqlx::query_scalar(
        "select count(*) from deliveries where partner_id = $1 and state = $2 and attempts >= $3",
    )
    .bind(partner)
    .bind(state)
    .bind(min_attempts)
    .fetch_one(db)
    .await
    .expect("count")
}

/// Polls `done` (with a deadline, never a fixed sleep) until it holds.
async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !done().await {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The `<tr>` of the relay section whose header cell names `partner`.
fn row<'a>(page: &'a str, partner: &str) -> &'a str {
    let start = page
        .find("<h2 id=\"relay-health\">")
        .unwrap_or_else(|| panic!("the relay section: {page}"));
    let section = &page[start..start + page[start..].find("</section>").expect("section end")];
    section
        .split("<tr")
        .find(|r| r.contains(&format!("<th scope=\"row\">{partner}</th>")))
        .unwrap_or_else(|| panic!("a row for {partner}: {section}"))
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_dashboard_charts_each_partners_deliveries_and_marks_trouble_red(db: PgPool) {
    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let dana = s.login("acme", "dana@acme.test").await;
    let (ok_url, ok_hits) = receiver(AxStatus::OK).await;
    let (bad_url, bad_hits) = receiver(AxStatus::SERVICE_UNAVAILABLE).await;
    let (paused_url, paused_hits) = receiver(AxStatus::OK).await;
    let healthy = register(&s, &ops, "Northwind EDI", &ok_url).await;
    let failing = register(&s, &ops, "Flaky Freight", &bad_url).await;
    let paused = register(&s, &ops, "Paused Portal", &paused_url).await;
    let (status, body) = s
        .call(
            Method::PATCH,
            &format!("/v1/admin/partners/{paused}"),
            Some(&ops),
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Three orders: three order.created events for every partner.
    for _ in 0..3 {
        let r = s
            .post(
                &dana,
                "/v1/orders",
                &key(),
                json!({"id": Uuid::now_v7(), "customer_id": demo::customer_id("acme", "Tokyo Distributor")}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let lag_before = crate::monitoring::sample(&s, "holdfast_relay_lag_seconds_count").await;
    let relay = relay::spawn(
        db.clone(),
        Settings {
            // The failing partner keeps retrying (pending, not dead) for the test.
            max_attempts: 1000,
            backoff_base_ms: 5,
            backoff_cap_ms: 200,
            timeout: Duration::from_secs(2),
            allow_private_targets: true,
            max_in_flight: 16,
            per_partner_in_flight: 4,
            poll: Duration::from_millis(50),
        },
    )
    .expect("relay");
    eventually("three deliveries recorded for the healthy partner", || {
        let db = db.clone();
        async move { deliveries(&db, healthy, "delivered", 1).await == 3 }
    })
    .await;
    eventually("every delivery to the failing partner failed once", || {
        let db = db.clone();
        async move { deliveries(&db, failing, "pending", 1).await == 3 }
    })
    .await;
    relay.shutdown().await;
    // First attempts are timed from the commit (the failing partner's
    // retries are not first attempts); other tests can only add to the count.
    let lag_after = crate::monitoring::sample(&s, "holdfast_relay_lag_seconds_count").await;
    assert!(
        lag_after >= lag_before + 6.0,
        "six first attempts timed: {lag_before} then {lag_after}"
    );
    assert_eq!(ok_hits.load(Ordering::SeqCst), 3, "each event sent once");
    assert!(bad_hits.load(Ordering::SeqCst) >= 3);
    assert_eq!(
        paused_hits.load(Ordering::SeqCst),
        0,
        "a paused partner is not sent anything"
    );

    let cookie = operator_session(&s).await;
    let page = get(&s, "/admin", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);

    let ok = row(&page.body, "Northwind EDI");
    assert!(!ok.contains("alarm"), "a healthy partner is not red: {ok}");
    assert!(ok.contains(">Healthy<"), "{ok}");
    assert!(ok.contains("<svg"), "charts inline: {ok}");
    assert!(
        ok.contains("aria-label=\"Deliveries per minute over the last hour: 3 delivered, at most"),
        "the chart's text alternative counts the deliveries: {ok}"
    );
    assert!(
        ok.contains("(3 delivered).\""),
        "the latency chart's newest window holds all three: {ok}"
    );
    assert!(ok.contains("nothing waiting"), "{ok}");

    let bad = row(&page.body, "Flaky Freight");
    assert!(bad.starts_with(" class=\"alarm\""), "{bad}");
    assert!(
        bad.contains("Needs attention: failing, 3 deliveries waiting to retry (last error: "),
        "{bad}"
    );
    assert!(bad.contains("No deliveries in the last hour"), "{bad}");

    let off = row(&page.body, "Paused Portal");
    assert!(off.starts_with(" class=\"alarm\""), "red: {off}");
    assert!(
        off.contains("Needs attention: paused by an operator"),
        "and why, in words: {off}"
    );
    assert!(off.contains("oldest waiting "), "its three wait: {off}");
    // No inline style attributes: the page's CSP is kept to the letter.
    assert!(!page.body.contains(" style="), "{}", page.body);
}
