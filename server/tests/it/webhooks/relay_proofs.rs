//! What the relay promises and the other relay tests poll past (issue 15
//! items 9–11): a stalled relay's late outcome never overwrites a newer
//! claim, nor does a late first attempt it held in memory once another
//! relay took it over; a commit reaches the partner through NOTIFY when polling would
//! take minutes; a partner's Retry-After is honoured, and capped.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode as AxStatus};
use axum::response::IntoResponse;
use axum::routing::post;
use chrono::{DateTime, Utc};
use holdfast_server::relay::claim::{
    self, AfterFailure, Delivered, FirstOutcome, Handout, Room, Sending,
};
use holdfast_server::relay::{self, Settings};
use holdfast_server::{demo, AppState};
use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use super::count;
use crate::support::{key, TestServer, MIGRATIONS};

/// When each attempt arrived: for gaps, and for comparing with the database's times.
type Arrivals = Arc<Mutex<Vec<(Instant, DateTime<Utc>)>>>;

/// What the receiver answers to its n-th request (0-based), and when each
/// arrived. Signatures are checked by the other relay tests; this one
/// records times.
#[derive(Clone)]
struct Receiver {
    answers: Arc<Vec<(u16, Option<String>)>>,
    /// How long each answer takes.
    delay: Duration,
    arrivals: Arrivals,
    url: String,
}

impl Receiver {
    async fn start(answers: Vec<(u16, Option<String>)>) -> Receiver {
        Receiver::start_slow(answers, Duration::ZERO).await
    }

    async fn start_slow(answers: Vec<(u16, Option<String>)>, delay: Duration) -> Receiver {
        let r = Receiver {
            answers: Arc::new(answers),
            delay,
            arrivals: Arc::default(),
            url: String::new(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let app = axum::Router::new()
            .route("/hook", post(receive))
            .with_state(r.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.expect("receiver") });
        Receiver { url, ..r }
    }

    fn arrivals(&self) -> Vec<(Instant, DateTime<Utc>)> {
        self.arrivals.lock().expect("lock").clone()
    }

    async fn wait_for(&self, n: usize, within: Duration) -> Vec<(Instant, DateTime<Utc>)> {
        let start = Instant::now();
        loop {
            let got = self.arrivals();
            if got.len() >= n {
                return got;
            }
            assert!(
                start.elapsed() < within,
                "only {} of {n} attempts arrived",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn receive(State(r): State<Receiver>, _headers: HeaderMap) -> impl IntoResponse {
    let n = {
        let mut arrivals = r.arrivals.lock().expect("lock");
        arrivals.push((Instant::now(), Utc::now()));
        arrivals.len() - 1
    };
    tokio::time::sleep(r.delay).await;
    let (status, retry_after) = r.answers.get(n).cloned().unwrap_or((200, None));
    // "date+N": an HTTP date N seconds from this answer.
    let retry_after =
        retry_after.map(
            |v| match v.strip_prefix("date+").and_then(|n| n.parse::<i64>().ok()) {
                Some(secs) => (Utc::now() + chrono::Duration::seconds(secs))
                    .format("%a, %d %b %Y %H:%M:%S GMT")
                    .to_string(),
                None => v,
            },
        );
    let mut headers = HeaderMap::new();
    if let Some(v) = retry_after.and_then(|v| HeaderValue::from_str(&v).ok()) {
        headers.insert("retry-after", v);
    }
    (AxStatus::from_u16(status).expect("status"), headers)
}

fn settings(poll: Duration, cap_ms: u64) -> Settings {
    Settings {
        max_attempts: 10,
        backoff_base_ms: 5,
        backoff_cap_ms: cap_ms,
        timeout: Duration::from_secs(5),
        allow_private_targets: true,
        max_in_flight: 4,
        per_partner_in_flight: 2,
        poll,
    }
}

/// A server whose operator registered `url` for `order.created`.
async fn server_with_partner(db: &PgPool, url: &str) -> (TestServer, String) {
    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/admin/partners",
            Some(&ops),
            Some(json!({"name": "EDI", "url": url, "event_types": ["order.created"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let dana = s.login("acme", "dana@acme.test").await;
    (s, dana)
}

async fn create_order(s: &TestServer, token: &str) {
    let r = s
        .post(token, "/v1/orders", &key(), json!({"id": Uuid::now_v7(), "customer_id": demo::customer_id("acme", "Tokyo Distributor")}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
}

/// Item 10. The relay polls every 10 minutes here, so only the NOTIFY sent
/// at commit can bring the event to the partner within the deadline.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_commit_wakes_the_relay_long_before_its_poll(db: PgPool) {
    let receiver = Receiver::start(vec![]).await;
    let (s, dana) = server_with_partner(&db, &receiver.url).await;
    let relay = relay::spawn(db.clone(), settings(Duration::from_secs(600), 5_000)).expect("relay");
    // Its first pass (at start) has run once the relay is listening; wait
    // for its LISTEN so the commit below is the only thing that can wake it.
    let start = Instant::now();
    loop {
        let listening: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity where query ilike 'listen%holdfast_outbox%'",
        )
        .fetch_one(&db)
        .await
        .expect("pg_stat_activity");
        if listening > 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the relay never listened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    create_order(&s, &dana).await;
    // 10 s: generous for a loaded 2-core machine, and 60 times shorter than the poll.
    receiver.wait_for(1, Duration::from_secs(10)).await;
    relay.shutdown().await;
}

/// A backlog larger than a relay holds in memory: what its fan-outs turn
/// into pending rows for lack of room is claimed and sent as soon as there
/// is room, not at the next poll (10 minutes here). Those rows once waited
/// for the poll whenever the partner's last claim found it still full.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_backlog_past_the_relays_share_is_sent_without_waiting_for_the_poll(db: PgPool) {
    // Answers that take 2 ms keep the partner's share full while the last
    // events are fanned out, so some of them become rows.
    let receiver = Receiver::start_slow(vec![], Duration::from_millis(2)).await;
    let (_s, _dana) = server_with_partner(&db, &receiver.url).await;
    // The server's defaults (64 in flight, 8 per partner): a partner's share
    // of first attempts is 1,024, so 3,000 events overflow into rows.
    let settings = Settings {
        max_in_flight: 64,
        per_partner_in_flight: 8,
        ..settings(Duration::from_secs(600), 5_000)
    };
    let events = 3_000;
    sqlx::query(
        "insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
         select $1, 'order.created', 'order', gen_random_uuid(), 1, '{}'
           from generate_series(1, $2)",
    )
    .bind(crate::support::acme())
    .bind(events as i64)
    .execute(&db)
    .await
    .expect("events");
    let relay = relay::spawn(db.clone(), settings).expect("relay");
    // 60 s: generous for a loaded 2-core machine, and 10 times shorter than the poll.
    receiver.wait_for(events, Duration::from_secs(60)).await;
    relay.shutdown().await;
    let delivered: i64 =
        sqlx::query_scalar("select count(*) from deliveries where state = 'delivered'")
            .fetch_one(&db)
            .await
            .expect("count");
    assert_eq!(delivered, events as i64);
}

/// Item 11. 429 and 503 with Retry-After (seconds, then an HTTP date) are
/// not retried sooner than asked — the backoff alone would retry within
/// milliseconds here — and a Retry-After of years is capped at the backoff cap.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn retry_after_is_honoured_and_capped(db: PgPool) {
    let receiver = Receiver::start(vec![
        (429, Some("2".into())),
        (503, Some("date+4".into())),
        (503, Some("999999999".into())),
    ])
    .await;
    let (s, dana) = server_with_partner(&db, &receiver.url).await;
    let cap = Duration::from_secs(5);
    let relay = relay::spawn(
        db.clone(),
        settings(Duration::from_millis(50), cap.as_millis() as u64),
    )
    .expect("relay");
    create_order(&s, &dana).await;
    let arrivals = receiver.wait_for(3, Duration::from_secs(60)).await;
    let gap = |i: usize| arrivals[i].0 - arrivals[i - 1].0;
    assert!(
        gap(1) >= Duration::from_secs(2),
        "retried {:?} after Retry-After: 2",
        gap(1)
    );
    // The date has whole seconds: it asked for 3 to 4 s.
    assert!(
        gap(2) >= Duration::from_secs(2),
        "retried {:?} after a Retry-After date",
        gap(2)
    );

    // The third answer asked for ~31 years: the next attempt is set at most
    // the cap after it (plus slack for a slow machine), not years away.
    let start = Instant::now();
    let next: DateTime<Utc> = loop {
        let row: Option<(i32, DateTime<Utc>)> = sqlx::query_as(
            "select attempts, next_attempt_at from deliveries order by id desc limit 1",
        )
        .fetch_optional(&db)
        .await
        .expect("delivery");
        if let Some((3, next)) = row {
            break next;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "third attempt not recorded: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let third = arrivals[2].1;
    assert!(
        next >= third + chrono::Duration::seconds(4),
        "{next} vs {third}: the cap is 5 s"
    );
    assert!(
        next <= third + chrono::Duration::seconds(60),
        "{next} vs {third}: capped, not years"
    );
    relay.shutdown().await;
}

/// A delivery row as the fencing proofs compare it: state, attempts, last
/// error and status.
type DeliveryRow = (String, i32, Option<String>, Option<i32>);

async fn delivery_row(db: &PgPool, outbox_id: i64) -> DeliveryRow {
    sqlx::query_as(
        "select state, attempts, last_error, last_status from deliveries where outbox_id = $1",
    )
    .bind(outbox_id)
    .fetch_one(db)
    .await
    .expect("delivery row")
}

/// Relay B, holding its claim, records a 503 (to be retried); returns the
/// row as B left it.
async fn b_records_a_503(db: &PgPool, b: &claim::Claimed, lease_b: Uuid) -> DeliveryRow {
    let after_b = claim::mark_failed(
        db,
        b,
        lease_b,
        Some(503),
        "partner busy (B)",
        Duration::from_secs(30),
        10,
    )
    .await
    .expect("B records");
    assert_eq!(after_b, AfterFailure::Retrying);
    delivery_row(db, b.outbox_id).await
}

/// Item 9. Relay A claims a delivery and stalls past its lease; relay B
/// claims it again and records its outcome; A's late outcome — failed or
/// delivered — must not land over B's.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_stalled_relays_late_outcome_never_overwrites_a_newer_claim(db: PgPool) {
    let receiver = Receiver::start(vec![]).await;
    let (s, dana) = server_with_partner(&db, &receiver.url).await;
    create_order(&s, &dana).await;
    claim::fan_out(&db).await.expect("fan out");
    let room = Room {
        per_partner: 4,
        partners: &[],
    };
    let (lease_a, lease_b) = (Uuid::now_v7(), Uuid::now_v7());
    let a = claim::claim(&db, lease_a, Duration::from_millis(50), 10, room)
        .await
        .expect("claim A");
    assert_eq!(a.len(), 1, "one delivery to claim");
    // A stalls; once its lease has expired B claims the same delivery.
    let start = Instant::now();
    let b = loop {
        let b = claim::claim(&db, lease_b, Duration::from_secs(60), 10, room)
            .await
            .expect("claim B");
        if !b.is_empty() {
            break b;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "A's lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(b[0].id, a[0].id);
    let recorded_by_b = b_records_a_503(&db, &b[0], lease_b).await;

    // A wakes up with its outcome.
    let late = claim::mark_failed(
        &db,
        &a[0],
        lease_a,
        Some(500),
        "late (A)",
        Duration::ZERO,
        10,
    )
    .await
    .expect("A fails late");
    assert_eq!(late, AfterFailure::LeaseLost);
    let lost = claim::mark_delivered(
        &db,
        &[Delivered {
            tenant_id: a[0].tenant_id,
            id: a[0].id.expect("a claimed row"),
            lease_id: lease_a,
            status: 200,
        }],
    )
    .await
    .expect("A delivers late");
    assert_eq!(
        lost,
        vec![a[0].id.expect("a claimed row")],
        "A's delivered is refused as lease-lost"
    );
    assert_eq!(
        delivery_row(&db, b[0].outbox_id).await,
        recorded_by_b,
        "B's record stands"
    );
    assert_eq!(
        recorded_by_b,
        (
            "pending".to_owned(),
            1,
            Some("partner busy (B)".to_owned()),
            Some(503)
        )
    );
}

/// The same fence for a first attempt a fan-out handed to a relay in
/// memory: once its lease has run out and another relay took the event
/// over as a pending row, the stalled relay's late outcome — delivered, or
/// a 410 that would pause the partner — writes nothing over the new claim.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_stalled_relays_late_first_attempt_never_overwrites_the_takeover(db: PgPool) {
    let receiver = Receiver::start(vec![]).await;
    let (s, dana) = server_with_partner(&db, &receiver.url).await;
    create_order(&s, &dana).await;
    let room = Room {
        per_partner: 4,
        partners: &[],
    };

    // A's fan-out keeps the first attempt in memory: no delivery row yet.
    let lease_a = Uuid::now_v7();
    let handed = claim::fan_out_handing(
        &db,
        claim::FAN_OUT_BATCH,
        Some(Handout {
            lease_id: lease_a,
            lease: Duration::from_millis(50),
            total: 10,
            room,
        }),
    )
    .await
    .expect("fan out");
    assert_eq!(handed.first.len(), 1, "one first attempt handed out");
    let first = &handed.first[0];
    assert_eq!(count(&db, "select count(*) from deliveries").await, 0);
    assert_eq!(
        count(&db, "select count(*) from relay_sending_events").await,
        1
    );

    // A stalls past its lease; the next pass makes the event a pending row.
    let start = Instant::now();
    while claim::take_over_expired(&db).await.expect("take over") == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "A's lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(count(&db, "select count(*) from relay_sending").await, 0);
    let lease_b = Uuid::now_v7();
    let b = claim::claim(&db, lease_b, Duration::from_secs(60), 10, room)
        .await
        .expect("claim B");
    assert_eq!(b.len(), 1, "B claims the taken-over event");
    assert_eq!(b[0].outbox_id, first.outbox_id);
    let recorded_by_b = b_records_a_503(&db, &b[0], lease_b).await;

    // A wakes up with its outcomes.
    let sending = Sending {
        tenant_id: first.tenant_id,
        partner_id: first.partner_id,
        lease_id: lease_a,
    };
    let not_written = claim::record_first(
        &db,
        &[FirstOutcome {
            sending,
            outbox_id: first.outbox_id,
            state: "delivered",
            attempts: 1,
            status: Some(200),
            error: None,
            delay: Duration::ZERO,
        }],
        &[sending],
    )
    .await
    .expect("A delivers late");
    assert_eq!(
        not_written,
        vec![first.outbox_id],
        "A's delivered is refused"
    );
    let gone = claim::first_gone(&db, first, sending, Utc::now())
        .await
        .expect("A's 410 late");
    assert!(!gone, "A's 410 is refused");
    assert_eq!(
        delivery_row(&db, b[0].outbox_id).await,
        recorded_by_b,
        "B's record stands"
    );
    let enabled: bool = sqlx::query_scalar("select enabled from partners where id = $1")
        .bind(first.partner_id)
        .fetch_one(&db)
        .await
        .expect("partner");
    assert!(enabled, "the partner is not paused by A's late 410");
}
