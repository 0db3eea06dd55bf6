//! The catalog (API.md v1.1) over real HTTP and real Postgres: the SKU CSV
//! import (all or nothing, idempotent, keyed), SKU edits, discontinued SKUs,
//! another tenant's ids, and `holdfast-server catalog import` killed inside a
//! page and run again.

use std::path::Path;
use std::process::Stdio;

use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::process::{database_url, db_name, kill_at_hold, run_binary};
use crate::support::server::read;
use crate::support::{assert_problem, kestrel_m, key, TestServer, MIGRATIONS};

const HEADER: &str = "code,style,color,size,wholesale_price,msrp,active\n";

/// `rows` new SKUs of one style, codes `{prefix}-0001`…, priced from $20.00.
fn catalog(prefix: &str, rows: usize) -> String {
    let mut csv = HEADER.to_owned();
    for i in 0..rows {
        csv.push_str(&format!(
            "{prefix}-{i:04},{prefix} Field Jacket,Moss,{i},{},{},\n",
            2000 + i,
            4000 + 2 * i
        ));
    }
    csv
}

async fn upload(s: &TestServer, token: &str, key: &str, csv: &str) -> (StatusCode, Value, bool) {
    let resp = s
        .http
        .post(s.url("/v1/admin/skus/import"))
        .bearer_auth(token)
        .header("idempotency-key", key)
        .header("content-type", "text/csv")
        .body(csv.to_owned())
        .send()
        .await
        .expect("send");
    let replayed = resp.headers().contains_key("idempotent-replayed");
    let (status, body) = read(resp).await;
    (status, body, replayed)
}

async fn patch_sku(s: &TestServer, token: &str, id: Uuid, body: Value) -> (StatusCode, Value) {
    let resp = s
        .http
        .patch(s.url(&format!("/v1/admin/skus/{id}")))
        .bearer_auth(token)
        .header("idempotency-key", key())
        .json(&body)
        .send()
        .await
        .expect("send");
    read(resp).await
}

/// Rows the import writes besides the SKUs themselves.
async fn footprint(db: &PgPool) -> (i64, i64, i64) {
    sqlx::query_as(
        "select (select count(*) from skus), (select count(*) from changes where kind = 'sku'),
                (select count(*) from outbox where event_type = 'sku.updated')",
    )
    .fetch_one(db)
    .await
    .expect("counts")
}

async fn sku_by_code(db: &PgPool, code: &str) -> Uuid {
    sqlx::query_scalar("select id from skus where code = $1")
        .bind(code)
        .fetch_one(db)
        .await
        .expect("imported SKU")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_import_is_all_or_nothing_keyed_and_idempotent(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let before = footprint(&db).await;

    // Three bad rows among good ones: all three named, nothing applied.
    let mut bad = catalog("FJ", 20);
    bad.push_str("FJ-9001,FJ Field Jacket,Moss,XL,12.50,4000,\n");
    bad.push_str("FJ-9002,,Moss,XXL,2000,4000,\n");
    bad.push_str("FJ-0003,FJ Field Jacket,Moss,XXXL,2000,4000,maybe\n");
    let (status, body, _) = upload(&s, &ops, &key(), &bad).await;
    assert_problem(status, &body, 422, "validation_failed");
    let fields: Vec<&str> = body["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["field"].as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "line 22: wholesale_price",
            "line 23: style",
            "line 24: active"
        ]
    );
    assert_eq!(footprint(&db).await, before, "nothing applied");

    // A good file: every SKU created, announced and in the feed.
    let good = catalog("FJ", 20);
    let k = key();
    let (status, body, replayed) = upload(&s, &ops, &k, &good).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"created": 20, "updated": 0, "unchanged": 0}));
    assert!(!replayed);
    let after = footprint(&db).await;
    assert_eq!(after, (before.0 + 20, before.1 + 20, before.2 + 20));

    // The same request again: the stored answer, nothing new.
    let (status, again, replayed) = upload(&s, &ops, &k, &good).await;
    assert_eq!((status, &again, replayed), (StatusCode::OK, &body, true));
    // The same file under a new key: all unchanged, nothing written.
    let (status, body, _) = upload(&s, &ops, &key(), &good).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"created": 0, "updated": 0, "unchanged": 20}));
    assert_eq!(
        footprint(&db).await,
        after,
        "an unchanged file writes nothing"
    );
    // The key names one request: another body under it is refused.
    let (status, body, _) = upload(&s, &ops, &k, &catalog("FJ", 19)).await;
    assert_problem(status, &body, 422, "idempotency_key_reused");

    // One price changed: one update, one event with the next sequence.
    let changed = good.replace(
        "FJ-0007,FJ Field Jacket,Moss,7,2007,",
        "FJ-0007,FJ Field Jacket,Moss,7,2107,",
    );
    let (status, body, _) = upload(&s, &ops, &key(), &changed).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"created": 0, "updated": 1, "unchanged": 19}));
    let id = sku_by_code(&db, "FJ-0007").await;
    let events: Vec<(i64, Value)> = sqlx::query_as(
        "select sequence, payload from outbox where aggregate_id = $1 order by sequence",
    )
    .bind(id)
    .fetch_all(&db)
    .await
    .expect("events");
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].0, 2);
    assert_eq!(events[1].1["data"]["changed"], json!(["wholesale_price"]));
    assert_eq!(events[1].1["data"]["wholesale_price"], 2107);
    let new_sku: Value = s.get(&format!("/v1/skus/{id}"), &ops).await.1;
    assert_eq!(new_sku["code"], "FJ-0007");
    assert_eq!(
        new_sku["on_hand"], 0,
        "stock arrives through the inbox or reconcile"
    );

    // Account managers cannot import.
    let dana = s.login("acme", "dana@acme.test").await;
    let (status, body, _) = upload(&s, &dana, &key(), &good).await;
    assert_problem(status, &body, 403, "forbidden");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_discontinued_sku_takes_no_new_lines_but_its_lines_keep_working(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let dana = s.login("acme", "dana@acme.test").await;
    let customer = holdfast_server::demo::customer_id("acme", "Austin Boutique");
    let order = Uuid::now_v7();
    let (status, body) = create_order(&s, &dana, order, customer).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let line = Uuid::now_v7();
    let (status, body) = add_line(&s, &dana, order, line, kestrel_m(), 1).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["lines"][0]["unit_price"], 4200);
    assert_eq!(body["total"], 4200);

    let (status, sku) = patch_sku(
        &s,
        &ops,
        kestrel_m(),
        json!({"active": false, "code": "KST-IND-M"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{sku}");
    assert_eq!(
        (sku["active"].clone(), sku["code"].clone()),
        (json!(false), json!("KST-IND-M"))
    );

    // No new line…
    let (status, body) = add_line(&s, &dana, order, Uuid::now_v7(), kestrel_m(), 2).await;
    assert_problem(status, &body, 422, "invalid_state");
    assert_eq!(body["sku_active"], false);
    // …but the existing one still changes, and allocates.
    let resp = s
        .http
        .patch(s.url(&format!("/v1/orders/{order}/lines/{line}")))
        .bearer_auth(&dana)
        .header("idempotency-key", key())
        .json(&json!({"base_version": 2, "qty_ordered": 3}))
        .send()
        .await
        .expect("send");
    let (status, body) = read(resp).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["total"], 3 * 4200);

    // A later price change never reprices the entered line.
    let (status, _) = patch_sku(&s, &ops, kestrel_m(), json!({"wholesale_price": 9900})).await;
    assert_eq!(status, StatusCode::OK);
    let order_doc = s.get(&format!("/v1/orders/{order}"), &dana).await.1;
    assert_eq!(order_doc["lines"][0]["unit_price"], 4200);

    // The search matches the code and shows the SKU as discontinued.
    let (status, page) = s.get("/v1/skus?q=kst-ind", &dana).await;
    assert_eq!(status, StatusCode::OK);
    let skus = page["skus"].as_array().expect("skus");
    assert_eq!(skus.len(), 1, "{page}");
    assert_eq!(skus[0]["active"], false);

    // A code already taken is refused; another tenant's SKU is not found.
    let other = sqlx::query_scalar::<_, Uuid>(
        "select id from skus where tenant_id = $1 and id <> $2 limit 1",
    )
    .bind(crate::support::acme())
    .bind(kestrel_m())
    .fetch_one(&db)
    .await
    .expect("another acme SKU");
    let (status, body) = patch_sku(&s, &ops, other, json!({"code": "KST-IND-M"})).await;
    assert_problem(status, &body, 400, "validation_failed");
    let globex_sku: Uuid = sqlx::query_scalar("select id from skus where tenant_id = $1 limit 1")
        .bind(crate::support::globex())
        .fetch_one(&db)
        .await
        .expect("a globex SKU");
    let (status, body) = patch_sku(&s, &ops, globex_sku, json!({"msrp": 1})).await;
    assert_problem(status, &body, 404, "not_found");
}

async fn add_line(
    s: &TestServer,
    token: &str,
    order: Uuid,
    line: Uuid,
    sku: Uuid,
    qty: i64,
) -> (StatusCode, Value) {
    let version = s.get(&format!("/v1/orders/{order}"), token).await.1["version"].clone();
    let resp = s
        .http
        .post(s.url(&format!("/v1/orders/{order}/lines")))
        .bearer_auth(token)
        .header("idempotency-key", key())
        .json(&json!({"id": line, "sku_id": sku, "qty_ordered": qty, "base_version": version}))
        .send()
        .await
        .expect("send");
    read(resp).await
}

async fn create_order(
    s: &TestServer,
    token: &str,
    order: Uuid,
    customer: Uuid,
) -> (StatusCode, Value) {
    let resp = s
        .http
        .post(s.url("/v1/orders"))
        .bearer_auth(token)
        .header("idempotency-key", key())
        .json(&json!({"id": order, "customer_id": customer}))
        .send()
        .await
        .expect("send");
    read(resp).await
}

fn cli(db: &PgPool, file: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_holdfast-server"));
    cmd.args([
        "catalog",
        "import",
        "--tenant",
        "acme",
        "--page-size",
        "100",
    ])
    .arg(file)
    .env("DATABASE_URL", database_url(&db_name(db)))
    .env_remove("HOLDFAST_CATALOG_TEST_HOLD")
    .stdin(Stdio::null())
    .kill_on_drop(true);
    cmd
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_killed_catalog_import_resumes_and_a_rerun_changes_nothing(db: PgPool) {
    holdfast_server::demo::seed(&db).await.expect("seed");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("catalog.csv");
    std::fs::write(&file, catalog("PK", 1000)).expect("write");
    let before = footprint(&db).await;

    kill_at_hold("HOLDFAST_CATALOG_TEST_HOLD", cli(&db, &file), "4").await;
    let applied: i64 = sqlx::query_scalar("select applied_records from catalog_imports")
        .fetch_one(&db)
        .await
        .expect("the killed run");
    assert_eq!(
        applied, 400,
        "exactly the four pages before the kill committed"
    );
    assert_eq!(
        footprint(&db).await.0,
        before.0 + 400,
        "the killed page left nothing"
    );

    let (code, out) = run_binary(cli(&db, &file)).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("created 1000, updated 0, unchanged 0"),
        "{out}"
    );
    assert!(out.contains("resumed: 600"), "{out}");
    assert_eq!(
        footprint(&db).await,
        (before.0 + 1000, before.1 + 1000, before.2 + 1000),
        "every SKU once, announced once"
    );

    let (code, out) = run_binary(cli(&db, &file)).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("imported before"), "{out}");
    assert_eq!(footprint(&db).await.0, before.0 + 1000);

    // A bad file: every problem printed, exit status 1, nothing applied.
    let bad = dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        format!("{HEADER}X-1,Tee,Red,M,ten,100,\nX-2,Tee,Red,L,10,,\n"),
    )
    .expect("write");
    let output = cli(&db, &bad).output().await.expect("run");
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("line 2: wholesale_price") && stdout.contains("line 3: msrp"),
        "{stdout}"
    );
    assert!(stdout.contains("nothing was applied"), "{stdout}");
    assert_eq!(footprint(&db).await.0, before.0 + 1000);
}
