//! The change feed's read side: pull pages (`pull`), live pokes over one
//! shared LISTEN connection (`notify`), and compaction of superseded rows
//! (`compact`). The write side is `db::changes::record_in_tx`.

pub mod compact;
pub mod notify;
pub mod pull;

use std::sync::Arc;

use holdfast_protocol::model::ChangeKind;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use notify::{Hub, Subscription};

/// Where a desk is in its sync; an opaque pull cursor encodes one of these
/// (short field names: it travels in every URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "p")]
pub enum Position {
    /// Still paging through the current state (a first pull). `fence` is the
    /// feed fence taken when that first pull began; the feed resumes there once
    /// every kind is paged, so nothing committed meanwhile is lost (see
    /// `pull.rs`). `after` is the last id served of `kind`.
    #[serde(rename = "s")]
    Snapshot {
        #[serde(rename = "f")]
        fence: i64,
        #[serde(rename = "k")]
        kind: ChangeKind,
        #[serde(rename = "a")]
        after: Option<Uuid>,
    },
    /// In the feed: every change row at or before `(xid, id)` in feed order
    /// has been served.
    #[serde(rename = "f")]
    Feed {
        #[serde(rename = "x")]
        xid: i64,
        #[serde(rename = "i")]
        id: i64,
    },
}

/// A pull cursor: a [`Position`] in one history of the database. A restore
/// starts a new history (see the migration `feed_history`); a cursor of
/// another one is refused, never read against this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// None: cut by a build that did not name histories.
    #[serde(rename = "h", default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Uuid>,
    #[serde(flatten)]
    pub position: Position,
}

/// The database's history: its id, and whether it came from a restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct History {
    pub id: Uuid,
    pub restored: bool,
}

impl History {
    /// Whether a cursor or push naming `named` belongs to this history. One
    /// naming none predates histories: it belongs here unless this database
    /// has been restored since.
    pub fn admits(&self, named: Option<Uuid>) -> bool {
        match named {
            Some(id) => id == self.id,
            None => !self.restored,
        }
    }
}

/// Reads the database's history (one row; see the migration `feed_history`).
pub async fn history(conn: &mut sqlx::PgConnection) -> Result<History, sqlx::Error> {
    let (id, restored): (Uuid, bool) =
        sqlx::query_as("select id, restored_at is not null from feed_history")
            .fetch_one(conn)
            .await?;
    Ok(History { id, restored })
}

/// A pull failed: the database, or (never in practice) encoding a document.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The cursor was cut in another history of this database: the server
    /// has been restored from a backup since. Pull again from the start.
    #[error(
        "the cursor belongs to another history of this database (it was restored from a backup)"
    )]
    OtherHistory,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error("encoding a document: {0}")]
    Json(#[from] serde_json::Error),
}

/// The feed's background work in one server process: the shared LISTEN
/// connection with its dispatcher, and the compactor. They stop when the hub
/// is closed.
pub struct Tasks {
    handles: Vec<JoinHandle<()>>,
}

/// Starts the background work; returns once the LISTEN is in place, so no
/// commit after this returns can go unannounced.
pub async fn start(db: &PgPool, hub: &Arc<Hub>) -> Result<Tasks, sqlx::Error> {
    let mut handles = notify::start(db.clone(), hub.clone()).await?;
    handles.push(tokio::spawn(compact::run(db.clone(), hub.closed())));
    Ok(Tasks { handles })
}

/// Resolves once `closed` turns true (or its hub is gone).
pub(crate) async fn until_closed(closed: &mut tokio::sync::watch::Receiver<bool>) {
    // The guard `wait_for` returns is not Send: drop it here, not in a caller's
    // select! arm.
    let _ = closed.wait_for(|c| *c).await;
}

impl Tasks {
    /// Waits for the tasks to end (call [`Hub::close`] first).
    pub async fn join(self) {
        for handle in self.handles {
            if let Err(e) = handle.await {
                tracing::error!(error = %e, "a feed task panicked");
            }
        }
    }
}
