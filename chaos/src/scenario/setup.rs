//! Setting the stage: the operator signs in, partners are registered (one
//! steady, one that will fail and stall, one dead for good), the warehouse
//! gets its inbound secret, every party gets its proxy, and two relays run
//! in this process beside the one inside the server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use holdfast_server::demo;
use holdfast_server::relay;
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use super::{relay_settings, sub, Config, Stage};
use crate::desk::Catalog;
use crate::invariants::{self, Audit};
use crate::partner::{Behaviour, Partner};
use crate::proxy::Proxy;
use crate::report::Report;
use crate::server::ServerProcess;

async fn login(http: &reqwest::Client, base: &str, email: &str) -> anyhow::Result<String> {
    let resp = http
        .post(format!("{base}/v1/sessions"))
        .json(
            &json!({"tenant": "acme", "email": email, "password": demo::DEMO_PASSWORD,
                      "device_name": "chaos runner"}),
        )
        .send()
        .await?;
    let status = resp.status();
    let body: Value = resp.json().await?;
    if status.as_u16() != 201 {
        bail!("login {email}: {status} {body}");
    }
    body["token"]
        .as_str()
        .map(str::to_owned)
        .context("login answered no token")
}

/// The SKUs desks fight over (little stock) and the ones with room.
async fn catalog(db: &PgPool, orders: usize) -> anyhow::Result<Catalog> {
    let acme = invariants::acme();
    let kestrel = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let scarce: Vec<Uuid> = sqlx::query_scalar(
        "select sku_id from sku_positions where tenant_id = $1 and sku_id <> $2
          order by on_hand + on_order, sku_id limit 2",
    )
    .bind(acme)
    .bind(kestrel)
    .fetch_all(db)
    .await?;
    let cold: Vec<Uuid> = sqlx::query_scalar(
        "select sku_id from sku_positions where tenant_id = $1 and on_hand + on_order >= 40
          order by sku_id limit 24",
    )
    .bind(acme)
    .fetch_all(db)
    .await?;
    let mut hot = vec![kestrel];
    hot.extend(scarce);
    if hot.len() < 3 || cold.len() < 8 {
        bail!("the demo fixture lacks the SKUs this scenario needs");
    }
    Ok(Catalog {
        hot,
        cold,
        customers: vec![
            demo::customer_id("acme", "Tokyo Distributor"),
            demo::customer_id("acme", "Austin Boutique"),
        ],
        orders,
    })
}

pub(super) async fn setup(
    config: Config,
    db: PgPool,
    server: ServerProcess,
    addr: SocketAddr,
) -> anyhow::Result<Stage> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()?;
    let base = format!("http://{addr}");
    let ops = login(&http, &base, "ops@acme.test").await?;
    let seed = config.seed;
    let mut desk_proxies = Vec::new();
    for i in 0..config.desks {
        desk_proxies.push(Arc::new(
            Proxy::start(Some(addr), sub(seed, 100 + i as u64)).await?,
        ));
    }
    let warehouse_proxy = Arc::new(Proxy::start(Some(addr), sub(seed, 99)).await?);
    let partners = vec![
        (
            Partner::start("steady partner", Behaviour::Healthy).await?,
            vec!["*".to_owned()],
            true,
        ),
        (
            Partner::start("flaky partner", Behaviour::Healthy).await?,
            vec!["order.*".to_owned()],
            true,
        ),
        (
            // Narrow on purpose: a dead partner costs every relay an attempt
            // per event per retry.
            Partner::start("dead partner", Behaviour::Failing(500)).await?,
            vec!["order.confirmed".to_owned(), "order.cancelled".to_owned()],
            false,
        ),
    ];
    let catalog = catalog(&db, config.orders).await?;
    let mut relays = Vec::new();
    for _ in 0..2 {
        relays.push(relay::spawn(db.clone(), relay_settings())?);
    }
    let report = Report {
        seed,
        desks: config.desks,
        orders: config.orders,
        reproduce: config.reproduce(),
        ..Report::default()
    };
    let mut stage = Stage {
        config,
        db,
        server,
        http,
        ops,
        inbound_secret: String::new(),
        desk_proxies,
        warehouse_proxy,
        partners,
        relays,
        catalog,
        warehouse: None,
        report,
        audit: Audit::default(),
    };
    for (partner, types, _) in &stage.partners {
        let made = stage
            .admin(
                Method::POST,
                "/v1/admin/partners",
                Some(json!({"name": partner.name(), "url": partner.url(), "event_types": types})),
            )
            .await?;
        let secret = made["secret"]
            .as_str()
            .context("a partner without a secret")?;
        partner.set_secret(secret)?;
    }
    let made: Value = stage
        .admin(
            Method::POST,
            "/v1/admin/inbound-secrets",
            Some(json!({"provider": "warehouse"})),
        )
        .await?;
    stage.inbound_secret = made["secret"]
        .as_str()
        .context("no inbound secret")?
        .to_owned();
    Ok(stage)
}
