//! Hostile callers: every route demands a token, no id crosses tenants,
//! sign-in guessing is throttled, and no secret ever reaches the logs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast_server::ratelimit::LoginLimiter;
use holdfast_server::{demo, AppState};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::process::{database_url, reachable_tempdir, ServerProcess};
use crate::support::{assert_problem, TestServer, MIGRATIONS};

/// Every `/v1` route of the OpenAPI document with a concrete path, given ids.
async fn routes(
    s: &TestServer,
    order: Uuid,
    line: Uuid,
    sku: Uuid,
    invoice: Uuid,
    partner: Uuid,
) -> Vec<(Method, String)> {
    let (_, doc) = s.call(Method::GET, "/openapi.json", None, None).await;
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        if !path.starts_with("/v1/") || path == "/v1/sessions" || path.starts_with("/v1/webhooks") {
            continue;
        }
        let concrete = path.replace("{line_id}", &line.to_string()).replace(
            "{id}",
            &match path.as_str() {
                p if p.starts_with("/v1/orders") => order.to_string(),
                p if p.starts_with("/v1/skus") => sku.to_string(),
                p if p.starts_with("/v1/invoices") => invoice.to_string(),
                p if p.starts_with("/v1/admin/partners") => partner.to_string(),
                _ => "1".to_owned(),
            },
        );
        for method in item.as_object().expect("item").keys() {
            out.push((
                method.to_uppercase().parse().expect("method"),
                concrete.clone(),
            ));
        }
    }
    assert!(out.len() >= 25, "the sweep covers the API: {out:?}");
    out
}

/// A well-formed body for each route, so a refusal can only be about who asks.
fn body_for(method: &Method, path: &str) -> Value {
    if path.ends_with("/allocate") || path.ends_with("/release") {
        json!({"qty": 1})
    } else if path.ends_with("/remove") || path.ends_with("/confirm") || path.ends_with("/cancel") {
        json!({"base_version": 4})
    } else if path.ends_with("/lines") {
        json!({"id": Uuid::now_v7(), "sku_id": Uuid::now_v7(), "qty_ordered": 1, "base_version": 4})
    } else if path.contains("/lines/") && method == Method::PATCH {
        json!({"base_version": 4, "qty_ordered": 3})
    } else if path.starts_with("/v1/orders/") && method == Method::PATCH {
        json!({"base_version": 4, "set": {"notes": "x"}})
    } else if path.starts_with("/v1/admin/partners/") && method == Method::PATCH {
        json!({"enabled": true})
    } else {
        json!({})
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn every_route_needs_a_token_and_no_id_crosses_tenants(db: PgPool) {
    let s = TestServer::start_with(AppState::new(db.clone()).allowing_private_targets(true)).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let acme_ops = s.login("acme", "ops@acme.test").await;
    let gina = s.login("globex", "gina@globex.test").await;
    // A globex operator too, for the admin routes.
    sqlx::query(
        "insert into users (tenant_id, id, email, display_name, role, password_hash)
         select tenant_id, $1, 'ops@globex.test', 'Globex Ops', 'operator', password_hash
           from users where email = 'gina@globex.test'",
    )
    .bind(Uuid::now_v7())
    .execute(&db)
    .await
    .expect("globex operator");
    let globex_ops = s.login("globex", "ops@globex.test").await;

    // Acme's things, which globex must never reach.
    let sku = demo::sku_id("acme", "Kestrel Overshirt", "Washed Indigo", "M");
    let (order, line) = (Uuid::now_v7(), Uuid::now_v7());
    s.post(
        &dana,
        "/v1/orders",
        "k1",
        json!({"id": order, "customer_id": demo::customer_id("acme", "Austin Boutique")}),
    )
    .await;
    s.post(
        &dana,
        &format!("/v1/orders/{order}/lines"),
        "k2",
        json!({"id": line, "sku_id": sku, "qty_ordered": 2, "base_version": 1}),
    )
    .await;
    s.post(
        &dana,
        &format!("/v1/orders/{order}/lines/{line}/allocate"),
        "k3",
        json!({"qty": 1}),
    )
    .await;
    let r = s
        .post(
            &dana,
            &format!("/v1/orders/{order}/confirm"),
            "k4",
            json!({"base_version": 3}),
        )
        .await;
    let invoice: Uuid = r.json()["invoice_id"]
        .as_str()
        .expect("invoice")
        .parse()
        .expect("uuid");
    let (_, created) = s
        .call(
            Method::POST,
            "/v1/admin/partners",
            Some(&acme_ops),
            Some(json!({"name": "p", "url": "http://127.0.0.1:9/x", "event_types": ["*"]})),
        )
        .await;
    let partner: Uuid = created["id"].as_str().expect("id").parse().expect("uuid");
    let delivery: i64 = sqlx::query_scalar("insert into deliveries (tenant_id, outbox_id, partner_id) select tenant_id, id, $1 from outbox limit 1 returning id")
        .bind(partner).fetch_one(&db).await.expect("delivery");
    let before: Value = s.get(&format!("/v1/orders/{order}"), &dana).await.1;

    for (method, path) in routes(&s, order, line, sku, invoice, partner).await {
        let path = path.replace("/deliveries/1/", &format!("/deliveries/{delivery}/"));
        let body = body_for(&method, &path);
        // No token: 401, before anything else is looked at.
        let resp = s
            .http
            .request(method.clone(), s.url(&path))
            .header("idempotency-key", "x")
            .json(&body)
            .send()
            .await
            .expect("send");
        let (status, problem) = crate::support::read(resp).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path} without a token: {problem}"
        );

        // Another tenant's id: 404 (never 403, never the thing).
        if path.contains(&order.to_string())
            || path.contains(&sku.to_string())
            || path.contains(&invoice.to_string())
            || path.contains(&partner.to_string())
            || path.contains(&format!("/deliveries/{delivery}/"))
        {
            let token = if path.starts_with("/v1/admin") {
                &globex_ops
            } else {
                &gina
            };
            let resp = s
                .http
                .request(method.clone(), s.url(&path))
                .bearer_auth(token)
                .header("idempotency-key", Uuid::now_v7().to_string())
                .json(&body)
                .send()
                .await
                .expect("send");
            let (status, problem) = crate::support::read(resp).await;
            assert_eq!(
                status,
                StatusCode::NOT_FOUND,
                "{method} {path} across tenants: {problem}"
            );
        }
    }
    let after: Value = s.get(&format!("/v1/orders/{order}"), &dana).await.1;
    assert_eq!(before, after, "globex changed nothing of acme's");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn sign_in_guessing_is_throttled_but_never_forever(db: PgPool) {
    let mut state = AppState::new(db.clone());
    state.login_limiter = Arc::new(LoginLimiter::new(Duration::from_secs(4), 5, 1000));
    let s = TestServer::start_with(state).await;
    let wrong = json!({"tenant": "acme", "email": "dana@acme.test", "password": "guess", "device_name": "x"});
    for _ in 0..5 {
        let (status, p) = s
            .call(Method::POST, "/v1/sessions", None, Some(wrong.clone()))
            .await;
        assert_problem(status, &p, 401, "unauthorized");
    }
    let resp = s.http.post(s.url("/v1/sessions")).json(&json!({"tenant": "acme", "email": "dana@acme.test", "password": demo::DEMO_PASSWORD, "device_name": "x"})).send().await.expect("send");
    let retry_after = resp.headers().get("retry-after").cloned();
    let (status, p) = crate::support::read(resp).await;
    assert_problem(status, &p, 429, "rate_limited");
    assert!(retry_after.is_some(), "429 says when to come back");
    // Priya is not collateral damage.
    s.login("acme", "priya@acme.test").await;
    // Once the window passes, Dana gets in.
    let start = Instant::now();
    loop {
        let (status, _) = s.call(Method::POST, "/v1/sessions", None, Some(json!({"tenant": "acme", "email": "dana@acme.test", "password": demo::DEMO_PASSWORD, "device_name": "x"}))).await;
        if status == StatusCode::CREATED {
            break;
        }
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the throttle lifts"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn secrets_never_reach_the_logs(db: PgPool) {
    // The real binary against this test's database, logging at debug.
    let db_name = db
        .connect_options()
        .get_database()
        .expect("db name")
        .to_owned();
    let tmp = reachable_tempdir();
    let mut server = ServerProcess::start_with_env(
        Some(&database_url(&db_name)),
        tmp.path(),
        &["--relay-allow-private-targets"],
        &[("RUST_LOG", "debug")],
    );
    let base = server.base.clone();
    let http = reqwest::Client::new();
    let post = |path: &str, token: Option<&str>, body: Value| {
        let mut req = http.post(format!("{base}{path}")).json(&body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let mut secrets = vec![
        demo::DEMO_PASSWORD.to_owned(),
        "a-wrong-password-9".to_owned(),
    ];
    let login: Value = post("/v1/sessions", None, json!({"tenant": "acme", "email": "ops@acme.test", "password": demo::DEMO_PASSWORD, "device_name": "d"}))
        .await.expect("login").json().await.expect("json");
    let token = login["token"].as_str().expect("token").to_owned();
    post("/v1/sessions", None, json!({"tenant": "acme", "email": "ops@acme.test", "password": "a-wrong-password-9", "device_name": "d"})).await.expect("bad login");
    let inbound: Value = post(
        "/v1/admin/inbound-secrets",
        Some(&token),
        json!({"provider": "warehouse"}),
    )
    .await
    .expect("secret")
    .json()
    .await
    .expect("json");
    let partner: Value = post(
        "/v1/admin/partners",
        Some(&token),
        json!({"name": "p", "url": "http://127.0.0.1:9/x", "event_types": ["*"]}),
    )
    .await
    .expect("partner")
    .json()
    .await
    .expect("json");
    let inbound_secret = inbound["secret"].as_str().expect("s").to_owned();
    let body = json!({"type": "inventory.received", "data": {"sku_id": demo::sku_id("acme", "Swift Tee", "Ecru", "M"), "qty": 1}}).to_string();
    let ts = chrono::Utc::now().timestamp();
    let signature = holdfast_protocol::webhook::sign(
        &holdfast_protocol::webhook::parse_secret(&inbound_secret).expect("key"),
        "e1",
        ts,
        body.as_bytes(),
    );
    let resp = http
        .post(format!("{base}/v1/webhooks/acme/warehouse"))
        .header("content-type", "application/json")
        .header("webhook-id", "e1")
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", &signature)
        .body(body)
        .send()
        .await
        .expect("webhook");
    assert_eq!(resp.status(), StatusCode::OK);
    let _ = http
        .get(format!("{base}/v1/orders"))
        .bearer_auth(&token)
        .send()
        .await;
    secrets.extend([
        token.clone(),
        inbound_secret,
        partner["secret"].as_str().expect("s").to_owned(),
        signature,
    ]);

    server.signal(nix::sys::signal::Signal::SIGTERM);
    server.child.wait().expect("wait");
    // Dropped before the assertions: a failing one must not print the log
    // (and so the secret) from the drop.
    let log_path = server.log.clone();
    drop(server);
    let logs = std::fs::read_to_string(&log_path).expect("logs");
    assert!(
        logs.contains("signed in"),
        "the logs were captured: {}",
        &logs[..logs.len().min(500)]
    );
    for secret in &secrets {
        let needle = secret
            .trim_start_matches("whsec_")
            .trim_start_matches("v1,");
        assert!(
            !logs.contains(needle),
            "a secret reached the logs: {}…",
            &secret[..6.min(secret.len())]
        );
    }
}
