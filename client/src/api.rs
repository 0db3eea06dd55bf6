//! The HTTP side: API.md's sessions, batch push, pull and stream over
//! reqwest, with every failure sorted into "try again later" (network, 5xx,
//! 429) or "the server said no" (a problem document).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holdfast_protocol::backoff::parse_retry_after;
use holdfast_protocol::model::{
    DeadLetteredOrders, LoginRequest, LoginResponse, OrderHistory, PushItem, PushRequest,
    PushResponse,
};
use holdfast_protocol::problem::{Problem, ProblemCode};
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No answer: refused, reset, timed out, cut mid-body.
    #[error("cannot reach the server: {0}")]
    Network(String),
    /// An answer that is not a success.
    #[error("the server answered {status}: {detail}")]
    Status {
        status: u16,
        problem: Option<Box<Problem>>,
        retry_after: Option<Duration>,
        detail: String,
    },
    /// A success whose body is not what API.md says.
    #[error("the server's answer could not be read: {0}")]
    Decode(String),
}

impl ApiError {
    /// Worth retrying later with the same request.
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Network(_) => true,
            ApiError::Status { status, .. } => *status >= 500 || *status == 429 || *status == 408,
            // A cut or garbled body is a network fault as far as we can tell.
            ApiError::Decode(_) => true,
        }
    }

    pub fn is_unauthorized(&self) -> bool {
        matches!(self, ApiError::Status { status: 401, .. })
    }

    /// 410 `server_restored`: the server was restored from a backup since
    /// the desk last pulled (see `crate::sync`).
    pub fn is_server_restored(&self) -> bool {
        matches!(self, ApiError::Status { status: 410, problem: Some(p), .. }
            if p.code == ProblemCode::ServerRestored)
    }

    /// Whether the server could not be reached at all (vs. answered badly).
    pub fn is_offline(&self) -> bool {
        matches!(self, ApiError::Network(_))
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

fn network(e: reqwest::Error) -> ApiError {
    // The chain says why (refused, reset, timed out); the URL carries no
    // secret, the token travels in a header.
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    ApiError::Network(msg)
}

/// One change of the pull feed. `kind` stays a string so a kind added to the
/// API later is skipped, not a reason to stop syncing.
#[derive(Debug, Clone, Deserialize)]
pub struct RawChange {
    pub kind: String,
    pub id: Uuid,
    pub version: i64,
    pub data: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PullPage {
    pub changes: Vec<RawChange>,
    pub cursor: String,
    pub has_more: bool,
    /// The server database's history (absent from servers that predate it).
    #[serde(default)]
    pub history: Option<String>,
}

/// Timeouts for the HTTP client.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    /// A whole request and its answer (not the stream).
    pub request: Duration,
    /// Silence on the stream longer than this means it is dead (API.md: a
    /// comment at least every 15 s).
    pub stream_idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(30),
            // Two and a half of the server's 10 s heartbeats: a silently
            // dropped network is noticed within half a minute.
            stream_idle: Duration::from_secs(25),
        }
    }
}

/// The order of the server's latest answer and the latest loss of the live
/// stream, so a pass that finishes late can tell whether its success still
/// says anything about now. One per engine, shared by its API clients.
#[derive(Debug, Default)]
pub(crate) struct Reachability {
    clock: AtomicU64,
    last_answer: AtomicU64,
    last_loss: AtomicU64,
}

impl Reachability {
    /// The server answered a request with success.
    pub(crate) fn answered(&self) {
        let now = self.clock.fetch_add(1, Ordering::SeqCst) + 1;
        self.last_answer.fetch_max(now, Ordering::SeqCst);
    }

    /// The live stream broke or could not be opened.
    pub(crate) fn lost(&self) {
        let now = self.clock.fetch_add(1, Ordering::SeqCst) + 1;
        self.last_loss.fetch_max(now, Ordering::SeqCst);
    }

    /// Whether the server has answered since the stream was last lost.
    pub(crate) fn answered_since_loss(&self) -> bool {
        self.last_answer.load(Ordering::SeqCst) > self.last_loss.load(Ordering::SeqCst)
    }
}

/// The HTTP clients an [`Api`] sends through: one for requests, one for the
/// live stream (no whole-request timeout there). Building one loads the
/// platform's root certificates and starts an empty connection pool, so an
/// engine builds its transport once and every [`Api`] it makes shares it
/// (cheap to clone): a sync pass reuses the previous pass's connections
/// instead of re-reading every root certificate and connecting again.
#[derive(Clone)]
pub(crate) struct Transport {
    http: reqwest::Client,
    stream_http: reqwest::Client,
}

impl Transport {
    pub(crate) fn new(t: Timeouts) -> Result<Transport, ApiError> {
        let http = reqwest::Client::builder()
            .connect_timeout(t.connect)
            .timeout(t.request)
            .build()
            .map_err(network)?;
        let stream_http = reqwest::Client::builder()
            .connect_timeout(t.connect)
            .read_timeout(t.stream_idle)
            .build()
            .map_err(network)?;
        Ok(Transport { http, stream_http })
    }
}

#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    stream_http: reqwest::Client,
    base: String,
    token: Option<String>,
    reachability: Arc<Reachability>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Api {
    /// A client with HTTP clients of its own (an engine shares one set
    /// among all the clients it makes: `Transport`).
    pub fn new(base: &str, token: Option<String>, t: Timeouts) -> Result<Api, ApiError> {
        Ok(Api::over(Transport::new(t)?, base, token))
    }

    /// A client sending through `transport`.
    pub(crate) fn over(transport: Transport, base: &str, token: Option<String>) -> Api {
        Api {
            http: transport.http,
            stream_http: transport.stream_http,
            base: base.trim_end_matches('/').to_owned(),
            token,
            reachability: Arc::default(),
        }
    }

    /// Records this client's successful answers in the engine's record.
    pub(crate) fn reporting_to(mut self, reachability: Arc<Reachability>) -> Api {
        self.reachability = reachability;
        self
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The bearer token this client sends (to tell whose 401 it was).
    pub(crate) fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<(StatusCode, Vec<u8>), ApiError> {
        let resp = req.send().await.map_err(network)?;
        let status = resp.status();
        let headers = resp.headers().clone();
        // A body cut mid-way is a network fault: the request may have run.
        let bytes = resp.bytes().await.map_err(network)?.to_vec();
        if status.is_success() {
            self.reachability.answered();
            return Ok((status, bytes));
        }
        Err(status_error(status, &headers, &bytes))
    }

    fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
        serde_json::from_slice(bytes).map_err(|e| ApiError::Decode(e.to_string()))
    }

    /// `POST /v1/sessions`.
    pub async fn login(&self, req: &LoginRequest) -> Result<LoginResponse, ApiError> {
        let (_, bytes) = self
            .send(self.request(Method::POST, "/v1/sessions").json(req))
            .await?;
        Self::decode(&bytes)
    }

    /// `DELETE /v1/sessions/current`.
    pub async fn logout(&self) -> Result<(), ApiError> {
        self.send(self.request(Method::DELETE, "/v1/sessions/current"))
            .await?;
        Ok(())
    }

    /// `POST /v1/sync/push`, naming the server history of the desk's last
    /// pull (a restored server then refuses it whole: 410 `server_restored`).
    pub async fn push(
        &self,
        items: Vec<PushItem>,
        history: Option<&str>,
    ) -> Result<PushResponse, ApiError> {
        let body = PushRequest { mutations: items };
        let mut req = self.request(Method::POST, "/v1/sync/push").json(&body);
        if let Some(history) = history {
            req = req.header("holdfast-history", history);
        }
        let (_, bytes) = self.send(req).await?;
        Self::decode(&bytes)
    }

    /// `GET /v1/sync/pull`.
    pub async fn pull(&self, cursor: Option<&str>, limit: u32) -> Result<PullPage, ApiError> {
        let mut url = reqwest::Url::parse(&format!("{}/v1/sync/pull", self.base))
            .map_err(|e| ApiError::Network(format!("bad server URL: {e}")))?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("limit", &limit.to_string());
            if let Some(c) = cursor {
                q.append_pair("cursor", c);
            }
        }
        let mut req = self.http.get(url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let (_, bytes) = self.send(req).await?;
        Self::decode(&bytes)
    }

    /// `GET /v1/orders/{id}/history` (API.md v1.1): every version of the
    /// order as the server recorded it, oldest first, with what became of
    /// the partner events each produced.
    pub async fn order_history(&self, order_id: Uuid) -> Result<OrderHistory, ApiError> {
        let path = format!("/v1/orders/{order_id}/history");
        let (_, bytes) = self.send(self.request(Method::GET, &path)).await?;
        Self::decode(&bytes)
    }

    /// `GET /v1/orders/dead-lettered`: the tenant's orders with a partner
    /// delivery dead-lettered now. `timeout` bounds this request alone: the
    /// sync pass that asks must not wait long for an answer it can do without.
    pub async fn dead_lettered_orders(
        &self,
        timeout: Duration,
    ) -> Result<DeadLetteredOrders, ApiError> {
        let req = self
            .request(Method::GET, "/v1/orders/dead-lettered")
            .timeout(timeout);
        let (_, bytes) = self.send(req).await?;
        Self::decode(&bytes)
    }

    /// `GET /v1/sync/stream`: the open response, to be read as it arrives.
    pub async fn stream(&self) -> Result<reqwest::Response, ApiError> {
        let mut req = self
            .stream_http
            .get(format!("{}/v1/sync/stream", self.base))
            .header("accept", "text/event-stream");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(network)?;
        let status = resp.status();
        if status.is_success() {
            self.reachability.answered();
            return Ok(resp);
        }
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.map_err(network)?;
        Err(status_error(status, &headers, &bytes))
    }
}

fn status_error(status: StatusCode, headers: &HeaderMap, bytes: &[u8]) -> ApiError {
    let problem: Option<Problem> = serde_json::from_slice(bytes).ok();
    let retry_after = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, chrono::Utc::now()));
    let detail = problem
        .as_ref()
        .map(|p| format!("{} ({})", p.detail.as_deref().unwrap_or(&p.title), p.code))
        .unwrap_or_else(|| String::from_utf8_lossy(bytes).chars().take(200).collect());
    ApiError::Status {
        status: status.as_u16(),
        problem: problem.map(Box::new),
        retry_after,
        detail,
    }
}

/// Reads Server-Sent Events from a byte stream: yields the `event:` name and
/// `data:` of each complete event; comments (heartbeats) yield nothing.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

impl SseParser {
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buf.push_str(&String::from_utf8_lossy(chunk));
        // Normalise line ends so "\r\n\r\n" and "\n\n" both end an event.
        if self.buf.contains('\r') {
            self.buf = self.buf.replace("\r\n", "\n").replace('\r', "\n");
        }
        let mut out = Vec::new();
        while let Some(end) = self.buf.find("\n\n") {
            let block: String = self.buf.drain(..end + 2).collect();
            let mut event = String::from("message");
            let mut data = Vec::new();
            let mut any = false;
            for line in block.lines() {
                if line.starts_with(':') || line.is_empty() {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "event" => {
                        event = value.to_owned();
                        any = true;
                    }
                    "data" => {
                        data.push(value.to_owned());
                        any = true;
                    }
                    _ => {}
                }
            }
            if any {
                out.push(SseEvent {
                    event,
                    data: data.join("\n"),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_across_chunks_and_comments() {
        let mut p = SseParser::default();
        assert!(p.feed(b": subscribed\n\nevent: chan").is_empty());
        let events = p.feed(
            b"ged\ndata: {\"cursor\":\"a\"}\n\n: keep-alive\n\nevent: changed\r\ndata: x\r\n\r\n",
        );
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: "changed".into(),
                    data: "{\"cursor\":\"a\"}".into()
                },
                SseEvent {
                    event: "changed".into(),
                    data: "x".into()
                }
            ]
        );
    }
}
