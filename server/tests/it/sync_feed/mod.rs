//! The pull feed and the live stream over real HTTP and real Postgres: no
//! change skipped when transactions commit out of order, a paging reader
//! converging under concurrent writers, pokes for the right tenant only, one
//! LISTEN connection however many desks, compaction.

use std::collections::HashMap;
use std::time::Duration;

use holdfast_server::db::changes::{record_in_tx, DocKind};
use holdfast_server::demo;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::{PgPool, Postgres, Transaction};
use tokio::time::Instant;
use uuid::Uuid;

mod pull;
mod stream;

use crate::support::{key, TestServer};

/// How long a test waits for something that should happen at once before it
/// calls it a failure. Not a performance claim: a failure deadline.
const PATIENCE: Duration = Duration::from_secs(30);

/// A desk's mirror: every document it has pulled, and its cursor.
#[derive(Default)]
pub(crate) struct Mirror {
    docs: HashMap<(String, String), (i64, Value)>,
    cursor: Option<String>,
    pulls: usize,
}

impl Mirror {
    /// One pull, applied. Asserts the page's shape and that no document ever
    /// goes back to an older version.
    pub(crate) async fn pull(&mut self, s: &TestServer, token: &str, limit: usize) -> Value {
        let path = match &self.cursor {
            Some(c) => format!("/v1/sync/pull?limit={limit}&cursor={c}"),
            None => format!("/v1/sync/pull?limit={limit}"),
        };
        let (status, page) = s.get(&path, token).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let changes = page["changes"].as_array().expect("changes");
        assert!(changes.len() <= limit, "page over its limit");
        for c in changes {
            let kind = c["kind"].as_str().expect("kind").to_owned();
            let id = c["id"].as_str().expect("id").to_owned();
            let version = c["version"].as_i64().expect("version");
            if let Some((seen, _)) = self.docs.get(&(kind.clone(), id.clone())) {
                assert!(
                    version >= *seen,
                    "{kind} {id} went back from {seen} to {version}"
                );
            }
            self.docs.insert((kind, id), (version, c["data"].clone()));
        }
        assert!(page["has_more"].is_boolean());
        self.cursor = Some(page["cursor"].as_str().expect("cursor").to_owned());
        self.pulls += 1;
        page
    }

    /// Pulls until the server says there is no more right now.
    pub(crate) async fn catch_up(&mut self, s: &TestServer, token: &str, limit: usize) {
        while self.pull(s, token, limit).await["has_more"] == json!(true) {}
    }

    /// What a desk does with a mutation's answer: keeps the document it
    /// carries unless the mirror already holds a newer version.
    pub(crate) fn upsert_answer(&mut self, kind: &str, doc: &Value) {
        let id = doc["id"].as_str().expect("id").to_owned();
        let version = doc["version"].as_i64().expect("version");
        let key = (kind.to_owned(), id);
        if self.docs.get(&key).is_none_or(|(seen, _)| *seen <= version) {
            self.docs.insert(key, (version, doc.clone()));
        }
    }

    pub(crate) fn get(&self, kind: &str, id: Uuid) -> Option<&(i64, Value)> {
        self.docs.get(&(kind.to_owned(), id.to_string()))
    }

    fn ids(&self, kind: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .docs
            .keys()
            .filter(|(k, _)| k == kind)
            .map(|(_, id)| id.clone())
            .collect();
        ids.sort();
        ids
    }
}

pub(crate) async fn create_order(
    s: &TestServer,
    token: &str,
    tenant: &str,
    customer: &str,
) -> Uuid {
    let id = Uuid::now_v7();
    let r = s
        .post(
            token,
            "/v1/orders",
            &key(),
            json!({"id": id, "customer_id": demo::customer_id(tenant, customer)}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    id
}

/// Edits an order's notes exactly as the engine would (version + 1 and its
/// change row, one transaction) and leaves the transaction open. Returns it
/// with its xid and the new version.
pub(crate) async fn edit_in_open_tx(
    db: &PgPool,
    tenant: Uuid,
    order: Uuid,
    notes: &str,
) -> (Transaction<'static, Postgres>, i64, i64) {
    let mut tx = db.begin().await.expect("begin");
    let version: i64 = sqlx::query_scalar(
        "update orders set notes = $3, version = version + 1, updated_at = now()
          where tenant_id = $1 and id = $2 returning version",
    )
    .bind(tenant)
    .bind(order)
    .bind(notes)
    .fetch_one(&mut *tx)
    .await
    .expect("update order");
    record_in_tx(&mut tx, tenant, DocKind::Order, order, version)
        .await
        .expect("change row");
    let xid: i64 = sqlx::query_scalar("select pg_current_xact_id()::text::bigint")
        .fetch_one(&mut *tx)
        .await
        .expect("xid");
    (tx, xid, version)
}

/// Waits until every transaction that wrote before now has finished anywhere
/// in the cluster, so a pull's fence has passed all of them. Before a desk's
/// first pull in a test that asserts a later pull is empty: another test's
/// transaction may hold the fence below this test's seed or creations, and
/// the feed would then bring those documents again once it lets go (the
/// first pull's documented repeat).
async fn wait_until_settled(db: &PgPool) {
    let now: i64 = sqlx::query_scalar("select pg_current_xact_id()::text::bigint")
        .fetch_one(db)
        .await
        .expect("xid");
    wait_for_fence_past(db, now).await;
}

/// Waits until no transaction at or below `xid` is in flight anywhere in the
/// cluster, i.e. until a pull's fence has passed it. Other tests' databases
/// share the cluster, and their transactions hold the fence too.
async fn wait_for_fence_past(db: &PgPool, xid: i64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let fence: i64 =
            sqlx::query_scalar("select pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
                .fetch_one(db)
                .await
                .expect("fence");
        if fence > xid {
            return;
        }
        assert!(Instant::now() < deadline, "the fence never passed {xid}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
