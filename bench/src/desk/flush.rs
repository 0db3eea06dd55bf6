//! Item 9b: the desk's queue flushed after reconnect by `Engine::push`,
//! against the same requests (fresh ids) pushed by a plain HTTP loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use holdfast_client::{Engine, EngineEvent, SyncConfig};
use holdfast_protocol::model::{PushItem, PushRequest, PushResponse};
use reqwest::header::AUTHORIZATION;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::secs;
use crate::items::Ctx;
use crate::load::Latencies;
use crate::progress;
use crate::report::{latency, ms, Goal, Row};

/// 9b: the queue flushed by the engine, and its copy by a plain loop.
pub(super) async fn measure(
    ctx: &Ctx,
    engine: &Engine,
    acts: usize,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let pending = engine.pending_rows()?;
    anyhow::ensure!(pending.len() == acts, "{} rows queued", pending.len());
    let copy = remap(&pending)?;
    let batch = SyncConfig::default().batch_size;
    // The engine names the server history of its last pull on every push
    // (the server then checks it was not restored from a backup since): the
    // plain loop sends the same header, so the server does the same work.
    let history = engine
        .store()
        .read(holdfast_client::store::sync_state::get)?
        .history;
    let chunks: Vec<&[PushItem]> = copy.chunks(batch).collect();
    // The plain loop runs half before the engine's flush and half after it,
    // so both sides are measured around the same moment: a drift of the
    // machine (the cluster's checkpoint after the top-up, other work on the
    // cores) weighs on both alike rather than on whichever goes first.
    let (before, after) = chunks.split_at(chunks.len() / 2);
    progress::step(format_args!(
        "item 9b: the plain loop, first half ({} batches)",
        before.len()
    ));
    let mut plain_batches = Vec::with_capacity(chunks.len());
    let mut plain_took = plain_push(ctx, before, history.as_deref(), &mut plain_batches).await?;
    progress::step(format_args!(
        "item 9b: flushing {acts} queued acts through the engine"
    ));
    // The engine's time per batch (pick, round trip, answers recorded): the
    // gap between its `Pushed` events.
    let mut events = engine.subscribe();
    let ticks: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let listener = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            loop {
                match events.recv().await {
                    Ok(EngineEvent::Pushed { .. }) => {
                        if let Ok(mut t) = ticks.lock() {
                            t.push(Instant::now());
                        }
                    }
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                }
            }
        }
    });
    let started = Instant::now();
    let report = engine.push().await?;
    let engine_took = started.elapsed();
    anyhow::ensure!(
        report.applied == acts && report.conflicts + report.rejections + report.retrying == 0,
        "the engine's flush: {report:?}"
    );
    progress::step(format_args!(
        "item 9b: engine {}; the plain loop, second half ({} batches)",
        ms(engine_took),
        after.len()
    ));
    // Every `Pushed` was sent before `push` returned; let the listener see
    // the last one.
    for _ in 0..100 {
        if ticks.lock().map(|t| t.len()).unwrap_or(0) >= report.pushes {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    listener.abort();
    let at = ticks.lock().map(|t| t.clone()).unwrap_or_default();
    let engine_batches: Vec<Duration> = std::iter::once(started)
        .chain(at.iter().copied())
        .zip(at.iter().copied())
        .map(|(a, b)| b - a)
        .collect();
    plain_took += plain_push(ctx, after, history.as_deref(), &mut plain_batches).await?;
    let (engine_batches, plain_batches) = (
        Latencies::new(engine_batches),
        Latencies::new(plain_batches),
    );
    progress::step(format_args!(
        "item 9b: per batch, engine p50 {} / plain p50 {} ({} / {} batches)",
        ms(engine_batches.p50()),
        ms(plain_batches.p50()),
        engine_batches.len(),
        plain_batches.len()
    ));
    rows.push(Row {
        item: "9b".into(),
        what: format!(
            "{} queued acts flushed after reconnect by `Engine::push` (batches of {batch}) vs \
             the same requests (fresh ids) pushed by a plain HTTP loop",
            crate::report::thousands(acts as u64)
        ),
        holdfast: secs(engine_took),
        baseline: secs(plain_took),
        ratio: Some(plain_took.as_secs_f64() / engine_took.as_secs_f64()),
        holdfast_latency: latency(&engine_batches),
        baseline_latency: latency(&plain_batches),
        goal: Goal::new("≤ 10 s", engine_took <= Duration::from_secs(10)),
        ..Row::default()
    });
    Ok(())
}

/// The plain loop: each batch POSTed as it is, its answers checked (2xx
/// each); the time of each batch into `took`. Returns the total.
async fn plain_push(
    ctx: &Ctx,
    chunks: &[&[PushItem]],
    history: Option<&str>,
    took: &mut Vec<Duration>,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for chunk in chunks {
        let at = Instant::now();
        let body = serde_json::to_vec(&PushRequest {
            mutations: chunk.to_vec(),
        })?;
        let mut request = ctx
            .http
            .post(format!("{}/v1/sync/push", ctx.base))
            .header(AUTHORIZATION, &*ctx.bearer)
            .header("content-type", "application/json");
        if let Some(history) = history {
            request = request.header("holdfast-history", history);
        }
        let response = request
            .body(body)
            .send()
            .await
            .context("POST /v1/sync/push")?;
        anyhow::ensure!(
            response.status().is_success(),
            "push answered {}",
            response.status()
        );
        let answer: PushResponse = response.json().await?;
        if let Some(bad) = answer
            .results
            .iter()
            .find(|r| !(200..300).contains(&r.status))
        {
            anyhow::bail!("a pushed mutation answered {}: {}", bad.status, bad.body);
        }
        took.push(at.elapsed());
    }
    Ok(started.elapsed())
}

/// The queue's requests with fresh order and line ids and fresh keys: the
/// same work for the server, on orders of their own.
fn remap(pending: &[holdfast_client::store::pending::Row]) -> anyhow::Result<Vec<PushItem>> {
    let mut fresh: HashMap<Uuid, Uuid> = HashMap::new();
    let mut lines_of: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    for row in pending {
        fresh.entry(row.order_id).or_insert_with(Uuid::new_v4);
        if let Some(line) = row.act.line_id() {
            if fresh.insert(line, Uuid::new_v4()).is_none() {
                lines_of.entry(row.order_id).or_default().push(line);
            }
        }
    }
    pending
        .iter()
        .map(|row| {
            let mut path = row.request.path.clone();
            let mut body = row.request.body.to_string();
            let ids = std::iter::once(row.order_id)
                .chain(lines_of.get(&row.order_id).into_iter().flatten().copied());
            for old in ids {
                let (old_s, new_s) = (old.to_string(), fresh[&old].to_string());
                path = path.replace(&old_s, &new_s);
                body = body.replace(&old_s, &new_s);
            }
            Ok(PushItem {
                idempotency_key: Uuid::new_v4().to_string(),
                method: row.request.method.clone(),
                path,
                body: serde_json::from_str(&body)?,
            })
        })
        .collect()
}
