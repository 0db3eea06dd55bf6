//! Items 8 and 9: the desk's side, through the real client engine
//! (`holdfast-client`: its SQLite store, pending queue, pull and push) talking
//! to the in-process server over loopback HTTP.
//!
//! * **8a — first pull.** The tenant is topped up with SQL to 50,000 SKUs
//!   (with positions and opening-balance ledger rows) and 10,000 orders of
//!   16 lines (`setup::LINES_PER_ORDER`). Holdfast: a fresh store, signed in
//!   (not timed), then `Engine::pull()` timed until it is caught up.
//!   Baseline: the same pages (same `pull_limit`, same cursors) fetched by a
//!   plain loop over the client's own `Api::pull`, which decodes each page
//!   into the same types and writes nothing. So the ratio is the share of a
//!   first pull that the server, HTTP and decoding cost; the rest is the
//!   engine's store writes. Interleaved in rounds, the order flipped each
//!   round.
//! * **8b — incremental pull.** One allocation committed over HTTP, then
//!   `Engine::pull()` on the caught-up store until the change is in it;
//!   baseline: the plain loop from its own caught-up cursor.
//! * **9a — enqueue.** Item 4's mix (per order: create, 16 × (add line,
//!   allocate 2, change line), one header edit) typed into the engine of a
//!   desk that mirrors the 8a data; latency of each act. Baseline: the same
//!   rows (copied from the engine's `pending` table, so byte for byte the
//!   same size) inserted one per transaction into a table of the same schema
//!   in a bare SQLite file with `journal_mode = wal, synchronous = full`
//!   (the store's settings), in the same directory, interleaved per order.
//! * **9b — flush after reconnect.** That queue, 10,000 acts, pushed by
//!   `Engine::push()` (batches of `SyncConfig::default().batch_size`, 100,
//!   answers recorded in the store). Baseline: the same requests with fresh
//!   order/line ids and keys, POSTed to `/v1/sync/push` in the same batches
//!   by a plain loop that only checks the answers.
//! * **9c/9d/9e — memory.** The bench binary re-runs itself as a child
//!   (`HOLDFAST_BENCH_DESK_CHILD`, see `main`) that opens the engine on a
//!   store and lists what a desk's first screen lists, then reads its own
//!   `VmRSS`/`VmHWM` from `/proc/self/status`; baseline: the same child
//!   doing nothing. 9e runs the `holdfast` CLI binary, if it was built next
//!   to this one, on the same store and samples its `/proc/<pid>/status`.
//!
//! `HOLDFAST_BENCH_DESK_SCALE` (default 1) scales every size, for a smoke run.
//!
//! The parts: [`seed`] tops the tenant up and signs stores in, [`pull`]
//! times 8b's incremental pull (8a runs in [`run`]), [`enqueue`] is 9a,
//! [`flush`] 9b, [`memory`] 9c–9e and [`app`] the desktop app's 9f–9h.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use holdfast_client::api::{Api, Timeouts};
use holdfast_client::{Engine, SyncConfig};

use crate::items::Ctx;
use crate::progress;
use crate::report::{ms, Goal, Row};
use crate::setup::{self, LINES_PER_ORDER};

mod app;
mod enqueue;
mod flush;
mod memory;
mod pull;
mod seed;

pub use memory::child;

/// The numbers `--only` knows these by.
pub const PULL_ITEM: u8 = 8;
pub const DESK_ITEM: u8 = 9;
/// Set (to `bare` or `engine:<store>`) in the child that measures memory.
pub const CHILD_ENV: &str = "HOLDFAST_BENCH_DESK_CHILD";

const SKUS: usize = 50_000;
const ORDERS: usize = 10_000;
/// Item 9's queue: 200 orders × item 4's 50 acts = 10,000.
const DESK_ORDERS: usize = 200;
const ACTS_PER_ORDER: usize = crate::push::PER_ORDER;
const PASSWORD_USER: &str = "dana@acme.test";

struct Sizes {
    skus: usize,
    orders: usize,
    desk_orders: usize,
    pull_rounds: usize,
    changes: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        let scale: f64 = std::env::var("HOLDFAST_BENCH_DESK_SCALE")
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|s: &f64| *s > 0.0)
            .unwrap_or(1.0);
        let n = |x: usize| ((x as f64 * scale).round() as usize).max(1);
        Sizes {
            skus: n(SKUS),
            orders: n(ORDERS),
            desk_orders: n(DESK_ORDERS),
            pull_rounds: if quick { 1 } else { 3 },
            changes: if quick { 10 } else { 30 },
        }
    }

    /// Item 9's queue: every act of every desk order.
    fn acts(&self) -> usize {
        self.desk_orders * ACTS_PER_ORDER
    }
}

fn wants(ctx: &Ctx, item: u8) -> bool {
    ctx.plan.only.is_empty() || ctx.plan.only.contains(&item)
}

/// Runs items 8 and 9 (as `--only` asks), appending their rows.
pub async fn run(ctx: &Ctx, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let (pull, desk) = (wants(ctx, PULL_ITEM), wants(ctx, DESK_ITEM));
    if !pull && !desk {
        return Ok(());
    }
    let sizes = Sizes::new(ctx.plan.quick);
    let dir = PathBuf::from("target/bench/desk");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let (skus, orders) = seed::top_up(ctx, &sizes).await?;
    let token = setup::login(&ctx.http, &ctx.base, PASSWORD_USER).await?;
    let api = Api::new(&ctx.base, Some(token), Timeouts::default())?;
    let limit = SyncConfig::default().pull_limit;

    // 8a: fresh stores, each pulled once, against the plain loop.
    let rounds = if pull { sizes.pull_rounds } else { 0 };
    let (mut engine_times, mut plain_times, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut desk_engine = None;
    let mut docs = 0;
    for round in 0..rounds.max(1) {
        let engine = seed::open_engine(ctx, &dir.join(format!("pull-{round}.db"))).await?;
        if !pull {
            // Item 9 alone: one untimed pull gives the desk its mirror.
            progress::step(format_args!(
                "item 9: a first pull gives the desk its mirror"
            ));
            engine.pull().await?;
            desk_engine = Some(engine);
            break;
        }
        let (e, p) = if round % 2 == 0 {
            let e = pull::timed_engine_pull(&engine).await?;
            (e, pull::timed_plain_pull(&api, limit).await?)
        } else {
            let p = pull::timed_plain_pull(&api, limit).await?;
            (pull::timed_engine_pull(&engine).await?, p)
        };
        anyhow::ensure!(
            e.1 == p.1,
            "the engine pulled {} documents, the plain loop {}",
            e.1,
            p.1
        );
        docs = e.1;
        progress::step(format_args!(
            "item 8 round {}: engine {} / plain {} ({docs} documents)",
            round + 1,
            ms(e.0),
            ms(p.0)
        ));
        engine_times.push(e.0);
        plain_times.push(p.0);
        ratios.push(p.0.as_secs_f64() / e.0.as_secs_f64());
        desk_engine = Some(engine);
    }
    let engine = desk_engine.context("no store was pulled")?;
    if pull {
        let e = median_duration(&engine_times);
        let p = median_duration(&plain_times);
        rows.push(Row {
            item: "8a".into(),
            what: format!(
                "first pull into a fresh client store via the engine, {} SKUs + {} orders × {} \
                 lines ({} documents), vs the same pages fetched and decoded by a plain loop \
                 (no store writes)",
                crate::report::thousands(skus as u64),
                crate::report::thousands(orders as u64),
                LINES_PER_ORDER,
                crate::report::thousands(docs as u64)
            ),
            holdfast: secs(e),
            baseline: secs(p),
            ratio: Some(median(ratios.clone())),
            ratio_range: range(&ratios),
            goal: Goal::new("≤ 3 s", e <= Duration::from_secs(3)),
            ..Row::default()
        });
        pull::incremental(ctx, &engine, &api, limit, &sizes, rows).await?;
    }
    if desk {
        desk_items(ctx, &engine, &dir, &sizes, rows).await?;
    }
    Ok(())
}

/// Item 9: enqueue latency, flush after reconnect, memory.
async fn desk_items(
    ctx: &Ctx,
    engine: &Engine,
    dir: &Path,
    sizes: &Sizes,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let store_path = engine.store().path().to_owned();
    enqueue::measure(ctx, engine, &store_path, dir, sizes, rows)?;
    flush::measure(ctx, engine, sizes.acts(), rows).await?;

    // 9c–9e: memory, in processes of their own.
    progress::step(format_args!("item 9c–e: memory of the engine and the CLI"));
    let exe = std::env::current_exe()?;
    memory::measure(&exe, &store_path, dir, rows)?;
    app::measure(ctx, &exe, &store_path, dir, rows).await
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    if xs.is_empty() {
        return 0.0;
    }
    xs[xs.len() / 2]
}

fn median_duration(xs: &[Duration]) -> Duration {
    let mut xs = xs.to_vec();
    xs.sort_unstable();
    xs.get(xs.len() / 2).copied().unwrap_or_default()
}

fn range(xs: &[f64]) -> Option<(f64, f64)> {
    (xs.len() > 1).then(|| {
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(range(&[1.0]), None);
        assert_eq!(range(&[2.0, 1.0, 3.0]), Some((1.0, 3.0)));
    }
}
