//! Partners: in-process HTTP receivers on loopback that verify every
//! Standard Webhooks signature and remember what they accepted, with a
//! behaviour the scenario switches (healthy, failing, stalling past the
//! relay's timeout, dead for good).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use holdfast_protocol::webhook;
use serde_json::Value;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How a partner answers right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Healthy,
    /// Answers this status (a 5xx: the relay retries).
    Failing(u16),
    /// Holds each request this long before accepting it; longer than the
    /// relay's timeout, so the relay gives up and retries.
    Stalling(Duration),
}

/// One accepted event (2xx answered, signature verified).
#[derive(Debug, Clone)]
pub struct Accepted {
    pub body: String,
    /// How many times it was accepted (more than once: a redelivery, e.g.
    /// the relay died before recording the first).
    pub times: u32,
    /// A later delivery under the same webhook-id carried another body.
    pub body_changed: bool,
}

#[derive(Default)]
struct Book {
    secret: Option<Vec<u8>>,
    accepted: HashMap<String, Accepted>,
    /// Every attempt that reached us, by outcome.
    attempts: u64,
    /// Distinct webhook-ids among the verified attempts.
    ids: std::collections::HashSet<String>,
    refused: u64,
    unverified: u64,
}

struct Inner {
    name: String,
    book: Mutex<Book>,
    behaviour: Mutex<Behaviour>,
    /// Poked after every accepted event.
    accepted: Notify,
}

/// A running partner. Cheap to clone.
#[derive(Clone)]
pub struct Partner {
    inner: Arc<Inner>,
    url: String,
    task: Arc<JoinHandle<()>>,
}

impl Partner {
    pub async fn start(name: &str, behaviour: Behaviour) -> std::io::Result<Partner> {
        let inner = Arc::new(Inner {
            name: name.to_owned(),
            book: Mutex::default(),
            behaviour: Mutex::new(behaviour),
            accepted: Notify::new(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let app = axum::Router::new()
            .route("/hook", post(receive))
            .with_state(inner.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "partner receiver stopped");
            }
        });
        Ok(Partner {
            inner,
            url: format!("http://{addr}/hook"),
            task: Arc::new(task),
        })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The `whsec_…` secret the server gave at registration.
    pub fn set_secret(&self, secret: &str) -> anyhow::Result<()> {
        let key = webhook::parse_secret(secret)?;
        self.inner
            .book
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .secret = Some(key);
        Ok(())
    }

    pub fn behave(&self, b: Behaviour) {
        *self
            .inner
            .behaviour
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = b;
    }

    pub fn behaviour(&self) -> Behaviour {
        *self
            .inner
            .behaviour
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Accepted events by webhook-id.
    pub fn accepted(&self) -> HashMap<String, Accepted> {
        self.inner
            .book
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .accepted
            .clone()
    }

    /// (attempts, refused with a failure status, failed verification)
    pub fn counts(&self) -> (u64, u64, u64) {
        let b = self.inner.book.lock().unwrap_or_else(|p| p.into_inner());
        (b.attempts, b.refused, b.unverified)
    }

    /// Attempts beyond the first for each event: retries after a failure
    /// or a stall, and redeliveries of what was already accepted.
    pub fn redeliveries(&self) -> u64 {
        let b = self.inner.book.lock().unwrap_or_else(|p| p.into_inner());
        b.attempts - b.unverified - b.ids.len() as u64
    }

    /// Resolves after the next accepted event. Create it before checking.
    pub fn next_accepted(&self) -> Notified<'_> {
        self.inner.accepted.notified()
    }
}

impl Drop for Partner {
    fn drop(&mut self) {
        if Arc::strong_count(&self.task) == 1 {
            self.task.abort();
        }
    }
}

async fn receive(State(p): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let id = h("webhook-id");
    let secret = {
        let mut book = p.book.lock().unwrap_or_else(|e| e.into_inner());
        book.attempts += 1;
        book.secret.clone().unwrap_or_default()
    };
    let verified = !secret.is_empty()
        && webhook::verify(
            &[&secret],
            &id,
            &h("webhook-timestamp"),
            &h("webhook-signature"),
            &body,
            chrono::Utc::now().timestamp(),
            300,
        )
        .is_ok()
        && h("idempotency-key") == id
        && serde_json::from_slice::<Value>(&body).is_ok();
    if !verified {
        p.book.lock().unwrap_or_else(|e| e.into_inner()).unverified += 1;
        return StatusCode::UNAUTHORIZED;
    }
    p.book
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .ids
        .insert(id.clone());
    let behaviour = *p.behaviour.lock().unwrap_or_else(|e| e.into_inner());
    match behaviour {
        Behaviour::Healthy => {}
        Behaviour::Failing(code) => {
            p.book.lock().unwrap_or_else(|e| e.into_inner()).refused += 1;
            return StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        }
        Behaviour::Stalling(d) => {
            // The injected fault: a partner that answers too late.
            tokio::time::sleep(d).await;
        }
    }
    {
        let mut book = p.book.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&body).into_owned();
        book.accepted
            .entry(id)
            .and_modify(|a| {
                a.times += 1;
                a.body_changed |= a.body != text;
            })
            .or_insert_with(|| Accepted {
                body: text.clone(),
                times: 1,
                body_changed: false,
            });
    }
    p.accepted.notify_waiters();
    StatusCode::OK
}
