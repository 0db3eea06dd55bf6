//! Item 6: the relay's throughput with 1 and 2 workers and its commit → 2xx
//! latency, each next to the bare signed-POST loop. Throughput is measured
//! in interleaved rounds, as items 1–3 are: one run of each side told
//! little, the bare loop alone moving by half between runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::Ctx;
use crate::report::{self, latency, ms, rate, Goal, Row};
use crate::{progress, relay};

pub(super) async fn run(ctx: &mut Ctx, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let n = ctx.plan.relay_events;
    let tenant = ctx.fixture.tenant;
    // Everything enqueued so far is fanned out (to nobody) before the partner
    // exists, so it hears exactly item 6's events.
    ctx.server.stop_relays().await?;
    for _ in 0..100_000 {
        if holdfast_server::relay::claim::fan_out(&ctx.server.db).await? == 0 {
            break;
        }
    }
    let partner = relay::Partner::start().await?;
    relay::register(&ctx.http, &ctx.base, &ctx.operator_token, &partner).await?;
    let secret = partner
        .secret_text()
        .context("no partner secret")?
        .to_owned();
    let per_partner = ctx.server.relay_settings().per_partner_in_flight;
    let rounds = ctx.plan.relay_rounds.max(1);
    let mut sample_body = None;
    for workers in [1usize, 2] {
        let concurrency = per_partner * workers;
        // Relay and bare loop alternate, round by round, and swap places
        // every other round, so a burst of someone else's work (or a drift
        // of the machine) lands on both; the ratio is the rounds' median.
        let (mut relay_rates, mut bare_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let ids = relay::enqueue(&ctx.pool, tenant, n).await?;
            let bodies = Arc::new(relay::payloads(&ctx.pool, &ids).await?);
            sample_body = bodies.first().cloned();
            let tag = format!("b{workers}_{round}_");
            let (relay_rate, bare_rate) = if round % 2 == 0 {
                let r = through_relay(ctx, &partner, n, workers, round, rounds).await?;
                (
                    r,
                    bare(&partner, &secret, bodies, concurrency, &tag, round, rounds).await?,
                )
            } else {
                let b = bare(&partner, &secret, bodies, concurrency, &tag, round, rounds).await?;
                (
                    through_relay(ctx, &partner, n, workers, round, rounds).await?,
                    b,
                )
            };
            relay_rates.push(relay_rate);
            bare_rates.push(bare_rate);
            ratios.push(relay_rate / bare_rate);
        }
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
        let (ratio, ratio_range) = super::summarise(ratios);
        rows.push(Row {
            item: format!("6{}", if workers == 1 { "a" } else { "b" }),
            what: format!(
                "relay, {workers} worker(s), {} events to a verifying partner vs bare signed POSTs, {concurrency} in flight{}",
                report::thousands(n as u64),
                if rounds > 1 { format!(", {rounds} interleaved rounds") } else { String::new() }
            ),
            holdfast: rate(mean(&relay_rates)),
            baseline: rate(mean(&bare_rates)),
            ratio: Some(ratio),
            ratio_range,
            goal: Goal::new("≥ 0.5", ratio >= 0.5),
            ..Row::default()
        });
    }
    let m = ctx.plan.relay_latency_events;
    let interval = Duration::from_millis(10);
    progress::step(format_args!(
        "item 6: commit → partner latency, {m} events 10 ms apart, 1 worker"
    ));
    ctx.server.start_relays(1).await?;
    partner.reset();
    relay::commit_to_arrival(&ctx.pool, tenant, &partner, 10, interval).await?;
    partner.reset();
    let lat = relay::commit_to_arrival(&ctx.pool, tenant, &partner, m, interval).await?;
    let body = sample_body.context("no event body to replay")?;
    partner.reset();
    let bare = relay::bare_latency(&partner, &secret, &body, m, interval).await?;
    let met = lat.p50() <= Duration::from_millis(10) && lat.p99() <= Duration::from_millis(100);
    rows.push(Row {
        item: "6c".into(),
        what: format!(
            "relay: commit → 2xx at the partner, {m} events 10 ms apart (baseline: bare POST)"
        ),
        holdfast: format!("{} p50", ms(lat.p50())),
        baseline: format!("{} p50", ms(bare.p50())),
        ratio: Some(bare.p50().as_secs_f64() / lat.p50().as_secs_f64().max(1e-9)),
        holdfast_latency: latency(&lat),
        baseline_latency: latency(&bare),
        goal: Goal::new("p50 ≤ 10 ms, p99 ≤ 100 ms", met),
        ..Row::default()
    });

    ctx.server.stop_relays().await?;
    Ok(())
}

/// One round of the relay: `n` events already committed, delivered by
/// `workers` relays started for it; events per second from their start to
/// the last arrival.
async fn through_relay(
    ctx: &mut Ctx,
    partner: &Arc<relay::Partner>,
    n: usize,
    workers: usize,
    round: usize,
    rounds: usize,
) -> anyhow::Result<f64> {
    progress::step(format_args!(
        "item 6: {n} events through {workers} relay worker(s), round {}/{rounds}",
        round + 1
    ));
    partner.reset();
    let started = Instant::now();
    ctx.server.start_relays(workers).await?;
    partner
        .wait_for(n, "item 6 relay deliveries", Duration::from_secs(900))
        .await?;
    let last = partner.last_arrival().context("nothing arrived")?;
    ctx.server.stop_relays().await?;
    Ok(n as f64 / last.saturating_duration_since(started).as_secs_f64())
}

/// One round of the ceiling: the same signed bodies by a plain loop,
/// `concurrency` at a time; events per second.
async fn bare(
    partner: &Arc<relay::Partner>,
    secret: &str,
    bodies: Arc<Vec<String>>,
    concurrency: usize,
    tag: &str,
    round: usize,
    rounds: usize,
) -> anyhow::Result<f64> {
    let n = bodies.len();
    progress::step(format_args!(
        "item 6: the same {n} signed bodies by a plain loop, {concurrency} at a time, round {}/{rounds}",
        round + 1
    ));
    partner.reset();
    let elapsed = relay::bare_http(partner, secret, bodies, concurrency, tag).await?;
    anyhow::ensure!(partner.unique() == n, "the bare loop lost deliveries");
    Ok(n as f64 / elapsed.as_secs_f64())
}
