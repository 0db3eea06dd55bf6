//! Items 8 and 9 of issue 9: the desk's side, through the real client engine
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

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use holdfast_client::api::{Api, Timeouts};
use holdfast_client::token::MemoryTokens;
use holdfast_client::{Engine, NewOrder, SyncConfig};
use holdfast_protocol::model::{OrderHeaderSet, PushItem, PushRequest, PushResponse};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::header::AUTHORIZATION;
use uuid::Uuid;

use crate::alloc::HttpAllocate;
use crate::items::Ctx;
use crate::load::Latencies;
use crate::report::{latency, ms, Goal, Row};
use crate::setup::{self, LINES_PER_ORDER};
use crate::{desktop, progress};

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
    let (skus, orders) = top_up(ctx, &sizes).await?;
    let token = setup::login(&ctx.http, &ctx.base, PASSWORD_USER).await?;
    let api = Api::new(&ctx.base, Some(token), Timeouts::default())?;
    let limit = SyncConfig::default().pull_limit;

    // 8a: fresh stores, each pulled once, against the plain loop.
    let rounds = if pull { sizes.pull_rounds } else { 0 };
    let (mut engine_times, mut plain_times, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut desk_engine = None;
    let mut docs = 0;
    for round in 0..rounds.max(1) {
        let engine = open_engine(ctx, &dir.join(format!("pull-{round}.db"))).await?;
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
            let e = timed_engine_pull(&engine).await?;
            (e, timed_plain_pull(&api, limit).await?)
        } else {
            let p = timed_plain_pull(&api, limit).await?;
            (timed_engine_pull(&engine).await?, p)
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
        incremental(ctx, &engine, &api, limit, &sizes, rows).await?;
    }
    if desk {
        desk_items(ctx, &engine, &dir, &sizes, rows).await?;
    }
    Ok(())
}

/// Tops the tenant up to `sizes.skus` SKUs and `sizes.orders` orders with
/// SQL; returns the totals.
async fn top_up(ctx: &Ctx, sizes: &Sizes) -> anyhow::Result<(usize, usize)> {
    let tenant = ctx.fixture.tenant;
    let (have_skus, have_orders): (i64, i64) = sqlx::query_as(
        "select (select count(*) from sku_positions where tenant_id = $1),
                (select count(*) from orders where tenant_id = $1)",
    )
    .bind(tenant)
    .fetch_one(&ctx.pool)
    .await?;
    let new_skus = sizes.skus.saturating_sub(have_skus as usize);
    let new_orders = sizes.orders.saturating_sub(have_orders as usize);
    progress::step(format_args!(
        "items 8/9: seeding {new_skus} more SKUs and {new_orders} more orders with SQL"
    ));
    let mut rng = StdRng::seed_from_u64(8);
    let sku_ids: Vec<Uuid> = (0..new_skus).map(|_| Uuid::new_v4()).collect();
    let colors: Vec<String> = (0..new_skus).map(|i| format!("D{i:05}")).collect();
    let mut tx = ctx.pool.begin().await?;
    sqlx::query(
        "insert into skus (tenant_id, id, style, color, size, wholesale_price, msrp)
         select $1, id, 'Bench Desk', color, 'M', 1000, 2000
           from unnest($2::uuid[], $3::text[]) as s(id, color)",
    )
    .bind(tenant)
    .bind(&sku_ids)
    .bind(&colors)
    .execute(&mut *tx)
    .await
    .context("seeding the desk SKUs")?;
    sqlx::query(
        "insert into sku_positions (tenant_id, sku_id, on_hand)
         select $1, id, 1000000 from unnest($2::uuid[]) as p(id)",
    )
    .bind(tenant)
    .bind(&sku_ids)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "insert into inventory_ledger (tenant_id, sku_id, on_hand_delta, reason, source)
         select $1, id, 1000000, 'opening_balance', 'holdfast-bench'
           from unnest($2::uuid[]) as p(id)",
    )
    .bind(tenant)
    .bind(&sku_ids)
    .execute(&mut *tx)
    .await?;
    let mut pickable = sku_ids.clone();
    pickable.extend(&ctx.fixture.spread_skus);
    let order_ids: Vec<Uuid> = (0..new_orders).map(|_| Uuid::new_v4()).collect();
    let (mut line_ids, mut line_orders, mut line_skus) = (Vec::new(), Vec::new(), Vec::new());
    for order in &order_ids {
        for _ in 0..LINES_PER_ORDER {
            line_ids.push(Uuid::new_v4());
            line_orders.push(*order);
            line_skus.push(pickable[rng.random_range(0..pickable.len())]);
        }
    }
    sqlx::query(
        "insert into orders (tenant_id, id, customer_id, customer_po, created_by, updated_by)
         select $1, id, $3, 'DESK-' || left(id::text, 8), $4, $4 from unnest($2::uuid[]) as o(id)",
    )
    .bind(tenant)
    .bind(&order_ids)
    .bind(ctx.fixture.customer)
    .bind(ctx.fixture.user)
    .execute(&mut *tx)
    .await
    .context("seeding the desk orders")?;
    sqlx::query(
        "insert into order_lines (tenant_id, id, order_id, sku_id, qty_ordered)
         select $1, id, order_id, sku_id, 12
           from unnest($2::uuid[], $3::uuid[], $4::uuid[]) as l(id, order_id, sku_id)",
    )
    .bind(tenant)
    .bind(&line_ids)
    .bind(&line_orders)
    .bind(&line_skus)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    sqlx::query("analyze").execute(&ctx.pool).await?;
    Ok((
        have_skus as usize + new_skus,
        have_orders as usize + new_orders,
    ))
}

/// A fresh engine store at `path`, signed in as the bench user.
async fn open_engine(ctx: &Ctx, path: &Path) -> anyhow::Result<Engine> {
    let engine = Engine::open(
        path,
        Arc::new(MemoryTokens::default()),
        SyncConfig::default(),
    )?;
    engine
        .login(
            &ctx.base,
            "acme",
            PASSWORD_USER,
            holdfast_server::demo::DEMO_PASSWORD,
            "holdfast-bench desk",
            false,
        )
        .await?;
    Ok(engine)
}

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

async fn timed_engine_pull(engine: &Engine) -> anyhow::Result<(Duration, usize)> {
    progress::step(format_args!("item 8: first pull into a fresh store"));
    let started = Instant::now();
    let report = engine.pull().await?;
    Ok((started.elapsed(), report.pulled))
}

async fn timed_plain_pull(api: &Api, limit: u32) -> anyhow::Result<(Duration, usize)> {
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
async fn incremental(
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

/// The `pending` table's schema (client/src/store/pending.rs), for the bare
/// SQLite baseline.
const PENDING_DDL: &str = "create table pending (
    seq             integer primary key autoincrement,
    idempotency_key text not null unique,
    order_id        text not null,
    schema_version  integer not null,
    act             text,
    method          text not null,
    path            text not null,
    body            text not null,
    base_version    integer not null,
    base_doc        text,
    created_at      integer not null,
    attempts        integer not null default 0,
    next_attempt_at integer not null,
    last_error      text,
    status          text not null default 'queued'
);
create index pending_order on pending (order_id, seq);";

const PENDING_COPY: &str = "idempotency_key, order_id, schema_version, act, method, path, body, \
                            base_version, base_doc, created_at, next_attempt_at";

/// Item 9: enqueue latency, flush after reconnect, memory.
async fn desk_items(
    ctx: &Ctx,
    engine: &Engine,
    dir: &Path,
    sizes: &Sizes,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let acts = sizes.desk_orders * ACTS_PER_ORDER;
    progress::step(format_args!(
        "item 9a: {acts} acts through the engine vs bare SQLite inserts"
    ));
    let store_path = engine.store().path().to_owned();
    let reader = rusqlite::Connection::open(&store_path)?;
    let bare_path = dir.join("bare.db");
    let mut bare = rusqlite::Connection::open(&bare_path)?;
    let mode: String = bare.query_row("pragma journal_mode = wal", [], |r| r.get(0))?;
    anyhow::ensure!(mode.eq_ignore_ascii_case("wal"), "bare SQLite: no WAL");
    bare.execute_batch("pragma synchronous = full;")?;
    bare.execute_batch(PENDING_DDL)?;
    let insert = format!("insert into pending ({PENDING_COPY}) values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
    let skus = &ctx.fixture.spread_skus;
    let mut rng = StdRng::seed_from_u64(9);
    let mut last_seq: i64 =
        reader.query_row("select coalesce(max(seq), 0) from pending", [], |r| {
            r.get(0)
        })?;
    let (mut e_lat, mut b_lat) = (Vec::with_capacity(acts), Vec::with_capacity(acts));
    let mut bytes = 0usize;
    let mut tick = progress::Ticker::new("item 9a acts", acts);
    for o in 0..sizes.desk_orders {
        let timed = |lat: &mut Vec<Duration>, f: &mut dyn FnMut() -> anyhow::Result<()>| {
            let started = Instant::now();
            f()?;
            lat.push(started.elapsed());
            anyhow::Ok(())
        };
        let mut order = Uuid::nil();
        timed(&mut e_lat, &mut || {
            order = engine.create_order(NewOrder {
                customer_id: ctx.fixture.customer,
                customer_po: Some(format!("DESK-{o}")),
                ..NewOrder::default()
            })?;
            Ok(())
        })?;
        for _ in 0..LINES_PER_ORDER {
            let sku = skus[rng.random_range(0..skus.len())];
            let mut line = Uuid::nil();
            timed(&mut e_lat, &mut || {
                line = engine.add_line(order, sku, 10)?;
                Ok(())
            })?;
            timed(&mut e_lat, &mut || {
                engine.allocate(order, line, 2)?;
                Ok(())
            })?;
            timed(&mut e_lat, &mut || {
                engine.change_line(order, line, 12)?;
                Ok(())
            })?;
        }
        timed(&mut e_lat, &mut || {
            engine.edit_order(
                order,
                OrderHeaderSet {
                    notes: Some(Some("called back: ship by Friday".into())),
                    ..OrderHeaderSet::default()
                },
            )?;
            Ok(())
        })?;
        // The same rows, byte for byte, one transaction each.
        let copied: Vec<Vec<rusqlite::types::Value>> = {
            let mut stmt = reader.prepare(&format!(
                "select seq, {PENDING_COPY} from pending where seq > ?1 order by seq"
            ))?;
            let rows = stmt.query_map([last_seq], |r| {
                (0..12)
                    .map(|i| r.get::<_, rusqlite::types::Value>(i))
                    .collect::<Result<Vec<_>, _>>()
            })?;
            rows.collect::<Result<_, _>>()?
        };
        for row in copied {
            if let rusqlite::types::Value::Integer(seq) = row[0] {
                last_seq = seq;
            }
            bytes += row
                .iter()
                .map(|v| match v {
                    rusqlite::types::Value::Text(t) => t.len(),
                    _ => 8,
                })
                .sum::<usize>();
            let started = Instant::now();
            let tx = bare.transaction()?;
            tx.execute(&insert, rusqlite::params_from_iter(&row[1..]))?;
            tx.commit()?;
            b_lat.push(started.elapsed());
        }
        tick.tick((o + 1) * ACTS_PER_ORDER);
    }
    anyhow::ensure!(
        b_lat.len() == e_lat.len(),
        "copied {} rows for {} acts",
        b_lat.len(),
        e_lat.len()
    );
    let row_bytes = bytes / b_lat.len().max(1);
    let (e, b) = (Latencies::new(e_lat), Latencies::new(b_lat));
    rows.push(Row {
        item: "9a".into(),
        what: format!(
            "local enqueue through the engine (item 4's mix, {} acts, store mirroring 8a) vs bare \
             SQLite insert + commit of the same rows (~{row_bytes} B), WAL, synchronous=FULL",
            crate::report::thousands(acts as u64)
        ),
        holdfast: format!("{} p99", ms(e.p99())),
        baseline: format!("{} p99", ms(b.p99())),
        ratio: Some(b.p50().as_secs_f64() / e.p50().as_secs_f64()),
        holdfast_latency: latency(&e),
        baseline_latency: latency(&b),
        goal: Goal::new("p99 ≤ 2 ms", e.p99() <= Duration::from_millis(2)),
        ..Row::default()
    });
    drop(reader);

    // 9b: the queue flushed by the engine, and its copy by a plain loop.
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

    // 9c–9e: memory, in processes of their own.
    progress::step(format_args!("item 9c–e: memory of the engine and the CLI"));
    let exe = std::env::current_exe()?;
    let bare_proc = child_memory(&exe, "bare")?;
    let empty = dir.join("empty.db");
    let idle = child_memory(&exe, &format!("engine:{}", empty.display()))?;
    let full = child_memory(&exe, &format!("engine:{}", store_path.display()))?;
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    rows.push(Row {
        item: "9c".into(),
        what: "RSS: engine opened on an empty store (a process of its own) vs the same process \
               without it"
            .into(),
        holdfast: mib(idle.rss),
        baseline: mib(bare_proc.rss),
        ratio: Some(bare_proc.rss as f64 / idle.rss as f64),
        ..Row::default()
    });
    rows.push(Row {
        item: "9d".into(),
        what: format!(
            "RSS (peak): engine on the desk's store ({} orders, {} SKUs mirrored), all orders \
             listed, vs the engine idle",
            crate::report::thousands(full.orders),
            crate::report::thousands(full.skus)
        ),
        holdfast: format!("{} ({} peak)", mib(full.rss), mib(full.hwm)),
        baseline: mib(idle.rss),
        ratio: Some(idle.rss as f64 / full.hwm as f64),
        goal: Goal::new(
            "≤ 150 MB (app; engine only)",
            full.hwm * 1024 <= 150 * 1000 * 1000,
        ),
        ..Row::default()
    });
    match exe
        .parent()
        .map(|d| d.join("holdfast"))
        .filter(|p| p.exists())
    {
        Some(cli) => {
            let listed = cli_memory(&cli, &store_path, dir, "orders")?;
            let idle = cli_memory(&cli, &empty, dir, "status")?;
            rows.push(Row {
                item: "9e".into(),
                what: format!(
                    "peak RSS of the `holdfast` CLI: `orders` on the desk's store vs `status` on \
                     an empty one (sampled every 2 ms; {})",
                    cli.display()
                ),
                holdfast: mib(listed),
                baseline: mib(idle),
                ratio: Some(idle as f64 / listed as f64),
                goal: Goal::new("≤ 150 MB", listed * 1024 <= 150 * 1000 * 1000),
                ..Row::default()
            });
        }
        None => progress::step(format_args!(
            "item 9e skipped: no `holdfast` binary next to {} (cargo build --release -p \
             holdfast-client --bin holdfast)",
            exe.display()
        )),
    }
    match desktop::find_app(&exe) {
        // Not fatal: a stale build without the startup marks, or no X,
        // leaves these rows out with the reason on the progress log.
        Some(app) => {
            if let Err(e) = desktop_items(ctx, app, &store_path, dir, rows).await {
                progress::step(format_args!("items 9f–9h not measured: {e:#}"));
            }
        }
        None => progress::step(format_args!(
            "items 9f–9h skipped: no `holdfast-desktop` next to {} (`make bench` builds it; \
             by hand: npm run build in ui/, then cargo build --release -p holdfast-desktop)",
            exe.display()
        )),
    }
    Ok(())
}

/// Items 9f–9h: the desktop app's cold start and memory (see `desktop`).
async fn desktop_items(
    ctx: &Ctx,
    app: PathBuf,
    store_path: &Path,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    // The desk's data, signed in through a token file, for 9h.
    let desk_dir = dir.join("desktop-desk");
    let copy = desktop::copy_store(store_path, &desk_dir)?;
    let tokens = Arc::new(holdfast_client::token::FileTokens::new(
        desk_dir.join("token"),
    ));
    Engine::open(&copy, tokens, SyncConfig::default())?
        .login(
            &ctx.base,
            "acme",
            PASSWORD_USER,
            holdfast_server::demo::DEMO_PASSWORD,
            "holdfast-bench desktop",
            false,
        )
        .await?;
    let dir = dir.to_owned();
    let m = tokio::task::spawn_blocking(move || desktop_measure(&app, &dir, &desk_dir)).await??;
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    let ready = median_duration(&m.ready);
    let page = median_duration(&m.page);
    rows.push(Row {
        item: "9f".into(),
        what: format!(
            "desktop app cold start to its first interactive screen (sign-in, empty store; \
             median of {} launches under X), vs the webview running the page's first script \
             in the same launches",
            m.ready.len()
        ),
        holdfast: ms(ready),
        baseline: ms(page),
        ratio: Some(page.as_secs_f64() / ready.as_secs_f64().max(1e-9)),
        goal: Goal::new("≤ 1 s", ready <= Duration::from_secs(1)),
        ..Row::default()
    });
    rows.push(Row {
        item: "9g".into(),
        what: "desktop app memory, idle on the sign-in screen (summed PSS of the UI, web and \
               network processes), vs the same processes when the page had just loaded"
            .into(),
        holdfast: mib(m.idle_pss),
        baseline: mib(m.page_pss),
        ratio: Some(m.page_pss as f64 / m.idle_pss.max(1) as f64),
        goal: Goal::new("≤ 150 MB", m.idle_pss * 1024 <= 150 * 1000 * 1000),
        ..Row::default()
    });
    rows.push(Row {
        item: "9h".into(),
        what: format!(
            "desktop app memory, idle and signed in on the desk's store, every order listed \
             (first screen after {}), vs 9g",
            ms(m.desk_ready)
        ),
        holdfast: mib(m.desk_pss),
        baseline: mib(m.idle_pss),
        ratio: Some(m.idle_pss as f64 / m.desk_pss.max(1) as f64),
        goal: Goal::new("≤ 150 MB", m.desk_pss * 1024 <= 150 * 1000 * 1000),
        ..Row::default()
    });
    Ok(())
}

/// What `desktop_measure` saw.
struct DesktopFigures {
    page: Vec<Duration>,
    ready: Vec<Duration>,
    page_pss: u64,
    idle_pss: u64,
    desk_ready: Duration,
    desk_pss: u64,
}

/// The launches themselves (blocking: processes, sleeps, /proc).
fn desktop_measure(app: &Path, dir: &Path, desk_dir: &Path) -> anyhow::Result<DesktopFigures> {
    let display = desktop::Display::open()?;
    let (mut page, mut ready, mut page_pss, mut idle_pss) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..desktop::LAUNCHES {
        progress::step(format_args!(
            "item 9f: desktop cold start {}/{}",
            i + 1,
            desktop::LAUNCHES
        ));
        let data = dir.join(format!("desktop-empty-{i}"));
        let _ = std::fs::remove_dir_all(&data);
        let launch = desktop::Launch::start(app, &display, &data)?;
        page.push(launch.page);
        ready.push(launch.ready);
        page_pss.push(launch.pss_at_page as f64);
        idle_pss.push(launch.settled_pss() as f64);
    }
    progress::step(format_args!("item 9h: the desktop app on the desk's store"));
    let desk = desktop::Launch::start(app, &display, desk_dir)?;
    let desk_pss = desk.settled_pss();
    Ok(DesktopFigures {
        page,
        ready,
        page_pss: median(page_pss) as u64,
        idle_pss: median(idle_pss) as u64,
        desk_ready: desk.ready,
        desk_pss,
    })
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

#[derive(Debug, Default)]
struct Memory {
    rss: u64,
    hwm: u64,
    orders: u64,
    skus: u64,
}

/// Runs this binary as a memory child and parses its one line.
fn child_memory(exe: &Path, spec: &str) -> anyhow::Result<Memory> {
    let out = std::process::Command::new(exe)
        .env(CHILD_ENV, spec)
        .output()
        .context("running the memory child")?;
    anyhow::ensure!(
        out.status.success(),
        "memory child {spec}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut m = Memory::default();
    for field in text.split_whitespace() {
        if let Some((k, v)) = field.split_once('=') {
            let v: u64 = v.parse().unwrap_or(0);
            match k {
                "rss_kib" => m.rss = v,
                "hwm_kib" => m.hwm = v,
                "orders" => m.orders = v,
                "skus" => m.skus = v,
                _ => {}
            }
        }
    }
    anyhow::ensure!(m.rss > 0, "memory child {spec} said: {text}");
    Ok(m)
}

/// The child's side (`main` calls it when [`CHILD_ENV`] is set): `bare`
/// does nothing; `engine:<store>` opens the engine there and lists what a
/// desk's first screen lists (status, every order, the first SKUs), then
/// reports its memory while still holding them.
pub fn child(spec: OsString) -> anyhow::Result<()> {
    let spec = spec.to_string_lossy().into_owned();
    let (mut orders, mut skus) = (0usize, 0usize);
    let mut held = Vec::new();
    if let Some(path) = spec.strip_prefix("engine:") {
        let engine = Engine::open(
            Path::new(path),
            Arc::new(MemoryTokens::default()),
            SyncConfig::default(),
        )?;
        let _status = engine.status()?;
        let list = engine.orders()?;
        orders = list.len();
        skus =
            rusqlite::Connection::open(path)?
                .query_row("select count(*) from skus", [], |r| r.get::<_, i64>(0))?
                as usize;
        let first = engine.skus("", 100)?;
        held.push(Box::new((engine, list, first)) as Box<dyn std::any::Any>);
    }
    let (rss, hwm) = proc_memory("self")?;
    println!("rss_kib={rss} hwm_kib={hwm} orders={orders} skus={skus}");
    drop(held);
    Ok(())
}

/// `VmRSS` and `VmHWM` (KiB) of a process.
fn proc_memory(pid: &str) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

/// Runs `holdfast --store <store> <command>` and samples its peak RSS (KiB).
fn cli_memory(cli: &Path, store: &Path, dir: &Path, command: &str) -> anyhow::Result<u64> {
    let mut child = std::process::Command::new(cli)
        .arg("--store")
        .arg(store)
        .args(["--no-sync", "--json", command])
        .env("HOLDFAST_TOKEN_FILE", dir.join("cli-token"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("running {}", cli.display()))?;
    let pid = child.id().to_string();
    let mut peak = 0;
    loop {
        if let Ok((_, hwm)) = proc_memory(&pid) {
            peak = peak.max(hwm);
        }
        if let Some(status) = child.try_wait()? {
            anyhow::ensure!(status.success(), "holdfast {command} exited {status}");
            return Ok(peak);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
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
