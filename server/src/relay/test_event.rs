//! "Send test event": one signed `holdfast.test` event to one partner, sent
//! while the operator waits, so they see at once whether the partner's
//! endpoint is up and verifies our signature.
//!
//! It is sent exactly like a real delivery ([`super::deliver::send`]: the
//! same egress check, client, headers and signatures, the previous secret's
//! too while a rotation overlaps) but it never enters the outbox: it is not
//! a business event, no other partner may ever receive it, and a partner
//! that fails it is not retried or dead-lettered, the operator just sees
//! the answer. Its `webhook-id` is `evt_test_<random>`, which no real event
//! (`evt_<outbox id>`) can ever be. It goes to the partner whatever its
//! subscriptions, and while it is paused too: checking that an endpoint is
//! back is what a test before re-enabling is for.

use std::time::Instant;

use chrono::Utc;
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use super::deliver::{self, Keys, SendError};
use crate::db::partners::Signing;

/// The test event's `type`.
pub const EVENT_TYPE: &str = "holdfast.test";

/// How much of the partner's answer is kept (characters).
pub const BODY_CHARS: usize = 200;

/// What the partner answered, or why it did not.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct TestResult {
    /// The `webhook-id` the event was sent with (`evt_test_…`).
    pub webhook_id: String,
    /// The partner's HTTP status, when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// From sending to the partner's answer (or to giving up).
    pub latency_ms: u64,
    /// The first characters of the partner's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Why there was no answer: refused before sending (an internal
    /// address, a bad URL), no connection, or no answer in time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A test event's id: `evt_test_` and 128 random bits.
pub fn webhook_id() -> String {
    format!("evt_test_{}", Uuid::new_v4().simple())
}

/// The body, in the envelope real events have (`{"type", "timestamp",
/// "data"}`, `data` carrying `tenant_id`).
pub fn payload(tenant_id: Uuid, partner_name: &str, sent_by: &str) -> serde_json::Value {
    json!({
        "type": EVENT_TYPE,
        "timestamp": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": {
            "tenant_id": tenant_id,
            "partner": partner_name,
            "sent_by": sent_by,
        },
    })
}

/// Sends one test event to `partner` and reads the first characters of its
/// answer.
pub async fn send(
    client: &reqwest::Client,
    partner: &Signing,
    allow_private: bool,
    tenant_id: Uuid,
    sent_by: &str,
) -> TestResult {
    let webhook_id = webhook_id();
    let body = payload(tenant_id, &partner.name, sent_by).to_string();
    let keys = Keys {
        secret: &partner.secret,
        previous: partner.previous_secret.as_deref(),
        previous_until: partner.previous_secret_expires_at,
    };
    let started = Instant::now();
    let sent = deliver::send(
        client,
        &partner.url,
        &keys,
        allow_private,
        &webhook_id,
        body.into_bytes(),
    )
    .await;
    let elapsed =
        |started: Instant| u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match sent {
        Ok(response) => {
            let latency_ms = elapsed(started);
            let status = response.status().as_u16();
            let body = first_chars(response, BODY_CHARS).await;
            TestResult {
                webhook_id,
                status: Some(status),
                latency_ms,
                body: Some(body),
                error: None,
            }
        }
        Err(e) => TestResult {
            webhook_id,
            status: None,
            latency_ms: elapsed(started),
            body: None,
            error: Some(in_words(&e)),
        },
    }
}

/// A failure as the operator reads it.
fn in_words(e: &SendError) -> String {
    match e {
        SendError::Egress(e) => format!("not sent: {e}"),
        SendError::Secret(e) => format!("not sent: the partner's secret is unusable ({e})"),
        SendError::Request {
            timeout: true,
            message,
        } => format!("no answer in time (timed out): {message}"),
        SendError::Request {
            timeout: false,
            message,
        } => {
            let lower = message.to_lowercase();
            let why = if lower.contains("internal address") {
                "refused by the egress check"
            } else if lower.contains("connection refused") {
                "nothing accepts connections at that address and port"
            } else if lower.contains("dns") || lower.contains("lookup") || lower.contains("resolve")
            {
                "the host name does not resolve"
            } else if lower.contains("certificate") || lower.contains("tls") {
                "the TLS handshake failed"
            } else {
                "the request could not be sent"
            };
            format!("no connection: {why} ({message})")
        }
    }
}

/// The first `chars` characters of an answer's body, reading no more of it
/// than that needs (a partner may answer with megabytes).
async fn first_chars(mut response: reqwest::Response, chars: usize) -> String {
    // A UTF-8 character is at most 4 bytes.
    let enough = chars * 4;
    let mut bytes = Vec::new();
    while bytes.len() < enough {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    String::from_utf8_lossy(&bytes)
        .chars()
        .take(chars)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_ids_cannot_be_real_ones() {
        let id = webhook_id();
        assert!(id.starts_with("evt_test_"), "{id}");
        assert_eq!(id.len(), "evt_test_".len() + 32);
        // Real ids are `evt_` and digits.
        assert!(!id["evt_".len()..].chars().all(|c| c.is_ascii_digit()));
        assert_ne!(id, webhook_id());
    }

    #[test]
    fn failures_read_as_words() {
        let refused = SendError::Request {
            timeout: false,
            message: "tcp connect error: Connection refused (os error 111)".into(),
        };
        assert!(in_words(&refused)
            .starts_with("no connection: nothing accepts connections at that address and port"));
        let slow = SendError::Request {
            timeout: true,
            message: "operation timed out".into(),
        };
        assert!(in_words(&slow).starts_with("no answer in time (timed out)"));
    }

    #[test]
    fn the_body_is_an_event_envelope() {
        let tenant = Uuid::from_u128(7);
        let body = payload(tenant, "EDI <gateway>", "Olive Ops");
        assert_eq!(body["type"], "holdfast.test");
        assert!(body["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
        assert_eq!(body["data"]["partner"], "EDI <gateway>");
        assert_eq!(body["data"]["sent_by"], "Olive Ops");
        assert_eq!(body["data"]["tenant_id"], tenant.to_string());
    }
}
