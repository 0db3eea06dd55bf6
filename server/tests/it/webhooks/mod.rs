//! Webhooks both ways over real HTTP and real Postgres: the inbox for
//! providers, and the relay delivering to in-process partners that verify
//! every signature.

mod inbound;
mod refusals;
mod relay;
mod relay_proofs;

use holdfast_protocol::webhook;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::TestServer;

/// The one number a `select count(*) …` returns.
async fn count(db: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(db).await.expect("count")
}

/// The Standard Webhooks headers for `body`, signed with `secret`.
fn signed(secret: &str, id: &str, timestamp: i64, body: &str) -> Vec<(&'static str, String)> {
    let key = webhook::parse_secret(secret).expect("secret");
    vec![
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        (
            "webhook-signature",
            webhook::sign(&key, id, timestamp, body.as_bytes()),
        ),
        ("content-type", "application/json".to_owned()),
    ]
}

async fn send_inbound(
    s: &TestServer,
    tenant: &str,
    provider: &str,
    headers: Vec<(&'static str, String)>,
    body: &str,
) -> (StatusCode, Value) {
    let mut req = s
        .http
        .post(s.url(&format!("/v1/webhooks/{tenant}/{provider}")))
        .body(body.to_owned());
    for (name, value) in headers {
        req = req.header(name, value);
    }
    crate::support::read(req.send().await.expect("send")).await
}

async fn inbound_secret(s: &TestServer, ops: &str, provider: &str) -> String {
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/admin/inbound-secrets",
            Some(ops),
            Some(json!({"provider": provider})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["secret"].as_str().expect("secret").to_owned()
}
