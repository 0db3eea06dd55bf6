//! Items 1, 2, 3 and 5: allocation clients. One goes through Holdfast's HTTP
//! API; the others run SQL over sqlx directly, the same statements the mutation
//! engine runs (server/src/engine/{idempotency,allocation}.rs), in these
//! shapes:
//!
//! * [`Shape::OneCommit`], the raw baseline: claim the key, the
//!   conditional update, ledger, outbox, feed row, store the response, one
//!   commit.
//! * [`Shape::ThreeCommits`], the textbook idempotency shape (three commits): claim the key and
//!   commit; do the work and commit; store the response and commit.
//! * [`Shape::EngineSequence`], a diagnostic: every statement the engine runs
//!   for one allocation (auth lookup, `lock_timeout` twice, order lock,
//!   late-retry check, line read, …, order load) in its order, without HTTP.
//! * [`Shape::EngineFolded`], a diagnostic: the same, but the hot-row update
//!   and every write that depends on it folded into one data-modifying CTE, so
//!   the SKU row is locked for 5 statements instead of 12.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use holdfast_protocol::canonical::request_fingerprint;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::load::Client;
use crate::setup::Target;

/// What every allocation client needs to know about the tenant.
#[derive(Debug, Clone)]
pub struct Who {
    pub tenant: Uuid,
    pub user: Uuid,
    /// SHA-256 of the bearer token, for the engine-sequence auth lookup.
    pub token_digest: Vec<u8>,
}

fn pick(rng: &mut StdRng, targets: &[Target]) -> Target {
    targets[rng.random_range(0..targets.len())]
}

// ------------------------------------------------------------------ HTTP

/// Allocates 1 unit per request through `POST …/allocate` with a fresh key.
pub struct HttpAllocate {
    http: reqwest::Client,
    base: Arc<str>,
    bearer: Arc<str>,
    targets: Vec<Target>,
    rng: StdRng,
}

/// The server's lock-wait bound answered 503: nothing was stored, and the
/// same key may be sent again after `retry_after` (a desk does exactly that).
#[derive(Debug)]
pub struct Unavailable {
    pub retry_after: Duration,
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "allocate answered 503, retry after {:?}",
            self.retry_after
        )
    }
}

impl std::error::Error for Unavailable {}

impl HttpAllocate {
    pub fn new(
        http: reqwest::Client,
        base: Arc<str>,
        bearer: Arc<str>,
        targets: Vec<Target>,
        seed: u64,
    ) -> Self {
        HttpAllocate {
            http,
            base,
            bearer,
            targets,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// One allocation with the given key; true if the answer was a replay.
    pub async fn send(&self, t: Target, key: &str) -> anyhow::Result<bool> {
        let response = self
            .http
            .post(format!(
                "{}/v1/orders/{}/lines/{}/allocate",
                self.base, t.order, t.line
            ))
            .header(AUTHORIZATION, &*self.bearer)
            .header(CONTENT_TYPE, "application/json")
            .header("idempotency-key", key)
            .body(r#"{"qty":1}"#)
            .send()
            .await
            .context("POST …/allocate")?;
        let status = response.status();
        let replayed = response.headers().contains_key("idempotent-replayed");
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let body = response.bytes().await?;
        if let (reqwest::StatusCode::SERVICE_UNAVAILABLE, Some(secs)) = (status, retry_after) {
            return Err(Unavailable {
                retry_after: Duration::from_secs(secs),
            }
            .into());
        }
        if status != reqwest::StatusCode::OK {
            anyhow::bail!(
                "allocate answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(replayed)
    }

    pub fn next_target(&mut self) -> Target {
        pick(&mut self.rng, &self.targets)
    }
}

impl Client for HttpAllocate {
    async fn step(&mut self) -> anyhow::Result<()> {
        let t = self.next_target();
        self.send(t, &Uuid::new_v4().to_string()).await?;
        Ok(())
    }
}

// ------------------------------------------------------------------ raw SQL

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    OneCommit,
    ThreeCommits,
    EngineSequence,
    EngineFolded,
}

pub struct RawAllocate {
    db: PgPool,
    who: Arc<Who>,
    shape: Shape,
    targets: Vec<Target>,
    rng: StdRng,
}

impl RawAllocate {
    pub fn new(db: PgPool, who: Arc<Who>, shape: Shape, targets: Vec<Target>, seed: u64) -> Self {
        RawAllocate {
            db,
            who,
            shape,
            targets,
            rng: StdRng::seed_from_u64(seed),
        }
    }
}

impl Client for RawAllocate {
    async fn step(&mut self) -> anyhow::Result<()> {
        let t = pick(&mut self.rng, &self.targets);
        let key = Uuid::new_v4().to_string();
        match self.shape {
            Shape::OneCommit => one_commit(&self.db, &self.who, t, &key).await,
            Shape::ThreeCommits => three_commits(&self.db, &self.who, t, &key).await,
            Shape::EngineSequence => engine_sequence(&self.db, &self.who, t, &key, false).await,
            Shape::EngineFolded => engine_sequence(&self.db, &self.who, t, &key, true).await,
        }
    }
}

fn path(t: Target) -> String {
    format!("/v1/orders/{}/lines/{}/allocate", t.order, t.line)
}

/// The partner event body, built as `db::outbox::enqueue_in_tx` builds it.
pub fn event_payload(
    event_type: &str,
    tenant: Uuid,
    aggregate: (&str, Uuid),
    sequence: i64,
    version: i64,
    facts: Value,
) -> Value {
    let mut data = match facts {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    data.insert("tenant_id".into(), json!(tenant));
    data.insert(format!("{}_id", aggregate.0), json!(aggregate.1));
    data.insert("sequence".into(), json!(sequence));
    data.insert("version".into(), json!(version));
    json!({
        "type": event_type,
        "timestamp": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": data,
    })
}

const CLAIM: &str =
    "insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body)
     values ($1, $2, $3, 0, ''::bytea)
     on conflict (tenant_id, key) do nothing";
const MOVE: &str = "update sku_positions
        set allocated = allocated + $3, version = version + 1, event_seq = event_seq + 1, updated_at = now()
      where tenant_id = $1 and sku_id = $2 and on_hand + on_order - allocated >= $3
      returning on_hand + on_order - allocated, version, event_seq";
const LEDGER: &str = "insert into allocation_ledger (tenant_id, sku_id, order_id, line_id, delta, reason, idempotency_key, created_by)
     values ($1, $2, $3, $4, $5, 'allocate', $6, $7)";
const OUTBOX: &str =
    "insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
     values ($1, $2, $3, $4, $5, $6)";
const CHANGE: &str =
    "insert into changes (tenant_id, kind, doc_id, version) values ($1, $2, $3, $4)";
const STORE: &str = "update idempotency_keys set status_code = $3, response_body = $4
      where tenant_id = $1 and key = $2";

async fn claim(conn: &mut PgConnection, who: &Who, t: Target, key: &str) -> anyhow::Result<()> {
    let fingerprint = request_fingerprint("POST", &path(t), &json!({"qty": 1}));
    let claimed = sqlx::query(CLAIM)
        .bind(who.tenant)
        .bind(key)
        .bind(&fingerprint)
        .execute(&mut *conn)
        .await?;
    anyhow::ensure!(claimed.rows_affected() == 1, "a fresh key was taken");
    Ok(())
}

/// Update, ledger, outbox, feed row: the allocation's writes. Returns the
/// response body to store.
async fn work(conn: &mut PgConnection, who: &Who, t: Target, key: &str) -> anyhow::Result<Vec<u8>> {
    let (ats_after, version, seq): (i64, i64, i64) = sqlx::query_as(MOVE)
        .bind(who.tenant)
        .bind(t.sku)
        .bind(1_i64)
        .fetch_optional(&mut *conn)
        .await?
        .context("the bench SKU ran out of stock")?;
    sqlx::query(LEDGER)
        .bind(who.tenant)
        .bind(t.sku)
        .bind(t.order)
        .bind(t.line)
        .bind(1_i64)
        .bind(key)
        .bind(who.user)
        .execute(&mut *conn)
        .await?;
    let payload = event_payload(
        "sku.ats_changed",
        who.tenant,
        ("sku", t.sku),
        seq,
        version,
        json!({"ats": ats_after}),
    );
    sqlx::query(OUTBOX)
        .bind(who.tenant)
        .bind("sku.ats_changed")
        .bind("sku")
        .bind(t.sku)
        .bind(seq)
        .bind(payload)
        .execute(&mut *conn)
        .await?;
    sqlx::query(CHANGE)
        .bind(who.tenant)
        .bind("sku")
        .bind(t.sku)
        .bind(version)
        .execute(&mut *conn)
        .await?;
    Ok(serde_json::to_vec(
        &json!({"sku_id": t.sku, "line_id": t.line, "ats_after": ats_after}),
    )?)
}

async fn store(conn: &mut PgConnection, who: &Who, key: &str, body: &[u8]) -> anyhow::Result<()> {
    sqlx::query(STORE)
        .bind(who.tenant)
        .bind(key)
        .bind(200_i16)
        .bind(body)
        .execute(conn)
        .await?;
    Ok(())
}

/// `enable_seqscan` for the ceiling's transactions, pgbench's
/// (`PGOPTIONS`, pgbench.rs) and the raw one-commit client's (set in its
/// `BEGIN`, no extra round trip). A prepared statement keeps the generic
/// plan Postgres makes on about its sixth run, for the life of the
/// connection; made while the key table is a few pages (at the start of a
/// run), it is a sequential scan that reads the whole table on every later
/// run as it grows: pgbench spent 0.39 ms of a 0.85 ms transaction storing
/// its response that way (auto_explain showed the scan). The allocation
/// function plans with sequential scans off for the same reason (migration
/// 20261211000100), so the ceiling does too: each of its statements finds
/// its rows by key.
pub const BASELINE_ENABLE_SEQSCAN: &str = "off";

pub async fn one_commit(db: &PgPool, who: &Who, t: Target, key: &str) -> anyhow::Result<()> {
    let mut tx = db
        .begin_with(format!(
            "begin; set local enable_seqscan = {BASELINE_ENABLE_SEQSCAN}"
        ))
        .await?;
    one_commit_in_tx(&mut tx, who, t, key).await?;
    tx.commit().await?;
    Ok(())
}

/// The one-commit allocation's statements, in a transaction the caller
/// opened (`rls.rs` opens it bound to the tenant, or not).
pub async fn one_commit_in_tx(
    conn: &mut PgConnection,
    who: &Who,
    t: Target,
    key: &str,
) -> anyhow::Result<()> {
    claim(conn, who, t, key).await?;
    let body = work(conn, who, t, key).await?;
    store(conn, who, key, &body).await
}

/// The seed's middleware: each phase its own commit (phase 1 and 3 are
/// single autocommitted statements, as `pool.query` runs them).
async fn three_commits(db: &PgPool, who: &Who, t: Target, key: &str) -> anyhow::Result<()> {
    let mut conn = db.acquire().await?;
    claim(&mut conn, who, t, key).await?;
    let mut tx = db.begin().await?;
    let body = work(&mut tx, who, t, key).await?;
    tx.commit().await?;
    store(&mut conn, who, key, &body).await?;
    Ok(())
}

/// Every statement `POST …/allocate` runs, in the engine's order; with
/// `folded`, statements 9–16 become one CTE (the change DESIGN.md's
/// performance notes suggest).
async fn engine_sequence(
    db: &PgPool,
    who: &Who,
    t: Target,
    key: &str,
    folded: bool,
) -> anyhow::Result<()> {
    // 1. The Caller extractor's token lookup (outside the transaction).
    let caller: Option<(Uuid, Uuid, Uuid, String, String)> = sqlx::query_as(
        "select d.tenant_id, d.user_id, d.id, u.role, u.display_name
           from device_tokens d
           join users u on u.tenant_id = d.tenant_id and u.id = d.user_id
          where d.token_sha256 = $1 and d.revoked_at is null",
    )
    .bind(&who.token_digest)
    .fetch_optional(db)
    .await?;
    caller.context("the bench token is unknown")?;
    let tn = who.tenant;
    let mut tx = db.begin().await?;
    // 3–5. Claim the key under a bounded lock wait.
    sqlx::query("select set_config('lock_timeout', $1, true)")
        .bind("2s")
        .execute(&mut *tx)
        .await?;
    claim(&mut tx, who, t, key).await?;
    sqlx::query("select set_config('lock_timeout', '0', true)")
        .execute(&mut *tx)
        .await?;
    // 6–8. Lock the order, the late-retry check, the line.
    let (order_version,): (i64,) =
        sqlx::query_as("select version from orders where tenant_id = $1 and id = $2 for update")
            .bind(tn)
            .bind(t.order)
            .fetch_one(&mut *tx)
            .await?;
    let late: Option<Uuid> = sqlx::query_scalar(
        "select sku_id from allocation_ledger
          where tenant_id = $1 and idempotency_key = $2 and line_id = $3 and order_id = $4",
    )
    .bind(tn)
    .bind(key)
    .bind(t.line)
    .bind(t.order)
    .fetch_optional(&mut *tx)
    .await?;
    anyhow::ensure!(late.is_none(), "a fresh key was in the ledger");
    let _line: (Uuid, i64, i64) = sqlx::query_as(
        "select sku_id, qty_ordered, qty_allocated from order_lines
          where tenant_id = $1 and order_id = $2 and id = $3",
    )
    .bind(tn)
    .bind(t.order)
    .bind(t.line)
    .fetch_one(&mut *tx)
    .await?;
    let ats_after = if folded {
        folded_writes(&mut tx, who, t, key, order_version).await?
    } else {
        sequential_writes(&mut tx, who, t, key, order_version).await?
    };
    // 17–18. Load the order document for the response.
    let order: (
        Uuid,
        Uuid,
        Option<String>,
        String,
        i64,
        chrono::DateTime<Utc>,
        String,
    ) = sqlx::query_as(
        "select o.id, o.customer_id, o.customer_po, o.status, o.version, o.updated_at,
                    u.display_name
               from orders o join users u on u.tenant_id = o.tenant_id and u.id = o.updated_by
              where o.tenant_id = $1 and o.id = $2",
    )
    .bind(tn)
    .bind(t.order)
    .fetch_one(&mut *tx)
    .await?;
    let lines: Vec<(Uuid, Uuid, Uuid, i64, i64)> = sqlx::query_as(
        "select order_id, id, sku_id, qty_ordered, qty_allocated
           from order_lines where tenant_id = $1 and order_id = any($2)
          order by ordinal",
    )
    .bind(tn)
    .bind(vec![t.order])
    .fetch_all(&mut *tx)
    .await?;
    let body = serde_json::to_vec(&json!({
        "order": {
            "id": order.0, "customer_id": order.1, "customer_po": order.2, "status": order.3,
            "version": order.4, "updated_at": order.5, "updated_by_name": order.6,
            "lines": lines.iter().map(|l| json!({"id": l.1, "sku_id": l.2, "qty_ordered": l.3, "qty_allocated": l.4})).collect::<Vec<_>>(),
        },
        "ats_after": ats_after,
    }))?;
    // 19–20.
    store(&mut tx, who, key, &body).await?;
    tx.commit().await?;
    Ok(())
}

/// Statements 9–16 as the engine runs them today.
async fn sequential_writes(
    conn: &mut PgConnection,
    who: &Who,
    t: Target,
    key: &str,
    order_version: i64,
) -> anyhow::Result<i64> {
    let tn = who.tenant;
    let (ats_after, sku_version, sku_seq): (i64, i64, i64) = sqlx::query_as(MOVE)
        .bind(tn)
        .bind(t.sku)
        .bind(1_i64)
        .fetch_optional(&mut *conn)
        .await?
        .context("the bench SKU ran out of stock")?;
    sqlx::query(
        "update order_lines set qty_allocated = qty_allocated + $3 where tenant_id = $1 and id = $2",
    )
    .bind(tn)
    .bind(t.line)
    .bind(1_i64)
    .execute(&mut *conn)
    .await?;
    let (version, seq): (i64, i64) = sqlx::query_as(
        "update orders set version = version + 1, event_seq = event_seq + $4,
                updated_at = now(), updated_by = $5
          where tenant_id = $1 and id = $2 and version = $3
          returning version, event_seq - $4 + 1",
    )
    .bind(tn)
    .bind(t.order)
    .bind(order_version)
    .bind(1_i64)
    .bind(who.user)
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query(CHANGE)
        .bind(tn)
        .bind("order")
        .bind(t.order)
        .bind(version)
        .execute(&mut *conn)
        .await?;
    sqlx::query(LEDGER)
        .bind(tn)
        .bind(t.sku)
        .bind(t.order)
        .bind(t.line)
        .bind(1_i64)
        .bind(key)
        .bind(who.user)
        .execute(&mut *conn)
        .await?;
    sqlx::query(CHANGE)
        .bind(tn)
        .bind("sku")
        .bind(t.sku)
        .bind(sku_version)
        .execute(&mut *conn)
        .await?;
    let sku_event = event_payload(
        "sku.ats_changed",
        tn,
        ("sku", t.sku),
        sku_seq,
        sku_version,
        json!({"ats": ats_after}),
    );
    sqlx::query(OUTBOX)
        .bind(tn)
        .bind("sku.ats_changed")
        .bind("sku")
        .bind(t.sku)
        .bind(sku_seq)
        .bind(sku_event)
        .execute(&mut *conn)
        .await?;
    let order_event = event_payload(
        "order.line_allocated",
        tn,
        ("order", t.order),
        seq,
        version,
        json!({"line_id": t.line, "sku_id": t.sku, "qty": 1, "ats_after": ats_after}),
    );
    sqlx::query(OUTBOX)
        .bind(tn)
        .bind("order.line_allocated")
        .bind("order")
        .bind(t.order)
        .bind(seq)
        .bind(order_event)
        .execute(&mut *conn)
        .await?;
    Ok(ats_after)
}

/// Statements 9–16 as one statement: every write is conditional on the
/// hot-row update having matched, so "not enough stock" still writes nothing
/// (the engine's rule that a stored rejection stores nothing else holds).
/// The event bodies are built in SQL because they need the update's results.
pub const FOLDED_ALLOCATE: &str = "
with pos as (
    update sku_positions
       set allocated = allocated + $3, version = version + 1, event_seq = event_seq + 1, updated_at = now()
     where tenant_id = $1 and sku_id = $2 and on_hand + on_order - allocated >= $3
    returning on_hand + on_order - allocated as ats_after, version, event_seq
), line as (
    update order_lines set qty_allocated = qty_allocated + $3
     where tenant_id = $1 and id = $5 and exists (select 1 from pos)
), ord as (
    update orders set version = version + 1, event_seq = event_seq + 1, updated_at = now(), updated_by = $7
     where tenant_id = $1 and id = $4 and version = $8 and exists (select 1 from pos)
    returning version, event_seq
), ledger as (
    insert into allocation_ledger (tenant_id, sku_id, order_id, line_id, delta, reason, idempotency_key, created_by)
    select $1, $2, $4, $5, $3, 'allocate', $6, $7 from pos
), feed as (
    insert into changes (tenant_id, kind, doc_id, version)
    select $1, 'order', $4, ord.version from ord
    union all
    select $1, 'sku', $2, pos.version from pos
), events as (
    insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
    select $1, 'sku.ats_changed', 'sku', $2, pos.event_seq,
           jsonb_build_object('type', 'sku.ats_changed', 'timestamp', $9::text,
               'data', jsonb_build_object('ats', pos.ats_after, 'tenant_id', $1, 'sku_id', $2,
                                          'sequence', pos.event_seq, 'version', pos.version))
      from pos
    union all
    select $1, 'order.line_allocated', 'order', $4, ord.event_seq,
           jsonb_build_object('type', 'order.line_allocated', 'timestamp', $9::text,
               'data', jsonb_build_object('line_id', $5, 'sku_id', $2, 'qty', $3, 'ats_after', pos.ats_after,
                                          'tenant_id', $1, 'order_id', $4,
                                          'sequence', ord.event_seq, 'version', ord.version))
      from pos, ord
)
select pos.ats_after, ord.version from pos, ord";

async fn folded_writes(
    conn: &mut PgConnection,
    who: &Who,
    t: Target,
    key: &str,
    order_version: i64,
) -> anyhow::Result<i64> {
    let (ats_after, _version): (i64, i64) = sqlx::query_as(FOLDED_ALLOCATE)
        .bind(who.tenant)
        .bind(t.sku)
        .bind(1_i64)
        .bind(t.order)
        .bind(t.line)
        .bind(key)
        .bind(who.user)
        .bind(order_version)
        .bind(Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .fetch_optional(&mut *conn)
        .await?
        .context("the folded allocation matched no row")?;
    Ok(ats_after)
}
