//! The dashboard's "Relay, last hour" section: one row per partner with its
//! deliveries per minute and commit → 2xx latency as charts ([`charts`]),
//! how long its oldest waiting delivery has waited, and its state in words.
//!
//! A row that needs an operator (paused, failing, dead-lettering) carries the
//! class `alarm` (red) and says why in its Status cell, so the colour is
//! never the only sign.
//!
//! [`charts`]: super::charts

use std::fmt::{self, Write};

use super::charts;
use super::html::{age, Escaped};
use crate::db::relay_health::{PartnerHealth, Trouble, WINDOW_MINUTES};

/// Writes the section.
pub(super) fn section(b: &mut String, partners: &[PartnerHealth]) -> fmt::Result {
    b.push_str(
        "<section aria-labelledby=\"relay-health\"><h2 id=\"relay-health\">Relay, last hour</h2>",
    );
    if partners.is_empty() {
        b.push_str("<p>No partners yet, so nothing is being delivered.</p></section>");
        return Ok(());
    }
    b.push_str(
        "<table class=\"health\"><caption class=\"vh\">Each partner's deliveries over the last \
         hour</caption><thead><tr><th scope=\"col\">Partner</th><th scope=\"col\">Status</th>\
         <th scope=\"col\">Deliveries per minute</th>\
         <th scope=\"col\">Commit to 2xx, p50 <span class=\"meta\">(solid)</span> and p99 \
         <span class=\"meta\">(dashed)</span></th><th scope=\"col\">Backlog</th></tr></thead><tbody>",
    );
    for p in partners {
        let troubles = p.troubles();
        let (row, status) = if troubles.is_empty() {
            ("", "<td class=\"ok\">Healthy</td>".to_owned())
        } else {
            (
                " class=\"alarm\"",
                format!(
                    "<td class=\"bad\">Needs attention: {}</td>",
                    Escaped(&in_words(&troubles))
                ),
            )
        };
        let delivered = match p.delivered() {
            0 => String::new(),
            n => format!("<span class=\"hint\">{n} delivered</span>"),
        };
        write!(
            b,
            "<tr{row}><th scope=\"row\">{}</th>{status}<td>{}{delivered}</td>\
             <td>{}<span class=\"hint\">{}</span></td><td>{}</td></tr>",
            Escaped(&p.name),
            charts::deliveries_per_minute(&p.per_minute),
            charts::latency(&p.latency, WINDOW_MINUTES),
            Escaped(&latest_latency(p)),
            Escaped(&waiting(p.oldest_pending_age_seconds)),
        )?;
    }
    b.push_str("</tbody></table></section>");
    Ok(())
}

/// What is wrong, as one sentence fragment: "paused by an operator; 2
/// deliveries dead-lettered in the last hour".
fn in_words(troubles: &[Trouble]) -> String {
    troubles
        .iter()
        .map(|t| match t {
            Trouble::Paused { reason: Some(why) } => format!("paused by the relay ({why})"),
            Trouble::Paused { reason: None } => "paused by an operator".to_owned(),
            Trouble::DeadLettering { last_hour } => format!(
                "{} dead-lettered in the last hour",
                count(*last_hour, "delivery", "deliveries")
            ),
            Trouble::Failing {
                retrying,
                last_error,
            } => {
                let mut s = format!(
                    "failing, {} waiting to retry",
                    count(*retrying, "delivery", "deliveries")
                );
                if let Some(e) = last_error {
                    let _ = write!(s, " (last error: {e})");
                }
                s
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The newest window's figures under the latency chart.
fn latest_latency(p: &PartnerHealth) -> String {
    let latest = p.latency.last().copied().flatten();
    match (latest, p.latency.iter().any(Option::is_some)) {
        (Some(l), _) => format!(
            "last {WINDOW_MINUTES} min: p50 {}, p99 {}",
            charts::duration(l.p50_seconds),
            charts::duration(l.p99_seconds.max(l.p50_seconds))
        ),
        (None, true) => format!("nothing delivered in the last {WINDOW_MINUTES} min"),
        (None, false) => String::new(),
    }
}

/// "oldest waiting 3 min 12 s", or "nothing waiting".
fn waiting(age_seconds: Option<f64>) -> String {
    match age_seconds.filter(|s| s.is_finite()) {
        Some(s) => format!("oldest waiting {}", age(s)),
        None => "nothing waiting".to_owned(),
    }
}

fn count(n: i64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::relay_health::{Latency, MINUTES, WINDOWS};
    use uuid::Uuid;

    fn partner(name: &str) -> PartnerHealth {
        PartnerHealth {
            partner_id: Uuid::from_u128(1),
            name: name.to_owned(),
            enabled: true,
            paused_reason: None,
            per_minute: vec![0; MINUTES],
            latency: vec![None; WINDOWS],
            oldest_pending_age_seconds: None,
            retrying: 0,
            dead_last_hour: 0,
            last_error: None,
        }
    }

    #[test]
    fn a_healthy_partner_is_plain_and_a_troubled_one_red_with_words() {
        let mut healthy = partner("Quiet & Co");
        healthy.per_minute[MINUTES - 1] = 3;
        healthy.latency[WINDOWS - 1] = Some(Latency {
            delivered: 3,
            p50_seconds: 0.05,
            p99_seconds: 0.2,
        });
        let mut broken = partner("<EDI>");
        broken.enabled = false;
        broken.retrying = 2;
        broken.last_error = Some("HTTP 503".into());
        broken.dead_last_hour = 1;
        broken.oldest_pending_age_seconds = Some(192.0);
        let mut b = String::new();
        section(&mut b, &[healthy, broken]).expect("writes");
        let rows: Vec<&str> = b.split("<tr").skip(2).collect();
        assert!(
            rows[0].starts_with("><th scope=\"row\">Quiet &amp; Co"),
            "{b}"
        );
        assert!(rows[0].contains(">Healthy<"), "{b}");
        assert!(rows[0].contains("3 delivered"), "{b}");
        assert!(
            rows[0].contains("last 10 min: p50 50 ms, p99 200 ms"),
            "{b}"
        );
        assert!(rows[0].contains("nothing waiting"), "{b}");
        assert!(
            rows[1].starts_with(" class=\"alarm\"><th scope=\"row\">&lt;EDI&gt;"),
            "{b}"
        );
        assert!(
            rows[1].contains(
                "Needs attention: paused by an operator; 1 delivery dead-lettered in the last \
                 hour; failing, 2 deliveries waiting to retry (last error: HTTP 503)"
            ),
            "{b}"
        );
        assert!(rows[1].contains("oldest waiting 3 min 12 s"), "{b}");
        assert!(rows[1].contains("No deliveries in the last hour"), "{b}");
    }

    #[test]
    fn no_partners_is_said_in_words() {
        let mut b = String::new();
        section(&mut b, &[]).expect("writes");
        assert!(b.contains("No partners yet"), "{b}");
    }
}
