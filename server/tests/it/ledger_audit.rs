//! The ledger audit itself (`holdfast_server::db::audit`): silent on books
//! that balance, and it names every SKU whose position was written behind its
//! ledgers' back, in the tenant asked about.

use holdfast_server::db::audit::{ledger_mismatches, Quantities};
use holdfast_server::demo;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{acme, globex, kestrel_m, MIGRATIONS};

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_audit_names_each_position_its_ledgers_disagree_with(db: PgPool) {
    demo::seed(&db).await.expect("seed");
    let clean = ledger_mismatches(&db, None).await.expect("audit");
    assert!(clean.is_empty(), "the demo books balance: {clean:?}");

    let position = |tenant: Uuid, sku: Uuid| {
        let db = db.clone();
        async move {
            let (on_hand, on_order, allocated): (i64, i64, i64) = sqlx::query_as(
                "select on_hand, on_order, allocated from sku_positions
                  where tenant_id = $1 and sku_id = $2",
            )
            .bind(tenant)
            .bind(sku)
            .fetch_one(&db)
            .await
            .expect("position");
            Quantities {
                on_hand,
                on_order,
                allocated,
            }
        }
    };

    // Acme's Kestrel M: on_hand and allocated changed with no ledger row.
    let kestrel = kestrel_m();
    let booked = position(acme(), kestrel).await;
    sqlx::query(
        "update sku_positions set on_hand = on_hand + 3, allocated = allocated + 1
          where tenant_id = $1 and sku_id = $2",
    )
    .bind(acme())
    .bind(kestrel)
    .execute(&db)
    .await
    .expect("break the position");
    // A Globex SKU: an inventory ledger row whose change never reached the
    // position.
    let globex_sku: Uuid = sqlx::query_scalar(
        "select sku_id from sku_positions where tenant_id = $1 order by sku_id limit 1",
    )
    .bind(globex())
    .fetch_one(&db)
    .await
    .expect("a globex sku");
    let globex_booked = position(globex(), globex_sku).await;
    sqlx::query(
        "insert into inventory_ledger (tenant_id, sku_id, on_order_delta, reason, source)
         values ($1, $2, 5, 'test', 'ledger_audit test')",
    )
    .bind(globex())
    .bind(globex_sku)
    .execute(&db)
    .await
    .expect("break the ledger");

    let acme_only = ledger_mismatches(&db, Some(acme())).await.expect("audit");
    assert_eq!(acme_only.len(), 1, "{acme_only:?}");
    let m = &acme_only[0];
    assert_eq!((m.tenant_id, m.sku_id), (acme(), kestrel));
    assert_eq!(m.ledgers, booked, "the ledgers still say what was booked");
    assert_eq!(
        m.position,
        Quantities {
            on_hand: booked.on_hand + 3,
            on_order: booked.on_order,
            allocated: booked.allocated + 1,
        }
    );
    assert!(m.allocation_differs() && m.inventory_differs());
    let shown = m.to_string();
    assert!(shown.contains(&kestrel.to_string()), "{shown}");

    let globex_only = ledger_mismatches(&db, Some(globex())).await.expect("audit");
    assert_eq!(globex_only.len(), 1, "{globex_only:?}");
    let g = &globex_only[0];
    assert_eq!((g.tenant_id, g.sku_id), (globex(), globex_sku));
    assert_eq!(g.position, globex_booked);
    assert_eq!(
        g.ledgers,
        Quantities {
            on_order: globex_booked.on_order + 5,
            ..globex_booked
        }
    );
    assert!(g.inventory_differs() && !g.allocation_differs());

    let everywhere = ledger_mismatches(&db, None).await.expect("audit");
    let mut want = vec![m.clone(), g.clone()];
    want.sort_by_key(|m| (m.tenant_id, m.sku_id));
    assert_eq!(everywhere, want, "all tenants, ordered by tenant and SKU");
}
