//! The finish: the storm is over (faults off, server up, relays back, the
//! flaky partner healthy). Every desk sends what it still holds; what the
//! server answered with a conflict or a rejection must be on the desk with
//! its reason; then the "user" resolves everything and the desks must land
//! on exactly the server's documents. Then every promise is audited.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use holdfast_client::api::SseParser;
use holdfast_client::store::pending::Status;
use holdfast_protocol::model::Order;
use holdfast_server::relay;
use reqwest::Method;
use uuid::Uuid;

use super::{relay_settings, Stage};
use crate::desk::{Desk, Resolve};
use crate::invariants::{self, Subscriber};
use crate::keys::KeyState;
use crate::partner::Behaviour;
use crate::proxy::{Faults, StatsSnapshot};

/// Bounds on the finish's waits: generous, so a hang fails instead of
/// stalling, never a claim about speed.
const CONVERGE_DEADLINE: Duration = Duration::from_secs(90);
const DELIVERY_DEADLINE: Duration = Duration::from_secs(120);
const SETTLE_PASSES: usize = 400;
const SETTLE_DEADLINE: Duration = Duration::from_secs(60);
/// All of `resolve_everything`'s rounds together.
const RESOLVE_DEADLINE: Duration = Duration::from_secs(180);

pub(super) async fn finish(stage: &mut Stage, mut desks: Vec<Desk>) -> anyhow::Result<()> {
    calm(stage).await?;
    for d in desks.iter_mut() {
        d.go_online();
        if let Err(e) = d.settle(SETTLE_PASSES, SETTLE_DEADLINE).await {
            stage.audit.check(
                "every desk can send its queue once the network is back",
                vec![format!("{e:#}")],
            );
        }
    }
    held_rows_carry_their_reason(stage, &desks)?;
    resolve_everything(stage, &mut desks).await?;
    converge(stage, &mut desks).await?;

    let all: Vec<(&String, &crate::keys::KeyInfo)> =
        desks.iter().flat_map(|d| d.keys.iter()).collect();
    invariants::keys(&stage.db, &all, &mut stage.audit).await?;
    let resurrected: Vec<String> = desks
        .iter()
        .flat_map(|d| {
            d.keys
                .resurrected
                .iter()
                .map(move |k| format!("desk {} key {k}", d.index))
        })
        .collect();
    stage.audit.check(
        "an acknowledged mutation never reappears in the queue",
        resurrected,
    );
    invariants::database(&stage.db, &mut stage.audit).await?;
    if let Some(wh) = &stage.warehouse {
        invariants::inbound(&stage.db, &wh.sent, &mut stage.audit).await?;
    }
    deliveries(stage).await?;
    invariants::stuck(&stage.db, &mut stage.audit).await?;
    tally(stage, &desks).await?;
    Ok(())
}

/// Faults off, black holes closed, the flaky partner healthy, two relays,
/// the server up.
async fn calm(stage: &mut Stage) -> anyhow::Result<()> {
    for p in stage.desk_proxies.iter().chain([&stage.warehouse_proxy]) {
        p.set_faults(Faults::none());
        p.black_hole(false);
    }
    stage.partners[1].0.behave(Behaviour::Healthy);
    while stage.relays.len() < 2 {
        stage
            .relays
            .push(relay::spawn(stage.db.clone(), relay_settings())?);
    }
    if !stage.server.is_running() {
        let addr = stage.server.start().await?;
        for p in stage.desk_proxies.iter().chain([&stage.warehouse_proxy]) {
            p.set_upstream(Some(addr));
        }
    }
    Ok(())
}

/// "Held as a conflict or rejected with a reason": every row the server did
/// not take is on the desk with its conflict or its rejection to show.
fn held_rows_carry_their_reason(stage: &mut Stage, desks: &[Desk]) -> anyhow::Result<()> {
    let mut bad = Vec::new();
    for d in desks {
        let e = d.engine();
        let conflicts: HashSet<Uuid> = e.conflicts()?.iter().map(|c| c.order_id).collect();
        let rejections: HashSet<String> = e
            .rejections()?
            .into_iter()
            .map(|r| r.idempotency_key)
            .collect();
        for row in e.pending_rows()? {
            let reason = row.last_error.as_deref().unwrap_or("").trim().to_owned();
            match row.status {
                Status::Queued => {}
                Status::Conflict if reason.is_empty() || !conflicts.contains(&row.order_id) => bad
                    .push(format!(
                        "desk {} key {}: a conflict the desk cannot show",
                        d.index, row.key
                    )),
                Status::Rejected if reason.is_empty() || !rejections.contains(&row.key) => bad
                    .push(format!(
                        "desk {} key {}: a rejection without its reason",
                        d.index, row.key
                    )),
                _ => {}
            }
        }
    }
    stage.audit.check(
        "every held mutation shows its conflict or rejection and reason",
        bad,
    );
    Ok(())
}

/// The user drops every conflict and rejection; what that re-queues is sent;
/// until nothing is left.
async fn resolve_everything(stage: &mut Stage, desks: &mut [Desk]) -> anyhow::Result<()> {
    let mut left = Vec::new();
    let deadline = Instant::now() + RESOLVE_DEADLINE;
    for round in 0..40 {
        left.clear();
        // The first rounds keep the user's work (rebase, "mine", reduce to
        // ATS, try again), so more of it lands; then whatever is still
        // refused is dropped.
        let how = if round < 3 {
            Resolve::AllKeep
        } else {
            Resolve::AllDrop
        };
        for d in desks.iter_mut() {
            d.resolve_some(how)?;
            let within = deadline
                .saturating_duration_since(Instant::now())
                .min(SETTLE_DEADLINE);
            if let Err(e) = d.settle(SETTLE_PASSES, within).await {
                left.push(format!("{e:#}"));
            }
            let n = d.engine().pending_rows()?.len();
            if n > 0 {
                left.push(format!("desk {}: {n} act(s) pending", d.index));
            }
        }
        if left.is_empty() || Instant::now() >= deadline {
            break;
        }
    }
    stage.audit.check(
        "nothing left pending once the user resolved everything",
        left,
    );
    Ok(())
}

/// The tenant's `/v1/sync/stream`, read raw: a poke means a commit has
/// become pullable. Opened before the pulls it paces.
struct Pokes {
    resp: reqwest::Response,
    parser: SseParser,
    ready: usize,
}

impl Pokes {
    async fn open(base: &str, token: &str) -> anyhow::Result<Pokes> {
        // No overall timeout: the stream stays open; each wait has its own.
        let client = reqwest::Client::new();
        let resp = client
            .get(format!("{base}/v1/sync/stream"))
            .bearer_auth(token)
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("stream: {}", resp.status());
        }
        Ok(Pokes {
            resp,
            parser: SseParser::default(),
            ready: 0,
        })
    }

    async fn next(&mut self) -> anyhow::Result<()> {
        while self.ready == 0 {
            let chunk = self.resp.chunk().await?.context("the stream ended")?;
            self.ready += self
                .parser
                .feed(&chunk)
                .iter()
                .filter(|e| e.event == "changed")
                .count();
        }
        self.ready -= 1;
        Ok(())
    }
}

/// The server's orders, through the API as any reader sees them.
async fn server_orders(stage: &Stage) -> anyhow::Result<HashMap<Uuid, Order>> {
    let mut out = HashMap::new();
    let mut after: Option<String> = None;
    for _ in 0..1000 {
        let path = match &after {
            Some(a) => format!("/v1/orders?limit=500&after={a}"),
            None => "/v1/orders?limit=500".to_owned(),
        };
        let page = stage.admin(Method::GET, &path, None).await?;
        let orders: Vec<Order> = serde_json::from_value(page["orders"].clone())?;
        for o in orders {
            out.insert(o.id, o);
        }
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_owned()),
            None => return Ok(out),
        }
    }
    bail!("the order list never ended")
}

/// What a screen shows: everything but the server's timestamps and author.
fn same_content(a: &Order, b: &Order) -> bool {
    a.id == b.id
        && a.customer_id == b.customer_id
        && a.customer_po == b.customer_po
        && a.ship_window_start == b.ship_window_start
        && a.ship_window_end == b.ship_window_end
        && a.notes == b.notes
        && a.status == b.status
        && a.version == b.version
        && a.invoice_id == b.invoice_id
        && a.lines == b.lines
}

/// Where a desk's view differs from the server's documents.
fn differences(
    d: &Desk,
    orders: &HashMap<Uuid, Order>,
    positions: &HashMap<Uuid, (i64, i64, i64)>,
) -> anyhow::Result<Vec<String>> {
    let mut diff = Vec::new();
    let views = d.engine().orders()?;
    let mut seen = HashSet::new();
    for v in &views {
        seen.insert(v.order.id);
        if !v.pending.is_empty() {
            diff.push(format!(
                "order {}: still {} pending",
                v.order.id,
                v.pending.len()
            ));
        }
        match orders.get(&v.order.id) {
            Some(o) if same_content(o, &v.order) => {}
            Some(o) => diff.push(format!(
                "order {}: desk v{} {:?}, server v{} {:?}",
                o.id, v.order.version, v.order.status, o.version, o.status
            )),
            None => diff.push(format!(
                "order {}: on the desk, not on the server",
                v.order.id
            )),
        }
    }
    for id in orders.keys().filter(|id| !seen.contains(id)) {
        diff.push(format!("order {id}: on the server, not on the desk"));
    }
    for s in d.engine().skus("", 1000)? {
        let sku = &s.sku;
        match positions.get(&sku.id) {
            Some(p)
                if *p == (sku.on_hand, sku.on_order, sku.allocated)
                    && s.pending_allocation == 0 => {}
            Some(p) => diff.push(format!(
                "sku {}: desk ({}, {}, {}), server {p:?}",
                sku.id, sku.on_hand, sku.on_order, sku.allocated
            )),
            None => diff.push(format!("sku {}: not on the server", sku.id)),
        }
    }
    Ok(diff)
}

/// Every desk's local view converges to the server's: pull, compare, and
/// if the feed has not caught up yet (an older transaction anywhere in the
/// cluster holds its fence) wait for the next poke.
async fn converge(stage: &mut Stage, desks: &mut [Desk]) -> anyhow::Result<()> {
    let mut pokes = Pokes::open(&stage.base()?, &stage.ops).await?;
    let orders = server_orders(stage).await?;
    let positions: HashMap<Uuid, (i64, i64, i64)> = sqlx::query_as::<_, (Uuid, i64, i64, i64)>(
        "select sku_id, on_hand, on_order, allocated from sku_positions where tenant_id = $1",
    )
    .bind(invariants::acme())
    .fetch_all(&stage.db)
    .await?
    .into_iter()
    .map(|(id, h, o, a)| (id, (h, o, a)))
    .collect();
    let deadline = Instant::now() + CONVERGE_DEADLINE;
    let mut bad = Vec::new();
    for d in desks.iter() {
        let mut diff;
        loop {
            // Faults are off, but a pull may still fail on a loaded machine.
            let _ = d.engine().pull().await;
            diff = differences(d, &orders, &positions)?;
            if diff.is_empty() {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, pokes.next()).await.is_err() {
                break;
            }
        }
        if !diff.is_empty() {
            bad.push(format!("desk {}: {}", d.index, diff.join(", ")));
        }
    }
    stage
        .audit
        .check("every desk's view converges to the server's documents", bad);
    Ok(())
}

/// Waits until each healthy partner holds every event it subscribed to; a
/// delivery dead-lettered during an outage is requeued as an operator would
/// once the partner is back.
async fn deliveries(stage: &mut Stage) -> anyhow::Result<()> {
    let deadline = Instant::now() + DELIVERY_DEADLINE;
    let healthy: HashSet<String> = stage
        .partners
        .iter()
        .filter(|p| p.2)
        .map(|p| p.0.name().to_owned())
        .collect();
    loop {
        let waits: Vec<_> = stage
            .partners
            .iter()
            .filter(|p| p.2)
            .map(|p| Box::pin(p.0.next_accepted()))
            .collect();
        let outbox = invariants::outbox(&stage.db).await?;
        let missing: usize = stage
            .partners
            .iter()
            .filter(|p| p.2)
            .map(|p| {
                invariants::missing(
                    &Subscriber {
                        partner: &p.0,
                        patterns: p.1.clone(),
                        healthy: true,
                    },
                    &outbox,
                )
                .len()
            })
            .sum();
        if missing == 0 || Instant::now() >= deadline {
            break;
        }
        let dead = stage
            .admin(
                Method::GET,
                "/v1/admin/deliveries?state=dead&limit=1000",
                None,
            )
            .await?;
        for d in dead["deliveries"].as_array().into_iter().flatten() {
            let partner = d["partner_name"].as_str().unwrap_or("");
            if healthy.contains(partner) {
                if let Some(id) = d["id"].as_i64() {
                    stage
                        .admin(
                            Method::POST,
                            &format!("/v1/admin/deliveries/{id}/requeue"),
                            None,
                        )
                        .await?;
                    stage.report.requeued += 1;
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        // The next accepted event, or a few seconds (a requeued delivery
        // may be the only one left and take its backoff first).
        let _ = tokio::time::timeout(left.min(Duration::from_secs(5)), futures_select(waits)).await;
    }
    let outbox = invariants::outbox(&stage.db).await?;
    let subs: Vec<Subscriber<'_>> = stage
        .partners
        .iter()
        .map(|p| Subscriber {
            partner: &p.0,
            patterns: p.1.clone(),
            healthy: p.2,
        })
        .collect();
    let mut audit = std::mem::take(&mut stage.audit);
    let unsigned: Vec<String> = subs
        .iter()
        .filter_map(|s| {
            let (_, _, unverified) = s.partner.counts();
            (unverified > 0).then(|| {
                format!(
                    "{}: {unverified} request(s) failed verification",
                    s.partner.name()
                )
            })
        })
        .collect();
    audit.check(
        "every delivery signed and verifiable (Standard Webhooks)",
        unsigned,
    );
    invariants::deliveries(&subs, &outbox, &mut audit);
    stage.audit = audit;
    Ok(())
}

/// Resolves when any of `waits` does.
async fn futures_select<F: std::future::Future<Output = ()> + Unpin>(waits: Vec<F>) {
    if waits.is_empty() {
        return;
    }
    let mut waits = waits;
    std::future::poll_fn(move |cx| {
        for w in waits.iter_mut() {
            if std::pin::Pin::new(w).poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// The report's numbers.
async fn tally(stage: &mut Stage, desks: &[Desk]) -> anyhow::Result<()> {
    let r = &mut stage.report;
    let mut proxy = StatsSnapshot::default();
    for p in stage.desk_proxies.iter().chain([&stage.warehouse_proxy]) {
        proxy += p.stats();
    }
    r.proxy = proxy;
    for d in desks {
        r.attempted += d.keys.len();
        r.acknowledged += d.keys.count(KeyState::Acked);
        r.conflicted += d.keys.count(KeyState::Conflicted);
        r.superseded += d.keys.count(KeyState::Superseded);
        for (_, info) in d.keys.iter() {
            if info.state == KeyState::Rejected {
                r.rejected += 1;
                *r.rejected_by_code
                    .entry(info.code.clone().unwrap_or_else(|| "?".into()))
                    .or_default() += 1;
            }
        }
        r.local_refusals += d.stats.local_refusals;
        r.duplicates_prevented += d.stats.replayed;
        r.desk_syncs += d.stats.syncs;
        r.desk_sync_failures += d.stats.sync_failures;
        r.desk_crashes += d.stats.crashes;
        r.offline_spells += d.stats.offline_spells;
        r.anomalies.extend(d.anomalies.iter().cloned());
        if !d.negative_lines.is_empty() {
            r.anomalies.push(format!(
                "desk {}: the optimistic view showed {} line(s) with a negative qty_allocated (pending releases applied over a document that no longer held them)",
                d.index,
                d.negative_lines.len()
            ));
        }
        if std::env::var_os("HOLDFAST_CHAOS_TIMINGS").is_some() {
            r.anomalies.push(format!(
                "desk {}: acting {:?}, syncing {:?}, other {:?}",
                d.index, d.stats.time_acting, d.stats.time_syncing, d.stats.time_other
            ));
        }
    }
    if let Some(wh) = &stage.warehouse {
        let (events, attempts, dups) = wh.counts();
        r.inbound_events = events;
        r.inbound_attempts = attempts;
        r.duplicates_prevented += dups;
    }
    for (p, _, _) in &stage.partners {
        let accepted = p.accepted();
        r.deliveries += accepted.len();
        r.redeliveries += p.redeliveries();
    }
    r.dead_lettered = sqlx::query_scalar(
        "select count(*) from deliveries where tenant_id = $1 and state = 'dead'",
    )
    .bind(invariants::acme())
    .fetch_one(&stage.db)
    .await?;
    r.checks_passed = stage.audit.passed;
    r.violations = stage.audit.violations.clone();
    Ok(())
}
