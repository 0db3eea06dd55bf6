//! The admin page's Customers and Price lists sections over real HTTP and
//! Postgres: lists, create (a double submit making one), edit with a price
//! list and deactivation, refusals with the input kept, the customer file
//! and a list's price file (every bad line shown, nothing applied).

use holdfast_server::demo;
use reqwest::StatusCode;
use sqlx::PgPool;
use uuid::Uuid;

use crate::admin_page::{get, operator_session, post_file, post_form};
use crate::support::{acme, TestServer, MIGRATIONS};

async fn customer(db: &PgPool, name: &str) -> Option<(Uuid, Option<i64>, Option<Uuid>, bool)> {
    sqlx::query_as(
        "select id, credit_limit, price_list_id, active from customers
          where tenant_id = $1 and name = $2",
    )
    .bind(acme())
    .bind(name)
    .fetch_optional(db)
    .await
    .expect("customer")
}

async fn customer_count(db: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from customers where tenant_id = $1")
        .bind(acme())
        .fetch_one(db)
        .await
        .expect("count")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn customers_are_listed_created_edited_and_deactivated(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;
    let tokyo_list = demo::price_list_id("acme", demo::TOKYO_PRICES);

    let page = get(&s, "/admin/customers", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains("Brightwater &amp; Sons"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("<td class=\"num\">5,000.00</td>"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("<td>Tokyo Distributor prices</td>"),
        "{}",
        page.body
    );
    assert!(page.body.contains("no limit"), "{}", page.body);
    let before = customer_count(&db).await;

    // A credit limit that is not money: refused on the page, input kept.
    let typed = [
        ("name", "Oslo Supply"),
        ("credit_limit", "lots"),
        ("price_list_id", ""),
        ("email", "buyer@oslo.example"),
        ("phone", "+47 22 00 00 00"),
    ];
    let r = post_form(
        &s,
        "/admin/customers",
        Some(&cookie),
        page.fill("/admin/customers", &typed),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(
        r.body.contains("value=\"lots\" aria-invalid=\"true\""),
        "{}",
        r.body
    );
    assert!(
        r.body.contains("value=\"buyer@oslo.example\""),
        "{}",
        r.body
    );

    // A name another customer has: the engine's refusal, in words.
    let mut dup = typed;
    dup[0].1 = "Austin Boutique";
    dup[1].1 = "100";
    let r = post_form(
        &s,
        "/admin/customers",
        Some(&cookie),
        r.fill("/admin/customers", &dup),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(
        r.body.contains("already used by another customer"),
        "{}",
        r.body
    );
    assert_eq!(customer_count(&db).await, before);

    // Created with a price list; sent twice (double click), made once.
    let tokyo = tokyo_list.to_string();
    let mut good = typed;
    good[1].1 = "25,000";
    good[2].1 = &tokyo;
    let body = r.fill("/admin/customers", &good);
    let r = post_form(&s, "/admin/customers", Some(&cookie), body.clone()).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let again = post_form(&s, "/admin/customers", Some(&cookie), body).await;
    assert_eq!(
        again.location, r.location,
        "the resubmit replays the first answer"
    );
    assert_eq!(customer_count(&db).await, before + 1);
    let (id, limit, list, active) = customer(&db, "Oslo Supply").await.expect("created");
    assert_eq!(
        (limit, list, active),
        (Some(2_500_000), Some(tokyo_list), true)
    );
    let page = get(&s, r.location.as_deref().expect("back"), Some(&cookie)).await;
    assert!(page.body.contains("Added Oslo Supply."), "{}", page.body);

    // Edit: no price list, no limit, inactive.
    let path = format!("/admin/customers/{id}");
    let page = get(&s, &path, Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("value=\"25000.00\""), "{}", page.body);
    assert!(
        page.body
            .contains(&format!("<option value=\"{tokyo}\" selected>")),
        "{}",
        page.body
    );
    let body = page.fill(
        &path,
        &[
            ("name", "Oslo Supply AS"),
            ("credit_limit", ""),
            ("price_list_id", ""),
            ("email", ""),
            ("phone", "+47 22 00 00 01"),
            ("active", "false"),
        ],
    );
    let r = post_form(&s, &path, Some(&cookie), body).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        customer(&db, "Oslo Supply AS").await,
        Some((id, None, None, false))
    );
    let page = get(&s, r.location.as_deref().expect("back"), Some(&cookie)).await;
    assert!(
        page.body.contains("Saved the changes to Oslo Supply AS."),
        "{}",
        page.body
    );
    assert!(page.body.contains("Inactive</span>"), "{}", page.body);

    // Another tenant's customer is not found here.
    let other: Uuid = sqlx::query_scalar("select id from customers where tenant_id <> $1 limit 1")
        .bind(acme())
        .fetch_one(&db)
        .await
        .expect("other");
    let page = get(&s, &format!("/admin/customers/{other}"), Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_customer_file_imports_or_names_every_bad_line(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;
    let before = customer_count(&db).await;
    let page = get(&s, "/admin/customers", Some(&cookie)).await;

    let bad = b"name,credit_limit,price_list,email,phone\n\
        Porto Store,100000,,porto@example.com,\n\
        Riga Shop,-5,,,\n\
        Vilnius Shop,,No Such List,,\n\
        Tallinn Shop,,,not-an-email,\n";
    let hidden = page.hidden("/admin/customers/import");
    let r = post_file(
        &s,
        "/admin/customers/import",
        &cookie,
        &hidden,
        ("file", "shops.csv", bad),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(
        r.body
            .contains("shops.csv was refused, and nothing in it was applied."),
        "{}",
        r.body
    );
    for line in ["3", "4", "5"] {
        assert!(
            r.body
                .contains(&format!("<tr><td class=\"num\">{line}</td>")),
            "line {line}: {}",
            r.body
        );
    }
    assert_eq!(customer_count(&db).await, before, "nothing applied");

    let good = b"name,credit_limit,price_list,email,phone\n\
        Porto Store,100000,Tokyo Distributor prices,porto@example.com,\n\
        Austin Boutique,500000,,,\n";
    let hidden = r.hidden("/admin/customers/import");
    let r = post_file(
        &s,
        "/admin/customers/import",
        &cookie,
        &hidden,
        ("file", "shops.csv", good),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let page = get(&s, r.location.as_deref().expect("back"), Some(&cookie)).await;
    assert!(
        page.body.contains("Imported shops.csv: 1 new customer,"),
        "{}",
        page.body
    );
    assert_eq!(customer_count(&db).await, before + 1);
    let porto = customer(&db, "Porto Store").await.expect("porto");
    assert_eq!(
        porto.2,
        Some(demo::price_list_id("acme", demo::TOKYO_PRICES))
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn price_lists_are_made_shown_and_replaced_from_a_file(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;

    let page = get(&s, "/admin/price-lists", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains("Tokyo Distributor prices</a>"),
        "{}",
        page.body
    );
    let tokyo = demo::price_list_id("acme", demo::TOKYO_PRICES);
    let shown = get(&s, &format!("/admin/price-lists/{tokyo}"), Some(&cookie)).await;
    assert!(
        shown
            .body
            .contains("customers on it: Tokyo Distributor</p>"),
        "{}",
        shown.body
    );
    assert!(
        shown.body.contains("<strong>38.00</strong>"),
        "{}",
        shown.body
    );
    assert!(shown.body.contains("−4.00"), "{}", shown.body);

    // The name is taken: refused, kept.
    let r = post_form(
        &s,
        "/admin/price-lists",
        Some(&cookie),
        page.fill("/admin/price-lists", &[("name", demo::TOKYO_PRICES)]),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(
        r.body.contains("already used by another price list"),
        "{}",
        r.body
    );

    let body = r.fill("/admin/price-lists", &[("name", "Trade show 2027")]);
    let created = post_form(&s, "/admin/price-lists", Some(&cookie), body.clone()).await;
    assert_eq!(created.status, StatusCode::SEE_OTHER, "{}", created.body);
    let again = post_form(&s, "/admin/price-lists", Some(&cookie), body).await;
    assert_eq!(again.location, created.location);
    let lists: i64 =
        sqlx::query_scalar("select count(*) from price_lists where name = 'Trade show 2027'")
            .fetch_one(&db)
            .await
            .expect("count");
    assert_eq!(lists, 1, "a double submit makes one list");
    let back = created.location.expect("location");
    let page = get(&s, &back, Some(&cookie)).await;
    assert!(
        page.body
            .contains("Created the price list Trade show 2027."),
        "{}",
        page.body
    );
    assert!(page.body.contains("No prices yet"), "{}", page.body);
    let id = back
        .trim_start_matches("/admin/price-lists/")
        .split('?')
        .next()
        .expect("id")
        .to_owned();
    let action = format!("/admin/price-lists/{id}/prices");

    let bad = b"code,price\nKO-WI-M,3500\nNO-SUCH-CODE,100\nKO-WI-L,abc\n";
    let r = post_file(
        &s,
        &action,
        &cookie,
        &page.hidden(&action),
        ("file", "show.csv", bad),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(r.body.contains("show.csv was refused"), "{}", r.body);
    assert!(
        r.body.contains("<tr><td class=\"num\">3</td>"),
        "{}",
        r.body
    );
    assert!(
        r.body.contains("<tr><td class=\"num\">4</td>"),
        "{}",
        r.body
    );
    let entries: i64 = sqlx::query_scalar(
        "select count(*) from price_list_entries where price_list_id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&db)
    .await
    .expect("entries");
    assert_eq!(entries, 0, "nothing applied");

    let good = b"code,price\nKO-WI-M,3500\nST-E-S,900\n";
    let r = post_file(
        &s,
        &action,
        &cookie,
        &r.hidden(&action),
        ("file", "show.csv", good),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let page = get(&s, r.location.as_deref().expect("back"), Some(&cookie)).await;
    assert!(page.body.contains("it now prices 2 SKUs"), "{}", page.body);
    assert!(
        page.body.contains("<strong>35.00</strong>"),
        "{}",
        page.body
    );
    assert!(page.body.contains("KO-WI-M"), "{}", page.body);
}
