//! `--demo`: the fixture of API.md, seeded once in one transaction.
//!
//! Ids are UUIDv5 of stable names, so the fixture is the same on every machine
//! and a test can name "the Kestrel Overshirt, Washed Indigo, M" by id. If the
//! `acme` tenant exists the seed has already run (it commits whole or not at
//! all), and nothing is touched.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::auth;
use crate::master::{catalog, customers, price_lists, users};
use holdfast_protocol::admin::{CreateCustomer, CreatePriceList};
use holdfast_protocol::model::{Price, Role};

pub const DEMO_PASSWORD: &str = "holdfast-demo";

/// Namespace for the demo fixture's UUIDv5 ids.
const NAMESPACE: Uuid = Uuid::from_u128(0x6f1d_3c2e_8a4b_4b7e_9c61_0d2f_5a7e_4c10);

pub fn id(name: &str) -> Uuid {
    Uuid::new_v5(&NAMESPACE, name.as_bytes())
}

pub fn tenant_id(slug: &str) -> Uuid {
    id(&format!("tenant/{slug}"))
}

pub fn sku_id(tenant: &str, style: &str, color: &str, size: &str) -> Uuid {
    id(&format!("{tenant}/sku/{style}/{color}/{size}"))
}

pub fn customer_id(tenant: &str, name: &str) -> Uuid {
    id(&format!("{tenant}/customer/{name}"))
}

pub fn user_id(tenant: &str, email: &str) -> Uuid {
    id(&format!("{tenant}/user/{email}"))
}

pub fn price_list_id(tenant: &str, name: &str) -> Uuid {
    id(&format!("{tenant}/price-list/{name}"))
}

/// The demo's one price list: what Tokyo Distributor pays.
pub const TOKYO_PRICES: &str = "Tokyo Distributor prices";

/// A SKU's demo code: the initials of its style and colour, and its size
/// (`KO-WI-M` is the Kestrel Overshirt, Washed Indigo, M).
pub fn sku_code(style: &str, color: &str, size: &str) -> String {
    let initials = |s: &str| -> String {
        s.split_whitespace()
            .filter_map(|w| w.chars().next())
            .collect()
    };
    format!("{}-{}-{size}", initials(style), initials(color)).to_uppercase()
}

const ACME_STYLES: &[(&str, i64)] = &[
    ("Kestrel Overshirt", 4200),
    ("Harrier Chore Coat", 7800),
    ("Merlin Oxford Shirt", 3600),
    ("Osprey Crewneck", 2900),
    ("Falcon Denim Jacket", 8400),
    ("Swift Tee", 1200),
    ("Plover Chino", 4400),
    ("Tern Rain Shell", 9600),
    ("Wren Cardigan", 5200),
    ("Heron Work Pant", 4800),
];
const ACME_COLORS: &[&str] = &["Washed Indigo", "Ecru", "Olive Drab", "Charcoal", "Rust"];
const SIZES: &[&str] = &["XS", "S", "M", "L", "XL", "XXL"];

const GLOBEX_STYLES: &[(&str, i64)] = &[("Globex Polo", 2500), ("Globex Fleece", 4500)];
const GLOBEX_COLORS: &[&str] = &["Navy", "Heather Grey"];

struct SeedSku {
    id: Uuid,
    style: String,
    color: String,
    size: String,
    wholesale_price: i64,
    on_hand: i64,
    on_order: i64,
}

fn catalogue(tenant: &str, styles: &[(&str, i64)], colors: &[&str]) -> Vec<SeedSku> {
    let mut skus = Vec::new();
    for (s, (style, price)) in styles.iter().enumerate() {
        for (c, color) in colors.iter().enumerate() {
            for (z, size) in SIZES.iter().enumerate() {
                // Deterministic, varied stock: some sizes thin, some on order.
                let n = (s * 31 + c * 17 + z * 7) as i64;
                skus.push(SeedSku {
                    id: sku_id(tenant, style, color, size),
                    style: (*style).to_owned(),
                    color: (*color).to_owned(),
                    size: (*size).to_owned(),
                    wholesale_price: *price,
                    on_hand: 5 + n % 60,
                    on_order: if n % 3 == 0 { n % 40 } else { 0 },
                });
            }
        }
    }
    skus
}

/// Seeds both demo tenants unless `acme` is already there.
pub async fn seed(db: &PgPool) -> anyhow::Result<()> {
    let mut tx = db.begin().await?;
    // Two servers started with --demo at once must not both seed.
    sqlx::query("select pg_advisory_xact_lock(hashtext('holdfast demo seed'))")
        .execute(&mut *tx)
        .await?;
    let exists: bool =
        sqlx::query_scalar("select exists (select 1 from tenants where slug = 'acme')")
            .fetch_one(&mut *tx)
            .await?;
    if exists {
        tracing::info!("demo data already present; leaving it as it is");
        return Ok(());
    }

    let password_hash = tokio::task::spawn_blocking(|| {
        (0..4)
            .map(|_| auth::hash_password(DEMO_PASSWORD))
            .collect::<anyhow::Result<Vec<_>>>()
    })
    .await??;
    let mut hashes = password_hash.into_iter();
    let mut next_hash = || hashes.next().unwrap_or_default();

    tenant(&mut tx, "acme", "Acme Apparel").await?;
    user(
        &mut tx,
        "acme",
        "dana@acme.test",
        "Dana Whitfield",
        Role::AccountManager,
        &next_hash(),
    )
    .await?;
    user(
        &mut tx,
        "acme",
        "priya@acme.test",
        "Priya Raman",
        Role::AccountManager,
        &next_hash(),
    )
    .await?;
    user(
        &mut tx,
        "acme",
        "ops@acme.test",
        "Olu Operator",
        Role::Operator,
        &next_hash(),
    )
    .await?;
    let mut acme = catalogue("acme", ACME_STYLES, ACME_COLORS);
    // The SKU every story in API.md sells: exactly 6 on hand, none coming.
    for sku in &mut acme {
        if sku.style == "Kestrel Overshirt" && sku.color == "Washed Indigo" && sku.size == "M" {
            sku.on_hand = 6;
            sku.on_order = 0;
        }
    }
    skus(&mut tx, "acme", &acme).await?;
    // Tokyo Distributor buys the Kestrel Overshirt and the Swift Tee below
    // wholesale: the demo's customer-specific price.
    let tokyo_prices: Vec<Price> = acme
        .iter()
        .filter_map(|s| match s.style.as_str() {
            "Kestrel Overshirt" => Some((s, 3_800)),
            "Swift Tee" => Some((s, 1_000)),
            _ => None,
        })
        .map(|(s, price)| Price {
            sku_id: s.id,
            price,
        })
        .collect();
    price_list(&mut tx, "acme", TOKYO_PRICES, tokyo_prices).await?;
    let tokyo_list = Some(price_list_id("acme", TOKYO_PRICES));
    customer(&mut tx, "acme", "Austin Boutique", Some(500_000), None).await?;
    customer(&mut tx, "acme", "Tokyo Distributor", None, tokyo_list).await?;
    customer(
        &mut tx,
        "acme",
        "Brightwater & Sons Mercantile Company of Greater Northern Ontario",
        Some(2_500_000),
        None,
    )
    .await?;
    customer(
        &mut tx,
        "acme",
        "Lisbon Concept Store",
        Some(1_000_000),
        None,
    )
    .await?;

    tenant(&mut tx, "globex", "Globex Outfitters").await?;
    user(
        &mut tx,
        "globex",
        "gina@globex.test",
        "Gina Globex",
        Role::AccountManager,
        &next_hash(),
    )
    .await?;
    skus(
        &mut tx,
        "globex",
        &catalogue("globex", GLOBEX_STYLES, GLOBEX_COLORS),
    )
    .await?;
    customer(
        &mut tx,
        "globex",
        "Globex Retail West",
        Some(1_000_000),
        None,
    )
    .await?;

    // The seed's events announce a catalogue no partner existed to hear of:
    // there are no partners yet, so they are fanned out to nobody now rather
    // than to whichever partner registers first.
    sqlx::query(
        "update outbox set fanned_out_at = now()
          where tenant_id = any($1) and fanned_out_at is null",
    )
    .bind([tenant_id("acme"), tenant_id("globex")])
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    tracing::info!(acme_skus = acme.len(), "demo data seeded");
    Ok(())
}

async fn tenant(conn: &mut PgConnection, slug: &str, name: &str) -> sqlx::Result<()> {
    sqlx::query("insert into tenants (id, slug, name) values ($1, $2, $3)")
        .bind(tenant_id(slug))
        .bind(slug)
        .bind(name)
        .execute(conn)
        .await
        .map(|_| ())
}

async fn user(
    conn: &mut PgConnection,
    tenant: &str,
    email: &str,
    display_name: &str,
    role: Role,
    password_hash: &str,
) -> anyhow::Result<()> {
    let new = users::NewUser {
        email: email.to_owned(),
        display_name: display_name.to_owned(),
        role,
    };
    users::insert_in_tx(
        conn,
        tenant_id(tenant),
        user_id(tenant, email),
        &new,
        password_hash,
    )
    .await
    .map_err(|e| anyhow::anyhow!("demo user {email}: {e}"))?;
    Ok(())
}

/// A customer through the admin route's own create function (its change row
/// and `customer.updated` event).
async fn customer(
    conn: &mut PgConnection,
    tenant: &str,
    name: &str,
    credit_limit: Option<i64>,
    price_list_id: Option<Uuid>,
) -> anyhow::Result<()> {
    let body = CreateCustomer {
        id: customer_id(tenant, name),
        name: name.to_owned(),
        credit_limit,
        price_list_id,
        email: None,
        phone: None,
    };
    customers::create(conn, tenant_id(tenant), body)
        .await
        .map_err(|e| anyhow::anyhow!("demo customer {name}: {e}"))?;
    Ok(())
}

/// A price list and its prices through the admin routes' own functions.
async fn price_list(
    conn: &mut PgConnection,
    tenant: &str,
    name: &str,
    prices: Vec<Price>,
) -> anyhow::Result<()> {
    let t = tenant_id(tenant);
    let id = price_list_id(tenant, name);
    let body = CreatePriceList {
        id,
        name: name.to_owned(),
    };
    price_lists::create(conn, t, body)
        .await
        .map_err(|e| anyhow::anyhow!("demo price list {name}: {e}"))?;
    price_lists::replace_prices(conn, t, id, prices)
        .await
        .map_err(|e| anyhow::anyhow!("demo price list {name}: {e}"))?;
    Ok(())
}

/// The catalogue through the catalog import's own plan and apply (the SKUs,
/// their empty positions, change rows and `sku.updated` events), then the
/// opening stock with the inventory ledger rows that explain it (ledger sums
/// = positions holds from the first row).
async fn skus(conn: &mut PgConnection, tenant: &str, skus: &[SeedSku]) -> anyhow::Result<()> {
    let t = tenant_id(tenant);
    let rows: Vec<catalog::Row> = skus
        .iter()
        .enumerate()
        .map(|(i, s)| catalog::Row {
            line: i as u64 + 2,
            code: Some(sku_code(&s.style, &s.color, &s.size)),
            style: s.style.clone(),
            color: s.color.clone(),
            size: s.size.clone(),
            wholesale_price: s.wholesale_price,
            msrp: s.wholesale_price * 2,
            active: None,
        })
        .collect();
    let plan = catalog::plan(conn, t, &rows, |r| {
        sku_id(tenant, &r.style, &r.color, &r.size)
    })
    .await
    .map_err(|e| anyhow::anyhow!("the demo catalogue does not import: {e}"))?;
    catalog::apply_in_tx(conn, t, &plan)
        .await
        .map_err(|e| anyhow::anyhow!("the demo catalogue does not import: {e}"))?;

    let ids: Vec<Uuid> = skus.iter().map(|s| s.id).collect();
    let on_hand: Vec<i64> = skus.iter().map(|s| s.on_hand).collect();
    let on_order: Vec<i64> = skus.iter().map(|s| s.on_order).collect();
    sqlx::query(
        "update sku_positions p set on_hand = s.on_hand, on_order = s.on_order
           from unnest($2::uuid[], $3::bigint[], $4::bigint[]) as s(id, on_hand, on_order)
          where p.tenant_id = $1 and p.sku_id = s.id",
    )
    .bind(t)
    .bind(&ids)
    .bind(&on_hand)
    .bind(&on_order)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "insert into inventory_ledger (tenant_id, sku_id, on_hand_delta, on_order_delta, reason, source)
         select $1, id, on_hand, on_order, 'opening_balance', 'demo seed'
           from unnest($2::uuid[], $3::bigint[], $4::bigint[]) as p(id, on_hand, on_order)
          where on_hand <> 0 or on_order <> 0",
    )
    .bind(t)
    .bind(&ids)
    .bind(&on_hand)
    .bind(&on_order)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
