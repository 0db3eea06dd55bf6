//! The admin page's Catalog section over real HTTP and Postgres: search,
//! the per-SKU edit (money typed as money, refusals kept), the CSV upload
//! with its summary, a refused file listing every bad line and applying
//! nothing, a double-submitted upload applying once, forged forms refused.

use reqwest::StatusCode;
use sqlx::PgPool;

use crate::admin_page::{get, operator_session, post_file, post_form};
use crate::support::{acme, kestrel_m, TestServer, MIGRATIONS};

async fn sku_count(db: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from skus where tenant_id = $1")
        .bind(acme())
        .fetch_one(db)
        .await
        .expect("count")
}

async fn kestrel_prices(db: &PgPool) -> (i64, i64, bool, Option<String>) {
    sqlx::query_as("select wholesale_price, msrp, active, code from skus where id = $1")
        .bind(kestrel_m())
        .fetch_one(db)
        .await
        .expect("sku")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_catalog_lists_searches_and_edits(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;

    let page = get(&s, "/admin/catalog", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains("<th scope=\"col\">Code</th>"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("Next 100 SKUs"),
        "the demo has more than a page"
    );

    let page = get(&s, "/admin/catalog?q=kestrel+indigo+m", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("KO-WI-M"), "{}", page.body);
    assert!(
        page.body.contains("<td class=\"num\">42.00</td>"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("Swift Tee"), "{}", page.body);
    let edit = format!("/admin/catalog/{}", kestrel_m());
    assert!(
        page.body
            .contains(&format!("href=\"{edit}?q=kestrel%20indigo%20m\"")),
        "{}",
        page.body
    );

    let form = get(&s, &format!("{edit}?q=kestrel%20indigo%20m"), Some(&cookie)).await;
    assert_eq!(form.status, StatusCode::OK, "{}", form.body);
    assert!(form.body.contains("value=\"42.00\""), "{}", form.body);

    // A price that is not money: refused on the page, what was typed kept.
    let body = form.fill(
        &edit,
        &[
            ("code", "KO-WI-M"),
            ("wholesale_price", "forty"),
            ("msrp", "84.00"),
            ("active", "true"),
        ],
    );
    let r = post_form(&s, &edit, Some(&cookie), body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("is not an amount like 24.00"), "{}", r.body);
    assert!(
        r.body.contains("value=\"forty\" aria-invalid=\"true\""),
        "{}",
        r.body
    );
    assert_eq!(kestrel_prices(&db).await.0, 4200);

    // A code another SKU has: the engine's refusal, in words, input kept.
    let body = r.fill(
        &edit,
        &[
            ("code", "KO-WI-L"),
            ("wholesale_price", "39.50"),
            ("msrp", "80"),
            ("active", "true"),
        ],
    );
    let r = post_form(&s, &edit, Some(&cookie), body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("already used by another SKU"), "{}", r.body);
    assert!(r.body.contains("value=\"39.50\""), "{}", r.body);
    assert_eq!(kestrel_prices(&db).await.0, 4200);

    // A good edit: saved, back to the search with a notice.
    let body = r.fill(
        &edit,
        &[
            ("code", "KO-WI-M"),
            ("wholesale_price", "39.50"),
            ("msrp", "1,080"),
            ("active", "false"),
        ],
    );
    let r = post_form(&s, &edit, Some(&cookie), body.clone()).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let back = r.location.expect("redirect");
    assert!(
        back.starts_with("/admin/catalog?q=kestrel%20indigo%20m&done=saved"),
        "{back}"
    );
    assert_eq!(
        kestrel_prices(&db).await,
        (3950, 108000, false, Some("KO-WI-M".into()))
    );
    let page = get(&s, &back, Some(&cookie)).await;
    assert!(
        page.body
            .contains("Saved Kestrel Overshirt · Washed Indigo · M (KO-WI-M)."),
        "{}",
        page.body
    );
    assert!(page.body.contains("Discontinued"), "{}", page.body);

    // The same form again (a double click): applied once, one change row.
    let changes = |db: PgPool| async move {
        let n: i64 = sqlx::query_scalar(
            "select count(*) from changes where tenant_id = $1 and kind = 'sku' and doc_id = $2",
        )
        .bind(acme())
        .bind(kestrel_m())
        .fetch_one(&db)
        .await
        .expect("changes");
        n
    };
    let before = changes(db.clone()).await;
    let r = post_form(&s, &edit, Some(&cookie), body).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(changes(db.clone()).await, before);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_uploaded_file_imports_once_and_a_bad_one_applies_nothing(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;
    let page = get(&s, "/admin/catalog", Some(&cookie)).await;
    assert!(page.body.contains("enctype=\"multipart/form-data\""));
    let before = sku_count(&db).await;

    let good = b"code,style,color,size,wholesale_price,msrp\n\
        NEW-1,Heron Parka,Slate,M,9900,19800\n\
        NEW-2,Heron Parka,Slate,L,9900,19800\n\
        KO-WI-M,Kestrel Overshirt,Washed Indigo,M,4100,8400\n";
    let hidden = page.hidden("/admin/catalog/import");
    let r = post_file(
        &s,
        "/admin/catalog/import",
        &cookie,
        &hidden,
        ("file", "parkas.csv", good),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let back = r.location.expect("redirect");
    let page = get(&s, &back, Some(&cookie)).await;
    assert!(
        page.body
            .contains("Imported parkas.csv: 2 new SKUs, 1 updated, 0 unchanged."),
        "{}",
        page.body
    );
    assert_eq!(sku_count(&db).await, before + 2);
    assert_eq!(kestrel_prices(&db).await.0, 4100);

    // The same form sent twice (double click): applied once, same summary.
    let r = post_file(
        &s,
        "/admin/catalog/import",
        &cookie,
        &hidden,
        ("file", "parkas.csv", good),
    )
    .await;
    assert_eq!(r.location.as_deref(), Some(back.as_str()), "{}", r.body);
    assert_eq!(sku_count(&db).await, before + 2);

    // The same file again from a fresh form: all unchanged.
    let page = get(&s, "/admin/catalog", Some(&cookie)).await;
    let hidden = page.hidden("/admin/catalog/import");
    let r = post_file(
        &s,
        "/admin/catalog/import",
        &cookie,
        &hidden,
        ("file", "parkas.csv", good),
    )
    .await;
    let page = get(&s, r.location.as_deref().expect("redirect"), Some(&cookie)).await;
    assert!(
        page.body.contains("0 new SKUs, 0 updated, 3 unchanged."),
        "{}",
        page.body
    );

    // Three bad rows: every one listed by line and column, nothing applied.
    let bad = b"code,style,color,size,wholesale_price,msrp\n\
        BAD-1,Heron Parka,Moss,M,9900,19800\n\
        BAD-2,,Moss,L,9900,19800\n\
        BAD-3,Heron Parka,Moss,XL,99.00,19800\n\
        BAD-4,Heron Parka,Moss,S,9900,-5\n";
    let page = get(&s, "/admin/catalog", Some(&cookie)).await;
    let hidden = page.hidden("/admin/catalog/import");
    let r = post_file(
        &s,
        "/admin/catalog/import",
        &cookie,
        &hidden,
        ("file", "moss <b>.csv", bad),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(
        r.body
            .contains("moss &lt;b&gt;.csv was refused, and nothing in it was applied."),
        "{}",
        r.body
    );
    assert!(r.body.contains("3 problems in the file"), "{}", r.body);
    for (line, column) in [("3", "style"), ("4", "wholesale_price"), ("5", "msrp")] {
        assert!(
            r.body.contains(&format!(
                "<tr><td class=\"num\">{line}</td><td>{column}</td>"
            )),
            "line {line} {column}: {}",
            r.body
        );
    }
    assert_eq!(
        sku_count(&db).await,
        before + 2,
        "nothing of the bad file applied"
    );
    let moss: i64 = sqlx::query_scalar("select count(*) from skus where color = 'Moss'")
        .fetch_one(&db)
        .await
        .expect("count");
    assert_eq!(moss, 0);

    // No file chosen: said so.
    let hidden = r.hidden("/admin/catalog/import");
    let r = post_file(
        &s,
        "/admin/catalog/import",
        &cookie,
        &hidden,
        ("file", "", b""),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("Choose a CSV file"), "{}", r.body);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_forged_upload_or_edit_changes_nothing(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let cookie = operator_session(&s).await;
    let before = sku_count(&db).await;
    let page = get(&s, "/admin/catalog", Some(&cookie)).await;
    let mut hidden = page.hidden("/admin/catalog/import");
    for (k, v) in &mut hidden {
        if k == "csrf" {
            *v = "forged".into();
        }
    }
    let file = b"code,style,color,size,wholesale_price,msrp\nF-1,Forged,Red,M,1,1\n";
    let r = post_file(
        &s,
        "/admin/catalog/import",
        &cookie,
        &hidden,
        ("file", "f.csv", file),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert_eq!(sku_count(&db).await, before);

    let edit = format!("/admin/catalog/{}", kestrel_m());
    let body = crate::admin_page::form(&[
        ("csrf", "forged"),
        ("key", "k-forged"),
        ("code", "X"),
        ("wholesale_price", "1"),
        ("msrp", "1"),
        ("active", "true"),
    ]);
    let r = post_form(&s, &edit, Some(&cookie), body).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert_eq!(kestrel_prices(&db).await.0, 4200);

    // Signed out: to the sign-in form, nothing read.
    let r = post_file(
        &s,
        "/admin/catalog/import",
        "hf_admin=nope",
        &hidden,
        ("file", "f.csv", file),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location.as_deref(), Some("/admin/login"));
}
