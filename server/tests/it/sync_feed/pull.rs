//! The pull feed: the first pull is the whole state, a late commit is never
//! skipped, a paging reader converges under writers, pulls stay in their
//! tenant, and compaction keeps old cursors working.

use std::collections::HashMap;
use std::time::Duration;

use holdfast_server::demo;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio::time::Instant;
use uuid::Uuid;

use super::{
    create_order, edit_in_open_tx, wait_for_fence_past, wait_until_settled, Mirror, PATIENCE,
};
use crate::support::{assert_problem, key, TestServer, MIGRATIONS};

#[sqlx::test(migrator = "MIGRATIONS")]
async fn first_pull_is_the_whole_state_then_the_feed(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let tenant = demo::tenant_id("acme");
    let order = create_order(&s, &dana, "acme", "Austin Boutique").await;
    // An invoice exists once an order is confirmed.
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/lines"),
            &key(),
            json!({"id": Uuid::now_v7(), "sku_id": sku, "qty_ordered": 1, "base_version": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/confirm"),
            &key(),
            json!({"base_version": 2}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let invoice = r.json()["invoice_id"].as_str().expect("invoice").to_owned();

    let mut desk = Mirror::default();
    desk.catch_up(&s, &dana, 7).await;
    assert!(desk.pulls > 40, "paged, 7 at a time");

    let ids = |sql: &'static str| {
        let db = db.clone();
        async move {
            let mut ids: Vec<String> = sqlx::query_scalar::<_, Uuid>(sql)
                .bind(tenant)
                .fetch_all(&db)
                .await
                .expect("ids")
                .into_iter()
                .map(|id| id.to_string())
                .collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(
        desk.ids("sku"),
        ids("select sku_id from sku_positions where tenant_id = $1").await
    );
    assert_eq!(
        desk.ids("customer"),
        ids("select id from customers where tenant_id = $1").await
    );
    assert_eq!(desk.ids("order"), [order.to_string()]);
    assert_eq!(desk.ids("invoice"), std::slice::from_ref(&invoice));

    // Documents are exactly what the read routes answer.
    let (_, want) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(desk.get("order", order).expect("order").1, want);
    assert_eq!(desk.get("order", order).expect("order").0, 3);
    let (_, want) = s.get(&format!("/v1/skus/{sku}"), &dana).await;
    assert_eq!(desk.get("sku", sku).expect("sku").1, want);
    assert_eq!(want["allocated"], 0);
    let (_, want) = s.get(&format!("/v1/invoices/{invoice}"), &dana).await;
    let invoice_id: Uuid = invoice.parse().expect("uuid");
    assert_eq!(desk.get("invoice", invoice_id).expect("invoice").1, want);
    let (_, customers) = s.get("/v1/customers", &dana).await;
    for c in customers["customers"].as_array().expect("customers") {
        let id: Uuid = c["id"].as_str().expect("id").parse().expect("uuid");
        assert_eq!(&desk.get("customer", id).expect("customer").1, c);
    }

    // Caught up, the desk continues in the feed: a later order arrives, and
    // the SKU its allocation moved.
    let second = create_order(&s, &dana, "acme", "Tokyo Distributor").await;
    let line = Uuid::now_v7();
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{second}/lines"),
            &key(),
            json!({"id": line, "sku_id": sku, "qty_ordered": 2, "base_version": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{second}/lines/{line}/allocate"),
            &key(),
            json!({"qty": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let deadline = Instant::now() + PATIENCE;
    while desk.get("order", second).is_none_or(|(v, _)| *v < 3) {
        assert!(Instant::now() < deadline, "the allocation never arrived");
        desk.pull(&s, &dana, 7).await;
    }
    // The order may arrive at v3 through the line's earlier change row while
    // the allocation's own rows still wait behind the fence (another test's
    // transaction anywhere in the cluster holds it), and the same
    // transaction's SKU row may sit on a later page: late, never lost.
    while desk
        .get("sku", sku)
        .is_none_or(|(_, d)| d["allocated"] != 1)
    {
        assert!(Instant::now() < deadline, "the SKU change never arrived");
        desk.pull(&s, &dana, 7).await;
    }
    let sku_now = &desk.get("sku", sku).expect("sku").1;
    assert_eq!(sku_now["allocated"], 1);
    assert_eq!(sku_now["ats"], 5);
}

/// Two transactions; the one that started (and wrote its change row) first
/// commits last. A pull between the commits must not move its cursor past the
/// uncommitted change: it arrives in the next pull.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_transaction_committing_late_is_never_skipped(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let tenant = demo::tenant_id("acme");
    let early = create_order(&s, &dana, "acme", "Austin Boutique").await;
    let late = create_order(&s, &dana, "acme", "Tokyo Distributor").await;
    // Caught up for real: a creation served only later would bring its order
    // (at its current version) into the pull between the commits below.
    wait_until_settled(&db).await;
    let mut desk = Mirror::default();
    desk.catch_up(&s, &dana, 1000).await;

    // T1 starts first: its xid and its change row id are the lower ones.
    let (t1, t1_xid, t1_version) = edit_in_open_tx(&db, tenant, early, "T1, committed last").await;
    let (t2, t2_xid, _) = edit_in_open_tx(&db, tenant, late, "T2, committed first").await;
    assert!(t2_xid > t1_xid);
    t2.commit().await.expect("commit T2");

    // Between the commits: T1's change is not visible, and T2's, though
    // committed, is held back behind it (the fence is at most T1's xid), so
    // the cursor cannot pass T1's row.
    let page = desk.pull(&s, &dana, 1000).await;
    assert_eq!(page["has_more"], false);
    for c in page["changes"].as_array().expect("changes") {
        assert_ne!(c["id"], early.to_string(), "uncommitted change served");
        assert_ne!(c["id"], late.to_string(), "a change above the fence served");
    }
    assert_eq!(desk.get("order", early).expect("early").0, 1);

    t1.commit().await.expect("commit T1");
    wait_for_fence_past(&db, t1_xid.max(t2_xid)).await;

    // The very next pull brings both.
    let page = desk.pull(&s, &dana, 1000).await;
    assert_eq!(page["has_more"], false, "{page}");
    let (version, data) = desk.get("order", early).expect("early");
    assert_eq!(*version, t1_version);
    assert_eq!(data["notes"], "T1, committed last");
    let (version, data) = desk.get("order", late).expect("late");
    assert_eq!(*version, 2);
    assert_eq!(data["notes"], "T2, committed first");
}

/// 6 writers edit orders (header CAS edits and allocations, over HTTP) for a
/// few seconds while a desk pulls in pages of 5, starting with no cursor (so
/// the first-pull snapshot is paged while they write). Afterwards the desk's
/// view of every order, and of every SKU they allocated, equals the final one.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn six_writers_and_a_paging_reader_agree(db: PgPool) {
    let s = std::sync::Arc::new(TestServer::start(db.clone()).await);
    let dana = s.login("acme", "dana@acme.test").await;
    let colours = ["Washed Indigo", "Ecru", "Olive Drab", "Charcoal"];
    let mut orders = Vec::new();
    let mut skus = Vec::new();
    for (i, colour) in colours.iter().cycle().take(12).enumerate() {
        let order = create_order(&s, &dana, "acme", "Tokyo Distributor").await;
        let sku = demo::sku_id("acme", "Harrier Chore Coat", colour, ["S", "M", "L"][i % 3]);
        let line = Uuid::now_v7();
        let r = s
            .post(
                &dana,
                &format!("/v1/orders/{order}/lines"),
                &key(),
                json!({"id": line, "sku_id": sku, "qty_ordered": 3, "base_version": 1}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
        orders.push((order, line));
        skus.push(sku);
    }

    let stop_at = Instant::now() + Duration::from_secs(4);
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..6usize {
        let s = s.clone();
        let token = s.login("acme", "priya@acme.test").await;
        let orders = orders.clone();
        writers.spawn(async move {
            // What this writer last saw of each order: a desk edits on top of
            // that, and after a conflict on top of the `current` it was sent.
            let mut seen: HashMap<Uuid, Value> = HashMap::new();
            let mut applied = 0;
            let mut n = w;
            while Instant::now() < stop_at {
                n += 1;
                let (order, line) = orders[(n * 5 + w) % orders.len()];
                let r = if n % 3 == 0 {
                    let allocated = seen
                        .get(&order)
                        .and_then(|o| o["lines"][0]["qty_allocated"].as_i64())
                        .unwrap_or(0);
                    let action = if allocated < 2 { "allocate" } else { "release" };
                    s.post(
                        &token,
                        &format!("/v1/orders/{order}/lines/{line}/{action}"),
                        &key(),
                        json!({"qty": 1}),
                    )
                    .await
                } else {
                    let base = seen
                        .get(&order)
                        .and_then(|o| o["version"].as_i64())
                        .unwrap_or(2);
                    s.mutate(
                        &token,
                        Method::PATCH,
                        &format!("/v1/orders/{order}"),
                        &key(),
                        &json!({"base_version": base, "set": {"notes": format!("writer {w}, edit {n}")}}),
                    )
                    .await
                };
                let body = r.json();
                assert!(!r.status.is_server_error(), "{} {body}", r.status);
                let current = if r.status == StatusCode::CONFLICT {
                    &body["current"]
                } else if body["order"].is_object() {
                    &body["order"]
                } else {
                    &body
                };
                if current["version"].is_i64() {
                    seen.insert(order, current.clone());
                }
                if r.status.is_success() {
                    applied += 1;
                }
            }
            applied
        });
    }

    let mut desk = Mirror::default();
    while !writers.is_empty() {
        desk.pull(&s, &dana, 5).await;
        while let Some(done) = writers.try_join_next() {
            assert!(done.expect("writer") > 0, "a writer never succeeded");
        }
    }

    // Everything has committed; the desk must converge on the final state.
    let mut want = HashMap::new();
    for (order, _) in &orders {
        want.insert(
            ("order", *order),
            s.get(&format!("/v1/orders/{order}"), &dana).await.1,
        );
    }
    for sku in &skus {
        want.insert(
            ("sku", *sku),
            s.get(&format!("/v1/skus/{sku}"), &dana).await.1,
        );
    }
    assert!(
        want.iter()
            .any(|((kind, _), doc)| *kind == "order" && doc["version"].as_i64() > Some(5)),
        "the writers barely wrote"
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        let behind: Vec<_> = want
            .iter()
            .filter(|((kind, id), doc)| desk.get(kind, *id).map(|d| &d.1) != Some(*doc))
            .map(|(k, _)| *k)
            .collect();
        if behind.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the desk never caught up with {behind:?}"
        );
        desk.pull(&s, &dana, 5).await;
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn pull_is_tenant_scoped_and_checks_its_input(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let gina = s.login("globex", "gina@globex.test").await;
    let acme_order = create_order(&s, &dana, "acme", "Austin Boutique").await;

    // Past the seed for real, or globex's own pull below repeats its catalogue.
    wait_until_settled(&db).await;
    let mut globex = Mirror::default();
    globex.catch_up(&s, &gina, 1000).await;
    let globex_skus: Vec<String> = {
        let mut ids: Vec<String> =
            sqlx::query_scalar::<_, Uuid>("select id from skus where tenant_id = $1")
                .bind(demo::tenant_id("globex"))
                .fetch_all(&db)
                .await
                .expect("skus")
                .into_iter()
                .map(|id| id.to_string())
                .collect();
        ids.sort();
        ids
    };
    assert!(!globex_skus.is_empty());
    assert_eq!(globex.ids("sku"), globex_skus);
    assert_eq!(
        globex.ids("customer"),
        [demo::customer_id("globex", "Globex Retail West").to_string()]
    );
    assert!(globex.ids("order").is_empty(), "acme's order leaked");

    // Acme keeps changing; once acme's desk sees it, globex's pull is empty.
    let (tx, xid, _) = edit_in_open_tx(&db, demo::tenant_id("acme"), acme_order, "acme only").await;
    tx.commit().await.expect("commit");
    wait_for_fence_past(&db, xid).await;
    let mut acme = Mirror::default();
    acme.catch_up(&s, &dana, 1000).await;
    assert_eq!(acme.get("order", acme_order).expect("order").0, 2);
    let page = globex.pull(&s, &gina, 1000).await;
    assert_eq!(page["changes"], json!([]), "{page}");
    // Even acme's cursor shows globex only globex.
    let acme_cursor = acme.cursor.clone().expect("cursor");
    let mut borrowed = Mirror {
        cursor: Some(acme_cursor),
        ..Mirror::default()
    };
    let page = borrowed.pull(&s, &gina, 1000).await;
    assert_eq!(page["changes"], json!([]), "{page}");

    // Input checks.
    for path in [
        "/v1/sync/pull?limit=1001",
        "/v1/sync/pull?limit=0",
        "/v1/sync/pull?cursor=not-ours",
        "/v1/sync/pull?after=x",
    ] {
        let (status, body) = s.get(path, &dana).await;
        assert_problem(status, &body, 400, "validation_failed");
    }
    let (status, body) = s.get("/v1/sync/pull?limit=1000", &dana).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = s.call(Method::GET, "/v1/sync/pull", None, None).await;
    assert_problem(status, &body, 401, "unauthorized");

    let (_, doc) = s.call(Method::GET, "/openapi.json", None, None).await;
    for path in ["/v1/sync/pull", "/v1/sync/stream"] {
        assert!(
            doc["paths"][path]["get"].is_object(),
            "openapi lacks {path}"
        );
    }
}

/// Compaction deletes every superseded change row, and a cursor cut before it
/// ran still brings the desk to the final state: no cursor goes stale.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn compaction_keeps_one_row_per_document_and_old_cursors_work(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let tenant = demo::tenant_id("acme");
    let a = create_order(&s, &dana, "acme", "Austin Boutique").await;
    let b = create_order(&s, &dana, "acme", "Tokyo Distributor").await;
    let mut early = Mirror::default();
    early.catch_up(&s, &dana, 1000).await;

    // a: v2, v3; b: v2; a: v4, v5 — five rows on top of the two creations.
    let mut last_xid = 0;
    for (order, notes) in [(a, "a2"), (a, "a3"), (b, "b2"), (a, "a4"), (a, "a5")] {
        let (tx, xid, _) = edit_in_open_tx(&db, tenant, order, notes).await;
        tx.commit().await.expect("commit");
        last_xid = xid;
    }
    wait_for_fence_past(&db, last_xid).await;
    // A desk part-way: it has served a's v2 row and stops there.
    let mut midway = Mirror {
        cursor: early.cursor.clone(),
        ..Mirror::default()
    };
    let page = midway.pull(&s, &dana, 1).await;
    assert_eq!(page["has_more"], true);

    let rows = |db: PgPool| async move {
        sqlx::query_as::<_, (String, Uuid, i64)>(
            "select kind, doc_id, count(*) from changes where tenant_id = $1 group by 1, 2",
        )
        .bind(tenant)
        .fetch_all(&db)
        .await
        .expect("rows")
    };
    assert!(rows(db.clone()).await.iter().any(|(_, _, n)| *n > 1));

    // The server compacts in the background too; whichever gets there, every
    // document ends with one row.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let step = holdfast_server::feed::compact::step(&db, tenant, 1000)
            .await
            .expect("compact");
        if step.is_some_and(|st| st.examined == 0) {
            break;
        }
        assert!(Instant::now() < deadline, "compaction never finished");
    }
    let left = rows(db.clone()).await;
    assert!(left.iter().all(|(_, _, n)| *n == 1), "{left:?}");
    assert!(left.iter().any(|(_, id, _)| *id == a));

    // Both old cursors still work and end at the final versions.
    for desk in [&mut early, &mut midway] {
        desk.catch_up(&s, &dana, 1).await;
        assert_eq!(desk.get("order", a).expect("a").1["notes"], "a5");
        assert_eq!(desk.get("order", a).expect("a").0, 5);
        assert_eq!(desk.get("order", b).expect("b").1["notes"], "b2");
    }

    // And the feed goes on after compaction.
    let (tx, xid, _) = edit_in_open_tx(&db, tenant, b, "b3").await;
    tx.commit().await.expect("commit");
    wait_for_fence_past(&db, xid).await;
    early.catch_up(&s, &dana, 1000).await;
    assert_eq!(early.get("order", b).expect("b").1["notes"], "b3");
}
