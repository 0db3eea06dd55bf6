//! Item 6: the relay against a loopback partner that verifies every
//! signature, next to the bare HTTP ceiling — the same signed payloads POSTed
//! to the same partner by a plain loop with no database, at the relay's
//! concurrency towards one partner.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use holdfast_protocol::webhook;
use reqwest::header::AUTHORIZATION;
use sqlx::PgPool;
use uuid::Uuid;

use crate::load::Latencies;
use crate::progress;

/// The partner: verifies, dedupes on `webhook-id`, remembers when each event
/// first arrived.
pub struct Partner {
    pub url: String,
    secret: OnceLock<(String, Vec<u8>)>,
    seen: Mutex<HashMap<String, Instant>>,
    unique: AtomicUsize,
    rejected: AtomicUsize,
}

impl Partner {
    /// Serves the partner on 127.0.0.1:0 (on the bench's runtime).
    pub async fn start() -> anyhow::Result<Arc<Partner>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let partner = Arc::new(Partner {
            url: format!("http://{}/hook", listener.local_addr()?),
            secret: OnceLock::new(),
            seen: Mutex::new(HashMap::new()),
            unique: AtomicUsize::new(0),
            rejected: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(partner.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                progress::step(format_args!("the bench partner stopped: {e}"));
            }
        });
        Ok(partner)
    }

    pub fn set_secret(&self, secret: &str) -> anyhow::Result<()> {
        let key = webhook::parse_secret(secret)?;
        self.secret
            .set((secret.to_owned(), key))
            .map_err(|_| anyhow::anyhow!("the partner secret was already set"))
    }

    /// The `whsec_…` secret the server issued at registration.
    pub fn secret_text(&self) -> Option<&str> {
        self.secret.get().map(|(text, _)| text.as_str())
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn reset(&self) {
        self.seen().clear();
        self.unique.store(0, Ordering::SeqCst);
    }

    pub fn unique(&self) -> usize {
        self.unique.load(Ordering::SeqCst)
    }

    pub fn rejected(&self) -> usize {
        self.rejected.load(Ordering::SeqCst)
    }

    pub fn arrival(&self, id: &str) -> Option<Instant> {
        self.seen().get(id).copied()
    }

    pub fn last_arrival(&self) -> Option<Instant> {
        self.seen().values().max().copied()
    }

    /// Waits until `n` distinct events arrived, or fails at `deadline`.
    pub async fn wait_for(
        &self,
        n: usize,
        what: &'static str,
        deadline: Duration,
    ) -> anyhow::Result<()> {
        let until = Instant::now() + deadline;
        let mut ticker = progress::Ticker::new(what, n);
        while self.unique() < n {
            anyhow::ensure!(
                Instant::now() < until,
                "{what}: only {} of {n} events arrived within {deadline:?} ({} rejected)",
                self.unique(),
                self.rejected()
            );
            ticker.tick(self.unique());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }
}

async fn receive(State(p): State<Arc<Partner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let arrived = Instant::now();
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let (id, timestamp, signature) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    );
    let Some((_, secret)) = p.secret.get() else {
        return StatusCode::SERVICE_UNAVAILABLE;
    };
    let verified = webhook::verify(
        &[secret.as_slice()],
        &id,
        &timestamp,
        &signature,
        &body,
        chrono::Utc::now().timestamp(),
        webhook::DEFAULT_TOLERANCE_SECS,
    );
    if verified.is_err() {
        p.rejected.fetch_add(1, Ordering::SeqCst);
        return StatusCode::UNAUTHORIZED;
    }
    let mut seen = p.seen();
    if let std::collections::hash_map::Entry::Vacant(slot) = seen.entry(id) {
        slot.insert(arrived);
        p.unique.fetch_add(1, Ordering::SeqCst);
    }
    StatusCode::NO_CONTENT
}

/// Registers the partner through the admin API (as the operator) for every
/// `order.*` event; returns its signing secret.
pub async fn register(
    http: &reqwest::Client,
    base: &str,
    operator_token: &str,
    partner: &Partner,
) -> anyhow::Result<()> {
    #[derive(serde::Deserialize)]
    struct Created {
        secret: String,
    }
    let response = http
        .post(format!("{base}/v1/admin/partners"))
        .header(AUTHORIZATION, format!("Bearer {operator_token}"))
        .json(&serde_json::json!({
            "name": "bench partner", "url": partner.url, "event_types": ["order.*"],
        }))
        .send()
        .await?;
    let status = response.status();
    anyhow::ensure!(
        status == reqwest::StatusCode::CREATED,
        "registering the partner answered {status}: {}",
        response.text().await.unwrap_or_default()
    );
    let created: Created = response.json().await?;
    partner.set_secret(&created.secret)
}

const EVENT_SQL: &str = "
insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
select $1, 'order.updated', 'order', a.id, 1,
       jsonb_build_object('type', 'order.updated', 'timestamp', $3::text,
           'data', jsonb_build_object('change', 'line_changed', 'line_id', gen_random_uuid(),
                                      'sku_id', gen_random_uuid(), 'qty_ordered', 12,
                                      'tenant_id', $1, 'order_id', a.id, 'sequence', 1, 'version', 2))
  from (select gen_random_uuid() as id from generate_series(1, $2)) as a
returning id";

/// Commits `n` `order.updated` events in one transaction (they look like
/// what a line edit enqueues); returns their outbox ids.
pub async fn enqueue(db: &PgPool, tenant: Uuid, n: usize) -> anyhow::Result<Vec<i64>> {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    Ok(sqlx::query_scalar(EVENT_SQL)
        .bind(tenant)
        .bind(n as i64)
        .bind(now)
        .fetch_all(db)
        .await?)
}

/// The bodies of the given events, as the relay sends them.
pub async fn payloads(db: &PgPool, ids: &[i64]) -> anyhow::Result<Vec<String>> {
    Ok(
        sqlx::query_scalar("select payload::text from outbox where id = any($1) order by id")
            .bind(ids)
            .fetch_all(db)
            .await?,
    )
}

/// The ceiling: sign and POST every body with `concurrency` loops sharing
/// the list; no database. Returns the elapsed time.
pub async fn bare_http(
    partner: &Arc<Partner>,
    secret_of: &str,
    bodies: Arc<Vec<String>>,
    concurrency: usize,
    tag: &str,
) -> anyhow::Result<Duration> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(15))
        .build()?;
    let key = Arc::new(webhook::parse_secret(secret_of)?);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (http, key, next, bodies, url, tag) = (
            http.clone(),
            key.clone(),
            next.clone(),
            bodies.clone(),
            partner.url.clone(),
            tag.to_owned(),
        );
        tasks.spawn(async move {
            for _ in 0..bodies.len() {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(body) = bodies.get(i) else { break };
                send_signed(&http, &url, &key, &format!("evt_{tag}{i}"), body).await?;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a baseline sender panicked")??;
    }
    Ok(started.elapsed())
}

/// One delivery, exactly as the relay makes it (headers per API.md).
pub async fn send_signed(
    http: &reqwest::Client,
    url: &str,
    key: &[u8],
    msg_id: &str,
    body: &str,
) -> anyhow::Result<()> {
    let timestamp = chrono::Utc::now().timestamp();
    let signature = webhook::sign(key, msg_id, timestamp, body.as_bytes());
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", msg_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .header("idempotency-key", msg_id)
        .body(body.to_owned())
        .send()
        .await?;
    anyhow::ensure!(
        response.status().is_success(),
        "the partner answered {}",
        response.status()
    );
    Ok(())
}

/// Commit → arrival at the partner for events committed one at a time,
/// `interval` apart, while a relay runs.
pub async fn commit_to_arrival(
    db: &PgPool,
    tenant: Uuid,
    partner: &Partner,
    events: usize,
    interval: Duration,
) -> anyhow::Result<Latencies> {
    let mut committed = Vec::with_capacity(events);
    for _ in 0..events {
        let ids = enqueue(db, tenant, 1).await?;
        let at = Instant::now();
        committed.push((ids.first().copied().context("no event id")?, at));
        tokio::time::sleep(interval).await;
    }
    partner
        .wait_for(events, "item 6 latency events", Duration::from_secs(120))
        .await?;
    let mut samples = Vec::with_capacity(events);
    for (id, at) in committed {
        let arrived = partner
            .arrival(&format!("evt_{id}"))
            .with_context(|| format!("event {id} never arrived"))?;
        samples.push(arrived.saturating_duration_since(at));
    }
    Ok(Latencies::new(samples))
}

/// The ceiling's latency: send → arrival for the same pacing, no database.
pub async fn bare_latency(
    partner: &Partner,
    secret: &str,
    body: &str,
    events: usize,
    interval: Duration,
) -> anyhow::Result<Latencies> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    let key = webhook::parse_secret(secret)?;
    let mut samples = Vec::with_capacity(events);
    for i in 0..events {
        let id = format!("evt_lat{i}");
        let sent = Instant::now();
        send_signed(&http, &partner.url, &key, &id, body).await?;
        let arrived = partner.arrival(&id).context("baseline event not seen")?;
        samples.push(arrived.saturating_duration_since(sent));
        tokio::time::sleep(interval).await;
    }
    Ok(Latencies::new(samples))
}
