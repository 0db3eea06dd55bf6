//! The bench's own database and fixture: a fresh database in the given
//! cluster (dropped afterwards), the demo tenant, one hot SKU and 10,000
//! spread SKUs with effectively unlimited stock, and draft orders whose lines
//! the allocation runs pick from.

use std::str::FromStr;

use anyhow::Context;
use holdfast_server::demo;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};
use uuid::Uuid;

/// Stock big enough that no run ever exhausts it (the ATS check still runs).
const UNLIMITED: i64 = 1_000_000_000_000;
/// Lines per bench order: a realistic order size, so loading the order for the
/// response costs what it costs in real use.
pub const LINES_PER_ORDER: usize = 16;
/// Orders over the spread SKUs: 640 × 16 lines cover all 10,000 SKUs.
const SPREAD_ORDERS: usize = 640;

/// A database created for this run; [`BenchDb::drop_database`] removes it.
pub struct BenchDb {
    admin: PgConnectOptions,
    pub name: String,
    pub options: PgConnectOptions,
    /// The bench database's URL, for pgbench (`DATABASE_URL` with its
    /// database swapped).
    pub url: String,
}

impl BenchDb {
    /// Creates `holdfast_bench_<pid>` in the cluster `url` points at.
    pub async fn create(url: &str) -> anyhow::Result<BenchDb> {
        let admin = PgConnectOptions::from_str(url)
            .context("DATABASE_URL is not a valid Postgres URL")?
            .disable_statement_logging();
        let name = format!("holdfast_bench_{}", std::process::id());
        let mut conn = admin
            .connect()
            .await
            .context("connecting to DATABASE_URL")?;
        sqlx::query(&format!("drop database if exists {name} with (force)"))
            .execute(&mut conn)
            .await?;
        sqlx::query(&format!("create database {name}"))
            .execute(&mut conn)
            .await
            .with_context(|| format!("creating database {name}"))?;
        conn.close().await?;
        let options = admin.clone().database(&name);
        let mut bench_url = reqwest::Url::parse(url).context("DATABASE_URL is not a URL")?;
        bench_url.set_path(&format!("/{name}"));
        Ok(BenchDb {
            admin,
            name,
            options,
            url: bench_url.to_string(),
        })
    }

    pub async fn drop_database(&self) -> anyhow::Result<()> {
        let mut conn = self.admin.connect().await?;
        sqlx::query(&format!(
            "drop database if exists {} with (force)",
            self.name
        ))
        .execute(&mut conn)
        .await
        .with_context(|| format!("dropping database {}", self.name))?;
        conn.close().await?;
        Ok(())
    }

    pub async fn pool(&self, size: u32) -> anyhow::Result<PgPool> {
        let pool = PgPoolOptions::new()
            .max_connections(size)
            .min_connections(0)
            .acquire_timeout(std::time::Duration::from_secs(60))
            .connect_with(self.options.clone())
            .await
            .context("connecting the bench's own pool")?;
        // Open every connection now, not inside a measured window.
        let mut held = Vec::with_capacity(size as usize);
        for _ in 0..size {
            held.push(pool.acquire().await?);
        }
        drop(held);
        Ok(pool)
    }
}

/// One order line an allocation can target.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub order: Uuid,
    pub line: Uuid,
    pub sku: Uuid,
}

/// Ids of everything the fixture made.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub tenant: Uuid,
    pub user: Uuid,
    pub customer: Uuid,
    pub spread_skus: Vec<Uuid>,
    /// One draft order per possible client; line 0 of each is the hot SKU.
    pub hot_orders: Vec<Target>,
    /// 640 draft orders of 16 lines over the 10,000 spread SKUs.
    pub spread_orders: Vec<Vec<Target>>,
}

impl Fixture {
    /// The hot line of client `i`'s own order.
    pub fn hot_target(&self, client: usize) -> Target {
        self.hot_orders[client % self.hot_orders.len()]
    }

    /// Client `i` of `n` owns the spread orders `j` with `j mod n == i`, so
    /// no two clients ever contend for an order row, and together they cover
    /// every spread SKU whatever `n` is.
    pub fn spread_targets(&self, client: usize, clients: usize) -> Vec<Target> {
        self.spread_orders
            .iter()
            .enumerate()
            .filter(|(j, _)| j % clients == client)
            .flat_map(|(_, lines)| lines.iter().copied())
            .collect()
    }
}

/// Extra SKUs for item 2, seeded with SQL.
pub const SPREAD_SKUS: usize = 10_000;

/// Builds the fixture on top of the demo tenant (`demo::seed` ran already).
pub async fn fixture(db: &PgPool, max_clients: usize) -> anyhow::Result<Fixture> {
    let tenant = demo::tenant_id("acme");
    let user = demo::user_id("acme", "dana@acme.test");
    let customer = demo::customer_id("acme", "Tokyo Distributor");
    let mut rng = StdRng::seed_from_u64(9);

    let hot_sku = Uuid::new_v4();
    let spread_skus: Vec<Uuid> = (0..SPREAD_SKUS).map(|_| Uuid::new_v4()).collect();
    let mut ids = vec![hot_sku];
    ids.extend(&spread_skus);
    let colors: Vec<String> = std::iter::once("Hot".to_owned())
        .chain((0..SPREAD_SKUS).map(|i| format!("B{i:05}")))
        .collect();
    let styles: Vec<&str> = std::iter::once("Bench Hot")
        .chain(std::iter::repeat_n("Bench Spread", SPREAD_SKUS))
        .collect();
    let mut tx = db.begin().await?;
    sqlx::query(
        "insert into skus (tenant_id, id, style, color, size, wholesale_price, msrp)
         select $1, id, style, color, 'M', 1000, 2000
           from unnest($2::uuid[], $3::text[], $4::text[]) as s(id, style, color)",
    )
    .bind(tenant)
    .bind(&ids)
    .bind(&styles)
    .bind(&colors)
    .execute(&mut *tx)
    .await
    .context("seeding the bench SKUs")?;
    sqlx::query(
        "insert into sku_positions (tenant_id, sku_id, on_hand) select $1, id, $3 from unnest($2::uuid[]) as p(id)",
    )
    .bind(tenant)
    .bind(&ids)
    .bind(UNLIMITED)
    .execute(&mut *tx)
    .await?;
    // Ledger = positions holds from the start, as in the demo seed.
    sqlx::query(
        "insert into inventory_ledger (tenant_id, sku_id, on_hand_delta, reason, source)
         select $1, id, $3, 'opening_balance', 'holdfast-bench' from unnest($2::uuid[]) as p(id)",
    )
    .bind(tenant)
    .bind(&ids)
    .bind(UNLIMITED)
    .execute(&mut *tx)
    .await?;

    // Hot orders: line 0 on the hot SKU, the rest on random spread SKUs.
    let mut hot_orders = Vec::new();
    let mut lines: Vec<(Uuid, Uuid, Uuid)> = Vec::new();
    let mut order_ids = Vec::new();
    for _ in 0..max_clients.max(1) {
        let order = Uuid::new_v4();
        order_ids.push(order);
        let hot_line = Uuid::new_v4();
        lines.push((hot_line, order, hot_sku));
        hot_orders.push(Target {
            order,
            line: hot_line,
            sku: hot_sku,
        });
        for _ in 1..LINES_PER_ORDER {
            let sku = spread_skus[rng.random_range(0..SPREAD_SKUS)];
            lines.push((Uuid::new_v4(), order, sku));
        }
    }
    let mut spread_orders = Vec::new();
    for j in 0..SPREAD_ORDERS {
        let order = Uuid::new_v4();
        order_ids.push(order);
        let mut targets = Vec::new();
        for k in 0..LINES_PER_ORDER {
            let sku = spread_skus[(j * LINES_PER_ORDER + k) % SPREAD_SKUS];
            let line = Uuid::new_v4();
            lines.push((line, order, sku));
            targets.push(Target { order, line, sku });
        }
        spread_orders.push(targets);
    }
    sqlx::query(
        "insert into orders (tenant_id, id, customer_id, customer_po, created_by, updated_by)
         select $1, id, $3, 'BENCH-' || left(id::text, 8), $4, $4 from unnest($2::uuid[]) as o(id)",
    )
    .bind(tenant)
    .bind(&order_ids)
    .bind(customer)
    .bind(user)
    .execute(&mut *tx)
    .await
    .context("seeding the bench orders")?;
    let (line_ids, line_orders, line_skus): (Vec<Uuid>, Vec<Uuid>, Vec<Uuid>) = lines.iter().fold(
        (Vec::new(), Vec::new(), Vec::new()),
        |(mut a, mut b, mut c), (l, o, s)| {
            a.push(*l);
            b.push(*o);
            c.push(*s);
            (a, b, c)
        },
    );
    sqlx::query(
        "insert into order_lines (tenant_id, id, order_id, sku_id, qty_ordered, unit_price)
         select $1, l.id, l.order_id, l.sku_id, $5, s.wholesale_price
           from unnest($2::uuid[], $3::uuid[], $4::uuid[]) as l(id, order_id, sku_id)
           join skus s on s.tenant_id = $1 and s.id = l.sku_id",
    )
    .bind(tenant)
    .bind(&line_ids)
    .bind(&line_orders)
    .bind(&line_skus)
    .bind(UNLIMITED)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    sqlx::query("analyze").execute(db).await?;
    Ok(Fixture {
        tenant,
        user,
        customer,
        spread_skus,
        hot_orders,
        spread_orders,
    })
}

/// Signs in through `POST /v1/sessions` and returns the bearer token.
pub async fn login(http: &reqwest::Client, base: &str, email: &str) -> anyhow::Result<String> {
    #[derive(serde::Deserialize)]
    struct Session {
        token: String,
    }
    let response = http
        .post(format!("{base}/v1/sessions"))
        .json(&serde_json::json!({
            "tenant": "acme",
            "email": email,
            "password": demo::DEMO_PASSWORD,
            "device_name": "holdfast-bench",
        }))
        .send()
        .await
        .context("POST /v1/sessions")?;
    let status = response.status();
    if status != reqwest::StatusCode::CREATED {
        anyhow::bail!(
            "signing in as {email} answered {status}: {}",
            response.text().await.unwrap_or_default()
        );
    }
    Ok(response.json::<Session>().await?.token)
}
