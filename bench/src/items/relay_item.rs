//! Item 6: the relay's throughput with 1 and 2 workers and its commit → 2xx
//! latency, each next to the bare signed-POST loop.

use std::collections::HashMap;
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
    let mut sample_body = None;
    let mut bare_rates = HashMap::new();
    for workers in [1usize, 2] {
        let concurrency = per_partner * workers;
        progress::step(format_args!(
            "item 6: {n} events through {workers} relay worker(s)"
        ));
        let ids = relay::enqueue(&ctx.pool, tenant, n).await?;
        partner.reset();
        let started = Instant::now();
        ctx.server.start_relays(workers).await?;
        partner
            .wait_for(n, "item 6 relay deliveries", Duration::from_secs(900))
            .await?;
        let last = partner.last_arrival().context("nothing arrived")?;
        ctx.server.stop_relays().await?;
        let relay_rate = n as f64 / last.saturating_duration_since(started).as_secs_f64();
        progress::step(format_args!(
            "item 6: the same {n} signed bodies by a plain loop, {concurrency} at a time"
        ));
        let bodies = Arc::new(relay::payloads(&ctx.pool, &ids).await?);
        sample_body = bodies.first().cloned();
        partner.reset();
        let elapsed = relay::bare_http(
            &partner,
            &secret,
            bodies,
            concurrency,
            &format!("b{workers}_"),
        )
        .await?;
        anyhow::ensure!(partner.unique() == n, "the bare loop lost deliveries");
        let bare_rate = n as f64 / elapsed.as_secs_f64();
        bare_rates.insert(workers, bare_rate);
        let ratio = relay_rate / bare_rate;
        rows.push(Row {
            item: format!("6{}", if workers == 1 { "a" } else { "b" }),
            what: format!(
                "relay, {workers} worker(s), {} events to a verifying partner vs bare signed POSTs, {concurrency} in flight",
                report::thousands(n as u64)
            ),
            holdfast: rate(relay_rate),
            baseline: rate(bare_rate),
            ratio: Some(ratio),
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
