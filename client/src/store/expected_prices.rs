//! `expected_prices`: the unit price the desk showed for a line when the user
//! added it (the customer's price list, else wholesale), kept by line id in
//! the same transaction as the pending add. While the add is pending the view
//! prices the line with it; once the server's document carries the line its
//! own `unit_price` is shown, and a difference from this is shown beside it
//! rather than hidden. Rows outlive the pending act (a restart, the server's
//! answer), which is the point.

use std::collections::HashMap;

use rusqlite::{params, Transaction};
use uuid::Uuid;

use super::{Migration, StoreError, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[(
    2,
    "create table expected_prices (
        line_id    text primary key,
        order_id   text not null,
        sku_id     text not null,
        unit_price integer not null,
        created_at integer not null
    );
    create index expected_prices_order on expected_prices (order_id);",
)];

/// Records what the desk expects a new line to cost. A re-issued add of the
/// same line (a conflict resolution) keeps the first expectation: that is
/// what the user saw when they added it.
pub fn record(
    tx: &Transaction<'_>,
    order_id: Uuid,
    line_id: Uuid,
    sku_id: Uuid,
    unit_price: i64,
    now: i64,
) -> StoreResult<()> {
    tx.prepare_cached(
        "insert into expected_prices (line_id, order_id, sku_id, unit_price, created_at)
         values (?1, ?2, ?3, ?4, ?5) on conflict (line_id) do nothing",
    )?
    .execute(params![
        line_id.to_string(),
        order_id.to_string(),
        sku_id.to_string(),
        unit_price,
        now
    ])?;
    Ok(())
}

/// The expected unit price of each line of `order_id` added on this desk.
pub fn for_order(tx: &Transaction<'_>, order_id: Uuid) -> StoreResult<HashMap<Uuid, i64>> {
    let mut stmt =
        tx.prepare_cached("select line_id, unit_price from expected_prices where order_id = ?1")?;
    let rows = stmt
        .query_map([order_id.to_string()], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|(id, price)| {
            let id = id
                .parse()
                .map_err(|_| StoreError::Corrupt(format!("expected price line id {id:?}")))?;
            Ok((id, price))
        })
        .collect()
}
