//! `skus`: the mirror of SKUs with their live positions (on hand, on order,
//! allocated, ATS), for SKU search and the ATS shown beside each line.

use holdfast_protocol::model::Sku;
use rusqlite::{params, OptionalExtension, Transaction};
use uuid::Uuid;

use super::{Migration, StoreError, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[
    (
        1,
        "create table skus (
        id              text primary key,
        style           text not null,
        color           text not null,
        size            text not null,
        wholesale_price integer not null,
        msrp            integer not null,
        on_hand         integer not null,
        on_order        integer not null,
        allocated       integer not null,
        ats             integer not null,
        -- The position's version from the feed: an older page never wins.
        version         integer not null,
        -- When this desk last learned the position (ms): tells whether it is
        -- newer than a rejection's ATS.
        learned_at      integer not null default 0
    );
    create index skus_style on skus (style, color, size);",
    ),
    (
        2,
        "alter table skus add column code text;
    alter table skus add column active integer not null default 1;",
    ),
];

/// Stores `s` unless the mirror already holds a newer version.
pub fn upsert(tx: &Transaction<'_>, s: &Sku, version: i64) -> StoreResult<()> {
    tx.prepare_cached(
        "insert into skus (id, style, color, size, wholesale_price, msrp, on_hand, on_order,
                           allocated, ats, version, learned_at, code, active)
         values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
         on conflict (id) do update set style = excluded.style, color = excluded.color,
                size = excluded.size, wholesale_price = excluded.wholesale_price,
                msrp = excluded.msrp, on_hand = excluded.on_hand, on_order = excluded.on_order,
                allocated = excluded.allocated, ats = excluded.ats, version = excluded.version,
                learned_at = excluded.learned_at, code = excluded.code, active = excluded.active
          where excluded.version >= skus.version",
    )?
    .execute(params![
        s.id.to_string(),
        s.style,
        s.color,
        s.size,
        s.wholesale_price,
        s.msrp,
        s.on_hand,
        s.on_order,
        s.allocated,
        s.ats,
        version,
        super::now_ms(),
        s.code,
        s.active
    ])?;
    Ok(())
}

/// An allocation or release answered with `ats_after`: the position as the
/// server left it (on hand and on order unchanged by it). The feed brings the
/// versioned document soon after; this keeps the ATS right meanwhile.
pub fn set_ats(tx: &Transaction<'_>, id: Uuid, ats_after: i64) -> StoreResult<()> {
    tx.prepare_cached(
        "update skus set ats = ?2, allocated = on_hand + on_order - ?2, learned_at = ?3
          where id = ?1",
    )?
    .execute(params![id.to_string(), ats_after, super::now_ms()])?;
    Ok(())
}

pub fn delete(tx: &Transaction<'_>, id: Uuid) -> StoreResult<()> {
    tx.prepare_cached("delete from skus where id = ?1")?
        .execute([id.to_string()])?;
    Ok(())
}

const COLUMNS: &str =
    "id, style, color, size, wholesale_price, msrp, on_hand, on_order, allocated, ats, code, active";

fn sku(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Sku, StoreError>> {
    let id: String = r.get(0)?;
    let Ok(uuid) = id.parse() else {
        return Ok(Err(StoreError::Corrupt(format!("SKU id {id:?}"))));
    };
    Ok(Ok(Sku {
        id: uuid,
        style: r.get(1)?,
        color: r.get(2)?,
        size: r.get(3)?,
        wholesale_price: r.get(4)?,
        msrp: r.get(5)?,
        on_hand: r.get(6)?,
        on_order: r.get(7)?,
        allocated: r.get(8)?,
        ats: r.get(9)?,
        code: r.get(10)?,
        active: r.get(11)?,
    }))
}

pub fn get(tx: &Transaction<'_>, id: Uuid) -> StoreResult<Option<Sku>> {
    tx.query_row(
        &format!("select {COLUMNS} from skus where id = ?1"),
        [id.to_string()],
        sku,
    )
    .optional()?
    .transpose()
}

/// SKUs whose code, style, colour or size contains each word of `q`
/// (API.md v1.1: the search matches the tenant's SKU code too).
pub fn search(tx: &Transaction<'_>, q: &str, limit: i64) -> StoreResult<Vec<Sku>> {
    let words: Vec<&str> = q.split_whitespace().collect();
    let mut sql = format!("select {COLUMNS} from skus where 1 = 1");
    for i in 0..words.len() {
        sql.push_str(&format!(
            " and (coalesce(code, '') || ' ' || style || ' ' || color || ' ' || size)
                  like '%' || ?{} || '%'",
            i + 1
        ));
    }
    sql.push_str(&format!(
        " order by style, color, size limit {}",
        limit.max(0)
    ));
    let mut stmt = tx.prepare(&sql)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(words.iter()), sku)?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter().collect()
}

/// The SKU with exactly this style, colour and size (case-insensitive).
pub fn find_exact(
    tx: &Transaction<'_>,
    style: &str,
    color: &str,
    size: &str,
) -> StoreResult<Option<Sku>> {
    tx.query_row(
        &format!(
            "select {COLUMNS} from skus where style = ?1 collate nocase and color = ?2 collate nocase
               and size = ?3 collate nocase"
        ),
        params![style, color, size],
        sku,
    )
    .optional()?
    .transpose()
}

/// The SKU's ATS and when this desk learned it (ms).
pub fn ats_learned(tx: &Transaction<'_>, id: Uuid) -> StoreResult<Option<(i64, i64)>> {
    Ok(tx
        .prepare_cached("select ats, learned_at from skus where id = ?1")?
        .query_row([id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

pub fn count(tx: &Transaction<'_>) -> StoreResult<i64> {
    Ok(tx
        .prepare_cached("select count(*) from skus")?
        .query_row([], |r| r.get(0))?)
}
