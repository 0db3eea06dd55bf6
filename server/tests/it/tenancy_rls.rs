//! The second wall between tenants: row-level security under the role the
//! server's request paths switch to (`db::tenancy`). Each test here runs a
//! query that forgets its tenant filter on purpose, or checks that the server
//! really runs its requests behind the wall.

use holdfast_server::db::{begin_for_tenant, begin_snapshot_for_tenant};
use holdfast_server::demo;
use reqwest::StatusCode;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{acme, globex, TestServer, MIGRATIONS};

/// Postgres' insufficient_privilege: what a row-level security violation is.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

async fn count_skus(db: &PgPool, tenant: Uuid) -> i64 {
    sqlx::query_scalar("select count(*) from skus where tenant_id = $1")
        .bind(tenant)
        .fetch_one(db)
        .await
        .expect("count skus")
}

fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(d) => d.code().map(|c| c.into_owned()),
        _ => None,
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_query_without_its_tenant_filter_stays_in_the_bound_tenant(db: PgPool) {
    demo::seed(&db).await.expect("seed");
    let acme_skus = count_skus(&db, acme()).await;
    let globex_skus = count_skus(&db, globex()).await;
    assert!(acme_skus > 0 && globex_skus > 0);

    // Unbound (the connecting role, as system jobs run) the careless query
    // sees both tenants: it really is missing its filter.
    let tenants: Vec<Uuid> = sqlx::query_scalar("select distinct tenant_id from skus")
        .fetch_all(&db)
        .await
        .expect("unbound read");
    assert_eq!(tenants.len(), 2);

    let mut tx = begin_for_tenant(&db, acme()).await.expect("bind");

    // Reads: one tenant, whatever the table.
    let tenants: Vec<Uuid> = sqlx::query_scalar("select distinct tenant_id from skus")
        .fetch_all(&mut *tx)
        .await
        .expect("bound read");
    assert_eq!(tenants, vec![acme()]);
    for table in [
        "users",
        "customers",
        "skus",
        "sku_positions",
        "inventory_ledger",
    ] {
        let foreign: i64 = sqlx::query_scalar(&format!(
            "select count(*) from {table} where tenant_id <> $1"
        ))
        .bind(acme())
        .fetch_one(&mut *tx)
        .await
        .expect("count another tenant's rows");
        assert_eq!(foreign, 0, "{table} shows another tenant's rows");
    }
    let slugs: Vec<String> = sqlx::query_scalar("select slug from tenants")
        .fetch_all(&mut *tx)
        .await
        .expect("tenants");
    assert_eq!(slugs, vec!["acme".to_owned()]);

    // Writes without a filter touch the bound tenant's rows only.
    let touched = sqlx::query("update sku_positions set on_order = on_order + 1")
        .execute(&mut *tx)
        .await
        .expect("unfiltered update")
        .rows_affected();
    assert_eq!(touched as i64, acme_skus);
    let globex_sku = demo::sku_id("globex", "Globex Polo", "Navy", "M");
    let touched = sqlx::query("update sku_positions set on_order = on_order + 1 where sku_id = $1")
        .bind(globex_sku)
        .execute(&mut *tx)
        .await
        .expect("update aimed at another tenant")
        .rows_affected();
    assert_eq!(touched, 0, "updated another tenant's row");
    let touched = sqlx::query("delete from order_lines")
        .execute(&mut *tx)
        .await
        .expect("unfiltered delete")
        .rows_affected();
    assert_eq!(touched, 0);
    tx.rollback().await.expect("rollback");

    // Inserting a row for another tenant is refused outright.
    let mut tx = begin_for_tenant(&db, acme()).await.expect("bind");
    let gina = demo::user_id("globex", "gina@globex.test");
    let err = sqlx::query(
        "insert into orders (tenant_id, id, customer_id, created_by, updated_by)
         values ($1, $2, $3, $4, $4)",
    )
    .bind(globex())
    .bind(Uuid::now_v7())
    .bind(demo::customer_id("globex", "Globex Retail West"))
    .bind(gina)
    .execute(&mut *tx)
    .await
    .expect_err("insert for another tenant");
    assert_eq!(
        sqlstate(&err).as_deref(),
        Some(INSUFFICIENT_PRIVILEGE),
        "{err}"
    );
    assert!(err.to_string().contains("row-level security"), "{err}");
    tx.rollback().await.expect("rollback");

    // So is moving an own row over to another tenant.
    let mut tx = begin_for_tenant(&db, acme()).await.expect("bind");
    let err = sqlx::query("update customers set tenant_id = $1 where id = $2")
        .bind(globex())
        .bind(demo::customer_id("acme", "Austin Boutique"))
        .execute(&mut *tx)
        .await
        .expect_err("move a row to another tenant");
    assert_eq!(
        sqlstate(&err).as_deref(),
        Some(INSUFFICIENT_PRIVILEGE),
        "{err}"
    );
    tx.rollback().await.expect("rollback");

    // The snapshot variant (the pull feed's) is bound the same way.
    let mut tx = begin_snapshot_for_tenant(&db, globex())
        .await
        .expect("bind");
    let seen: i64 = sqlx::query_scalar("select count(*) from skus")
        .fetch_one(&mut *tx)
        .await
        .expect("bound snapshot read");
    assert_eq!(seen, globex_skus);
    tx.commit().await.expect("commit");

    // Nothing above changed anything, and the binding ended with each
    // transaction: the pool's connections are the connecting role again.
    let user: String = sqlx::query_scalar("select current_user::text")
        .fetch_one(&db)
        .await
        .expect("current_user");
    assert_ne!(user, holdfast_server::db::tenancy::TENANT_ROLE);
    assert_eq!(count_skus(&db, acme()).await, acme_skus);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_tenant_role_without_a_tenant_sees_nothing(db: PgPool) {
    demo::seed(&db).await.expect("seed");
    let mut conn = db.acquire().await.expect("connection");
    // Once a transaction-local setting has ended, the setting reads '' on that
    // connection rather than NULL; both must mean "no tenant", not an error.
    sqlx::query("begin")
        .execute(&mut *conn)
        .await
        .expect("begin");
    sqlx::query("select set_config('app.tenant_id', $1, true)")
        .bind(acme().to_string())
        .execute(&mut *conn)
        .await
        .expect("set");
    sqlx::query("commit")
        .execute(&mut *conn)
        .await
        .expect("commit");
    sqlx::query("begin")
        .execute(&mut *conn)
        .await
        .expect("begin");
    sqlx::query("set local role holdfast_tenant")
        .execute(&mut *conn)
        .await
        .expect("role");
    let seen: i64 = sqlx::query_scalar("select count(*) from skus")
        .fetch_one(&mut *conn)
        .await
        .expect("unbound tenant role reads");
    assert_eq!(seen, 0);
    sqlx::query("rollback")
        .execute(&mut *conn)
        .await
        .expect("rollback");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn every_tenant_table_is_behind_row_level_security(db: PgPool) {
    // A new table with tenant_id but without a policy fails here.
    let unguarded: Vec<String> = sqlx::query_scalar(
        "select c.relname::text from pg_class c
           join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = current_schema() and c.relkind in ('r', 'p')
            and (exists (select 1 from pg_attribute a
                          where a.attrelid = c.oid and a.attname = 'tenant_id' and not a.attisdropped)
                 or c.relname = 'tenants')
            and not (c.relrowsecurity
                     and exists (select 1 from pg_policy p where p.polrelid = c.oid))
          order by 1",
    )
    .fetch_all(&db)
    .await
    .expect("catalog");
    assert!(unguarded.is_empty(), "tables without RLS: {unguarded:?}");

    // The role itself must not be able to slip past the policies.
    let (bypass, superuser): (bool, bool) = sqlx::query_as(
        "select rolbypassrls, rolsuper from pg_roles where rolname = 'holdfast_tenant'",
    )
    .fetch_one(&db)
    .await
    .expect("role");
    assert!(!bypass && !superuser);
    let owns: i64 = sqlx::query_scalar(
        "select count(*) from pg_class where relowner = 'holdfast_tenant'::regrole",
    )
    .fetch_one(&db)
    .await
    .expect("ownership");
    assert_eq!(
        owns, 0,
        "holdfast_tenant must own nothing (owners bypass RLS)"
    );
}

/// Proves the server's own request paths run behind the wall: a policy that
/// hides every row from `holdfast_tenant` (in this test's database only)
/// empties what the routes answer, though the rows are there.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_request_paths_run_behind_the_wall(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let token = s.login("acme", "dana@acme.test").await;

    let (status, before) = s.get("/v1/customers", &token).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!before["customers"].as_array().expect("list").is_empty());

    for table in [
        "customers",
        "skus",
        "sku_positions",
        "orders",
        "changes",
        "price_lists",
    ] {
        sqlx::query(&format!(
            "create policy hide_all on {table} as restrictive to holdfast_tenant using (false)"
        ))
        .execute(&db)
        .await
        .expect("restrictive policy");
    }

    let (status, body) = s.get("/v1/customers", &token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["customers"], serde_json::json!([]));
    let (status, body) = s.get("/v1/skus", &token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["skus"], serde_json::json!([]));
    let kestrel = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let (status, _) = s.get(&format!("/v1/skus/{kestrel}"), &token).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = s.get("/v1/sync/pull", &token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["changes"], serde_json::json!([]));

    // A mutation cannot find the customer it names either.
    let raw = s
        .post(
            &token,
            "/v1/orders",
            "rls-create-1",
            serde_json::json!({
                "id": Uuid::now_v7(),
                "customer_id": demo::customer_id("acme", "Austin Boutique"),
            }),
        )
        .await;
    assert!(
        raw.status.is_client_error(),
        "{} {}",
        raw.status,
        raw.json()
    );
    // The rows were there all along for the connecting role.
    let customers: i64 = sqlx::query_scalar("select count(*) from customers where tenant_id = $1")
        .bind(acme())
        .fetch_one(&db)
        .await
        .expect("count");
    assert!(customers > 0);
}
