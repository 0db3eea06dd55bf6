//! The audit the whole design leans on, as a test assertion: every position
//! equals its ledgers (`holdfast_server::db::audit`), and none is oversold.

use holdfast_server::db::audit;
use sqlx::{Acquire, Postgres};

/// Fails the test, naming each SKU, if any position in any tenant disagrees
/// with its ledgers or holds more allocated than on hand plus on order.
pub async fn assert_ledgers_match_positions<'a>(db: impl Acquire<'a, Database = Postgres>) {
    let mut conn = db.acquire().await.expect("audit connection");
    let mismatches = audit::ledger_mismatches(&mut *conn, None)
        .await
        .expect("audit");
    let shown: Vec<String> = mismatches.iter().map(ToString::to_string).collect();
    assert!(
        mismatches.is_empty(),
        "positions disagree with their ledgers:\n{}",
        shown.join("\n")
    );
    let oversold: Vec<String> = sqlx::query_scalar(
        "select format('sku %s (tenant %s): allocated %s of %s', sku_id, tenant_id, allocated,
                       on_hand + on_order)
           from sku_positions where allocated > on_hand + on_order
          order by tenant_id, sku_id",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("oversell audit");
    assert!(
        oversold.is_empty(),
        "positions allocated beyond on_hand + on_order:\n{}",
        oversold.join("\n")
    );
}

/// Fails the test, naming each order, unless every order's history (API.md
/// v1.1) holds exactly one entry per version, 1 to its current version: a
/// change committed without its entry, or an entry without its change.
pub async fn assert_one_history_entry_per_version<'a>(db: impl Acquire<'a, Database = Postgres>) {
    let mut conn = db.acquire().await.expect("audit connection");
    // The primary key makes versions unique per order, so count, min and max
    // together say "exactly 1..=version".
    let wrong: Vec<String> = sqlx::query_scalar(
        "select format('order %s (tenant %s): version %s, %s entries from %s to %s',
                       o.id, o.tenant_id, o.version, count(h.version), min(h.version),
                       max(h.version))
           from orders o
           left join order_history h on h.tenant_id = o.tenant_id and h.order_id = o.id
          group by o.tenant_id, o.id, o.version
         having count(h.version) <> o.version or min(h.version) <> 1
             or max(h.version) <> o.version
          order by o.tenant_id, o.id",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("history audit");
    assert!(
        wrong.is_empty(),
        "orders whose history is not one entry per version:\n{}",
        wrong.join("\n")
    );
}
