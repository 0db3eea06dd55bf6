//! The Price lists section: the tenant's lists (how many SKUs each prices,
//! how many customers are on it), a form to make one, and per list its
//! prices beside the wholesale price, the customers on it, and the upload
//! that replaces its prices from a CSV file `code,price`.
//! Logic: `master::price_lists` (`create`, `replace_prices_csv`).

use std::fmt::{self, Write as _};

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use holdfast_protocol::admin::{CreatePriceList, PriceListEntries};
use holdfast_protocol::model::{PriceList, Sku};
use serde::Deserialize;
use uuid::Uuid;

use super::form::{input, money, url_encode, write_fields, Field};
use super::handlers::{tenant_of, Tenant};
use super::html::{
    file_problems, html, message_page, notice, page_end, page_start, redirect, shell, Escaped,
    Section,
};
use super::session::Session;
use super::write::{page_write, reply, Refusal, Reply, Viewer, Write};
use super::PageResult;
use crate::db::{begin_for_tenant, customers, price_lists, skus};
use crate::AppState;

/// The `?done=…` a successful write redirects with.
#[derive(Deserialize, Default)]
pub(crate) struct Done {
    done: Option<String>,
    file: Option<String>,
    entries: Option<u64>,
}

/// `GET /admin/price-lists`
pub(crate) async fn list(State(state): State<AppState>, Viewer(session): Viewer) -> PageResult {
    render_list(&state, &session, "", None).await
}

async fn render_list(
    state: &AppState,
    session: &Session,
    name: &str,
    refusal: Option<&Refusal>,
) -> PageResult {
    let tenant = tenant_of(state, &session.caller).await?;
    let tenant_id = session.caller.tenant_id;
    let mut tx = begin_for_tenant(&state.db, tenant_id).await?;
    let all = price_lists::list(&mut tx, tenant_id).await?;
    tx.commit().await?;
    let mut b = String::new();
    let _ = list_page(&mut b, session, &tenant, &all, name, refusal);
    let status = refusal.map_or(StatusCode::OK, |r| r.status);
    Ok(html(status, shell("Price lists", &b)))
}

fn list_page(
    b: &mut String,
    session: &Session,
    tenant: &Tenant,
    all: &[price_lists::Summary],
    name: &str,
    refusal: Option<&Refusal>,
) -> fmt::Result {
    page_start(b, session, &tenant.name, Section::PriceLists)?;
    b.push_str(
        "<h2>Price lists</h2><p class=\"meta\">A customer on a price list pays its price for \
         the SKUs it lists and the wholesale price for the rest. A line keeps the price it was \
         entered at.</p>",
    );
    if let Some(r) = refusal {
        notice(b, false, &r.message, &r.others(&["name"]))?;
    }
    b.push_str(
        "<section class=\"panel\" aria-labelledby=\"add\"><h3 id=\"add\">New price list</h3>\
         <form method=\"post\" action=\"/admin/price-lists\">",
    );
    write_fields(b, &session.csrf)?;
    b.push_str("<div class=\"row\">");
    input(
        b,
        &Field::text("name", "Name", name)
            .error(refusal.and_then(|r| r.field("name")))
            .attrs("required maxlength=\"200\" autocomplete=\"off\""),
    )?;
    b.push_str(
        "<div class=\"field submit\"><button type=\"submit\">Create price list</button></div></div>\
         <p class=\"hint\">It starts empty; upload its prices on the next page.</p>\
         </form></section>",
    );
    write!(
        b,
        "<h3 id=\"lists\">Price lists ({})</h3><table aria-labelledby=\"lists\"><thead><tr>\
         <th scope=\"col\">Name</th><th scope=\"col\" class=\"num\">SKUs priced</th>\
         <th scope=\"col\" class=\"num\">Customers on it</th></tr></thead><tbody>",
        all.len()
    )?;
    if all.is_empty() {
        b.push_str("<tr><td colspan=\"3\">No price lists yet.</td></tr>");
    }
    for l in all {
        write!(
            b,
            "<tr><td><a href=\"/admin/price-lists/{}\">{}</a></td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            l.id,
            Escaped(&l.name),
            l.entries,
            l.customers
        )?;
    }
    b.push_str("</tbody></table>");
    page_end(b);
    Ok(())
}

/// `POST /admin/price-lists`
pub(crate) async fn create(State(state): State<AppState>, write: Write) -> PageResult {
    let name = write.text("name");
    let body = CreatePriceList {
        // A resubmit replays the first answer (the key is the form's), so a
        // fresh id here never makes a second list.
        id: Uuid::now_v7(),
        name: name.clone(),
    };
    let tenant = write.session.caller.tenant_id;
    let outcome = page_write!(state, &write, |tx| crate::master::price_lists::create(
        &mut tx, tenant, body
    ));
    match reply::<PriceList>(&outcome)? {
        Reply::Done(l) => Ok(redirect(&format!(
            "/admin/price-lists/{}?done=created",
            l.id
        ))),
        Reply::Refused(r) => render_list(&state, &write.session, &name, Some(&r)).await,
    }
}

fn no_such_list() -> Response {
    message_page(
        StatusCode::NOT_FOUND,
        "No such price list",
        "There is no such price list in your tenant. Go back to the price lists.",
    )
}

/// `GET /admin/price-lists/{id}`
pub(crate) async fn show(
    State(state): State<AppState>,
    Viewer(session): Viewer,
    id: Result<Path<Uuid>, PathRejection>,
    done: Result<Query<Done>, QueryRejection>,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_list());
    };
    let done = done.map(|Query(d)| d).unwrap_or_default();
    render_show(&state, &session, id, &done, None).await
}

async fn render_show(
    state: &AppState,
    session: &Session,
    id: Uuid,
    done: &Done,
    refused: Option<(&str, &Refusal)>,
) -> PageResult {
    let tenant = tenant_of(state, &session.caller).await?;
    let tenant_id = session.caller.tenant_id;
    let mut tx = begin_for_tenant(&state.db, tenant_id).await?;
    let Some(list) = price_lists::load(&mut tx, tenant_id, id).await? else {
        return Ok(no_such_list());
    };
    let ids: Vec<Uuid> = list.prices.iter().map(|p| p.sku_id).collect();
    let mut priced: Vec<(Sku, i64)> = skus::load_many(&mut tx, tenant_id, &ids)
        .await?
        .into_iter()
        .filter_map(|s| {
            let price = list.prices.iter().find(|p| p.sku_id == s.id)?.price;
            Some((s, price))
        })
        .collect();
    priced.sort_by(|(a, _), (b, _)| {
        (&a.style, &a.color, &a.size).cmp(&(&b.style, &b.color, &b.size))
    });
    let on_it: Vec<String> = customers::list(&mut tx, tenant_id)
        .await?
        .into_iter()
        .filter(|c| c.price_list_id == Some(id))
        .map(|c| c.name)
        .collect();
    tx.commit().await?;
    let mut b = String::new();
    let view = ShowView {
        session,
        tenant: &tenant,
        list: &list,
        priced: &priced,
        on_it: &on_it,
        done,
        refused,
    };
    let _ = show_page(&mut b, &view);
    let status = refused.map_or(StatusCode::OK, |(_, r)| r.status);
    Ok(html(status, shell(&list.name, &b)))
}

struct ShowView<'a> {
    session: &'a Session,
    tenant: &'a Tenant,
    list: &'a PriceList,
    priced: &'a [(Sku, i64)],
    on_it: &'a [String],
    done: &'a Done,
    refused: Option<(&'a str, &'a Refusal)>,
}

fn show_page(b: &mut String, v: &ShowView<'_>) -> fmt::Result {
    page_start(b, v.session, &v.tenant.name, Section::PriceLists)?;
    let list = v.list;
    write!(
        b,
        "<p><a href=\"/admin/price-lists\">← All price lists</a></p><h2>{}</h2>\
         <p class=\"meta\">{} SKU{} priced · customers on it: {}</p>",
        Escaped(&list.name),
        v.priced.len(),
        if v.priced.len() == 1 { "" } else { "s" },
        if v.on_it.is_empty() {
            "none yet (choose this list on a customer's page)".to_owned()
        } else {
            v.on_it
                .iter()
                .map(|n| Escaped(n).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    )?;
    match v.done.done.as_deref() {
        Some("created") => notice(
            b,
            true,
            &format!("Created the price list {}.", list.name),
            &[],
        )?,
        Some("replaced") => notice(
            b,
            true,
            &format!(
                "Replaced the prices of {} from {}: it now prices {} SKU{}.",
                list.name,
                v.done
                    .file
                    .as_deref()
                    .filter(|f| !f.is_empty())
                    .unwrap_or("the file"),
                v.done.entries.unwrap_or(0),
                if v.done.entries == Some(1) { "" } else { "s" }
            ),
            &[],
        )?,
        _ => {}
    }
    match v.refused {
        Some((file, r)) if !r.fields.is_empty() => file_problems(b, file, r)?,
        Some((_, r)) => notice(b, false, &r.message, &[])?,
        None => {}
    }
    write!(
        b,
        "<section class=\"panel\" aria-labelledby=\"upload\"><h3 id=\"upload\">Replace the \
         prices from a file</h3><form method=\"post\" action=\"/admin/price-lists/{}/prices\" \
         enctype=\"multipart/form-data\">",
        list.id
    )?;
    write_fields(b, &v.session.csrf)?;
    b.push_str("<div class=\"row\">");
    input(
        b,
        &Field::text("file", "CSV file", "")
            .kind("file")
            .attrs("accept=\".csv,text/csv\" required")
            .hint(
                "Header code,price: the SKU's code and this list's price in cents (3800 = \
                 38.00). The file becomes the whole list: SKUs not in it go back to the \
                 wholesale price. All or nothing.",
            ),
    )?;
    b.push_str(
        "</div><p><button type=\"submit\">Replace prices</button></p>\
         </form></section>",
    );
    b.push_str("<h3 id=\"prices\">Prices</h3>");
    if v.priced.is_empty() {
        b.push_str("<p>No prices yet: its customers pay the wholesale price for everything.</p>");
        page_end(b);
        return Ok(());
    }
    b.push_str(
        "<table aria-labelledby=\"prices\"><thead><tr><th scope=\"col\">Code</th>\
         <th scope=\"col\">Style</th><th scope=\"col\">Colour</th><th scope=\"col\">Size</th>\
         <th scope=\"col\" class=\"num\">Wholesale</th><th scope=\"col\" class=\"num\">This list</th>\
         <th scope=\"col\" class=\"num\">Difference</th></tr></thead><tbody>",
    );
    for (s, price) in v.priced {
        let diff = price - s.wholesale_price;
        write!(
            b,
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\"><strong>{}</strong></td><td class=\"num\">{}</td></tr>",
            if s.active { "" } else { " class=\"inactive\"" },
            Escaped(s.code.as_deref().unwrap_or("–")),
            Escaped(&s.style),
            Escaped(&s.color),
            Escaped(&s.size),
            money(s.wholesale_price),
            money(*price),
            if diff == 0 {
                "same".to_owned()
            } else if diff > 0 {
                format!("+{}", money(diff))
            } else {
                format!("−{}", money(-diff))
            }
        )?;
    }
    b.push_str("</tbody></table>");
    page_end(b);
    Ok(())
}

/// `POST /admin/price-lists/{id}/prices`
pub(crate) async fn replace_prices(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    write: Write,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_list());
    };
    let Some((file, csv)) = write.file("file") else {
        let r = Refusal {
            message: "Choose a CSV file first.".to_owned(),
            ..Refusal::invalid(Vec::new())
        };
        return render_show(&state, &write.session, id, &Done::default(), Some(("", &r))).await;
    };
    let (file, csv) = (file.to_owned(), csv.to_vec());
    let tenant = write.session.caller.tenant_id;
    let outcome = page_write!(state, &write, |tx| {
        crate::master::price_lists::replace_prices_csv(&mut tx, tenant, id, &csv)
    });
    match reply::<PriceListEntries>(&outcome)? {
        Reply::Done(e) => Ok(redirect(&format!(
            "/admin/price-lists/{id}?done=replaced&file={}&entries={}",
            url_encode(&file),
            e.entries
        ))),
        Reply::Refused(r) if r.status == StatusCode::NOT_FOUND => Ok(no_such_list()),
        Reply::Refused(r) => {
            render_show(
                &state,
                &write.session,
                id,
                &Done::default(),
                Some((&file, &r)),
            )
            .await
        }
    }
}
