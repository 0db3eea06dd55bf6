//! Batch push: the same answers as REST, replayed, and the savepoint
//! fallback changes none of them.

use holdfast_server::demo;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use super::{allocate_path, position};
use crate::support::audit::assert_ledgers_match_positions;
use crate::support::{assert_problem, kestrel_m, order_with_line, TestServer, MIGRATIONS};

#[sqlx::test(migrator = "MIGRATIONS")]
async fn batch_push_matches_rest_and_replays(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let order = Uuid::now_v7();
    let line = Uuid::now_v7();
    let items = json!([
        {"idempotency_key": "b-create", "method": "POST", "path": "/v1/orders",
         "body": {"id": order, "customer_id": demo::customer_id("acme", "Austin Boutique")}},
        {"idempotency_key": "b-line", "method": "POST", "path": format!("/v1/orders/{order}/lines"),
         "body": {"id": line, "sku_id": kestrel_m(), "qty_ordered": 4, "base_version": 1}},
        {"idempotency_key": "b-alloc", "method": "POST", "path": allocate_path(order, line), "body": {"qty": 4}},
        {"idempotency_key": "b-patch", "method": "PATCH", "path": format!("/v1/orders/{order}"),
         "body": {"base_version": 3, "set": {"customer_po": "FAX-0412"}}},
    ]);
    let push = |items: Value| s.push(&dana, items);
    let (status, first) = push(items.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let results = first["results"].as_array().expect("results");
    let statuses: Vec<i64> = results
        .iter()
        .map(|r| r["status"].as_i64().expect("s"))
        .collect();
    assert_eq!(statuses, [201, 201, 200, 200], "{first}");
    assert!(results.iter().all(|r| r["replayed"] == false));
    assert_eq!(results[3]["body"]["customer_po"], "FAX-0412");
    assert_eq!(results[3]["body"]["version"], 4);

    let (_, second) = push(items.clone()).await;
    for (a, b) in results
        .iter()
        .zip(second["results"].as_array().expect("results"))
    {
        assert_eq!(b["replayed"], true);
        assert_eq!((&a["status"], &a["body"]), (&b["status"], &b["body"]));
    }
    assert_eq!(position(&db, kestrel_m()).await.2, 4, "allocated once");

    // The same key through REST replays the batch's answer.
    let r = s
        .post(
            &dana,
            &allocate_path(order, line),
            "b-alloc",
            json!({"qty": 4}),
        )
        .await;
    assert!(r.replayed());
    assert_eq!(r.json(), results[2]["body"]);

    // A failing item blocks later items on its order only; a malformed item
    // gets its own 400.
    let other = Uuid::now_v7();
    let items = json!([
        {"idempotency_key": "c-stale", "method": "PATCH", "path": format!("/v1/orders/{order}"),
         "body": {"base_version": 1, "set": {"notes": "stale"}}},
        {"idempotency_key": "c-after", "method": "PATCH", "path": format!("/v1/orders/{order}"),
         "body": {"base_version": 4, "set": {"notes": "would work"}}},
        {"idempotency_key": "c-bad", "method": "POST", "path": "/v1/orders", "body": {"id": other, "customer": "?"}},
        {"idempotency_key": "c-other", "method": "POST", "path": "/v1/orders",
         "body": {"id": Uuid::now_v7(), "customer_id": demo::customer_id("acme", "Tokyo Distributor")}},
    ]);
    let (status, out) = push(items).await;
    assert_eq!(status, StatusCode::OK);
    let r = out["results"].as_array().expect("results");
    assert_eq!(r[0]["status"], 409);
    assert_eq!(r[0]["body"]["code"], "version_conflict");
    assert_eq!(r[1]["status"], 424);
    assert_eq!(r[1]["body"]["code"], "blocked_by_earlier");
    assert_eq!(r[1]["body"]["blocked_by"], "c-stale");
    assert_eq!(r[2]["status"], 400);
    assert_eq!(r[2]["body"]["code"], "validation_failed");
    assert_eq!(r[3]["status"], 201, "other orders run as usual");

    // 424 is not stored: the blocked item, sent alone, runs.
    let r = s
        .mutate(
            &dana,
            Method::PATCH,
            &format!("/v1/orders/{order}"),
            "c-after",
            &json!({"base_version": 4, "set": {"notes": "would work"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert!(!r.replayed());

    // Bounds: 0 and 501 items.
    let (status, p) = push(json!([])).await;
    assert_problem(status, &p, 400, "validation_failed");
    let many: Vec<Value> = (0..501).map(|i| json!({"idempotency_key": format!("m{i}"), "method": "POST", "path": "/v1/orders", "body": {}})).collect();
    let (status, p) = push(Value::Array(many)).await;
    assert_problem(status, &p, 400, "validation_failed");
}

/// Push applies a chunk without savepoints and falls back to one per item
/// when an item's effects must be undone alone: the answers, the order of
/// items and blocked_by_earlier are the same either way, and a key whose
/// answer is not stored stays free.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn push_falls_back_to_savepoints_without_changing_answers(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let austin = demo::customer_id("acme", "Austin Boutique");
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let line = Uuid::now_v7();
    let missing_line = Uuid::now_v7();
    let push = |items: Value| s.push(&dana, items);
    let statuses = |out: &Value| -> Vec<i64> {
        out["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| r["status"].as_i64().expect("status"))
            .collect()
    };
    let keys_stored = |keys: Vec<&'static str>| {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "select key from idempotency_keys where key = any($1) order by key",
            )
            .bind(keys)
            .fetch_all(&db)
            .await
            .expect("keys")
        }
    };

    // A 404 the handler finds after claiming its key (no such line).
    let (status, out) = push(json!([
        {"idempotency_key": "f-a", "method": "POST", "path": "/v1/orders",
         "body": {"id": a, "customer_id": austin}},
        {"idempotency_key": "f-line", "method": "POST", "path": format!("/v1/orders/{a}/lines"),
         "body": {"id": line, "sku_id": kestrel_m(), "qty_ordered": 4, "base_version": 1}},
        {"idempotency_key": "f-404", "method": "POST", "path": allocate_path(a, missing_line),
         "body": {"qty": 1}},
        {"idempotency_key": "f-blocked", "method": "POST", "path": allocate_path(a, line),
         "body": {"qty": 1}},
        {"idempotency_key": "f-b", "method": "POST", "path": "/v1/orders",
         "body": {"id": b, "customer_id": austin}},
    ]))
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(statuses(&out), [201, 201, 404, 424, 201], "{out}");
    assert_eq!(out["results"][3]["body"]["blocked_by"], "f-404");
    assert_eq!(
        keys_stored(vec!["f-a", "f-line", "f-404", "f-blocked", "f-b"]).await,
        ["f-a", "f-b", "f-line"],
        "unstored answers leave their keys free"
    );
    let (_, doc) = s.get(&format!("/v1/orders/{a}"), &dana).await;
    assert_eq!(doc["version"], 2, "create and line, each once");
    assert_eq!(position(&db, kestrel_m()).await.2, 0, "nothing allocated");

    // A key held by a running request: request_in_flight after the bounded
    // wait, the others run.
    let k = "f-held";
    let mut held = db.begin().await.expect("begin");
    sqlx::query("insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body) values ($1, $2, 'x', 0, '')")
        .bind(demo::tenant_id("acme"))
        .bind(k)
        .execute(&mut *held)
        .await
        .expect("hold key");
    let (c, d) = (Uuid::now_v7(), Uuid::now_v7());
    let (status, out) = push(json!([
        {"idempotency_key": "f-c", "method": "POST", "path": "/v1/orders",
         "body": {"id": c, "customer_id": austin}},
        {"idempotency_key": k, "method": "POST", "path": allocate_path(a, line), "body": {"qty": 1}},
        {"idempotency_key": "f-d", "method": "POST", "path": "/v1/orders",
         "body": {"id": d, "customer_id": austin}},
    ]))
    .await;
    held.rollback().await.expect("rollback");
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(statuses(&out), [201, 409, 201], "{out}");
    assert_eq!(out["results"][1]["body"]["code"], "request_in_flight");

    // One key twice in one push: the second replays the first (whose answer
    // is not yet on its key row), a different request under it is refused.
    let e = Uuid::now_v7();
    let create_e = json!({"idempotency_key": "f-dup", "method": "POST", "path": "/v1/orders",
                          "body": {"id": e, "customer_id": austin}});
    let (status, out) = push(json!([
        create_e,
        create_e,
        {"idempotency_key": "f-dup", "method": "POST", "path": "/v1/orders",
         "body": {"id": Uuid::now_v7(), "customer_id": austin}},
    ]))
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(statuses(&out), [201, 201, 422], "{out}");
    let r = &out["results"];
    assert_eq!(
        (&r[0]["replayed"], &r[1]["replayed"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(r[0]["body"], r[1]["body"]);
    assert_eq!(r[2]["body"]["code"], "idempotency_key_reused");
    let replay = s
        .post(
            &dana,
            "/v1/orders",
            "f-dup",
            json!({"id": e, "customer_id": austin}),
        )
        .await;
    assert!(replay.replayed());
    assert_eq!(replay.json(), r[0]["body"], "the answer was stored");

    // More than one transaction's worth, with a 404 (no such customer) in the
    // second chunk: each chunk commits its own items, in order.
    let ids: Vec<Uuid> = (0..150).map(|_| Uuid::now_v7()).collect();
    let items: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let customer = if i == 120 { Uuid::now_v7() } else { austin };
            json!({"idempotency_key": format!("many-{i}"), "method": "POST", "path": "/v1/orders",
                   "body": {"id": id, "customer_id": customer}})
        })
        .collect();
    let (status, out) = push(Value::Array(items.clone())).await;
    assert_eq!(status, StatusCode::OK);
    let got = statuses(&out);
    assert_eq!(got.len(), 150);
    for (i, st) in got.iter().enumerate() {
        assert_eq!(*st, if i == 120 { 404 } else { 201 }, "item {i}");
        assert_eq!(out["results"][i]["idempotency_key"], format!("many-{i}"));
    }
    let created: i64 = sqlx::query_scalar("select count(*) from orders where id = any($1)")
        .bind(&ids)
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(created, 149);
    // The same push again: every stored answer replays, the 404 runs again.
    let (_, again) = push(Value::Array(items)).await;
    for (i, r) in again["results"]
        .as_array()
        .expect("results")
        .iter()
        .enumerate()
    {
        assert_eq!(r["replayed"], i != 120, "item {i}");
        assert_eq!(r["body"], out["results"][i]["body"], "item {i}");
    }
    assert_ledgers_match_positions(&db).await;
}

/// A chunk's keys are claimed in one statement: replayed and reused keys are
/// answered from what it read, a second item on one order that conflicts
/// answers 409 with the current document, all without the savepoint
/// fallback; a later item blocked by it (its key claimed up front) sends the
/// chunk to the fallback, which answers the same and leaves its key free.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn push_claims_a_chunk_at_once(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let austin = demo::customer_id("acme", "Austin Boutique");
    let redone = || crate::monitoring::sample(&s, "holdfast_push_chunks_redone_total");
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let create_a = json!({"idempotency_key": "s-a", "method": "POST", "path": "/v1/orders",
                          "body": {"id": a, "customer_id": austin}});
    let (status, first) = s.push(&dana, json!([create_a])).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let patch_b = |key: &str, notes: &str| {
        json!({"idempotency_key": key, "method": "PATCH", "path": format!("/v1/orders/{b}"),
               "body": {"base_version": 1, "set": {"notes": notes}}})
    };
    let (status, out) = s
        .push(
            &dana,
            json!([
                create_a,
                {"idempotency_key": "s-a", "method": "POST", "path": "/v1/orders",
                 "body": {"id": Uuid::now_v7(), "customer_id": austin}},
                {"idempotency_key": "s-b", "method": "POST", "path": "/v1/orders",
                 "body": {"id": b, "customer_id": austin}},
                patch_b("s-b1", "first"),
                patch_b("s-b2", "second"),
                {"idempotency_key": "s-c", "method": "POST", "path": "/v1/orders",
                 "body": {"id": c, "customer_id": austin}},
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let r = out["results"].as_array().expect("results");
    let statuses: Vec<i64> = r.iter().map(|r| r["status"].as_i64().expect("s")).collect();
    assert_eq!(statuses, [201, 422, 201, 200, 409, 201], "{out}");
    assert_eq!(r[0]["replayed"], true);
    assert_eq!(
        r[0]["body"], first["results"][0]["body"],
        "replayed as stored"
    );
    assert_eq!(r[1]["body"]["code"], "idempotency_key_reused");
    assert_eq!(r[4]["body"]["code"], "version_conflict");
    assert_eq!(
        r[4]["body"]["current"], r[3]["body"],
        "the current document"
    );
    assert_eq!(redone().await, 0.0, "no chunk applied again");

    // Each stored answer replays byte-identical through REST.
    let replay = s
        .mutate(
            &dana,
            Method::PATCH,
            &format!("/v1/orders/{b}"),
            "s-b2",
            &json!({"base_version": 1, "set": {"notes": "second"}}),
        )
        .await;
    assert!(replay.replayed());
    assert_eq!(replay.json(), r[4]["body"]);

    // An item blocked by an earlier one of its chunk: its key was claimed
    // with the chunk's, so the chunk is applied again with savepoints.
    let (status, out) = s
        .push(
            &dana,
            json!([
                {"idempotency_key": "s-c1", "method": "PATCH", "path": format!("/v1/orders/{c}"),
                 "body": {"base_version": 7, "set": {"notes": "stale"}}},
                {"idempotency_key": "s-c2", "method": "PATCH", "path": format!("/v1/orders/{c}"),
                 "body": {"base_version": 1, "set": {"notes": "fine"}}},
                patch_b("s-b3", "stale too"),
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let r = out["results"].as_array().expect("results");
    let statuses: Vec<i64> = r.iter().map(|r| r["status"].as_i64().expect("s")).collect();
    assert_eq!(statuses, [409, 424, 409], "{out}");
    assert_eq!(r[1]["body"]["blocked_by"], "s-c1");
    assert_eq!(redone().await, 1.0);
    let free: i64 = sqlx::query_scalar("select count(*) from idempotency_keys where key = 's-c2'")
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(free, 0, "the blocked item's key stays free");
}

/// A chunk that edits one order many times reads the order once: each later
/// line edit or allocation starts from what the one before it wrote (the
/// order stays locked until the commit). Every answer must still be the
/// document as stored at that version, and the last one what a read shows.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn push_edits_one_order_many_times_in_a_chunk(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let redone = || crate::monitoring::sample(&s, "holdfast_push_chunks_redone_total");
    let order = Uuid::now_v7();
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    // Tokyo Distributor's price list prices the Kestrel Overshirt; the
    // Merlin shirt is at wholesale.
    let merlin = demo::sku_id("acme", "Merlin Oxford Shirt", "Washed Indigo", "M");
    let lines = format!("/v1/orders/{order}/lines");
    let items = json!([
        {"idempotency_key": "e-create", "method": "POST", "path": "/v1/orders",
         "body": {"id": order, "customer_id": demo::customer_id("acme", "Tokyo Distributor")}},
        {"idempotency_key": "e-add-a", "method": "POST", "path": lines,
         "body": {"id": a, "sku_id": kestrel_m(), "qty_ordered": 3, "base_version": 1}},
        {"idempotency_key": "e-alloc-a", "method": "POST", "path": allocate_path(order, a), "body": {"qty": 2}},
        {"idempotency_key": "e-change-a", "method": "PATCH", "path": format!("{lines}/{a}"),
         "body": {"qty_ordered": 5, "base_version": 3}},
        {"idempotency_key": "e-add-b", "method": "POST", "path": lines,
         "body": {"id": b, "sku_id": merlin, "qty_ordered": 2, "base_version": 4}},
        {"idempotency_key": "e-alloc-b", "method": "POST", "path": allocate_path(order, b), "body": {"qty": 2}},
        {"idempotency_key": "e-release-a", "method": "POST",
         "path": format!("/v1/orders/{order}/lines/{a}/release"), "body": {"qty": 1}},
        {"idempotency_key": "e-change-b", "method": "PATCH", "path": format!("{lines}/{b}"),
         "body": {"qty_ordered": 6, "base_version": 7}},
    ]);
    let (status, out) = s.push(&dana, items.clone()).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let results = out["results"].as_array().expect("results");
    let statuses: Vec<i64> = results
        .iter()
        .map(|r| r["status"].as_i64().expect("s"))
        .collect();
    assert_eq!(statuses, [201, 201, 200, 200, 201, 200, 200, 200], "{out}");
    // Applied straight: an order state that went wrong would have failed a
    // write's compare-and-swap, and the chunk would have been redone.
    assert_eq!(redone().await, 0.0, "no chunk applied again");
    // An allocation's answer is {order, ats_after}; the others are the order.
    let doc = |r: &Value| -> Value {
        let body = &r["body"];
        body.get("order").cloned().unwrap_or_else(|| body.clone())
    };
    let versions: Vec<i64> = results
        .iter()
        .map(|r| doc(r)["version"].as_i64().expect("v"))
        .collect();
    assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7, 8]);
    let (status, stored) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc(&results[7]), stored);
    let stored_lines: Vec<(i64, i64, i64)> = stored["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| {
            let n = |k: &str| l[k].as_i64().expect("number");
            (n("qty_ordered"), n("qty_allocated"), n("unit_price"))
        })
        .collect();
    assert_eq!(stored_lines, [(5, 1, 3_800), (6, 2, 3_600)]);
    assert_eq!(stored["total"], 5 * 3_800 + 6 * 3_600);
    // Each answer in between is the stored version too: its history entry
    // exists and names the item's key.
    let keys: Vec<String> = sqlx::query_scalar(
        "select idempotency_key from order_history where order_id = $1 order by version",
    )
    .bind(order)
    .fetch_all(&db)
    .await
    .expect("history");
    let sent: Vec<&str> = items
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["idempotency_key"].as_str().expect("key"))
        .collect();
    assert_eq!(keys, sent);
    // The second line was priced by its own write (its order was held):
    // its history entry and event still name the price.
    let (facts, payload): (Value, Value) = sqlx::query_as(
        "select h.facts, o.payload from order_history h
           join outbox o on o.id = h.outbox_ids[1]
          where h.order_id = $1 and h.idempotency_key = 'e-add-b'",
    )
    .bind(order)
    .fetch_one(&db)
    .await
    .expect("entry");
    assert_eq!(facts["unit_price"], 3_600, "{facts}");
    assert_eq!(payload["data"]["unit_price"], 3_600, "{payload}");
    assert_ledgers_match_positions(&db).await;

    // Sent again, every item replays its answer.
    let (_, again) = s.push(&dana, items).await;
    for (first, second) in results
        .iter()
        .zip(again["results"].as_array().expect("results"))
    {
        assert_eq!(second["replayed"], true);
        assert_eq!(
            (&first["status"], &first["body"]),
            (&second["status"], &second["body"])
        );
    }

    // A retry of the allocation whose key row was reaped (the ledger row
    // outlives it), after another edit of the same order in the chunk: it
    // is not allocated twice, and answers with the order as it is.
    sqlx::query("delete from idempotency_keys where key = 'e-alloc-b'")
        .execute(&db)
        .await
        .expect("reap");
    let before = position(&db, merlin).await;
    let items = json!([
        {"idempotency_key": "f-change-a", "method": "PATCH", "path": format!("{lines}/{a}"),
         "body": {"qty_ordered": 4, "base_version": 8}},
        {"idempotency_key": "e-alloc-b", "method": "POST", "path": allocate_path(order, b), "body": {"qty": 2}},
    ]);
    let (status, out) = s.push(&dana, items).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let results = out["results"].as_array().expect("results");
    assert_eq!(
        (results[0]["status"].as_i64(), results[1]["status"].as_i64()),
        (Some(200), Some(200)),
        "{out}"
    );
    assert_eq!(results[1]["replayed"], true, "{out}");
    // The ledger's unique key stopped the straight attempt; with a
    // savepoint per item the late retry was found.
    assert_eq!(redone().await, 1.0);
    assert_eq!(results[1]["body"]["order"]["version"], 9);
    assert_eq!(results[1]["body"]["order"]["lines"][1]["qty_allocated"], 2);
    assert_eq!(position(&db, merlin).await, before, "allocated once");
    assert_ledgers_match_positions(&db).await;

    // A line on a discontinued SKU, added to a held order, is refused as
    // when the order is read first, and nothing of it is written.
    let retired = demo::sku_id("acme", "Merlin Oxford Shirt", "Washed Indigo", "L");
    sqlx::query("update skus set active = false where id = $1")
        .bind(retired)
        .execute(&db)
        .await
        .expect("discontinue");
    let items = json!([
        {"idempotency_key": "g-change-a", "method": "PATCH", "path": format!("{lines}/{a}"),
         "body": {"qty_ordered": 3, "base_version": 9}},
        {"idempotency_key": "g-add", "method": "POST", "path": lines,
         "body": {"id": Uuid::now_v7(), "sku_id": retired, "qty_ordered": 1, "base_version": 10}},
    ]);
    let (status, out) = s.push(&dana, items).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let results = out["results"].as_array().expect("results");
    assert_eq!(results[0]["status"], 200, "{out}");
    assert_problem(
        StatusCode::from_u16(results[1]["status"].as_u64().expect("status") as u16)
            .expect("status"),
        &results[1]["body"],
        422,
        "invalid_state",
    );
    assert_eq!(results[1]["body"]["sku_active"], false);
    assert_eq!(redone().await, 1.0, "applied straight");
    let (_, stored) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(stored["version"], 10);
    assert_eq!(stored["lines"].as_array().map(Vec::len), Some(2));
}

/// A push is applied in lanes side by side (`engine::batch::lanes`), but
/// whose allocation gets the last units is still decided in batch order:
/// two orders on one SKU share a lane even when only the database knows
/// that one of them has a line on it. An unrelated order runs beside them,
/// and every answer comes back at its item's place.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn push_in_lanes_keeps_batch_order_on_shared_stock(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let (on_hand, on_order, allocated) = position(&db, kestrel_m()).await;
    let ats = on_hand + on_order - allocated;
    assert!(ats >= 1, "the demo SKU has stock to sell");
    // Order a exists with a line on the SKU for everything it has.
    let (a, a_line) = order_with_line(&s, &dana, kestrel_m(), ats).await;
    let tokyo = demo::customer_id("acme", "Tokyo Distributor");
    let other_sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "L");
    let (b, b_line, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let (status, out) = s
        .push(
            &dana,
            json!([
                {"idempotency_key": "l-a", "method": "POST", "path": allocate_path(a, a_line),
                 "body": {"qty": ats}},
                {"idempotency_key": "l-b", "method": "POST", "path": "/v1/orders",
                 "body": {"id": b, "customer_id": tokyo}},
                {"idempotency_key": "l-c", "method": "POST", "path": "/v1/orders",
                 "body": {"id": c, "customer_id": tokyo}},
                {"idempotency_key": "l-b-line", "method": "POST", "path": format!("/v1/orders/{b}/lines"),
                 "body": {"id": b_line, "sku_id": kestrel_m(), "qty_ordered": 1, "base_version": 1}},
                {"idempotency_key": "l-c-line", "method": "POST", "path": format!("/v1/orders/{c}/lines"),
                 "body": {"id": Uuid::now_v7(), "sku_id": other_sku, "qty_ordered": 1, "base_version": 1}},
                {"idempotency_key": "l-b-alloc", "method": "POST", "path": allocate_path(b, b_line),
                 "body": {"qty": 1}},
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let r = out["results"].as_array().expect("results");
    let keys: Vec<&str> = r
        .iter()
        .map(|r| r["idempotency_key"].as_str().expect("key"))
        .collect();
    assert_eq!(
        keys,
        ["l-a", "l-b", "l-c", "l-b-line", "l-c-line", "l-b-alloc"]
    );
    let statuses: Vec<i64> = r.iter().map(|r| r["status"].as_i64().expect("s")).collect();
    assert_eq!(&statuses[..5], [200, 201, 201, 201, 201], "{out}");
    assert_eq!(r[5]["body"]["code"], "insufficient_ats", "{out}");
    assert_eq!(r[0]["body"]["order"]["id"], a.to_string());
    assert_eq!(r[0]["body"]["ats_after"], 0);
    assert_eq!(r[4]["body"]["id"], c.to_string());
    assert_eq!(position(&db, kestrel_m()).await.2, allocated + ats);
    assert_ledgers_match_positions(&db).await;
}
