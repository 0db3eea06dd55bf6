//! The benchmark items, in the order they run (1–3, 5, 4, 7, 6: the relay
//! goes last because registering its partner changes what later commits do),
//! each turning its measurements into rows of the table. Item 6 lives in
//! `items/relay_item.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::PgPool;
use uuid::Uuid;

use crate::alloc::{HttpAllocate, RawAllocate, Shape, Who};
use crate::load::{self, Latencies, Measured, Window};
use crate::pgbench::{Pgbench, Script};
use crate::report::{self, latency, ms, rate, Goal, Row};
use crate::server::Server;
use crate::setup::{self, BenchDb, Fixture, Target};
use crate::{bearer, idle, progress, push, push_ceiling, stream};

mod relay_item;

/// How big and how long, by mode.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    pub window: Window,
    pub rounds: u32,
    pub clients: Vec<usize>,
    pub diagnose_at: usize,
    pub only: Vec<u8>,
    /// Items 1–3 variants to run (empty: all): pgbench, http, one, three, engine, folded.
    pub variants: Vec<String>,
    /// Items 1–3 workloads to run (empty: both): hot, spread.
    pub workloads: Vec<String>,
    pub batch_orders: usize,
    /// Item 4's interleaved rounds (the orders are split between them).
    pub batch_rounds: usize,
    pub replays: usize,
    pub relay_events: usize,
    /// Item 6's interleaved rounds of relay and bare loop, per configuration.
    pub relay_rounds: usize,
    pub relay_latency_events: usize,
    pub desks: usize,
    pub stream_commits: usize,
}

impl Plan {
    /// The mode's sizes; `main` then applies the command line's overrides.
    pub fn new(quick: bool) -> Plan {
        // Full: more, shorter rounds rather than fewer long ones, so a burst
        // of someone else's work lands on both sides of a comparison.
        let measure = Duration::from_secs(2);
        Plan {
            quick,
            window: Window {
                warmup: measure / 4,
                measure,
            },
            rounds: if quick { 1 } else { 4 },
            clients: vec![1, 8, 32, 64],
            diagnose_at: 32,
            only: Vec::new(),
            variants: Vec::new(),
            workloads: Vec::new(),
            batch_orders: if quick { 40 } else { 200 },
            batch_rounds: if quick { 2 } else { 4 },
            replays: if quick { 300 } else { 1000 },
            relay_events: if quick { 5_000 } else { 20_000 },
            relay_rounds: if quick { 1 } else { 3 },
            relay_latency_events: if quick { 200 } else { 500 },
            desks: 1000,
            stream_commits: if quick { 10 } else { 20 },
        }
    }

    fn wants(&self, item: u8) -> bool {
        self.only.is_empty() || self.only.contains(&item)
    }

    fn wants_variant(&self, v: Variant) -> bool {
        self.variants.is_empty() || self.variants.iter().any(|n| n == v.short())
    }

    fn wants_workload(&self, w: Workload) -> bool {
        let name = match w {
            Workload::Hot => "hot",
            Workload::Spread => "spread",
        };
        self.workloads.is_empty() || self.workloads.iter().any(|n| n == name)
    }

    fn max_clients(&self) -> usize {
        self.clients
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .max(self.diagnose_at)
    }

    pub fn describe(&self) -> String {
        format!(
            "Settings: items 1–3 measure {:.1} s after {:.1} s of warm-up per run, {} interleaved \
             round(s) of each variant; item 4: {} mutations over {} orders per variant, in {} \
             interleaved rounds; item 5: {} allocations then their replays; item 6: {} events \
             per round, {} interleaved round(s) per relay configuration, and {} paced events for latency; item 7: {} desks, {} \
             commits.",
            self.window.measure.as_secs_f64(),
            self.window.warmup.as_secs_f64(),
            self.rounds,
            report::thousands((self.batch_orders * push::PER_ORDER) as u64),
            self.batch_orders,
            self.batch_rounds,
            self.replays,
            report::thousands(self.relay_events as u64),
            self.relay_rounds,
            self.relay_latency_events,
            report::thousands(self.desks as u64),
            self.stream_commits
        )
    }
}

/// Everything the items share.
pub struct Ctx {
    pub plan: Plan,
    pub server: Server,
    /// The bench's own pool for raw baselines (one connection per client).
    pub pool: PgPool,
    pub http: reqwest::Client,
    pub base: Arc<str>,
    pub bearer: Arc<str>,
    pub operator_token: String,
    pub who: Arc<Who>,
    pub fixture: Fixture,
    /// The ceiling for items 1 and 2: Postgres's own client.
    pub pgbench: Pgbench,
}

impl Ctx {
    pub async fn new(plan: Plan, server: Server, db: &BenchDb) -> anyhow::Result<Ctx> {
        let pool = db.pool(plan.max_clients() as u32 + 2).await?;
        progress::step("seeding 10,000 SKUs and the bench orders");
        let fixture = setup::fixture(&pool, plan.max_clients()).await?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(1024)
            .timeout(Duration::from_secs(120))
            .build()?;
        let base: Arc<str> = Arc::from(server.base.as_str());
        let token = setup::login(&http, &base, "dana@acme.test").await?;
        let operator_token = setup::login(&http, &base, "ops@acme.test").await?;
        let who = Arc::new(Who {
            tenant: fixture.tenant,
            user: fixture.user,
            token_digest: holdfast_server::auth::token_digest(&token),
        });
        let pgbench = Pgbench::find(&db.url, fixture.tenant, fixture.user)?;
        Ok(Ctx {
            plan,
            server,
            pool,
            http,
            base,
            bearer: bearer(&token),
            operator_token,
            who,
            fixture,
            pgbench,
        })
    }

    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.pool.close().await;
        self.server.shutdown().await
    }
}

type Tables = (Vec<Row>, Vec<Row>, Vec<String>);

pub async fn all(ctx: &mut Ctx) -> anyhow::Result<Tables> {
    let mut rows = Vec::new();
    let mut diagnostics = Vec::new();
    let mut notes = Vec::new();
    if ctx.plan.wants(1) || ctx.plan.wants(2) || ctx.plan.wants(3) {
        allocation(ctx, &mut rows, &mut diagnostics).await?;
    }
    if ctx.plan.wants(5) {
        replay(ctx, &mut rows).await?;
    }
    if ctx.plan.wants(4) {
        batch(ctx, &mut rows).await?;
    }
    if ctx.plan.wants(7) {
        stream_item(ctx, &mut rows, &mut notes).await?;
    }
    if ctx.plan.wants(6) {
        relay_item::run(ctx, &mut rows).await?;
    }
    rows.sort_by(|a, b| a.item.cmp(&b.item));
    Ok((rows, diagnostics, notes))
}

// ------------------------------------------------------------ items 1, 2, 3

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Workload {
    Hot,
    Spread,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Variant {
    Http,
    Raw(Shape),
    /// `pgbench -M prepared` running the one-commit shape (pgbench.rs).
    Pgbench,
    /// …and the seed's three-commit shape (item 3).
    PgbenchThree,
    /// `Http` and `Pgbench` with every CPU held polling when idle
    /// (`idle::Polling`), at one client.
    HttpPolling,
    PgbenchPolling,
}

impl Variant {
    /// The name `--variants` takes.
    fn short(self) -> &'static str {
        match self {
            Variant::Http => "http",
            Variant::Pgbench => "pgbench",
            Variant::PgbenchThree => "pgbench-three",
            Variant::HttpPolling => "http-polling",
            Variant::PgbenchPolling => "pgbench-polling",
            Variant::Raw(Shape::OneCommit) => "one",
            Variant::Raw(Shape::ThreeCommits) => "three",
            Variant::Raw(Shape::EngineSequence) => "engine",
            Variant::Raw(Shape::EngineFolded) => "folded",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Variant::Http => "Holdfast HTTP",
            Variant::Pgbench => "pgbench -M prepared, one-commit",
            Variant::PgbenchThree => "pgbench -M prepared, three-commit (seed)",
            Variant::HttpPolling => "Holdfast HTTP, CPUs held polling",
            Variant::PgbenchPolling => "pgbench -M prepared, one-commit, CPUs held polling",
            Variant::Raw(Shape::OneCommit) => "raw one-commit",
            Variant::Raw(Shape::ThreeCommits) => "raw three-commit (seed)",
            Variant::Raw(Shape::EngineSequence) => "raw engine sequence",
            Variant::Raw(Shape::EngineFolded) => "raw engine, folded CTE",
        }
    }
}

async fn run_variant(
    ctx: &Ctx,
    workload: Workload,
    variant: Variant,
    clients: usize,
) -> anyhow::Result<Measured> {
    let f = &ctx.fixture;
    let targets = |i: usize| match workload {
        Workload::Hot => vec![f.hot_target(i)],
        Workload::Spread => f.spread_targets(i, clients),
    };
    let seed = |i: usize| (i as u64) << 8 | clients as u64;
    let _polling = match variant {
        Variant::HttpPolling | Variant::PgbenchPolling => Some(idle::Polling::hold().context(
            "holding the CPUs polling (/dev/cpu_dma_latency) was possible a moment ago",
        )?),
        _ => None,
    };
    match variant {
        Variant::Pgbench | Variant::PgbenchThree | Variant::PgbenchPolling => {
            let per_client: Vec<Vec<Target>> = (0..clients).map(targets).collect();
            let len = ctx.pgbench.load_targets(&ctx.pool, &per_client).await?;
            let shape = Script {
                three: variant == Variant::PgbenchThree,
                bound: false,
            };
            ctx.pgbench.run(clients, len, shape, ctx.plan.window).await
        }
        Variant::Http | Variant::HttpPolling => {
            let cs = (0..clients)
                .map(|i| {
                    HttpAllocate::new(
                        ctx.http.clone(),
                        ctx.base.clone(),
                        ctx.bearer.clone(),
                        targets(i),
                        seed(i),
                    )
                })
                .collect();
            load::run(cs, ctx.plan.window).await
        }
        Variant::Raw(shape) => {
            let cs = (0..clients)
                .map(|i| {
                    RawAllocate::new(
                        ctx.pool.clone(),
                        ctx.who.clone(),
                        shape,
                        targets(i),
                        seed(i),
                    )
                })
                .collect();
            load::run(cs, ctx.plan.window).await
        }
    }
}

/// Per-round measurements of one (workload, variant, clients) cell.
type Cells = HashMap<(Workload, Variant, usize), Vec<Measured>>;

fn mean_rate(ms: &[Measured]) -> f64 {
    ms.iter().map(Measured::rate).sum::<f64>() / ms.len().max(1) as f64
}

/// The median of the per-round ratios: one round hit by a burst of other
/// work moves it less than it moves a mean.
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if !n.is_multiple_of(2) => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

/// Per-round ratios as a row shows them: their median, and their range
/// when there was more than one round.
fn summarise(per_round: Vec<f64>) -> (f64, Option<(f64, f64)>) {
    let lo = per_round.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = per_round.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let range = (per_round.len() > 1).then_some((lo, hi));
    (median(per_round), range)
}

fn merged(ms: &[Measured]) -> Latencies {
    Latencies::merge(ms.iter().map(|m| m.latencies.clone()))
}

/// Holdfast (or the first variant) against a baseline variant, as a row.
fn compare(cells: &Cells, key: (Workload, usize), h: Variant, b: Variant) -> Option<Row> {
    let hs = cells.get(&(key.0, h, key.1))?;
    Some(compare_runs(hs, cells.get(&(key.0, b, key.1))))
}

/// Round by round, the faster of two variants' runs (`None` unless both ran).
fn faster_of(
    cells: &Cells,
    key: (Workload, usize),
    a: Variant,
    b: Variant,
) -> Option<Vec<Measured>> {
    let (xs, ys) = (
        cells.get(&(key.0, a, key.1))?,
        cells.get(&(key.0, b, key.1))?,
    );
    Some(
        xs.iter()
            .zip(ys)
            .map(|(x, y)| if x.rate() >= y.rate() { x } else { y }.clone())
            .collect(),
    )
}

/// Per-round runs of one side against the other's, as a row.
fn compare_runs(hs: &[Measured], bs: Option<&Vec<Measured>>) -> Row {
    let Some(bs) = bs else {
        // Only one side was asked for (`--variants`): show it alone.
        return Row {
            holdfast: rate(mean_rate(hs)),
            holdfast_latency: latency(&merged(hs)),
            ..Row::default()
        };
    };
    let per_round: Vec<f64> = hs
        .iter()
        .zip(bs)
        .map(|(h, b)| h.rate() / b.rate())
        .collect();
    let (ratio, ratio_range) = summarise(per_round);
    Row {
        holdfast: rate(mean_rate(hs)),
        baseline: rate(mean_rate(bs)),
        ratio: Some(ratio),
        ratio_range,
        holdfast_latency: latency(&merged(hs)),
        baseline_latency: latency(&merged(bs)),
        ..Row::default()
    }
}

async fn allocation(
    ctx: &Ctx,
    rows: &mut Vec<Row>,
    diagnostics: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let one = Variant::Raw(Shape::OneCommit);
    let mut cells: Cells = HashMap::new();
    let clients = ctx.plan.clients.clone();
    let mut levels = clients.clone();
    if ctx.plan.diagnose_at > 0 && !levels.contains(&ctx.plan.diagnose_at) {
        levels.push(ctx.plan.diagnose_at);
    }
    let polling = idle::Polling::hold().is_some();
    if !polling {
        progress::step(format_args!(
            "items 1-2: cannot hold the CPUs polling (/dev/cpu_dma_latency needs root); one client runs only as the CPUs idle"
        ));
    }
    for &c in &levels {
        for round in 0..ctx.plan.rounds {
            for workload in [Workload::Hot, Workload::Spread] {
                if !ctx.plan.wants_workload(workload) {
                    continue;
                }
                let mut variants = Vec::new();
                if clients.contains(&c) {
                    variants.extend([Variant::Pgbench, one, Variant::Http, Variant::PgbenchThree]);
                    if c == 1 && polling {
                        variants.extend([Variant::PgbenchPolling, Variant::HttpPolling]);
                    }
                    // Our own client of the seed's shape: only when asked for
                    // (`--variants three`), as a diagnostic against pgbench's.
                    if ctx.plan.variants.iter().any(|v| v == "three") {
                        variants.push(Variant::Raw(Shape::ThreeCommits));
                    }
                }
                if c == ctx.plan.diagnose_at {
                    if !variants.contains(&one) {
                        variants.push(one);
                    }
                    variants.extend([
                        Variant::Raw(Shape::EngineSequence),
                        Variant::Raw(Shape::EngineFolded),
                    ]);
                }
                variants.retain(|v| ctx.plan.wants_variant(*v));
                // Alternate the order between rounds so drift hits both sides.
                if round % 2 == 1 {
                    variants.reverse();
                }
                for variant in variants {
                    progress::step(format_args!(
                        "items 1-3: {workload:?} SKU, {c} clients, {}, round {}/{}",
                        variant.name(),
                        round + 1,
                        ctx.plan.rounds
                    ));
                    let m = run_variant(ctx, workload, variant, c)
                        .await
                        .with_context(|| format!("{workload:?} {} at {c}", variant.name()))?;
                    cells.entry((workload, variant, c)).or_default().push(m);
                }
            }
        }
    }
    // Items 1 and 2 against the ceiling, pgbench -M prepared running the
    // same SQL; beside each, our own raw client against the same ceiling,
    // so a reader sees which of the two baselines is the faster.
    let pgbench = Variant::Pgbench;
    for &c in &clients {
        for (workload, item, name, goal) in [
            (
                Workload::Hot,
                "1",
                "hot-SKU allocation",
                (0.6, "≥ 0.6 at 32"),
            ),
            (
                Workload::Spread,
                "2",
                "spread allocation (10,000 SKUs)",
                (0.5, "≥ 0.5 at 32"),
            ),
        ] {
            let key = (workload, c);
            // At one client, each side as fast as this machine lets it be:
            // round by round, the faster of its run with the CPUs free to
            // idle and its run with them held polling (idle.rs).
            let best = (
                faster_of(&cells, key, Variant::Http, Variant::HttpPolling),
                faster_of(&cells, key, pgbench, Variant::PgbenchPolling),
            );
            if let (Some(hs), Some(bs)) = &best {
                let mut row = compare_runs(hs, Some(bs));
                row.item = item.into();
                row.what = format!(
                    "{name} via HTTP vs pgbench -M prepared (same SQL), {c} clients, each side the faster of CPUs idling and held polling"
                );
                row.goal = Goal::new("≥ 0.6 at 1", row.ratio.unwrap_or(0.0) >= 0.6);
                rows.push(row);
            }
            if let Some(mut row) = compare(&cells, key, Variant::Http, pgbench) {
                row.item = item.into();
                row.what =
                    format!("{name} via HTTP vs pgbench -M prepared (same SQL), {c} clients");
                let ratio = row.ratio.unwrap_or(0.0);
                if c == 32 {
                    row.goal = Goal::new(goal.1, ratio >= goal.0);
                } else if c == 1 && best.0.is_none() {
                    row.goal = Goal::new("≥ 0.6 at 1", ratio >= 0.6);
                }
                rows.push(row);
            }
            for (polled, plain, who) in [
                (Variant::PgbenchPolling, pgbench, "pgbench"),
                (Variant::HttpPolling, Variant::Http, "HTTP"),
            ] {
                if let Some(mut row) = compare(&cells, key, polled, plain) {
                    if row.ratio.is_some() {
                        row.item = item.into();
                        row.what = format!(
                            "{name}: {who} with the CPUs held polling vs idling, {c} clients"
                        );
                        rows.push(row);
                    }
                }
            }
            if let Some(mut row) = compare(&cells, (workload, c), one, pgbench) {
                row.item = item.into();
                row.what = format!(
                    "{name}: raw SQL over sqlx (one round trip per statement) vs pgbench, {c} clients"
                );
                rows.push(row);
            }
        }
        for (workload, name) in [(Workload::Hot, "hot SKU"), (Workload::Spread, "spread")] {
            let three = Variant::PgbenchThree;
            if let Some(mut row) = compare(&cells, (workload, c), Variant::Pgbench, three) {
                row.item = "3".into();
                row.what = format!(
                    "one commit (ours) vs seed's three commits, both under pgbench -M prepared, {name}, {c} clients"
                );
                rows.push(row);
            }
        }
    }
    for &c in &clients {
        for workload in [Workload::Hot, Workload::Spread] {
            let sqlx_three = Variant::Raw(Shape::ThreeCommits);
            if let Some(mut row) = compare(&cells, (workload, c), sqlx_three, Variant::PgbenchThree)
            {
                row.item = "3·d".into();
                row.what = format!(
                    "seed's three commits over sqlx vs the same under pgbench, {workload:?}, {c} clients"
                );
                diagnostics.push(row);
            }
        }
    }
    let d = ctx.plan.diagnose_at;
    for (workload, name) in [(Workload::Hot, "hot SKU"), (Workload::Spread, "spread")] {
        for (variant, what) in [
            (Variant::Http, "Holdfast over HTTP (as in items 1/2)"),
            (
                Variant::Raw(Shape::EngineSequence),
                "engine's 20 statements over sqlx, no HTTP",
            ),
            (
                Variant::Raw(Shape::EngineFolded),
                "same, hot-row writes folded into one CTE",
            ),
        ] {
            if let Some(mut row) = compare(&cells, (workload, d), variant, one) {
                row.item = if workload == Workload::Hot {
                    "1·d"
                } else {
                    "2·d"
                }
                .into();
                row.what = format!("{what}, {name}, {d} clients");
                diagnostics.push(row);
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------ item 5

async fn replay(ctx: &Ctx, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let n = ctx.plan.replays;
    progress::step(format_args!("item 5: {n} allocations, then their replays"));
    let mut client = HttpAllocate::new(
        ctx.http.clone(),
        ctx.base.clone(),
        ctx.bearer.clone(),
        ctx.fixture.spread_targets(0, 1),
        5,
    );
    let mut sent = Vec::with_capacity(n);
    let mut first = Vec::with_capacity(n);
    for _ in 0..n {
        let t = client.next_target();
        let key = Uuid::new_v4().to_string();
        let at = Instant::now();
        let replayed = client.send(t, &key).await?;
        first.push(at.elapsed());
        anyhow::ensure!(!replayed, "a first execution was answered as a replay");
        sent.push((t, key));
    }
    let mut again = Vec::with_capacity(n);
    for (t, key) in &sent {
        let at = Instant::now();
        let replayed = client.send(*t, key).await?;
        again.push(at.elapsed());
        anyhow::ensure!(replayed, "a retry was not answered as a replay");
    }
    let (first, again) = (Latencies::new(first), Latencies::new(again));
    rows.push(Row {
        item: "5".into(),
        what: format!("idempotent replay vs first execution (allocate, 1 client, {n} each)"),
        holdfast: format!("{} p50", ms(again.p50())),
        baseline: format!("{} p50", ms(first.p50())),
        ratio: Some(first.p50().as_secs_f64() / again.p50().as_secs_f64()),
        holdfast_latency: latency(&again),
        baseline_latency: latency(&first),
        ..Row::default()
    });
    Ok(())
}

// ------------------------------------------------------------ item 4

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Apply {
    Push,
    /// The ceiling: one round trip per transaction of 100 (push_ceiling.rs).
    OneTrip,
    /// The same SQL under `pgbench -M simple`.
    Pgbench,
    Raw,
    RawSavepoints,
    Rest,
}

async fn apply(ctx: &Ctx, how: Apply, queue: &[push::Mutation]) -> anyhow::Result<push::Applied> {
    let customer = ctx.fixture.customer;
    match how {
        Apply::Push => push::push(&ctx.http, &ctx.base, &ctx.bearer, customer, queue).await,
        Apply::OneTrip => push_ceiling::one_trip(&ctx.pool, &ctx.who, customer, queue).await,
        Apply::Pgbench => {
            let (bin, url) = (ctx.pgbench.bin(), ctx.pgbench.url());
            push_ceiling::pgbench(bin, url, &ctx.who, customer, queue).await
        }
        Apply::Raw => push::raw(&ctx.pool, &ctx.who, customer, queue, false).await,
        Apply::RawSavepoints => push::raw(&ctx.pool, &ctx.who, customer, queue, true).await,
        Apply::Rest => push::rest(&ctx.http, &ctx.base, &ctx.bearer, customer, queue).await,
    }
}

/// One row of item 4 from its per-round results.
fn batch_row(results: &HashMap<Apply, Vec<push::Applied>>, h: Apply, b: Apply) -> Option<Row> {
    let (hs, bs) = (results.get(&h)?, results.get(&b)?);
    let total = |xs: &[push::Applied]| {
        let count: usize = xs.iter().map(|a| a.count).sum();
        let secs: f64 = xs.iter().map(|a| a.elapsed.as_secs_f64()).sum();
        count as f64 / secs
    };
    let per_round: Vec<f64> = hs
        .iter()
        .zip(bs)
        .map(|(h, b)| h.rate() / b.rate())
        .collect();
    let (ratio, ratio_range) = summarise(per_round);
    let lat = |xs: &[push::Applied]| Latencies::merge(xs.iter().map(|a| a.latencies.clone()));
    Some(Row {
        holdfast: rate(total(hs)),
        baseline: rate(total(bs)),
        ratio: Some(ratio),
        ratio_range,
        holdfast_latency: latency(&lat(hs)),
        baseline_latency: latency(&lat(bs)),
        ..Row::default()
    })
}

/// Item 4. The queue is split into rounds (by orders); in each round every
/// variant applies its own equal share (same shape and SKUs, fresh ids), in
/// an order reversed every other round, so load from elsewhere hits all.
async fn batch(ctx: &Ctx, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let orders = ctx.plan.batch_orders;
    let rounds = ctx.plan.batch_rounds.clamp(1, orders.max(1));
    let n = orders * push::PER_ORDER;
    let skus = &ctx.fixture.spread_skus;
    let mut results: HashMap<Apply, Vec<push::Applied>> = HashMap::new();
    for round in 0..rounds {
        let share = orders / rounds + usize::from(round < orders % rounds);
        let mut order = [
            Apply::Push,
            Apply::OneTrip,
            Apply::Pgbench,
            Apply::Raw,
            Apply::RawSavepoints,
            Apply::Rest,
        ];
        if round % 2 == 1 {
            order.reverse();
        }
        for how in order {
            progress::step(format_args!(
                "item 4: {} mutations, {how:?}, round {}/{rounds}",
                share * push::PER_ORDER,
                round + 1
            ));
            let queue = push::workload(share, skus, 4 + round as u64);
            let applied = apply(ctx, how, &queue).await?;
            results.entry(how).or_default().push(applied);
        }
    }
    let total = report::thousands(n as u64);
    if let Some(mut row) = batch_row(&results, Apply::Push, Apply::Rest) {
        row.item = "4a".into();
        row.what = format!("batch push vs single REST calls, {total} queued mutations of one desk");
        row.goal = Goal::new("≥ 4", row.ratio.unwrap_or(0.0) >= 4.0);
        rows.push(row);
    }
    if let Some(mut row) = batch_row(&results, Apply::Push, Apply::OneTrip) {
        row.item = "4b".into();
        row.what = format!(
            "batch push vs the ceiling: the same writes, one statement per mutation, a transaction \
             of 100 in one round trip, {total}"
        );
        row.goal = Goal::new("≥ 0.6", row.ratio.unwrap_or(0.0) >= 0.6);
        rows.push(row);
    }
    // Beside the ceiling, the other clients of the same writes against it.
    for (how, what) in [
        (
            Apply::Pgbench,
            "pgbench -M simple running the ceiling's SQL (one statement per round trip)",
        ),
        (
            Apply::Raw,
            "raw SQL over sqlx, item after item (one round trip per statement)",
        ),
    ] {
        if let Some(mut row) = batch_row(&results, how, Apply::OneTrip) {
            row.item = "4b".into();
            row.what = format!("{what} vs the ceiling, {total}");
            rows.push(row);
        }
    }
    if let Some(mut row) = batch_row(&results, Apply::RawSavepoints, Apply::Raw) {
        row.item = "4c".into();
        row.what = format!("raw ceiling with a savepoint per item vs without, {total}");
        rows.push(row);
    }
    Ok(())
}

// ------------------------------------------------------------ item 7

async fn stream_item(
    ctx: &Ctx,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    let (desks, commits) = (ctx.plan.desks, ctx.plan.stream_commits);
    let interval = Duration::from_millis(250);
    progress::step("item 7: the floor, one bare LISTEN hearing one bare NOTIFY");
    let floor = stream::bare_listen(&ctx.pool, commits * 5, interval / 5).await?;
    // Each commit is a real allocation (its feed row fires the trigger).
    let commit = |seed: u64| {
        let targets = ctx.fixture.spread_targets(0, 1);
        let (pool, who) = (ctx.pool.clone(), ctx.who.clone());
        let mut rng = StdRng::seed_from_u64(seed);
        move || {
            let t = targets[rng.random_range(0..targets.len())];
            let (pool, who) = (pool.clone(), who.clone());
            async move { crate::alloc::one_commit(&pool, &who, t, &Uuid::new_v4().to_string()).await }
        }
    };
    progress::step(format_args!(
        "item 7: {desks} desks on a bare LISTEN → broadcast → SSE hub (the baseline)"
    ));
    let (hub, hub_stop) =
        stream::start_bare_hub(ctx.server.runtime(), ctx.server.db.clone()).await?;
    let bare = stream::fan_out(&hub, &ctx.bearer, desks, commits, interval, commit(71)).await;
    let _ = hub_stop.send(true);
    let bare = bare?;
    progress::step(format_args!("item 7: {desks} desks on /v1/sync/stream"));
    let outcome =
        stream::fan_out(&ctx.base, &ctx.bearer, desks, commits, interval, commit(7)).await?;
    let (l, b) = (&outcome.latencies, &bare.latencies);
    rows.push(Row {
        item: "7".into(),
        what: format!(
            "stream: commit → `changed` at each of {} connected desks, {} commits (baseline: bare LISTEN→SSE hub)",
            report::thousands(desks as u64),
            commits
        ),
        holdfast: format!("{} p99", ms(l.p99())),
        baseline: format!("{} p99", ms(b.p99())),
        ratio: Some(b.p50().as_secs_f64() / l.p50().as_secs_f64().max(1e-9)),
        holdfast_latency: latency(l),
        baseline_latency: latency(b),
        goal: Goal::new("p99 ≤ 100 ms", l.p99() <= Duration::from_millis(100) && outcome.missed == 0),
        ..Row::default()
    });
    notes.push(format!(
        "Item 7: the floor under both, one LISTEN connection hearing a NOTIFY committed by \
         another, took {} p50 / {} p99; (desk, commit) pairs that heard nothing before the \
         next commit: Holdfast {}, baseline hub {}.",
        ms(floor.p50()),
        ms(floor.p99()),
        outcome.missed,
        bare.missed
    ));
    Ok(())
}
