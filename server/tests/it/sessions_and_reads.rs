//! Sign-in, revocation, tenant isolation, roles, the read routes and every
//! problem code they can produce, over real HTTP against real Postgres.

use holdfast_server::demo;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::audit::assert_ledgers_match_positions;
use crate::support::{assert_problem, read, TestServer, MIGRATIONS};

async fn insert_order(db: &PgPool, tenant: &str, email: &str, customer: &str) -> Uuid {
    let id = Uuid::now_v7();
    let user = demo::user_id(tenant, email);
    sqlx::query(
        "insert into orders (tenant_id, id, customer_id, customer_po, created_by, updated_by)
         values ($1, $2, $3, 'PO-7', $4, $4)",
    )
    .bind(demo::tenant_id(tenant))
    .bind(id)
    .bind(demo::customer_id(tenant, customer))
    .bind(user)
    .execute(db)
    .await
    .expect("insert order");
    id
}

fn login_body(tenant: &str, email: &str, password: &str) -> Value {
    json!({"tenant": tenant, "email": email, "password": password, "device_name": "desk 3"})
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn login_failures_are_indistinguishable(db: PgPool) {
    let s = TestServer::start(db).await;
    let (status, ok) = s
        .call(
            Method::POST,
            "/v1/sessions",
            None,
            Some(login_body("acme", "Dana@Acme.test", "holdfast-demo")),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{ok}");
    assert_eq!(ok["user"]["email"], "dana@acme.test");
    assert_eq!(ok["user"]["role"], "account_manager");
    assert_eq!(ok["tenant"]["slug"], "acme");
    assert!(ok["token"].as_str().expect("token").len() >= 43);

    let mut bodies = Vec::new();
    for body in [
        login_body("acme", "dana@acme.test", "wrong password"),
        login_body("acme", "nobody@acme.test", "holdfast-demo"),
        login_body("initech", "dana@acme.test", "holdfast-demo"),
        login_body("globex", "dana@acme.test", "holdfast-demo"),
    ] {
        let (status, problem) = s.call(Method::POST, "/v1/sessions", None, Some(body)).await;
        assert_problem(status, &problem, 401, "unauthorized");
        bodies.push(problem);
    }
    assert!(
        bodies.windows(2).all(|w| w[0] == w[1]),
        "401 bodies differ: {bodies:?}"
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn tokens_are_stored_only_as_hashes(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let token = s.login("acme", "dana@acme.test").await;
    let stored: Vec<Vec<u8>> = sqlx::query_scalar("select token_sha256 from device_tokens")
        .fetch_all(&db)
        .await
        .expect("tokens");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0], holdfast_server::auth::token_digest(&token));
    let plaintext: i64 = sqlx::query_scalar(
        "select count(*) from device_tokens where position($1::bytea in token_sha256) > 0",
    )
    .bind(token.as_bytes())
    .fetch_one(&db)
    .await
    .expect("count");
    assert_eq!(plaintext, 0);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn logout_revokes_at_once(db: PgPool) {
    let s = TestServer::start(db).await;
    let token = s.login("acme", "dana@acme.test").await;
    let other = s.login("acme", "dana@acme.test").await;
    assert_eq!(s.get("/v1/customers", &token).await.0, StatusCode::OK);

    let (status, body) = s
        .call(Method::DELETE, "/v1/sessions/current", Some(&token), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = s.get("/v1/customers", &token).await;
    assert_problem(status, &body, 401, "unauthorized");
    // Only that device's token: the same user's other desk keeps working.
    assert_eq!(s.get("/v1/customers", &other).await.0, StatusCode::OK);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn missing_and_bad_tokens_are_401(db: PgPool) {
    let s = TestServer::start(db).await;
    let (status, body) = s.call(Method::GET, "/v1/orders", None, None).await;
    assert_problem(status, &body, 401, "unauthorized");
    let (status, body) = s.get("/v1/orders", "hf_not-a-real-token").await;
    assert_problem(status, &body, 401, "unauthorized");
    let resp = s
        .http
        .get(s.url("/v1/orders"))
        .header("authorization", "Basic ZGFuYTp4")
        .send()
        .await
        .expect("send");
    let (status, body) = read(resp).await;
    assert_problem(status, &body, 401, "unauthorized");
}

/// Issue 15, item 7: the scheme is case-insensitive (RFC 9110 §11.1).
#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_bearer_scheme_is_case_insensitive(db: PgPool) {
    let s = TestServer::start(db).await;
    let token = s.login("acme", "dana@acme.test").await;
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let resp = s
            .http
            .get(s.url("/v1/orders"))
            .header("authorization", format!("{scheme} {token}"))
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 200, "{scheme}");
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn another_tenants_documents_are_404(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let order = insert_order(&db, "acme", "dana@acme.test", "Austin Boutique").await;
    let invoice = Uuid::now_v7();
    sqlx::query(
        "insert into invoices (tenant_id, id, order_id, customer_id, amount) values ($1, $2, $3, $4, 1000)",
    )
    .bind(demo::tenant_id("acme"))
    .bind(invoice)
    .bind(order)
    .bind(demo::customer_id("acme", "Austin Boutique"))
    .execute(&db)
    .await
    .expect("invoice");
    let kestrel = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");

    let dana = s.login("acme", "dana@acme.test").await;
    let (status, got) = s.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got["updated_by_name"], "Dana Whitfield");
    assert_eq!(got["version"], 1);
    assert_eq!(got["status"], "draft");
    assert_eq!(got["lines"], json!([]));
    assert_eq!(
        s.get(&format!("/v1/invoices/{invoice}"), &dana).await.0,
        StatusCode::OK
    );

    let gina = s.login("globex", "gina@globex.test").await;
    for path in [
        format!("/v1/orders/{order}"),
        format!("/v1/invoices/{invoice}"),
        format!("/v1/skus/{kestrel}"),
    ] {
        let (status, body) = s.get(&path, &gina).await;
        assert_problem(status, &body, 404, "not_found");
    }
    let (_, list) = s.get("/v1/orders", &gina).await;
    assert_eq!(list["orders"], json!([]));
    let (_, customers) = s.get("/v1/customers", &gina).await;
    let names: Vec<&str> = customers["customers"]
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["Globex Retail West"]);
    let (_, skus) = s.get("/v1/skus?q=kestrel", &gina).await;
    assert_eq!(skus["skus"], json!([]));
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn roles_are_enforced(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let ops = s.login("acme", "ops@acme.test").await;
    let body = json!({"provider": "warehouse"});
    let (status, problem) = s
        .call(
            Method::POST,
            "/v1/admin/inbound-secrets",
            Some(&dana),
            Some(body.clone()),
        )
        .await;
    assert_problem(status, &problem, 403, "forbidden");
    let (status, ok) = s
        .call(
            Method::POST,
            "/v1/admin/inbound-secrets",
            Some(&ops),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{ok}");
    assert!(ok["secret"].as_str().expect("secret").starts_with("whsec_"));
    let (status, problem) = s
        .call(
            Method::POST,
            "/v1/admin/inbound-secrets",
            Some(&ops),
            Some(json!({"provider": "fax"})),
        )
        .await;
    assert_problem(status, &problem, 400, "validation_failed");
    assert_eq!(problem["errors"][0]["field"], "provider");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn bad_requests_get_their_problem_codes(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", "dana@acme.test").await;

    // Not JSON at all.
    let resp = s
        .http
        .post(s.url("/v1/sessions"))
        .header("content-type", "application/json")
        .body("{\"tenant\": ")
        .send()
        .await
        .expect("send");
    let (status, body) = read(resp).await;
    assert_problem(status, &body, 400, "malformed_json");

    // Wrong content type.
    let resp = s
        .http
        .post(s.url("/v1/sessions"))
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .expect("send");
    let (status, body) = read(resp).await;
    assert_problem(status, &body, 415, "unsupported_media_type");

    // Unknown field, named.
    let mut body = login_body("acme", "dana@acme.test", "holdfast-demo");
    body["pasword"] = json!("typo");
    let (status, problem) = s.call(Method::POST, "/v1/sessions", None, Some(body)).await;
    assert_problem(status, &problem, 400, "validation_failed");
    assert_eq!(problem["errors"][0]["field"], "pasword");

    // Missing field, named.
    let (status, problem) = s
        .call(
            Method::POST,
            "/v1/sessions",
            None,
            Some(json!({"tenant": "acme"})),
        )
        .await;
    assert_problem(status, &problem, 400, "validation_failed");
    assert!(problem["errors"][0]["field"].is_string());

    // Over 1 MiB.
    let big = json!({"tenant": "x".repeat(1024 * 1024 + 10), "email": "", "password": "", "device_name": ""});
    let (status, problem) = s.call(Method::POST, "/v1/sessions", None, Some(big)).await;
    assert_problem(status, &problem, 413, "payload_too_large");

    // Bad query parameters.
    let (status, problem) = s.get("/v1/skus?limit=0", &dana).await;
    assert_problem(status, &problem, 400, "validation_failed");
    assert_eq!(problem["errors"][0]["field"], "limit");
    let (status, problem) = s.get("/v1/skus?after=garbage", &dana).await;
    assert_problem(status, &problem, 400, "validation_failed");
    assert_eq!(problem["errors"][0]["field"], "after");
    let (status, problem) = s.get("/v1/orders?status=shipped", &dana).await;
    assert_problem(status, &problem, 400, "validation_failed");
    let (status, problem) = s.get("/v1/orders?colour=red", &dana).await;
    assert_problem(status, &problem, 400, "validation_failed");

    // Unknown things.
    let (status, problem) = s
        .get(&format!("/v1/orders/{}", Uuid::now_v7()), &dana)
        .await;
    assert_problem(status, &problem, 404, "not_found");
    let (status, problem) = s.get("/v1/orders/not-a-uuid", &dana).await;
    assert_problem(status, &problem, 404, "not_found");
    let (status, problem) = s.get("/v1/no-such-route", &dana).await;
    assert_problem(status, &problem, 404, "not_found");
    let (status, problem) = s
        .call(Method::PUT, "/v1/customers", Some(&dana), None)
        .await;
    assert_problem(status, &problem, 405, "method_not_allowed");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn sku_search_pages_through_every_match_once(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", "dana@acme.test").await;

    let (status, all) = s.get("/v1/skus?limit=1000", &dana).await;
    assert_eq!(status, StatusCode::OK);
    assert!(all["skus"].as_array().expect("skus").len() >= 300);
    assert!(all["next"].is_null());

    let mut seen = Vec::new();
    let mut path = "/v1/skus?q=KESTREL&limit=7".to_owned();
    loop {
        let (status, page) = s.get(&path, &dana).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let skus = page["skus"].as_array().expect("skus");
        assert!(skus.len() <= 7);
        for sku in skus {
            assert_eq!(sku["style"], "Kestrel Overshirt");
            seen.push((
                sku["color"].as_str().expect("c").to_owned(),
                sku["size"].as_str().expect("s").to_owned(),
            ));
        }
        match page["next"].as_str() {
            Some(next) => path = format!("/v1/skus?q=KESTREL&limit=7&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 30, "5 colours × 6 sizes");
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "pages are ordered and never repeat");

    let (_, narrow) = s.get("/v1/skus?q=kestrel%20indigo%20m", &dana).await;
    let m = narrow["skus"]
        .as_array()
        .expect("skus")
        .iter()
        .find(|s| s["size"] == "M")
        .expect("the M");
    assert_eq!(m["color"], "Washed Indigo");
    assert_eq!(
        (
            m["on_hand"].as_i64(),
            m["on_order"].as_i64(),
            m["allocated"].as_i64(),
            m["ats"].as_i64()
        ),
        (Some(6), Some(0), Some(0), Some(6))
    );
    let (_, one) = s
        .get(
            &format!("/v1/skus/{}", m["id"].as_str().expect("id")),
            &dana,
        )
        .await;
    assert_eq!(&one, m);

    // A wildcard typed by the user matches itself, not everything.
    let (_, none) = s.get("/v1/skus?q=%25", &dana).await;
    assert_eq!(none["skus"], json!([]));
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn orders_page_and_filter(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(insert_order(&db, "acme", "priya@acme.test", "Tokyo Distributor").await);
    }
    sqlx::query("update orders set status = 'cancelled' where id = $1")
        .bind(ids[2])
        .execute(&db)
        .await
        .expect("cancel");
    let dana = s.login("acme", "dana@acme.test").await;

    let mut got = Vec::new();
    let mut path = "/v1/orders?limit=2".to_owned();
    loop {
        let (status, page) = s.get(&path, &dana).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        got.extend(
            page["orders"]
                .as_array()
                .expect("orders")
                .iter()
                .map(|o| o["id"].as_str().expect("id").to_owned()),
        );
        match page["next"].as_str() {
            Some(next) => path = format!("/v1/orders?limit=2&after={next}"),
            None => break,
        }
    }
    let want: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    assert_eq!(got, want);

    let (_, cancelled) = s.get("/v1/orders?status=cancelled", &dana).await;
    let cancelled = cancelled["orders"].as_array().expect("orders");
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0]["id"], ids[2].to_string());
    assert_eq!(cancelled[0]["updated_by_name"], "Priya Raman");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn customers_carry_credit_limits(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let (_, body) = s.get("/v1/customers", &dana).await;
    let customers = body["customers"].as_array().expect("customers");
    let find = |name: &str| {
        customers
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .expect(name)
    };
    assert_eq!(find("Austin Boutique")["credit_limit"], 500_000);
    assert_eq!(find("Tokyo Distributor")["credit_limit"], Value::Null);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn demo_seed_runs_once(db: PgPool) {
    let s = TestServer::start(db.clone()).await; // seeds once
    let count = |table: &'static str| {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, i64>(&format!("select count(*) from {table}"))
                .fetch_one(&db)
                .await
                .expect("count")
        }
    };
    let before = (
        count("users").await,
        count("skus").await,
        count("inventory_ledger").await,
        count("customers").await,
    );
    demo::seed(&db).await.expect("second seed");
    let after = (
        count("users").await,
        count("skus").await,
        count("inventory_ledger").await,
        count("customers").await,
    );
    assert_eq!(before, after);
    let globex_skus: i64 = sqlx::query_scalar("select count(*) from skus where tenant_id = $1")
        .bind(demo::tenant_id("globex"))
        .fetch_one(&db)
        .await
        .expect("count");
    assert!(globex_skus >= 20);
    // Ledger sums equal positions from the first row.
    assert_ledgers_match_positions(&db).await;
    drop(s);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn operations_endpoints(db: PgPool) {
    let s = TestServer::start(db).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let _ = s.get("/v1/customers", &dana).await;

    let health = s.http.get(s.url("/healthz")).send().await.expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    let ready = s.http.get(s.url("/readyz")).send().await.expect("readyz");
    assert_eq!(ready.status(), StatusCode::OK);

    let metrics = s
        .http
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("holdfast_http_requests_total")
                && l.contains("route=\"/v1/customers\"")
                && l.contains("status=\"200\"")),
        "{metrics}"
    );
    assert!(
        metrics.contains("holdfast_http_request_duration_seconds_bucket"),
        "latency histogram"
    );

    let (status, doc) = s.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().expect("version").starts_with("3."));
    for path in [
        "/v1/sessions",
        "/v1/orders",
        "/v1/orders/{id}",
        "/v1/skus",
        "/v1/customers",
        "/v1/invoices/{id}",
        // v1.1: master data, the order's history.
        "/v1/admin/skus/import",
        "/v1/admin/skus/{id}",
        "/v1/admin/customers",
        "/v1/admin/customers/{id}",
        "/v1/admin/customers/import",
        "/v1/admin/price-lists",
        "/v1/admin/price-lists/{id}/prices",
        "/v1/price-lists/{id}",
        "/v1/admin/users",
        "/v1/admin/users/{id}",
        "/v1/admin/users/{id}/reset-password",
        "/v1/sessions/current/password",
        "/v1/orders/{id}/history",
        // Issue 18: test events.
        "/v1/admin/partners/{id}/test-event",
        "/v1/orders/dead-lettered",
    ] {
        assert!(doc["paths"][path].is_object(), "openapi lacks {path}");
    }
    assert!(
        doc["paths"]["/v1/admin/partners/{id}"]["delete"].is_object(),
        "openapi lacks DELETE /v1/admin/partners/{{id}}"
    );
}
