//! The dashboard's inbound part: events providers sent that we refused
//! (with the reason and what they sent), and invoices whose payments do not
//! match their amount.

use std::fmt::{self, Write};

use super::form::money;
use super::html::{when_at, Escaped};
use crate::db::inbound_events::{InboundEvent, PaymentMismatch};

/// How much of a refused body the page shows.
const BODY_CHARS: usize = 300;

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
        let why = e
            .refusal
            .as_ref()
            .and_then(|p| p["detail"].as_str().or(p["title"].as_str()))
            .unwrap_or("");
        let body: String = e.body.chars().take(BODY_CHARS).collect();
        write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"err\">{}</td><td><code>{}{}</code></td></tr>",
            Escaped(&when_at(e.received_at)),
            Escaped(&e.provider),
            Escaped(&e.event_id),
            Escaped(e.event_type.as_deref().unwrap_or("–")),
            Escaped(why),
            Escaped(&body),
            if e.body.chars().count() > BODY_CHARS { "…" } else { "" }
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
