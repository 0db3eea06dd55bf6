//! Customers and price lists (API.md v1.1) over real HTTP and real Postgres:
//! create, edit, deactivate (no new orders, open orders keep working), the
//! customer CSV import (all or nothing, idempotent), price lists from JSON and
//! CSV, the price a line gets and keeps, change rows and events in the same
//! transaction, another tenant's ids, and an account manager refused.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::server::{read, Raw};
use crate::support::{assert_problem, kestrel_m, key, TestServer, MIGRATIONS};
use holdfast_server::demo;

const OPS: &str = "ops@acme.test";

async fn send(
    s: &TestServer,
    token: &str,
    method: Method,
    path: &str,
    content_type: &str,
    body: String,
) -> (StatusCode, Value, bool) {
    let resp = s
        .http
        .request(method, s.url(path))
        .bearer_auth(token)
        .header("idempotency-key", key())
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("send");
    let replayed = resp.headers().contains_key("idempotent-replayed");
    let (status, body) = read(resp).await;
    (status, body, replayed)
}

async fn json_write(s: &TestServer, token: &str, method: Method, path: &str, body: Value) -> Raw {
    s.mutate(token, method, path, &key(), &body).await
}

async fn csv(
    s: &TestServer,
    token: &str,
    method: Method,
    path: &str,
    file: &str,
) -> (StatusCode, Value) {
    let (status, body, _) = send(s, token, method, path, "text/csv", file.to_owned()).await;
    (status, body)
}

/// Change rows and events written for one document.
async fn footprint(db: &PgPool, kind: &str, id: Uuid) -> (i64, i64) {
    sqlx::query_as(
        "select (select count(*) from changes where kind = $1 and doc_id = $2),
                (select count(*) from outbox where aggregate_kind = $1 and aggregate_id = $2)",
    )
    .bind(kind)
    .bind(id)
    .fetch_one(db)
    .await
    .expect("counts")
}

async fn customer_named(
    db: &PgPool,
    name: &str,
) -> Option<(Uuid, Option<i64>, Option<Uuid>, Option<String>)> {
    sqlx::query_as("select id, credit_limit, price_list_id, email from customers where name = $1")
        .bind(name)
        .fetch_optional(db)
        .await
        .expect("customer")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_customer_is_created_edited_and_deactivated_and_its_open_orders_keep_working(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", OPS).await;
    let dana = s.login("acme", "dana@acme.test").await;

    let id = Uuid::now_v7();
    let k = key();
    let body = json!({"id": id, "name": "  Harbour & Pine ", "credit_limit": 250_000,
                      "email": "orders@harbour.example", "phone": "+1 206 555 0100"});
    let created = s
        .mutate(&ops, Method::POST, "/v1/admin/customers", &k, &body)
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.json());
    assert_eq!(
        created.json()["name"],
        "Harbour & Pine",
        "names are trimmed"
    );
    assert_eq!(created.json()["active"], true);
    assert_eq!(created.json()["price_list_id"], Value::Null);
    let again = s
        .mutate(&ops, Method::POST, "/v1/admin/customers", &k, &body)
        .await;
    assert!(again.replayed(), "the same key replays");
    assert_eq!(again.json(), created.json());
    assert_eq!(footprint(&db, "customer", id).await, (1, 1));

    // The name is the import's key: a second customer cannot take it.
    let twin = json_write(
        &s,
        &ops,
        Method::POST,
        "/v1/admin/customers",
        json!({"id": Uuid::now_v7(), "name": "Harbour & Pine"}),
    )
    .await;
    assert_problem(twin.status, &twin.json(), 400, "validation_failed");
    assert_eq!(twin.json()["errors"][0]["field"], "name");

    // An order for it, with a line.
    let order = Uuid::now_v7();
    let r = s
        .post(
            &dana,
            "/v1/orders",
            &key(),
            json!({"id": order, "customer_id": id}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());

    // Deactivated: no new orders; the open one still takes lines.
    let path = format!("/v1/admin/customers/{id}");
    let r = json_write(
        &s,
        &ops,
        Method::PATCH,
        &path,
        json!({"active": false, "phone": null}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["active"], false);
    assert_eq!(r.json()["phone"], Value::Null);
    assert_eq!(
        r.json()["email"],
        "orders@harbour.example",
        "untouched fields stay"
    );
    assert_eq!(footprint(&db, "customer", id).await, (2, 2));
    let event: Value = sqlx::query_scalar(
        "select payload from outbox where aggregate_id = $1 order by sequence desc limit 1",
    )
    .bind(id)
    .fetch_one(&db)
    .await
    .expect("event");
    assert_eq!(event["type"], "customer.updated");
    assert_eq!(event["data"]["changed"], json!(["phone", "active"]));
    assert_eq!(event["data"]["sequence"], 2);

    let refused = s
        .post(
            &dana,
            "/v1/orders",
            &key(),
            json!({"id": Uuid::now_v7(), "customer_id": id}),
        )
        .await;
    assert_problem(refused.status, &refused.json(), 422, "invalid_state");
    assert_eq!(refused.json()["customer_active"], false);
    let line = s
        .post(&dana, &format!("/v1/orders/{order}/lines"), &key(),
            json!({"id": Uuid::now_v7(), "sku_id": kestrel_m(), "qty_ordered": 2, "base_version": 1}))
        .await;
    assert_eq!(
        line.status,
        StatusCode::CREATED,
        "an open order keeps working: {}",
        line.json()
    );

    // The same patch again changes nothing and writes nothing.
    let r = json_write(&s, &ops, Method::PATCH, &path, json!({"active": false})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(footprint(&db, "customer", id).await, (2, 2));

    // Desks see it: the customer list carries the new fields.
    let (_, list) = s.get("/v1/customers", &dana).await;
    let found = list["customers"]
        .as_array()
        .expect("list")
        .iter()
        .find(|c| c["id"] == json!(id))
        .cloned();
    assert_eq!(found.expect("listed")["active"], false);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_customer_file_is_all_or_nothing_and_the_same_file_twice_is_unchanged(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", OPS).await;
    let before: i64 = sqlx::query_scalar("select count(*) from customers")
        .fetch_one(&db)
        .await
        .expect("n");

    let bad = "name,credit_limit,price_list,email,phone\n\
        Harbour & Pine,250000,,orders@harbour.example,\n\
        Little Fern Kids,-5,,,\n\
        Northwind Outfitters,,No Such List,,\n\
        Harbour & Pine,100,,,\n";
    let (status, body) = csv(&s, &ops, Method::POST, "/v1/admin/customers/import", bad).await;
    assert_problem(status, &body, 422, "validation_failed");
    let fields: Vec<&str> = body["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["field"].as_str().expect("field"))
        .collect();
    assert_eq!(
        fields,
        ["line 3: credit_limit", "line 4: price_list", "line 5: name"]
    );
    let after: i64 = sqlx::query_scalar("select count(*) from customers")
        .fetch_one(&db)
        .await
        .expect("n");
    assert_eq!(after, before, "nothing applied");

    let good = format!(
        "name,credit_limit,price_list,email,phone\n\
         Harbour & Pine,250000,{},orders@harbour.example,\n\
         Austin Boutique,600000,,buyer@austin.example,+1 512 555 0199\n",
        demo::TOKYO_PRICES
    );
    let (status, body) = csv(&s, &ops, Method::POST, "/v1/admin/customers/import", &good).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"created": 1, "updated": 1, "unchanged": 0}));
    let (_, limit, list, email) = customer_named(&db, "Harbour & Pine")
        .await
        .expect("created");
    assert_eq!(limit, Some(250_000));
    assert_eq!(list, Some(demo::price_list_id("acme", demo::TOKYO_PRICES)));
    assert_eq!(email.as_deref(), Some("orders@harbour.example"));
    let austin = demo::customer_id("acme", "Austin Boutique");
    assert_eq!(
        footprint(&db, "customer", austin).await,
        (2, 2),
        "created, then updated"
    );

    let (status, body) = csv(&s, &ops, Method::POST, "/v1/admin/customers/import", &good).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"created": 0, "updated": 0, "unchanged": 2}));
    assert_eq!(
        footprint(&db, "customer", austin).await,
        (2, 2),
        "nothing written"
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_line_takes_its_customers_list_price_and_keeps_it(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", OPS).await;
    let dana = s.login("acme", "dana@acme.test").await;

    // A list from JSON, then its prices replaced from CSV by code.
    let list = Uuid::now_v7();
    let r = json_write(
        &s,
        &ops,
        Method::POST,
        "/v1/admin/price-lists",
        json!({"id": list, "name": "Key accounts"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    assert_eq!(r.json()["prices"], json!([]));
    let prices = format!("/v1/admin/price-lists/{list}/prices");
    let r = json_write(&s, &ops, Method::PUT, &prices,
        json!({"prices": [{"sku_id": kestrel_m(), "price": 3_500}, {"sku_id": Uuid::now_v7(), "price": 1}, {"sku_id": kestrel_m(), "price": -1}]})).await;
    assert_problem(r.status, &r.json(), 400, "validation_failed");
    let errors = r.json()["errors"].clone();
    let fields: Vec<&str> = errors
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["field"].as_str().expect("field"))
        .collect();
    assert_eq!(
        fields,
        ["prices[1].sku_id", "prices[2].sku_id", "prices[2].price"]
    );
    let code = demo::sku_code("Kestrel Overshirt", "Washed Indigo", "M");
    let (status, body) = csv(
        &s,
        &ops,
        Method::PUT,
        &prices,
        &format!("code,price\n{code},3500\nNO-SUCH,10\n"),
    )
    .await;
    assert_problem(status, &body, 422, "validation_failed");
    assert_eq!(body["errors"][0]["field"], "line 3: code");
    let (status, body) = csv(
        &s,
        &ops,
        Method::PUT,
        &prices,
        &format!("code,price\n{code},3500\n"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"entries": 1}));
    assert_eq!(footprint(&db, "price_list", list).await, (2, 2));
    let (status, body) = csv(
        &s,
        &ops,
        Method::PUT,
        &prices,
        &format!("code,price\n{code},3500\n"),
    )
    .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"entries": 1})));
    assert_eq!(
        footprint(&db, "price_list", list).await,
        (2, 2),
        "the same prices write nothing"
    );

    // Any role reads a list.
    let (status, doc) = s.get(&format!("/v1/price-lists/{list}"), &dana).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(
        doc["prices"],
        json!([{"sku_id": kestrel_m(), "price": 3_500}])
    );

    // A customer on it buys at 3500; a SKU not on it at wholesale.
    let customer = Uuid::now_v7();
    let r = json_write(
        &s,
        &ops,
        Method::POST,
        "/v1/admin/customers",
        json!({"id": customer, "name": "Key Account Co", "price_list_id": list}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let order = Uuid::now_v7();
    s.post(
        &dana,
        "/v1/orders",
        &key(),
        json!({"id": order, "customer_id": customer}),
    )
    .await;
    let swift = demo::sku_id("acme", "Swift Tee", "Ecru", "M");
    let mut version = 1;
    for (sku, qty) in [(kestrel_m(), 2), (swift, 3)] {
        let r = s.post(&dana, &format!("/v1/orders/{order}/lines"), &key(),
            json!({"id": Uuid::now_v7(), "sku_id": sku, "qty_ordered": qty, "base_version": version})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
        version += 1;
    }
    let (_, doc) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    let lines = doc["lines"].as_array().expect("lines");
    assert_eq!(lines[0]["unit_price"], 3_500, "from the price list");
    assert_eq!(
        lines[1]["unit_price"], 1_200,
        "the Swift Tee's wholesale price"
    );
    assert_eq!(doc["total"], 2 * 3_500 + 3 * 1_200);

    // Prices change afterwards: the list and the wholesale price. The entered
    // lines keep theirs, and the invoice is the order's total.
    csv(
        &s,
        &ops,
        Method::PUT,
        &prices,
        &format!("code,price\n{code},9999\n"),
    )
    .await;
    let r = json_write(
        &s,
        &ops,
        Method::PATCH,
        &format!("/v1/admin/skus/{swift}"),
        json!({"wholesale_price": 5_000}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/confirm"),
            &key(),
            json!({"base_version": version}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["total"], 2 * 3_500 + 3 * 1_200);
    let invoice = r.json()["invoice_id"].as_str().expect("invoice").to_owned();
    let (_, inv) = s.get(&format!("/v1/invoices/{invoice}"), &dana).await;
    assert_eq!(inv["amount"], 2 * 3_500 + 3 * 1_200, "{inv}");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn another_tenants_customers_and_lists_are_not_found_and_managers_are_refused(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", OPS).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let gina = s.login("globex", "gina@globex.test").await;
    let theirs = demo::customer_id("globex", "Globex Retail West");

    let r = json_write(
        &s,
        &ops,
        Method::PATCH,
        &format!("/v1/admin/customers/{theirs}"),
        json!({"active": false}),
    )
    .await;
    assert_problem(r.status, &r.json(), 404, "not_found");
    let tokyo_list = demo::price_list_id("acme", demo::TOKYO_PRICES);
    let (status, body) = s.get(&format!("/v1/price-lists/{tokyo_list}"), &gina).await;
    assert_problem(status, &body, 404, "not_found");
    // Lists that are not this tenant's cannot be named either.
    let r = json_write(
        &s,
        &ops,
        Method::PUT,
        &format!("/v1/admin/price-lists/{}/prices", Uuid::now_v7()),
        json!({"prices": []}),
    )
    .await;
    assert_problem(r.status, &r.json(), 404, "not_found");
    let r = json_write(
        &s,
        &ops,
        Method::POST,
        "/v1/admin/customers",
        json!({"id": Uuid::now_v7(), "name": "Anyone", "price_list_id": Uuid::now_v7()}),
    )
    .await;
    assert_problem(r.status, &r.json(), 404, "not_found");
    let active: bool = sqlx::query_scalar("select active from customers where id = $1")
        .bind(theirs)
        .fetch_one(&db)
        .await
        .expect("theirs");
    assert!(active, "untouched");

    for (method, path, body) in [
        (
            Method::POST,
            "/v1/admin/customers".to_owned(),
            json!({"id": Uuid::now_v7(), "name": "X"}),
        ),
        (
            Method::PATCH,
            format!(
                "/v1/admin/customers/{}",
                demo::customer_id("acme", "Austin Boutique")
            ),
            json!({"active": false}),
        ),
        (
            Method::POST,
            "/v1/admin/price-lists".to_owned(),
            json!({"id": Uuid::now_v7(), "name": "X"}),
        ),
        (
            Method::PUT,
            format!("/v1/admin/price-lists/{tokyo_list}/prices"),
            json!({"prices": []}),
        ),
    ] {
        let r = json_write(&s, &dana, method, &path, body).await;
        assert_problem(r.status, &r.json(), 403, "forbidden");
    }
    let (status, body) = csv(
        &s,
        &dana,
        Method::POST,
        "/v1/admin/customers/import",
        "name,credit_limit,price_list,email,phone\n",
    )
    .await;
    assert_problem(status, &body, 403, "forbidden");
    let entries: i64 =
        sqlx::query_scalar("select count(*) from price_list_entries where price_list_id = $1")
            .bind(tokyo_list)
            .fetch_one(&db)
            .await
            .expect("n");
    assert!(entries > 0, "the demo list keeps its prices");
}
