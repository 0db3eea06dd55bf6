//! `GET /admin`: the operator's page, server-rendered HTML over the same data
//! as the JSON admin routes (backlog, oldest pending age, dead letters,
//! per-partner health) with requeue buttons. No JavaScript at all.
//!
//! Sign-in is a form (tenant, email, password) that mints an ordinary device
//! token through `db::sessions::login` and keeps it in a cookie scoped to
//! `/admin` (`HttpOnly; SameSite=Strict`, `Secure` when the request came
//! through an https proxy that says so with `X-Forwarded-Proto`; serving the
//! page over plain http beyond localhost is the operator's risk to avoid).
//!
//! CSRF: every POST carries a token in a hidden field. Signed in, it is
//! derived from the session token (SHA-256 with a domain label), so it needs
//! no server-side state or key shared between servers, and only someone who
//! can read the page (or the cookie) can know it. The sign-in form, before a
//! session exists, uses a random double-submit cookie instead, so another
//! site cannot sign a browser into an account of its choosing.
//! SameSite=Strict stops the cookies riding on cross-site requests anyway.

use std::collections::HashMap;
use std::fmt::{self, Display, Write};

use axum::extract::rejection::{FormRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_TYPE, COOKIE, LOCATION, REFERRER_POLICY, RETRY_AFTER, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Form;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use holdfast_protocol::model::Role;
use rand::RngCore;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::auth::Caller;
use crate::db::deliveries::{self, Delivery, DeliveryState, PartnerStats};
use crate::db::{begin_for_tenant, partners, sessions};
use crate::AppState;

/// The session cookie: the device token itself.
const SESSION_COOKIE: &str = "hf_admin";
/// The sign-in form's double-submit CSRF cookie.
const LOGIN_COOKIE: &str = "hf_admin_login";
/// A page session lasts a working shift; then the operator signs in again.
const SESSION_HOURS: i64 = 12;
/// What the page's device tokens are called, so their sessions can be told
/// from desk tokens (only these expire after SESSION_HOURS here).
const DEVICE_NAME: &str = "admin page (browser)";
/// Rows per table on the page; the JSON routes page through the rest.
const ROWS: i64 = 100;

/// Scripts: none. Styles: the one inline sheet. Forms post only to us, and
/// no other site may frame the page (its buttons change things).
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// A failure while rendering, logged once here: the database being
/// unavailable is a 503 page with `Retry-After` (as the API answers it),
/// anything else a bare 500 page.
pub struct PageError(anyhow::Error);

impl<E: Into<anyhow::Error>> From<E> for PageError {
    fn from(e: E) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        if let Some(cause) = crate::error::unavailable_cause(&self.0) {
            tracing::warn!(error = %cause, "admin page: the database is unavailable");
            let mut page = message_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The database is unavailable",
                "Holdfast cannot reach its database right now; try again in a moment.",
            );
            page.headers_mut().insert(
                RETRY_AFTER,
                HeaderValue::from(crate::error::UNAVAILABLE_RETRY_AFTER_SECS),
            );
            return page;
        }
        tracing::error!(error = format!("{:#}", self.0), "admin page failed");
        message_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Something went wrong",
            "The page could not be built; the error has been logged. Try again in a moment.",
        )
    }
}

type PageResult = Result<Response, PageError>;

/// A signed-in page session.
struct Session {
    caller: Caller,
    csrf: String,
}

#[derive(Deserialize)]
pub struct Notice {
    requeued: Option<i64>,
    not_requeued: Option<i64>,
}

/// `GET /admin`
pub async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    notice: Result<Query<Notice>, QueryRejection>,
) -> PageResult {
    let Some(session) = session(&state, &headers).await? else {
        return Ok(redirect("/admin/login"));
    };
    if session.caller.role != Role::Operator {
        return Ok(not_an_operator(&session.caller));
    }
    let notice = notice.ok().map(|Query(n)| n);
    render_dashboard(&state, &session, notice).await
}

/// `GET /admin/login`
pub async fn login_form(State(state): State<AppState>, headers: HeaderMap) -> PageResult {
    if session(&state, &headers).await?.is_some() {
        return Ok(redirect("/admin"));
    }
    Ok(login_page(StatusCode::OK, None, "", "", &headers))
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /admin/login`
pub async fn login(
    State(state): State<AppState>,
    crate::http::ClientAddr(addr): crate::http::ClientAddr,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> PageResult {
    let Ok(Form(form)) = form else {
        return Ok(bad_form());
    };
    let expected = cookie(&headers, LOGIN_COOKIE);
    if !expected.is_some_and(|c| !c.is_empty() && same(c, &form.csrf)) {
        return Ok(login_page(
            StatusCode::FORBIDDEN,
            Some("That sign-in form had expired or did not come from this page. Please sign in again."),
            &form.tenant,
            &form.email,
            &headers,
        ));
    }
    let outcome = match crate::http::sessions::sign_in(
        &state,
        &addr,
        form.tenant.trim(),
        &form.email,
        &form.password,
        DEVICE_NAME,
    )
    .await
    {
        Err(crate::error::Error::Problem(p))
            if p.code == holdfast_protocol::problem::ProblemCode::RateLimited =>
        {
            return Ok(login_page(
                StatusCode::TOO_MANY_REQUESTS,
                Some("Too many failed sign-ins. Wait a few minutes and try again."),
                &form.tenant,
                &form.email,
                &headers,
            ));
        }
        other => other?,
    };
    let Some((token, user, tenant)) = outcome else {
        return Ok(login_page(
            StatusCode::UNAUTHORIZED,
            Some("Wrong tenant, email or password."),
            &form.tenant,
            &form.email,
            &headers,
        ));
    };
    if user.role != Role::Operator {
        // The credentials were right, but the page is not theirs: the token
        // just minted must not outlive this answer.
        if let Some(caller) = sessions::caller_for_token(&state.db, &token).await? {
            revoke(&state, &caller).await?;
        }
        tracing::info!(tenant = %tenant.slug, user = %user.id, "admin page refused a non-operator");
        return Ok(message_page(
            StatusCode::FORBIDDEN,
            "Operators only",
            &format!(
                "{} is signed up as {}, and this page is for operators. \
                 Ask an operator of {} for help.",
                user.email,
                user.role.as_str().replace('_', " "),
                tenant.name
            ),
        ));
    }
    tracing::info!(tenant = %tenant.slug, user = %user.id, "operator signed in to the admin page");
    let mut response = redirect("/admin");
    set_cookie(
        &mut response,
        &session_cookie(&token, SESSION_HOURS * 3600, &headers),
    );
    set_cookie(
        &mut response,
        &session_cookie_named(LOGIN_COOKIE, "", 0, &headers),
    );
    Ok(response)
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /admin/logout`
pub async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> PageResult {
    let Ok(Form(form)) = form else {
        return Ok(bad_form());
    };
    let Some(session) = session(&state, &headers).await? else {
        return Ok(signed_out());
    };
    if !same(&session.csrf, &form.csrf) {
        return Ok(forged());
    }
    revoke(&state, &session.caller).await?;
    Ok(signed_out())
}

/// `POST /admin/deliveries/{id}/requeue`
pub async fn requeue(
    State(state): State<AppState>,
    headers: HeaderMap,
    id: Result<Path<i64>, PathRejection>,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> PageResult {
    let Some(session) = session(&state, &headers).await? else {
        return Ok(redirect("/admin/login"));
    };
    if session.caller.role != Role::Operator {
        return Ok(not_an_operator(&session.caller));
    }
    // The token is checked before anything else is looked at.
    let Ok(Form(form)) = form else {
        return Ok(forged());
    };
    if !same(&session.csrf, &form.csrf) {
        return Ok(forged());
    }
    let Ok(Path(id)) = id else {
        return Ok(message_page(
            StatusCode::NOT_FOUND,
            "No such delivery",
            "That is not a delivery id.",
        ));
    };
    let mut tx = begin_for_tenant(&state.db, session.caller.tenant_id).await?;
    let done = deliveries::requeue(&mut tx, session.caller.tenant_id, id).await?;
    tx.commit().await?;
    if done {
        tracing::info!(delivery = id, "delivery requeued from the admin page");
        Ok(redirect(&format!("/admin?requeued={id}")))
    } else {
        Ok(redirect(&format!("/admin?not_requeued={id}")))
    }
}

/// Revokes a page token, bound to its tenant like every request's work.
async fn revoke(state: &AppState, caller: &Caller) -> Result<(), PageError> {
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    sessions::revoke(&mut tx, caller).await?;
    tx.commit().await?;
    Ok(())
}

/// The session behind the cookie, if it is a live page session.
async fn session(state: &AppState, headers: &HeaderMap) -> Result<Option<Session>, PageError> {
    let Some(token) = cookie(headers, SESSION_COOKIE).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let Some(caller) = sessions::caller_for_token(&state.db, token).await? else {
        return Ok(None);
    };
    // Device tokens never expire on their own; a browser session should. A
    // page token past its shift is revoked so it stops working everywhere.
    let fresh: Option<bool> = sqlx::query_scalar(
        "select created_at > now() - make_interval(hours => $3)
           from device_tokens where tenant_id = $1 and id = $2 and device_name = $4",
    )
    .bind(caller.tenant_id)
    .bind(caller.token_id)
    .bind(SESSION_HOURS as i32)
    .bind(DEVICE_NAME)
    .fetch_optional(&state.db)
    .await?;
    match fresh {
        Some(true) => Ok(Some(Session {
            csrf: csrf_for(token),
            caller,
        })),
        Some(false) => {
            revoke(state, &caller).await?;
            Ok(None)
        }
        // A desk's token pasted into the cookie is not a page session.
        None => Ok(None),
    }
}

/// The signed-in CSRF token: a one-way function of the session token, so it
/// reveals nothing about it and cannot be made without it.
fn csrf_for(session_token: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"holdfast admin page csrf v1\0");
    h.update(session_token.as_bytes());
    URL_SAFE_NO_PAD.encode(h.finalize())
}

/// Compares secrets in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

fn session_cookie(token: &str, max_age: i64, headers: &HeaderMap) -> String {
    session_cookie_named(SESSION_COOKIE, token, max_age, headers)
}

fn session_cookie_named(name: &str, value: &str, max_age: i64, headers: &HeaderMap) -> String {
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    format!(
        "{name}={value}; HttpOnly; SameSite=Strict; Path=/admin; Max-Age={max_age}{}",
        if https { "; Secure" } else { "" }
    )
}

fn set_cookie(response: &mut Response, cookie: &str) {
    // Tokens are base64url and names fixed: always a valid header value.
    if let Ok(v) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(SET_COOKIE, v);
    }
}

fn redirect(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(LOCATION, v);
    }
    r
}

fn signed_out() -> Response {
    let mut r = redirect("/admin/login");
    set_cookie(
        &mut r,
        &format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/admin; Max-Age=0"),
    );
    r
}

fn forged() -> Response {
    message_page(
        StatusCode::FORBIDDEN,
        "Form rejected",
        "That form did not carry this session's security token (it may be from an older \
         page, or from another site). Nothing was changed. Go back to the page, reload it \
         and try again.",
    )
}

fn bad_form() -> Response {
    message_page(
        StatusCode::BAD_REQUEST,
        "Bad form",
        "The form could not be read. Go back to the page, reload it and try again.",
    )
}

fn not_an_operator(caller: &Caller) -> Response {
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
struct E<'a>(&'a str);

impl Display for E<'_> {
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
        E(title)
    )
}

fn message_page(status: StatusCode, title: &str, message: &str) -> Response {
    let body = format!(
        "<div class=\"box\"><h1>{}</h1><p>{}</p><p><a href=\"/admin\">Back to the operator page</a></p></div>",
        E(title),
        E(message)
    );
    html(status, shell(title, &body))
}

/// The sign-in form, with a fresh double-submit token in field and cookie.
fn login_page(
    status: StatusCode,
    error: Option<&str>,
    tenant: &str,
    email: &str,
    headers: &HeaderMap,
) -> Response {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let csrf = URL_SAFE_NO_PAD.encode(bytes);
    let error = error
        .map(|e| format!("<p class=\"notice bad\">{}</p>", E(e)))
        .unwrap_or_default();
    let body = format!(
        "<div class=\"box\"><h1>Holdfast operator sign-in</h1>{error}\
         <form method=\"post\" action=\"/admin/login\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label for=\"tenant\">Tenant</label><input type=\"text\" id=\"tenant\" name=\"tenant\" value=\"{}\" required autocomplete=\"organization\">\
         <label for=\"email\">Email</label><input type=\"email\" id=\"email\" name=\"email\" value=\"{}\" required autocomplete=\"username\">\
         <label for=\"password\">Password</label><input type=\"password\" id=\"password\" name=\"password\" required autocomplete=\"current-password\">\
         <p><button type=\"submit\">Sign in</button></p></form></div>",
        E(tenant),
        E(email)
    );
    let mut r = html(status, shell("Sign in", &body));
    // An hour to fill in the form.
    set_cookie(
        &mut r,
        &session_cookie_named(LOGIN_COOKIE, &csrf, 3600, headers),
    );
    r
}

async fn render_dashboard(
    state: &AppState,
    session: &Session,
    notice: Option<Notice>,
) -> PageResult {
    let tenant_id = session.caller.tenant_id;
    let mut tx = begin_for_tenant(&state.db, tenant_id).await?;
    let tenant_name: String = sqlx::query_scalar("select name from tenants where id = $1")
        .bind(tenant_id)
        .fetch_one(&mut *tx)
        .await?;
    let stats = deliveries::stats(&mut tx, tenant_id).await?;
    let partners: HashMap<Uuid, partners::Partner> = partners::list(&mut tx, tenant_id)
        .await?
        .into_iter()
        .map(|p| (p.id, p))
        .collect();
    let dead = deliveries::list(&mut tx, tenant_id, Some(DeliveryState::Dead), ROWS).await?;
    let pending = deliveries::list(&mut tx, tenant_id, Some(DeliveryState::Pending), ROWS).await?;
    tx.commit().await?;
    let mut b = String::new();
    // Writing into a String cannot fail.
    let _ = dashboard(
        &mut b,
        session,
        &tenant_name,
        notice.as_ref(),
        &stats,
        &partners,
        &dead,
        &pending,
    );
    Ok(html(StatusCode::OK, shell("Operator", &b)))
}

#[allow(clippy::too_many_arguments)]
fn dashboard(
    b: &mut String,
    session: &Session,
    tenant_name: &str,
    notice: Option<&Notice>,
    stats: &deliveries::Stats,
    partners: &HashMap<Uuid, partners::Partner>,
    dead: &[Delivery],
    pending: &[Delivery],
) -> fmt::Result {
    let csrf = &session.csrf;
    write!(
        b,
        "<header><h1>Holdfast operator · {}</h1><span>{}</span>\
         <form class=\"inline\" method=\"post\" action=\"/admin/logout\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <button type=\"submit\">Sign out</button></form></header><main>",
        E(tenant_name),
        E(&session.caller.display_name),
        E(csrf)
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
            E(&p.name),
            E(&health),
            E(info.map_or("", |i| i.url.as_str())),
            E(&info.map(|i| i.event_types.join(", ")).unwrap_or_default()),
            p.pending,
            p.dead,
            p.delivered,
            E(&when(p.oldest_pending_at)),
            E(&when(p.last_delivered_at)),
            E(p.last_error.as_deref().unwrap_or(""))
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
        E(title),
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
            E(&d.partner_name),
            E(&d.event_id),
            E(&d.event_type),
            d.attempts,
            d.last_status.map_or("–".to_owned(), |s| s.to_string()),
            E(d.last_error.as_deref().unwrap_or("")),
            E(&when(
                Some(d.next_attempt_at).filter(|_| d.state == "pending")
            )),
            E(&when(d.dead_lettered_at.or(Some(d.created_at)))),
            E(csrf),
            E(button),
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
    fn an_outage_is_a_503_page_and_a_bug_a_500() {
        let outage = PageError::from(sqlx::Error::PoolTimedOut).into_response();
        assert_eq!(outage.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            outage.headers().get(RETRY_AFTER),
            Some(&HeaderValue::from(
                crate::error::UNAVAILABLE_RETRY_AFTER_SECS
            ))
        );
        let bug = PageError::from(anyhow::anyhow!("a bug")).into_response();
        assert_eq!(bug.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(bug.headers().get(RETRY_AFTER).is_none());
    }

    #[test]
    fn escapes_everything_that_could_open_markup() {
        assert_eq!(
            E("<script>alert('x') & \"y\"</script>").to_string(),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
    }

    #[test]
    fn csrf_tokens_are_per_session_and_compare_exactly() {
        let a = csrf_for("hf_one");
        assert_eq!(a, csrf_for("hf_one"));
        assert_ne!(a, csrf_for("hf_two"));
        assert!(same(&a, &a.clone()));
        assert!(!same(&a, &a[1..]));
        assert!(!same(&a, ""));
    }

    #[test]
    fn reads_cookies_among_others() {
        let mut h = HeaderMap::new();
        h.append(COOKIE, HeaderValue::from_static("a=1; hf_admin=tok"));
        h.append(COOKIE, HeaderValue::from_static("hf_admin_login=l"));
        assert_eq!(cookie(&h, "hf_admin"), Some("tok"));
        assert_eq!(cookie(&h, "hf_admin_login"), Some("l"));
        assert_eq!(cookie(&h, "nope"), None);
    }

    #[test]
    fn ages_read_like_people_say_them() {
        assert_eq!(age(42.7), "42 s");
        assert_eq!(age(192.0), "3 min 12 s");
        assert_eq!(age(7500.0), "2 h 5 min");
        assert_eq!(age(97200.0), "1 d 3 h");
    }
}
