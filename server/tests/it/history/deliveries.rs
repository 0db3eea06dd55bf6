//! Each history entry's partner deliveries, as an in-process partner that
//! verifies signatures received them: before the relay runs, once it has
//! delivered, and after the reaper has trimmed delivered events.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxStatus};
use axum::routing::post;
use holdfast_protocol::model::{HistoryDeliveryState, OrderHistory};
use holdfast_protocol::webhook;
use holdfast_server::housekeeping::{self, Retention};
use holdfast_server::relay::{self, Settings};
use holdfast_server::AppState;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use super::{history, ok, summary, tokyo};
use crate::support::{kestrel_m, key, TestServer, MIGRATIONS};

/// A partner endpoint in this process that verifies every signature and
/// records the `webhook-id` and body of each event it accepts.
#[derive(Clone, Default)]
struct Receiver {
    secret: Arc<Mutex<Vec<u8>>>,
    got: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Receiver {
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let app = axum::Router::new()
            .route("/hook", post(receive))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.expect("partner") });
        url
    }

    fn got(&self) -> Vec<(String, Value)> {
        self.got.lock().expect("lock").clone()
    }
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> AxStatus {
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let id = h("webhook-id");
    let secret = r.secret.lock().expect("lock").clone();
    let verified = webhook::verify(
        &[&secret],
        &id,
        &h("webhook-timestamp"),
        &h("webhook-signature"),
        &body,
        chrono::Utc::now().timestamp(),
        300,
    )
    .is_ok();
    if !verified {
        return AxStatus::UNAUTHORIZED;
    }
    let parsed = serde_json::from_slice(&body).unwrap_or(Value::Null);
    r.got.lock().expect("lock").push((id, parsed));
    AxStatus::NO_CONTENT
}

fn fast_relay() -> Settings {
    Settings {
        max_attempts: 4,
        backoff_base_ms: 5,
        backoff_cap_ms: 50,
        timeout: Duration::from_millis(800),
        allow_private_targets: true,
        max_in_flight: 16,
        per_partner_in_flight: 4,
        poll: Duration::from_millis(50),
    }
}

async fn register(s: &TestServer, ops: &str, name: &str, url: &str, types: Value) -> Value {
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/admin/partners",
            Some(ops),
            Some(json!({"name": name, "url": url, "event_types": types})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

/// Polls the history (with a deadline, never a fixed sleep) until `done`.
async fn history_when(
    s: &TestServer,
    token: &str,
    order: Uuid,
    what: &str,
    done: impl Fn(&OrderHistory) -> bool,
) -> OrderHistory {
    let start = Instant::now();
    loop {
        let (_, h) = history(s, token, order).await;
        if done(&h) {
            return h;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}: {h:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn each_entry_shows_its_deliveries_under_the_webhook_id_the_partner_got(db: PgPool) {
    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let token = s.login("acme", "dana@acme.test").await;
    let receiver = Receiver::default();
    let url = receiver.start().await;
    let edi = register(&s, &ops, "EDI gateway", &url, json!(["*"])).await;
    *receiver.secret.lock().expect("lock") =
        webhook::parse_secret(edi["secret"].as_str().expect("secret")).expect("secret");
    // A second partner, disabled by its operator: its events wait for it.
    let paused = register(
        &s,
        &ops,
        "Paused 3PL",
        "http://127.0.0.1:9/never",
        json!(["order.created"]),
    )
    .await;
    let (status, body) = s
        .call(
            Method::PATCH,
            &format!("/v1/admin/partners/{}", paused["id"].as_str().expect("id")),
            Some(&ops),
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (order, line) = (Uuid::now_v7(), Uuid::now_v7());
    ok(
        s.post(
            &token,
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": tokyo()}),
        )
        .await,
        "create",
    )
    .await;
    ok(
        s.post(
            &token,
            &format!("/v1/orders/{order}/lines"),
            &key(),
            json!({"id": line, "sku_id": kestrel_m(), "qty_ordered": 2, "base_version": 1}),
        )
        .await,
        "add line",
    )
    .await;
    ok(
        s.post(
            &token,
            &format!("/v1/orders/{order}/lines/{line}/allocate"),
            &key(),
            json!({"qty": 2}),
        )
        .await,
        "allocate",
    )
    .await;
    // Removing the allocated line: one version, three events (the SKU's ATS,
    // the release, the removal).
    ok(
        s.post(
            &token,
            &format!("/v1/orders/{order}/lines/{line}/remove"),
            &key(),
            json!({"base_version": 3}),
        )
        .await,
        "remove line",
    )
    .await;

    // No relay has run: every event is pending for every partner subscribed
    // to it now, held for the disabled one.
    let (_, before) = history(&s, &token, order).await;
    let states = |h: &OrderHistory| -> Vec<Vec<(String, HistoryDeliveryState)>> {
        h.entries
            .iter()
            .map(|e| {
                e.deliveries
                    .iter()
                    .map(|d| (d.partner_name.clone(), d.state))
                    .collect()
            })
            .collect()
    };
    use HistoryDeliveryState::{Delivered, Held, Pending};
    let edi_name = || "EDI gateway".to_owned();
    assert_eq!(
        states(&before),
        vec![
            vec![(edi_name(), Pending), ("Paused 3PL".to_owned(), Held)],
            vec![(edi_name(), Pending)],
            // The SKU's ATS event and the order's allocation event.
            vec![(edi_name(), Pending), (edi_name(), Pending)],
            vec![
                (edi_name(), Pending),
                (edi_name(), Pending),
                (edi_name(), Pending)
            ],
        ]
    );
    assert_eq!(
        before.entries[3].facts["qty_released"], 2,
        "the removal tells what it released"
    );

    let relay = relay::spawn(db.clone(), fast_relay()).expect("relay");
    let after = history_when(&s, &token, order, "delivered", |h| {
        h.entries
            .iter()
            .flat_map(|e| &e.deliveries)
            .all(|d| d.partner_name == "Paused 3PL" || d.state == Delivered)
    })
    .await;
    relay.shutdown().await;
    assert_eq!(
        states(&after),
        vec![
            vec![(edi_name(), Delivered), ("Paused 3PL".to_owned(), Held)],
            vec![(edi_name(), Delivered)],
            vec![(edi_name(), Delivered), (edi_name(), Delivered)],
            vec![
                (edi_name(), Delivered),
                (edi_name(), Delivered),
                (edi_name(), Delivered)
            ],
        ]
    );

    // Each delivered webhook-id is one the partner received, and the event
    // it received under that id is about this entry's version.
    let got = receiver.got();
    let edi_id: Uuid = edi["id"].as_str().expect("id").parse().expect("uuid");
    let mut seen = Vec::new();
    for entry in &after.entries {
        for d in entry.deliveries.iter().filter(|d| d.state == Delivered) {
            assert_eq!(d.partner_id, edi_id);
            // The last attempt is the one that was accepted (a slow machine
            // may have timed out an earlier one).
            assert!(d.attempts >= 1, "{d:?}");
            assert_eq!(d.last_status, Some(204), "{d:?}");
            assert!(d.delivered_at.is_some_and(|t| t >= entry.at));
            assert!(d.webhook_id.starts_with("evt_"), "{}", d.webhook_id);
            let (_, event) = got
                .iter()
                .find(|(id, _)| *id == d.webhook_id)
                .unwrap_or_else(|| panic!("the partner never got {}", d.webhook_id));
            let about_order = event["data"]["order_id"] == order.to_string();
            if about_order {
                assert_eq!(event["data"]["version"], entry.version, "{event}");
            } else {
                assert_eq!(event["type"], "sku.ats_changed", "{event}");
            }
            seen.push(d.webhook_id.clone());
        }
        let order_events: Vec<&Value> = entry
            .deliveries
            .iter()
            .filter_map(|d| got.iter().find(|(id, _)| *id == d.webhook_id))
            .map(|(_, e)| e)
            .filter(|e| e["data"]["order_id"] == order.to_string())
            .collect();
        assert_eq!(
            order_events.last().map(|e| &e["type"]),
            Some(&json!(entry.event_type)),
            "the entry's last order event is its own type"
        );
    }
    // Everything the partner got about this order is in the history.
    for (id, event) in &got {
        if event["data"]["order_id"] == order.to_string() {
            assert!(seen.contains(id), "{id} ({event}) missing from the history");
        }
    }

    // Past the outbox retention the reaper deletes delivered deliveries and
    // their events: the entries stay, with what is still known (the held
    // delivery, never reaped).
    let reaped = housekeeping::reap_all(
        &db,
        &Retention {
            idempotency_hours: 72,
            outbox_hours: 0,
            inbox_hours: 720,
        },
    )
    .await
    .expect("reap");
    assert!(reaped[1] > 0 && reaped[2] > 0, "{reaped:?}");
    let (_, reaped) = history(&s, &token, order).await;
    assert_eq!(summary(&reaped), summary(&after));
    assert_eq!(
        states(&reaped),
        vec![
            vec![("Paused 3PL".to_owned(), Held)],
            vec![],
            vec![],
            vec![]
        ]
    );
}
