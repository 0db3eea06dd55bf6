//! Dead-lettered partner events on the desk, against the real server, its
//! relay and an in-process partner: an order whose event the partner refused
//! until the relay gave up is flagged on its desk row, its view and in the
//! status line; a requeue that delivers it clears the flag. Asking for the
//! flags never fails a pass (a 5xx keeps the last answer, as being offline
//! does), happens at most once a minute, and at once after a sign-in.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use holdfast_client::{Engine, EngineEvent, NewOrder, SyncConfig};
use holdfast_server::relay::{self, RelayHandle, Settings};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;
use support::*;
use uuid::Uuid;

/// A partner endpoint that refuses (500) the events of the orders in
/// `refuse` and accepts every other event.
#[derive(Clone, Default)]
struct Partner {
    refuse: Arc<Mutex<HashSet<String>>>,
}

impl Partner {
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

    fn refuse(&self, order: Uuid, refused: bool) {
        let mut set = self.refuse.lock().expect("lock");
        if refused {
            set.insert(order.to_string());
        } else {
            set.remove(&order.to_string());
        }
    }
}

async fn receive(State(p): State<Partner>, body: Bytes) -> StatusCode {
    let event: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let refused = event["data"]["order_id"]
        .as_str()
        .is_some_and(|order| p.refuse.lock().expect("lock").contains(order));
    if refused {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    }
}

/// Two attempts, milliseconds apart: a refused event is dead-lettered at
/// once.
fn relay(server: &Server) -> RelayHandle {
    relay::spawn(
        server.db.clone(),
        Settings {
            max_attempts: 2,
            backoff_base_ms: 5,
            backoff_cap_ms: 20,
            timeout: Duration::from_secs(2),
            allow_private_targets: true,
            max_in_flight: 16,
            per_partner_in_flight: 4,
            poll: Duration::from_millis(50),
        },
    )
    .expect("relay")
}

/// Waits (with a deadline, never a fixed sleep) until the relay has nothing
/// left to do: every event fanned out, no delivery pending.
async fn relay_settled(db: &PgPool) {
    let start = Instant::now();
    loop {
        let busy: i64 = sqlx::query_scalar(
            "select (select count(*) from outbox where fanned_out_at is null)
                  + (select count(*) from deliveries where state = 'pending')
                  + (select count(*) from relay_sending)",
        )
        .fetch_one(db)
        .await
        .expect("backlog");
        if busy == 0 {
            return;
        }
        assert!(start.elapsed() < DEADLINE, "the relay never settled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The dead deliveries of `order`'s events.
async fn dead_of(db: &PgPool, order: Uuid) -> Vec<i64> {
    sqlx::query_scalar(
        "select d.id from deliveries d
           join outbox o on o.tenant_id = d.tenant_id and o.id = d.outbox_id
          where o.aggregate_id = $1 and d.state = 'dead'",
    )
    .bind(order)
    .fetch_all(db)
    .await
    .expect("dead deliveries")
}

/// A partner subscribed to every order event, registered by the operator.
async fn partner(admin: &Admin) -> Partner {
    let partner = Partner::default();
    let url = partner.start().await;
    admin
        .send(
            Method::POST,
            "/v1/admin/partners",
            json!({"name": "EDI gateway", "url": url, "event_types": ["order.*"]}),
        )
        .await;
    partner
}

fn new_order(desk: &Engine) -> Uuid {
    desk.create_order(NewOrder {
        customer_id: tokyo(),
        ..Default::default()
    })
    .expect("create")
}

/// `(order view's flag, desk row's flag, status count)` for `order`.
fn flags(desk: &Engine, order: Uuid) -> (bool, bool, i64) {
    let view = desk.order(order).expect("view").expect("the order is here");
    let row = desk
        .order_summaries()
        .expect("desk")
        .into_iter()
        .find(|s| s.order.id == order)
        .expect("the order is on the desk");
    let status = desk.status().expect("status");
    (
        view.dead_lettered,
        row.dead_lettered,
        status.dead_lettered_orders,
    )
}

#[sqlx::test(migrations = "../migrations")]
async fn a_dead_lettered_order_is_flagged_until_a_requeue_delivers_it(db: PgPool) {
    let mut server = Server::start_for_partners(db).await;
    let admin = Admin::new(&server).await;
    let partner = partner(&admin).await;
    let dir = tempfile::tempdir().expect("tempdir");
    // Asking on every pass makes each step below show at once; the
    // once-a-minute rule is the next test's.
    let config = SyncConfig {
        flags_interval: Duration::ZERO,
        ..fast_config()
    };
    let desk = open(dir.path(), "dana", config);
    login(&desk, &server.url(), "dana@acme.test").await;

    // The partner refuses `refused`'s event and takes `fine`'s.
    let (refused, fine) = (new_order(&desk), new_order(&desk));
    partner.refuse(refused, true);
    // The relay starts once the push's pass (and its question about dead
    // letters) is over, so the next pass is the first to see the flag.
    desk.sync_once().await.expect("push");
    let relay_task = relay(&server);
    relay_settled(&server.db).await;
    assert_eq!(dead_of(&server.db, refused).await.len(), 1);
    assert!(dead_of(&server.db, fine).await.is_empty());

    let mut events = desk.subscribe();
    let report = desk.sync_once().await.expect("sync");
    assert_eq!(flags(&desk, refused), (true, true, 1), "flagged");
    assert_eq!(flags(&desk, fine), (false, false, 1), "not flagged");
    let mut changed = 0;
    while let Ok(event) = events.try_recv() {
        changed += usize::from(matches!(event, EngineEvent::Changed));
    }
    // One for what the pass itself brought (if anything), one for the flags.
    let pass_changed = report.applied + report.pulled > 0;
    assert_eq!(
        changed,
        usize::from(pass_changed) + 1,
        "the screens hear that the flags changed"
    );

    // The route failing (here a 5xx: the server's role may no longer read
    // deliveries) fails nothing: the pass succeeds, the desk stays online
    // with no error and no backoff, and the last answer stays.
    sqlx::query("revoke select on deliveries from holdfast_tenant")
        .execute(&server.db)
        .await
        .expect("revoke");
    let reader = server.token("dana@acme.test").await;
    let answer = reqwest::Client::new()
        .get(format!("{}/v1/orders/dead-lettered", server.url()))
        .bearer_auth(&reader)
        .send()
        .await
        .expect("ask");
    assert_eq!(answer.status(), 500, "the route fails now");
    desk.sync_once().await.expect("the pass succeeds");
    let status = desk.status().expect("status");
    assert_eq!(status.online, Some(true));
    assert_eq!(status.last_error, None);
    assert_eq!(status.next_attempt_at, None);
    assert_eq!(
        flags(&desk, refused),
        (true, true, 1),
        "the last answer kept"
    );
    sqlx::query("grant select on deliveries to holdfast_tenant")
        .execute(&server.db)
        .await
        .expect("grant");

    // Offline: the pass fails for want of the server, the flag stays.
    server.stop().await;
    desk.sync_once().await.expect_err("the server is down");
    assert_eq!(flags(&desk, refused), (true, true, 1), "kept while offline");
    server.restart().await;

    // The partner fixes its endpoint, the operator requeues, the relay
    // delivers: the next pass clears the flag.
    partner.refuse(refused, false);
    for delivery in dead_of(&server.db, refused).await {
        admin
            .send(
                Method::POST,
                &format!("/v1/admin/deliveries/{delivery}/requeue"),
                json!({}),
            )
            .await;
    }
    relay_settled(&server.db).await;
    relay_task.shutdown().await;
    assert!(dead_of(&server.db, refused).await.is_empty(), "delivered");
    desk.sync_once().await.expect("sync");
    assert_eq!(flags(&desk, refused), (false, false, 0), "unflagged");
    assert_eq!(flags(&desk, fine), (false, false, 0));
}

#[sqlx::test(migrations = "../migrations")]
async fn the_desk_asks_at_most_once_a_minute_and_at_once_after_a_sign_in(db: PgPool) {
    let server = Server::start_for_partners(db).await;
    let admin = Admin::new(&server).await;
    let partner = partner(&admin).await;
    let dir = tempfile::tempdir().expect("tempdir");
    // As shipped: at most once a minute.
    let desk = open(dir.path(), "dana", fast_config());
    login(&desk, &server.url(), "dana@acme.test").await;
    assert_eq!(desk.status().expect("status").dead_lettered_orders, 0);

    // Dead-lettered within the minute of the sign-in's ask: passes in that
    // minute do not ask again, so the desk does not know yet.
    let order = new_order(&desk);
    partner.refuse(order, true);
    let relay_task = relay(&server);
    desk.sync_once().await.expect("push");
    relay_settled(&server.db).await;
    relay_task.shutdown().await;
    assert_eq!(dead_of(&server.db, order).await.len(), 1);
    desk.sync_once().await.expect("sync");
    assert_eq!(
        flags(&desk, order),
        (false, false, 0),
        "not asked again yet"
    );

    // A sign-in asks at once (its first pass).
    login(&desk, &server.url(), "dana@acme.test").await;
    assert_eq!(
        flags(&desk, order),
        (true, true, 1),
        "asked after the sign-in"
    );
}
