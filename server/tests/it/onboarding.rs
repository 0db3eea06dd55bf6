//! A wholesale company onboards itself from nothing, over real HTTP and real
//! Postgres: its tenant is created on the server host (`holdfast-server
//! tenant create`, the real binary), its operator signs in, imports the
//! catalog from CSV, sets up a price list and customers, and creates an
//! account manager, who signs in at a desk (the real client engine) and sells
//! an imported SKU at the price list's price. The invoice equals the order's
//! total, and a later price change moves neither the entered line nor the
//! invoice.

use std::process::Stdio;
use std::sync::Arc;

use holdfast_client::token::MemoryTokens;
use holdfast_client::{Engine, NewOrder, SyncConfig};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::process::{database_url, db_name};
use crate::support::server::read;
use crate::support::{key, TestServer, MIGRATIONS};

/// One keyed operator write.
async fn write(
    s: &TestServer,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    let resp = s
        .http
        .request(method, s.url(path))
        .bearer_auth(token)
        .header("idempotency-key", key())
        .json(&body)
        .send()
        .await
        .expect("send");
    read(resp).await
}

async fn sign_in(s: &TestServer, tenant: &str, email: &str, password: &str) -> String {
    let (status, body) = s
        .call(
            reqwest::Method::POST,
            "/v1/sessions",
            None,
            Some(json!({"tenant": tenant, "email": email, "password": password,
                        "device_name": "back office"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "sign-in {email}: {body}");
    body["token"].as_str().expect("token").to_owned()
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_company_onboards_and_sells_at_its_own_prices(db: PgPool) {
    let s = TestServer::start(db.clone()).await;

    // 1. The tenant, from the server host.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_holdfast-server"))
        .args([
            "tenant", "create", "--slug", "northwind", "--name", "Northwind Wholesale",
            "--operator-email", "Boss@Northwind.test",
        ])
        .env("DATABASE_URL", database_url(&db_name(&db)))
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run tenant create");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let password = stdout
        .lines()
        .find_map(|l| l.strip_prefix("password: "))
        .expect("the one-time password is printed")
        .trim()
        .to_owned();

    // 2. Its operator signs in and imports the catalog.
    let ops = sign_in(&s, "northwind", "boss@northwind.test", &password).await;
    let csv = "code,style,color,size,wholesale_price,msrp\n\
               NW-100,Puffin Parka,Harbour Blue,M,9000,18000\n\
               NW-101,Puffin Parka,Harbour Blue,L,9000,18000\n";
    let resp = s
        .http
        .post(s.url("/v1/admin/skus/import"))
        .bearer_auth(&ops)
        .header("idempotency-key", key())
        .header("content-type", "text/csv")
        .body(csv)
        .send()
        .await
        .expect("import");
    let (status, body) = read(resp).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"created": 2, "updated": 0, "unchanged": 0})));
    let (_, found) = s.get("/v1/skus?q=NW-100", &ops).await;
    let parka: Uuid = found["skus"][0]["id"].as_str().and_then(|v| v.parse().ok()).expect("imported SKU");

    // 3. A price list with a customer on it, and a customer without one.
    let list = Uuid::now_v7();
    let (status, body) = write(&s, &ops, reqwest::Method::POST, "/v1/admin/price-lists",
        json!({"id": list, "name": "Key accounts"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = write(&s, &ops, reqwest::Method::PUT, &format!("/v1/admin/price-lists/{list}/prices"),
        json!({"prices": [{"sku_id": parka, "price": 7650}]})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (key_account, walk_in) = (Uuid::now_v7(), Uuid::now_v7());
    let (status, body) = write(&s, &ops, reqwest::Method::POST, "/v1/admin/customers",
        json!({"id": key_account, "name": "Reykjavik Outfitters", "credit_limit": 1_000_000, "price_list_id": list})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = write(&s, &ops, reqwest::Method::POST, "/v1/admin/customers",
        json!({"id": walk_in, "name": "Harbour Street Store"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // 4. An account manager, created by the operator.
    let (status, created) = write(&s, &ops, reqwest::Method::POST, "/v1/admin/users",
        json!({"email": "sigrun@northwind.test", "display_name": "Sigrún", "role": "account_manager"})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let am_password = created["password"].as_str().expect("shown once").to_owned();

    // 5. She signs in at a desk and sells: one order on the price list, one not.
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = Engine::open(&dir.path().join("desk.db"), Arc::new(MemoryTokens::default()), SyncConfig::default())
        .expect("open desk");
    desk.login(&s.base, "northwind", "sigrun@northwind.test", &am_password, "Sigrún's desk", false)
        .await
        .expect("desk sign-in");
    desk.sync_once().await.expect("first pull");
    let order_for = |customer| NewOrder {
        customer_id: customer,
        customer_po: Some("FAX 0412".into()),
        ship_window_start: None,
        ship_window_end: None,
        notes: None,
    };
    let listed = desk.create_order(order_for(key_account)).expect("order");
    desk.add_line(listed, parka, 4).expect("line");
    desk.confirm(listed).expect("confirm");
    let wholesale = desk.create_order(order_for(walk_in)).expect("order");
    desk.add_line(wholesale, parka, 1).expect("line");
    for _ in 0..20 {
        desk.sync_once().await.expect("sync");
        if desk.status().expect("status").pending == 0 {
            break;
        }
    }
    assert_eq!(desk.status().expect("status").pending, 0, "every act landed");

    let (_, order) = s.get(&format!("/v1/orders/{listed}"), &ops).await;
    assert_eq!(order["status"], "confirmed");
    assert_eq!(order["lines"][0]["unit_price"], 7650, "the price list's price");
    assert_eq!(order["total"], 4 * 7650);
    let invoice_id = order["invoice_id"].as_str().expect("invoiced").to_owned();
    let (_, invoice) = s.get(&format!("/v1/invoices/{invoice_id}"), &ops).await;
    assert_eq!(invoice["amount"], order["total"], "the invoice is exactly the total");
    let (_, other) = s.get(&format!("/v1/orders/{wholesale}"), &ops).await;
    assert_eq!(other["lines"][0]["unit_price"], 9000, "no list: the wholesale price");

    // 6. Prices change later: entered lines and the invoice stay as sold.
    let (status, _) = write(&s, &ops, reqwest::Method::PATCH, &format!("/v1/admin/skus/{parka}"),
        json!({"wholesale_price": 9900})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = write(&s, &ops, reqwest::Method::PUT, &format!("/v1/admin/price-lists/{list}/prices"),
        json!({"prices": [{"sku_id": parka, "price": 8000}]})).await;
    assert_eq!(status, StatusCode::OK);
    let (_, order) = s.get(&format!("/v1/orders/{listed}"), &ops).await;
    assert_eq!(order["lines"][0]["unit_price"], 7650);
    let (_, invoice) = s.get(&format!("/v1/invoices/{invoice_id}"), &ops).await;
    assert_eq!(invoice["amount"], 4 * 7650);
    let (_, other) = s.get(&format!("/v1/orders/{wholesale}"), &ops).await;
    assert_eq!(other["lines"][0]["unit_price"], 9000);
    assert_eq!(other["total"], 9000);
}
