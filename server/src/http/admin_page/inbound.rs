//! Inbound webhooks as operators see them. The dashboard's part: events
//! providers sent that we refused (with the reason and what they sent), and
//! invoices whose payments do not match their amount. And the Inbound
//! section (`/admin/inbound`): every event in the inbox, per provider, with
//! its outcome, newest first, searchable by event id; and whether each
//! provider's inbound secret is set, and since when (never the secret).
//!
//! Redeliveries are not counted: the inbox keeps one row per event id, and
//! a redelivery is answered "duplicate" from it without a write. The page
//! says so rather than show a number it does not have.

use std::fmt::{self, Write};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::form::{input, money, select, Field};
use super::handlers::tenant_of;
use super::html::{html, page_end, page_start, shell, when_at, Escaped, Section, ROWS};
use super::session::Session;
use super::write::Viewer;
use super::PageResult;
use crate::db::begin_for_tenant;
use crate::db::inbound_events::{
    self, InboundEvent, InboundOutcome, PaymentMismatch, SecretStatus,
};
use crate::AppState;

/// How much of a refused body the page shows.
const BODY_CHARS: usize = 300;

/// The providers, as the pages name them.
const PROVIDERS: [(&str, &str); 2] = [
    ("warehouse", "Warehouse (3PL)"),
    ("payments", "Payment provider"),
];

fn provider_name(provider: &str) -> &str {
    PROVIDERS
        .iter()
        .find(|(p, _)| *p == provider)
        .map_or(provider, |(_, name)| name)
}

/// Why an event was refused, as the provider was told.
fn refusal_reason(e: &InboundEvent) -> &str {
    e.refusal
        .as_ref()
        .and_then(|p| p["detail"].as_str().or(p["title"].as_str()))
        .unwrap_or("")
}

fn body_excerpt(e: &InboundEvent) -> String {
    let mut body: String = e.body.chars().take(BODY_CHARS).collect();
    if e.body.chars().count() > BODY_CHARS {
        body.push('…');
    }
    body
}

/// `GET /admin/inbound?provider=&outcome=&event_id=`: every filter optional.
#[derive(Deserialize, Default)]
pub(crate) struct Filters {
    #[serde(default)]
    provider: String,
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    event_id: String,
}

/// `GET /admin/inbound`
pub(crate) async fn page(
    State(state): State<AppState>,
    Viewer(session): Viewer,
    filters: Result<Query<Filters>, QueryRejection>,
) -> PageResult {
    let filters = filters.map(|Query(f)| f).unwrap_or_default();
    // Unknown values filter nothing rather than fail the page.
    let provider = PROVIDERS
        .iter()
        .map(|(p, _)| *p)
        .find(|p| *p == filters.provider);
    let outcome = match filters.outcome.as_str() {
        "processed" => Some(InboundOutcome::Processed),
        "refused" => Some(InboundOutcome::Refused),
        _ => None,
    };
    let event_id = Some(filters.event_id.trim()).filter(|id| !id.is_empty());
    let tenant = tenant_of(&state, &session.caller).await?;
    let tenant_id = session.caller.tenant_id;
    let mut tx = begin_for_tenant(&state.db, tenant_id).await?;
    let events =
        inbound_events::search(&mut tx, tenant_id, provider, outcome, event_id, ROWS).await?;
    let secrets = inbound_events::secrets(&mut tx, tenant_id).await?;
    tx.commit().await?;
    let filtered = provider.is_some() || outcome.is_some() || event_id.is_some();
    let mut b = String::new();
    let _ = inbound_page(
        &mut b,
        &session,
        &tenant.name,
        &secrets,
        &filters,
        &events,
        filtered,
    );
    Ok(html(StatusCode::OK, shell("Inbound", &b)))
}

fn inbound_page(
    b: &mut String,
    session: &Session,
    tenant_name: &str,
    secrets: &[SecretStatus],
    filters: &Filters,
    events: &[InboundEvent],
    filtered: bool,
) -> fmt::Result {
    page_start(b, session, tenant_name, Section::Inbound)?;
    b.push_str(
        "<h2>Inbound</h2><p class=\"meta\">What the warehouse (3PL) and the payment provider \
         sent us, each event once, newest first, with what became of it. Events are kept for \
         the inbox's retention period, then removed.</p>",
    );
    secrets_section(b, secrets)?;
    search_form(b, filters)?;
    events_table(b, events, filtered)?;
    page_end(b);
    Ok(())
}

fn secrets_section(b: &mut String, secrets: &[SecretStatus]) -> fmt::Result {
    b.push_str(
        "<section class=\"panel\" aria-labelledby=\"secrets-title\">\
         <h3 id=\"secrets-title\">Inbound secrets</h3>\
         <table id=\"inbound-secrets\"><thead><tr><th scope=\"col\">Provider</th>\
         <th scope=\"col\">Secret</th><th scope=\"col\">Since</th></tr></thead><tbody>",
    );
    for (provider, name) in PROVIDERS {
        let status = secrets.iter().find(|s| s.provider == provider);
        match status {
            Some(s) => {
                let since = match s.first_issued_at {
                    Some(first) if first < s.issued_at => format!(
                        "Rotated: the current secret was issued {}; the first one {}",
                        when_at(s.issued_at),
                        when_at(first)
                    ),
                    Some(_) => format!("Issued {}, never rotated", when_at(s.issued_at)),
                    None => format!(
                        "The current secret was issued {} (whether it replaced an earlier one \
                         was not recorded then)",
                        when_at(s.issued_at)
                    ),
                };
                write!(
                    b,
                    "<tr id=\"secret-{provider}\"><td>{name}</td><td class=\"ok\">Set</td>\
                     <td>{}</td></tr>",
                    Escaped(&since)
                )?;
            }
            None => write!(
                b,
                "<tr id=\"secret-{provider}\"><td>{name}</td><td class=\"bad\">Not set</td>\
                 <td>Every webhook from it is refused until an operator issues a secret \
                 (<code>POST /v1/admin/inbound-secrets</code>).</td></tr>"
            )?,
        }
    }
    b.push_str(
        "</tbody></table><p class=\"hint\">The secrets themselves are shown once, to whoever \
         issues them, and never here.</p></section>",
    );
    Ok(())
}

fn search_form(b: &mut String, filters: &Filters) -> fmt::Result {
    b.push_str(
        "<form method=\"get\" action=\"/admin/inbound\" id=\"inbound-search\" role=\"search\">\
         <div class=\"row\">",
    );
    input(
        b,
        &Field::text("event_id", "Event id", &filters.event_id)
            .kind("search")
            .hint("The whole id, or how it starts.")
            .attrs("autocomplete=\"off\" spellcheck=\"false\""),
    )?;
    let providers = [("", "All providers"), PROVIDERS[0], PROVIDERS[1]];
    select(
        b,
        &Field::text("provider", "From", ""),
        &providers,
        &filters.provider,
    )?;
    select(
        b,
        &Field::text("outcome", "Outcome", ""),
        &[
            ("", "Any outcome"),
            ("processed", "Processed"),
            ("refused", "Refused"),
        ],
        &filters.outcome,
    )?;
    b.push_str(
        "<div class=\"field submit\"><button type=\"submit\" id=\"inbound-search-submit\">\
         Search</button> <a href=\"/admin/inbound\">Show all</a></div></div></form>",
    );
    Ok(())
}

fn events_table(b: &mut String, events: &[InboundEvent], filtered: bool) -> fmt::Result {
    let heading = match (events.len(), filtered) {
        (0, true) => "No events match".to_owned(),
        (0, false) => "No events received yet".to_owned(),
        (n, _) if n as i64 == ROWS => format!(
            "Showing the latest {n}{}",
            if filtered { " that match" } else { "" }
        ),
        (1, _) => format!("1 event{}", if filtered { " matches" } else { "" }),
        (n, _) => format!("{n} events{}", if filtered { " match" } else { "" }),
    };
    write!(
        b,
        "<h3 id=\"inbound-count\">{heading}</h3>\
         <table id=\"inbound-events\"><thead><tr><th scope=\"col\">Received</th>\
         <th scope=\"col\">From</th><th scope=\"col\">Event id</th><th scope=\"col\">Type</th>\
         <th scope=\"col\">Outcome</th><th scope=\"col\">What they sent</th></tr></thead><tbody>"
    )?;
    if events.is_empty() {
        b.push_str("<tr><td colspan=\"6\">None.</td></tr>");
    }
    for e in events {
        let outcome = if e.outcome == "refused" {
            format!(
                "<span class=\"bad\">Refused</span>: {}",
                Escaped(refusal_reason(e))
            )
        } else {
            "<span class=\"ok\">Processed</span>".to_owned()
        };
        write!(
            b,
            "<tr class=\"inbound-event\"><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td>\
             <td class=\"err\">{outcome}</td><td><code>{}</code></td></tr>",
            Escaped(&when_at(e.received_at)),
            Escaped(provider_name(&e.provider)),
            Escaped(&e.event_id),
            Escaped(e.event_type.as_deref().unwrap_or("–")),
            Escaped(&body_excerpt(e)),
        )?;
    }
    b.push_str(
        "</tbody></table><p class=\"hint\">A provider that sends an event again (a \
         redelivery) is answered \u{201c}duplicate\u{201d} from the first one's record, and \
         nothing changes; redeliveries are not counted, so each event appears here once. Narrow \
         the list with the search above when it shows only the latest.</p>",
    );
    Ok(())
}

pub(super) fn sections(
    b: &mut String,
    refused: &[InboundEvent],
    mismatched: &[PaymentMismatch],
) -> fmt::Result {
    write!(
        b,
        "<h2>Refused inbound events ({})</h2>\
         <p>Events from the warehouse or the payment provider that our rules refused. They were \
         answered with the reason below and changed nothing; a redelivery gets the same answer. \
         Fix the cause with the provider, who sends a new event.</p>\
         <table><tr><th>Received</th><th>From</th><th>Event</th><th>Type</th><th>Why refused</th>\
         <th>What they sent</th></tr>",
        refused.len()
    )?;
    if refused.is_empty() {
        b.push_str("<tr><td colspan=\"6\">None.</td></tr>");
    }
    for e in refused {
        write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"err\">{}</td><td><code>{}</code></td></tr>",
            Escaped(&when_at(e.received_at)),
            Escaped(&e.provider),
            Escaped(&e.event_id),
            Escaped(e.event_type.as_deref().unwrap_or("–")),
            Escaped(refusal_reason(e)),
            Escaped(&body_excerpt(e)),
        )?;
    }
    b.push_str("</table>");

    write!(
        b,
        "<h2>Payments that do not match their invoice ({})</h2>\
         <table><tr><th>Customer</th><th>Invoiced</th><th>Paid</th><th>Difference</th>\
         <th>Payments</th><th>Last payment</th></tr>",
        mismatched.len()
    )?;
    if mismatched.is_empty() {
        b.push_str(
            "<tr><td colspan=\"6\">None: every payment so far matches its invoice.</td></tr>",
        );
    }
    for m in mismatched {
        let difference = if m.amount_paid < m.amount {
            format!("{} still owed", money(m.amount - m.amount_paid))
        } else {
            format!("{} over-paid", money(m.amount_paid - m.amount))
        };
        write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"warn\">{}</td><td>{}</td><td>{}</td></tr>",
            Escaped(&m.customer_name),
            Escaped(&money(m.amount)),
            Escaped(&money(m.amount_paid)),
            Escaped(&difference),
            m.payments,
            Escaped(&m.last_payment_at.map(when_at).unwrap_or_else(|| "–".to_owned()))
        )?;
    }
    b.push_str("</table>");
    Ok(())
}
