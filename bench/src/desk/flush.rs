//! Item 9b: the desk's queue flushed after reconnect by `Engine::push`,
//! against the same requests (fresh ids) pushed by a plain HTTP loop.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use holdfast_client::{Engine, SyncConfig};
use holdfast_protocol::model::{PushItem, PushRequest, PushResponse};
use reqwest::header::AUTHORIZATION;
use uuid::Uuid;

use super::secs;
use crate::items::Ctx;
use crate::progress;
use crate::report::{ms, Goal, Row};

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
    progress::step(format_args!(
        "item 9b: flushing {acts} queued acts through the engine"
    ));
    let started = Instant::now();
    let report = engine.push().await?;
    let engine_took = started.elapsed();
    anyhow::ensure!(
        report.applied == acts && report.conflicts + report.rejections + report.retrying == 0,
        "the engine's flush: {report:?}"
    );
    progress::step(format_args!(
        "item 9b: engine {}; the same queue by a plain loop",
        ms(engine_took)
    ));
    let started = Instant::now();
    for chunk in copy.chunks(batch) {
        let body = serde_json::to_vec(&PushRequest {
            mutations: chunk.to_vec(),
        })?;
        let response = ctx
            .http
            .post(format!("{}/v1/sync/push", ctx.base))
            .header(AUTHORIZATION, &*ctx.bearer)
            .header("content-type", "application/json")
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
    }
    let plain_took = started.elapsed();
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
        goal: Goal::new("≤ 10 s", engine_took <= Duration::from_secs(10)),
        ..Row::default()
    });
    Ok(())
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
