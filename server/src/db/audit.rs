//! The ledger audit: every SKU position is the sum of its ledgers.
//!
//! A position (`sku_positions`) is a cache of two append-only ledgers, each
//! written in the transaction that changes the position:
//!
//! - `allocated` = the sum of `allocation_ledger.delta` for the SKU
//!   (allocate, release, remove_line, cancel);
//! - `on_hand` = the sum of `inventory_ledger.on_hand_delta`, and
//!   `on_order` = the sum of `inventory_ledger.on_order_delta` (seed,
//!   warehouse events, reconcile).
//!
//! A position that disagrees with its ledgers means a change was applied
//! without its ledger row, or a ledger row was written without its change:
//! ATS would then be wrong, and an oversell could hide behind a position that
//! looks fine. The tests and the chaos suite ask this after every storm, as
//! an auditor reading the database directly would.
//!
//! Ledger rows for a SKU that has no position count against a position of
//! zeros, so they are reported too.

use std::fmt;

use sqlx::PgExecutor;
use uuid::Uuid;

/// The three quantities a position holds, read from the position or summed
/// from the ledgers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quantities {
    pub on_hand: i64,
    pub on_order: i64,
    pub allocated: i64,
}

/// One SKU whose position disagrees with its ledgers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub tenant_id: Uuid,
    pub sku_id: Uuid,
    /// What `sku_positions` says.
    pub position: Quantities,
    /// What the ledgers sum to.
    pub ledgers: Quantities,
}

impl Mismatch {
    /// `allocated` differs from the allocation ledger's sum.
    pub fn allocation_differs(&self) -> bool {
        self.position.allocated != self.ledgers.allocated
    }

    /// `on_hand` or `on_order` differs from the inventory ledger's sums.
    pub fn inventory_differs(&self) -> bool {
        self.position.on_hand != self.ledgers.on_hand
            || self.position.on_order != self.ledgers.on_order
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p, l) = (&self.position, &self.ledgers);
        write!(
            f,
            "sku {} (tenant {}): position on_hand {} / on_order {} / allocated {}, \
             ledgers on_hand {} / on_order {} / allocated {}",
            self.sku_id,
            self.tenant_id,
            p.on_hand,
            p.on_order,
            p.allocated,
            l.on_hand,
            l.on_order,
            l.allocated
        )
    }
}

#[derive(sqlx::FromRow)]
struct Row {
    tenant_id: Uuid,
    sku_id: Uuid,
    on_hand: i64,
    on_order: i64,
    allocated: i64,
    ledger_on_hand: i64,
    ledger_on_order: i64,
    ledger_allocated: i64,
}

/// Every SKU whose position disagrees with its ledgers, in one tenant or (with
/// `None`) in all of them, ordered by tenant and SKU. Empty when the books
/// balance.
///
/// Reads across tenants, so it runs as the connecting role, never inside a
/// transaction bound to a tenant.
pub async fn ledger_mismatches<'e>(
    db: impl PgExecutor<'e>,
    tenant: Option<Uuid>,
) -> Result<Vec<Mismatch>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(
        "with p as (select tenant_id, sku_id, on_hand, on_order, allocated
                      from sku_positions
                     where $1::uuid is null or tenant_id = $1),
              a as (select tenant_id, sku_id, sum(delta) as allocated
                      from allocation_ledger
                     where $1::uuid is null or tenant_id = $1
                     group by tenant_id, sku_id),
              i as (select tenant_id, sku_id, sum(on_hand_delta) as on_hand,
                           sum(on_order_delta) as on_order
                      from inventory_ledger
                     where $1::uuid is null or tenant_id = $1
                     group by tenant_id, sku_id),
              books as (
                select tenant_id, sku_id,
                       coalesce(p.on_hand, 0) as on_hand,
                       coalesce(p.on_order, 0) as on_order,
                       coalesce(p.allocated, 0) as allocated,
                       coalesce(i.on_hand, 0)::bigint as ledger_on_hand,
                       coalesce(i.on_order, 0)::bigint as ledger_on_order,
                       coalesce(a.allocated, 0)::bigint as ledger_allocated
                  from p
                  full join a using (tenant_id, sku_id)
                  full join i using (tenant_id, sku_id))
         select * from books
          where on_hand <> ledger_on_hand
             or on_order <> ledger_on_order
             or allocated <> ledger_allocated
          order by tenant_id, sku_id",
    )
    .bind(tenant)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Mismatch {
            tenant_id: r.tenant_id,
            sku_id: r.sku_id,
            position: Quantities {
                on_hand: r.on_hand,
                on_order: r.on_order,
                allocated: r.allocated,
            },
            ledgers: Quantities {
                on_hand: r.ledger_on_hand,
                on_order: r.ledger_on_order,
                allocated: r.ledger_allocated,
            },
        })
        .collect())
}
