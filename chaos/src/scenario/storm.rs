//! The storm: desks work on shared orders and hot SKUs while six seeded
//! schedules, each waiting for act counts, break things —
//! the server is SIGKILLed (timed to land right after a request went
//! upstream) and restarted, relays are aborted and replaced, the flaky
//! partner fails and then stalls before it recovers, networks fall into
//! black holes, the warehouse sends and redelivers its events, and now and
//! then every desk syncs at once (as the stream pokes them all after a
//! commit), which is when concurrent allocations of one hot SKU meet.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use holdfast_server::demo;
use holdfast_server::relay;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;

use super::{relay_settings, sub, Stage};
use crate::desk::Desk;
use crate::invariants::{self, Audit};
use crate::partner::Behaviour;
use crate::proxy::Faults;
use crate::warehouse::Warehouse;
use crate::Progress;

/// The everyday network of a desk: a little slow, sometimes lossy.
fn desk_faults() -> Faults {
    Faults {
        delay: 0.10,
        drop_response: 0.05,
        cut_body: 0.03,
        refuse: 0.02,
        max_delay: Duration::from_millis(150),
    }
}

fn warehouse_faults() -> Faults {
    Faults {
        delay: 0.05,
        drop_response: 0.12,
        cut_body: 0.05,
        refuse: 0.03,
        max_delay: Duration::from_millis(100),
    }
}

/// Runs the chaos phase; returns the desks for the finish.
pub(super) async fn storm(
    stage: &mut Stage,
    progress: Arc<Progress>,
    dir: &Path,
) -> anyhow::Result<Vec<Desk>> {
    let seed = stage.config.seed;
    let mut desks = Vec::new();
    for i in 0..stage.config.desks {
        let email = if i % 2 == 0 {
            "dana@acme.test"
        } else {
            "priya@acme.test"
        };
        let mut desk = Desk::open(
            i,
            email,
            dir,
            stage.desk_proxies[i].clone(),
            sub(seed, 200 + i as u64),
            stage.catalog.clone(),
        )?;
        desk.login(demo::DEMO_PASSWORD).await?;
        desks.push(desk);
    }
    // Every desk starts with its share of the orders, and sees the others'.
    for j in 0..stage.config.orders {
        let n = desks.len();
        desks[j % n].create_order(&progress)?;
    }
    for _ in 0..2 {
        for d in desks.iter_mut() {
            d.sync().await?;
        }
    }
    for p in &stage.desk_proxies {
        p.set_faults(desk_faults());
    }
    stage.warehouse_proxy.set_faults(warehouse_faults());

    let handles: Vec<JoinHandle<(Desk, Option<anyhow::Error>)>> = desks
        .into_iter()
        .map(|mut d| {
            let progress = progress.clone();
            tokio::spawn(async move {
                while !progress.done() {
                    if let Err(e) = d.step(&progress).await {
                        return (d, Some(e));
                    }
                    let pause = d.pause();
                    tokio::time::sleep(pause).await;
                }
                (d, None)
            })
        })
        .collect();

    // One counter per schedule (each async block owns its own borrow).
    let (mut server_kills, mut relay_aborts, mut partner_outages, mut black_holes) =
        (0u32, 0u32, 0u32, 0u32);
    let mut kill_audit = Audit::default();
    let budget = stage.config.mutations;
    let kills = stage.config.kills.max(1);
    let server = &mut stage.server;
    let db = &stage.db;
    let desk_proxies = &stage.desk_proxies;
    let warehouse_proxy = &stage.warehouse_proxy;
    let relays = &mut stage.relays;
    let flaky = &stage.partners[1].0;
    let hot = &stage.catalog.hot;
    let secret = &stage.inbound_secret;
    let progress = &*progress;

    let point = |upstream| {
        for p in desk_proxies.iter().chain([warehouse_proxy]) {
            p.set_upstream(upstream);
        }
    };

    let killer = async {
        let mut rng = StdRng::seed_from_u64(sub(seed, 1));
        let planned: Vec<u64> = match budget {
            Some(b) => (0..kills)
                .map(|i| {
                    let slot = b / (u64::from(kills) + 1);
                    let jitter = rng.random_range(0..=slot / 3);
                    slot * u64::from(i + 1) + jitter - slot / 6
                })
                .collect(),
            None => Vec::new(),
        };
        let mut at = 0;
        loop {
            let target = match planned.get(server_kills as usize) {
                Some(t) => *t,
                None if budget.is_some() => break,
                None => {
                    at += rng.random_range(150..350);
                    at
                }
            };
            if !progress.wait_acts(target).await {
                break;
            }
            // Strike right after some desk's request went upstream, so a
            // transaction is likely open on the server when it dies.
            let victim = &desk_proxies[rng.random_range(0..desk_proxies.len())];
            let _ = tokio::time::timeout(Duration::from_secs(2), victim.forwarded()).await;
            server.kill().await?;
            point(None);
            server_kills += 1;
            invariants::database(db, &mut kill_audit).await?;
            if !kill_audit.ok() {
                progress.stop();
            }
            let back = progress.acts() + rng.random_range(10..50);
            progress.wait_acts(back).await;
            let addr = server.start().await?;
            point(Some(addr));
        }
        Ok::<(), anyhow::Error>(())
    };

    let relay_chaos = async {
        let mut rng = StdRng::seed_from_u64(sub(seed, 2));
        loop {
            let next = progress.acts() + rng.random_range(80..200);
            if !progress.wait_acts(next).await {
                break;
            }
            if !relays.is_empty() {
                let i = rng.random_range(0..relays.len());
                relays.swap_remove(i).abort();
                relay_aborts += 1;
            }
            let back = progress.acts() + rng.random_range(10..60);
            progress.wait_acts(back).await;
            relays.push(relay::spawn(db.clone(), relay_settings())?);
        }
        Ok::<(), anyhow::Error>(())
    };

    let partner_chaos = async {
        let mut rng = StdRng::seed_from_u64(sub(seed, 3));
        loop {
            let next = progress.acts() + rng.random_range(100..250);
            if !progress.wait_acts(next).await {
                break;
            }
            // The outage itself is the fault: its length is the load.
            flaky.behave(Behaviour::Failing(503));
            tokio::time::sleep(Duration::from_millis(rng.random_range(200..1200))).await;
            flaky.behave(Behaviour::Stalling(Duration::from_millis(1500)));
            tokio::time::sleep(Duration::from_millis(rng.random_range(300..1500))).await;
            flaky.behave(Behaviour::Healthy);
            partner_outages += 1;
        }
    };

    let holes = async {
        let mut rng = StdRng::seed_from_u64(sub(seed, 4));
        loop {
            let next = progress.acts() + rng.random_range(60..180);
            if !progress.wait_acts(next).await {
                break;
            }
            let target = if rng.random_bool(0.2) {
                warehouse_proxy
            } else {
                &desk_proxies[rng.random_range(0..desk_proxies.len())]
            };
            target.black_hole(true);
            tokio::time::sleep(Duration::from_millis(rng.random_range(300..2500))).await;
            target.black_hole(false);
            black_holes += 1;
        }
    };

    let warehouse = async {
        let mut rng = StdRng::seed_from_u64(sub(seed, 5));
        let mut wh = Warehouse::new(&warehouse_proxy.url(), secret, sub(seed, 6))?;
        loop {
            let next = progress.acts() + rng.random_range(8..30);
            if !progress.wait_acts(next).await {
                break;
            }
            wh.send_one(hot).await;
        }
        Ok::<Warehouse, anyhow::Error>(wh)
    };

    let rushes = async {
        let mut rng = StdRng::seed_from_u64(sub(seed, 7));
        loop {
            let next = progress.acts() + rng.random_range(5..18);
            if !progress.wait_acts(next).await {
                break;
            }
            progress.rush();
        }
    };

    let desks_done = async {
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await);
        }
        // Every desk stopped (budget, time, or an error): nothing more will
        // be counted, so no schedule may keep waiting for acts.
        progress.stop();
        out
    };

    let (killed, relayed, (), (), (), wh, finished) = tokio::join!(
        killer,
        relay_chaos,
        partner_chaos,
        holes,
        rushes,
        warehouse,
        desks_done
    );
    killed?;
    relayed?;
    stage.warehouse = Some(wh?);
    let mut desks = Vec::new();
    for joined in finished {
        let (desk, error) = joined?;
        if let Some(e) = error {
            stage.audit.check(
                &format!("desk {} works through the storm", desk.index),
                vec![format!("{e:#}")],
            );
        }
        desks.push(desk);
    }
    let r = &mut stage.report;
    r.server_kills = server_kills;
    r.relay_aborts = relay_aborts;
    r.partner_outages = partner_outages;
    r.black_holes = black_holes;
    r.rushes = progress.rushes();
    stage.audit.passed += kill_audit.passed;
    stage.audit.violations.extend(
        kill_audit
            .violations
            .into_iter()
            .map(|v| format!("right after a server kill: {v}")),
    );
    Ok(desks)
}
