//! Item 4: one reconnecting desk's queue of mutations (creates, lines,
//! allocations, edits over many orders), applied three ways: `POST
//! /v1/sync/push` in batches of 500, the same mutations as single REST calls,
//! and the raw ceiling — the same writes over sqlx in transactions of 100
//! (the server's batch size), with and without a savepoint per item.

use std::time::{Duration, Instant};

use anyhow::Context;
use holdfast_protocol::canonical::request_fingerprint;
use holdfast_protocol::model::{PushItem, PushRequest, PushResponse};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::header::AUTHORIZATION;
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::alloc::{event_payload, Who};
use crate::load::Latencies;
use crate::progress;

/// Mutations per order: create, 16 × (add line, allocate, change line), one
/// header edit.
pub const PER_ORDER: usize = 50;
const LINES: usize = 16;
/// The server's batch push limit (API.md: 1–500 items).
const PUSH_CHUNK: usize = 500;
/// The server commits every 100 items (engine/batch.rs); so does the ceiling.
pub(crate) const RAW_TX_ITEMS: usize = 100;

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Create,
    AddLine { line: Uuid, sku: Uuid, base: i64 },
    Allocate { line: Uuid, sku: Uuid },
    ChangeLine { line: Uuid, base: i64 },
    Patch { base: i64 },
}

#[derive(Debug, Clone)]
pub struct Mutation {
    pub(crate) key: String,
    pub(crate) order: Uuid,
    pub(crate) op: Op,
}

impl Mutation {
    pub(crate) fn method(&self) -> &'static str {
        match self.op {
            Op::ChangeLine { .. } | Op::Patch { .. } => "PATCH",
            _ => "POST",
        }
    }

    pub(crate) fn path(&self) -> String {
        let o = self.order;
        match &self.op {
            Op::Create => "/v1/orders".to_owned(),
            Op::AddLine { .. } => format!("/v1/orders/{o}/lines"),
            Op::Allocate { line, .. } => format!("/v1/orders/{o}/lines/{line}/allocate"),
            Op::ChangeLine { line, .. } => format!("/v1/orders/{o}/lines/{line}"),
            Op::Patch { .. } => format!("/v1/orders/{o}"),
        }
    }

    pub(crate) fn body(&self, customer: Uuid) -> Value {
        match &self.op {
            Op::Create => {
                json!({"id": self.order, "customer_id": customer, "customer_po": "PO-BENCH"})
            }
            Op::AddLine { line, sku, base } => {
                json!({"id": line, "sku_id": sku, "qty_ordered": 10, "base_version": base})
            }
            Op::Allocate { .. } => json!({"qty": 2}),
            Op::ChangeLine { base, .. } => json!({"base_version": base, "qty_ordered": 12}),
            Op::Patch { base } => {
                json!({"base_version": base, "set": {"notes": "called back: ship by Friday"}})
            }
        }
    }
}

/// `orders` orders' worth of a desk's queue, in the order the desk typed it.
/// The same `seed` gives the same SKUs, so the variants apply equal work.
pub fn workload(orders: usize, skus: &[Uuid], seed: u64) -> Vec<Mutation> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(orders * PER_ORDER);
    for _ in 0..orders {
        let order = Uuid::new_v4();
        let mut version = 1;
        let push = |op: Op, out: &mut Vec<Mutation>| {
            out.push(Mutation {
                key: Uuid::new_v4().to_string(),
                order,
                op,
            })
        };
        push(Op::Create, &mut out);
        for _ in 0..LINES {
            let line = Uuid::new_v4();
            let sku = skus[rng.random_range(0..skus.len())];
            push(
                Op::AddLine {
                    line,
                    sku,
                    base: version,
                },
                &mut out,
            );
            push(Op::Allocate { line, sku }, &mut out);
            push(
                Op::ChangeLine {
                    line,
                    base: version + 2,
                },
                &mut out,
            );
            version += 3;
        }
        push(Op::Patch { base: version }, &mut out);
    }
    out
}

/// What applying a queue measured.
pub struct Applied {
    pub elapsed: Duration,
    pub count: usize,
    /// Per request (REST: per mutation; push: per batch of 500).
    pub latencies: Latencies,
}

impl Applied {
    pub fn rate(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64()
    }
}

/// (a): every mutation as its own REST call, one after another.
pub async fn rest(
    http: &reqwest::Client,
    base: &str,
    bearer: &str,
    customer: Uuid,
    queue: &[Mutation],
) -> anyhow::Result<Applied> {
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(queue.len());
    let mut ticker = progress::Ticker::new("item 4 REST calls", queue.len());
    for m in queue {
        let sent = Instant::now();
        let method = reqwest::Method::from_bytes(m.method().as_bytes())?;
        let response = http
            .request(method, format!("{base}{}", m.path()))
            .header(AUTHORIZATION, bearer)
            .header("idempotency-key", &m.key)
            .json(&m.body(customer))
            .send()
            .await
            .with_context(|| format!("{} {}", m.method(), m.path()))?;
        let status = response.status();
        let body = response.bytes().await?;
        anyhow::ensure!(
            status.is_success(),
            "{} {} answered {status}: {}",
            m.method(),
            m.path(),
            String::from_utf8_lossy(&body)
        );
        latencies.push(sent.elapsed());
        ticker.tick(latencies.len());
    }
    Ok(Applied {
        elapsed: started.elapsed(),
        count: queue.len(),
        latencies: Latencies::new(latencies),
    })
}

/// The desk's transport: `POST /v1/sync/push` with 500 mutations a request.
pub async fn push(
    http: &reqwest::Client,
    base: &str,
    bearer: &str,
    customer: Uuid,
    queue: &[Mutation],
) -> anyhow::Result<Applied> {
    let requests: Vec<Vec<u8>> = queue
        .chunks(PUSH_CHUNK)
        .map(|chunk| {
            serde_json::to_vec(&PushRequest {
                mutations: chunk
                    .iter()
                    .map(|m| PushItem {
                        idempotency_key: m.key.clone(),
                        method: m.method().to_owned(),
                        path: m.path(),
                        body: m.body(customer),
                    })
                    .collect(),
            })
        })
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    let mut latencies = Vec::new();
    for body in requests {
        let sent = Instant::now();
        let response = http
            .post(format!("{base}/v1/sync/push"))
            .header(AUTHORIZATION, bearer)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .context("POST /v1/sync/push")?;
        let status = response.status();
        anyhow::ensure!(status.is_success(), "push answered {status}");
        let answer: PushResponse = response.json().await?;
        if let Some(bad) = answer
            .results
            .iter()
            .find(|r| !(200..300).contains(&r.status))
        {
            anyhow::bail!("a pushed mutation answered {}: {}", bad.status, bad.body);
        }
        latencies.push(sent.elapsed());
    }
    Ok(Applied {
        elapsed: started.elapsed(),
        count: queue.len(),
        latencies: Latencies::new(latencies),
    })
}

/// (b): the raw ceiling. The same writes as the engine (key claim, the
/// change with its compare-and-swap or ATS check, ledger, feed rows, outbox
/// rows, stored response) with nothing else: no order loads, no lock_timeout
/// juggling, no late-retry lookups. `savepoints` wraps each item in one, as
/// the server does.
pub async fn raw(
    db: &PgPool,
    who: &Who,
    customer: Uuid,
    queue: &[Mutation],
    savepoints: bool,
) -> anyhow::Result<Applied> {
    let started = Instant::now();
    let mut latencies = Vec::new();
    for chunk in queue.chunks(RAW_TX_ITEMS) {
        let sent = Instant::now();
        let mut tx = db.begin().await?;
        for m in chunk {
            if savepoints {
                sqlx::query("savepoint item").execute(&mut *tx).await?;
            }
            apply_raw(&mut tx, who, customer, m)
                .await
                .with_context(|| format!("raw {} {}", m.method(), m.path()))?;
            if savepoints {
                sqlx::query("release savepoint item")
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        latencies.push(sent.elapsed());
    }
    Ok(Applied {
        elapsed: started.elapsed(),
        count: queue.len(),
        latencies: Latencies::new(latencies),
    })
}

async fn apply_raw(
    conn: &mut PgConnection,
    who: &Who,
    customer: Uuid,
    m: &Mutation,
) -> anyhow::Result<()> {
    let tn = who.tenant;
    let body = m.body(customer);
    let fingerprint = request_fingerprint(m.method(), &m.path(), &body);
    let claimed = sqlx::query(
        "insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body)
         values ($1, $2, $3, 0, ''::bytea) on conflict (tenant_id, key) do nothing",
    )
    .bind(tn)
    .bind(&m.key)
    .bind(&fingerprint)
    .execute(&mut *conn)
    .await?;
    anyhow::ensure!(claimed.rows_affected() == 1, "key taken");
    let order = m.order;
    let (status, version) = match &m.op {
        Op::Create => {
            let inserted = sqlx::query(
                "insert into orders (tenant_id, id, customer_id, customer_po, event_seq, created_by, updated_by)
                 values ($1, $2, $3, 'PO-BENCH', 1, $4, $4) on conflict (tenant_id, id) do nothing",
            )
            .bind(tn)
            .bind(order)
            .bind(customer)
            .bind(who.user)
            .execute(&mut *conn)
            .await?;
            anyhow::ensure!(inserted.rows_affected() == 1, "order exists");
            feed_and_event(
                conn,
                who,
                order,
                1,
                1,
                "order.created",
                json!({"customer_id": customer}),
            )
            .await?;
            (201, 1)
        }
        Op::AddLine { line, sku, base } => {
            let (version, seq) = bump(conn, who, order, Some(*base)).await?;
            sqlx::query(
                "insert into order_lines (tenant_id, id, order_id, sku_id, qty_ordered, unit_price)
                 select $1, $2, $3, $4, 10, wholesale_price from skus
                  where tenant_id = $1 and id = $4",
            )
            .bind(tn)
            .bind(line)
            .bind(order)
            .bind(sku)
            .execute(&mut *conn)
            .await?;
            let facts =
                json!({"change": "line_added", "line_id": line, "sku_id": sku, "qty_ordered": 10});
            feed_and_event(conn, who, order, version, seq, "order.updated", facts).await?;
            (201, version)
        }
        Op::Allocate { line, sku } => {
            let (ats_after, sku_version, sku_seq): (i64, i64, i64) = sqlx::query_as(
                "update sku_positions
                    set allocated = allocated + 2, version = version + 1, event_seq = event_seq + 1, updated_at = now()
                  where tenant_id = $1 and sku_id = $2 and on_hand + on_order - allocated >= 2
                  returning on_hand + on_order - allocated, version, event_seq",
            )
            .bind(tn)
            .bind(sku)
            .fetch_optional(&mut *conn)
            .await?
            .context("out of stock")?;
            let moved = sqlx::query(
                "update order_lines set qty_allocated = qty_allocated + 2
                  where tenant_id = $1 and id = $2 and qty_allocated + 2 <= qty_ordered",
            )
            .bind(tn)
            .bind(line)
            .execute(&mut *conn)
            .await?;
            anyhow::ensure!(moved.rows_affected() == 1, "over-allocation");
            let (version, seq) = bump(conn, who, order, None).await?;
            sqlx::query(
                "insert into allocation_ledger (tenant_id, sku_id, order_id, line_id, delta, reason, idempotency_key, created_by)
                 values ($1, $2, $3, $4, 2, 'allocate', $5, $6)",
            )
            .bind(tn)
            .bind(sku)
            .bind(order)
            .bind(line)
            .bind(&m.key)
            .bind(who.user)
            .execute(&mut *conn)
            .await?;
            sqlx::query(
                "insert into changes (tenant_id, kind, doc_id, version) values ($1, 'sku', $2, $3)",
            )
            .bind(tn)
            .bind(sku)
            .bind(sku_version)
            .execute(&mut *conn)
            .await?;
            insert_event(
                conn,
                tn,
                "sku.ats_changed",
                ("sku", *sku),
                sku_seq,
                sku_version,
                json!({"ats": ats_after}),
            )
            .await?;
            let facts = json!({"line_id": line, "sku_id": sku, "qty": 2, "ats_after": ats_after});
            feed_and_event(
                conn,
                who,
                order,
                version,
                seq,
                "order.line_allocated",
                facts,
            )
            .await?;
            (200, version)
        }
        Op::ChangeLine { line, base } => {
            let (version, seq) = bump(conn, who, order, Some(*base)).await?;
            let changed = sqlx::query(
                "update order_lines set qty_ordered = 12
                  where tenant_id = $1 and id = $2 and qty_allocated <= 12",
            )
            .bind(tn)
            .bind(line)
            .execute(&mut *conn)
            .await?;
            anyhow::ensure!(changed.rows_affected() == 1, "line not changed");
            let facts = json!({"change": "line_changed", "line_id": line, "qty_ordered": 12});
            feed_and_event(conn, who, order, version, seq, "order.updated", facts).await?;
            (200, version)
        }
        Op::Patch { base } => {
            let (version, seq): (i64, i64) = sqlx::query_as(
                "update orders set notes = 'called back: ship by Friday', version = version + 1,
                        event_seq = event_seq + 1, updated_at = now(), updated_by = $4
                  where tenant_id = $1 and id = $2 and version = $3
                  returning version, event_seq",
            )
            .bind(tn)
            .bind(order)
            .bind(base)
            .bind(who.user)
            .fetch_optional(&mut *conn)
            .await?
            .context("version conflict")?;
            let facts = json!({"changed": ["notes"]});
            feed_and_event(conn, who, order, version, seq, "order.updated", facts).await?;
            (200, version)
        }
    };
    let response = serde_json::to_vec(&json!({"id": order, "version": version}))?;
    sqlx::query(
        "update idempotency_keys set status_code = $3, response_body = $4 where tenant_id = $1 and key = $2",
    )
    .bind(tn)
    .bind(&m.key)
    .bind(status as i16)
    .bind(response)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The order's compare-and-swap (or unconditional bump for allocations):
/// returns (new version, its event sequence).
async fn bump(
    conn: &mut PgConnection,
    who: &Who,
    order: Uuid,
    base: Option<i64>,
) -> anyhow::Result<(i64, i64)> {
    sqlx::query_as(
        "update orders set version = version + 1, event_seq = event_seq + 1,
                updated_at = now(), updated_by = $4
          where tenant_id = $1 and id = $2 and ($3::bigint is null or version = $3)
          returning version, event_seq",
    )
    .bind(who.tenant)
    .bind(order)
    .bind(base)
    .bind(who.user)
    .fetch_optional(conn)
    .await?
    .context("version conflict")
}

async fn feed_and_event(
    conn: &mut PgConnection,
    who: &Who,
    order: Uuid,
    version: i64,
    seq: i64,
    event_type: &str,
    facts: Value,
) -> anyhow::Result<()> {
    sqlx::query(
        "insert into changes (tenant_id, kind, doc_id, version) values ($1, 'order', $2, $3)",
    )
    .bind(who.tenant)
    .bind(order)
    .bind(version)
    .execute(&mut *conn)
    .await?;
    insert_event(
        conn,
        who.tenant,
        event_type,
        ("order", order),
        seq,
        version,
        facts,
    )
    .await
}

async fn insert_event(
    conn: &mut PgConnection,
    tenant: Uuid,
    event_type: &str,
    aggregate: (&str, Uuid),
    seq: i64,
    version: i64,
    facts: Value,
) -> anyhow::Result<()> {
    let payload = event_payload(event_type, tenant, aggregate, seq, version, facts);
    sqlx::query(
        "insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
         values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(tenant)
    .bind(event_type)
    .bind(aggregate.0)
    .bind(aggregate.1)
    .bind(seq)
    .bind(payload)
    .execute(conn)
    .await?;
    Ok(())
}
