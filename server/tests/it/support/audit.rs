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
