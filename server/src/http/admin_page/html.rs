//! The page's HTML: the shell and its style sheet, the sign-in form, the
//! dashboard, message pages, and the escaping every interpolated value goes
//! through. Every answer carries the same strict headers (no scripts, no
//! framing, no caching).

use std::collections::HashMap;
use std::fmt::{self, Display, Write};

use axum::http::header::{
    CACHE_CONTROL, CONTENT_TYPE, LOCATION, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::handlers::Notice;
use super::session::{login_csrf, session_cookie_named, set_cookie, Session, LOGIN_COOKIE};
use crate::auth::Caller;
use crate::db::deliveries::{self, Delivery, PartnerStats};
use crate::db::partners;

/// Rows per table on the page; the JSON routes page through the rest.
pub(super) const ROWS: i64 = 100;

/// Scripts: none. Styles: the one inline sheet. Forms post only to us, and
/// no other site may frame the page (its buttons change things).
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// Everything the operator's dashboard shows, loaded before rendering starts.
pub(super) struct Dashboard<'a> {
    pub(super) session: &'a Session,
    pub(super) tenant_name: String,
    pub(super) notice: Option<Notice>,
    pub(super) stats: deliveries::Stats,
    pub(super) partners: HashMap<Uuid, partners::Partner>,
    pub(super) dead: Vec<Delivery>,
    pub(super) pending: Vec<Delivery>,
}

pub(super) fn redirect(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(LOCATION, v);
    }
    r
}

pub(super) fn forged() -> Response {
    message_page(
        StatusCode::FORBIDDEN,
        "Form rejected",
        "That form did not carry this session's security token (it may be from an older \
         page, or from another site). Nothing was changed. Go back to the page, reload it \
         and try again.",
    )
}

pub(super) fn bad_form() -> Response {
    message_page(
        StatusCode::BAD_REQUEST,
        "Bad form",
        "The form could not be read. Go back to the page, reload it and try again.",
    )
}

pub(super) fn not_an_operator(caller: &Caller) -> Response {
    message_page(
        StatusCode::FORBIDDEN,
        "Operators only",
        &format!(
            "You are signed in as {} ({}), and this page is for operators.",
            caller.display_name,
            caller.role.as_str().replace('_', " ")
        ),
    )
}

/// An HTML answer with the headers every page carries.
fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Pages carry CSRF tokens and tenant data: never cache them anywhere.
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    r
}

/// HTML-escapes text for element content and double-quoted attributes.
struct Escaped<'a>(&'a str);

impl Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
header{display:flex;gap:1em;align-items:center;padding:.6em 1.2em;background:#1d3b53;color:#fff}
header h1{font-size:1.1em;margin:0;flex:1}
main{padding:1em 1.2em;max-width:1400px}
.cards{display:flex;gap:1em;flex-wrap:wrap}
.card{background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:.6em 1em;min-width:10em}
.card b{display:block;font-size:1.6em}
table{border-collapse:collapse;width:100%;background:#fff;margin-bottom:1.5em}
th,td{border:1px solid #d8dde3;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#eef1f4}
td.err{max-width:40em;overflow-wrap:anywhere;font-family:ui-monospace,monospace;font-size:.9em}
.ok{color:#1a7f37}.bad{color:#b42318;font-weight:600}.warn{color:#9a6700}
.notice{background:#e8f4ea;border:1px solid #b7dcbf;padding:.5em 1em;border-radius:6px}
.notice.bad{background:#fdecea;border-color:#f5c2c0}
form.inline{display:inline;margin:0}
label{display:block;margin:.6em 0 .2em}
input[type=text],input[type=email],input[type=password]{width:20em;padding:.3em}
.box{max-width:30em;margin:3em auto;background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:1.5em}
";

fn shell(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{} · Holdfast</title><style>{STYLE}</style></head>\n<body>{body}</body></html>\n",
        Escaped(title)
    )
}

pub(super) fn message_page(status: StatusCode, title: &str, message: &str) -> Response {
    let body = format!(
        "<div class=\"box\"><h1>{}</h1><p>{}</p><p><a href=\"/admin\">Back to the operator page</a></p></div>",
        Escaped(title),
        Escaped(message)
    );
    html(status, shell(title, &body))
}

/// The sign-in form, with a fresh double-submit token in field and cookie.
pub(super) fn login_page(
    status: StatusCode,
    error: Option<&str>,
    tenant: &str,
    email: &str,
    headers: &HeaderMap,
) -> Response {
    let csrf = login_csrf();
    let error = error
        .map(|e| format!("<p class=\"notice bad\">{}</p>", Escaped(e)))
        .unwrap_or_default();
    let body = format!(
        "<div class=\"box\"><h1>Holdfast operator sign-in</h1>{error}\
         <form method=\"post\" action=\"/admin/login\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label for=\"tenant\">Tenant</label><input type=\"text\" id=\"tenant\" name=\"tenant\" value=\"{}\" required autocomplete=\"organization\">\
         <label for=\"email\">Email</label><input type=\"email\" id=\"email\" name=\"email\" value=\"{}\" required autocomplete=\"username\">\
         <label for=\"password\">Password</label><input type=\"password\" id=\"password\" name=\"password\" required autocomplete=\"current-password\">\
         <p><button type=\"submit\">Sign in</button></p></form></div>",
        Escaped(tenant),
        Escaped(email)
    );
    let mut r = html(status, shell("Sign in", &body));
    // An hour to fill in the form.
    set_cookie(
        &mut r,
        &session_cookie_named(LOGIN_COOKIE, &csrf, 3600, headers),
    );
    r
}

/// The operator's dashboard as a whole page.
pub(super) fn dashboard_page(view: &Dashboard<'_>) -> Response {
    let mut b = String::new();
    // Writing into a String cannot fail.
    let _ = dashboard(&mut b, view);
    html(StatusCode::OK, shell("Operator", &b))
}

fn dashboard(b: &mut String, view: &Dashboard<'_>) -> fmt::Result {
    let Dashboard {
        session,
        tenant_name,
        notice,
        stats,
        partners,
        dead,
        pending,
    } = view;
    let csrf = &session.csrf;
    write!(
        b,
        "<header><h1>Holdfast operator · {}</h1><span>{}</span>\
         <form class=\"inline\" method=\"post\" action=\"/admin/logout\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <button type=\"submit\">Sign out</button></form></header><main>",
        Escaped(tenant_name),
        Escaped(&session.caller.display_name),
        Escaped(csrf)
    )?;
    if let Some(n) = notice {
        if let Some(id) = n.requeued {
            write!(
                b,
                "<p class=\"notice\">Delivery {id} is pending again and due now.</p>"
            )?;
        }
        if let Some(id) = n.not_requeued {
            write!(
                b,
                "<p class=\"notice bad\">Delivery {id} was not requeued: it was already \
                 delivered, or is not one of yours.</p>"
            )?;
        }
    }
    write!(
        b,
        "<section class=\"cards\">\
         <div class=\"card\">Backlog<b>{}</b>events and deliveries waiting</div>\
         <div class=\"card\">Oldest pending<b>{}</b>how long it has waited</div>\
         <div class=\"card\">Dead letters<b class=\"{}\">{}</b>need an operator</div>\
         </section>",
        stats.backlog,
        stats.oldest_pending_age_seconds.map_or("–".to_owned(), age),
        if stats.dead_letters > 0 { "bad" } else { "ok" },
        stats.dead_letters
    )?;

    write!(
        b,
        "<h2>Partners ({})</h2><table><tr><th>Partner</th><th>Health</th><th>URL</th>\
         <th>Events</th><th>Pending</th><th>Dead</th><th>Delivered</th>\
         <th>Oldest pending</th><th>Last delivered</th><th>Last error</th></tr>",
        stats.partners.len()
    )?;
    if stats.partners.is_empty() {
        b.push_str("<tr><td colspan=\"10\">No partners yet.</td></tr>");
    }
    for p in &stats.partners {
        let info = partners.get(&p.partner_id);
        let (class, health) = health(p);
        write!(
            b,
            "<tr><td>{}</td><td class=\"{class}\">{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"err\">{}</td></tr>",
            Escaped(&p.name),
            Escaped(&health),
            Escaped(info.map_or("", |i| i.url.as_str())),
            Escaped(&info.map(|i| i.event_types.join(", ")).unwrap_or_default()),
            p.pending,
            p.dead,
            p.delivered,
            Escaped(&when(p.oldest_pending_at)),
            Escaped(&when(p.last_delivered_at)),
            Escaped(p.last_error.as_deref().unwrap_or(""))
        )?;
    }
    b.push_str("</table>");

    deliveries_table(b, "Dead letters", dead, csrf, "Requeue")?;
    deliveries_table(b, "Pending", pending, csrf, "Retry now")?;
    b.push_str("<p><a href=\"/admin\">Refresh</a></p></main>");
    Ok(())
}

fn deliveries_table(
    b: &mut String,
    title: &str,
    rows: &[Delivery],
    csrf: &str,
    button: &str,
) -> fmt::Result {
    write!(
        b,
        "<h2>{} ({}{})</h2><table><tr><th>Id</th><th>Partner</th><th>Event</th><th>Type</th>\
         <th>Attempts</th><th>Last status</th><th>Last error</th><th>Next attempt</th>\
         <th>Since</th><th></th></tr>",
        Escaped(title),
        rows.len(),
        if rows.len() as i64 == ROWS {
            ", newest shown"
        } else {
            ""
        }
    )?;
    if rows.is_empty() {
        b.push_str("<tr><td colspan=\"10\">None.</td></tr>");
    }
    for d in rows {
        write!(
            b,
            "<tr><td>{id}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"err\">{}</td><td>{}</td><td>{}</td><td>\
             <form class=\"inline\" method=\"post\" action=\"/admin/deliveries/{id}/requeue\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\">{}</button></form></td></tr>",
            Escaped(&d.partner_name),
            Escaped(&d.event_id),
            Escaped(&d.event_type),
            d.attempts,
            d.last_status.map_or("–".to_owned(), |s| s.to_string()),
            Escaped(d.last_error.as_deref().unwrap_or("")),
            Escaped(&when(
                Some(d.next_attempt_at).filter(|_| d.state == "pending")
            )),
            Escaped(&when(d.dead_lettered_at.or(Some(d.created_at)))),
            Escaped(csrf),
            Escaped(button),
            id = d.id,
        )?;
    }
    b.push_str("</table>");
    Ok(())
}

fn health(p: &PartnerStats) -> (&'static str, String) {
    if !p.enabled {
        return match &p.paused_reason {
            Some(why) => ("bad", format!("paused: {why}")),
            None => ("warn", "disabled".to_owned()),
        };
    }
    if p.dead > 0 {
        ("bad", format!("{} dead letter(s)", p.dead))
    } else if p.pending > 0 && p.last_error.is_some() {
        ("warn", "retrying".to_owned())
    } else {
        ("ok", "healthy".to_owned())
    }
}

fn when(t: Option<DateTime<Utc>>) -> String {
    t.map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_else(|| "–".to_owned())
}

/// "3 min 12 s", "2 h 5 min": how long, for people.
fn age(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_everything_that_could_open_markup() {
        assert_eq!(
            Escaped("<script>alert('x') & \"y\"</script>").to_string(),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
    }

    #[test]
    fn ages_read_like_people_say_them() {
        assert_eq!(age(42.7), "42 s");
        assert_eq!(age(192.0), "3 min 12 s");
        assert_eq!(age(7500.0), "2 h 5 min");
        assert_eq!(age(97200.0), "1 d 3 h");
    }
}
