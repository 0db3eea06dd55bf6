//! Item 8's pulls: the engine's and the plain loop's, timed, for the first
//! pull (8a, driven by `run`) and the incremental one (8b).

use std::time::{Duration, Instant};

use holdfast_client::api::Api;
use holdfast_client::Engine;
use uuid::Uuid;

use super::Sizes;
use crate::alloc::HttpAllocate;
use crate::items::Ctx;
use crate::load::Latencies;
use crate::progress;
use crate::report::{latency, ms, Row};

/// Pulls from `cursor` until caught up, decoding and dropping each page;
/// returns the last cursor and the documents seen.
async fn plain_pull(
    api: &Api,
    cursor: Option<String>,
    limit: u32,
) -> anyhow::Result<(Option<String>, usize)> {
    let mut cursor = cursor;
    let mut n = 0;
    loop {
        let page = api.pull(cursor.as_deref(), limit).await?;
        n += page.changes.len();
        cursor = Some(page.cursor);
        if !page.has_more {
            return Ok((cursor, n));
        }
    }
}

pub(super) async fn timed_engine_pull(engine: &Engine) -> anyhow::Result<(Duration, usize)> {
    progress::step(format_args!("item 8: first pull into a fresh store"));
    let started = Instant::now();
    let report = engine.pull().await?;
    Ok((started.elapsed(), report.pulled))
}

pub(super) async fn timed_plain_pull(api: &Api, limit: u32) -> anyhow::Result<(Duration, usize)> {
    progress::step(format_args!("item 8: the same pages by a plain loop"));
    let started = Instant::now();
    let (_, n) = plain_pull(api, None, limit).await?;
    Ok((started.elapsed(), n))
}

/// Engine pulls until one brings something: change committed → in the store.
async fn until_changed_engine(engine: &Engine) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for _ in 0..100 {
        if engine.pull().await?.pulled > 0 {
            return Ok(started.elapsed());
        }
    }
    anyhow::bail!("the engine's pull never brought the change")
}

async fn until_changed_plain(
    api: &Api,
    cursor: &mut Option<String>,
    limit: u32,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for _ in 0..100 {
        let (c, n) = plain_pull(api, cursor.clone(), limit).await?;
        *cursor = c;
        if n > 0 {
            return Ok(started.elapsed());
        }
    }
    anyhow::bail!("the plain pull never brought the change")
}

/// 8b: one change on the server, then pulls until it is here.
pub(super) async fn incremental(
    ctx: &Ctx,
    engine: &Engine,
    api: &Api,
    limit: u32,
    sizes: &Sizes,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    progress::step(format_args!(
        "item 8b: {} single changes, each pulled by both",
        sizes.changes
    ));
    let (mut cursor, _) = plain_pull(api, None, limit).await?;
    engine.pull().await?;
    let mut alloc = HttpAllocate::new(
        ctx.http.clone(),
        ctx.base.clone(),
        ctx.bearer.clone(),
        ctx.fixture.spread_targets(0, 1),
        88,
    );
    let (mut e_lat, mut p_lat) = (Vec::new(), Vec::new());
    for i in 0..sizes.changes {
        let target = alloc.next_target();
        alloc.send(target, &Uuid::new_v4().to_string()).await?;
        if i % 2 == 0 {
            e_lat.push(until_changed_engine(engine).await?);
            p_lat.push(until_changed_plain(api, &mut cursor, limit).await?);
        } else {
            p_lat.push(until_changed_plain(api, &mut cursor, limit).await?);
            e_lat.push(until_changed_engine(engine).await?);
        }
    }
    let (e, p) = (Latencies::new(e_lat), Latencies::new(p_lat));
    rows.push(Row {
        item: "8b".into(),
        what: format!(
            "incremental pull after one allocation (order + SKU), {} changes, engine vs plain loop",
            sizes.changes
        ),
        holdfast: format!("{} p50", ms(e.p50())),
        baseline: format!("{} p50", ms(p.p50())),
        ratio: Some(p.p50().as_secs_f64() / e.p50().as_secs_f64()),
        holdfast_latency: latency(&e),
        baseline_latency: latency(&p),
        ..Row::default()
    });
    Ok(())
}
