//! Prices, codes and active flags on the desk against the real server (API.md
//! v1.1): price lists mirrored from the pull feed; a pending line priced as
//! the server will price it (the customer's list, else wholesale) and the
//! order's total over the lines; the server's price once it lands, with a
//! difference kept beside it across a restart; SKU search by code;
//! discontinued SKUs and inactive customers refused before queueing while
//! their existing orders and lines keep working.

mod support;

use std::sync::Arc;

use holdfast_client::token::MemoryTokens;
use holdfast_client::view::{LinePrice, OrderView};
use holdfast_client::{Engine, Error, NewOrder};
use holdfast_protocol::model::OrderHeaderSet;
use serde_json::json;
use sqlx::PgPool;
use support::*;
use uuid::Uuid;

/// What the desk's SKU search prices `sku` at for `customer`.
fn customer_price(desk: &Engine, customer: Uuid, sku: Uuid) -> Option<i64> {
    desk.skus_for("", 1000, Some(customer))
        .expect("search")
        .into_iter()
        .find(|s| s.sku.id == sku)
        .and_then(|s| s.customer_price)
}

fn price_of(view: &OrderView, line: Uuid) -> (i64, LinePrice) {
    let i = view
        .order
        .lines
        .iter()
        .position(|l| l.id == line)
        .expect("the line is on the order");
    (view.order.lines[i].unit_price, view.line_prices[i].clone())
}

#[sqlx::test(migrations = "../migrations")]
async fn a_pending_line_shows_the_expected_price_then_the_servers_and_a_difference_stays(
    db: PgPool,
) {
    let server = Server::start(db).await;
    let admin = Admin::new(&server).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = Arc::new(MemoryTokens::default());
    let desk = open_with(dir.path(), "dana", fast_config(), tokens.clone());
    login(&desk, &server.url(), "dana@acme.test").await;
    let skus = roomy_skus(&desk, 10, 2);
    let (listed, unlisted) = (skus[0], skus[1]);
    let wholesale = |id| {
        desk.sku(id)
            .expect("sku")
            .expect("mirrored")
            .sku
            .wholesale_price
    };
    let (listed_wholesale, unlisted_wholesale) = (wholesale(listed), wholesale(unlisted));
    let list_price = listed_wholesale - 600;
    let list = admin.price_list(&[(listed, list_price)]).await;
    let customer = admin.customer(Some(list)).await;
    // Until the list and the customer are mirrored (one pull may stop short
    // of a commit that just answered: the feed's fence waits for older
    // transactions).
    sync_until(&desk, |d| {
        customer_price(d, customer, listed) == Some(list_price)
    })
    .await;
    // The search prices SKUs for the customer an order is being typed for.
    assert_eq!(customer_price(&desk, customer, listed), Some(list_price));
    assert_eq!(
        customer_price(&desk, customer, unlisted),
        Some(unlisted_wholesale)
    );

    // Pending: the desk's expectation, from the mirrored price list.
    let order = desk
        .create_order(NewOrder {
            customer_id: customer,
            ..Default::default()
        })
        .expect("create");
    let a = desk.add_line(order, listed, 3).expect("line on the list");
    let b = desk
        .add_line(order, unlisted, 2)
        .expect("line off the list");
    let view = desk.order(order).expect("view").expect("order");
    let (price_a, how_a) = price_of(&view, a);
    let (price_b, how_b) = price_of(&view, b);
    assert_eq!(price_a, list_price, "the customer's list price");
    assert_eq!(price_b, unlisted_wholesale, "not on the list: wholesale");
    assert!(!how_a.priced_by_server && !how_b.priced_by_server);
    assert_eq!(how_a.expected, Some(list_price));
    assert_eq!(view.order.total, 3 * list_price + 2 * unlisted_wholesale);

    // Landed: the server's prices and total, which agree here.
    desk.sync_once().await.expect("push");
    let reader = server.token("priya@acme.test").await;
    let doc = server.order(&reader, order).await;
    let view = desk.order(order).expect("view").expect("order");
    assert!(view.pending.is_empty());
    assert_eq!(view.order.total, doc.total, "the server's total");
    assert_eq!(doc.total, 3 * list_price + 2 * unlisted_wholesale);
    let (price_a, how_a) = price_of(&view, a);
    assert_eq!(
        (price_a, how_a.priced_by_server, how_a.expected),
        (list_price, true, Some(list_price))
    );

    // The list changes on the server while a new line waits on the desk:
    // the server prices it at the new price, and the desk keeps what it
    // showed the user beside that.
    let c = desk.add_line(order, listed, 1).expect("another line");
    let (shown, _) = price_of(&desk.order(order).expect("view").expect("order"), c);
    assert_eq!(shown, list_price);
    let new_price = list_price + 600;
    admin.set_prices(list, &[(listed, new_price)]).await;
    desk.push().await.expect("push before any pull");
    let view = desk.order(order).expect("view").expect("order");
    let (price_c, how_c) = price_of(&view, c);
    assert_eq!(price_c, new_price, "the server's price is shown");
    assert_eq!(how_c.expected, Some(list_price), "and what the user saw");
    assert!(how_c.priced_by_server);
    assert_eq!(
        view.order.total,
        server.order(&reader, order).await.total,
        "the total is the server's"
    );

    // A restart keeps both.
    drop(desk);
    let desk = open_with(dir.path(), "dana", fast_config(), tokens);
    let (price_c, how_c) = price_of(&desk.order(order).expect("view").expect("order"), c);
    assert_eq!((price_c, how_c.expected), (new_price, Some(list_price)));

    // The changed list reaches the desk by the pull (perhaps not the first:
    // the feed's fence waits for older transactions): a new line expects it.
    sync_until(&desk, |d| {
        customer_price(d, customer, listed) == Some(new_price)
    })
    .await;
    let d = desk.add_line(order, listed, 1).expect("line");
    let (price_d, _) = price_of(&desk.order(order).expect("view").expect("order"), d);
    assert_eq!(price_d, new_price);
    assert_eq!(desk.order_summaries().expect("desk")[0].order.total, {
        let v = desk.order(order).expect("view").expect("order");
        v.order.total
    });
}

#[sqlx::test(migrations = "../migrations")]
async fn codes_discontinued_skus_and_inactive_customers(db: PgPool) {
    let server = Server::start(db).await;
    let admin = Admin::new(&server).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = open(dir.path(), "dana", fast_config());
    login(&desk, &server.url(), "dana@acme.test").await;
    let skus = roomy_skus(&desk, 10, 2);
    let (kept, dropped) = (skus[0], skus[1]);
    let customer = admin.customer(None).await;
    desk.sync_once().await.expect("pull");

    // An order with a line of the SKU that is about to be discontinued.
    let order = desk
        .create_order(NewOrder {
            customer_id: customer,
            ..Default::default()
        })
        .expect("create");
    let old_line = desk.add_line(order, dropped, 2).expect("line");
    desk.sync_once().await.expect("push");

    let code = format!("ZZ-{}", &Uuid::now_v7().simple().to_string()[20..]);
    admin.patch_sku(kept, json!({ "code": code })).await;
    admin.patch_sku(dropped, json!({ "active": false })).await;
    admin
        .patch_customer(customer, json!({ "active": false }))
        .await;
    // Until all three are mirrored: one pull may stop short of a commit
    // that has just answered (the feed's fence waits for older ones).
    sync_until(&desk, |d| {
        let customer_inactive = d
            .customers()
            .expect("customers")
            .iter()
            .any(|c| c.id == customer && !c.active);
        let sku = |id| d.sku(id).expect("sku").expect("mirrored").sku;
        customer_inactive && !sku(dropped).active && sku(kept).code.as_deref() == Some(&code)
    })
    .await;

    // Search by the tenant's code, in any case.
    let found = desk.skus(&code.to_lowercase(), 10).expect("search");
    assert_eq!(
        found.iter().map(|s| s.sku.id).collect::<Vec<_>>(),
        vec![kept],
        "the code finds its SKU"
    );
    let gone = desk.sku(dropped).expect("sku").expect("mirrored");
    assert!(!gone.sku.active, "the desk knows it is discontinued");

    // A discontinued SKU cannot get a new line: refused in words, nothing queued.
    let before = desk.pending_rows().expect("rows").len();
    match desk.add_line(order, dropped, 1) {
        Err(Error::Invalid(msg)) => assert!(msg.contains("discontinued"), "{msg}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // An inactive customer takes no new order (nor an order moved to it).
    match desk.create_order(NewOrder {
        customer_id: customer,
        ..Default::default()
    }) {
        Err(Error::Invalid(msg)) => assert!(msg.contains("inactive"), "{msg}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let other_order = desk
        .create_order(NewOrder {
            customer_id: tokyo(),
            ..Default::default()
        })
        .expect("an active customer");
    match desk.edit_order(
        other_order,
        OrderHeaderSet {
            customer_id: Some(customer),
            ..Default::default()
        },
    ) {
        Err(Error::Invalid(msg)) => assert!(msg.contains("inactive"), "{msg}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(desk.pending_rows().expect("rows").len(), before + 1);

    // The existing order of the inactive customer and its line of the
    // discontinued SKU keep working, through the server too.
    desk.change_line(order, old_line, 3)
        .expect("change the old line");
    desk.add_line(order, kept, 1).expect("an active SKU");
    desk.edit_order(
        order,
        OrderHeaderSet {
            notes: Some(Some("still open".into())),
            ..Default::default()
        },
    )
    .expect("edit");
    desk.sync_once().await.expect("push");
    let status = desk.status().expect("status");
    assert_eq!((status.pending, status.rejections), (0, 0), "all accepted");
    let view = desk.order(order).expect("view").expect("order");
    assert_eq!(view.order.lines.len(), 2);
    assert_eq!(view.order.notes.as_deref(), Some("still open"));
}

/// Issue 14: a reorder copies an order into a new draft in one act of the
/// user's: same customer and lines (today's prices, no allocation, no PO),
/// a discontinued SKU left out and named; the copy lands on the server.
#[sqlx::test(migrations = "../migrations")]
async fn a_reorder_copies_the_lines_at_todays_prices_and_names_what_it_left_out(db: PgPool) {
    let server = Server::start(db).await;
    let admin = Admin::new(&server).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = open(dir.path(), "dana", fast_config());
    login(&desk, &server.url(), "dana@acme.test").await;
    let skus = roomy_skus(&desk, 10, 3);
    // A customer on wholesale prices, so a wholesale change shows.
    let customer = admin.customer(None).await;
    sync_until(&desk, |d| {
        d.customers()
            .expect("customers")
            .iter()
            .any(|c| c.id == customer)
    })
    .await;
    let order = desk
        .create_order(NewOrder {
            customer_id: customer,
            customer_po: Some("TK-100".into()),
            ..Default::default()
        })
        .expect("create");
    let first = desk.add_line(order, skus[0], 4).expect("line");
    desk.add_line(order, skus[1], 2).expect("line");
    desk.add_line(order, skus[2], 1).expect("line");
    desk.allocate(order, first, 4).expect("allocate");
    desk.sync_once().await.expect("push");

    let wholesale = desk
        .sku(skus[0])
        .expect("sku")
        .expect("mirrored")
        .sku
        .wholesale_price;
    admin
        .patch_sku(skus[0], json!({ "wholesale_price": wholesale + 100 }))
        .await;
    admin.patch_sku(skus[2], json!({ "active": false })).await;
    let mirrored = |d: &Engine, i: usize| d.sku(skus[i]).expect("sku").expect("mirrored").sku;
    sync_until(&desk, |d| {
        mirrored(d, 0).wholesale_price == wholesale + 100 && !mirrored(d, 2).active
    })
    .await;
    let gone = mirrored(&desk, 2);

    let before = desk.pending_rows().expect("rows").len();
    let copy = desk.reorder(order).expect("reorder");
    assert_ne!(copy.order_id, order);
    assert_eq!(
        copy.skipped,
        vec![format!("{} · {} · {}", gone.style, gone.color, gone.size)]
    );
    assert_eq!(
        desk.pending_rows().expect("rows").len(),
        before + 3,
        "create + 2 lines"
    );
    desk.sync_once().await.expect("push the copy");
    assert_eq!(desk.status().expect("status").pending, 0);

    let token = server.token("dana@acme.test").await;
    let served = server.order(&token, copy.order_id).await;
    assert_eq!(served.customer_id, customer);
    assert_eq!(served.customer_po, None);
    let lines: Vec<(Uuid, i64, i64)> = served
        .lines
        .iter()
        .map(|l| (l.sku_id, l.qty_ordered, l.qty_allocated))
        .collect();
    assert_eq!(lines, vec![(skus[0], 4, 0), (skus[1], 2, 0)]);
    assert_eq!(served.lines[0].unit_price, wholesale + 100, "today's price");
    // An order the desk does not know is refused, nothing queued.
    assert!(matches!(
        desk.reorder(Uuid::now_v7()),
        Err(Error::NotFound(_))
    ));
    assert_eq!(desk.status().expect("status").pending, 0);
}
