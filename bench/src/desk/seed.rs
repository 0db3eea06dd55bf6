//! The data items 8 and 9 run on: the tenant topped up with SQL, and fresh
//! client stores signed in as the bench user.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use holdfast_client::token::MemoryTokens;
use holdfast_client::{Engine, SyncConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use super::{Sizes, PASSWORD_USER};
use crate::items::Ctx;
use crate::progress;
use crate::setup::LINES_PER_ORDER;

/// Tops the tenant up to `sizes.skus` SKUs and `sizes.orders` orders with
/// SQL; returns the totals.
pub(super) async fn top_up(ctx: &Ctx, sizes: &Sizes) -> anyhow::Result<(usize, usize)> {
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
        "insert into order_lines (tenant_id, id, order_id, sku_id, qty_ordered, unit_price)
         select $1, l.id, l.order_id, l.sku_id, 12, s.wholesale_price
           from unnest($2::uuid[], $3::uuid[], $4::uuid[]) as l(id, order_id, sku_id)
           join skus s on s.tenant_id = $1 and s.id = l.sku_id",
    )
    .bind(tenant)
    .bind(&line_ids)
    .bind(&line_orders)
    .bind(&line_skus)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    // Vacuumed as well as analyzed, before anything is timed: left to
    // autovacuum, the vacuum these inserts call for started about a minute
    // later, in the middle of item 9b (seen with `pg_stat_user_tables`:
    // skus, order_lines, sku_positions, orders, … vacuumed and analyzed
    // during its plain loop), and weighed on whichever side it met.
    sqlx::query("vacuum analyze").execute(&ctx.pool).await?;
    Ok((
        have_skus as usize + new_skus,
        have_orders as usize + new_orders,
    ))
}

/// A fresh engine store at `path`, signed in as the bench user.
pub(super) async fn open_engine(ctx: &Ctx, path: &Path) -> anyhow::Result<Engine> {
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
