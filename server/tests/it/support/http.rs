//! HTTP with a hang check: every request must answer within [`HANG_BOUND`],
//! whatever state the server or its database is in.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// A request that has not answered within this is hung and fails the test.
/// A hang check, not a speed requirement: with the server's 3 s pool
/// acquire timeout an answer comes well within it.
pub const HANG_BOUND: Duration = Duration::from_secs(10);

/// An answer: status, the headers a desk acts on, and the JSON body (Null
/// if none).
pub struct Answer {
    pub status: StatusCode,
    pub retry_after: Option<String>,
    pub replayed: bool,
    pub body: Value,
}

/// One request; fails the test if it does not answer within [`HANG_BOUND`]
/// or if the connection fails (the server must stay up and answer).
pub async fn send(
    http: &reqwest::Client,
    method: Method,
    url: &str,
    token: Option<&str>,
    key: Option<&str>,
    body: Option<&Value>,
) -> Answer {
    let mut req = http.request(method.clone(), url);
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(key) = key {
        req = req.header("idempotency-key", key);
    }
    if let Some(body) = body {
        req = req.json(body);
    }
    let started = Instant::now();
    let answered = tokio::time::timeout(HANG_BOUND, async {
        let resp = req.send().await?;
        let status = resp.status();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let retry_after = header("retry-after");
        let replayed = header("idempotent-replayed").as_deref() == Some("true");
        let bytes = resp.bytes().await?;
        Ok::<_, reqwest::Error>(Answer {
            status,
            retry_after,
            replayed,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        })
    })
    .await;
    match answered {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => panic!("{method} {url}: the server did not answer: {e}"),
        Err(_) => panic!(
            "{method} {url}: hung for {:?} (bound {HANG_BOUND:?})",
            started.elapsed()
        ),
    }
}

/// A 503 must be the API's problem, with a Retry-After to honour.
pub fn assert_unavailable(a: &Answer, what: &str) {
    assert_eq!(
        a.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{what}: {}",
        a.body
    );
    assert_eq!(a.body["code"], "service_unavailable", "{what}: {}", a.body);
    assert_eq!(a.body["status"], 503, "{what}");
    assert!(a.retry_after.is_some(), "{what}: 503 without Retry-After");
}

pub async fn readyz(http: &reqwest::Client, base: &str) -> StatusCode {
    send(
        http,
        Method::GET,
        &format!("{base}/readyz"),
        None,
        None,
        None,
    )
    .await
    .status
}

/// Polls `/readyz` until it answers `want`, failing past `within`.
pub async fn wait_ready(http: &reqwest::Client, base: &str, want: StatusCode, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if readyz(http, base).await == want {
            return;
        }
        assert!(Instant::now() < deadline, "/readyz never answered {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Signs in as `email` of acme with the demo password; the bearer token.
pub async fn login(http: &reqwest::Client, base: &str, email: &str) -> String {
    let body = json!({"tenant": "acme", "email": email,
                      "password": holdfast_server::demo::DEMO_PASSWORD, "device_name": "ops test"});
    let a = send(
        http,
        Method::POST,
        &format!("{base}/v1/sessions"),
        None,
        None,
        Some(&body),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "login: {}", a.body);
    a.body["token"].as_str().expect("token").to_owned()
}
