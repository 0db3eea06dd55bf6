//! `GET /admin`, the operator's HTML page, over real HTTP: sign-in with a
//! cookie session, operators only, CSRF-checked requeue, escaped output.

use holdfast_server::demo;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{TestServer, MIGRATIONS};

/// A browser that does not follow redirects, so each answer can be checked.
pub(crate) fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

pub(crate) struct Page {
    pub(crate) status: StatusCode,
    pub(crate) location: Option<String>,
    pub(crate) cookies: Vec<String>,
    pub(crate) body: String,
    pub(crate) headers: reqwest::header::HeaderMap,
}

pub(crate) async fn read(resp: reqwest::Response) -> Page {
    let status = resp.status();
    let headers = resp.headers().clone();
    let location = headers
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let cookies = headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_owned)
        .collect();
    let body = resp.text().await.expect("body");
    Page {
        status,
        location,
        cookies,
        body,
        headers,
    }
}

impl Page {
    /// The value a Set-Cookie gives `name`, if any.
    pub(crate) fn cookie(&self, name: &str) -> Option<String> {
        self.cookies.iter().find_map(|c| {
            c.strip_prefix(&format!("{name}="))
                .map(|rest| rest.split(';').next().unwrap_or("").to_owned())
        })
    }

    fn set_cookie_line(&self, name: &str) -> &str {
        self.cookies
            .iter()
            .find(|c| c.starts_with(&format!("{name}=")))
            .map(String::as_str)
            .unwrap_or("")
    }

    /// The first hidden CSRF field on the page.
    pub(crate) fn csrf(&self) -> String {
        let marker = "name=\"csrf\" value=\"";
        let start = self.body.find(marker).expect("a csrf field") + marker.len();
        let end = self.body[start..].find('"').expect("closing quote");
        self.body[start..start + end].to_owned()
    }
}

impl Page {
    /// The hidden fields (CSRF token, idempotency key, …) of the form that
    /// posts to `action`, as a browser would send them.
    pub(crate) fn hidden(&self, action: &str) -> Vec<(String, String)> {
        let start = self
            .body
            .find(&format!("action=\"{action}\""))
            .unwrap_or_else(|| panic!("a form posting to {action}: {}", self.body));
        let end = start + self.body[start..].find("</form>").expect("form end");
        let form = &self.body[start..end];
        let mut fields = Vec::new();
        let marker = "<input type=\"hidden\" name=\"";
        let mut rest = form;
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let name_end = rest.find('"').expect("name");
            let name = rest[..name_end].to_owned();
            let value_at = rest.find("value=\"").expect("value") + "value=\"".len();
            let value_end = value_at + rest[value_at..].find('"').expect("value end");
            let value = rest[value_at..value_end]
                .replace("&quot;", "\"")
                .replace("&#39;", "'")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&");
            fields.push((name, value));
            rest = &rest[value_end..];
        }
        fields
    }

    /// The hidden fields of the form to `action` plus `typed`, as one
    /// URL-encoded body.
    pub(crate) fn fill(&self, action: &str, typed: &[(&str, &str)]) -> String {
        let hidden = self.hidden(action);
        let mut pairs: Vec<(&str, &str)> = hidden
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        pairs.extend_from_slice(typed);
        form(&pairs)
    }
}

/// Posts a multipart form (text fields, then one file) as a browser does.
pub(crate) async fn post_file(
    s: &TestServer,
    path: &str,
    cookie: &str,
    fields: &[(String, String)],
    file: (&str, &str, &[u8]),
) -> Page {
    let boundary = "----holdfast-test-boundary-7d1f";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    let (name, filename, bytes) = file;
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n\
             Content-Type: text/csv\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let resp = browser()
        .post(s.url(path))
        .header(
            CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .header(COOKIE, cookie)
        .body(body)
        .send()
        .await
        .expect("post");
    read(resp).await
}

pub(crate) fn form(pairs: &[(&str, &str)]) -> String {
    let mut url = reqwest::Url::parse("http://form.invalid/").expect("url");
    url.query_pairs_mut().extend_pairs(pairs);
    url.query().unwrap_or("").to_owned()
}

pub(crate) async fn post_form(
    s: &TestServer,
    path: &str,
    cookie: Option<&str>,
    body: String,
) -> Page {
    let mut req = browser()
        .post(s.url(path))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body);
    if let Some(c) = cookie {
        req = req.header(COOKIE, c);
    }
    read(req.send().await.expect("post")).await
}

/// How many stored replay answers (idempotency keys) contain `text`: a
/// secret or password shown once must be in none of them.
pub(crate) async fn replays_containing(db: &sqlx::PgPool, text: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from idempotency_keys
          where convert_from(response_body, 'UTF8') like '%' || $1 || '%'",
    )
    .bind(text)
    .fetch_one(db)
    .await
    .expect("idempotency keys")
}

pub(crate) async fn get(s: &TestServer, path: &str, cookie: Option<&str>) -> Page {
    let mut req = browser().get(s.url(path));
    if let Some(c) = cookie {
        req = req.header(COOKIE, c);
    }
    read(req.send().await.expect("get")).await
}

/// Fills in and submits the sign-in form as a browser would.
pub(crate) async fn sign_in(s: &TestServer, tenant: &str, email: &str, password: &str) -> Page {
    let form_page = get(s, "/admin/login", None).await;
    assert_eq!(form_page.status, StatusCode::OK);
    let login_cookie = form_page.cookie("hf_admin_login").expect("login cookie");
    let body = form(&[
        ("csrf", &form_page.csrf()),
        ("tenant", tenant),
        ("email", email),
        ("password", password),
    ]);
    post_form(
        s,
        "/admin/login",
        Some(&format!("hf_admin_login={login_cookie}")),
        body,
    )
    .await
}

/// Signs in as the demo operator; returns the Cookie header to send.
pub(crate) async fn operator_session(s: &TestServer) -> String {
    let page = sign_in(s, "acme", "ops@acme.test", demo::DEMO_PASSWORD).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    assert_eq!(page.location.as_deref(), Some("/admin"));
    let token = page.cookie("hf_admin").expect("session cookie");
    format!("hf_admin={token}")
}

/// A partner (named to test escaping) with one dead and one pending delivery.
/// Returns (dead delivery id, pending delivery id).
async fn scene(db: &PgPool) -> (i64, i64) {
    let tenant = demo::tenant_id("acme");
    let partner = Uuid::now_v7();
    sqlx::query(
        "insert into partners (tenant_id, id, name, url, event_types, secret)
         values ($1, $2, '<script>alert(1)</script>', 'https://edi.example/hook?a=1&b=2',
                 '{order.*}', 'whsec_dGVzdA==')",
    )
    .bind(tenant)
    .bind(partner)
    .execute(db)
    .await
    .expect("partner");
    let mut ids = Vec::new();
    for (seq, state) in [(1, "dead"), (2, "pending")] {
        let outbox: i64 = sqlx::query_scalar(
            "insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence,
                                 payload, fanned_out_at)
             values ($1, 'order.created', 'order', $2, $3, '{}', now()) returning id",
        )
        .bind(tenant)
        .bind(Uuid::from_u128(7))
        .bind(seq)
        .fetch_one(db)
        .await
        .expect("outbox");
        let id: i64 = sqlx::query_scalar(
            "insert into deliveries (tenant_id, outbox_id, partner_id, state, attempts,
                                     last_status, last_error, dead_lettered_at, next_attempt_at)
             values ($1, $2, $3, $4, 12, 400, 'HTTP 400: <b>bad signature</b>',
                     case when $4 = 'dead' then now() end, now() + interval '1 hour')
             returning id",
        )
        .bind(tenant)
        .bind(outbox)
        .bind(partner)
        .bind(state)
        .fetch_one(db)
        .await
        .expect("delivery");
        ids.push(id);
    }
    (ids[0], ids[1])
}

async fn delivery(db: &PgPool, id: i64) -> (String, i32) {
    sqlx::query_as("select state, attempts from deliveries where id = $1")
        .bind(id)
        .fetch_one(db)
        .await
        .expect("delivery")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_operator_signs_in_and_sees_backlog_dead_letters_and_partners(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let (dead, pending) = scene(&db).await;

    // Signed out, the page sends you to the form.
    let page = get(&s, "/admin", None).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.location.as_deref(), Some("/admin/login"));

    let login = sign_in(&s, "acme", "ops@acme.test", demo::DEMO_PASSWORD).await;
    assert_eq!(login.status, StatusCode::SEE_OTHER, "{}", login.body);
    let set = login.set_cookie_line("hf_admin");
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/admin"] {
        assert!(set.contains(attr), "{set}");
    }
    let cookie = format!("hf_admin={}", login.cookie("hf_admin").expect("cookie"));

    let page = get(&s, "/admin", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let content_type = page.headers[CONTENT_TYPE].to_str().expect("ct");
    assert!(content_type.starts_with("text/html"), "{content_type}");
    let csp = page.headers["content-security-policy"]
        .to_str()
        .expect("csp");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert_eq!(page.headers["cache-control"], "no-store");
    let body = &page.body;
    assert!(body.contains("Acme Apparel"), "{body}");
    // Backlog: the pending delivery; dead letters: one.
    assert!(body.contains("Backlog<b>1</b>"), "{body}");
    assert!(
        body.contains("Dead letters<b class=\"bad\">1</b>"),
        "{body}"
    );
    assert!(body.contains("Oldest pending<b>"), "{body}");
    assert!(
        body.contains(&format!("action=\"/admin/deliveries/{dead}/requeue\"")),
        "{body}"
    );
    assert!(body.contains(&format!("action=\"/admin/deliveries/{pending}/requeue\"")));
    assert!(body.contains("<td>400</td>"), "last_status shown: {body}");
    // Everything from the database is escaped.
    assert!(
        body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{body}"
    );
    assert!(!body.contains("<script>"), "{body}");
    assert!(body.contains("HTTP 400: &lt;b&gt;bad signature&lt;/b&gt;"));
    assert!(body.contains("https://edi.example/hook?a=1&amp;b=2"));
    assert!(body.contains("1 dead letter(s)"), "partner health: {body}");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_account_manager_gets_a_clear_403_and_no_session(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let page = sign_in(&s, "acme", "dana@acme.test", demo::DEMO_PASSWORD).await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    assert!(page.body.contains("Operators only"), "{}", page.body);
    assert!(page.body.contains("account manager"), "{}", page.body);
    assert!(page.cookie("hf_admin").is_none(), "no session cookie");
    let live: i64 = sqlx::query_scalar(
        "select count(*) from device_tokens where device_name = 'admin page (browser)'
            and revoked_at is null",
    )
    .fetch_one(&db)
    .await
    .expect("tokens");
    assert_eq!(
        live, 0,
        "the token minted for the refused sign-in is revoked"
    );

    // A desk's token pasted into the cookie is no page session either.
    let desk = s.login("acme", "dana@acme.test").await;
    let page = get(&s, "/admin", Some(&format!("hf_admin={desk}"))).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.location.as_deref(), Some("/admin/login"));
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn requeue_needs_this_sessions_csrf_token(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let (dead, _) = scene(&db).await;
    let cookie = operator_session(&s).await;
    let page = get(&s, "/admin", Some(&cookie)).await;
    let csrf = page.csrf();
    let path = format!("/admin/deliveries/{dead}/requeue");

    // No token, a wrong one, and another session's: rejected, nothing changed.
    let other = operator_session(&s).await;
    let other_csrf = get(&s, "/admin", Some(&other)).await.csrf();
    assert_ne!(other_csrf, csrf);
    for body in [
        String::new(),
        form(&[("csrf", "")]),
        form(&[("csrf", "not-the-token")]),
        form(&[("csrf", &other_csrf)]),
    ] {
        let r = post_form(&s, &path, Some(&cookie), body.clone()).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{body:?}: {}", r.body);
        assert!(r.body.contains("Nothing was changed"), "{}", r.body);
        assert_eq!(delivery(&db, dead).await, ("dead".to_owned(), 12));
    }
    // The right token without the session cookie: signed out, nothing changed.
    let r = post_form(&s, &path, None, form(&[("csrf", &csrf)])).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location.as_deref(), Some("/admin/login"));
    assert_eq!(delivery(&db, dead).await, ("dead".to_owned(), 12));

    // With it: the dead delivery is pending again, due now, attempts reset.
    let r = post_form(&s, &path, Some(&cookie), form(&[("csrf", &csrf)])).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let back = r.location.expect("location");
    assert_eq!(back, format!("/admin?requeued={dead}"));
    assert_eq!(delivery(&db, dead).await, ("pending".to_owned(), 0));
    let (due, dead_at): (bool, Option<chrono::DateTime<chrono::Utc>>) = sqlx::query_as(
        "select next_attempt_at <= now(), dead_lettered_at from deliveries where id = $1",
    )
    .bind(dead)
    .fetch_one(&db)
    .await
    .expect("row");
    assert!(due && dead_at.is_none());
    let page = get(&s, &back, Some(&cookie)).await;
    assert!(
        page.body
            .contains(&format!("Delivery {dead} is pending again")),
        "{}",
        page.body
    );
    assert!(page.body.contains("Dead letters<b class=\"ok\">0</b>"));
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn sign_in_is_csrf_checked_and_sign_out_revokes(db: PgPool) {
    let s = TestServer::start(db.clone()).await;

    // A sign-in posted from elsewhere carries no form cookie.
    let body = form(&[
        ("csrf", "x"),
        ("tenant", "acme"),
        ("email", "ops@acme.test"),
        ("password", demo::DEMO_PASSWORD),
    ]);
    let r = post_form(&s, "/admin/login", None, body).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(r.cookie("hf_admin").is_none());

    // Wrong password: 401, the form again, what was typed echoed escaped.
    let r = sign_in(&s, "acme", "<i>ops</i>@acme.test", "hunter2-typo").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.body.contains("Wrong tenant, email or password"));
    assert!(
        r.body
            .contains("value=\"&lt;i&gt;ops&lt;/i&gt;@acme.test\""),
        "{}",
        r.body
    );
    assert!(!r.body.contains("hunter2"), "the password is never echoed");

    let cookie = operator_session(&s).await;
    let token = cookie.trim_start_matches("hf_admin=").to_owned();
    let (status, _) = s.get("/v1/admin/stats", &token).await;
    assert_eq!(status, StatusCode::OK);
    let csrf = get(&s, "/admin", Some(&cookie)).await.csrf();

    // Sign-out is a form like any other: the wrong token changes nothing.
    let r = post_form(&s, "/admin/logout", Some(&cookie), form(&[("csrf", "no")])).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        get(&s, "/admin", Some(&cookie)).await.status,
        StatusCode::OK
    );

    let r = post_form(&s, "/admin/logout", Some(&cookie), form(&[("csrf", &csrf)])).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location.as_deref(), Some("/admin/login"));
    assert!(r.set_cookie_line("hf_admin").contains("Max-Age=0"));
    let page = get(&s, "/admin", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "the old cookie is dead");
    let (status, _) = s.get("/v1/admin/stats", &token).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "and so is its token");
}
