//! Writing a plan set-wise, a chunk of rows per statement: the SKUs, their
//! change rows and their `sku.updated` events, with the hot `sku_positions`
//! rows of changed SKUs last (see "Hot rows" in `catalog`'s module doc).

use holdfast_protocol::admin::ImportSummary;
use holdfast_protocol::event::EventType;
use holdfast_protocol::problem::FieldError;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Plan, Stored};
use crate::db::changes::{record_many_in_tx, DocKind};
use crate::db::outbox::{enqueue_many_in_tx, Aggregate, Event};
use crate::error::Error;

/// Rows per statement: large enough that 100,000 rows are a few dozen
/// statements, small enough that one statement's arrays stay a few MB.
const CHUNK: usize = 10_000;

/// Writes a plan: new SKUs with their empty positions, changed catalog
/// fields, and for each SKU created or changed its change row and its
/// `sku.updated` event, all in the caller's transaction. The positions of
/// changed SKUs are locked last (see `catalog`'s module doc).
pub async fn apply_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    plan: &Plan,
) -> Result<ImportSummary, Error> {
    for chunk in plan.creates.chunks(CHUNK) {
        let cols = Columns::of(chunk.iter());
        sqlx::query(
            "insert into skus (tenant_id, id, code, style, color, size, wholesale_price, msrp, active)
             select $1, * from unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],
                                      $7::int8[], $8::int8[], $9::bool[])",
        )
        .bind(tenant_id)
        .bind(&cols.ids)
        .bind(&cols.codes)
        .bind(&cols.styles)
        .bind(&cols.colors)
        .bind(&cols.sizes)
        .bind(&cols.wholesale)
        .bind(&cols.msrp)
        .bind(&cols.active)
        .execute(&mut *conn)
        .await
        .map_err(raced)?;
        // A new SKU's position: nothing on hand, version 1, and its first
        // event (the sku.updated below) is sequence 1.
        sqlx::query(
            "insert into sku_positions (tenant_id, sku_id, event_seq)
             select $1, unnest($2::uuid[]), 1",
        )
        .bind(tenant_id)
        .bind(&cols.ids)
        .execute(&mut *conn)
        .await?;
        let docs: Vec<(Uuid, i64)> = cols.ids.iter().map(|id| (*id, 1)).collect();
        record_many_in_tx(conn, tenant_id, DocKind::Sku, &docs).await?;
        let events = chunk
            .iter()
            .map(|s| Event {
                aggregate: Aggregate::Sku(s.id),
                sequence: 1,
                version: 1,
                facts: s.facts("created", &[]),
            })
            .collect();
        enqueue_many_in_tx(conn, tenant_id, EventType::SkuUpdated, events).await?;
    }

    for chunk in plan.updates.chunks(CHUNK) {
        let cols = Columns::of(chunk.iter().map(|(s, _)| s));
        sqlx::query(
            "update skus s
                set code = u.code, style = u.style, color = u.color, size = u.size,
                    wholesale_price = u.wholesale_price, msrp = u.msrp, active = u.active,
                    updated_at = now()
               from unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],
                           $7::int8[], $8::int8[], $9::bool[])
                    as u(id, code, style, color, size, wholesale_price, msrp, active)
              where s.tenant_id = $1 and s.id = u.id",
        )
        .bind(tenant_id)
        .bind(&cols.ids)
        .bind(&cols.codes)
        .bind(&cols.styles)
        .bind(&cols.colors)
        .bind(&cols.sizes)
        .bind(&cols.wholesale)
        .bind(&cols.msrp)
        .bind(&cols.active)
        .execute(&mut *conn)
        .await
        .map_err(raced)?;
    }

    if !plan.updates.is_empty() {
        announce_updates_in_tx(conn, tenant_id, &plan.updates).await?;
    }
    Ok(plan.summary())
}

/// The changed SKUs' feed versions and `sku.updated` events. Their sequence
/// lives on the hot `sku_positions` row, so the events are staged first —
/// their facts serialised, sent and parsed while no hot row is locked — and
/// one last statement locks the positions in ascending id order, bumps them,
/// and writes the change rows and the events from what it bumped. An
/// allocation of one of these SKUs waits for that statement and the commit
/// only (item 11 of docs/BENCHMARKS.md measures the wait).
///
/// The payload is `db::outbox`'s shape, built in SQL because the sequence
/// and version are only known under the lock.
async fn announce_updates_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    updates: &[(Stored, Vec<&'static str>)],
) -> Result<(), Error> {
    sqlx::query(
        "create temporary table if not exists staged_sku_events
             (sku_id uuid primary key, facts jsonb not null) on commit drop",
    )
    .execute(&mut *conn)
    .await?;
    for chunk in updates.chunks(CHUNK) {
        let ids: Vec<Uuid> = chunk.iter().map(|(s, _)| s.id).collect();
        let facts: Vec<Value> = chunk
            .iter()
            .map(|(after, changed)| after.facts("updated", changed))
            .collect();
        sqlx::query(
            "insert into staged_sku_events (sku_id, facts)
             select * from unnest($1::uuid[], $2::jsonb[])",
        )
        .bind(&ids)
        .bind(&facts)
        .execute(&mut *conn)
        .await?;
    }
    let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    sqlx::query(
        "with locked as (
             select sku_id from sku_positions
              where tenant_id = $1 and sku_id in (select sku_id from staged_sku_events)
              order by sku_id for update),
         bumped as (
             update sku_positions p
                set version = p.version + 1, event_seq = p.event_seq + 1
               from locked
              where p.tenant_id = $1 and p.sku_id = locked.sku_id
             returning p.sku_id, p.version, p.event_seq),
         feed as (
             insert into changes (tenant_id, kind, doc_id, version)
             select $1, $2, sku_id, version from bumped)
         insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
         select $1, $3, $2, b.sku_id, b.event_seq,
                jsonb_build_object('type', $3::text, 'timestamp', $4::text,
                    'data', s.facts || jsonb_build_object('tenant_id', $1::uuid, 'sku_id', b.sku_id,
                                                          'sequence', b.event_seq, 'version', b.version))
           from bumped b join staged_sku_events s on s.sku_id = b.sku_id
          order by b.sku_id",
    )
    .bind(tenant_id)
    .bind(DocKind::Sku.as_str())
    .bind(EventType::SkuUpdated.as_str())
    .bind(&timestamp)
    .execute(&mut *conn)
    .await?;
    sqlx::query("truncate staged_sku_events")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A plan's SKUs as one array per column, for `unnest`.
#[derive(Default)]
struct Columns {
    ids: Vec<Uuid>,
    codes: Vec<Option<String>>,
    styles: Vec<String>,
    colors: Vec<String>,
    sizes: Vec<String>,
    wholesale: Vec<i64>,
    msrp: Vec<i64>,
    active: Vec<bool>,
}

impl Columns {
    fn of<'a>(skus: impl Iterator<Item = &'a Stored>) -> Columns {
        let mut c = Columns::default();
        for s in skus {
            c.ids.push(s.id);
            c.codes.push(s.code.clone());
            c.styles.push(s.style.clone());
            c.colors.push(s.color.clone());
            c.sizes.push(s.size.clone());
            c.wholesale.push(s.wholesale_price);
            c.msrp.push(s.msrp);
            c.active.push(s.active);
        }
        c
    }
}

/// A unique violation here means another import or edit took a code or a
/// style/colour/size between our plan and our write: nothing is applied
/// (the transaction rolls back) and sending the file again decides afresh.
fn raced(e: sqlx::Error) -> Error {
    match &e {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") => crate::master::rejected_file(vec![
            FieldError {
                field: "file".into(),
                message: "the catalog changed while this file was being applied; nothing was applied, send it again".into(),
            },
        ]),
        _ => e.into(),
    }
}
