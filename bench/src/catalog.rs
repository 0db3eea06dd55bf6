//! Item 11: the SKU CSV import (API.md v1.1) of 100,000 rows in one request.
//!
//! - New SKUs: `POST /v1/admin/skus/import` of a 100,000-row file against
//!   Postgres's own bulk path, `COPY … FROM STDIN`, writing the same rows into
//!   the same four tables (skus, sku_positions, changes, outbox) in one
//!   transaction. COPY does no parsing of CSV into typed rows in our process,
//!   no matching and no checks: the ceiling for these writes.
//! - Hot rows: a file changing 100,000 prices, among them the price of the SKU
//!   one desk is allocating from as fast as it can. The import holds that
//!   SKU's position row only for its last statements (master/catalog.rs);
//!   the row shows what an allocation waits for while it runs: its worst and
//!   99th-percentile latency during the import against the same allocation
//!   loop with no import running.
//!
//! `--only 11` runs just this; it runs last otherwise (it adds 200,000 SKUs
//! to the bench tenant).

use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::PgPool;
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::alloc::{HttpAllocate, Unavailable};
use crate::items::Ctx;
use crate::load::Latencies;
use crate::progress;
use crate::report::{rate, Row};

pub const ITEM: u8 = 11;
const ROWS: usize = 100_000;

pub async fn run(ctx: &Ctx, rows: &mut Vec<Row>, notes: &mut Vec<String>) -> anyhow::Result<()> {
    if !(ctx.plan.only.is_empty() || ctx.plan.only.contains(&ITEM)) {
        return Ok(());
    }
    progress::step(format_args!(
        "item {ITEM}: importing {ROWS} new SKUs (HTTP) and COPYing as many"
    ));
    let file = catalog("Bench Import", ROWS, 2000);
    let started = Instant::now();
    let summary = import(ctx, &file).await?;
    let http = started.elapsed();
    anyhow::ensure!(
        summary["created"] == ROWS as u64,
        "the import created {}, not {ROWS}",
        summary["created"]
    );
    let copy = copy_baseline(&ctx.pool, ctx.who.tenant).await?;
    rows.push(Row {
        item: format!("{ITEM}. catalog import"),
        what: format!("{ROWS} new SKUs, one text/csv request"),
        holdfast: format!(
            "{:.2} s ({})",
            http.as_secs_f64(),
            rate(ROWS as f64 / http.as_secs_f64())
        ),
        baseline: format!(
            "COPY of the same rows into the same 4 tables, 1 tx: {:.2} s",
            copy.as_secs_f64()
        ),
        ratio: Some(copy.as_secs_f64() / http.as_secs_f64()),
        ..Row::default()
    });

    progress::step(format_args!(
        "item {ITEM}: {ROWS} price changes while a desk allocates from one of those SKUs"
    ));
    let hot = ctx.fixture.hot_target(0);
    let (style, color, size): (String, String, String) =
        sqlx::query_as("select style, color, size from skus where id = $1")
            .bind(hot.sku)
            .fetch_one(&ctx.pool)
            .await?;
    let mut changed = catalog("Bench Import", ROWS - 1, 2100);
    changed.push_str(&format!(
        "{},{},{},{},12345,24690,\n",
        "",
        quote(&style),
        quote(&color),
        quote(&size)
    ));

    let quiet = allocating(ctx, hot).await?;
    let (done_tx, done_rx) = oneshot::channel();
    let loop_ctx = (ctx.http.clone(), ctx.base.clone(), ctx.bearer.clone());
    let allocations = tokio::spawn(async move {
        let client = HttpAllocate::new(loop_ctx.0, loop_ctx.1, loop_ctx.2, vec![hot], 11);
        let mut samples = Vec::new();
        let mut retried = 0;
        let mut done = done_rx;
        loop {
            let t0 = Instant::now();
            retried += allocate_until_stored(&client, hot).await?;
            samples.push(t0.elapsed());
            if done.try_recv().is_ok() {
                return anyhow::Ok((Latencies::new(samples), retried));
            }
        }
    });
    // Let the loop run a moment before the import starts, so "during" is.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let summary = import(ctx, &changed).await?;
    let updating = started.elapsed();
    let _ = done_tx.send(());
    let (during, retried) = allocations.await.context("allocation loop")??;
    anyhow::ensure!(
        summary["updated"] == ROWS as u64,
        "the import updated {}, not {ROWS}",
        summary["updated"]
    );
    rows.push(Row {
        item: format!("{ITEM}. catalog import"),
        what: format!("{ROWS} price changes, one request"),
        holdfast: format!(
            "{:.2} s ({})",
            updating.as_secs_f64(),
            rate(ROWS as f64 / updating.as_secs_f64())
        ),
        baseline: String::new(),
        ratio: None,
        ..Row::default()
    });
    let worst = |l: &Latencies| l.quantile(1.0);
    rows.push(Row {
        item: format!("{ITEM}. catalog import"),
        what: "allocation on a SKU the import changes: p99 / worst".into(),
        holdfast: format!(
            "during the import: {} / {} ({} allocations, {retried} sent again after a 503)",
            crate::report::ms(during.p99()),
            crate::report::ms(worst(&during)),
            during.len()
        ),
        baseline: format!(
            "no import: {} / {}",
            crate::report::ms(quiet.p99()),
            crate::report::ms(worst(&quiet))
        ),
        ratio: Some(worst(&quiet).as_secs_f64() / worst(&during).as_secs_f64().max(1e-9)),
        ..Row::default()
    });
    notes.push(format!(
        "Item {ITEM}: the hot SKU's position row is locked only by the import's last statements \
         (bump + change rows + events for the SKUs that changed, then COMMIT); the worst \
         allocation during a {:.1} s import of {ROWS} price changes is what an allocation waits \
         for it. An allocation that waits past the lock-wait bound is answered 503 with \
         Retry-After and nothing stored; the loop then sends it again with the same key, as a \
         desk does, and its time includes the wait.",
        updating.as_secs_f64()
    ));
    Ok(())
}

/// One allocation of one unit, sent again with the same key after each 503
/// (the lock-wait bound) once its Retry-After has passed. Returns how many
/// times it was sent again.
async fn allocate_until_stored(
    client: &HttpAllocate,
    hot: crate::setup::Target,
) -> anyhow::Result<usize> {
    let key = Uuid::new_v4().to_string();
    let mut again = 0;
    loop {
        match client.send(hot, &key).await {
            Ok(_) => return Ok(again),
            Err(e) => match e.downcast_ref::<Unavailable>() {
                Some(u) if again < 5 => {
                    again += 1;
                    tokio::time::sleep(u.retry_after).await;
                }
                _ => return Err(e),
            },
        }
    }
}

/// `rows` SKUs of one style, sizes numbered, codes `BI-000000`….
fn catalog(style: &str, rows: usize, price: i64) -> String {
    let mut csv = String::with_capacity(rows * 60);
    csv.push_str("code,style,color,size,wholesale_price,msrp,active\n");
    for i in 0..rows {
        csv.push_str(&format!(
            "BI-{i:06},{style},Slate,{i},{price},{},\n",
            price * 2
        ));
    }
    csv
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

async fn import(ctx: &Ctx, csv: &str) -> anyhow::Result<serde_json::Value> {
    let response = ctx
        .http
        .post(format!("{}/v1/admin/skus/import", ctx.base))
        .bearer_auth(&ctx.operator_token)
        .header("idempotency-key", Uuid::new_v4().to_string())
        .header("content-type", "text/csv")
        .body(csv.to_owned())
        .send()
        .await
        .context("POST /v1/admin/skus/import")?;
    let status = response.status();
    let body = response.bytes().await?;
    anyhow::ensure!(
        status == reqwest::StatusCode::OK,
        "the import answered {status}: {}",
        String::from_utf8_lossy(&body[..body.len().min(2000)])
    );
    Ok(serde_json::from_slice(&body)?)
}

/// One allocation loop for a second with no import running (the quiet
/// figure).
async fn allocating(ctx: &Ctx, hot: crate::setup::Target) -> anyhow::Result<Latencies> {
    let client = HttpAllocate::new(
        ctx.http.clone(),
        ctx.base.clone(),
        ctx.bearer.clone(),
        vec![hot],
        12,
    );
    let mut samples = Vec::new();
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let t0 = Instant::now();
        client.send(hot, &Uuid::new_v4().to_string()).await?;
        samples.push(t0.elapsed());
    }
    Ok(Latencies::new(samples))
}

/// The same rows as the HTTP import writes, by COPY, in one transaction.
async fn copy_baseline(pool: &PgPool, tenant: Uuid) -> anyhow::Result<Duration> {
    let mut skus = String::with_capacity(ROWS * 120);
    let mut positions = String::with_capacity(ROWS * 80);
    let mut changes = String::with_capacity(ROWS * 80);
    let mut outbox = String::with_capacity(ROWS * 400);
    let started = Instant::now();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    for i in 0..ROWS {
        let id = Uuid::now_v7();
        skus.push_str(&format!(
            "{tenant}\t{id}\tBC-{i:06}\tBench Copy\tSlate\t{i}\t2000\t4000\tt\n"
        ));
        positions.push_str(&format!("{tenant}\t{id}\t1\n"));
        changes.push_str(&format!("{tenant}\tsku\t{id}\t1\n"));
        let payload = serde_json::json!({
            "type": "sku.updated", "timestamp": now,
            "data": {"change": "created", "changed": [], "code": format!("BC-{i:06}"),
                     "style": "Bench Copy", "color": "Slate", "size": i.to_string(),
                     "wholesale_price": 2000, "msrp": 4000, "active": true,
                     "tenant_id": tenant, "sku_id": id, "sequence": 1, "version": 1}
        });
        // COPY text format: backslashes in the JSON must be escaped.
        let payload = payload.to_string().replace('\\', "\\\\");
        outbox.push_str(&format!("{tenant}\tsku.updated\tsku\t{id}\t1\t{payload}\n"));
    }
    let mut tx = pool.begin().await?;
    for (statement, data) in [
        ("copy skus (tenant_id, id, code, style, color, size, wholesale_price, msrp, active) from stdin", skus),
        ("copy sku_positions (tenant_id, sku_id, event_seq) from stdin", positions),
        ("copy changes (tenant_id, kind, doc_id, version) from stdin", changes),
        ("copy outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload) from stdin", outbox),
    ] {
        let mut copy = tx.copy_in_raw(statement).await?;
        copy.send(data.into_bytes()).await?;
        copy.finish().await?;
    }
    tx.commit().await?;
    Ok(started.elapsed())
}
