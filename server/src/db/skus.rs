//! SKUs with their positions: lookup and search with keyset paging.

use holdfast_protocol::model::Sku;
use sqlx::PgConnection;
use uuid::Uuid;

#[derive(sqlx::FromRow)]
struct SkuRow {
    id: Uuid,
    code: Option<String>,
    active: bool,
    style: String,
    color: String,
    size: String,
    wholesale_price: i64,
    msrp: i64,
    on_hand: i64,
    on_order: i64,
    allocated: i64,
}

impl From<SkuRow> for Sku {
    fn from(r: SkuRow) -> Self {
        Sku {
            ats: r.on_hand + r.on_order - r.allocated,
            id: r.id,
            code: r.code,
            active: r.active,
            style: r.style,
            color: r.color,
            size: r.size,
            wholesale_price: r.wholesale_price,
            msrp: r.msrp,
            on_hand: r.on_hand,
            on_order: r.on_order,
            allocated: r.allocated,
        }
    }
}

const SKU_COLUMNS: &str = "
    s.id, s.code, s.active, s.style, s.color, s.size, s.wholesale_price, s.msrp, p.on_hand, p.on_order, p.allocated
    from skus s join sku_positions p on p.tenant_id = s.tenant_id and p.sku_id = s.id";

pub async fn load(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Option<Sku>, sqlx::Error> {
    let row: Option<SkuRow> = sqlx::query_as(&format!(
        "select {SKU_COLUMNS} where s.tenant_id = $1 and s.id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Sku::from))
}

/// Several SKUs by id, in no particular order (the pull feed's pages); ids
/// that are not the tenant's SKUs are left out.
pub async fn load_many(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    ids: &[Uuid],
) -> Result<Vec<Sku>, sqlx::Error> {
    let rows: Vec<SkuRow> = sqlx::query_as(&format!(
        "select {SKU_COLUMNS} where s.tenant_id = $1 and s.id = any($2)"
    ))
    .bind(tenant_id)
    .bind(ids)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(Sku::from).collect())
}

/// The sort key of a SKU, unique per tenant (the catalogue's unique index), so
/// it is a complete keyset cursor.
pub type SkuKey = (String, String, String);

/// SKUs ordered by style, colour, size. Every word of `q` must match the
/// code, style, colour or size (case-insensitive substring), so "kestrel indigo m"
/// narrows to the size-M Washed Indigo Kestrel shirts.
pub async fn search(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    q: Option<&str>,
    after: Option<&SkuKey>,
    limit: i64,
) -> Result<Vec<Sku>, sqlx::Error> {
    let words: Vec<String> = q
        .unwrap_or("")
        .split_whitespace()
        .map(|w| format!("%{}%", escape_like(&w.to_lowercase())))
        .collect();
    let (a_style, a_color, a_size) = match after {
        Some((s, c, z)) => (Some(s.as_str()), Some(c.as_str()), Some(z.as_str())),
        None => (None, None, None),
    };
    let rows: Vec<SkuRow> = sqlx::query_as(&format!(
        "select {SKU_COLUMNS}
          where s.tenant_id = $1
            and not exists (
                select 1 from unnest($2::text[]) as w(pattern)
                 where not (lower(s.style) like w.pattern or lower(s.color) like w.pattern
                            or lower(s.size) like w.pattern
                            or coalesce(lower(s.code), '') like w.pattern))
            and ($3::text is null or (s.style, s.color, s.size) > ($3, $4, $5))
          order by s.style, s.color, s.size
          limit $6"
    ))
    .bind(tenant_id)
    .bind(&words)
    .bind(a_style)
    .bind(a_color)
    .bind(a_size)
    .bind(limit)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(Sku::from).collect())
}

/// `%`, `_` and `\` in a search word match themselves.
fn escape_like(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    for c in word.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn like_wildcards_are_escaped() {
        assert_eq!(super::escape_like("50%_a\\b"), "50\\%\\_a\\\\b");
    }
}
