//! The Partners section: the webhook receivers (name, URL, subscriptions,
//! sending or paused, what waits for them, dead letters, the secret's
//! rotation) with a pause/enable and a test-event button each, and a form
//! to add one; [`super::partner`] is each partner's own page. Logic:
//! `master::partners`, `relay::test_event`.
//!
//! A signing secret is shown once, on the answer to the POST that made it
//! (create or rotate), like a generated password (see `users.rs`): in a
//! readonly, autofocused input the operator selects and copies, since a
//! copy button needs a script and the page runs none. A browser's resubmit
//! replays the stored answer, which has no secret.

use std::collections::HashMap;
use std::fmt::{self, Write as _};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::form::{input, write_fields, Field};
use super::handlers::{tenant_of, Tenant};
use super::html::{
    age, html, message_page, notice, page_end, page_start, shell, when_at, Escaped, Section,
};
use super::session::Session;
use super::write::{page_write, reply, Refusal, Reply, Viewer, Write};
use super::PageResult;
use crate::db::deliveries::{self, PartnerStats};
use crate::db::partners::{self, Partner};
use crate::engine;
use crate::master::partners::{self as master, NewPartner};
use crate::AppState;

/// The `?done=…` a successful write redirects with.
#[derive(Deserialize, Default)]
pub(crate) struct Done {
    pub(super) done: Option<String>,
    /// A deleted partner's name and what went with it.
    name: Option<String>,
    delivered: Option<i64>,
    dead: Option<i64>,
}

/// Blanks the one-time secret in the copy of an answer kept for replays.
pub(super) fn forget_secret(body: &mut Value) {
    if let Some(secret) = body.get_mut("secret") {
        *secret = Value::Null;
    }
}

/// The hint every subscriptions field carries.
pub(super) const TYPES_HINT: &str =
    "Separate them with commas. Types: order.created, order.updated, \
     order.line_allocated, order.line_released, order.confirmed, order.cancelled, \
     sku.ats_changed, sku.updated, customer.updated, price_list.updated, invoice.paid; \
     order.* means every order event, * every event.";

/// Subscriptions as typed: separated by commas or spaces.
pub(super) fn parse_types(raw: &str) -> Vec<String> {
    raw.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// What the add-a-partner form holds (empty, or as the operator typed it).
#[derive(Default)]
struct NewForm {
    name: String,
    url: String,
    event_types: String,
}

/// The partner page's edit form (the partner's values, or as typed).
pub(super) struct EditForm {
    pub(super) url: String,
    pub(super) event_types: String,
}

/// A partner with its delivery counts.
pub(super) struct Row<'a> {
    pub(super) partner: &'a Partner,
    pub(super) stats: Option<&'a PartnerStats>,
}

impl Row<'_> {
    /// "Delivering", "Retrying", "Paused": whether events go out.
    pub(super) fn sending(&self) -> (&'static str, String) {
        let p = self.partner;
        if !p.enabled {
            return match &p.paused_reason {
                Some(why) => ("bad", format!("Paused: {why}")),
                None => ("warn", "Paused".to_owned()),
            };
        }
        match self.stats {
            Some(s) if s.pending > 0 && s.last_error.is_some() => ("warn", "Retrying".to_owned()),
            _ => ("ok", "Delivering".to_owned()),
        }
    }

    pub(super) fn pending(&self) -> i64 {
        self.stats.map_or(0, |s| s.pending)
    }

    /// "3 waiting, oldest 4 min 12 s", or "None waiting".
    pub(super) fn waiting(&self) -> String {
        match self.stats {
            Some(s) if s.pending > 0 => {
                let oldest = s
                    .oldest_pending_at
                    .map(|t| {
                        format!(
                            ", oldest {}",
                            age((Utc::now() - t).num_milliseconds() as f64 / 1000.0)
                        )
                    })
                    .unwrap_or_default();
                format!("{} waiting{oldest}", s.pending)
            }
            _ => "None waiting".to_owned(),
        }
    }

    pub(super) fn dead(&self) -> i64 {
        self.stats.map_or(0, |s| s.dead)
    }
}

/// The secret's rotation state, in words.
pub(super) fn secret_state(p: &Partner) -> String {
    match p.previous_secret_expires_at {
        Some(until) if until > Utc::now() => format!(
            "Rotated: the previous secret keeps being signed alongside until {}",
            when_at(until)
        ),
        Some(until) => format!(
            "Rotated; only the current secret signs since {}",
            when_at(until)
        ),
        None => "One secret, never rotated".to_owned(),
    }
}

/// The tenant's partners and their delivery counts, in one transaction.
pub(super) async fn load(
    state: &AppState,
    session: &Session,
) -> Result<(Vec<Partner>, HashMap<uuid::Uuid, PartnerStats>), super::PageError> {
    let tenant_id = session.caller.tenant_id;
    let mut tx = crate::db::begin_for_tenant(&state.db, tenant_id).await?;
    let list = partners::list(&mut tx, tenant_id).await?;
    let stats = deliveries::stats(&mut tx, tenant_id).await?;
    tx.commit().await?;
    let stats = stats
        .partners
        .into_iter()
        .map(|s| (s.partner_id, s))
        .collect();
    Ok((list, stats))
}

/// `GET /admin/partners`
pub(crate) async fn list(
    State(state): State<AppState>,
    Viewer(session): Viewer,
    done: Result<Query<Done>, QueryRejection>,
) -> PageResult {
    let done = done.ok().map(|Query(d)| d);
    render_list(&state, &session, done.as_ref(), &NewForm::default(), None).await
}

async fn render_list(
    state: &AppState,
    session: &Session,
    done: Option<&Done>,
    form: &NewForm,
    refusal: Option<&Refusal>,
) -> PageResult {
    let tenant = tenant_of(state, &session.caller).await?;
    let (list, stats) = load(state, session).await?;
    let mut b = String::new();
    let _ = list_page(&mut b, session, &tenant, &list, &stats, done, form, refusal);
    let status = refusal.map_or(StatusCode::OK, |r| r.status);
    Ok(html(status, shell("Partners", &b)))
}

#[allow(clippy::too_many_arguments)]
fn list_page(
    b: &mut String,
    session: &Session,
    tenant: &Tenant,
    list: &[Partner],
    stats: &HashMap<Uuid, PartnerStats>,
    done: Option<&Done>,
    form: &NewForm,
    refusal: Option<&Refusal>,
) -> fmt::Result {
    page_start(b, session, &tenant.name, Section::Partners)?;
    b.push_str(
        "<h2>Partners</h2><p class=\"meta\">Partners receive our events as signed webhooks: \
         the event types they subscribe to, each signed with their secret.</p>",
    );
    if let Some(Done {
        done: Some(what),
        name: Some(name),
        delivered,
        dead,
    }) = done
    {
        if what == "deleted" {
            let records = delivered.unwrap_or(0) + dead.unwrap_or(0);
            notice(
                b,
                true,
                &format!(
                    "Deleted {name}{}.",
                    match records {
                        0 => String::new(),
                        1 => " and its one delivery record".to_owned(),
                        n => format!(" and its {n} delivery records"),
                    }
                ),
                &[],
            )?;
        }
    }
    if let Some(r) = refusal {
        notice(
            b,
            false,
            &r.message,
            &r.others(&["name", "url", "event_types"]),
        )?;
    }
    let error = |f: &str| refusal.and_then(|r| r.field(f));

    b.push_str(
        "<section class=\"panel\" aria-labelledby=\"add-partner\">\
         <h3 id=\"add-partner\">Add a partner</h3>\
         <form method=\"post\" action=\"/admin/partners\" id=\"create-partner\">",
    );
    write_fields(b, &session.csrf)?;
    b.push_str("<div class=\"row\">");
    input(
        b,
        &Field::text("name", "Name", &form.name)
            .error(error("name"))
            .attrs("required maxlength=\"200\" autocomplete=\"off\""),
    )?;
    input(
        b,
        &Field::text("url", "Endpoint URL", &form.url)
            .error(error("url"))
            .hint("https://…, where they receive our events.")
            .attrs("required inputmode=\"url\" autocomplete=\"off\" spellcheck=\"false\""),
    )?;
    input(
        b,
        &Field::text("event_types", "Subscribed to", &form.event_types)
            .error(error("event_types"))
            .hint(TYPES_HINT)
            .attrs("required autocomplete=\"off\" spellcheck=\"false\""),
    )?;
    b.push_str(
        "<div class=\"field submit\"><button type=\"submit\" id=\"create-partner-submit\">\
         Add partner</button></div></div>\
         <p class=\"hint\">Holdfast makes their signing secret and shows it to you once, on the \
         next page.</p></form></section>",
    );

    write!(
        b,
        "<h3>Partners ({})</h3><table id=\"partners\"><thead><tr><th scope=\"col\">Name</th>\
         <th scope=\"col\">URL</th><th scope=\"col\">Subscribed to</th>\
         <th scope=\"col\">Sending</th><th scope=\"col\">Waiting</th>\
         <th scope=\"col\" class=\"num\">Dead letters</th><th scope=\"col\">Secret</th>\
         <th scope=\"col\">Actions</th></tr></thead><tbody>",
        list.len()
    )?;
    if list.is_empty() {
        b.push_str("<tr><td colspan=\"8\">No partners yet: add one above.</td></tr>");
    }
    for p in list {
        let row = Row {
            partner: p,
            stats: stats.get(&p.id),
        };
        let (class, sending) = row.sending();
        let name = Escaped(&p.name);
        write!(
            b,
            "<tr id=\"partner-{id}\"{}><td><a href=\"/admin/partners/{id}\">{name}</a></td>\
             <td class=\"err\">{}</td><td>{}</td><td class=\"{class}\">{}</td><td>{}</td>\
             <td class=\"num{}\">{}</td><td>{}</td><td class=\"actions\">",
            if p.enabled { "" } else { " class=\"inactive\"" },
            Escaped(&p.url),
            Escaped(&p.event_types.join(", ")),
            Escaped(&sending),
            Escaped(&row.waiting()),
            if row.dead() > 0 { " bad" } else { "" },
            row.dead(),
            Escaped(&secret_state(p)),
            id = p.id,
        )?;
        enabled_form(b, session, p, "list")?;
        test_form(b, session, p)?;
        b.push_str("</td></tr>");
    }
    b.push_str(
        "</tbody></table><p class=\"hint\">Choose a name to change the URL or subscriptions, \
         rotate the secret or delete the partner.</p>",
    );
    page_end(b);
    Ok(())
}

/// The one-button form that pauses or enables a partner. `back` is where
/// the answer goes: `list`, or the partner's page.
pub(super) fn enabled_form(
    b: &mut String,
    session: &Session,
    p: &Partner,
    back: &str,
) -> fmt::Result {
    write!(
        b,
        "<form class=\"inline\" method=\"post\" action=\"/admin/partners/{}/enabled\">",
        p.id
    )?;
    write_fields(b, &session.csrf)?;
    let (value, label, class, id) = if p.enabled {
        ("false", "Pause", "secondary", "pause")
    } else {
        ("true", "Enable", "", "enable")
    };
    write!(
        b,
        "<input type=\"hidden\" name=\"enabled\" value=\"{value}\">\
         <input type=\"hidden\" name=\"back\" value=\"{}\">\
         <button type=\"submit\" id=\"{id}-{pid}\" class=\"{class}\">{label}\
         <span class=\"vh\"> {}</span></button></form>",
        Escaped(back),
        Escaped(&p.name),
        pid = p.id,
    )
}

pub(super) fn test_form(b: &mut String, session: &Session, p: &Partner) -> fmt::Result {
    write!(
        b,
        "<form class=\"inline\" method=\"post\" action=\"/admin/partners/{id}/test-event\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <button type=\"submit\" id=\"test-{id}\" class=\"secondary\">Send test event\
         <span class=\"vh\"> to {}</span></button></form>",
        Escaped(&session.csrf),
        Escaped(&p.name),
        id = p.id,
    )
}

/// `POST /admin/partners`
pub(crate) async fn create(State(state): State<AppState>, write: Write) -> PageResult {
    let form = NewForm {
        name: write.text("name"),
        url: write.text("url"),
        event_types: write.text("event_types"),
    };
    let checked = NewPartner::check(
        &form.name,
        form.url.trim(),
        parse_types(&form.event_types),
        state.allow_private_targets,
    )
    .await;
    let new = match checked {
        Ok(new) => new,
        Err(crate::error::Error::Problem(p)) => {
            let refusal = Refusal::from_problem(&p);
            return render_list(&state, &write.session, None, &form, Some(&refusal)).await;
        }
        Err(e) => return Err(e.into()),
    };
    let secret = crate::auth::new_webhook_secret();
    let tenant_id = write.session.caller.tenant_id;
    let outcome = page_write!(
        state,
        &write,
        |tx| created(&mut tx, tenant_id, &new, &secret),
        redact = forget_secret
    );
    match reply::<Shown>(&outcome)? {
        Reply::Done(shown) => {
            let tenant = tenant_of(&state, &write.session.caller).await?;
            let what = format!("Added {}.", shown.partner.name);
            Ok(secret_page(&write.session, &tenant, &shown, &what, false))
        }
        Reply::Refused(refusal) => {
            render_list(&state, &write.session, None, &form, Some(&refusal)).await
        }
    }
}

/// A partner and its new secret, as a write's answer (the secret null in
/// the stored copy).
#[derive(Deserialize)]
pub(super) struct Shown {
    secret: Option<String>,
    pub(super) partner: Partner,
}

async fn created(
    tx: &mut sqlx::PgConnection,
    tenant_id: Uuid,
    new: &NewPartner,
    secret: &str,
) -> Result<engine::Done, crate::error::Error> {
    let partner = master::create_in_tx(tx, tenant_id, new, secret).await?;
    engine::Done::created(json!({"secret": secret, "partner": partner}))
}

/// The one page a signing secret is ever on; or, for a replay (the same
/// form sent again), the page that says it cannot be shown again.
pub(super) fn secret_page(
    session: &Session,
    tenant: &Tenant,
    shown: &Shown,
    what: &str,
    rotated: bool,
) -> Response {
    let mut b = String::new();
    let _ = secret_body(&mut b, session, tenant, shown, what, rotated);
    html(StatusCode::OK, shell("Signing secret", &b))
}

fn secret_body(
    b: &mut String,
    session: &Session,
    tenant: &Tenant,
    shown: &Shown,
    what: &str,
    rotated: bool,
) -> fmt::Result {
    let p = &shown.partner;
    let name = Escaped(&p.name);
    page_start(b, session, &tenant.name, Section::Partners)?;
    write!(b, "<h2>Signing secret for {name}</h2>")?;
    match &shown.secret {
        Some(secret) => {
            notice(b, true, what, &[])?;
            write!(
                b,
                "<div class=\"panel\" id=\"secret-panel\"><p>{name} checks that our events are \
                 ours with this secret. Give it to them over a channel you trust.</p>\
                 <label for=\"new-secret\">Signing secret (select and copy)</label>\
                 <input type=\"text\" id=\"new-secret\" class=\"secret\" value=\"{}\" readonly \
                 autofocus spellcheck=\"false\" autocomplete=\"off\" \
                 aria-describedby=\"new-secret-hint\">\
                 <span class=\"hint\" id=\"new-secret-hint\">Click into the box, select all of \
                 it (Ctrl+A, or ⌘A on a Mac) and copy it (Ctrl+C or ⌘C).</span>\
                 <p><strong>Copy it now: it will not be shown again.</strong> No page and no \
                 API shows it after this one; if it is lost, rotate the secret.</p>",
                Escaped(secret)
            )?;
            match p.previous_secret_expires_at {
                Some(until) if rotated => write!(
                    b,
                    "<p id=\"overlap\">The previous secret keeps being signed alongside until \
                     {}: until then every event carries both signatures, so {name} can switch \
                     to the new secret at their own pace. After that only the new one signs.</p>",
                    Escaped(&when_at(until))
                )?,
                _ => {}
            }
            b.push_str("</div>");
        }
        None => {
            notice(
                b,
                false,
                "This form had been sent already (twice in a row, or again from the browser), \
                 so nothing new was done, and the secret cannot be shown again.",
                &[],
            )?;
            write!(
                b,
                "<div class=\"panel\"><p>The secret was shown once, on the first answer. If \
                 nobody copied it, rotate the secret of {name} from its page: a new one is \
                 made and shown to you once.</p></div>"
            )?;
        }
    }
    write!(
        b,
        "<p class=\"actions\"><a href=\"/admin/partners/{}\">Go to {name}</a>\
         <a href=\"/admin/partners\">Back to all partners</a></p>",
        p.id
    )?;
    page_end(b);
    Ok(())
}

pub(super) fn no_such_partner() -> Response {
    message_page(
        StatusCode::NOT_FOUND,
        "No such partner",
        "There is no such partner in your tenant (it may have been deleted). Go back to the \
         list of partners.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_are_typed_with_commas_or_spaces() {
        assert_eq!(
            parse_types(" order.*, invoice.paid  sku.ats_changed,,"),
            vec!["order.*", "invoice.paid", "sku.ats_changed"]
        );
        assert!(parse_types(" , ").is_empty());
    }
}
