//! What the second tenancy wall (row-level security) costs: the raw one-commit
//! allocation of items 1–3 with and without the binding every request
//! transaction now carries (`holdfast_server::db::begin_for_tenant`: one
//! more round trip that switches to the `holdfast_tenant` role and names the
//! tenant, so Postgres row-level security filters and checks every
//! statement). Unbound, the bench's connection is the cluster's superuser, to
//! which no policy applies: the cost of the same work without the wall.
//!
//! A third, diagnostic variant binds inside the `BEGIN` itself (one simple
//! query, no extra round trip), to split the cost between the round trip and
//! the policies. The server does not do that; `db/tenancy.rs` says why.
//! Another repeats bound against unbound on connections with
//! `synchronous_commit = off`, where the wait for the WAL flush no longer
//! hides the binding's own cost.
//!
//! Both sides also run under `pgbench -M prepared` (the ceiling's client,
//! issue 16), bound and unbound, and our unbound client is shown against
//! pgbench's.
//!
//! `--only 10` runs just this; it runs after items 1–9 otherwise.

use std::sync::Arc;

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use uuid::Uuid;

use crate::alloc::{one_commit_in_tx, Who};
use crate::items::Ctx;
use crate::load::{self, Client, Latencies, Measured};
use crate::pgbench::Script;
use crate::progress;
use crate::report::{latency, rate, Row};
use crate::setup::Target;
use holdfast_server::db::{begin_for_tenant, tenancy::TENANT_ROLE};

/// The number `--only` knows this measurement by.
pub const ITEM: u8 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    /// `begin`, as the connecting (superuser) role: no policy applies.
    Unbound,
    /// `begin_for_tenant`, as the server's request paths run.
    Bound,
    /// The binding folded into the `BEGIN` (diagnostic).
    InBegin,
    /// `pgbench -M prepared`, unbound and bound: the ceiling's view of the
    /// same cost (issue 16), with no client of ours in the way.
    PgbenchUnbound,
    PgbenchBound,
}

impl Binding {
    fn name(self) -> &'static str {
        match self {
            Binding::Unbound => "unbound",
            Binding::Bound => "bound (begin_for_tenant)",
            Binding::InBegin => "bound inside BEGIN",
            Binding::PgbenchUnbound => "pgbench, unbound",
            Binding::PgbenchBound => "pgbench, bound",
        }
    }
}

struct Allocator {
    db: PgPool,
    who: Arc<Who>,
    binding: Binding,
    begin: String,
    targets: Vec<Target>,
    rng: StdRng,
}

impl Client for Allocator {
    async fn step(&mut self) -> anyhow::Result<()> {
        let t = self.targets[self.rng.random_range(0..self.targets.len())];
        let key = Uuid::new_v4().to_string();
        let mut tx = match self.binding {
            Binding::Unbound | Binding::PgbenchUnbound => self.db.begin().await?,
            Binding::Bound | Binding::PgbenchBound => {
                begin_for_tenant(&self.db, self.who.tenant).await?
            }
            Binding::InBegin => self.db.begin_with(self.begin.clone()).await?,
        };
        one_commit_in_tx(&mut tx, &self.who, t, &key).await?;
        tx.commit().await?;
        Ok(())
    }
}

async fn measure(
    ctx: &Ctx,
    pool: &PgPool,
    hot: bool,
    binding: Binding,
    clients: usize,
) -> anyhow::Result<Measured> {
    let f = &ctx.fixture;
    let targets = |i: usize| {
        if hot {
            vec![f.hot_target(i)]
        } else {
            f.spread_targets(i, clients)
        }
    };
    if let Binding::PgbenchUnbound | Binding::PgbenchBound = binding {
        let per_client: Vec<Vec<Target>> = (0..clients).map(targets).collect();
        let len = ctx.pgbench.load_targets(&ctx.pool, &per_client).await?;
        let shape = Script {
            three: false,
            bound: binding == Binding::PgbenchBound,
        };
        return ctx.pgbench.run(clients, len, shape, ctx.plan.window).await;
    }
    // A tenant id prints as hex and dashes only: safe to inline.
    let begin = format!(
        "begin; set local role {TENANT_ROLE}; set local app.tenant_id = '{}'",
        ctx.who.tenant
    );
    let cs = (0..clients)
        .map(|i| Allocator {
            db: pool.clone(),
            who: ctx.who.clone(),
            binding,
            begin: begin.clone(),
            targets: targets(i),
            rng: StdRng::seed_from_u64((i as u64) << 8 | clients as u64),
        })
        .collect();
    load::run(cs, ctx.plan.window).await
}

fn mean_rate(ms: &[Measured]) -> f64 {
    ms.iter().map(Measured::rate).sum::<f64>() / ms.len().max(1) as f64
}

fn merged(ms: &[Measured]) -> Latencies {
    Latencies::merge(ms.iter().map(|m| m.latencies.clone()))
}

/// `a` against `b`: the median of the per-round rate ratios.
fn row(a: &[Measured], b: &[Measured]) -> Row {
    let mut per_round: Vec<f64> = a.iter().zip(b).map(|(a, b)| a.rate() / b.rate()).collect();
    per_round.sort_by(f64::total_cmp);
    let n = per_round.len();
    let median = match n {
        0 => f64::NAN,
        n if n % 2 == 1 => per_round[n / 2],
        n => (per_round[n / 2 - 1] + per_round[n / 2]) / 2.0,
    };
    Row {
        holdfast: rate(mean_rate(a)),
        baseline: rate(mean_rate(b)),
        ratio: Some(median),
        ratio_range: (n > 1).then(|| (per_round[0], per_round[n - 1])),
        holdfast_latency: latency(&merged(a)),
        baseline_latency: latency(&merged(b)),
        ..Row::default()
    }
}

/// Adds the bound-vs-unbound rows to the table and the diagnostic variants
/// to the diagnostics.
pub async fn run(ctx: &Ctx, rows: &mut Vec<Row>, diagnostics: &mut Vec<Row>) -> anyhow::Result<()> {
    if !(ctx.plan.only.is_empty() || ctx.plan.only.contains(&ITEM)) {
        return Ok(());
    }
    // One client (latency) and 32 (items 1–2's goals): enough to see the
    // cost, and a full run stays under three minutes longer.
    let mut levels: Vec<usize> = ctx
        .plan
        .clients
        .iter()
        .copied()
        .filter(|c| [1, 32].contains(c))
        .collect();
    if levels.is_empty() {
        levels.clone_from(&ctx.plan.clients);
    }
    committed(ctx, &levels, rows, diagnostics).await?;
    no_fsync_wait(ctx, &levels, diagnostics).await
}

/// Items 1–3's conditions: every commit waits for its WAL flush.
async fn committed(
    ctx: &Ctx,
    levels: &[usize],
    rows: &mut Vec<Row>,
    diagnostics: &mut Vec<Row>,
) -> anyhow::Result<()> {
    for &c in levels {
        for (hot, name) in [(false, "spread"), (true, "hot SKU")] {
            let mut unbound = Vec::new();
            let mut bound = Vec::new();
            let mut in_begin = Vec::new();
            let (mut pgb_unbound, mut pgb_bound) = (Vec::new(), Vec::new());
            for round in 0..ctx.plan.rounds {
                let mut order = [
                    Binding::PgbenchUnbound,
                    Binding::Unbound,
                    Binding::Bound,
                    Binding::InBegin,
                    Binding::PgbenchBound,
                ];
                // Alternate the order between rounds so drift hits every side.
                if round % 2 == 1 {
                    order.reverse();
                }
                for binding in order {
                    progress::step(format_args!(
                        "RLS cost: {name}, {c} clients, {}, round {}/{}",
                        binding.name(),
                        round + 1,
                        ctx.plan.rounds
                    ));
                    let m = measure(ctx, &ctx.pool, hot, binding, c)
                        .await
                        .with_context(|| format!("RLS cost, {name}, {}", binding.name()))?;
                    match binding {
                        Binding::Unbound => unbound.push(m),
                        Binding::Bound => bound.push(m),
                        Binding::InBegin => in_begin.push(m),
                        Binding::PgbenchUnbound => pgb_unbound.push(m),
                        Binding::PgbenchBound => pgb_bound.push(m),
                    }
                }
            }
            let mut r = row(&bound, &unbound);
            r.item = "RLS".into();
            r.what = format!(
                "raw one-commit allocation bound to its tenant under RLS vs unbound, {name}, {c} clients"
            );
            progress::step(format_args!(
                "RLS cost: {name}, {c} clients: bound/unbound = {:.3}",
                r.ratio.unwrap_or(f64::NAN)
            ));
            rows.push(r);
            let mut p = row(&pgb_bound, &pgb_unbound);
            p.item = "RLS".into();
            p.what = format!(
                "the same under pgbench -M prepared (the ceiling's client), bound vs unbound, {name}, {c} clients"
            );
            rows.push(p);
            let mut u = row(&unbound, &pgb_unbound);
            u.item = "RLS".into();
            u.what =
                format!("unbound: raw SQL over sqlx vs pgbench -M prepared, {name}, {c} clients");
            rows.push(u);
            let mut d = row(&in_begin, &unbound);
            d.item = "RLS-d".into();
            d.what = format!(
                "same, binding folded into the BEGIN (no extra round trip) vs unbound, {name}, {c} clients"
            );
            diagnostics.push(d);
        }
    }
    Ok(())
}

/// The same on connections with `synchronous_commit = off`: without the wait
/// for the WAL flush, which dwarfs everything else per transaction here, the
/// binding's own cost (a round trip, the policies) is what is left to see.
async fn no_fsync_wait(
    ctx: &Ctx,
    levels: &[usize],
    diagnostics: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let options = (*ctx.pool.connect_options())
        .clone()
        .options([("synchronous_commit", "off")]);
    let max = levels.iter().copied().max().unwrap_or(1) as u32;
    let pool = PgPoolOptions::new()
        .max_connections(max + 2)
        .connect_with(options)
        .await
        .context("connecting with synchronous_commit=off")?;
    for &c in levels {
        let mut unbound = Vec::new();
        let mut bound = Vec::new();
        for round in 0..ctx.plan.rounds {
            let mut order = [Binding::Unbound, Binding::Bound];
            if round % 2 == 1 {
                order.reverse();
            }
            for binding in order {
                progress::step(format_args!(
                    "RLS cost, synchronous_commit=off: spread, {c} clients, {}, round {}/{}",
                    binding.name(),
                    round + 1,
                    ctx.plan.rounds
                ));
                let m = measure(ctx, &pool, false, binding, c)
                    .await
                    .with_context(|| format!("RLS cost without fsync wait, {}", binding.name()))?;
                match binding {
                    Binding::Bound => bound.push(m),
                    _ => unbound.push(m),
                }
            }
        }
        let mut d = row(&bound, &unbound);
        d.item = "RLS-d".into();
        d.what = format!(
            "bound vs unbound with synchronous_commit=off (no WAL flush wait), spread, {c} clients"
        );
        progress::step(format_args!(
            "RLS cost without fsync wait: spread, {c} clients: bound/unbound = {:.3}",
            d.ratio.unwrap_or(f64::NAN)
        ));
        diagnostics.push(d);
    }
    pool.close().await;
    Ok(())
}
