//! One attempt at one partner: sign per Standard Webhooks, POST, classify.

use std::time::Duration;

use chrono::Utc;
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

/// The `webhook-signature` value: the current secret's signature, plus the
/// previous secret's while its rotation grace lasts, so a partner can switch
/// keys at its own pace.
pub fn signatures(
    d: &Claimed,
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<String, webhook::WebhookError> {
    let mut sigs = vec![webhook::sign(
        &webhook::parse_secret(&d.secret)?,
        msg_id,
        timestamp,
        body,
    )];
    if let (Some(previous), Some(until)) = (&d.previous_secret, d.previous_secret_expires_at) {
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

pub async fn attempt(client: &reqwest::Client, d: &Claimed, allow_private: bool) -> Attempt {
    // Literal-IP URLs never reach the resolver; vet every URL here too.
    if let Err(e) = super::egress::check_url(&d.url, allow_private).await {
        return Attempt::Failed {
            status: None,
            error: e.to_string(),
            retry_after: None,
        };
    }
    let msg_id = event_id(d.outbox_id);
    let timestamp = Utc::now().timestamp();
    let body = d.payload.as_bytes().to_vec();
    let signature = match signatures(d, &msg_id, timestamp, &body) {
        Ok(s) => s,
        Err(e) => {
            return Attempt::Failed {
                status: None,
                error: format!("partner secret unusable: {e}"),
                retry_after: None,
            }
        }
    };
    let sent = client
        .post(&d.url)
        .header("content-type", "application/json")
        .header("webhook-id", &msg_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .header("idempotency-key", &msg_id)
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) => {
            let what = if e.is_timeout() {
                "no answer in time"
            } else {
                "request failed"
            };
            return Attempt::Failed {
                status: None,
                error: format!("{what}: {}", error_chain(&e)),
                retry_after: None,
            };
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

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
