//! The order's history (API.md v1.1, `GET /v1/orders/{id}/history`) over
//! real HTTP and real Postgres: one entry per version, oldest first, naming
//! who made it and the exact Idempotency-Key of the request that did, through
//! REST and batch push alike; nothing for a rejected act or a replay; any
//! role of the tenant, and no other tenant. Each entry's partner deliveries
//! are in [`deliveries`].

mod deliveries;

use std::sync::Arc;

use holdfast_protocol::model::OrderHistory;
use holdfast_server::demo;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{assert_problem, kestrel_m, key, TestServer, MIGRATIONS};

fn tokyo() -> Uuid {
    demo::customer_id("acme", "Tokyo Distributor")
}

fn dana() -> Uuid {
    demo::user_id("acme", "dana@acme.test")
}

fn priya() -> Uuid {
    demo::user_id("acme", "priya@acme.test")
}

/// The history as the wire carries it, checked against the protocol type
/// (which the client decodes it with).
async fn history(s: &TestServer, token: &str, order: Uuid) -> (Value, OrderHistory) {
    let (status, body) = s.get(&format!("/v1/orders/{order}/history"), token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let typed: OrderHistory = serde_json::from_value(body.clone()).expect("an OrderHistory");
    (body, typed)
}

/// `(version, event_type, by, key)` of every entry, in the order served.
fn summary(h: &OrderHistory) -> Vec<(i64, String, Option<Uuid>, Option<String>)> {
    h.entries
        .iter()
        .map(|e| {
            (
                e.version,
                e.event_type.clone(),
                e.by,
                e.idempotency_key.clone(),
            )
        })
        .collect()
}

/// History rows of one order straight from the table (the connecting role).
async fn rows(db: &PgPool, order: Uuid) -> i64 {
    sqlx::query_scalar("select count(*) from order_history where order_id = $1")
        .bind(order)
        .fetch_one(db)
        .await
        .expect("count")
}

async fn ok(raw: crate::support::Raw, what: &str) -> Value {
    assert!(
        raw.status.is_success(),
        "{what}: {} {}",
        raw.status,
        raw.json()
    );
    raw.json()
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn each_desk_act_is_one_entry_oldest_first_with_who_and_its_key(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana_token = s.login("acme", "dana@acme.test").await;
    let priya_token = s.login("acme", "priya@acme.test").await;
    let (order, line) = (Uuid::now_v7(), Uuid::now_v7());
    let keys: Vec<String> = (0..5).map(|i| format!("desk-act-{i}-{}", key())).collect();

    let created = ok(
        s.post(
            &dana_token,
            "/v1/orders",
            &keys[0],
            json!({"id": order, "customer_id": tokyo()}),
        )
        .await,
        "create",
    )
    .await;
    assert_eq!(created["version"], 1);
    ok(
        s.post(
            &dana_token,
            &format!("/v1/orders/{order}/lines"),
            &keys[1],
            json!({"id": line, "sku_id": kestrel_m(), "qty_ordered": 4, "base_version": 1}),
        )
        .await,
        "add line",
    )
    .await;
    // A colleague edits the header in between.
    ok(
        s.mutate(
            &priya_token,
            Method::PATCH,
            &format!("/v1/orders/{order}"),
            &keys[2],
            &json!({"base_version": 2, "set": {"notes": "call before delivery"}}),
        )
        .await,
        "patch",
    )
    .await;
    let allocated = ok(
        s.post(
            &dana_token,
            &format!("/v1/orders/{order}/lines/{line}/allocate"),
            &keys[3],
            json!({"qty": 3}),
        )
        .await,
        "allocate",
    )
    .await;
    let confirmed = ok(
        s.post(
            &dana_token,
            &format!("/v1/orders/{order}/confirm"),
            &keys[4],
            json!({"base_version": 4}),
        )
        .await,
        "confirm",
    )
    .await;
    assert_eq!(confirmed["version"], 5);

    // A retry of an act that happened (same key) replays; it is not a change.
    let again = s
        .post(
            &dana_token,
            &format!("/v1/orders/{order}/lines/{line}/allocate"),
            &keys[3],
            json!({"qty": 3}),
        )
        .await;
    assert!(again.replayed(), "{}", again.json());

    let (wire, h) = history(&s, &dana_token, order).await;
    let want: Vec<(i64, String, Option<Uuid>, Option<String>)> = [
        (1, "order.created", dana()),
        (2, "order.updated", dana()),
        (3, "order.updated", priya()),
        (4, "order.line_allocated", dana()),
        (5, "order.confirmed", dana()),
    ]
    .into_iter()
    .zip(&keys)
    .map(|((v, t, by), k)| (v, t.to_owned(), Some(by), Some(k.clone())))
    .collect();
    assert_eq!(summary(&h), want, "{wire:#}");
    assert_eq!(rows(&db, order).await, 5);

    let names: Vec<Option<&str>> = h.entries.iter().map(|e| e.by_name.as_deref()).collect();
    assert_eq!(
        names,
        [
            Some("Dana Whitfield"),
            Some("Dana Whitfield"),
            Some("Priya Raman"),
            Some("Dana Whitfield"),
            Some("Dana Whitfield")
        ]
    );
    // What changed, as the partner events tell it.
    let facts: Vec<&Value> = h.entries.iter().map(|e| &e.facts).collect();
    assert_eq!(facts[0]["customer_id"], tokyo().to_string());
    assert_eq!(facts[1]["change"], "line_added");
    assert_eq!(facts[1]["line_id"], line.to_string());
    assert_eq!(facts[1]["qty_ordered"], 4);
    assert_eq!(facts[2]["changed"], json!(["notes"]));
    assert_eq!(facts[3]["line_id"], line.to_string());
    assert_eq!(facts[3]["sku_id"], kestrel_m().to_string());
    assert_eq!(facts[3]["qty"], 3);
    assert_eq!(facts[3]["ats_after"], allocated["ats_after"]);
    assert_eq!(facts[4]["invoice_id"], confirmed["invoice_id"]);
    assert_eq!(facts[4]["amount"], confirmed["total"]);
    // When: in order, the last one being the order's own updated_at.
    assert!(h.entries.windows(2).all(|w| w[0].at <= w[1].at));
    let updated_at: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(confirmed["updated_at"].clone()).expect("updated_at");
    assert_eq!(h.entries[4].at, updated_at);
    // No partner is registered: nothing was delivered to anyone.
    assert!(h.entries.iter().all(|e| e.deliveries.is_empty()));
    // Every member the contract names is on the wire, nulls included.
    for member in [
        "version",
        "at",
        "by",
        "by_name",
        "event_type",
        "facts",
        "idempotency_key",
        "deliveries",
    ] {
        assert!(
            wire["entries"][0].get(member).is_some(),
            "entry lacks {member}"
        );
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_rejected_act_writes_no_entry(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let token = s.login("acme", "dana@acme.test").await;
    let (order, line) = (Uuid::now_v7(), Uuid::now_v7());
    let create_key = key();
    ok(
        s.post(
            &token,
            "/v1/orders",
            &create_key,
            json!({"id": order, "customer_id": tokyo()}),
        )
        .await,
        "create",
    )
    .await;
    let line_key = key();
    ok(
        s.post(
            &token,
            &format!("/v1/orders/{order}/lines"),
            &line_key,
            json!({"id": line, "sku_id": kestrel_m(), "qty_ordered": 50, "base_version": 1}),
        )
        .await,
        "add line",
    )
    .await;
    let (_, before) = history(&s, &token, order).await;
    assert_eq!(before.entries.len(), 2);

    // 409: a stale base version.
    let stale = s
        .mutate(
            &token,
            Method::PATCH,
            &format!("/v1/orders/{order}"),
            &key(),
            &json!({"base_version": 1, "set": {"notes": "late"}}),
        )
        .await;
    assert_problem(stale.status, &stale.json(), 409, "version_conflict");
    // 422: more than there is to sell (6 on hand), and more than ordered.
    let short = s
        .post(
            &token,
            &format!("/v1/orders/{order}/lines/{line}/allocate"),
            &key(),
            json!({"qty": 7}),
        )
        .await;
    assert_problem(short.status, &short.json(), 422, "insufficient_ats");
    let over = s
        .post(
            &token,
            &format!("/v1/orders/{order}/lines/{line}/release"),
            &key(),
            json!({"qty": 1}),
        )
        .await;
    assert_problem(over.status, &over.json(), 422, "over_allocation");
    // 409 on create: the id exists under another key.
    let twice = s
        .post(
            &token,
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": tokyo()}),
        )
        .await;
    assert_problem(twice.status, &twice.json(), 409, "version_conflict");
    // 422 after a state change: cancel, then try to edit.
    ok(
        s.post(
            &token,
            &format!("/v1/orders/{order}/cancel"),
            &key(),
            json!({"base_version": 2}),
        )
        .await,
        "cancel",
    )
    .await;
    let dead = s
        .mutate(
            &token,
            Method::PATCH,
            &format!("/v1/orders/{order}/lines/{line}"),
            &key(),
            &json!({"base_version": 3, "qty_ordered": 2}),
        )
        .await;
    assert_problem(dead.status, &dead.json(), 422, "invalid_state");

    let (_, after) = history(&s, &token, order).await;
    let versions: Vec<i64> = after.entries.iter().map(|e| e.version).collect();
    assert_eq!(versions, [1, 2, 3], "only the cancel added an entry");
    assert_eq!(after.entries[..2], before.entries[..]);
    assert_eq!(after.entries[2].event_type, "order.cancelled");
    assert_eq!(rows(&db, order).await, 3);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_batch_push_records_each_items_key(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let token = s.login("acme", "dana@acme.test").await;
    let (order, line, other_line) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let k: Vec<String> = (0..6).map(|i| format!("push-{i}-{}", key())).collect();
    let item = |k: &str, method: &str, path: String, body: Value| json!({"idempotency_key": k, "method": method, "path": path, "body": body});
    let lines = format!("/v1/orders/{order}/lines");
    let (status, body) = s
        .push(
            &token,
            json!([
                item(
                    &k[0],
                    "POST",
                    "/v1/orders".into(),
                    json!({"id": order, "customer_id": tokyo()})
                ),
                item(
                    &k[1],
                    "POST",
                    lines.clone(),
                    json!({"id": line, "sku_id": kestrel_m(), "qty_ordered": 2, "base_version": 1})
                ),
                item(
                    &k[2],
                    "POST",
                    format!("{lines}/{line}/allocate"),
                    json!({"qty": 2})
                ),
                // A line that does not exist: 404, not stored, so the chunk
                // is applied again with a savepoint per item.
                item(
                    &k[3],
                    "POST",
                    format!("{lines}/{other_line}/allocate"),
                    json!({"qty": 1})
                ),
                // Blocked behind the failed item on the same order.
                item(
                    &k[4],
                    "POST",
                    format!("/v1/orders/{order}/confirm"),
                    json!({"base_version": 3})
                ),
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let statuses: Vec<&Value> = body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| &r["status"])
        .collect();
    assert_eq!(
        statuses,
        [
            &json!(201),
            &json!(201),
            &json!(200),
            &json!(404),
            &json!(424)
        ]
    );

    // The same history whichever transport carried the acts; and a later
    // REST call adds its own key.
    ok(
        s.post(
            &token,
            &format!("/v1/orders/{order}/confirm"),
            &k[5],
            json!({"base_version": 3}),
        )
        .await,
        "confirm over REST",
    )
    .await;
    let (_, h) = history(&s, &token, order).await;
    assert_eq!(
        summary(&h),
        vec![
            (1, "order.created".into(), Some(dana()), Some(k[0].clone())),
            (2, "order.updated".into(), Some(dana()), Some(k[1].clone())),
            (
                3,
                "order.line_allocated".into(),
                Some(dana()),
                Some(k[2].clone())
            ),
            (
                4,
                "order.confirmed".into(),
                Some(dana()),
                Some(k[5].clone())
            ),
        ]
    );
    assert_eq!(
        rows(&db, order).await,
        4,
        "the abandoned attempt left nothing"
    );

    // A push item retried alone over REST replays: still no new entry.
    let replay = s
        .post(
            &token,
            &format!("{lines}/{line}/allocate"),
            &k[2],
            json!({"qty": 2}),
        )
        .await;
    assert!(replay.replayed(), "{}", replay.json());
    assert_eq!(history(&s, &token, order).await.1, h);
}

/// Desks racing for the last units of a hot SKU on one order: every
/// allocation that answered 200 has exactly one entry under its own key, in
/// version order; those refused have none.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn racing_allocations_each_get_one_entry_under_their_own_key(db: PgPool) {
    let s = Arc::new(TestServer::start(db.clone()).await);
    let tokens = [
        s.login("acme", "dana@acme.test").await,
        s.login("acme", "priya@acme.test").await,
    ];
    let (order, line) = (Uuid::now_v7(), Uuid::now_v7());
    ok(
        s.post(
            &tokens[0],
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": tokyo()}),
        )
        .await,
        "create",
    )
    .await;
    ok(
        s.post(
            &tokens[0],
            &format!("/v1/orders/{order}/lines"),
            &key(),
            json!({"id": line, "sku_id": kestrel_m(), "qty_ordered": 20, "base_version": 1}),
        )
        .await,
        "add line",
    )
    .await;
    // 6 on hand, 12 desks asking for 1 each at once.
    let mut tasks = Vec::new();
    for i in 0..12 {
        let (s, token) = (s.clone(), tokens[i % 2].clone());
        tasks.push(tokio::spawn(async move {
            let k = format!("race-{i}-{}", key());
            let r = s
                .post(
                    &token,
                    &format!("/v1/orders/{order}/lines/{line}/allocate"),
                    &k,
                    json!({"qty": 1}),
                )
                .await;
            (k, i % 2, r.status.as_u16(), r.json())
        }));
    }
    let mut won = Vec::new();
    let mut lost = Vec::new();
    for t in tasks {
        let (k, who, status, body) = t.await.expect("task");
        match status {
            200 => won.push((body["order"]["version"].as_i64().expect("version"), k, who)),
            422 => {
                assert_eq!(body["code"], "insufficient_ats", "{body}");
                lost.push(k);
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!((won.len(), lost.len()), (6, 6));
    won.sort();

    let (_, h) = history(&s, &tokens[1], order).await;
    let allocations: Vec<(i64, String, Option<Uuid>)> = h.entries[2..]
        .iter()
        .map(|e| {
            assert_eq!(e.event_type, "order.line_allocated");
            (e.version, e.idempotency_key.clone().expect("key"), e.by)
        })
        .collect();
    let want: Vec<(i64, String, Option<Uuid>)> = won
        .iter()
        .map(|(v, k, who)| (*v, k.clone(), Some([dana(), priya()][*who])))
        .collect();
    assert_eq!(allocations, want);
    assert_eq!(h.entries.len(), 8);
    assert!(h
        .entries
        .iter()
        .all(|e| !lost.contains(e.idempotency_key.as_ref().expect("key"))));
    // The ATS each entry saw, counting down to zero.
    let ats: Vec<&Value> = h.entries[2..]
        .iter()
        .map(|e| &e.facts["ats_after"])
        .collect();
    assert_eq!(
        ats,
        [
            &json!(5),
            &json!(4),
            &json!(3),
            &json!(2),
            &json!(1),
            &json!(0)
        ]
    );
    crate::support::audit::assert_one_history_entry_per_version(&db).await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn any_role_of_the_tenant_reads_it_and_no_other_tenant_does(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana_token = s.login("acme", "dana@acme.test").await;
    let ops = s.login("acme", "ops@acme.test").await;
    let gina = s.login("globex", "gina@globex.test").await;
    let order = Uuid::now_v7();
    let create_key = key();
    ok(
        s.post(
            &dana_token,
            "/v1/orders",
            &create_key,
            json!({"id": order, "customer_id": tokyo()}),
        )
        .await,
        "create",
    )
    .await;

    let (as_manager, _) = history(&s, &dana_token, order).await;
    let (as_operator, _) = history(&s, &ops, order).await;
    assert_eq!(as_manager, as_operator);
    assert_eq!(as_manager["entries"][0]["idempotency_key"], create_key);

    // Another tenant's order, and an order that does not exist: the same 404.
    let (status, body) = s.get(&format!("/v1/orders/{order}/history"), &gina).await;
    assert_problem(status, &body, 404, "not_found");
    let (status, body) = s
        .get(
            &format!("/v1/orders/{}/history", Uuid::now_v7()),
            &dana_token,
        )
        .await;
    assert_problem(status, &body, 404, "not_found");
    // And no token at all.
    let (status, body) = s
        .call(
            Method::GET,
            &format!("/v1/orders/{order}/history"),
            None,
            None,
        )
        .await;
    assert_problem(status, &body, 401, "unauthorized");

    // The route is in the OpenAPI document, with its nullable members.
    let (_, doc) = s.call(Method::GET, "/openapi.json", None, None).await;
    let op = &doc["paths"]["/v1/orders/{id}/history"]["get"];
    assert!(op.is_object(), "openapi lacks the history");
    let entry = &doc["components"]["schemas"]["HistoryEntry"]["properties"];
    let delivery = &doc["components"]["schemas"]["HistoryDelivery"]["properties"];
    for nullable in [
        &entry["by"],
        &entry["by_name"],
        &entry["idempotency_key"],
        &delivery["last_status"],
        &delivery["delivered_at"],
    ] {
        assert!(
            nullable.is_object() && nullable.to_string().contains("null"),
            "not marked nullable: {nullable}"
        );
    }
}
