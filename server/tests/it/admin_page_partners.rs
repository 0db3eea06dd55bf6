//! The admin page's Partners section over real HTTP and Postgres: adding a
//! partner with its secret shown once (never on reload or resubmit), a
//! refused URL in words with the input kept, pause and enable, the test
//! event's answer on the page, rotating, deleting (refused while
//! deliveries wait), and forged forms turned away.

use reqwest::StatusCode;
use sqlx::PgPool;
use uuid::Uuid;

use crate::admin_page::{form, get, operator_session, post_form, replays_containing, Page};
use crate::admin_partners::{delivery, partner_exists, server, Receiver};
use crate::support::{TestServer, MIGRATIONS};

/// The secret on a "shown once" page.
fn shown_secret(page: &Page) -> Option<String> {
    let at = page.body.find("id=\"new-secret\"")?;
    let rest = &page.body[at..];
    let start = rest.find("value=\"")? + "value=\"".len();
    let end = rest[start..].find('"')?;
    Some(rest[start..start + end].to_owned())
}

async fn partner_by_name(db: &PgPool, name: &str) -> Option<(Uuid, String, Vec<String>, bool)> {
    sqlx::query_as("select id, url, event_types, enabled from partners where name = $1")
        .bind(name)
        .fetch_optional(db)
        .await
        .expect("partner")
}

async fn enabled(db: &PgPool, id: Uuid) -> bool {
    sqlx::query_scalar("select enabled from partners where id = $1")
        .bind(id)
        .fetch_one(db)
        .await
        .expect("enabled")
}

/// Adds a partner through the page; returns its id and the secret shown.
async fn add(s: &TestServer, cookie: &str, name: &str, url: &str, types: &str) -> Page {
    let list = get(s, "/admin/partners", Some(cookie)).await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    let body = list.fill(
        "/admin/partners",
        &[("name", name), ("url", url), ("event_types", types)],
    );
    post_form(s, "/admin/partners", Some(cookie), body).await
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_operator_adds_a_partner_whose_secret_is_shown_once(db: PgPool) {
    let s = server(&db).await;
    let cookie = operator_session(&s).await;
    let receiver = Receiver::start().await;
    receiver.answer(204, "");

    let list = get(&s, "/admin/partners", Some(&cookie)).await;
    assert!(list.body.contains("No partners yet"), "{}", list.body);
    assert!(
        list.body
            .contains("<a href=\"/admin/partners\" aria-current=\"page\">Partners</a>"),
        "in the navigation: {}",
        list.body
    );
    assert!(list.body.contains("<label for=\"url\">"), "real labels");

    let body = list.fill(
        "/admin/partners",
        &[
            ("name", "EDI <gateway>"),
            ("url", &receiver.url),
            ("event_types", "order.*, invoice.paid"),
        ],
    );
    let created = post_form(&s, "/admin/partners", Some(&cookie), body.clone()).await;
    assert_eq!(created.status, StatusCode::OK, "{}", created.body);
    assert!(
        created.body.contains("Added EDI &lt;gateway&gt;."),
        "{}",
        created.body
    );
    assert!(
        created.body.contains("will not be shown again"),
        "{}",
        created.body
    );
    assert!(created.body.contains("select and copy"), "{}", created.body);
    assert!(!created.body.contains("<script"), "no script, ever");
    let secret = shown_secret(&created).expect("the secret, once");
    assert!(secret.starts_with("whsec_"), "{secret}");
    let (id, url, types, on) = partner_by_name(&db, "EDI <gateway>").await.expect("saved");
    assert_eq!(url, receiver.url);
    assert_eq!(types, vec!["order.*", "invoice.paid"]);
    assert!(on);

    // Not on the list nor the partner's page, nor kept for replays.
    let list = get(&s, "/admin/partners", Some(&cookie)).await;
    assert!(list.body.contains("EDI &lt;gateway&gt;"), "{}", list.body);
    assert!(
        list.body.contains("One secret, never rotated"),
        "{}",
        list.body
    );
    assert!(list.body.contains("Delivering"), "{}", list.body);
    assert!(!list.body.contains(&secret));
    let page = get(&s, &format!("/admin/partners/{id}"), Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(!page.body.contains(&secret));
    assert_eq!(
        replays_containing(&db, &secret).await,
        0,
        "the replay copy has no secret"
    );

    // The browser's resubmit: one partner, and the secret not shown again.
    let again = post_form(&s, "/admin/partners", Some(&cookie), body).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert!(shown_secret(&again).is_none(), "{}", again.body);
    assert!(
        again.body.contains("cannot be shown again"),
        "{}",
        again.body
    );
    let count: i64 = sqlx::query_scalar("select count(*) from partners")
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(count, 1, "the double submit added one partner");

    // The secret shown is the one events are signed with: the test event
    // from the page verifies with it, and its answer is on the page.
    let action = format!("/admin/partners/{id}/test-event");
    let tested = post_form(&s, &action, Some(&cookie), page.fill(&action, &[])).await;
    assert_eq!(tested.status, StatusCode::OK, "{}", tested.body);
    assert!(
        tested.body.contains("id=\"test-result\""),
        "{}",
        tested.body
    );
    assert!(tested.body.contains("HTTP 204"), "{}", tested.body);
    let got = receiver.requests();
    assert_eq!(got.len(), 1);
    assert!(got[0].verifies_with(&[&secret]));
    assert_eq!(got[0].json()["type"], "holdfast.test");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_refused_url_is_shown_in_words_with_the_input_kept(db: PgPool) {
    // This server refuses internal addresses, as production does.
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;

    let page = add(
        &s,
        &cookie,
        "Back office",
        "http://127.0.0.1:9/hook",
        "order.created",
    )
    .await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(page.body.contains("Nothing was saved"), "{}", page.body);
    assert!(page.body.contains("an internal address"), "{}", page.body);
    assert!(page.body.contains("value=\"Back office\""), "{}", page.body);
    assert!(
        page.body
            .contains("value=\"http://127.0.0.1:9/hook\" aria-invalid=\"true\""),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("value=\"order.created\""),
        "{}",
        page.body
    );
    assert!(partner_by_name(&db, "Back office").await.is_none());

    // Not a URL, and a subscription that is no pattern: both said at once.
    let page = add(&s, &cookie, "Back office", "edi dot example", "orders!").await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(page.body.contains("not an http(s) URL"), "{}", page.body);
    assert!(
        page.body
            .contains("value=\"orders!\" aria-invalid=\"true\""),
        "{}",
        page.body
    );

    // The same on a partner's page: the edit refused, what was typed kept.
    let id = Uuid::now_v7();
    sqlx::query(
        "insert into partners (tenant_id, id, name, url, event_types, secret)
         values ($1, $2, 'Far away', 'https://edi.example/hook', '{order.*}', $3)",
    )
    .bind(crate::support::acme())
    .bind(id)
    .bind(holdfast_server::auth::new_webhook_secret())
    .execute(&db)
    .await
    .expect("partner");
    let path = format!("/admin/partners/{id}");
    let edit = get(&s, &path, Some(&cookie)).await;
    let body = edit.fill(
        &path,
        &[
            ("url", "http://10.1.2.3/hook"),
            ("event_types", "invoice.paid"),
        ],
    );
    let page = post_form(&s, &path, Some(&cookie), body).await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(page.body.contains("an internal address"), "{}", page.body);
    assert!(
        page.body.contains("value=\"http://10.1.2.3/hook\""),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("value=\"invoice.paid\""),
        "{}",
        page.body
    );
    let (_, url, types, _) = partner_by_name(&db, "Far away").await.expect("partner");
    assert_eq!(
        (url.as_str(), types),
        ("https://edi.example/hook", vec!["order.*".to_owned()])
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn edit_pause_enable_and_rotate(db: PgPool) {
    let s = server(&db).await;
    let cookie = operator_session(&s).await;
    let receiver = Receiver::start().await;
    let created = add(&s, &cookie, "Warehouse EDI", &receiver.url, "order.*").await;
    let old = shown_secret(&created).expect("secret");
    let (id, ..) = partner_by_name(&db, "Warehouse EDI")
        .await
        .expect("partner");
    let path = format!("/admin/partners/{id}");

    // URL and subscriptions.
    let page = get(&s, &path, Some(&cookie)).await;
    let body = page.fill(
        &path,
        &[
            ("url", &receiver.url),
            ("event_types", "order.confirmed sku.*"),
        ],
    );
    let r = post_form(&s, &path, Some(&cookie), body).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let back = r.location.expect("location");
    assert_eq!(back, format!("{path}?done=saved"));
    let (_, _, types, _) = partner_by_name(&db, "Warehouse EDI").await.expect("p");
    assert_eq!(types, vec!["order.confirmed", "sku.*"]);
    let page = get(&s, &back, Some(&cookie)).await;
    assert!(
        page.body.contains("Saved the changes to Warehouse EDI."),
        "{}",
        page.body
    );

    // Pause from the partner's page, enable from the list.
    let action = format!("{path}/enabled");
    let r = post_form(&s, &action, Some(&cookie), page.fill(&action, &[])).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        r.location.as_deref(),
        Some(format!("{path}?done=paused").as_str())
    );
    assert!(!enabled(&db, id).await);
    let list = get(&s, "/admin/partners", Some(&cookie)).await;
    assert!(list.body.contains(">Paused</td>"), "{}", list.body);
    assert!(
        list.body.contains(&format!("id=\"enable-{id}\"")),
        "{}",
        list.body
    );
    let r = post_form(&s, &action, Some(&cookie), list.fill(&action, &[])).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        r.location.as_deref(),
        Some(format!("/admin/partners#partner-{id}").as_str())
    );
    assert!(enabled(&db, id).await);

    // Rotate: the new secret once, and the overlap in words.
    let page = get(&s, &path, Some(&cookie)).await;
    let action = format!("{path}/rotate-secret");
    let rotated = post_form(&s, &action, Some(&cookie), page.fill(&action, &[])).await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.body);
    let new = shown_secret(&rotated).expect("the new secret");
    assert_ne!(new, old);
    assert!(
        rotated
            .body
            .contains("The previous secret keeps being signed alongside until"),
        "{}",
        rotated.body
    );
    let page = get(&s, &path, Some(&cookie)).await;
    assert!(
        page.body
            .contains("Rotated: the previous secret keeps being signed alongside until"),
        "{}",
        page.body
    );
    assert!(!page.body.contains(&new) && !page.body.contains(&old));
    let action = format!("{path}/test-event");
    let tested = post_form(&s, &action, Some(&cookie), page.fill(&action, &[])).await;
    assert!(
        tested.body.contains("id=\"test-result\""),
        "{}",
        tested.body
    );
    let got = receiver.requests();
    assert!(got[0].verifies_with(&[&old]) && got[0].verifies_with(&[&new]));
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn delete_is_refused_while_deliveries_wait_and_done_when_none_do(db: PgPool) {
    let s = server(&db).await;
    let cookie = operator_session(&s).await;
    let receiver = Receiver::start().await;
    add(&s, &cookie, "Old <EDI>", &receiver.url, "order.*").await;
    let (id, ..) = partner_by_name(&db, "Old <EDI>").await.expect("partner");
    let waiting = delivery(&db, id, "pending").await;
    delivery(&db, id, "delivered").await;
    delivery(&db, id, "dead").await;
    let path = format!("/admin/partners/{id}");
    let action = format!("{path}/delete");

    let page = get(&s, &path, Some(&cookie)).await;
    assert!(page.body.contains("1 waiting, oldest"), "{}", page.body);
    let r = post_form(&s, &action, Some(&cookie), page.fill(&action, &[])).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(
        r.body
            .contains("Old &lt;EDI&gt; still has 1 delivery waiting to be sent"),
        "{}",
        r.body
    );
    assert!(partner_exists(&db, id).await);

    sqlx::query("update deliveries set state = 'delivered', delivered_at = now() where id = $1")
        .bind(waiting)
        .execute(&db)
        .await
        .expect("delivered");
    let page = get(&s, &path, Some(&cookie)).await;
    let r = post_form(&s, &action, Some(&cookie), page.fill(&action, &[])).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(!partner_exists(&db, id).await);
    let list = get(&s, &r.location.expect("location"), Some(&cookie)).await;
    assert!(
        list.body
            .contains("Deleted Old &lt;EDI&gt; and its 3 delivery records."),
        "{}",
        list.body
    );
    assert!(list.body.contains("No partners yet"), "{}", list.body);
    let gone = get(&s, &path, Some(&cookie)).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn partner_forms_need_this_sessions_csrf_token(db: PgPool) {
    let s = server(&db).await;
    let cookie = operator_session(&s).await;
    let receiver = Receiver::start().await;
    add(&s, &cookie, "Guarded", &receiver.url, "order.*").await;
    let (id, ..) = partner_by_name(&db, "Guarded").await.expect("partner");
    let page = get(&s, &format!("/admin/partners/{id}"), Some(&cookie)).await;
    let key = page
        .hidden(&format!("/admin/partners/{id}/delete"))
        .into_iter()
        .find(|(k, _)| k == "key")
        .map(|(_, v)| v)
        .expect("key");

    for csrf in [None, Some(""), Some("not-the-token")] {
        let with = |typed: &[(&str, &str)]| {
            let mut pairs = vec![("key", key.as_str())];
            if let Some(c) = csrf {
                pairs.push(("csrf", c));
            }
            pairs.extend_from_slice(typed);
            form(&pairs)
        };
        let r = post_form(
            &s,
            "/admin/partners",
            Some(&cookie),
            with(&[
                ("name", "Forged"),
                ("url", &receiver.url),
                ("event_types", "*"),
            ]),
        )
        .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{csrf:?}: {}", r.body);
        assert!(r.body.contains("Nothing was changed"), "{}", r.body);
        for action in ["test-event", "delete", "rotate-secret", "enabled"] {
            let r = post_form(
                &s,
                &format!("/admin/partners/{id}/{action}"),
                Some(&cookie),
                with(&[("enabled", "false")]),
            )
            .await;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "{action} {csrf:?}: {}",
                r.body
            );
        }
    }
    assert!(partner_by_name(&db, "Forged").await.is_none());
    assert!(partner_exists(&db, id).await && enabled(&db, id).await);
    assert!(receiver.requests().is_empty(), "no test event was sent");
    let rotated: bool =
        sqlx::query_scalar("select previous_secret is not null from partners where id = $1")
            .bind(id)
            .fetch_one(&db)
            .await
            .expect("row");
    assert!(!rotated);

    // Signed out: to the sign-in form, nothing sent.
    let action = format!("/admin/partners/{id}/test-event");
    let r = post_form(&s, &action, None, page.fill(&action, &[])).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location.as_deref(), Some("/admin/login"));
    assert!(receiver.requests().is_empty());
}
