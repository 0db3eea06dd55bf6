//! One partner's page in the Partners section: change its URL and
//! subscriptions, pause or enable it, send it a test event (its answer at
//! the top of the page), rotate its secret and delete it. Each refusal
//! shows the page again with the reason in words and what was typed kept.
//!
//! "Send test event" carries the CSRF token but no idempotency key, on
//! purpose: it changes nothing in the database, sending it again sends
//! another test (which is what a second click means), and a key would hold
//! its transaction open across the partner's HTTP call, which the relay
//! never does either.

use std::fmt::{self, Write as _};

use axum::extract::rejection::{FormRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Form;
use chrono::Utc;
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use super::form::{input, url_encode, write_fields, Field};
use super::handlers::{tenant_of, Tenant};
use super::html::{forged, html, notice, page_end, page_start, redirect, shell, Escaped, Section};
use super::partners::{
    enabled_form, forget_secret, load, no_such_partner, parse_types, secret_page, secret_state,
    test_form, Done, EditForm, Row, Shown, TYPES_HINT,
};
use super::session::{constant_time_eq, Session};
use super::write::{field_error, page_write, reply, Refusal, Reply, Viewer, Write};
use super::PageResult;
use crate::db::partners::Partner;
use crate::engine;
use crate::master::partners::{self as master, PartnerChange, Removed};
use crate::relay::test_event::TestResult;
use crate::AppState;

/// `GET /admin/partners/{id}`
pub(crate) async fn edit(
    State(state): State<AppState>,
    Viewer(session): Viewer,
    id: Result<Path<Uuid>, PathRejection>,
    done: Result<Query<Done>, QueryRejection>,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_partner());
    };
    let done = done.ok().map(|Query(d)| d);
    let view = PartnerView {
        done: done.as_ref(),
        ..PartnerView::default()
    };
    render_partner(&state, &session, id, view).await
}

/// What the partner's page shows besides the partner.
#[derive(Default)]
struct PartnerView<'a> {
    done: Option<&'a Done>,
    form: Option<EditForm>,
    refusal: Option<&'a Refusal>,
    test: Option<&'a TestResult>,
}

async fn render_partner(
    state: &AppState,
    session: &Session,
    id: Uuid,
    view: PartnerView<'_>,
) -> PageResult {
    let tenant = tenant_of(state, &session.caller).await?;
    let (list, stats) = load(state, session).await?;
    let Some(partner) = list.iter().find(|p| p.id == id) else {
        return Ok(no_such_partner());
    };
    let row = Row {
        partner,
        stats: stats.get(&id),
    };
    let mut b = String::new();
    let _ = partner_page(&mut b, session, &tenant, &row, &view);
    let status = view.refusal.map_or(StatusCode::OK, |r| r.status);
    Ok(html(status, shell(&partner.name, &b)))
}

fn partner_page(
    b: &mut String,
    session: &Session,
    tenant: &Tenant,
    row: &Row<'_>,
    view: &PartnerView<'_>,
) -> fmt::Result {
    let p = row.partner;
    let name = Escaped(&p.name);
    page_start(b, session, &tenant.name, Section::Partners)?;
    let (class, sending) = row.sending();
    write!(
        b,
        "<p><a href=\"/admin/partners\">← All partners</a></p><h2>{name}</h2>\
         <p class=\"meta\"><span class=\"{class}\" id=\"sending\">{}</span> · {} · {} dead \
         letter{}</p>",
        Escaped(&sending),
        Escaped(&row.waiting()),
        row.dead(),
        if row.dead() == 1 { "" } else { "s" },
    )?;
    if let Some(test) = view.test {
        test_result(b, p, test)?;
    }
    if let Some(text) = view.done.and_then(|d| done_text(d, &p.name)) {
        notice(b, true, &text, &[])?;
    }
    if let Some(r) = view.refusal {
        notice(b, false, &r.message, &r.others(&["url", "event_types"]))?;
    }
    let error = |f: &str| view.refusal.and_then(|r| r.field(f));
    let form = view.form.as_ref();

    write!(
        b,
        "<section class=\"panel\" aria-labelledby=\"endpoint\"><h3 id=\"endpoint\">Endpoint and \
         subscriptions</h3><form method=\"post\" action=\"/admin/partners/{}\" \
         id=\"edit-partner\">",
        p.id
    )?;
    write_fields(b, &session.csrf)?;
    let types = p.event_types.join(", ");
    b.push_str("<div class=\"row\">");
    input(
        b,
        &Field::text("url", "Endpoint URL", form.map_or(&p.url, |f| &f.url))
            .error(error("url"))
            .attrs("required inputmode=\"url\" autocomplete=\"off\" spellcheck=\"false\""),
    )?;
    input(
        b,
        &Field::text(
            "event_types",
            "Subscribed to",
            form.map_or(&types, |f| &f.event_types),
        )
        .error(error("event_types"))
        .hint(TYPES_HINT)
        .attrs("required autocomplete=\"off\" spellcheck=\"false\""),
    )?;
    b.push_str(
        "<div class=\"field submit\"><button type=\"submit\" id=\"save-partner\">Save changes\
         </button></div></div></form></section>",
    );

    b.push_str(
        "<section class=\"panel\" aria-labelledby=\"sending-title\">\
         <h3 id=\"sending-title\">Sending</h3>",
    );
    if p.enabled {
        write!(
            b,
            "<p>Events for {name} are being sent. Pausing holds them (nothing is lost): they \
             wait until you enable {name} again.</p>"
        )?;
    } else {
        write!(
            b,
            "<p>{name} is paused{}: its events are kept and wait. Enabling sends them, oldest \
             first. Send a test event first to check the endpoint is back.</p>",
            match &p.paused_reason {
                Some(why) => format!(" (by the relay: {})", Escaped(why)),
                None => String::new(),
            }
        )?;
    }
    enabled_form(b, session, p, "partner")?;
    b.push(' ');
    test_form(b, session, p)?;
    b.push_str(
        "<p class=\"hint\">A test event is one signed <code>holdfast.test</code> event, sent \
         now to this partner only, whatever it subscribes to. It is not a business event: it is \
         not retried and no other partner receives it.</p></section>",
    );

    write!(
        b,
        "<section class=\"panel\" aria-labelledby=\"secret-title\">\
         <h3 id=\"secret-title\">Signing secret</h3><p id=\"secret-state\">{}.</p>\
         <form method=\"post\" action=\"/admin/partners/{}/rotate-secret\" id=\"rotate-form\">",
        Escaped(&secret_state(p)),
        p.id
    )?;
    write_fields(b, &session.csrf)?;
    let overlapping = p
        .previous_secret_expires_at
        .is_some_and(|until| until > Utc::now());
    write!(
        b,
        "<p>Rotating makes a new secret, shown to you once. The current one keeps being signed \
         alongside for {} hours, so {name} can switch at their own pace.{}</p>\
         <button type=\"submit\" id=\"rotate-secret\" class=\"secondary\">Rotate the secret\
         </button></form></section>",
        master::ROTATION_GRACE_HOURS,
        if overlapping {
            " A rotation is still overlapping: rotating again stops signing with the secret \
             from before it at once, so do it only if that one is already retired on their side."
        } else {
            ""
        }
    )?;

    write!(
        b,
        "<section class=\"panel\" aria-labelledby=\"delete-title\">\
         <h3 id=\"delete-title\">Delete</h3>\
         <form method=\"post\" action=\"/admin/partners/{}/delete\" id=\"delete-form\">",
        p.id
    )?;
    write_fields(b, &session.csrf)?;
    let pending = row.pending();
    if pending > 0 {
        write!(
            b,
            "<p>{name} has {pending} {} waiting, so it cannot be deleted yet: a partner can be \
             deleted when nothing waits for it.</p>",
            if pending == 1 {
                "delivery"
            } else {
                "deliveries"
            }
        )?;
    } else {
        write!(
            b,
            "<p>Deleting stops all events to {name} for good, and removes its delivered and \
             dead-lettered delivery records with it. Orders' histories keep the event ids.</p>"
        )?;
    }
    write!(
        b,
        "<button type=\"submit\" id=\"delete-partner\" class=\"danger\">Delete {name}</button>\
         </form></section>"
    )?;
    page_end(b);
    Ok(())
}

fn done_text(d: &Done, name: &str) -> Option<String> {
    Some(match d.done.as_deref()? {
        "saved" => format!("Saved the changes to {name}."),
        "paused" => format!("Paused {name}: its events wait until you enable it."),
        "enabled" => format!("Enabled {name}: its waiting events are being sent."),
        _ => return None,
    })
}

/// What the partner answered to a test event, in words.
fn test_result(b: &mut String, p: &Partner, t: &TestResult) -> fmt::Result {
    write!(
        b,
        "<section class=\"panel\" id=\"test-result\" role=\"status\" \
         aria-labelledby=\"test-result-title\"><h3 id=\"test-result-title\">Test event to {}\
         </h3>",
        Escaped(&p.name)
    )?;
    match (t.status, &t.error) {
        (Some(status), _) if (200..300).contains(&status) => write!(
            b,
            "<p class=\"ok\" id=\"test-outcome\">Accepted: answered <span id=\"test-status\">HTTP \
             {status}</span> in <span id=\"test-latency\">{} ms</span>.</p>",
            t.latency_ms
        )?,
        (Some(status), _) => write!(
            b,
            "<p class=\"bad\" id=\"test-outcome\">Not accepted: answered <span \
             id=\"test-status\">HTTP {status}</span> in <span id=\"test-latency\">{} ms</span>. \
             {}</p>",
            t.latency_ms,
            match status {
                401 | 403 =>
                    "A 401 or 403 usually means their secret is not the one we sign \
                              with: give them the current one (rotate it if it is lost).",
                404 | 405 => "Check the endpoint URL with them.",
                410 => "They answer 410 Gone, which pauses real deliveries.",
                _ => "Their answer is below.",
            }
        )?,
        (None, error) => write!(
            b,
            "<p class=\"bad\" id=\"test-outcome\">No answer after <span id=\"test-latency\">{} \
             ms</span>: <span id=\"test-error\">{}</span>.</p>",
            t.latency_ms,
            Escaped(error.as_deref().unwrap_or("unknown"))
        )?,
    }
    if let Some(body) = &t.body {
        write!(
            b,
            "<p>Their answer (the first 200 characters):</p><pre id=\"test-body\">{}</pre>",
            if body.is_empty() {
                "(empty)".to_owned()
            } else {
                Escaped(body).to_string()
            }
        )?;
    }
    write!(
        b,
        "<p class=\"hint\">Sent as <code id=\"test-webhook-id\">{}</code>, signed like every \
         event.</p></section>",
        Escaped(&t.webhook_id)
    )
}

/// Runs a change to one partner from the page: `on_done` says where to go
/// after; a refusal shows the partner's page again with it in words.
async fn patch_partner(
    state: &AppState,
    write: &Write,
    id: Uuid,
    change: Result<PartnerChange, crate::error::Error>,
    form: Option<EditForm>,
    on_done: impl FnOnce(&Partner) -> String,
) -> PageResult {
    let change = match change {
        Ok(change) => change,
        Err(crate::error::Error::Problem(p)) => {
            let refusal = Refusal::from_problem(&p);
            return refused(state, write, id, form, &refusal).await;
        }
        Err(e) => return Err(e.into()),
    };
    let tenant_id = write.session.caller.tenant_id;
    let outcome = page_write!(state, write, |tx| async {
        let partner = master::patch_in_tx(&mut tx, tenant_id, id, &change).await?;
        engine::Done::ok(partner)
    });
    match reply::<Partner>(&outcome)? {
        Reply::Done(partner) => Ok(redirect(&on_done(&partner))),
        Reply::Refused(refusal) => refused(state, write, id, form, &refusal).await,
    }
}

async fn refused(
    state: &AppState,
    write: &Write,
    id: Uuid,
    form: Option<EditForm>,
    refusal: &Refusal,
) -> PageResult {
    if refusal.status == StatusCode::NOT_FOUND {
        return Ok(no_such_partner());
    }
    let view = PartnerView {
        form,
        refusal: Some(refusal),
        ..PartnerView::default()
    };
    render_partner(state, &write.session, id, view).await
}

/// `POST /admin/partners/{id}`: the URL and the subscriptions.
pub(crate) async fn update(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    write: Write,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_partner());
    };
    let form = EditForm {
        url: write.text("url"),
        event_types: write.text("event_types"),
    };
    let change = PartnerChange::check(
        None,
        Some(form.url.trim().to_owned()),
        Some(parse_types(&form.event_types)),
        state.allow_private_targets,
    )
    .await;
    patch_partner(&state, &write, id, change, Some(form), |p| {
        format!("/admin/partners/{}?done=saved", p.id)
    })
    .await
}

/// `POST /admin/partners/{id}/enabled`: pause (`enabled=false`) or enable
/// (`enabled=true`); back to the list when `back=list`.
pub(crate) async fn set_enabled(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    write: Write,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_partner());
    };
    let enabled = match write.text("enabled").as_str() {
        "true" => true,
        "false" => false,
        _ => {
            let refusal = Refusal::invalid(vec![field_error("enabled", "must be true or false")]);
            return refused(&state, &write, id, None, &refusal).await;
        }
    };
    let to_list = write.text("back") == "list";
    let change = Ok(PartnerChange {
        enabled: Some(enabled),
        ..PartnerChange::default()
    });
    patch_partner(&state, &write, id, change, None, |p| {
        if to_list {
            format!("/admin/partners#partner-{}", p.id)
        } else {
            format!(
                "/admin/partners/{}?done={}",
                p.id,
                if enabled { "enabled" } else { "paused" }
            )
        }
    })
    .await
}

/// `POST /admin/partners/{id}/rotate-secret`
pub(crate) async fn rotate_secret(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    write: Write,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_partner());
    };
    let secret = crate::auth::new_webhook_secret();
    let tenant_id = write.session.caller.tenant_id;
    let outcome = page_write!(
        state,
        &write,
        |tx| rotated(&mut tx, tenant_id, id, &secret),
        redact = forget_secret
    );
    match reply::<Shown>(&outcome)? {
        Reply::Done(shown) => {
            let tenant = tenant_of(&state, &write.session.caller).await?;
            let what = format!("Rotated the secret of {}.", shown.partner.name);
            Ok(secret_page(&write.session, &tenant, &shown, &what, true))
        }
        Reply::Refused(refusal) => refused(&state, &write, id, None, &refusal).await,
    }
}

/// `POST /admin/partners/{id}/delete`
pub(crate) async fn delete(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
    write: Write,
) -> PageResult {
    let Ok(Path(id)) = id else {
        return Ok(no_such_partner());
    };
    let tenant_id = write.session.caller.tenant_id;
    let outcome = page_write!(state, &write, |tx| async {
        let removed = master::delete_in_tx(&mut tx, tenant_id, id).await?;
        engine::Done::ok(removed)
    });
    match reply::<Removed>(&outcome)? {
        Reply::Done(r) => Ok(redirect(&format!(
            "/admin/partners?done=deleted&name={}&delivered={}&dead={}",
            url_encode(&r.name),
            r.delivered,
            r.dead
        ))),
        Reply::Refused(refusal) => refused(&state, &write, id, None, &refusal).await,
    }
}

/// The test-event form: the session's CSRF token, nothing else.
#[derive(Deserialize)]
pub(crate) struct CsrfOnly {
    #[serde(default)]
    csrf: String,
}

/// `POST /admin/partners/{id}/test-event`: sends it and shows the
/// partner's page with the answer.
pub(crate) async fn send_test_event(
    State(state): State<AppState>,
    Viewer(session): Viewer,
    id: Result<Path<Uuid>, PathRejection>,
    form: Result<Form<CsrfOnly>, FormRejection>,
) -> PageResult {
    // The token is checked before anything else is looked at.
    let Ok(Form(form)) = form else {
        return Ok(forged());
    };
    if !constant_time_eq(&session.csrf, &form.csrf) {
        return Ok(forged());
    }
    let Ok(Path(id)) = id else {
        return Ok(no_such_partner());
    };
    let result = crate::http::admin::test_event_for(&state, &session.caller, id).await?;
    let Some(result) = result else {
        return Ok(no_such_partner());
    };
    let view = PartnerView {
        test: Some(&result),
        ..PartnerView::default()
    };
    render_partner(&state, &session, id, view).await
}

async fn rotated(
    tx: &mut sqlx::PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    secret: &str,
) -> Result<engine::Done, crate::error::Error> {
    let partner = master::rotate_in_tx(tx, tenant_id, id, secret).await?;
    engine::Done::ok(json!({"secret": secret, "partner": partner}))
}
