//! The admin page's Inbound section over real HTTP and Postgres: the
//! inbox's events per provider with their outcome, found by event id
//! (exact or by how it starts) and provider, and each provider's inbound
//! secret as set or not and since when, never the secret itself.

use holdfast_protocol::webhook;
use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::PgPool;

use crate::admin_page::{get, operator_session, Page};
use crate::support::{kestrel_m, TestServer, MIGRATIONS};

async fn issue_secret(s: &TestServer, ops: &str, provider: &str) -> String {
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/admin/inbound-secrets",
            Some(ops),
            Some(json!({ "provider": provider })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["secret"].as_str().expect("secret").to_owned()
}

/// Sends one signed warehouse event; returns the inbox's answer status.
async fn send(s: &TestServer, secret: &str, id: &str, body: &[u8]) -> StatusCode {
    let key = webhook::parse_secret(secret).expect("secret");
    let now = chrono::Utc::now().timestamp();
    s.http
        .post(s.url("/v1/webhooks/acme/warehouse"))
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", now.to_string())
        .header("webhook-signature", webhook::sign(&key, id, now, body))
        .body(body.to_vec())
        .send()
        .await
        .expect("send")
        .status()
}

/// The event ids listed in the page's events table, in order.
fn listed(page: &Page) -> Vec<String> {
    let start = page.body.find("id=\"inbound-events\"").expect("the table");
    let table = &page.body[start..];
    let table = &table[..table.find("</table>").expect("end")];
    table
        .split("<tr class=\"inbound-event\">")
        .skip(1)
        .filter_map(|row| {
            let at = row.find("<code>")? + "<code>".len();
            Some(row[at..at + row[at..].find('<')?].to_owned())
        })
        .collect()
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn searching_by_event_id_finds_that_event_and_not_others(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let secret = issue_secret(&s, &ops, "warehouse").await;
    let received = json!({"type": "inventory.received", "data": {"sku_id": kestrel_m(), "qty": 2}})
        .to_string();
    for id in ["wh-2026-0001", "wh-2026-0002", "other-7"] {
        assert_eq!(
            send(&s, &secret, id, received.as_bytes()).await,
            StatusCode::OK
        );
    }
    // A redelivery: answered as a duplicate, listed once.
    assert_eq!(
        send(&s, &secret, "wh-2026-0001", received.as_bytes()).await,
        StatusCode::OK
    );
    // Refused for good, and not even UTF-8: listed with its reason.
    let status = send(&s, &secret, "wh-bad-1", b"\xff\xfe{not json").await;
    assert!(status.is_client_error(), "{status}");

    let cookie = operator_session(&s).await;
    let all = get(&s, "/admin/inbound", Some(&cookie)).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.body);
    assert!(
        all.body
            .contains("<a href=\"/admin/inbound\" aria-current=\"page\">Inbound</a>"),
        "{}",
        all.body
    );
    let mut ids = listed(&all);
    ids.sort();
    assert_eq!(
        ids,
        vec!["other-7", "wh-2026-0001", "wh-2026-0002", "wh-bad-1"],
        "each event once: {}",
        all.body
    );
    assert!(all.body.contains("Warehouse (3PL)"), "{}", all.body);
    assert!(all.body.contains(">Processed</span>"), "{}", all.body);
    assert!(all.body.contains(">Refused</span>: "), "{}", all.body);
    assert!(
        all.body.contains("redeliveries are not counted"),
        "{}",
        all.body
    );

    let exact = get(&s, "/admin/inbound?event_id=wh-2026-0001", Some(&cookie)).await;
    assert_eq!(listed(&exact), vec!["wh-2026-0001"], "{}", exact.body);
    assert!(exact.body.contains("1 event matches"), "{}", exact.body);
    assert!(
        exact.body.contains("value=\"wh-2026-0001\""),
        "the search is kept: {}",
        exact.body
    );

    let mut prefix = listed(&get(&s, "/admin/inbound?event_id=wh-2026", Some(&cookie)).await);
    prefix.sort();
    assert_eq!(prefix, vec!["wh-2026-0001", "wh-2026-0002"]);

    let none = get(
        &s,
        "/admin/inbound?event_id=wh-2026-0001&provider=payments",
        Some(&cookie),
    )
    .await;
    assert!(listed(&none).is_empty(), "{}", none.body);
    assert!(none.body.contains("No events match"), "{}", none.body);

    let refused = get(&s, "/admin/inbound?outcome=refused", Some(&cookie)).await;
    assert_eq!(listed(&refused), vec!["wh-bad-1"], "{}", refused.body);

    // Wildcards are plain characters here.
    let like = get(&s, "/admin/inbound?event_id=wh-%25", Some(&cookie)).await;
    assert!(listed(&like).is_empty(), "{}", like.body);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_secrets_status_says_set_and_rotated_without_the_secret(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let ops = s.login("acme", "ops@acme.test").await;
    let cookie = operator_session(&s).await;

    let page = get(&s, "/admin/inbound", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains("No events received yet"),
        "{}",
        page.body
    );
    for provider in ["warehouse", "payments"] {
        let row = secret_row(&page, provider);
        assert!(row.contains("Not set"), "{row}");
    }

    let first = issue_secret(&s, &ops, "warehouse").await;
    let page = get(&s, "/admin/inbound", Some(&cookie)).await;
    let row = secret_row(&page, "warehouse");
    assert!(
        row.contains(">Set<") && row.contains("never rotated"),
        "{row}"
    );
    assert!(secret_row(&page, "payments").contains("Not set"));
    assert!(!page.body.contains(&first), "never the secret");
    assert!(!page.body.contains(first.trim_start_matches("whsec_")));

    let second = issue_secret(&s, &ops, "warehouse").await;
    let page = get(&s, "/admin/inbound", Some(&cookie)).await;
    let row = secret_row(&page, "warehouse");
    assert!(
        row.contains("Rotated: the current secret was issued"),
        "{row}"
    );
    assert!(row.contains("the first one"), "{row}");
    assert!(!page.body.contains(&first) && !page.body.contains(&second));
}

fn secret_row(page: &Page, provider: &str) -> String {
    let start = page
        .body
        .find(&format!("<tr id=\"secret-{provider}\">"))
        .unwrap_or_else(|| panic!("a row for {provider}: {}", page.body));
    let rest = &page.body[start..];
    rest[..rest.find("</tr>").expect("row end")].to_owned()
}
