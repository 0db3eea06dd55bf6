//! `customers`: the mirror of the tenant's customers (name, credit limit),
//! for the customer picker and for naming customers offline.

use holdfast_protocol::model::Customer;
use rusqlite::{params, OptionalExtension, Transaction};
use uuid::Uuid;

use super::{Migration, StoreError, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[
    (
        1,
        "create table customers (
        id           text primary key,
        name         text not null,
        credit_limit integer,
        version      integer not null
    );
    create index customers_name on customers (name);",
    ),
    (
        2,
        "alter table customers add column price_list_id text;
    alter table customers add column email text;
    alter table customers add column phone text;
    alter table customers add column active integer not null default 1;",
    ),
];

/// Stores `c` unless the mirror already holds a newer version.
pub fn upsert(tx: &Transaction<'_>, c: &Customer, version: i64) -> StoreResult<()> {
    tx.prepare_cached(
        "insert into customers (id, name, credit_limit, version, price_list_id, email, phone, active)
         values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         on conflict (id) do update set name = excluded.name, credit_limit = excluded.credit_limit,
                version = excluded.version, price_list_id = excluded.price_list_id,
                email = excluded.email, phone = excluded.phone, active = excluded.active
          where excluded.version >= customers.version",
    )?
    .execute(params![
        c.id.to_string(),
        c.name,
        c.credit_limit,
        version,
        c.price_list_id.map(|p| p.to_string()),
        c.email,
        c.phone,
        c.active
    ])?;
    Ok(())
}

pub fn delete(tx: &Transaction<'_>, id: Uuid) -> StoreResult<()> {
    tx.prepare_cached("delete from customers where id = ?1")?
        .execute([id.to_string()])?;
    Ok(())
}

const COLUMNS: &str = "id, name, credit_limit, price_list_id, email, phone, active";

type Row = (
    String,
    String,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
    bool,
);

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
    ))
}

fn customer(
    (id, name, credit_limit, price_list, email, phone, active): Row,
) -> StoreResult<Customer> {
    Ok(Customer {
        id: id
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("customer id {id:?}")))?,
        name,
        credit_limit,
        price_list_id: price_list
            .map(|p| {
                p.parse()
                    .map_err(|_| StoreError::Corrupt(format!("price list id {p:?}")))
            })
            .transpose()?,
        email,
        phone,
        active,
    })
}

pub fn list(tx: &Transaction<'_>) -> StoreResult<Vec<Customer>> {
    let mut stmt = tx.prepare(&format!(
        "select {COLUMNS} from customers order by name, id"
    ))?;
    let rows = stmt.query_map([], row)?.collect::<Result<Vec<_>, _>>()?;
    rows.into_iter().map(customer).collect()
}

pub fn get(tx: &Transaction<'_>, id: Uuid) -> StoreResult<Option<Customer>> {
    tx.prepare_cached(&format!("select {COLUMNS} from customers where id = ?1"))?
        .query_row([id.to_string()], row)
        .optional()?
        .map(customer)
        .transpose()
}

/// Customers whose name contains `text` (case-insensitive, ASCII).
pub fn find(tx: &Transaction<'_>, text: &str) -> StoreResult<Vec<Customer>> {
    let mut stmt = tx.prepare(&format!(
        "select {COLUMNS} from customers
          where name like '%' || ?1 || '%' order by name, id"
    ))?;
    let rows = stmt
        .query_map([text], row)?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter().map(customer).collect()
}
