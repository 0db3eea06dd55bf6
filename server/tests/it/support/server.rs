//! The real server in this process on 127.0.0.1:0 over a fresh database
//! (from `#[sqlx::test]`), seeded with the demo fixture, driven over real
//! HTTP.

use holdfast_server::{demo, AppState};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use sqlx::PgPool;
use tokio::sync::oneshot;

pub struct TestServer {
    pub base: String,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
}

impl TestServer {
    pub async fn start(db: PgPool) -> TestServer {
        let state = AppState::new(db);
        Self::start_with(state).await
    }

    /// Starts over a prepared state (e.g. one allowing loopback partners).
    pub async fn start_with(state: AppState) -> TestServer {
        demo::seed(&state.db).await.expect("seed demo data");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            holdfast_server::run(state, listener, async {
                let _ = stopped.await;
            })
            .await
            .expect("server run");
        });
        TestServer {
            base,
            http: reqwest::Client::new(),
            stop: Some(stop),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Signs in with the demo password and returns the bearer token.
    pub async fn login(&self, tenant: &str, email: &str) -> String {
        let (status, body) = self
            .call(
                Method::POST,
                "/v1/sessions",
                None,
                Some(serde_json::json!({
                    "tenant": tenant, "email": email,
                    "password": demo::DEMO_PASSWORD, "device_name": "test desk"
                })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "login {email}: {body}");
        body["token"].as_str().expect("token").to_owned()
    }

    /// One JSON request; returns the status and the parsed body (Null if empty).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, self.url(path));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("request");
        read(resp).await
    }

    pub async fn get(&self, path: &str, token: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, Some(token), None).await
    }

    /// `POST /v1/sync/push` with these items as `mutations`.
    pub async fn push(&self, token: &str, items: Value) -> (StatusCode, Value) {
        self.call(
            Method::POST,
            "/v1/sync/push",
            Some(token),
            Some(serde_json::json!({ "mutations": items })),
        )
        .await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Status and JSON body; asserts that every error is problem+json.
pub async fn read(resp: reqwest::Response) -> (StatusCode, Value) {
    let status = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let bytes = resp.bytes().await.expect("body");
    if status.is_client_error() || status.is_server_error() {
        assert_eq!(
            content_type, "application/problem+json",
            "error {status} without a problem body"
        );
    }
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    (status, body)
}

/// Asserts a problem answer: status, code, and the RFC 9457 members.
pub fn assert_problem(status: StatusCode, body: &Value, want_status: u16, want_code: &str) {
    assert_eq!(status.as_u16(), want_status, "body: {body}");
    assert_eq!(body["code"], want_code, "body: {body}");
    assert_eq!(body["status"], want_status, "body: {body}");
    assert_eq!(body["type"], "about:blank");
    assert!(body["title"].is_string());
}

/// A raw answer: status, headers and the exact body bytes.
pub struct Raw {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub bytes: Vec<u8>,
}

impl Raw {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }

    pub fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
    }
}

impl TestServer {
    /// A mutation with an Idempotency-Key, answered raw.
    pub async fn mutate(
        &self,
        token: &str,
        method: Method,
        path: &str,
        key: &str,
        body: &Value,
    ) -> Raw {
        let resp = self
            .http
            .request(method, self.url(path))
            .bearer_auth(token)
            .header("idempotency-key", key)
            .json(body)
            .send()
            .await
            .expect("request");
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.expect("body").to_vec();
        Raw {
            status,
            headers,
            bytes,
        }
    }

    pub async fn post(&self, token: &str, path: &str, key: &str, body: Value) -> Raw {
        self.mutate(token, Method::POST, path, key, &body).await
    }
}
