//! The Customers section: the tenant's retailers (name, credit limit, price
//! list, email, phone, active), a form to add one, a page per customer to
//! edit it (its price list, deactivating it), and the CSV import
//! `name,credit_limit,price_list,email,phone`. Logic: `master::customers`.
//!
//! The credit limit is typed as money; empty means no limit.

use std::collections::HashMap;
use std::fmt::{self, Write as _};

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use holdfast_protocol::admin::{CreateCustomer, ImportSummary, PatchCustomer};
use holdfast_protocol::model::Customer;
use serde::Deserialize;
use uuid::Uuid;

use super::form::{input, money, parse_money, select, url_encode, write_fields, Field};
use super::handlers::{tenant_of, Tenant};
use super::html::{
    file_problems, html, message_page, notice, page_end, page_start, redirect, shell, Escaped,
    Section,
};
use super::session::Session;
use super::write::{field_error, page_write, reply, Refusal, Reply, Viewer, Write};
use super::PageResult;
use crate::db::{begin_for_tenant, customers, price_lists};
use crate::AppState;

/// The `?done=…` a successful write redirects with.
#[derive(Deserialize, Default)]
pub(crate) struct Done {
    done: Option<String>,
    id: Option<Uuid>,
    file: Option<String>,
    created: Option<u64>,
    updated: Option<u64>,
    unchanged: Option<u64>,
}

/// A customer's fields as the forms hold them (as typed, or as stored).
#[derive(Default)]
struct CustomerForm {
    name: String,
    credit_limit: String,
    price_list_id: String,
    email: String,
    phone: String,
    active: String,
}

impl CustomerForm {
    fn of(c: &Customer) -> CustomerForm {
        CustomerForm {
            name: c.name.clone(),
            credit_limit: c
                .credit_limit
                .map(|l| money(l).replace(',', ""))
                .unwrap_or_default(),
            price_list_id: c.price_list_id.map(|id| id.to_string()).unwrap_or_default(),
            email: c.email.clone().unwrap_or_default(),
            phone: c.phone.clone().unwrap_or_default(),
            active: c.active.to_string(),
        }
    }

    fn read(write: &Write) -> CustomerForm {
        CustomerForm {
            name: write.text("name"),
            credit_limit: write.text("credit_limit"),
            price_list_id: write.text("price_list_id"),
            email: write.text("email"),
            phone: write.text("phone"),
            active: write.text("active"),
        }
    }
}

/// The form's fields checked and converted; the problems otherwise.
struct Checked {
    name: String,
    credit_limit: Option<i64>,
    price_list_id: Option<Uuid>,
    email: Option<String>,
    phone: Option<String>,
}

fn check(form: &CustomerForm) -> Result<Checked, Refusal> {
    let mut problems = Vec::new();
    let credit_limit = match form.credit_limit.trim() {
        "" => None,
        raw => match parse_money(raw) {
            Ok(v) => Some(v),
            Err(m) => {
                problems.push(field_error("credit_limit", m));
                None
            }
        },
    };
    let price_list_id = match form.price_list_id.trim() {
        "" => None,
        raw => match Uuid::parse_str(raw) {
            Ok(id) => Some(id),
            Err(_) => {
                problems.push(field_error("price_list_id", "choose a price list"));
                None
            }
        },
    };
    if !problems.is_empty() {
        return Err(Refusal::invalid(problems));
    }
    let optional = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    Ok(Checked {
        name: form.name.clone(),
        credit_limit,
        price_list_id,
        email: optional(&form.email),
        phone: optional(&form.phone),
    })
}

/// Price lists by id, and as `<select>` options (wholesale first).
struct Lists {
    names: HashMap<Uuid, String>,
    options: Vec<(String, String)>,
}

async fn lists(conn: &mut sqlx::PgConnection, tenant_id: Uuid) -> Result<Lists, sqlx::Error> {
    let all = price_lists::list(conn, tenant_id).await?;
    let mut options = vec![(String::new(), "Wholesale prices (no list)".to_owned())];
    options.extend(all.iter().map(|l| (l.id.to_string(), l.name.clone())));
    Ok(Lists {
        names: all.into_iter().map(|l| (l.id, l.name)).collect(),
        options,
    })
}

fn options(lists: &Lists) -> Vec<(&str, &str)> {
    lists
        .options
        .iter()
        .map(|(v, t)| (v.as_str(), t.as_str()))
        .collect()
}

/// `GET /admin/customers`
pub(crate) async fn list(
    State(state): State<AppState>,
    Viewer(session): Viewer,
    done: Result<Query<Done>, QueryRejection>,
) -> PageResult {
    let done = done.map(|Query(d)| d).unwrap_or_default();
    render_list(&state, &session, &done, &CustomerForm::default(), None).await
}

/// What went wrong, and where: the add form or the file.
enum Problem<'a> {
    Add(&'a Refusal),
    File(&'a str, &'a Refusal),
}

async fn render_list(
    state: &AppState,
    session: &Session,
    done: &Done,
    form: &CustomerForm,
    problem: Option<Problem<'_>>,
) -> PageResult {
    let tenant = tenant_of(state, &session.caller).await?;
    let tenant_id = session.caller.tenant_id;
    let mut tx = begin_for_tenant(&state.db, tenant_id).await?;
    let all = customers::list(&mut tx, tenant_id).await?;
    let lists = lists(&mut tx, tenant_id).await?;
    tx.commit().await?;
    let mut b = String::new();
    let _ = list_page(
        &mut b,
        session,
        &tenant,
        &all,
        &lists,
        done,
        form,
        problem.as_ref(),
    );
    let status = match problem {
        Some(Problem::Add(r) | Problem::File(_, r)) => r.status,
        None => StatusCode::OK,
    };
    Ok(html(status, shell("Customers", &b)))
}

#[allow(clippy::too_many_arguments)]
fn list_page(
    b: &mut String,
    session: &Session,
    tenant: &Tenant,
    all: &[Customer],
    lists: &Lists,
    done: &Done,
    form: &CustomerForm,
    problem: Option<&Problem<'_>>,
) -> fmt::Result {
    page_start(b, session, &tenant.name, Section::Customers)?;
    b.push_str("<h2>Customers</h2>");
    let who = done
        .id
        .and_then(|id| all.iter().find(|c| c.id == id))
        .map(|c| c.name.as_str());
    let text = match (done.done.as_deref(), who) {
        (Some("created"), Some(who)) => Some(format!("Added {who}.")),
        (Some("saved"), Some(who)) => Some(format!("Saved the changes to {who}.")),
        (Some("imported"), _) => {
            let n = |x: Option<u64>| x.unwrap_or(0);
            Some(format!(
                "Imported {}: {} new customer{}, {} updated, {} unchanged.",
                done.file
                    .as_deref()
                    .filter(|f| !f.is_empty())
                    .unwrap_or("the file"),
                n(done.created),
                if n(done.created) == 1 { "" } else { "s" },
                n(done.updated),
                n(done.unchanged)
            ))
        }
        _ => None,
    };
    if let Some(text) = text {
        notice(b, true, &text, &[])?;
    }
    let shown = ["name", "credit_limit", "price_list_id", "email", "phone"];
    let add_refusal = match problem {
        Some(Problem::Add(r)) => {
            notice(b, false, &r.message, &r.others(&shown))?;
            Some(*r)
        }
        Some(Problem::File(file, r)) if !r.fields.is_empty() => {
            file_problems(b, file, r)?;
            None
        }
        Some(Problem::File(_, r)) => {
            notice(b, false, &r.message, &[])?;
            None
        }
        None => None,
    };
    let error = |f: &str| add_refusal.and_then(|r| r.field(f));

    b.push_str(
        "<section class=\"panel\" aria-labelledby=\"add\"><h3 id=\"add\">Add a customer</h3>\
         <form method=\"post\" action=\"/admin/customers\">",
    );
    write_fields(b, &session.csrf)?;
    b.push_str("<div class=\"row\">");
    fields(b, form, lists, &error)?;
    b.push_str(
        "<div class=\"field submit\"><button type=\"submit\">Add customer</button></div></div>\
         </form></section>",
    );

    // Folded away until wanted; open again after a refused file.
    write!(
        b,
        "<details class=\"panel\"{}><summary><h3>Import a customer file</h3></summary>\
         <form method=\"post\" action=\"/admin/customers/import\" \
         enctype=\"multipart/form-data\">",
        if matches!(problem, Some(Problem::File(..))) {
            " open"
        } else {
            ""
        }
    )?;
    write_fields(b, &session.csrf)?;
    b.push_str("<div class=\"row\">");
    input(
        b,
        &Field::text("file", "CSV file", "")
            .kind("file")
            .attrs("accept=\".csv,text/csv\" required")
            .hint(
                "Header name,credit_limit,price_list,email,phone; the credit limit in cents \
                 (empty: no limit), the price list by name (empty: wholesale prices). Rows \
                 update the customer with the same name. All or nothing.",
            ),
    )?;
    b.push_str(
        "</div><p><button type=\"submit\">Import file</button></p>\
         </form></details>",
    );

    write!(
        b,
        "<h3 id=\"list\">Customers ({})</h3><table aria-labelledby=\"list\"><thead><tr>\
         <th scope=\"col\">Name</th><th scope=\"col\" class=\"num\">Credit limit</th>\
         <th scope=\"col\">Price list</th><th scope=\"col\">Email</th><th scope=\"col\">Phone</th>\
         <th scope=\"col\">Status</th></tr></thead><tbody>",
        all.len()
    )?;
    if all.is_empty() {
        b.push_str("<tr><td colspan=\"6\">No customers yet.</td></tr>");
    }
    for c in all {
        write!(
            b,
            "<tr{}><td><a href=\"/admin/customers/{}\">{}</a></td><td class=\"num\">{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if c.active { "" } else { " class=\"inactive\"" },
            c.id,
            Escaped(&c.name),
            c.credit_limit.map_or("no limit".to_owned(), money),
            Escaped(
                c.price_list_id
                    .and_then(|id| lists.names.get(&id))
                    .map_or("Wholesale", String::as_str)
            ),
            Escaped(c.email.as_deref().unwrap_or("–")),
            Escaped(c.phone.as_deref().unwrap_or("–")),
            if c.active {
                "<span class=\"ok\">Active</span>"
            } else {
                "<span class=\"warn\">Inactive</span>"
            },
        )?;
    }
    b.push_str(
        "</tbody></table><p class=\"hint\">Choose a name to edit the customer, change its \
         price list or deactivate it.</p>",
    );
    page_end(b);
    Ok(())
}

/// The customer's fields, in the order they are typed.
fn fields<'e>(
    b: &mut String,
    form: &CustomerForm,
    lists: &Lists,
    error: &dyn Fn(&str) -> Option<&'e str>,
) -> fmt::Result {
    input(
        b,
        &Field::text("name", "Name", &form.name)
            .error(error("name"))
            .attrs("required maxlength=\"200\" autocomplete=\"off\""),
    )?;
    input(
        b,
        &Field::text("credit_limit", "Credit limit", &form.credit_limit)
            .error(error("credit_limit"))
            .hint("e.g. 25000.00; empty: no limit")
            .attrs("class=\"short\" inputmode=\"decimal\""),
    )?;
    select(
        b,
        &Field::text("price_list_id", "Price list", "").error(error("price_list_id")),
        &options(lists),
        &form.price_list_id,
    )?;
    input(
        b,
        &Field::text("email", "Email", &form.email)
            .kind("email")
            .error(error("email"))
            .attrs("maxlength=\"320\" autocomplete=\"off\""),
    )?;
    input(
        b,
        &Field::text("phone", "Phone", &form.phone)
            .error(error("phone"))
            .attrs("class=\"short\" maxlength=\"50\" autocomplete=\"off\""),
    )
}

/// `POST /admin/customers`
pub(crate) async fn create(State(state): State<AppState>, write: Write) -> PageResult {
    let form = CustomerForm::read(&write);
    let checked = match check(&form) {
        Ok(c) => c,
        Err(r) => {
            return render_list(
                &state,
                &write.session,
                &Done::default(),
                &form,
                Some(Problem::Add(&r)),
            )
            .await
        }
    };
    let body = CreateCustomer {
        // A resubmit of this form replays the first answer (its key is the
        // form's), so a fresh id here never makes a second customer.
        id: Uuid::now_v7(),
        name: checked.name,
        credit_limit: checked.credit_limit,
        price_list_id: checked.price_list_id,
        email: checked.email,
        phone: checked.phone,
    };
    let tenant = write.session.caller.tenant_id;
    let outcome = page_write!(state, &write, |tx| crate::master::customers::create(
        &mut tx, tenant, body
    ));
    match reply::<Customer>(&outcome)? {
        Reply::Done(c) => Ok(redirect(&format!(
            "/admin/customers?done=created&id={}",
            c.id
        ))),
        Reply::Refused(r) => {
            render_list(
                &state,
                &write.session,
                &Done::default(),
                &form,
                Some(Problem::Add(&r)),
            )
            .await
        }
    }
}

/// `POST /admin/customers/import`
pub(crate) async fn import(State(state): State<AppState>, write: Write) -> PageResult {
    let none = CustomerForm::default();
    let Some((file, csv)) = write.file("file") else {
        let r = Refusal {
            message: "Choose a CSV file to import first.".to_owned(),
            ..Refusal::invalid(Vec::new())
        };
        return render_list(
            &state,
            &write.session,
            &Done::default(),
            &none,
            Some(Problem::File("", &r)),
        )
        .await;
    };
    let (file, csv) = (file.to_owned(), csv.to_vec());
    let tenant = write.session.caller.tenant_id;
    let outcome = page_write!(state, &write, |tx| crate::master::customers::import(
        &mut tx, tenant, &csv
    ));
    match reply::<ImportSummary>(&outcome)? {
        Reply::Done(s) => Ok(redirect(&format!(
            "/admin/customers?done=imported&file={}&created={}&updated={}&unchanged={}",
            url_encode(&file),
            s.created,
            s.updated,
            s.unchanged
        ))),
        Reply::Refused(r) => {
            render_list(
                &state,
                &write.session,
                &Done::default(),
                &none,
                Some(Problem::File(&file, &r)),
            )
            .await
        }
    }
}

fn no_such_customer() -> Response {
    message_page(
        StatusCode::NOT_FOUND,
        "No such customer",
        "There is no such customer in your tenant. Go back to the list of customers.",
    )
}

/// `GET /admin/customers/{id}`
pub(crate) async fn edit(
    State(state): State<AppState>,
    Viewer(session): Viewer,
    id: Result<Path<Uuid>, PathRejection>,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_customer());
    };
    render_edit(&state, &session, id, None, None).await
}

async fn render_edit(
    state: &AppState,
    session: &Session,
    id: Uuid,
    form: Option<CustomerForm>,
    refusal: Option<&Refusal>,
) -> PageResult {
    let tenant = tenant_of(state, &session.caller).await?;
    let tenant_id = session.caller.tenant_id;
    let mut tx = begin_for_tenant(&state.db, tenant_id).await?;
    let customer = customers::load(&mut tx, tenant_id, id).await?;
    let lists = lists(&mut tx, tenant_id).await?;
    tx.commit().await?;
    let Some(customer) = customer else {
        return Ok(no_such_customer());
    };
    let form = form.unwrap_or_else(|| CustomerForm::of(&customer));
    let mut b = String::new();
    let _ = edit_page(&mut b, session, &tenant, &customer, &lists, &form, refusal);
    let status = refusal.map_or(StatusCode::OK, |r| r.status);
    Ok(html(status, shell(&customer.name, &b)))
}

fn edit_page(
    b: &mut String,
    session: &Session,
    tenant: &Tenant,
    customer: &Customer,
    lists: &Lists,
    form: &CustomerForm,
    refusal: Option<&Refusal>,
) -> fmt::Result {
    page_start(b, session, &tenant.name, Section::Customers)?;
    write!(
        b,
        "<p><a href=\"/admin/customers\">← All customers</a></p><h2>{}</h2>\
         <p class=\"meta\">{}</p>",
        Escaped(&customer.name),
        if customer.active {
            "Active: takes new orders."
        } else {
            "Inactive: takes no new orders; its open orders keep working."
        }
    )?;
    let shown = [
        "name",
        "credit_limit",
        "price_list_id",
        "email",
        "phone",
        "active",
    ];
    if let Some(r) = refusal {
        notice(b, false, &r.message, &r.others(&shown))?;
    }
    let error = |f: &str| refusal.and_then(|r| r.field(f));
    write!(
        b,
        "<section class=\"panel\" aria-labelledby=\"edit\"><h3 id=\"edit\">Details</h3>\
         <form method=\"post\" action=\"/admin/customers/{}\">",
        customer.id
    )?;
    write_fields(b, &session.csrf)?;
    b.push_str("<div class=\"row\">");
    fields(b, form, lists, &error)?;
    select(
        b,
        &Field::text("active", "Status", "")
            .error(error("active"))
            .hint("An inactive customer takes no new orders; its open orders keep working."),
        &[("true", "Active"), ("false", "Inactive")],
        &form.active,
    )?;
    b.push_str("</div><p><button type=\"submit\">Save changes</button></p></form></section>");
    page_end(b);
    Ok(())
}

/// `POST /admin/customers/{id}`
pub(crate) async fn update(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    write: Write,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_customer());
    };
    let form = CustomerForm::read(&write);
    let checked = check(&form).and_then(|c| match form.active.as_str() {
        "true" => Ok((c, true)),
        "false" => Ok((c, false)),
        _ => Err(Refusal::invalid(vec![field_error(
            "active",
            "choose Active or Inactive",
        )])),
    });
    let (checked, active) = match checked {
        Ok(c) => c,
        Err(r) => return render_edit(&state, &write.session, id, Some(form), Some(&r)).await,
    };
    let patch = PatchCustomer {
        name: Some(checked.name),
        credit_limit: Some(checked.credit_limit),
        price_list_id: Some(checked.price_list_id),
        email: Some(checked.email),
        phone: Some(checked.phone),
        active: Some(active),
    };
    let tenant = write.session.caller.tenant_id;
    let outcome = page_write!(state, &write, |tx| crate::master::customers::patch(
        &mut tx, tenant, id, patch
    ));
    match reply::<Customer>(&outcome)? {
        Reply::Done(c) => Ok(redirect(&format!(
            "/admin/customers?done=saved&id={}",
            c.id
        ))),
        Reply::Refused(r) if r.status == StatusCode::NOT_FOUND => Ok(no_such_customer()),
        Reply::Refused(r) => render_edit(&state, &write.session, id, Some(form), Some(&r)).await,
    }
}
