//! `price_lists` and `price_list_entries`: the mirror of the tenant's price
//! lists from the pull feed (kind `price_list`), so the desk knows what a
//! customer pays for a SKU before the server has priced a line
//! ([`expected_price`]).

use holdfast_protocol::model::PriceList;
use rusqlite::{params, OptionalExtension, Transaction};
use uuid::Uuid;

use super::{Migration, StoreResult};

pub(super) const MIGRATIONS: &[Migration] = &[(
    2,
    "create table price_lists (
        id      text primary key,
        name    text not null,
        -- The list's version from the feed: an older page never wins.
        version integer not null
    );
    create table price_list_entries (
        price_list_id text not null references price_lists (id) on delete cascade,
        sku_id        text not null,
        price         integer not null,
        primary key (price_list_id, sku_id)
    );",
)];

/// Stores `list` (replacing its entries) unless the mirror already holds a
/// newer version. Returns whether it was stored.
pub fn upsert(tx: &Transaction<'_>, list: &PriceList, version: i64) -> StoreResult<bool> {
    let stored: Option<i64> = tx
        .prepare_cached("select version from price_lists where id = ?1")?
        .query_row([list.id.to_string()], |r| r.get(0))
        .optional()?;
    if stored.is_some_and(|v| v > version) {
        return Ok(false);
    }
    tx.prepare_cached(
        "insert into price_lists (id, name, version) values (?1, ?2, ?3)
         on conflict (id) do update set name = excluded.name, version = excluded.version",
    )?
    .execute(params![list.id.to_string(), list.name, version])?;
    tx.prepare_cached("delete from price_list_entries where price_list_id = ?1")?
        .execute([list.id.to_string()])?;
    let mut insert = tx.prepare_cached(
        "insert into price_list_entries (price_list_id, sku_id, price) values (?1, ?2, ?3)
         on conflict (price_list_id, sku_id) do update set price = excluded.price",
    )?;
    for p in &list.prices {
        insert.execute(params![list.id.to_string(), p.sku_id.to_string(), p.price])?;
    }
    Ok(true)
}

pub fn delete(tx: &Transaction<'_>, id: Uuid) -> StoreResult<()> {
    tx.prepare_cached("delete from price_lists where id = ?1")?
        .execute([id.to_string()])?;
    Ok(())
}

/// What the server will charge `customer` per unit of `sku` on a line added
/// now, as far as this desk knows: the customer's price list entry for the
/// SKU, else the SKU's wholesale price (the server's rule, API.md v1.1).
/// `None` when the SKU is not mirrored.
pub fn expected_price(tx: &Transaction<'_>, customer: Uuid, sku: Uuid) -> StoreResult<Option<i64>> {
    Ok(tx
        .prepare_cached(
            "select coalesce(e.price, s.wholesale_price)
               from skus s
               left join customers c on c.id = ?1
               left join price_list_entries e
                      on e.price_list_id = c.price_list_id and e.sku_id = s.id
              where s.id = ?2",
        )?
        .query_row(params![customer.to_string(), sku.to_string()], |r| r.get(0))
        .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{customers, skus, Store};
    use holdfast_protocol::model::{Customer, Price, Sku};

    fn sku(id: Uuid, wholesale: i64) -> Sku {
        Sku {
            id,
            code: Some("KO-WI-M".into()),
            style: "Kestrel Overshirt".into(),
            color: "Washed Indigo".into(),
            size: "M".into(),
            wholesale_price: wholesale,
            msrp: wholesale * 2,
            on_hand: 6,
            on_order: 0,
            allocated: 0,
            ats: 6,
            active: true,
        }
    }

    fn customer(id: Uuid, list: Option<Uuid>) -> Customer {
        Customer {
            id,
            name: "Tokyo Distributor".into(),
            credit_limit: None,
            price_list_id: list,
            email: None,
            phone: None,
            active: true,
        }
    }

    #[test]
    fn a_listed_sku_costs_the_list_price_and_others_wholesale() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("desk.db")).expect("open");
        let (listed, other, list) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let (on_list, off_list, unknown) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        store
            .write(|tx| {
                skus::upsert(tx, &sku(listed, 4_800), 1)?;
                skus::upsert(tx, &sku(other, 3_900), 1)?;
                customers::upsert(tx, &customer(on_list, Some(list)), 1)?;
                customers::upsert(tx, &customer(off_list, None), 1)?;
                let doc = PriceList {
                    id: list,
                    name: "Distributors".into(),
                    prices: vec![Price {
                        sku_id: listed,
                        price: 4_200,
                    }],
                };
                assert!(upsert(tx, &doc, 3)?);
                // An older page of the feed never wins.
                let old = PriceList {
                    prices: vec![],
                    ..doc.clone()
                };
                assert!(!upsert(tx, &old, 2)?);
                Ok(())
            })
            .expect("seed");
        let price = |c, s| store.read(|tx| expected_price(tx, c, s)).expect("price");
        assert_eq!(price(on_list, listed), Some(4_200), "the list's price");
        assert_eq!(price(on_list, other), Some(3_900), "not listed: wholesale");
        assert_eq!(price(off_list, listed), Some(4_800), "no list: wholesale");
        assert_eq!(price(unknown, listed), Some(4_800), "customer not mirrored");
        assert_eq!(price(on_list, Uuid::now_v7()), None, "SKU not mirrored");
        store.write(|tx| delete(tx, list)).expect("delete");
        assert_eq!(price(on_list, listed), Some(4_800), "list gone: wholesale");
    }
}
