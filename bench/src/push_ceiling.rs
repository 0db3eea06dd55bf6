//! Item 4's ceiling (issue 16): the same writes as `push::raw` — key claim,
//! the change with its compare-and-swap or ATS check, ledger, feed rows,
//! outbox rows, stored response — with the fewest round trips SQL allows.
//! Each mutation is one statement (its writes chained through data-modifying
//! CTEs, so a failed check writes nothing and divides by zero, which aborts
//! the run as `push::raw`'s checks do) plus the stored response, and a
//! transaction of 100 goes to Postgres as one simple-query message: one round
//! trip per transaction instead of one per statement.
//!
//! The same SQL text also runs under `pgbench -M simple` (one statement per
//! round trip, Postgres's own client), printed beside it, so a reader sees
//! which of the two is the faster and that neither is a weak client of ours.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context;
use holdfast_protocol::canonical::request_fingerprint;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::alloc::Who;
use crate::load::Latencies;
use crate::push::{Applied, Mutation, Op, RAW_TX_ITEMS};

/// A SQL string literal.
fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The transactions of `queue`, `RAW_TX_ITEMS` mutations each, as SQL text
/// (`begin; …; commit;`).
pub fn transactions(who: &Who, customer: Uuid, queue: &[Mutation]) -> Vec<String> {
    let mut versions: HashMap<Uuid, i64> = HashMap::new();
    queue
        .chunks(RAW_TX_ITEMS)
        .map(|chunk| {
            let mut sql = String::from("begin;\n");
            for m in chunk {
                let version = versions.entry(m.order).or_insert(0);
                *version += 1;
                sql.push_str(&statement(who, customer, m, *version));
            }
            sql.push_str("commit;\n");
            sql
        })
        .collect()
}

/// One mutation: its writes as one statement, then the stored response
/// (`version` is the order's version after it, as the engine answers).
fn statement(who: &Who, customer: Uuid, m: &Mutation, version: i64) -> String {
    let (t, u, o) = (lit(&who.tenant.to_string()), lit(&who.user.to_string()), {
        lit(&m.order.to_string())
    });
    let key = lit(&m.key);
    let body = m.body(customer);
    let fingerprint = lit(&request_fingerprint(m.method(), &m.path(), &body));
    let claim = format!(
        "k as (insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body) \
         values ({t}, {key}, {fingerprint}, 0, ''::bytea) on conflict (tenant_id, key) do nothing returning 1)"
    );
    // The order's feed row and event, from CTE `b` (its new version and
    // sequence); `facts` is a jsonb expression.
    let order_feed = |event: &str, facts: &str| {
        format!(
            "f as (insert into changes (tenant_id, kind, doc_id, version) select {t}, 'order', {o}, version from b), \
             e as (insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload) \
                   select {t}, '{event}', 'order', {o}, event_seq, \
                          jsonb_build_object('type', '{event}', 'timestamp', now(), 'data', {facts} || \
                              jsonb_build_object('tenant_id', {t}::uuid, 'order_id', {o}::uuid, 'sequence', event_seq, 'version', version)) \
                     from b)"
        )
    };
    let bump = |cas: Option<i64>| {
        let check = cas
            .map(|v| format!(" and version = {v}"))
            .unwrap_or_default();
        format!(
            "b as (update orders set version = version + 1, event_seq = event_seq + 1, updated_at = now(), updated_by = {u} \
                    where tenant_id = {t} and id = {o}{check} and exists (select from k) returning version, event_seq)"
        )
    };
    let facts = |v: serde_json::Value| format!("{}::jsonb", lit(&v.to_string()));
    let (status, writes) = match &m.op {
        Op::Create => (
            201,
            format!(
                "with {claim}, \
                 b as (insert into orders (tenant_id, id, customer_id, customer_po, event_seq, created_by, updated_by) \
                       select {t}, {o}, {c}, 'PO-BENCH', 1, {u}, {u} from k \
                       on conflict (tenant_id, id) do nothing returning version, event_seq), \
                 {feed} \
                 select 1 / (select count(*)::int from b);",
                c = lit(&customer.to_string()),
                feed = order_feed("order.created", &facts(json!({"customer_id": customer}))),
            ),
        ),
        Op::AddLine { line, sku, base } => (
            201,
            format!(
                "with {claim}, {bump}, \
                 l as (insert into order_lines (tenant_id, id, order_id, sku_id, qty_ordered, unit_price) \
                       select {t}, {l}, {o}, {s}, 10, wholesale_price from skus, b where tenant_id = {t} and id = {s}), \
                 {feed} \
                 select 1 / (select count(*)::int from b);",
                bump = bump(Some(*base)),
                l = lit(&line.to_string()),
                s = lit(&sku.to_string()),
                feed = order_feed(
                    "order.updated",
                    &facts(json!({"change": "line_added", "line_id": line, "sku_id": sku, "qty_ordered": 10}))
                ),
            ),
        ),
        Op::Allocate { line, sku } => {
            let (l, s) = (lit(&line.to_string()), lit(&sku.to_string()));
            (
                200,
                format!(
                    "with {claim}, \
                     p as (update sku_positions set allocated = allocated + 2, version = version + 1, \
                                  event_seq = event_seq + 1, updated_at = now() \
                            where tenant_id = {t} and sku_id = {s} and on_hand + on_order - allocated >= 2 \
                              and exists (select from k) \
                            returning on_hand + on_order - allocated as ats, version, event_seq), \
                     m as (update order_lines set qty_allocated = qty_allocated + 2 \
                            where tenant_id = {t} and id = {l} and qty_allocated + 2 <= qty_ordered \
                              and exists (select from p) returning 1), \
                     b as (update orders set version = version + 1, event_seq = event_seq + 1, updated_at = now(), updated_by = {u} \
                            where tenant_id = {t} and id = {o} and exists (select from m) returning version, event_seq), \
                     g as (insert into allocation_ledger (tenant_id, sku_id, order_id, line_id, delta, reason, idempotency_key, created_by) \
                           select {t}, {s}, {o}, {l}, 2, 'allocate', {key}, {u} from b), \
                     pf as (insert into changes (tenant_id, kind, doc_id, version) select {t}, 'sku', {s}, p.version from p, b), \
                     pe as (insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload) \
                            select {t}, 'sku.ats_changed', 'sku', {s}, p.event_seq, \
                                   jsonb_build_object('type', 'sku.ats_changed', 'timestamp', now(), 'data', \
                                       jsonb_build_object('ats', p.ats, 'tenant_id', {t}::uuid, 'sku_id', {s}::uuid, \
                                                          'sequence', p.event_seq, 'version', p.version)) \
                              from p, b), \
                     f as (insert into changes (tenant_id, kind, doc_id, version) select {t}, 'order', {o}, version from b), \
                     e as (insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload) \
                           select {t}, 'order.line_allocated', 'order', {o}, b.event_seq, \
                                  jsonb_build_object('type', 'order.line_allocated', 'timestamp', now(), 'data', \
                                      jsonb_build_object('line_id', {l}::uuid, 'sku_id', {s}::uuid, 'qty', 2, 'ats_after', p.ats, \
                                                         'tenant_id', {t}::uuid, 'order_id', {o}::uuid, \
                                                         'sequence', b.event_seq, 'version', b.version)) \
                             from b, p) \
                     select 1 / (select count(*)::int from b);"
                ),
            )
        }
        Op::ChangeLine { line, base } => (
            200,
            format!(
                "with {claim}, {bump}, \
                 c as (update order_lines set qty_ordered = 12 \
                        where tenant_id = {t} and id = {l} and qty_allocated <= 12 and exists (select from b) returning 1), \
                 {feed} \
                 select 1 / (select (count(*) * (select count(*) from c))::int from b);",
                bump = bump(Some(*base)),
                l = lit(&line.to_string()),
                feed = order_feed(
                    "order.updated",
                    &facts(json!({"change": "line_changed", "line_id": line, "qty_ordered": 12}))
                ),
            ),
        ),
        Op::Patch { base } => (
            200,
            format!(
                "with {claim}, \
                 b as (update orders set notes = 'called back: ship by Friday', version = version + 1, \
                              event_seq = event_seq + 1, updated_at = now(), updated_by = {u} \
                        where tenant_id = {t} and id = {o} and version = {base} and exists (select from k) \
                        returning version, event_seq), \
                 {feed} \
                 select 1 / (select count(*)::int from b);",
                feed = order_feed("order.updated", &facts(json!({"changed": ["notes"]}))),
            ),
        ),
    };
    let response = lit(&json!({"id": m.order, "version": version}).to_string());
    let mut sql = writes;
    let _ = write!(
        sql,
        "\nupdate idempotency_keys set status_code = {status}, response_body = convert_to({response}, 'UTF8') \
         where tenant_id = {t} and key = {key};\n"
    );
    sql
}

/// The ceiling: each transaction of `RAW_TX_ITEMS` as one simple-query
/// message on one connection (SQL text built before the clock starts).
pub async fn one_trip(
    db: &PgPool,
    who: &Who,
    customer: Uuid,
    queue: &[Mutation],
) -> anyhow::Result<Applied> {
    let transactions = transactions(who, customer, queue);
    let mut conn = db.acquire().await?;
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(transactions.len());
    for sql in &transactions {
        let sent = Instant::now();
        sqlx::raw_sql(sql)
            .execute(&mut *conn)
            .await
            .context("one round trip per transaction of 100")?;
        latencies.push(sent.elapsed());
    }
    Ok(Applied {
        elapsed: started.elapsed(),
        count: queue.len(),
        latencies: Latencies::new(latencies),
    })
}

/// The same SQL under `pgbench -M simple`: one client running the whole
/// queue once as its script (one statement per round trip). The time is
/// pgbench's own, from its per-transaction log (connecting excluded).
pub async fn pgbench(
    bin: &std::path::Path,
    url: &str,
    who: &Who,
    customer: Uuid,
    queue: &[Mutation],
) -> anyhow::Result<Applied> {
    let dir = std::env::temp_dir().join(format!("holdfast-pgbench-push-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let script = dir.join("push.sql");
    std::fs::write(&script, transactions(who, customer, queue).concat())?;
    let out = tokio::process::Command::new(bin)
        .args(["-n", "-M", "simple", "-l", "--client=1", "--transactions=1"])
        .arg(format!("--log-prefix={}", dir.join("log").display()))
        .arg("--file")
        .arg(&script)
        .arg(url)
        .output()
        .await
        .with_context(|| format!("running {}", bin.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "pgbench (item 4) failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut elapsed = None;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("log"))
        {
            let text = std::fs::read_to_string(&path)?;
            elapsed = text
                .split_whitespace()
                .nth(2)
                .and_then(|us| us.parse::<u64>().ok())
                .map(Duration::from_micros);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let elapsed = elapsed.context("pgbench (item 4) logged no transaction")?;
    // One script run: no per-transaction latencies to show.
    Ok(Applied {
        elapsed,
        count: queue.len(),
        latencies: Latencies::new(Vec::new()),
    })
}
