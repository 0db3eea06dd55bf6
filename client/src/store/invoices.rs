//! `invoices`: the mirror of pro-forma invoices (created by confirming an
//! order; paid by the payment provider's webhook).

use holdfast_protocol::model::{Invoice, InvoiceStatus};
use rusqlite::{params, OptionalExtension, Transaction};
use uuid::Uuid;

use super::{from_json, to_json, Migration, StoreError, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[
    (
        1,
        "create table invoices (
        id       text primary key,
        order_id text not null,
        amount   integer not null,
        -- awaiting_payment | paid, as on the wire.
        status   text not null,
        paid_at  text,
        version  integer not null
    );
    create index invoices_order on invoices (order_id);",
    ),
    (
        5,
        // What was paid so far (servers from issue 15 on report partial and
        // over-payments). Invoices mirrored as paid before were paid in full.
        "alter table invoices add column amount_paid integer not null default 0;
    update invoices set amount_paid = amount where status = 'paid';",
    ),
];

pub fn upsert(tx: &Transaction<'_>, i: &Invoice, version: i64) -> StoreResult<()> {
    let status: String = from_json(&to_json(&i.status)?)?;
    tx.prepare_cached(
        "insert into invoices (id, order_id, amount, status, paid_at, version, amount_paid)
         values (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         on conflict (id) do update set order_id = excluded.order_id, amount = excluded.amount,
                status = excluded.status, paid_at = excluded.paid_at, version = excluded.version,
                amount_paid = excluded.amount_paid
          where excluded.version >= invoices.version",
    )?
    .execute(params![
        i.id.to_string(),
        i.order_id.to_string(),
        i.amount,
        status,
        i.paid_at.map(|t| t.to_rfc3339()),
        version,
        i.amount_paid
    ])?;
    Ok(())
}

pub fn delete(tx: &Transaction<'_>, id: Uuid) -> StoreResult<()> {
    tx.prepare_cached("delete from invoices where id = ?1")?
        .execute([id.to_string()])?;
    Ok(())
}

pub fn get(tx: &Transaction<'_>, id: Uuid) -> StoreResult<Option<Invoice>> {
    let row = tx
        .prepare_cached(
            "select id, order_id, amount, status, paid_at, amount_paid from invoices where id = ?1",
        )?
        .query_row([id.to_string()], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })
        .optional()?;
    let Some((id, order_id, amount, status, paid_at, amount_paid)) = row else {
        return Ok(None);
    };
    let bad = |what: &str| StoreError::Corrupt(format!("invoice {id}: {what}"));
    let status: InvoiceStatus = from_json(&to_json(&status)?)?;
    Ok(Some(Invoice {
        id: id.parse().map_err(|_| bad("id"))?,
        order_id: order_id.parse().map_err(|_| bad("order id"))?,
        amount,
        status,
        paid_at: paid_at
            .map(|t| chrono::DateTime::parse_from_rfc3339(&t).map(|t| t.to_utc()))
            .transpose()
            .map_err(|_| bad("paid_at"))?,
        amount_paid,
    }))
}
