//! `GET /v1/sync/pull`: pages of current documents after a [`Position`],
//! never skipping a committed change.
//!
//! # Why the fence never skips a change
//!
//! Every change row stores `xid`, the writing transaction's id
//! (`pg_current_xact_id()`, the top-level id even inside a savepoint). Ids
//! (the `id` column and `xid` alike) are handed out when a transaction
//! writes, not when it commits, so neither is commit order: a transaction
//! that started first may commit last, and a cursor that jumped past its row
//! while it was in flight would never come back for it.
//!
//! A pull therefore serves only rows with `xid < fence`, where `fence =
//! pg_snapshot_xmin(pg_current_snapshot())` is the oldest transaction id still
//! in flight when the pull's snapshot was taken (or the next id to be
//! assigned, when none is). Two facts make the rows below the fence final:
//!
//! 1. every transaction with an id below the fence has already committed or
//!    aborted, so its rows are either visible to this snapshot or will never
//!    exist;
//! 2. every transaction that writes later is assigned an id at or above the
//!    next id, which is at or above the fence.
//!
//! So the set of rows below a fence never changes once the fence is known. The
//! feed is served in `(xid, id)` order; a cursor records the last `(xid, id)`
//! served, and after a page that reached the fence it records `(fence, 0)`
//! (every row below the fence has then been served; ids start at 1). A row not
//! yet served either lies below the fence, at a position after the cursor (the
//! pages walk that final set in order), or at or above it, which is above
//! every cursor handed out so far (no cursor goes past the fence it was cut
//! at, and fences only rise). Either way a later pull serves it.
//!
//! The fence and the rows come from one REPEATABLE READ snapshot: a fence
//! from a later snapshot than the rows could cover a transaction that
//! committed between the two, which the rows would not show.
//!
//! The cost: a long transaction anywhere in the cluster holds the fence, and
//! so every desk's view, back until it ends. Changes are late, never lost.
//!
//! # The first pull
//!
//! With no cursor the pull pages through the current state (SKUs with their
//! positions, customers, orders, invoices, each kind by id), then continues in
//! the feed from the fence taken by that first pull. Every transaction below
//! that fence had finished before the first page was read, so every later
//! page shows its effects; every transaction that finished later has its xid
//! at or above that fence, so the feed brings it. Documents changed while the
//! snapshot was paged come twice; a page always carries current documents, so
//! the repeat is harmless.
//!
//! A page carries each document once, at its version in the pull's snapshot,
//! which is at least the version of every change row it served.

use std::collections::{HashMap, HashSet};

use holdfast_protocol::model::{Change, ChangeKind};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{Cursor, FeedError, History, Position};
use crate::db;

/// The order a first pull pages through the current state: what an order
/// refers to comes before it.
const KINDS: [ChangeKind; 5] = [
    ChangeKind::Sku,
    ChangeKind::PriceList,
    ChangeKind::Customer,
    ChangeKind::Order,
    ChangeKind::Invoice,
];

/// One page of the pull.
#[derive(Debug)]
pub struct Page {
    pub changes: Vec<Change>,
    pub next: Cursor,
    /// The history the page was read in (the cursor's).
    pub history: Uuid,
    /// More is available right now: pull again with `next` at once.
    pub has_more: bool,
}

/// At most `limit` documents after `from` (`None`: from the start, the whole
/// current state first).
///
/// A cursor of another history of the database (it was restored from a
/// backup since the cursor was cut) is refused with
/// [`FeedError::OtherHistory`]: its position may lie past changes this
/// history has yet to make, which it would then skip.
pub async fn pull(
    db: &PgPool,
    tenant_id: Uuid,
    from: Option<Cursor>,
    limit: usize,
) -> Result<Page, FeedError> {
    let mut conn = db.acquire().await?;
    pull_on(&mut conn, tenant_id, from, limit).await
}

/// [`pull`] on a connection in hand: the primary's, or a hot standby's
/// (`db/reads.rs` says why the fence holds there).
pub async fn pull_on(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    from: Option<Cursor>,
    limit: usize,
) -> Result<Page, FeedError> {
    let limit = limit.max(1);
    let mut tx = db::begin_snapshot_for_tenant_on(conn, tenant_id).await?;
    let (fence, history) = fence_and_history_in_tx(&mut tx).await?;
    if let Some(cursor) = &from {
        if !history.admits(cursor.history) {
            return Err(FeedError::OtherHistory);
        }
    }
    let mut page = PageBuilder::default();
    let mut pos = from.map(|c| c.position).unwrap_or(Position::Snapshot {
        fence,
        kind: KINDS[0],
        after: None,
    });
    let has_more = loop {
        let room = limit.saturating_sub(page.len());
        if room == 0 {
            // Full; whatever follows (state or feed) is for the next page.
            break true;
        }
        match pos {
            Position::Snapshot {
                fence: start,
                kind,
                after,
            } => {
                let mut ids = snapshot_ids_in_tx(&mut tx, tenant_id, kind, after, room + 1).await?;
                if ids.len() > room {
                    ids.truncate(room);
                    pos = Position::Snapshot {
                        fence: start,
                        kind,
                        after: ids.last().copied(),
                    };
                    page.add_all(kind, ids);
                    break true;
                }
                page.add_all(kind, ids);
                pos = match KINDS.get(slot(kind) + 1) {
                    Some(next) => Position::Snapshot {
                        fence: start,
                        kind: *next,
                        after: None,
                    },
                    None => Position::Feed { xid: start, id: 0 },
                };
            }
            Position::Feed { xid, id } => {
                let mut rows =
                    feed_rows_in_tx(&mut tx, tenant_id, (xid, id), fence, room + 1).await?;
                let more = rows.len() > room;
                rows.truncate(room);
                let last = rows.last().map(|r| (r.xid, r.id)).unwrap_or((xid, id));
                // A page that reached the fence has served every row below it.
                // `max`: a cursor never moves back, even if it was cut at a
                // higher fence than this snapshot's (another server a moment
                // ahead); going back would only repeat rows.
                let (xid, id) = if more { last } else { last.max((fence, 0)) };
                pos = Position::Feed { xid, id };
                for row in rows {
                    page.add(row.kind, row.doc_id, Some(row.version));
                }
                break more;
            }
        }
    };
    let changes = page.load_in_tx(&mut tx, tenant_id).await?;
    tx.commit().await?;
    Ok(Page {
        changes,
        next: Cursor {
            history: Some(history.id),
            position: pos,
        },
        history: history.id,
        has_more,
    })
}

/// The feed fence of the transaction's snapshot (the oldest transaction id
/// still in flight, see the module docs) and the database's history, in one
/// round trip.
async fn fence_and_history_in_tx(conn: &mut PgConnection) -> Result<(i64, History), sqlx::Error> {
    let (fence, id, restored): (i64, Uuid, bool) = sqlx::query_as(
        "select pg_snapshot_xmin(pg_current_snapshot())::text::bigint, id,
                restored_at is not null
           from feed_history",
    )
    .fetch_one(conn)
    .await?;
    Ok((fence, History { id, restored }))
}

/// Ids of the next documents of `kind`, by id, for a first pull.
async fn snapshot_ids_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    kind: ChangeKind,
    after: Option<Uuid>,
    limit: usize,
) -> Result<Vec<Uuid>, sqlx::Error> {
    // Each walks its table's primary key (tenant_id, id). A SKU is listed by
    // its position row: the document is the SKU with its position.
    let sql = match kind {
        ChangeKind::Sku => {
            "select sku_id from sku_positions
              where tenant_id = $1 and ($2::uuid is null or sku_id > $2)
              order by sku_id limit $3"
        }
        ChangeKind::Customer => {
            "select id from customers
              where tenant_id = $1 and ($2::uuid is null or id > $2)
              order by id limit $3"
        }
        ChangeKind::PriceList => {
            "select id from price_lists
              where tenant_id = $1 and ($2::uuid is null or id > $2)
              order by id limit $3"
        }
        ChangeKind::Order => {
            "select id from orders
              where tenant_id = $1 and ($2::uuid is null or id > $2)
              order by id limit $3"
        }
        ChangeKind::Invoice => {
            "select id from invoices
              where tenant_id = $1 and ($2::uuid is null or id > $2)
              order by id limit $3"
        }
    };
    sqlx::query_scalar(sql)
        .bind(tenant_id)
        .bind(after)
        .bind(limit as i64)
        .fetch_all(conn)
        .await
}

struct FeedRow {
    kind: ChangeKind,
    doc_id: Uuid,
    version: i64,
    xid: i64,
    id: i64,
}

/// The next change rows after `after` in feed order, below `fence` only.
async fn feed_rows_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    after: (i64, i64),
    fence: i64,
    limit: usize,
) -> Result<Vec<FeedRow>, sqlx::Error> {
    // xid8 has no binary codec in sqlx: it travels as text, read back as bigint
    // (an epoch-extended xid stays far below 2^63). `c.` everywhere: a bare
    // `order by xid` would sort by the bigint output column and miss the index.
    let rows: Vec<(String, Uuid, i64, i64, i64)> = sqlx::query_as(
        "select c.kind, c.doc_id, c.version, c.xid::text::bigint, c.id from changes c
          where c.tenant_id = $1
            and (c.xid, c.id) > ($2::bigint::text::xid8, $3)
            and c.xid < $4::bigint::text::xid8
          order by c.xid, c.id
          limit $5",
    )
    .bind(tenant_id)
    .bind(after.0)
    .bind(after.1)
    .bind(fence)
    .bind(limit as i64)
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|(kind, doc_id, version, xid, id)| {
            let kind = parse_kind(&kind).ok_or_else(|| {
                sqlx::Error::Decode(format!("unknown change kind {kind:?}").into())
            })?;
            Ok(FeedRow {
                kind,
                doc_id,
                version,
                xid,
                id,
            })
        })
        .collect()
}

/// A kind as a number, for keys (`ChangeKind` is not `Hash`).
fn slot(kind: ChangeKind) -> usize {
    KINDS.iter().position(|k| *k == kind).unwrap_or(KINDS.len())
}

fn parse_kind(s: &str) -> Option<ChangeKind> {
    match s {
        "order" => Some(ChangeKind::Order),
        "sku" => Some(ChangeKind::Sku),
        "customer" => Some(ChangeKind::Customer),
        "invoice" => Some(ChangeKind::Invoice),
        "price_list" => Some(ChangeKind::PriceList),
        _ => None,
    }
}

/// The documents a page will carry, each once, in the order first named.
#[derive(Default)]
struct PageBuilder {
    entries: Vec<(ChangeKind, Uuid, Option<i64>)>,
    seen: HashSet<(usize, Uuid)>,
}

impl PageBuilder {
    fn len(&self) -> usize {
        self.entries.len()
    }

    /// `row_version` is the change row's, reported if the document is gone.
    fn add(&mut self, kind: ChangeKind, id: Uuid, row_version: Option<i64>) {
        if self.seen.insert((slot(kind), id)) {
            self.entries.push((kind, id, row_version));
        }
    }

    fn add_all(&mut self, kind: ChangeKind, ids: Vec<Uuid>) {
        for id in ids {
            self.add(kind, id, None);
        }
    }

    /// Loads every named document, one batch per kind.
    async fn load_in_tx(
        self,
        conn: &mut PgConnection,
        tenant_id: Uuid,
    ) -> Result<Vec<Change>, FeedError> {
        let mut docs: HashMap<(usize, Uuid), Versioned> = HashMap::new();
        for kind in KINDS {
            let ids: Vec<Uuid> = self
                .entries
                .iter()
                .filter(|(k, _, _)| *k == kind)
                .map(|(_, id, _)| *id)
                .collect();
            if !ids.is_empty() {
                for (id, versioned) in load_kind_in_tx(conn, tenant_id, kind, &ids).await? {
                    docs.insert((slot(kind), id), versioned);
                }
            }
        }
        Ok(self
            .entries
            .into_iter()
            .filter_map(
                |(kind, id, row_version)| match docs.remove(&(slot(kind), id)) {
                    Some((version, data)) => Some(Change {
                        kind,
                        id,
                        version,
                        data: Some(data),
                    }),
                    // Nothing deletes documents today; if something does, the desk
                    // learns it from `data: null`.
                    None => row_version.map(|version| Change {
                        kind,
                        id,
                        version,
                        data: None,
                    }),
                },
            )
            .collect())
    }
}

/// A document's version and its wire form.
type Versioned = (i64, serde_json::Value);

/// Current documents of one kind with their versions (a SKU's is its
/// position's, which every change of the SKU bumps).
async fn load_kind_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    kind: ChangeKind,
    ids: &[Uuid],
) -> Result<Vec<(Uuid, Versioned)>, FeedError> {
    fn encode<T: Serialize>(
        docs: Vec<T>,
        id: impl Fn(&T) -> Uuid,
        versions: &HashMap<Uuid, i64>,
    ) -> Result<Vec<(Uuid, Versioned)>, FeedError> {
        docs.into_iter()
            .filter_map(|doc| {
                let id = id(&doc);
                let version = *versions.get(&id)?;
                Some(serde_json::to_value(&doc).map(|v| (id, (version, v))))
            })
            .collect::<Result<_, _>>()
            .map_err(FeedError::from)
    }
    match kind {
        ChangeKind::Order => {
            let orders = db::orders::load_many(conn, tenant_id, ids).await?;
            let versions = orders.iter().map(|o| (o.id, o.version)).collect();
            encode(orders, |o| o.id, &versions)
        }
        ChangeKind::Sku => {
            let skus = db::skus::load_many(conn, tenant_id, ids).await?;
            let versions = versions_in_tx(
                conn,
                "select sku_id, version from sku_positions where tenant_id = $1 and sku_id = any($2)",
                tenant_id,
                ids,
            )
            .await?;
            encode(skus, |s| s.id, &versions)
        }
        ChangeKind::PriceList => {
            let lists = db::price_lists::load_many(conn, tenant_id, ids).await?;
            let versions = versions_in_tx(
                conn,
                "select id, version from price_lists where tenant_id = $1 and id = any($2)",
                tenant_id,
                ids,
            )
            .await?;
            encode(lists, |l| l.id, &versions)
        }
        ChangeKind::Customer => {
            let customers = db::customers::load_many(conn, tenant_id, ids).await?;
            let versions = versions_in_tx(
                conn,
                "select id, version from customers where tenant_id = $1 and id = any($2)",
                tenant_id,
                ids,
            )
            .await?;
            encode(customers, |c| c.id, &versions)
        }
        ChangeKind::Invoice => {
            let invoices = db::invoices::load_many(conn, tenant_id, ids).await?;
            let versions = versions_in_tx(
                conn,
                "select id, version from invoices where tenant_id = $1 and id = any($2)",
                tenant_id,
                ids,
            )
            .await?;
            encode(invoices, |i| i.id, &versions)
        }
    }
}

/// The version column of documents whose wire shape does not carry it.
async fn versions_in_tx(
    conn: &mut PgConnection,
    sql: &'static str,
    tenant_id: Uuid,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, i64>, sqlx::Error> {
    let rows: Vec<(Uuid, i64)> = sqlx::query_as(sql)
        .bind(tenant_id)
        .bind(ids)
        .fetch_all(conn)
        .await?;
    Ok(rows.into_iter().collect())
}
