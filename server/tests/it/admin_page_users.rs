//! The admin page's Users section over real HTTP and Postgres: the list,
//! creating a user with a password shown once (and never on reload or
//! resubmit), rename and role, deactivate and reactivate, reset, the last
//! operator refused in words, forged forms and account managers turned away.

use holdfast_server::demo;
use reqwest::header::{CONTENT_TYPE, COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::admin_page::{form, get, operator_session, post_form, replays_containing, Page};
use crate::support::{acme, TestServer, MIGRATIONS};

/// The password on a "shown once" page.
fn shown_password(page: &Page) -> Option<String> {
    let marker = "<code class=\"secret\" id=\"password\">";
    let start = page.body.find(marker)? + marker.len();
    let end = page.body[start..].find('<')?;
    Some(page.body[start..start + end].to_owned())
}

async fn user_id(db: &PgPool, email: &str) -> Uuid {
    sqlx::query_scalar("select id from users where tenant_id = $1 and email = $2")
        .bind(acme())
        .bind(email)
        .fetch_one(db)
        .await
        .expect("user")
}

async fn user_row(db: &PgPool, email: &str) -> (String, String, bool) {
    sqlx::query_as(
        "select display_name, role, active from users where tenant_id = $1 and email = $2",
    )
    .bind(acme())
    .bind(email)
    .fetch_one(db)
    .await
    .expect("user")
}

async fn sign_in_api(s: &TestServer, email: &str, password: &str) -> StatusCode {
    let (status, _) = s
        .call(
            Method::POST,
            "/v1/sessions",
            None,
            Some(
                json!({"tenant": "acme", "email": email, "password": password,
                        "device_name": "test desk"}),
            ),
        )
        .await;
    status
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_operator_creates_a_user_whose_password_is_shown_once(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;

    let list = get(&s, "/admin/users", Some(&cookie)).await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    for who in [
        "dana@acme.test",
        "ops@acme.test",
        "Account manager",
        "Active",
    ] {
        assert!(list.body.contains(who), "{who}: {}", list.body);
    }
    assert!(list.body.contains("<label for=\"email\">"), "real labels");

    let body = list.fill(
        "/admin/users",
        &[
            ("display_name", "Kim <Lee>"),
            ("email", "Kim@Acme.test"),
            ("role", "account_manager"),
        ],
    );
    let created = post_form(&s, "/admin/users", Some(&cookie), body.clone()).await;
    assert_eq!(created.status, StatusCode::OK, "{}", created.body);
    assert!(
        created
            .body
            .contains("Created Kim &lt;Lee&gt; (kim@acme.test)"),
        "{}",
        created.body
    );
    assert!(
        created.body.contains("will not be shown again"),
        "{}",
        created.body
    );
    let password = shown_password(&created).expect("the password, once");
    assert_eq!(password.len(), 20);
    assert_eq!(
        sign_in_api(&s, "kim@acme.test", &password).await,
        StatusCode::CREATED
    );

    // Not on the list, nor on the user's page, nor stored anywhere.
    let list = get(&s, "/admin/users", Some(&cookie)).await;
    assert!(list.body.contains("Kim &lt;Lee&gt;"), "{}", list.body);
    assert!(!list.body.contains(&password));
    let id = user_id(&db, "kim@acme.test").await;
    let page = get(&s, &format!("/admin/users/{id}"), Some(&cookie)).await;
    assert!(!page.body.contains(&password));
    assert_eq!(
        replays_containing(&db, &password).await,
        0,
        "the replay copy has no password"
    );

    // The browser's reload of that answer resends the same form: one user,
    // and the password is not shown again.
    let again = post_form(&s, "/admin/users", Some(&cookie), body).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert!(shown_password(&again).is_none(), "{}", again.body);
    assert!(!again.body.contains(&password));
    assert!(
        again.body.contains("cannot be shown again"),
        "{}",
        again.body
    );
    assert!(again
        .body
        .contains(&format!("action=\"/admin/users/{id}/reset-password\"")));
    let count: i64 = sqlx::query_scalar("select count(*) from users where email = 'kim@acme.test'")
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(count, 1, "the double submit created one user");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_refused_create_keeps_what_was_typed(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;
    let list = get(&s, "/admin/users", Some(&cookie)).await;

    let body = list.fill(
        "/admin/users",
        &[
            ("display_name", "Sam Field"),
            ("email", "not-an-email"),
            ("role", "operator"),
        ],
    );
    let page = post_form(&s, "/admin/users", Some(&cookie), body).await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(page.body.contains("Nothing was saved"), "{}", page.body);
    assert!(
        page.body.contains("must look like name@example.com"),
        "{}",
        page.body
    );
    assert!(page.body.contains("value=\"Sam Field\""), "{}", page.body);
    assert!(
        page.body
            .contains("value=\"not-an-email\" aria-invalid=\"true\""),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("<option value=\"operator\" selected>"),
        "{}",
        page.body
    );

    // An email the tenant has already: refused in words, kept.
    let body = page.fill(
        "/admin/users",
        &[
            ("display_name", "Dana Two"),
            ("email", "dana@acme.test"),
            ("role", "account_manager"),
        ],
    );
    let page = post_form(&s, "/admin/users", Some(&cookie), body).await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(
        page.body.contains("already has an account"),
        "{}",
        page.body
    );
    assert!(page.body.contains("value=\"Dana Two\""), "{}", page.body);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn rename_role_deactivate_reactivate_and_reset(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;
    let dana = user_id(&db, "dana@acme.test").await;
    let desk = s.login("acme", "dana@acme.test").await;
    let path = format!("/admin/users/{dana}");

    let page = get(&s, &path, Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let body = page.fill(
        &path,
        &[("display_name", "Dana Ito-Park"), ("role", "operator")],
    );
    let r = post_form(&s, &path, Some(&cookie), body).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let back = r.location.expect("redirect");
    assert_eq!(back, format!("/admin/users?done=saved&id={dana}"));
    assert_eq!(
        user_row(&db, "dana@acme.test").await,
        ("Dana Ito-Park".to_owned(), "operator".to_owned(), true)
    );
    let list = get(&s, &back, Some(&cookie)).await;
    assert!(
        list.body.contains("Saved the changes to Dana Ito-Park."),
        "{}",
        list.body
    );

    // Deactivate: the desk's token stops working at once.
    let page = get(&s, &path, Some(&cookie)).await;
    let action = format!("{path}/active");
    let r = post_form(&s, &action, Some(&cookie), page.fill(&action, &[])).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let list = get(&s, r.location.as_deref().expect("back"), Some(&cookie)).await;
    assert!(
        list.body.contains("Deactivated Dana Ito-Park"),
        "{}",
        list.body
    );
    assert!(list.body.contains("Deactivated</span>"), "{}", list.body);
    assert!(!user_row(&db, "dana@acme.test").await.2);
    let (status, _) = s.get("/v1/customers", &desk).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Reactivate.
    let page = get(&s, &path, Some(&cookie)).await;
    assert!(
        page.body.contains("Reactivate Dana Ito-Park"),
        "{}",
        page.body
    );
    let r = post_form(&s, &action, Some(&cookie), page.fill(&action, &[])).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(user_row(&db, "dana@acme.test").await.2);

    // Reset: the new password is shown once, the old one is gone.
    let page = get(&s, &path, Some(&cookie)).await;
    let action = format!("{path}/reset-password");
    let body = page.fill(&action, &[]);
    let r = post_form(&s, &action, Some(&cookie), body.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let password = shown_password(&r).expect("new password");
    assert!(r.body.contains("will not be shown again"));
    assert_eq!(
        sign_in_api(&s, "dana@acme.test", demo::DEMO_PASSWORD).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        sign_in_api(&s, "dana@acme.test", &password).await,
        StatusCode::CREATED
    );
    let again = post_form(&s, &action, Some(&cookie), body).await;
    assert!(shown_password(&again).is_none(), "{}", again.body);
    assert_eq!(
        sign_in_api(&s, "dana@acme.test", &password).await,
        StatusCode::CREATED,
        "the resubmit did not reset it again"
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_last_operator_is_refused_in_words(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;
    let ops = user_id(&db, "ops@acme.test").await;
    let path = format!("/admin/users/{ops}");
    let page = get(&s, &path, Some(&cookie)).await;
    assert!(page.body.contains("(you)"), "{}", page.body);

    let body = page.fill(
        &path,
        &[("display_name", "Ops Renamed"), ("role", "account_manager")],
    );
    let r = post_form(&s, &path, Some(&cookie), body).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(
        r.body
            .contains("last active operator and cannot be demoted"),
        "{}",
        r.body
    );
    assert!(
        r.body.contains("make another user an operator first"),
        "{}",
        r.body
    );
    assert!(
        r.body.contains("value=\"Ops Renamed\""),
        "input kept: {}",
        r.body
    );
    assert!(
        r.body
            .contains("<option value=\"account_manager\" selected>"),
        "{}",
        r.body
    );

    let action = format!("{path}/active");
    let r = post_form(&s, &action, Some(&cookie), page.fill(&action, &[])).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(r.body.contains("cannot be deactivated"), "{}", r.body);
    let (name, role, active) = user_row(&db, "ops@acme.test").await;
    assert_eq!((role.as_str(), active), ("operator", true), "{name}");
    assert_ne!(name, "Ops Renamed", "nothing of the refused form applied");
    assert_eq!(
        get(&s, "/admin/users", Some(&cookie)).await.status,
        StatusCode::OK
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn forged_posts_and_account_managers_are_turned_away(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;
    let list = get(&s, "/admin/users", Some(&cookie)).await;
    let key = list
        .hidden("/admin/users")
        .into_iter()
        .find(|(k, _)| k == "key")
        .expect("key")
        .1;
    for csrf in ["", "forged"] {
        let body = form(&[
            ("csrf", csrf),
            ("key", &key),
            ("display_name", "Mallory"),
            ("email", "mallory@acme.test"),
            ("role", "operator"),
        ]);
        let r = post_form(&s, "/admin/users", Some(&cookie), body).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
        assert!(r.body.contains("Nothing was changed"), "{}", r.body);
    }
    // A form without its key is refused too, before anything happens.
    let body = form(&[
        ("csrf", &list.csrf()),
        ("display_name", "Mallory"),
        ("email", "mallory@acme.test"),
        ("role", "operator"),
    ]);
    let r = post_form(&s, "/admin/users", Some(&cookie), body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    let mallory: i64 = sqlx::query_scalar("select count(*) from users where email like 'mallory%'")
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(mallory, 0);

    // An account manager with a page session (minted as the page would)
    // sees no section and can post nothing.
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/sessions",
            None,
            Some(json!({"tenant": "acme", "email": "dana@acme.test",
                        "password": demo::DEMO_PASSWORD, "device_name": "admin page (browser)"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let manager = format!("hf_admin={}", body["token"].as_str().expect("token"));
    for path in [
        "/admin/users",
        "/admin/catalog",
        "/admin/customers",
        "/admin/price-lists",
    ] {
        let page = get(&s, path, Some(&manager)).await;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{path}: {}", page.body);
        assert!(page.body.contains("Operators only"), "{}", page.body);
    }
    let r = reqwest::Client::new()
        .post(s.url("/admin/users"))
        .header(COOKIE, &manager)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(list.fill(
            "/admin/users",
            &[
                ("display_name", "Eve"),
                ("email", "eve@acme.test"),
                ("role", "operator"),
            ],
        ))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let eve: i64 = sqlx::query_scalar("select count(*) from users where email = 'eve@acme.test'")
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(eve, 0);

    // Another tenant's user is no user here.
    let other: Uuid = sqlx::query_scalar("select id from users where tenant_id <> $1 limit 1")
        .bind(acme())
        .fetch_one(&db)
        .await
        .expect("a user of another tenant");
    let page = get(&s, &format!("/admin/users/{other}"), Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::NOT_FOUND, "{}", page.body);
}
