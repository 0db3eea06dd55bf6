//! Customers (API.md v1.1): create, edit (a deactivated customer takes no
//! new orders; its open orders keep working), and the CSV import
//! `name,credit_limit,price_list,email,phone`, upserted by name.
//!
//! Every created or changed customer bumps its version and its event
//! sequence, writes its change row (desks see it on their next pull) and its
//! `customer.updated` event, set-wise, in the caller's transaction. A write
//! that changes nothing writes nothing.

use std::collections::HashMap;

use holdfast_protocol::admin::{CreateCustomer, ImportSummary, PatchCustomer};
use holdfast_protocol::event::EventType;
use holdfast_protocol::model::Customer;
use holdfast_protocol::problem::FieldError;
use serde_json::{json, Value};
use sqlx::PgConnection;
use uuid::Uuid;

use super::sheet::{self, error, Layout};
use crate::db::changes::{record_many_in_tx, DocKind};
use crate::db::outbox::{enqueue_many_in_tx, Aggregate, Event};
use crate::engine::Done;
use crate::error::Error;

const MAX_NAME: usize = 200;
const MAX_EMAIL: usize = 320;
const MAX_PHONE: usize = 50;

/// What is wrong with a customer's fields, by field name; empty when fine.
fn check(c: &Customer) -> Vec<(&'static str, String)> {
    let mut wrong = Vec::new();
    if c.name.trim().is_empty() || c.name.chars().count() > MAX_NAME || c.name.contains('\0') {
        wrong.push(("name", format!("must be 1–{MAX_NAME} characters of text")));
    }
    if c.credit_limit.is_some_and(|v| v < 0) {
        wrong.push((
            "credit_limit",
            "must be ≥ 0 cents, or empty for no limit".into(),
        ));
    }
    if let Some(email) = &c.email {
        let plausible = email.contains('@')
            && !email.chars().any(char::is_whitespace)
            && email.chars().count() <= MAX_EMAIL
            && !email.contains('\0');
        if !plausible {
            wrong.push(("email", "is not an email address".into()));
        }
    }
    if let Some(phone) = &c.phone {
        if phone.trim().is_empty() || phone.chars().count() > MAX_PHONE || phone.contains('\0') {
            wrong.push(("phone", format!("must be 1–{MAX_PHONE} characters")));
        }
    }
    wrong
}

/// A request's first problem as API.md's 400 `validation_failed`.
fn checked(c: &Customer) -> Result<(), Error> {
    match check(c).into_iter().next() {
        Some((field, message)) => Err(Error::validation(field, message)),
        None => Ok(()),
    }
}

/// The fields that differ, in document order.
fn changed(before: &Customer, after: &Customer) -> Vec<&'static str> {
    [
        ("name", before.name != after.name),
        ("credit_limit", before.credit_limit != after.credit_limit),
        ("price_list_id", before.price_list_id != after.price_list_id),
        ("email", before.email != after.email),
        ("phone", before.phone != after.phone),
        ("active", before.active != after.active),
    ]
    .into_iter()
    .filter_map(|(name, differs)| differs.then_some(name))
    .collect()
}

/// What a `customer.updated` event says: the customer as it is now and what
/// changed.
fn facts(c: &Customer, change: &str, changed: &[&str]) -> Value {
    json!({
        "change": change,
        "changed": changed,
        "name": c.name,
        "credit_limit": c.credit_limit,
        "price_list_id": c.price_list_id,
        "email": c.email,
        "phone": c.phone,
        "active": c.active,
    })
}

async fn name_taken(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    name: &str,
    other_than: Uuid,
) -> Result<bool, Error> {
    Ok(sqlx::query_scalar(
        "select exists (select 1 from customers where tenant_id = $1 and name = $2 and id <> $3)",
    )
    .bind(tenant_id)
    .bind(name)
    .bind(other_than)
    .fetch_one(conn)
    .await?)
}

async fn require_price_list(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Option<Uuid>,
) -> Result<(), Error> {
    let Some(id) = id else { return Ok(()) };
    let found: bool = sqlx::query_scalar(
        "select exists (select 1 from price_lists where tenant_id = $1 and id = $2)",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_one(conn)
    .await?;
    if found {
        Ok(())
    } else {
        Err(Error::not_found("price list"))
    }
}

// ---------------------------------------------------------------- requests

/// `POST /v1/admin/customers` → 201 with the customer.
pub(crate) async fn create(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    body: CreateCustomer,
) -> Result<Done, Error> {
    let customer = Customer {
        id: body.id,
        name: body.name.trim().to_owned(),
        credit_limit: body.credit_limit,
        price_list_id: body.price_list_id,
        email: body.email,
        phone: body.phone,
        active: true,
    };
    checked(&customer)?;
    require_price_list(conn, tenant_id, customer.price_list_id).await?;
    let exists: bool = sqlx::query_scalar(
        "select exists (select 1 from customers where tenant_id = $1 and id = $2)",
    )
    .bind(tenant_id)
    .bind(customer.id)
    .fetch_one(&mut *conn)
    .await?;
    if exists {
        return Err(Error::validation(
            "id",
            "a customer with this id already exists; mint a new id",
        ));
    }
    if name_taken(conn, tenant_id, &customer.name, customer.id).await? {
        return Err(Error::validation(
            "name",
            "already used by another customer",
        ));
    }
    apply_in_tx(conn, tenant_id, std::slice::from_ref(&customer), &[]).await?;
    Done::created(customer)
}

/// `PATCH /v1/admin/customers/{id}` → 200 with the customer as it is now.
pub(crate) async fn patch(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    patch: PatchCustomer,
) -> Result<Done, Error> {
    if patch == PatchCustomer::default() {
        return Err(Error::validation(
            "body",
            "set at least one of name, credit_limit, price_list_id, email, phone, active",
        ));
    }
    // Locks the row so two edits of one customer decide one after the other.
    let before: Option<Customer> =
        crate::db::customers::load_for_update(conn, tenant_id, id).await?;
    let before = before.ok_or_else(|| Error::not_found("customer"))?;
    let after = Customer {
        id,
        name: patch
            .name
            .map_or(before.name.clone(), |n| n.trim().to_owned()),
        credit_limit: patch.credit_limit.unwrap_or(before.credit_limit),
        price_list_id: patch.price_list_id.unwrap_or(before.price_list_id),
        email: patch.email.unwrap_or(before.email.clone()),
        phone: patch.phone.unwrap_or(before.phone.clone()),
        active: patch.active.unwrap_or(before.active),
    };
    checked(&after)?;
    if after.price_list_id != before.price_list_id {
        require_price_list(conn, tenant_id, after.price_list_id).await?;
    }
    if after.name != before.name && name_taken(conn, tenant_id, &after.name, id).await? {
        return Err(Error::validation(
            "name",
            "already used by another customer",
        ));
    }
    let changed = changed(&before, &after);
    if !changed.is_empty() {
        apply_in_tx(conn, tenant_id, &[], &[(after.clone(), changed)]).await?;
    }
    Done::ok(after)
}

// ---------------------------------------------------------------- import

const LAYOUT: Layout = Layout {
    required: &["name", "credit_limit", "price_list", "email", "phone"],
    optional: &[],
    expected: "name,credit_limit,price_list,email,phone",
};

/// `POST /v1/admin/customers/import`: every row states the customer as it
/// should be (an empty credit limit is no limit, an empty price list is the
/// wholesale prices, an empty email or phone clears it), matched by name.
/// `price_list` names a price list of the tenant. Whether a customer is
/// active is not in the file: new customers start active, existing ones keep
/// their state. All or nothing; the same file again is all unchanged.
pub(crate) async fn import(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    csv: &[u8],
) -> Result<Done, Error> {
    let file = sheet::read(csv, &LAYOUT).map_err(super::rejected_file)?;
    let lists: HashMap<String, Uuid> = sqlx::query_as::<_, (String, Uuid)>(
        "select name, id from price_lists where tenant_id = $1",
    )
    .bind(tenant_id)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();
    let stored: HashMap<String, Customer> = crate::db::customers::list(conn, tenant_id)
        .await?
        .into_iter()
        .map(|c| (c.name.clone(), c))
        .collect();

    let at = |name: &str| file.column(name).unwrap_or(0);
    let (name, credit, list, email, phone) = (
        at("name"),
        at("credit_limit"),
        at("price_list"),
        at("email"),
        at("phone"),
    );
    let optional = |v: &str| (!v.is_empty()).then(|| v.to_owned());
    let mut errors: Vec<FieldError> = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    let (mut creates, mut updates, mut unchanged) = (Vec::new(), Vec::new(), 0u64);
    for (line, record) in &file.rows {
        let line = *line;
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                errors.push(e.clone());
                continue;
            }
        };
        let cell = |i: usize| record.get(i).unwrap_or("");
        let mut row_errors = Vec::new();
        let credit_limit = match cell(credit) {
            "" => None,
            v => sheet::money(v)
                .map_err(|m| row_errors.push(error(line, "credit_limit", m)))
                .ok(),
        };
        let price_list_id = match cell(list) {
            "" => None,
            v => match lists.get(v) {
                Some(id) => Some(*id),
                None => {
                    row_errors.push(error(
                        line,
                        "price_list",
                        format!("no price list named {v:?}"),
                    ));
                    None
                }
            },
        };
        let before = stored.get(cell(name));
        let row = Customer {
            id: before.map_or_else(Uuid::now_v7, |c| c.id),
            name: cell(name).to_owned(),
            credit_limit,
            price_list_id,
            email: optional(cell(email)),
            phone: optional(cell(phone)),
            active: before.is_none_or(|c| c.active),
        };
        for (field, message) in check(&row) {
            if field != "credit_limit" {
                row_errors.push(error(line, field, message));
            }
        }
        if let Some(first) = seen.insert(row.name.clone(), line) {
            row_errors.push(error(
                line,
                "name",
                format!("{:?} is already on line {first}", row.name),
            ));
        }
        if !row_errors.is_empty() {
            errors.extend(row_errors);
            continue;
        }
        match before {
            None => creates.push(row),
            Some(before) => {
                let changed = changed(before, &row);
                if changed.is_empty() {
                    unchanged += 1;
                } else {
                    updates.push((row, changed));
                }
            }
        }
    }
    if !errors.is_empty() {
        errors.truncate(super::MAX_LISTED_ERRORS);
        return Err(super::rejected_file(errors));
    }
    let summary = ImportSummary {
        created: creates.len() as u64,
        updated: updates.len() as u64,
        unchanged,
    };
    apply_in_tx(conn, tenant_id, &creates, &updates).await?;
    Done::ok(summary)
}

// ---------------------------------------------------------------- apply

/// Writes new customers (version 1) and changed ones (version + 1), their
/// change rows and their `customer.updated` events, one statement of each.
/// Checked already: names free, price lists the tenant's.
pub(crate) async fn apply_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    creates: &[Customer],
    updates: &[(Customer, Vec<&'static str>)],
) -> Result<(), Error> {
    let mut events = Vec::with_capacity(creates.len() + updates.len());
    let mut docs = Vec::with_capacity(creates.len() + updates.len());
    if !creates.is_empty() {
        let cols = Columns::of(creates.iter());
        sqlx::query(
            "insert into customers (tenant_id, id, name, credit_limit, price_list_id, email, phone,
                                    active, version, event_seq)
             select $1, c.*, 1, 1
               from unnest($2::uuid[], $3::text[], $4::int8[], $5::uuid[], $6::text[], $7::text[],
                           $8::bool[]) as c",
        )
        .bind(tenant_id)
        .bind(&cols.ids)
        .bind(&cols.names)
        .bind(&cols.credit_limits)
        .bind(&cols.price_lists)
        .bind(&cols.emails)
        .bind(&cols.phones)
        .bind(&cols.active)
        .execute(&mut *conn)
        .await
        .map_err(raced)?;
        for c in creates {
            docs.push((c.id, 1));
            events.push(Event {
                aggregate: Aggregate::Customer(c.id),
                sequence: 1,
                version: 1,
                facts: facts(c, "created", &[]),
            });
        }
    }
    if !updates.is_empty() {
        let cols = Columns::of(updates.iter().map(|(c, _)| c));
        let bumped: Vec<(Uuid, i64, i64)> = sqlx::query_as(
            "update customers c
                set name = u.name, credit_limit = u.credit_limit, price_list_id = u.price_list_id,
                    email = u.email, phone = u.phone, active = u.active,
                    version = c.version + 1, event_seq = c.event_seq + 1, updated_at = now()
               from unnest($2::uuid[], $3::text[], $4::int8[], $5::uuid[], $6::text[], $7::text[],
                           $8::bool[])
                    as u(id, name, credit_limit, price_list_id, email, phone, active)
              where c.tenant_id = $1 and c.id = u.id
             returning c.id, c.version, c.event_seq",
        )
        .bind(tenant_id)
        .bind(&cols.ids)
        .bind(&cols.names)
        .bind(&cols.credit_limits)
        .bind(&cols.price_lists)
        .bind(&cols.emails)
        .bind(&cols.phones)
        .bind(&cols.active)
        .fetch_all(&mut *conn)
        .await
        .map_err(raced)?;
        let by_id: HashMap<Uuid, &(Customer, Vec<&'static str>)> =
            updates.iter().map(|u| (u.0.id, u)).collect();
        for (id, version, sequence) in bumped {
            let Some((after, changed)) = by_id.get(&id) else {
                continue;
            };
            docs.push((id, version));
            events.push(Event {
                aggregate: Aggregate::Customer(id),
                sequence,
                version,
                facts: facts(after, "updated", changed),
            });
        }
    }
    if !docs.is_empty() {
        record_many_in_tx(conn, tenant_id, DocKind::Customer, &docs).await?;
        enqueue_many_in_tx(conn, tenant_id, EventType::CustomerUpdated, events).await?;
    }
    Ok(())
}

/// Customers as one array per column, for `unnest`.
#[derive(Default)]
struct Columns {
    ids: Vec<Uuid>,
    names: Vec<String>,
    credit_limits: Vec<Option<i64>>,
    price_lists: Vec<Option<Uuid>>,
    emails: Vec<Option<String>>,
    phones: Vec<Option<String>>,
    active: Vec<bool>,
}

impl Columns {
    fn of<'a>(customers: impl Iterator<Item = &'a Customer>) -> Columns {
        let mut c = Columns::default();
        for x in customers {
            c.ids.push(x.id);
            c.names.push(x.name.clone());
            c.credit_limits.push(x.credit_limit);
            c.price_lists.push(x.price_list_id);
            c.emails.push(x.email.clone());
            c.phones.push(x.phone.clone());
            c.active.push(x.active);
        }
        c
    }
}

/// Another write took a name between our check and our write: nothing is
/// applied and sending the request again decides afresh.
fn raced(e: sqlx::Error) -> Error {
    match &e {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") => Error::validation(
            "name",
            "another change took this customer name just now; nothing was applied, try again",
        ),
        _ => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn customer() -> Customer {
        Customer {
            id: Uuid::nil(),
            name: "Austin Boutique".into(),
            credit_limit: Some(500_000),
            price_list_id: None,
            email: Some("buyer@austin.example".into()),
            phone: None,
            active: true,
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let c = Customer {
            name: " ".into(),
            credit_limit: Some(-1),
            email: Some("not an address".into()),
            phone: Some(String::new()),
            ..customer()
        };
        let fields: Vec<&str> = check(&c).into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, ["name", "credit_limit", "email", "phone"]);
        assert!(check(&customer()).is_empty());
    }

    #[test]
    fn only_what_differs_is_changed() {
        let before = customer();
        let after = Customer {
            active: false,
            email: None,
            ..customer()
        };
        assert_eq!(changed(&before, &after), ["email", "active"]);
        assert!(changed(&before, &before).is_empty());
    }
}
