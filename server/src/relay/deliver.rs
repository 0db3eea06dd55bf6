//! One attempt at one partner: sign per Standard Webhooks, POST, classify.

use std::time::Duration;

use chrono::{DateTime, Utc};
use holdfast_protocol::webhook;

use super::claim::Claimed;

/// How an attempt ended.
#[derive(Debug)]
pub enum Attempt {
    Delivered(u16),
    /// The partner asked us to stop sending (410).
    Gone,
    /// Anything else: retry later (after `retry_after` if the partner said).
    Failed {
        status: Option<u16>,
        error: String,
        retry_after: Option<Duration>,
    },
}

/// `webhook-id`: stable per event across every retry and every partner.
pub fn event_id(outbox_id: i64) -> String {
    format!("evt_{outbox_id}")
}

/// The keys a partner's events are signed with at one moment: its secret,
/// and the previous one while a rotation's overlap lasts.
#[derive(Debug, Clone, Copy)]
pub struct Keys<'a> {
    pub secret: &'a str,
    pub previous: Option<&'a str>,
    pub previous_until: Option<DateTime<Utc>>,
}

impl Claimed {
    pub fn keys(&self) -> Keys<'_> {
        Keys {
            secret: &self.secret,
            previous: self.previous_secret.as_deref(),
            previous_until: self.previous_secret_expires_at,
        }
    }
}

/// The `webhook-signature` value: the current secret's signature, plus the
/// previous secret's while its rotation grace lasts, so a partner can switch
/// keys at its own pace.
pub fn signatures(
    keys: &Keys<'_>,
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<String, webhook::WebhookError> {
    let mut sigs = vec![webhook::sign(
        &webhook::parse_secret(keys.secret)?,
        msg_id,
        timestamp,
        body,
    )];
    if let (Some(previous), Some(until)) = (keys.previous, keys.previous_until) {
        if until > Utc::now() {
            sigs.push(webhook::sign(
                &webhook::parse_secret(previous)?,
                msg_id,
                timestamp,
                body,
            ));
        }
    }
    Ok(sigs.join(" "))
}

/// The HTTP client every request to a partner goes through: no redirects
/// (a partner cannot bounce us into our own network), no proxy, the
/// relay's timeout, and the resolver that refuses internal addresses
/// unless they are allowed ([`super::egress::SafeResolver`]).
pub fn client(timeout: Duration, allow_private: bool) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .no_proxy()
        .dns_resolver(std::sync::Arc::new(super::egress::SafeResolver {
            allow_private,
        }))
        .user_agent(concat!("holdfast-relay/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Why a request to a partner got no answer.
#[derive(Debug)]
pub enum SendError {
    /// The URL was refused before anything was sent.
    Egress(super::egress::EgressError),
    /// The partner's stored secret does not parse.
    Secret(webhook::WebhookError),
    /// Sent, or tried to be, with no answer: `timeout` when none came in time.
    Request { timeout: bool, message: String },
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Egress(e) => write!(f, "{e}"),
            SendError::Secret(e) => write!(f, "partner secret unusable: {e}"),
            SendError::Request {
                timeout: true,
                message,
            } => write!(f, "no answer in time: {message}"),
            SendError::Request {
                timeout: false,
                message,
            } => write!(f, "request failed: {message}"),
        }
    }
}

/// Vets `url`, signs `body` as event `msg_id` with `keys` (Standard
/// Webhooks headers, and `Idempotency-Key` equal to the id) and POSTs it:
/// the one way anything reaches a partner, the relay's attempts and the
/// operator's test event alike.
pub async fn send(
    client: &reqwest::Client,
    url: &str,
    keys: &Keys<'_>,
    allow_private: bool,
    msg_id: &str,
    body: Vec<u8>,
) -> Result<reqwest::Response, SendError> {
    // Literal-IP URLs never reach the resolver, which vets host names.
    let url = super::egress::vet_target(url, allow_private).map_err(SendError::Egress)?;
    let timestamp = Utc::now().timestamp();
    let signature = signatures(keys, msg_id, timestamp, &body).map_err(SendError::Secret)?;
    client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", msg_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .header("idempotency-key", msg_id)
        .body(body)
        .send()
        .await
        .map_err(|e| SendError::Request {
            timeout: e.is_timeout(),
            message: error_chain(&e),
        })
}

pub async fn attempt(client: &reqwest::Client, d: &Claimed, allow_private: bool) -> Attempt {
    let msg_id = event_id(d.outbox_id);
    let body = d.payload.as_bytes().to_vec();
    let response = match send(client, &d.url, &d.keys(), allow_private, &msg_id, body).await {
        Ok(r) => r,
        Err(e) => {
            return Attempt::Failed {
                status: None,
                error: e.to_string(),
                retry_after: None,
            }
        }
    };
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        return Attempt::Delivered(status);
    }
    if status == 410 {
        return Attempt::Gone;
    }
    let retry_after = if status == 429 || status == 503 {
        response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| holdfast_protocol::backoff::parse_retry_after(v, Utc::now()))
    } else {
        None
    };
    // A little of the partner's answer helps the operator at 2 a.m.
    let text = response.text().await.unwrap_or_default();
    let snippet: String = text.chars().take(200).collect();
    Attempt::Failed {
        status: Some(status),
        error: format!("HTTP {status}: {snippet}"),
        retry_after,
    }
}

pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
