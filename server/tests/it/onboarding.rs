//! A company onboards itself and sells, end to end over real HTTP and real
//! Postgres: `holdfast-server tenant create` on the host, its operator signs
//! in, creates an account manager, imports the catalog from CSV, makes a
//! price list and a customer on it; the account manager signs in at a desk
//! (the real client engine with its SQLite outbox) and sells a SKU from the
//! import at the list's price. The invoice is the order's total, and a later
//! price change moves neither the entered line nor the invoice.

use std::sync::Arc;

use holdfast_client::token::MemoryTokens;
use holdfast_client::{Engine, NewOrder, SyncConfig};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::process::{database_url, db_name};
use crate::support::server::read;
use crate::support::{key, TestServer, MIGRATIONS};

const CATALOG: &str = "code,style,color,size,wholesale_price,msrp\n\
    IN-TPS-S,TPS Report Binder,Red,S,1500,3000\n\
    IN-TPS-M,TPS Report Binder,Red,M,1500,3000\n\
    IN-STP-1,Swingline Stapler,Red,One Size,2400,4900\n";

/// `holdfast-server tenant create`, as an operator runs it on the host; the
/// one-time password it prints.
async fn tenant_create(db: &PgPool) -> String {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_holdfast-server"))
        .args(["tenant", "create", "--slug", "initech", "--name", "Initech"])
        .args(["--operator-email", "bill@initech.test"])
        .env("DATABASE_URL", database_url(&db_name(db)))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run holdfast-server tenant create");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("password: "))
        .expect("a password line")
        .trim()
        .to_owned()
}

async fn sign_in(s: &TestServer, email: &str, password: &str) -> String {
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/sessions",
            None,
            Some(
                json!({"tenant": "initech", "email": email, "password": password,
                        "device_name": "back office"}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["token"].as_str().expect("token").to_owned()
}

/// An operator write: JSON, or CSV when `csv` is set. Asserts it succeeded.
async fn write(
    s: &TestServer,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    csv: Option<&str>,
) -> Value {
    let mut req = s
        .http
        .request(method, s.url(path))
        .bearer_auth(token)
        .header("idempotency-key", key());
    req = match (body, csv) {
        (Some(body), _) => req.json(&body),
        (None, Some(csv)) => req.header("content-type", "text/csv").body(csv.to_owned()),
        (None, None) => req,
    };
    let (status, body) = read(req.send().await.expect("send")).await;
    assert!(status.is_success(), "{path}: {status} {body}");
    body
}

/// Syncs until `done` holds (at most a minute). A pull serves a change once
/// no older transaction is still open (the feed's fence), and other tests
/// share this cluster, so one pass may come back before the change does.
async fn sync_until(desk: &Engine, done: impl Fn(&Engine) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        desk.sync_once().await.expect("sync");
        if done(desk) || std::time::Instant::now() > deadline {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_new_company_onboards_and_sells_at_its_customers_price(db: PgPool) {
    let password = tenant_create(&db).await;
    let s = TestServer::start(db.clone()).await;
    let bill = sign_in(&s, "bill@initech.test", &password).await;

    // The operator sets the company up.
    let created = write(&s, &bill, Method::POST, "/v1/admin/users",
        Some(json!({"email": "peter@initech.test", "display_name": "Peter Gibbons", "role": "account_manager"})), None).await;
    let peter_password = created["password"]
        .as_str()
        .expect("one-time password")
        .to_owned();
    let summary = write(
        &s,
        &bill,
        Method::POST,
        "/v1/admin/skus/import",
        None,
        Some(CATALOG),
    )
    .await;
    assert_eq!(summary, json!({"created": 3, "updated": 0, "unchanged": 0}));
    let list = Uuid::now_v7();
    write(
        &s,
        &bill,
        Method::POST,
        "/v1/admin/price-lists",
        Some(json!({"id": list, "name": "Chotchkie's"})),
        None,
    )
    .await;
    write(
        &s,
        &bill,
        Method::PUT,
        &format!("/v1/admin/price-lists/{list}/prices"),
        None,
        Some("code,price\nIN-STP-1,1999\n"),
    )
    .await;
    let customer = Uuid::now_v7();
    write(&s, &bill, Method::POST, "/v1/admin/customers",
        Some(json!({"id": customer, "name": "Chotchkie's", "credit_limit": 100_000, "price_list_id": list})), None).await;

    // Peter signs in at his desk and takes an order for three staplers.
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = Engine::open(
        &dir.path().join("desk.db"),
        Arc::new(MemoryTokens::default()),
        SyncConfig::default(),
    )
    .expect("open the desk's store");
    desk.login(
        &s.base,
        "initech",
        "peter@initech.test",
        &peter_password,
        "Peter's desk",
        false,
    )
    .await
    .expect("the account manager signs in with the password the operator was shown");
    let find = |d: &Engine| {
        d.find_sku("Swingline Stapler", "Red", "One Size")
            .expect("read")
    };
    let customer_of = |d: &Engine| d.find_customer("Chotchkie's").expect("read");
    sync_until(&desk, |d| find(d).is_some() && customer_of(d).is_some()).await;
    let stapler = find(&desk).expect("the imported SKU reached the desk");
    assert_eq!(stapler.code.as_deref(), Some("IN-STP-1"));
    let found = desk
        .find_customer("Chotchkie's")
        .expect("read")
        .expect("the customer reached the desk");
    assert_eq!(found.price_list_id, Some(list));

    let order = desk
        .create_order(NewOrder {
            customer_id: customer,
            customer_po: Some("FAX 0419".into()),
            ship_window_start: None,
            ship_window_end: None,
            notes: None,
        })
        .expect("queue the order");
    desk.add_line(order, stapler.id, 3).expect("queue the line");
    let report = desk.sync_once().await.expect("sync");
    assert_eq!(report.applied, 2, "{report:?}");
    let landed = desk
        .server_order(order)
        .expect("read")
        .expect("the server's order");
    assert_eq!(
        landed.lines[0].unit_price, 1_999,
        "the customer's list price, not wholesale 2400"
    );
    assert_eq!(landed.total, 3 * 1_999);

    desk.confirm(order).expect("queue the confirm");
    desk.sync_once().await.expect("sync");
    let confirmed = desk.server_order(order).expect("read").expect("order");
    let invoice_id = confirmed.invoice_id.expect("confirming made an invoice");
    let (_, invoice) = s.get(&format!("/v1/invoices/{invoice_id}"), &bill).await;
    assert_eq!(
        invoice["amount"],
        json!(confirmed.total),
        "the invoice is exactly the order's total"
    );

    // Prices change later: the list and the wholesale price. Neither the
    // entered line nor the invoice moves.
    write(
        &s,
        &bill,
        Method::PUT,
        &format!("/v1/admin/price-lists/{list}/prices"),
        None,
        Some("code,price\nIN-STP-1,2222\n"),
    )
    .await;
    write(
        &s,
        &bill,
        Method::PATCH,
        &format!("/v1/admin/skus/{}", stapler.id),
        Some(json!({"wholesale_price": 2600})),
        None,
    )
    .await;
    let price = |d: &Engine| {
        d.sku(stapler.id)
            .expect("read")
            .expect("sku")
            .sku
            .wholesale_price
    };
    sync_until(&desk, |d| price(d) == 2_600).await;
    let repriced = desk.sku(stapler.id).expect("read").expect("sku");
    assert_eq!(
        repriced.sku.wholesale_price, 2_600,
        "the desk sees the new price"
    );
    let after = desk.server_order(order).expect("read").expect("order");
    assert_eq!(after.lines[0].unit_price, 1_999);
    assert_eq!(after.total, 3 * 1_999);
    let (_, invoice) = s.get(&format!("/v1/invoices/{invoice_id}"), &bill).await;
    assert_eq!(invoice["amount"], 3 * 1_999);
}
