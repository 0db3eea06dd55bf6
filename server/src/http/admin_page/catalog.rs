//! The Catalog section: search the SKUs (code, style, colour, size), a table
//! of what is sold at what price and how much is on hand, a page per SKU to
//! edit its prices, code and whether it is sold, and the CSV import with its
//! summary — or every problem of a refused file by line and column.
//! Logic: `master::catalog` (`import`, `patch`).
//!
//! Prices are typed as money ("24.50"); the CSV file keeps API.md's minor
//! units, as the import from the server host does.

use std::fmt::{self, Write as _};

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use holdfast_protocol::admin::{ImportSummary, SkuPatch};
use holdfast_protocol::model::Sku;
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
use crate::db::{begin_for_tenant, skus};
use crate::AppState;

/// SKUs per page of the table.
const PAGE: i64 = 100;

/// What the catalog's URL carries: the search and its page, and the notice
/// after a write.
#[derive(Deserialize, Default)]
pub(crate) struct CatalogQuery {
    #[serde(default)]
    q: String,
    /// The last row of the previous page (style, colour, size).
    after_style: Option<String>,
    after_color: Option<String>,
    after_size: Option<String>,
    done: Option<String>,
    id: Option<Uuid>,
    file: Option<String>,
    created: Option<u64>,
    updated: Option<u64>,
    unchanged: Option<u64>,
}

/// A refused import, to show above the table.
struct Refused<'a> {
    file: &'a str,
    refusal: &'a Refusal,
}

fn sku_name(s: &Sku) -> String {
    let mut name = format!("{} · {} · {}", s.style, s.color, s.size);
    if let Some(code) = &s.code {
        let _ = write!(name, " ({code})");
    }
    name
}

/// `GET /admin/catalog`
pub(crate) async fn list(
    State(state): State<AppState>,
    Viewer(session): Viewer,
    query: Result<Query<CatalogQuery>, QueryRejection>,
) -> PageResult {
    let query = query.map(|Query(q)| q).unwrap_or_default();
    render_list(&state, &session, &query, None).await
}

async fn render_list(
    state: &AppState,
    session: &Session,
    query: &CatalogQuery,
    refused: Option<Refused<'_>>,
) -> PageResult {
    let tenant = tenant_of(state, &session.caller).await?;
    let tenant_id = session.caller.tenant_id;
    let after = match (&query.after_style, &query.after_color, &query.after_size) {
        (Some(s), Some(c), Some(z)) => Some((s.clone(), c.clone(), z.clone())),
        _ => None,
    };
    let q = query.q.trim();
    let mut tx = begin_for_tenant(&state.db, tenant_id).await?;
    let mut rows = skus::search(
        &mut tx,
        tenant_id,
        Some(q).filter(|q| !q.is_empty()),
        after.as_ref(),
        PAGE + 1,
    )
    .await?;
    let saved = match (query.done.as_deref(), query.id) {
        (Some("saved"), Some(id)) => skus::load(&mut tx, tenant_id, id).await?,
        _ => None,
    };
    tx.commit().await?;
    let more = rows.len() as i64 > PAGE;
    rows.truncate(PAGE as usize);
    let mut b = String::new();
    let view = ListView {
        session,
        tenant: &tenant,
        query,
        rows: &rows,
        more,
        first_page: after.is_none(),
        saved: saved.as_ref(),
        refused: refused.as_ref(),
    };
    let _ = list_page(&mut b, &view);
    let status = refused.map_or(StatusCode::OK, |r| r.refusal.status);
    Ok(html(status, shell("Catalog", &b)))
}

struct ListView<'a> {
    session: &'a Session,
    tenant: &'a Tenant,
    query: &'a CatalogQuery,
    rows: &'a [Sku],
    more: bool,
    first_page: bool,
    saved: Option<&'a Sku>,
    refused: Option<&'a Refused<'a>>,
}

fn list_page(b: &mut String, v: &ListView<'_>) -> fmt::Result {
    page_start(b, v.session, &v.tenant.name, Section::Catalog)?;
    b.push_str("<h2>Catalog</h2>");
    let query = v.query;
    if let Some(sku) = v.saved {
        notice(b, true, &format!("Saved {}.", sku_name(sku)), &[])?;
    }
    if query.done.as_deref() == Some("imported") {
        let n = |x: Option<u64>| x.unwrap_or(0);
        let text = format!(
            "Imported {}: {} new SKU{}, {} updated, {} unchanged.",
            query
                .file
                .as_deref()
                .filter(|f| !f.is_empty())
                .unwrap_or("the file"),
            n(query.created),
            if n(query.created) == 1 { "" } else { "s" },
            n(query.updated),
            n(query.unchanged)
        );
        notice(b, true, &text, &[])?;
    }
    if let Some(r) = v.refused {
        if r.refusal.fields.is_empty() {
            notice(b, false, &r.refusal.message, &[])?;
        } else {
            file_problems(b, r.file, r.refusal)?;
        }
    }

    let q = query.q.trim();
    b.push_str(
        "<div class=\"panel\"><form method=\"get\" action=\"/admin/catalog\" role=\"search\">\
         <div class=\"row\">",
    );
    input(
        b,
        &Field::text("q", "Find SKUs", q)
            .kind("search")
            .hint("Code, style, colour or size; more words narrow it (“kestrel indigo m”)."),
    )?;
    b.push_str("<div class=\"field submit\"><button type=\"submit\">Search</button></div>");
    if !q.is_empty() {
        b.push_str(
            "<div class=\"field submit\"><a href=\"/admin/catalog\">Show all SKUs</a></div>",
        );
    }
    b.push_str("</div></form></div>");

    // Folded away until wanted (a <details> opens from the keyboard too);
    // open again after a refused file.
    write!(
        b,
        "<details class=\"panel\"{}><summary><h3>Import a catalog file</h3></summary>\
         <form method=\"post\" action=\"/admin/catalog/import\" \
         enctype=\"multipart/form-data\">",
        if v.refused.is_some() { " open" } else { "" }
    )?;
    write_fields(b, &v.session.csrf)?;
    b.push_str("<div class=\"row\">");
    input(
        b,
        &Field::text("file", "CSV file", "")
            .kind("file")
            .attrs("accept=\".csv,text/csv\" required")
            .hint(
                "Header code,style,color,size,wholesale_price,msrp and optionally active; \
                 prices in cents (2400 = 24.00). Rows update the SKU with the same code, \
                 else the same style, colour and size. All or nothing: one bad row and \
                 nothing is applied.",
            ),
    )?;
    b.push_str(
        "</div><p><button type=\"submit\">Import file</button></p>\
         </form></details>",
    );

    let heading = if q.is_empty() {
        "All SKUs".to_owned()
    } else {
        format!("SKUs matching “{q}”")
    };
    write!(
        b,
        "<h3 id=\"skus\">{}{}</h3>",
        Escaped(&heading),
        if v.first_page { "" } else { ", continued" }
    )?;
    if v.rows.is_empty() {
        b.push_str("<p>No SKUs found.</p>");
        page_end(b);
        return Ok(());
    }
    b.push_str(
        "<table aria-labelledby=\"skus\"><thead><tr><th scope=\"col\">Code</th>\
         <th scope=\"col\">Style</th><th scope=\"col\">Colour</th><th scope=\"col\">Size</th>\
         <th scope=\"col\" class=\"num\">Wholesale</th><th scope=\"col\" class=\"num\">MSRP</th>\
         <th scope=\"col\" class=\"num\">On hand</th><th scope=\"col\">Status</th>\
         <th scope=\"col\"><span class=\"vh\">Edit</span></th></tr></thead><tbody>",
    );
    let back = url_encode(q);
    for s in v.rows {
        write!(
            b,
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td>\
             <td><a href=\"/admin/catalog/{}?q={back}\">Edit<span class=\"vh\"> {}</span></a></td></tr>",
            if s.active { "" } else { " class=\"inactive\"" },
            Escaped(s.code.as_deref().unwrap_or("–")),
            Escaped(&s.style),
            Escaped(&s.color),
            Escaped(&s.size),
            money(s.wholesale_price),
            money(s.msrp),
            s.on_hand,
            if s.active {
                "<span class=\"ok\">Active</span>"
            } else {
                "<span class=\"warn\">Discontinued</span>"
            },
            s.id,
            Escaped(&sku_name(s)),
        )?;
    }
    b.push_str("</tbody></table>");
    let mut links = Vec::new();
    if !v.first_page {
        links.push(format!(
            "<a href=\"/admin/catalog?q={back}\">First page</a>"
        ));
    }
    if let (true, Some(last)) = (v.more, v.rows.last()) {
        links.push(format!(
            "<a href=\"/admin/catalog?q={back}&amp;after_style={}&amp;after_color={}&amp;after_size={}\">Next {PAGE} SKUs</a>",
            url_encode(&last.style),
            url_encode(&last.color),
            url_encode(&last.size)
        ));
    }
    if !links.is_empty() {
        write!(b, "<p class=\"actions\">{}</p>", links.join(""))?;
    }
    page_end(b);
    Ok(())
}

/// `POST /admin/catalog/import`
pub(crate) async fn import(State(state): State<AppState>, write: Write) -> PageResult {
    let Some((file, csv)) = write.file("file") else {
        let refusal = Refusal {
            message: "Choose a CSV file to import first.".to_owned(),
            ..Refusal::invalid(Vec::new())
        };
        let refused = Refused {
            file: "",
            refusal: &refusal,
        };
        return render_list(
            &state,
            &write.session,
            &CatalogQuery::default(),
            Some(refused),
        )
        .await;
    };
    let file = file.to_owned();
    let csv = csv.to_vec();
    let tenant = write.session.caller.tenant_id;
    let outcome = page_write!(state, &write, |tx| crate::master::catalog::import(
        &mut tx, tenant, &csv
    ));
    match reply::<ImportSummary>(&outcome)? {
        Reply::Done(value) => Ok(redirect(&format!(
            "/admin/catalog?done=imported&file={}&created={}&updated={}&unchanged={}",
            url_encode(&file),
            value.created,
            value.updated,
            value.unchanged
        ))),
        Reply::Refused(refusal) => {
            let refused = Refused {
                file: &file,
                refusal: &refusal,
            };
            render_list(
                &state,
                &write.session,
                &CatalogQuery::default(),
                Some(refused),
            )
            .await
        }
    }
}

/// The SKU form as shown: the SKU's values, or what the operator typed.
struct EditForm {
    code: String,
    wholesale_price: String,
    msrp: String,
    active: String,
}

impl EditForm {
    fn of(s: &Sku) -> EditForm {
        EditForm {
            code: s.code.clone().unwrap_or_default(),
            wholesale_price: money(s.wholesale_price).replace(',', ""),
            msrp: money(s.msrp).replace(',', ""),
            active: s.active.to_string(),
        }
    }
}

#[derive(Deserialize, Default)]
pub(crate) struct Back {
    #[serde(default)]
    q: String,
}

fn no_such_sku() -> Response {
    message_page(
        StatusCode::NOT_FOUND,
        "No such SKU",
        "There is no such SKU in your tenant. Go back to the catalog.",
    )
}

/// `GET /admin/catalog/{id}`
pub(crate) async fn edit(
    State(state): State<AppState>,
    Viewer(session): Viewer,
    id: Result<Path<Uuid>, PathRejection>,
    back: Result<Query<Back>, QueryRejection>,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_sku());
    };
    let back = back.map(|Query(b)| b.q).unwrap_or_default();
    render_edit(&state, &session, id, &back, None, None).await
}

async fn render_edit(
    state: &AppState,
    session: &Session,
    id: Uuid,
    back: &str,
    form: Option<EditForm>,
    refusal: Option<&Refusal>,
) -> PageResult {
    let tenant = tenant_of(state, &session.caller).await?;
    let mut tx = begin_for_tenant(&state.db, session.caller.tenant_id).await?;
    let sku = skus::load(&mut tx, session.caller.tenant_id, id).await?;
    tx.commit().await?;
    let Some(sku) = sku else {
        return Ok(no_such_sku());
    };
    let form = form.unwrap_or_else(|| EditForm::of(&sku));
    let mut b = String::new();
    let _ = edit_page(&mut b, session, &tenant, &sku, back, &form, refusal);
    let status = refusal.map_or(StatusCode::OK, |r| r.status);
    Ok(html(status, shell(&sku_name(&sku), &b)))
}

fn edit_page(
    b: &mut String,
    session: &Session,
    tenant: &Tenant,
    sku: &Sku,
    back: &str,
    form: &EditForm,
    refusal: Option<&Refusal>,
) -> fmt::Result {
    page_start(b, session, &tenant.name, Section::Catalog)?;
    write!(
        b,
        "<p><a href=\"/admin/catalog?q={}\">← Back to the catalog</a></p><h2>{} · {} · {}</h2>\
         <p class=\"meta\">On hand {} · on order {} · allocated {} · available to sell {}{}</p>",
        url_encode(back),
        Escaped(&sku.style),
        Escaped(&sku.color),
        Escaped(&sku.size),
        sku.on_hand,
        sku.on_order,
        sku.allocated,
        sku.ats,
        if sku.active { "" } else { " · discontinued" }
    )?;
    let shown = ["code", "wholesale_price", "msrp", "active"];
    if let Some(r) = refusal {
        notice(b, false, &r.message, &r.others(&shown))?;
    }
    let error = |f: &str| refusal.and_then(|r| r.field(f));
    write!(
        b,
        "<section class=\"panel\" aria-labelledby=\"edit\"><h3 id=\"edit\">Prices, code and status</h3>\
         <form method=\"post\" action=\"/admin/catalog/{}\">",
        sku.id
    )?;
    write_fields(b, &session.csrf)?;
    write!(
        b,
        "<input type=\"hidden\" name=\"q\" value=\"{}\"><div class=\"row\">",
        Escaped(back)
    )?;
    input(
        b,
        &Field::text("code", "Code", &form.code)
            .error(error("code"))
            .hint("Your SKU or UPC; empty for none.")
            .attrs("maxlength=\"100\" autocomplete=\"off\""),
    )?;
    input(
        b,
        &Field::text("wholesale_price", "Wholesale price", &form.wholesale_price)
            .error(error("wholesale_price"))
            .hint("What a retailer pays, e.g. 24.00. Lines already entered keep their price.")
            .attrs("class=\"short\" inputmode=\"decimal\" required"),
    )?;
    input(
        b,
        &Field::text("msrp", "MSRP", &form.msrp)
            .error(error("msrp"))
            .hint("The suggested retail price.")
            .attrs("class=\"short\" inputmode=\"decimal\" required"),
    )?;
    select(
        b,
        &Field::text("active", "Status", "")
            .error(error("active"))
            .hint("A discontinued SKU takes no new lines; lines already entered keep working."),
        &[("true", "Active"), ("false", "Discontinued")],
        &form.active,
    )?;
    b.push_str("</div><p><button type=\"submit\">Save changes</button></p></form></section>");
    page_end(b);
    Ok(())
}

/// `POST /admin/catalog/{id}`
pub(crate) async fn update(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    write: Write,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_sku());
    };
    let back = write.text("q");
    let form = EditForm {
        code: write.text("code"),
        wholesale_price: write.text("wholesale_price"),
        msrp: write.text("msrp"),
        active: write.text("active"),
    };
    let mut problems = Vec::new();
    let mut price = |field: &str, raw: &str| match parse_money(raw) {
        Ok(v) => Some(v),
        Err(m) => {
            problems.push(field_error(field, m));
            None
        }
    };
    let wholesale_price = price("wholesale_price", &form.wholesale_price);
    let msrp = price("msrp", &form.msrp);
    let active = match form.active.as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => {
            problems.push(field_error("active", "choose Active or Discontinued"));
            None
        }
    };
    if !problems.is_empty() {
        let refusal = Refusal::invalid(problems);
        return render_edit(
            &state,
            &write.session,
            id,
            &back,
            Some(form),
            Some(&refusal),
        )
        .await;
    }
    let code = form.code.trim();
    let patch = SkuPatch {
        wholesale_price,
        msrp,
        active,
        code: Some(Some(code.to_owned()).filter(|c| !c.is_empty())),
    };
    let tenant = write.session.caller.tenant_id;
    let outcome = page_write!(state, &write, |tx| crate::master::catalog::patch(
        &mut tx, tenant, id, patch
    ));
    match reply::<Sku>(&outcome)? {
        Reply::Done(value) => Ok(redirect(&format!(
            "/admin/catalog?q={}&done=saved&id={}",
            url_encode(&back),
            value.id
        ))),
        Reply::Refused(refusal) if refusal.status == StatusCode::NOT_FOUND => Ok(no_such_sku()),
        Reply::Refused(refusal) => {
            render_edit(
                &state,
                &write.session,
                id,
                &back,
                Some(form),
                Some(&refusal),
            )
            .await
        }
    }
}
